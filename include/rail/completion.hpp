// Completion: the outcome of a job whose handler returned before its work was done (an async
// call to a network service), delivered later from any thread.
//
//   emails.process({.concurrency = 2, .max_pending = 1000}, [&](rail::Job<Email>& job) {
//     return job.defer([&](rail::Completion c) {
//       http.post_async(job.data(), [c = std::move(c)](Response r) mutable {
//         c.complete(r.ok() ? rail::Outcome::done() : rail::Outcome::retry(r.status_text()));
//       });
//     });
//   });
//
// Job::defer(start) hands the delivery to a Completion: its lease (which keeps running: a job whose
// completion does not come in time is delivered again, as any other), its downstream permit
// (a downstream's concurrency counts jobs in flight, not threads) and its outcome. The worker
// thread is free as soon as the handler returns. A job whose completion is pending counts as
// active (counts(), wait_idle(), the shutdown report's still-running jobs).
//
// Exactly one outcome per Completion counts, and only while its delivery does: complete() after
// the lease lapsed or after a cancel is fenced like a late handler outcome (it returns false;
// a cancelled job ends cancelled). A Completion destroyed without complete() fails the attempt
// (retry, "completion dropped without an outcome"), so a lost callback cannot strand a job.
//
// Lifetime: a Completion may outlive its engine. Once the engine is destroyed complete() does
// nothing and returns false (the engine's shutdown report named the job as still running).
// Threading: one thread at a time per Completion (it is a move-only value, like a promise);
// different Completions complete concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <stop_token>
#include <typeindex>
#include <typeinfo>

#include "rail/clock.hpp"
#include "rail/event.hpp"
#include "rail/outcome.hpp"
#include "rail/result.hpp"

namespace rail {

namespace detail {
class AsyncDelivery;
class CompletionHub;
class Completions;
}  // namespace detail

class Completion {
 public:
  /// An empty Completion: complete() returns false.
  Completion() noexcept = default;
  Completion(Completion&& other) noexcept;
  Completion& operator=(Completion&& other) noexcept;
  Completion(const Completion&) = delete;
  Completion& operator=(const Completion&) = delete;
  /// Completing nothing fails the attempt: see the header.
  ~Completion();

  /// True until complete() (or a move) used it up.
  explicit operator bool() const noexcept { return hub_ != nullptr; }
  /// id() is the job's id (0 for an empty Completion).
  [[nodiscard]] JobId id() const noexcept { return id_; }

  /// complete(outcome) applies the attempt's outcome as if the handler had returned it: done,
  /// retry, retry_in, fail, discard or pushback. Returns true if it counted; false if the delivery
  /// no longer counts (lease lapsed, job cancelled: the job ends cancelled) or the engine is gone.
  /// Leaves the Completion empty. On a queue with a result type, complete with a Result<R>.
  bool complete(Outcome outcome) { return complete_as(std::move(outcome), typeid(void)); }
  /// complete(result): a queue with result type R (Engine::declare_queue<T, R>) completes with an R
  /// or an Outcome wrapped in rail::Result<R>. An R that is not the queue's result type fails the
  /// job permanently (the DLQ entry names both types).
  template <class R>
  bool complete(Result<R> result) {
    return complete_as(std::move(result).take(), typeid(R));
  }

  /// cancelled(): the delivery no longer counts (cancel() or a lapsed lease), as
  /// Job::cancelled(); also true for an empty Completion or once the engine is gone.
  [[nodiscard]] bool cancelled() const noexcept;
  /// stop_token(): the delivery's stop request, as Job::stop_token; stopped for an empty
  /// Completion and once the engine is gone.
  [[nodiscard]] std::stop_token stop_token() const;
  /// extend_lease(d): renews the lease to end d from now, as Job::extend_lease: the heartbeat
  /// of a long call. False if the lease had lapsed, the Completion is empty or the engine gone.
  bool extend_lease(Duration d) noexcept;

 private:
  friend class detail::Completions;
  friend class detail::AsyncDelivery;  // a coroutine's outcome, typed as its co_return was
  Completion(std::shared_ptr<detail::CompletionHub> hub, std::uint32_t record, JobId id) noexcept
      : hub_(std::move(hub)), record_(record), id_(id) {}
  bool complete_as(Outcome&& outcome, std::type_index result_type);

  std::shared_ptr<detail::CompletionHub> hub_;
  std::uint32_t record_ = 0;  // the queue's pending record (detail/pending_jobs.hpp)
  JobId id_ = 0;
};

}  // namespace rail
