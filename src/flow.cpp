// Flow: a graph of jobs added in one call. Contract: include/rail/flow.hpp.
#include "rail/flow.hpp"

#include <algorithm>

#include "rail/error.hpp"

namespace rail {

std::string Flow::describe(std::size_t node) const {
  return "'" + steps_[node].name + "' (node " + std::to_string(node) + ", queue '" +
         steps_[node].queue + "')";
}

Flow& Flow::after(Node parent, Node child, ChildFailure on_failure) {
  const auto refuse = [](const std::string& what) {
    throw Error(ErrorCode::invalid_option, "Flow::after: " + what);
  };
  if (parent.index >= steps_.size() || child.index >= steps_.size())
    refuse("node " + std::to_string(std::max(parent.index, child.index)) +
           " is not a node of this flow (it has " + std::to_string(steps_.size()) +
           "); expected nodes that this flow's job() returned");
  if (parent.index == child.index)
    refuse(describe(parent.index) + " cannot wait for itself; expected two different nodes");
  std::vector<Edge>& kids = steps_[parent.index].children;
  if (std::any_of(kids.begin(), kids.end(), [&](const Edge& e) { return e.child == child.index; }))
    refuse(describe(parent.index) + " already waits for " + describe(child.index) +
           "; expected each edge once");
  kids.push_back(Edge{child.index, on_failure});
  return *this;
}

std::vector<std::size_t> Flow::order() const {
  // Depth-first, children first: 0 unseen, 1 on the path, 2 done. A child met on the path closes
  // a cycle, which the path names. Iterative, so a deep chain cannot overflow the stack.
  const std::size_t n = steps_.size();
  std::vector<std::uint8_t> mark(n, 0);
  std::vector<std::size_t> out;
  out.reserve(n);
  std::vector<std::pair<std::size_t, std::size_t>> path;  // (node, next child to visit)
  for (std::size_t root = 0; root < n; ++root) {
    if (mark[root] != 0) continue;
    path.emplace_back(root, 0);
    mark[root] = 1;
    while (!path.empty()) {
      auto& [node, next] = path.back();
      if (next == steps_[node].children.size()) {
        mark[node] = 2;
        out.push_back(node);
        path.pop_back();
        continue;
      }
      const std::size_t child = steps_[node].children[next++].child;
      if (mark[child] == 2) continue;
      if (mark[child] == 1) {
        std::string cycle;
        auto at =
            std::find_if(path.begin(), path.end(), [&](const auto& p) { return p.first == child; });
        for (; at != path.end(); ++at)
          cycle.append(describe(at->first)).append(" waits for ");
        cycle.append(describe(child));
        throw Error(ErrorCode::invalid_option,
                    "Flow::add: the flow has a cycle: " + cycle +
                        "; expected a graph without cycles (nothing was added)");
      }
      mark[child] = 1;
      path.emplace_back(child, 0);
    }
  }
  return out;
}

std::vector<JobId> Flow::add() {
  if (added_)
    throw Error(ErrorCode::invalid_option,
                "Flow::add: this flow was added already; expected one add() per flow");
  const std::vector<std::size_t> sequence = order();
  added_ = true;
  std::vector<Dependency> made(steps_.size(), Dependency(JobId{0}));
  std::vector<std::size_t>& done = added_order_;
  done.reserve(sequence.size());
  const auto undo = [&] { (void)cancel(); };
  for (const std::size_t node : sequence) {
    Step& step = steps_[node];
    JobOptions o = step.options;
    for (const Edge& e : step.children) {
      Dependency d = made[e.child];
      d.on_failure = e.on_failure;
      o.after.push_back(std::move(d));
    }
    std::pair<AddReceipt, Dependency> r{{}, Dependency(JobId{0})};
    try {
      r = step.add(o);
    } catch (...) {
      undo();
      throw;
    }
    const AddStatus st = r.first.status;
    if (st != AddStatus::added && st != AddStatus::duplicate && st != AddStatus::debounced &&
        st != AddStatus::dead_lettered) {
      undo();
      throw Error(st == AddStatus::shutting_down ? ErrorCode::shutting_down : ErrorCode::capacity,
                  "Flow::add: " + describe(node) + " was not added: " + std::string(to_string(st)) +
                      "; the flow's jobs added before it were cancelled");
    }
    step.id = r.first.id;
    made[node] = std::move(r.second);
    // A duplicate merged into someone else's job: not the flow's to cancel.
    if (st == AddStatus::added) done.push_back(node);
  }
  std::vector<JobId> ids;
  ids.reserve(steps_.size());
  for (const Step& s : steps_)
    ids.push_back(s.id);
  return ids;
}

JobId Flow::id(Node node) const {
  return node.index < steps_.size() ? steps_[node.index].id : 0;
}

std::size_t Flow::cancel() {
  // Parents first (added last): a child cancelled first would fail its waiting parent into the
  // DLQ instead.
  std::size_t n = 0;
  for (auto it = added_order_.rbegin(); it != added_order_.rend(); ++it)
    if (steps_[*it].cancel(steps_[*it].id)) ++n;
  return n;
}

}  // namespace rail
