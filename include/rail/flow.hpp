// Flow: jobs and the dependencies between them, added in one call (BullMQ's FlowProducer, for
// graphs rather than trees): each node is a job on any queue of one engine; after(parent, child)
// makes the parent wait for the child (JobOptions::after). A child may have several parents.
//
// Contract: add() refuses a cycle with Error(invalid_option) naming it, before anything is
// added. It then adds every child before its parents, each parent naming its children's handles
// (dependency.hpp), so their ends and results reach it however early they end. A node whose add
// names no job (full, dedup_full, kept, shutting_down) or throws stops the flow: the jobs added
// before it are cancelled (one already running runs on; its parents are cancelled with the
// rest) and add() throws Error (capacity, or shutting_down) naming the node, or rethrows.
// Cancelling one parent leaves its children as they are (they may have other parents, and be
// under way); cancel() cancels every job the flow added that has not ended (not a job a node's
// duplicate merged into).
// Threading: a Flow is built and added by one thread; add() once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rail/add_receipt.hpp"
#include "rail/dependency.hpp"
#include "rail/job_handle.hpp"
#include "rail/options.hpp"
#include "rail/queue.hpp"

namespace rail {

class Flow {
 public:
  /// Node: one job of this flow (job()'s result), to name in after() and ids().
  struct Node {
    std::size_t index = 0;
  };

  /// job(queue, name, data[, options]): a node: job `name` with `data` on `queue`, added by
  /// add() with `options` (plus the node's children in options.after).
  template <class T, class R>
  Node job(Queue<T, R>& queue, std::string_view name, T data, JobOptions options = {}) {
    Step step;
    step.name = std::string(name);
    step.queue = std::string(queue.name());
    step.options = std::move(options);
    step.add = [&queue, name = step.name, data = std::move(data)](
                   const JobOptions& o) mutable -> std::pair<AddReceipt, Dependency> {
      JobHandle<R> h = queue.add_tracked(name, std::move(data), o);
      return {h.added(), Dependency(h)};
    };
    step.cancel = [&queue](JobId id) { return queue.cancel(id); };
    steps_.push_back(std::move(step));
    return Node{steps_.size() - 1};
  }

  /// after(parent, child[, on_failure]): parent waits for child. Error(invalid_option) for a
  /// node of another flow, a node waiting for itself, or an edge named twice.
  Flow& after(Node parent, Node child, ChildFailure on_failure = ChildFailure::fail);

  /// add(): adds the flow's jobs, children first (see the header); their ids, by node index.
  /// Error(invalid_option) for a cycle or a second call.
  std::vector<JobId> add();

  /// id(node): the job id of `node` once add() returned (0 before).
  [[nodiscard]] JobId id(Node node) const;
  /// cancel(): cancels every job of the flow that has not ended (Queue::cancel); how many were.
  std::size_t cancel();

 private:
  struct Edge {
    std::size_t child;
    ChildFailure on_failure;
  };
  struct Step {
    std::string name;
    std::string queue;
    JobOptions options;
    std::function<std::pair<AddReceipt, Dependency>(const JobOptions&)> add;
    std::function<bool(JobId)> cancel;
    std::vector<Edge> children;
    JobId id = 0;
  };
  /// order(): every node, children before parents; Error(invalid_option) naming a cycle.
  [[nodiscard]] std::vector<std::size_t> order() const;
  [[nodiscard]] std::string describe(std::size_t node) const;

  std::vector<Step> steps_;
  std::vector<std::size_t> added_order_;  // the nodes add() added, in that order
  bool added_ = false;
};

}  // namespace rail
