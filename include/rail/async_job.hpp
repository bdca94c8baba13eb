// AsyncJob<T>: what a coroutine handler (rail/task.hpp) sees of its job. Job<T> is a view that
// dies when the handler call returns; a coroutine outlives that call at its first co_await, so
// it gets an AsyncJob instead, by value: it owns the delivery's Completion (Job::defer), and the
// Completion pins the job's slot, so data() and the fields below stay valid across every
// co_await until the coroutine ends. The coroutine's co_return (or a throw) completes it.
//
// Take it by value: a coroutine keeps its by-value parameters in its frame, and a reference
// parameter would outlive the temporary it names. A `const AsyncJob<T>&` does not compile
// (Queue::process rejects it) and a plain `AsyncJob<T>&` cannot bind; do not write `&&`.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "rail/clock.hpp"
#include "rail/completion.hpp"
#include "rail/event.hpp"
#include "rail/job.hpp"
#include "rail/outcome.hpp"
#include "rail/result.hpp"

namespace rail {

namespace detail {
/// AsyncDelivery: the part of an AsyncJob<T> that does not depend on T, where a Task's promise
/// finds the Completion it completes (task.hpp).
class AsyncDelivery {
 public:
  AsyncDelivery(AsyncDelivery&&) noexcept = default;
  AsyncDelivery& operator=(AsyncDelivery&&) noexcept = default;
  AsyncDelivery(const AsyncDelivery&) = delete;
  AsyncDelivery& operator=(const AsyncDelivery&) = delete;
  ~AsyncDelivery() = default;

  /// finish(outcome): the coroutine's outcome, once; true if it counted (see Completion).
  bool finish(Outcome outcome) { return completion_.complete(std::move(outcome)); }
  template <class R>
  bool finish(Result<R> result) {
    return completion_.complete(std::move(result));
  }

 protected:
  explicit AsyncDelivery(Completion completion) noexcept : completion_(std::move(completion)) {}
  Completion completion_;
};
}  // namespace detail

/// The job's facts (id(), name(), attempt(), deliveries(), ...) are Job<T>'s, copied: valid
/// until the coroutine ends.
template <class T>
class AsyncJob : public detail::AsyncDelivery, public detail::JobFacts {
 public:
  /// AsyncJob(job) takes over job's delivery (Job::defer: the queue's WorkerOptions::max_pending
  /// bounds how many are in flight; beyond it this throws Error(capacity), a failed attempt).
  explicit AsyncJob(Job<T>& job)
      : AsyncDelivery(job.defer()),
        detail::JobFacts(static_cast<const detail::JobFacts&>(job)),
        data_(&job.data()),
        last_error_copy_(job.last_error()) {}

  /// data() is the payload, as Job<T>'s: the Completion pins the job's slot.
  [[nodiscard]] const T& data() const noexcept { return *data_; }
  /// last_error(): a copy, since a later delivery of the job may add to the slot's errors.
  [[nodiscard]] std::string_view last_error() const noexcept { return last_error_copy_; }

  /// cancelled(): this delivery no longer counts (cancel(), a lapsed lease, or the coroutine
  /// already ended it): poll it after each co_await of a long call and co_return early.
  [[nodiscard]] bool cancelled() const noexcept { return completion_.cancelled(); }
  /// extend_lease(d): the heartbeat of a long call (Completion::extend_lease).
  bool extend_lease(Duration d) noexcept { return completion_.extend_lease(d); }

 private:
  const T* data_;
  std::string last_error_copy_;
};

}  // namespace rail
