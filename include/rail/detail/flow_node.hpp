// FlowNode: a parent job's dependency record (JobOptions::after): its children's ends as they
// come, and the one decision they lead to: release the parent when the last one ended, or apply
// a failed child's ChildFailure at once (dead-letter the parent, or cancel it).
//
// Contract: make() resolves each dependency to its child's queue and end (an id no queue of the
// engine knows is refused), before the parent takes a slot's place; the parent's add binds the
// node to its slot (SlotRare::parent keeps it, for Job::children()), publishes the parent parked
// and marked waiting_children, then calls watch(), which registers one end callback per child.
// A child's end is recorded once (its waiter resolves once); the decision is taken once, under
// the node's lock, by the end that completes it; the action on the parent runs after the lock is
// released and outside the wheel (EngineCore::after_wheel), through JobControl, which validates
// the parent's slot (its id, its state, the mark): a parent that ended meanwhile (cancelled,
// expired, taken at shutdown) is left alone. An end with status unknown decides nothing: the
// engine is going (its destructor resolves waiters so) or the job was left unstarted by shutdown,
// and the parent is reported as waiting for its children.
// Memory: per edge, the child's end (a JobEnd without its strings until it ended) and, until the
// child ends, its watch (the child's EndWaiter and one callback): dropped as each child ends.
// Threading: child ends arrive on any thread (the one that ended the child); children() from the
// parent's handler (or any thread). One mutex per node, held for a few stores per call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "rail/child_end.hpp"
#include "rail/dependency.hpp"
#include "rail/job_end.hpp"

namespace rail::detail {

class JobFlow;
class JobWatch;

class FlowNode : public std::enable_shared_from_this<FlowNode> {
 public:
  /// make(parent, after): the record of a parent about to be added to `parent` waiting for
  /// `after` (validated by the caller: ids non-zero and distinct). Throws Error(invalid_option)
  /// for a child no queue of the engine knows, or one of another engine.
  static std::shared_ptr<FlowNode> make(JobFlow& parent, const std::vector<Dependency>& after);

  /// bind(idx, id): the parent is job `id` in slot idx of its queue (before it is published).
  void bind(std::uint32_t idx, JobId id) noexcept {
    idx_ = idx;
    id_ = id;
  }
  /// watch(): after the parent is published, hear of each child's end (at once for a child that
  /// has ended). A registration that fails (no memory) fails the parent, as a child would.
  void watch() noexcept;
  /// children(): each child's end so far, in the order of JobOptions::after.
  [[nodiscard]] std::vector<ChildEnd> children() const;

  struct Edge;
  FlowNode(JobFlow& parent, std::vector<Edge> edges) noexcept;
  ~FlowNode();
  FlowNode(const FlowNode&) = delete;
  FlowNode& operator=(const FlowNode&) = delete;

 private:
  enum class Decision : std::uint8_t { none, release, fail, cancel };
  /// ended(i, end): child i ended; decides, then acts (see the header).
  void ended(std::size_t i, const JobEnd<void>& end);
  /// act(decision, why): the decision's action on the parent, outside the wheel.
  void act(Decision decision, std::string why) noexcept;
  /// fail_unwatched(i): child i's end cannot be heard of (no memory): the parent fails.
  void fail_unwatched(std::size_t i) noexcept;

  JobFlow& parent_;
  std::uint32_t idx_ = 0;
  JobId id_ = 0;
  mutable std::mutex mu_;
  std::vector<Edge> edges_;  // under mu_
  std::size_t left_;         // children not ended yet; under mu_
  bool decided_ = false;     // under mu_: the parent was released, failed or cancelled
};

}  // namespace rail::detail
