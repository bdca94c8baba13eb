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
// It is Job::defer() and a Completion (completion.hpp) written as a coroutine: the handler's
// call hands the delivery to the AsyncJob (async_job.hpp) and returns to the worker at the first
// co_await that suspends; whoever resumes the coroutine (the client's I/O thread) runs it on, and
// its co_return completes the job, from that thread. Everything a Completion promises holds:
// the lease keeps running (a coroutine suspended past it is delivered again and its co_return
// is fenced), a downstream's concurrency counts the coroutines in flight, the queue's
// WorkerOptions::max_pending bounds them (process() refuses a coroutine handler without it), and
// a throw is a failed attempt as from a synchronous handler (an UnrecoverableError fails the job
// permanently, anything else is retried).
//
// co_return an Outcome, or a rail::Result<R> on a queue with result type R. A coroutine that
// never resumes never completes: its lease lapses and the job is delivered again, as SQS does
// with a consumer that went silent; its frame is not freed (nothing owns a suspended coroutine
// but whoever will resume it).
// Cost: a coroutine frame per delivery (the compiler cannot elide an allocation that outlives
// the call) and a pending record; the hot path of synchronous handlers is unchanged.
#pragma once

#include <coroutine>
#include <exception>
#include <type_traits>
#include <utility>

#include "rail/async_job.hpp"
#include "rail/detail/handler_failure.hpp"
#include "rail/outcome.hpp"
#include "rail/result.hpp"

namespace rail {

class Task {
 public:
  // The frame runs eagerly (no initial suspend) and frees itself at its end (no final suspend):
  // nothing waits on a Task, its outcome goes to the job's Completion, so the Task object the
  // handler returns carries nothing.
  class promise_type {
   public:
    /// The promise finds the coroutine's AsyncJob among its parameters (the frame's copies,
    /// which live until the frame is freed, after the promise's last use).
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
    std::suspend_never final_suspend() noexcept { return {}; }

    void return_value(Outcome outcome) { delivery_->finish(std::move(outcome)); }
    template <class R>
    void return_value(Result<R> result) {
      delivery_->finish(std::move(result));
    }
    /// A throw is the attempt's failure. If even building that outcome fails (out of memory),
    /// the frame's AsyncJob is destroyed uncompleted, which fails the attempt all the same.
    void unhandled_exception() noexcept {
      try {
        delivery_->finish(detail::handler_failure(std::current_exception()));
      } catch (...) {  // NOLINT(bugprone-empty-catch): the dropped Completion reports it
      }
    }

   private:
    template <class A>
    void find(A& a) noexcept {
      if constexpr (std::is_base_of_v<detail::AsyncDelivery, A>) delivery_ = &a;
    }
    detail::AsyncDelivery* delivery_ = nullptr;
  };

 private:
  Task() noexcept = default;
};

}  // namespace rail
