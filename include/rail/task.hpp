// Task: the return type of a coroutine handler, one that co_awaits its own async work (an HTTP
// client's awaitable, a gRPC completion) instead of holding a worker thread for the call:
//
//   payments.process({.concurrency = 2, .max_pending = 1000},
//                    [&](rail::AsyncJob<Charge> job) -> rail::Task {
//                      const Reply r = co_await gateway.charge(job.data());
//                      if (r.status == 429) co_return rail::Outcome::pushback(r.retry_after);
//                      co_return r.ok ? rail::Outcome::done() : rail::Outcome::retry(r.text);
//                    });
//
// It is Job::defer(start) and a Completion (completion.hpp) written as a coroutine: the handler's
// call hands the delivery to the AsyncJob (async_job.hpp) and returns to the worker at the first
// co_await that suspends; whoever resumes the coroutine (the client's I/O thread) runs it on, and
// its co_return completes the job, from that thread, once the coroutine's locals are destroyed
// and its frame is freed (nothing of it runs after the job may have ended). Everything a
// Completion promises holds:
// the lease keeps running (a coroutine suspended past it is delivered again and its co_return
// is fenced), a downstream's concurrency counts the coroutines in flight, the queue's
// WorkerOptions::max_pending bounds them (process() refuses a coroutine handler without it), and
// a throw is a failed attempt as from a synchronous handler (an UnrecoverableError fails the job
// permanently, anything else is retried).
//
// co_return an Outcome, or a rail::Result<R> on a queue with result type R (`co_return
// rail::Result<R>(r)`; falling off the end is undefined behaviour, as for any coroutine with a
// return value). An awaitable must resume or destroy the coroutine it suspends: destroying it
// drops its Completion, which fails the attempt ("completion dropped"). One that does neither
// leaks the frame and with it the delivery: its lease lapses and the job is delivered again, but
// the pending record and the slot stay held and the job counts as active for ever (wait_idle()
// waits for it), as with a Completion that is never completed nor destroyed.
// Cost: a coroutine frame per delivery (the compiler cannot elide an allocation that outlives
// the call) and a pending record; the hot path of synchronous handlers is unchanged.
#pragma once

#include <coroutine>
#include <exception>
#include <optional>
#include <type_traits>
#include <typeindex>
#include <utility>

#include "rail/async_job.hpp"
#include "rail/detail/handler_failure.hpp"
#include "rail/outcome.hpp"
#include "rail/result.hpp"

namespace rail {

class Task {
 public:
  // The frame runs eagerly (no initial suspend) and frees itself at its end: nothing waits on a
  // Task, its outcome goes to the job's Completion, so the Task object carries nothing.
  class promise_type {
   public:
    /// The promise finds the coroutine's AsyncJob among its parameters (the frame's copies,
    /// which live until the frame is freed).
    template <class... Args>
    explicit promise_type(Args&... args) noexcept {
      static_assert((std::is_base_of_v<detail::AsyncDelivery, Args> + ... + 0) == 1,
                    "a rail::Task coroutine takes exactly one rail::AsyncJob<T>, by value");
      static_assert(((std::is_base_of_v<detail::AsyncDelivery, Args> && std::is_const_v<Args>) ||
                     ...) == false,
                    "take rail::AsyncJob<T> by value: a reference outlives the handler call");
      (find(args), ...);
    }

    Task get_return_object() noexcept { return Task{}; }
    std::suspend_never initial_suspend() noexcept { return {}; }

    /// At the end the locals are gone; the Completion (and the handler's share) move out of the
    /// frame, the frame is freed, and only then is the outcome applied: once the job may have
    /// ended (wait_idle() returns, a handle's wait wakes), nothing of the coroutine runs.
    struct Finish {
      bool await_ready() const noexcept { return false; }
      void await_suspend(std::coroutine_handle<promise_type> h) noexcept {
        promise_type& p = h.promise();
        Completion c = std::move(p.delivery_->completion_);
        std::shared_ptr<const void> handler = std::move(p.delivery_->handler_);
        std::optional<Outcome> outcome = std::move(p.outcome_);
        const std::type_index type = p.type_;
        h.destroy();
        if (!outcome) return;  // no outcome could be built: `c` dropped fails the attempt
        try {
          detail::AsyncDelivery::settle(c, std::move(*outcome), type);
        } catch (...) {  // NOLINT(bugprone-empty-catch): `c`, if not used up, fails the attempt
        }
      }
      void await_resume() const noexcept {}
    };
    Finish final_suspend() noexcept { return {}; }

    void return_value(Outcome outcome) { outcome_.emplace(std::move(outcome)); }
    template <class R>
    void return_value(Result<R> result) {
      outcome_.emplace(std::move(result).take());
      type_ = typeid(R);
    }
    /// A throw is the attempt's failure. If even building that outcome fails (out of memory),
    /// there is none, and the dropped Completion fails the attempt all the same.
    void unhandled_exception() noexcept {
      try {
        outcome_.emplace(detail::handler_failure(std::current_exception()));
        type_ = typeid(void);
      } catch (...) {
        outcome_.reset();
      }
    }

   private:
    template <class A>
    void find(A& a) noexcept {
      if constexpr (std::is_base_of_v<detail::AsyncDelivery, A>) delivery_ = &a;
    }
    detail::AsyncDelivery* delivery_ = nullptr;
    std::optional<Outcome> outcome_;
    std::type_index type_{typeid(void)};
  };

 private:
  Task() noexcept = default;
};

}  // namespace rail
