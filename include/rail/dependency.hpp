// Dependency: one edge of a flow: a job (the parent) waits for another job (the child) to end
// before it may start (JobOptions::after), and what the child's failure does to the parent.
//
// Contract: a parent with dependencies is added in state waiting_children and becomes ready when
// its last child ended; a child that ended other than completed (dead-lettered, cancelled or
// discarded) applies its edge's ChildFailure at once. The parent's handler reads its children's
// ends, results included, with Job::children(). A child may have any number of parents, on any
// queue of the same engine. Named by a JobHandle (Queue::add_tracked), the child's end and result
// are certain to reach the parent; named by id, a child that ended before the parent was added
// is known by what its queue's history (or retained ends) still says: its status, and its result
// only if the queue retains ends (QueueOptions::retain).
#pragma once

#include <cstdint>
#include <memory>

#include "rail/event.hpp"

namespace rail {

template <class R>
class JobHandle;
namespace detail {
class JobWatch;
}

/// ChildFailure: what a child that ends other than completed does to its parent.
enum class ChildFailure : std::uint8_t {
  /// The parent is dead-lettered at once, unstarted, with reason dependency_failed and an error
  /// naming the child (BullMQ's failParentOnFailure); the default.
  fail,
  /// The parent runs once its other children ended too; children() shows this one's end.
  ignore,
  /// The parent is cancelled at once, unstarted.
  cancel,
};

/// Dependency: the parent waits for job `id` (JobOptions::after).
struct Dependency {
  /// Dependency(child, on_failure): child is a job id of this engine, on any queue.
  Dependency(JobId child, ChildFailure failure = ChildFailure::fail) noexcept  // NOLINT
      : id(child), on_failure(failure) {}
  /// Dependency(handle, on_failure): the child a handle tracks (Queue::add_tracked): its end and
  /// result reach the parent however early it ends.
  template <class R>
  Dependency(const JobHandle<R>& child, ChildFailure failure = ChildFailure::fail)  // NOLINT
      : id(child.id()),
        on_failure(failure),
        watch(std::make_shared<const detail::JobWatch>(child.watch_)) {}

  JobId id = 0;
  ChildFailure on_failure = ChildFailure::fail;
  /// The handle's watch, when made from one (internal: the engine reads it).
  std::shared_ptr<const detail::JobWatch> watch{};
};

}  // namespace rail
