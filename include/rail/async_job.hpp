// AsyncJob<T>: what a coroutine handler (rail/task.hpp) sees of its job. Job<T> is a view that
// dies when the handler call returns; a coroutine outlives that call at its first co_await, so
// it gets an AsyncJob instead, by value. The AsyncJob owns the delivery's Completion
// (Job::defer), which pins the job's slot, and a share of the handler itself (so the coroutine's
// captures live as long as it does): data() and the job's facts stay valid across every
// co_await until the coroutine ends, as long as the engine lives. The coroutine's co_return (or
// a throw) completes it, once its frame is gone.
//
// Take it by value: a coroutine keeps its by-value parameters in its frame, and a reference
// parameter would outlive the temporary it names. Queue::process rejects `const AsyncJob<T>&`
// and, for a lambda or function object with one call operator, `AsyncJob<T>&&`; a plain
// `AsyncJob<T>&` cannot bind.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeindex>
#include <utility>
#include <vector>

#include "rail/clock.hpp"
#include "rail/completion.hpp"
#include "rail/event.hpp"
#include "rail/job.hpp"
#include "rail/outcome.hpp"

namespace rail {

class Task;
template <class T, class R>
class Queue;

namespace detail {
/// AsyncDelivery: the part of an AsyncJob<T> that does not depend on T, which a Task's promise
/// takes over when the coroutine ends (task.hpp).
class AsyncDelivery {
 public:
  AsyncDelivery(AsyncDelivery&&) noexcept = default;
  AsyncDelivery& operator=(AsyncDelivery&&) noexcept = default;
  AsyncDelivery(const AsyncDelivery&) = delete;
  AsyncDelivery& operator=(const AsyncDelivery&) = delete;
  ~AsyncDelivery() = default;

 protected:
  AsyncDelivery(Completion completion, std::shared_ptr<const void> handler) noexcept
      : completion_(std::move(completion)), handler_(std::move(handler)) {}
  Completion completion_;

 private:
  friend class rail::Task;
  /// settle(c, outcome, type): completes c as Completion::complete(Outcome) or
  /// complete(Result<R>) would, with R's type as recorded at co_return.
  static bool settle(Completion& c, Outcome&& outcome, std::type_index result_type) {
    return c.complete_as(std::move(outcome), result_type);
  }
  std::shared_ptr<const void> handler_;  // the handler's closure: the coroutine's captures
};

/// CallParameter<&F::operator()>: the parameter of a one-argument call operator (void when
/// unknown), so process() can refuse `AsyncJob<T>&&`, which the coroutine would keep dangling.
template <class M>
struct CallParameter {
  using type = void;
};
template <class C, class R, class A>
struct CallParameter<R (C::*)(A)> {
  using type = A;
};
template <class C, class R, class A>
struct CallParameter<R (C::*)(A) const> {
  using type = A;
};
template <class C, class R, class A>
struct CallParameter<R (C::*)(A) noexcept> {
  using type = A;
};
template <class C, class R, class A>
struct CallParameter<R (C::*)(A) const noexcept> {
  using type = A;
};
template <class F>
constexpr bool takes_rvalue_reference() {
  if constexpr (requires { &F::operator(); })
    return std::is_rvalue_reference_v<typename CallParameter<decltype(&F::operator())>::type>;
  else
    return false;  // a generic lambda or an overload set: not checkable
}
}  // namespace detail

/// The job's facts (id(), attempt(), deliveries(), ...) are Job<T>'s, copied.
template <class T>
class AsyncJob : public detail::AsyncDelivery, public detail::JobFacts {
 public:
  /// data() is the payload, as Job<T>'s: the Completion pins the job's slot. The payload lives
  /// in the engine: do not read it after the engine is destroyed (cancelled() is true then).
  [[nodiscard]] const T& data() const noexcept { return *data_; }
  /// name(), queue(), last_error(): copies, valid even once the engine is gone (a later
  /// delivery of the job may also add to the slot's errors).
  [[nodiscard]] std::string_view name() const noexcept { return name_copy_; }
  [[nodiscard]] std::string_view queue() const noexcept { return queue_copy_; }
  [[nodiscard]] std::string_view last_error() const noexcept { return last_error_copy_; }

  /// cancelled(): this delivery no longer counts (cancel(), a lapsed lease, or the engine is
  /// gone): poll it after each co_await of a long call and co_return early.
  [[nodiscard]] bool cancelled() const noexcept { return completion_.cancelled(); }
  /// stop_token(): this delivery's stop request (Job::stop_token, Completion::stop_token).
  [[nodiscard]] std::stop_token stop_token() const { return completion_.stop_token(); }
  /// extend_lease(d): the heartbeat of a long call (Completion::extend_lease).
  bool extend_lease(Duration d) noexcept { return completion_.extend_lease(d); }
  /// children(): Job::children(), copied as the coroutine started (empty for a job that waited
  /// for none, at the cost of one call).
  [[nodiscard]] const std::vector<ChildEnd>& children() const noexcept { return children_; }

 private:
  template <class, class>
  friend class Queue;
  /// AsyncJob(job, handler) takes over job's delivery (Job::defer: the queue's
  /// WorkerOptions::max_pending bounds how many are in flight; beyond it this throws
  /// Error(capacity), a failed attempt) and shares the handler that runs the coroutine.
  AsyncJob(Job<T>& job, std::shared_ptr<const void> handler)
      : AsyncDelivery(detail::defer_job(*job.flow_, static_cast<detail::JobFields&>(job)),
                      std::move(handler)),
        detail::JobFacts(static_cast<const detail::JobFacts&>(job)),
        data_(&job.data()),
        name_copy_(job.name()),
        queue_copy_(job.queue()),
        last_error_copy_(job.last_error()),
        children_(job.children()) {}

  const T* data_;
  std::string name_copy_;
  std::string queue_copy_;
  std::string last_error_copy_;
  std::vector<ChildEnd> children_;
};

}  // namespace rail
