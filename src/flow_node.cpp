// FlowNode: a parent job's dependency record. Contract: include/rail/detail/flow_node.hpp.
#include "rail/detail/flow_node.hpp"

#include <functional>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "rail/detail/asymmetric_fence.hpp"
#include "rail/detail/queue_impl.hpp"
#include "rail/error.hpp"
#include "rail/job_handle.hpp"

namespace rail::detail {

struct FlowNode::Edge {
  JobId id = 0;
  // Until the child ended, how its end reaches us: a handle's watch, or (named by id) its
  // waiter, registered with its queue's tracker.
  std::shared_ptr<const JobWatch> watch;
  std::shared_ptr<EndWaiter> waiter;
  JobFlow* queue = nullptr;  // the child's
  ChildFailure on_failure = ChildFailure::fail;
  bool forgotten = false;           // it ended before we watched, and its history forgot how
  std::optional<JobEnd<void>> end;  // once it ended
};

namespace {
/// failure(edge, end): the parent's error when child `end` failed it.
std::string failure(const JobFlow& queue, const JobEnd<void>& end) {
  // The child's own error, up to kShown bytes; not a failed dependency's (which names its own
  // child in turn: a chain would repeat every error below it, growing with its depth).
  constexpr std::size_t kShown = 256;
  std::string why = "child job " + std::to_string(end.id) + " on queue '" + queue.name() + "' ";
  why.append(to_string(end.status));
  if (end.status == JobStatus::dead_lettered)
    why.append(" (").append(to_string(end.reason)).append(")");
  if (!end.error.empty() && end.reason != DeadLetterReason::dependency_failed) {
    why.append(": ").append(end.error, 0, kShown);
    if (end.error.size() > kShown) why.append("...");
  }
  return why;
}

/// run_flat(f): runs f now, on this thread, unless a run_flat is already under way further up
/// this thread's stack: then f is queued, and that one runs it after its own. A decision ends its
/// parent, which may be another parent's child whose decision comes here in turn: a chain of any
/// depth then runs in a loop, not on the stack.
void run_flat(std::function<void()> f) noexcept {
  thread_local std::vector<std::function<void()>>* queued = nullptr;
  if (queued != nullptr) {
    try {
      queued->push_back(std::move(f));
      return;
    } catch (...) {  // no memory to queue it: on the stack, then
    }
    f();
    return;
  }
  std::vector<std::function<void()>> mine;
  queued = &mine;
  f();
  while (!mine.empty()) {
    std::function<void()> next = std::move(mine.back());
    mine.pop_back();
    next();
  }
  queued = nullptr;
}
}  // namespace

std::shared_ptr<FlowNode> FlowNode::make(JobFlow& parent, const std::vector<Dependency>& after) {
  EngineCore& core = parent.core();
  std::vector<Edge> edges(after.size());
  // Children named by id: one pass over each queue's slots finds them all, whatever their
  // number; then each child's waiter is registered, and each is looked at again where it was.
  // EndTracker's hand-off: the waiter is registered (and fenced) before the look, and an end
  // marks itself decided in its slot and enters the history before it asks for waiters
  // (JobEnds::note), so an end that did not see the waiter shows in the look: decided in its
  // slot, or gone from it and in the history (which may have lost it since: a lossy table). A
  // child live in its slot, or moving out of it with its end not decided, waits for its end;
  // any other is resolved from what its slot and its queue remember.
  std::unordered_set<JobId> unplaced;
  for (const Dependency& d : after)
    if (!d.watch) unplaced.insert(d.id);
  std::unordered_map<JobId, std::pair<QueueImpl*, std::uint32_t>> where;
  for (std::size_t i = 0, n = core.queue_count(); i < n && !unplaced.empty(); ++i) {
    auto& q = static_cast<QueueImpl&>(static_cast<JobFlow&>(*core.queue_at(i)));
    for (const JobQueries::Known& k : q.queries().take_known(unplaced))
      where.emplace(k.id, std::make_pair(&q, k.slot));
  }
  for (std::size_t k = 0; k < after.size(); ++k) {
    const Dependency& d = after[k];
    Edge& e = edges[k];
    e.id = d.id;
    e.on_failure = d.on_failure;
    if (d.watch) {
      // Its queue is touched only inside a visit: a handle may outlive its engine.
      const auto visit = d.watch->waiter()->visit();
      if (!visit)
        throw Error(ErrorCode::invalid_option,
                    "JobOptions.after on queue '" + parent.name() + "' names job " +
                        std::to_string(d.id) +
                        " through a handle whose engine is gone; expected a job of this engine");
      e.queue = &QueueImpl::of(*d.watch->queue());
      if (&e.queue->core() != &core)
        throw Error(ErrorCode::invalid_option,
                    "JobOptions.after on queue '" + parent.name() + "' names job " +
                        std::to_string(d.id) + " through a handle of queue '" + e.queue->name() +
                        "' of another engine; expected a job of this queue's engine");
      e.watch = d.watch;
      continue;
    }
    const auto at = where.find(d.id);
    if (at == where.end())
      throw Error(ErrorCode::invalid_option,
                  "JobOptions.after on queue '" + parent.name() + "' names job " +
                      std::to_string(d.id) +
                      ", which no queue of this engine knows (never added, or forgotten by its "
                      "queue's history); expected the id of a job added to this engine");
    e.queue = at->second.first;
    e.waiter = at->second.first->end_tracker().watch(d.id, false, EndTracker::Fence::caller);
  }
  // One fence for all the waiters registered above, before the looks below (see above).
  if (!where.empty()) heavy_fence();
  for (Edge& e : edges) {
    // Registered before its job was published (add_tracked): its end, result included, is
    // recorded for it; the history would answer without the result.
    if (!e.waiter || e.waiter->sure()) continue;
    JobFlow& q = *e.queue;
    const std::uint32_t slot = where.at(e.id).second;
    EndKind kind = EndKind::none;
    const JobQueries::Place at =
        slot == JobQueries::kEnded ? JobQueries::Place::gone : q.queries().place(slot, e.id, &kind);
    if (at == JobQueries::Place::live || at == JobQueries::Place::moving) continue;
    EndRecord end = q.queries().ended_end(e.id);
    if (end.status == JobStatus::unknown && at == JobQueries::Place::decided) {
      end.status = status_of(kind);  // the history lost it already; its slot has not
      end.error.clear();
    }
    e.forgotten = end.status == JobStatus::unknown;
    // Taken from the tracker unless its end, on its way, took it (then that end resolves it).
    if (auto taken = q.end_tracker().take(e.id)) (void)taken->resolve(end);
  }
  return std::make_shared<FlowNode>(parent, std::move(edges));
}

FlowNode::FlowNode(JobFlow& parent, std::vector<Edge> edges) noexcept
    : parent_(parent), edges_(std::move(edges)), left_(edges_.size()) {}

FlowNode::~FlowNode() = default;

void FlowNode::watch() noexcept {
  // The watches are copied first: a child's callback (at once, for one that has ended) takes
  // the lock, and drops its edge's watch.
  std::vector<std::pair<std::shared_ptr<const JobWatch>, std::shared_ptr<EndWaiter>>> watches;
  std::shared_ptr<FlowNode> self;
  try {
    self = shared_from_this();
    const std::lock_guard lock(mu_);
    watches.reserve(edges_.size());
    for (const Edge& e : edges_)
      watches.emplace_back(e.watch, e.waiter);
  } catch (...) {
    fail_unwatched(0);
    return;
  }
  for (std::size_t i = 0; i < watches.size(); ++i) {
    try {
      auto cb = [self, i](const JobEnd<void>& end) { self->ended(i, end); };
      if (watches[i].first) {
        watches[i].first->on_end(std::move(cb));
      } else {
        watches[i].second->on_end(std::move(cb));
      }
    } catch (...) {  // no memory to hear of child i: the parent fails, as the child would
      fail_unwatched(i);
      return;
    }
  }
}

void FlowNode::fail_unwatched(std::size_t i) noexcept {
  {
    const std::lock_guard lock(mu_);
    if (decided_) return;
    decided_ = true;
  }
  std::string why;
  try {
    why = "rail could not watch child job " + std::to_string(edges_[i].id) + ": out of memory";
  } catch (...) {
  }
  act(Decision::fail, std::move(why));
}

void FlowNode::ended(std::size_t i, const JobEnd<void>& end) {
  Decision decision = Decision::none;
  std::shared_ptr<const JobWatch> dropped;  // the child's watch or waiter, let go outside the lock
  std::shared_ptr<EndWaiter> dropped_waiter;
  {
    const std::lock_guard lock(mu_);
    Edge& e = edges_[i];
    // Unknown: the engine is going, or shutdown left the child unstarted: nothing to decide.
    // Unless it ended before we watched and its history forgot how: a failure, as it may be.
    if (end.status == JobStatus::unknown && !e.forgotten) return;
    if (e.end) return;  // a waiter resolves once; defensive
    try {
      e.end = end;
    } catch (...) {  // no memory for its strings: the end without them
      JobEnd<void> bare;
      bare.id = end.id;
      bare.status = end.status;
      bare.reason = end.reason;
      bare.attempt = end.attempt;
      bare.ended_at = end.ended_at;
      e.end = std::move(bare);
    }
    dropped = std::move(e.watch);
    dropped_waiter = std::move(e.waiter);
    --left_;
    if (!decided_) {
      if (!end.completed() && e.on_failure != ChildFailure::ignore) {
        decision = e.on_failure == ChildFailure::fail ? Decision::fail : Decision::cancel;
      } else if (left_ == 0) {
        decision = Decision::release;
      }
      decided_ = decision != Decision::none;
    }
  }
  if (decision == Decision::none) return;
  std::string why;
  if (decision == Decision::fail) {
    try {
      why = failure(*edges_[i].queue, end);  // the queue is set once, at make
    } catch (...) {
    }
  }
  act(decision, std::move(why));
}

void FlowNode::act(Decision decision, std::string why) noexcept {
  JobControl& control = parent_.control();
  const std::uint32_t idx = idx_;
  const JobId id = id_;
  auto run = [&control, idx, id, decision, why = std::move(why)]() mutable noexcept {
    try {
      switch (decision) {
        case Decision::release:
          (void)control.release_parent(idx, id);
          return;
        case Decision::fail:
          (void)control.fail_parent(idx, id, std::move(why));
          return;
        case Decision::cancel:
          (void)control.cancel_parent(idx, id);
          return;
        case Decision::none:
          return;
      }
    } catch (...) {  // a payload's destructor or an observer threw: the decision stands
    }
  };
  // Not under the wheel (JobControl takes it; the end's owner may hold it): after its release.
  // Flat: the parent's end may decide for its own parents (run_flat).
  try {
    parent_.core().after_wheel([run = std::move(run)]() mutable { run_flat(std::move(run)); });
  } catch (...) {  // no memory to keep the call for later
  }
}

std::vector<ChildEnd> FlowNode::children() const {
  const std::lock_guard lock(mu_);
  std::vector<ChildEnd> out;
  out.reserve(edges_.size());
  for (const Edge& e : edges_) {
    ChildEnd c;
    if (e.end) {
      c.end = *e.end;
    } else {
      c.end.id = e.id;  // not ended (yet): status unknown
    }
    c.queue = e.queue->name();
    c.on_failure = e.on_failure;
    c.result_type = e.queue->result_type();
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace rail::detail
