// Outcome: what a handler tells the engine about one attempt. Returning is the normal path; a
// handler may also throw, which counts as Outcome::retry(e.what()), or as Outcome::fail(e.what())
// when what it throws is a rail::UnrecoverableError (unrecoverable_error.hpp).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "rail/clock.hpp"
#include "rail/error.hpp"

namespace rail {

class Outcome;
namespace detail {
class JobFlow;
/// pending_outcome(): the Outcome of a delivery handed to a Completion (Job::defer).
Outcome pending_outcome() noexcept;
}  // namespace detail
template <class R>
class Result;

class Outcome {
 public:
  enum class Kind : std::uint8_t {
    done,      // the job completed
    retry,     // the attempt failed; retry after the job's backoff if attempts remain
    retry_in,  // the attempt failed; retry after delay() (overrides backoff) if attempts remain
    fail,      // permanent failure: skip remaining attempts, dead-letter now (UnrecoverableError)
    discard,   // drop the job: it ends `discarded`, with no retry and no DLQ entry
    pushback,  // the downstream refused the call (429): retry after delay(), no attempt used
    pending,   // what Job::defer returns: the Completion delivers the outcome later
  };

  /// done() completes the job. Outcome{} is done() too.
  static Outcome done() noexcept { return Outcome{}; }
  /// retry(reason) records a failed attempt; the job's backoff decides when it runs again.
  static Outcome retry(std::string_view reason) {
    return Outcome{Kind::retry, reason, Duration{0}};
  }
  /// retry_in(delay, reason) records a failed attempt and runs the next one after `delay`
  /// instead of the job's backoff (the handler knows better: the partner's maintenance window
  /// ends in 10 minutes). A refusal that should not cost an attempt (HTTP 429) is pushback().
  static Outcome retry_in(Duration delay, std::string_view reason) {
    return Outcome{Kind::retry_in, reason, checked(delay, "retry_in")};
  }
  /// fail(reason) dead-letters the job without using its remaining attempts.
  static Outcome fail(std::string_view reason) { return Outcome{Kind::fail, reason, Duration{0}}; }
  /// discard(reason) drops the job: it is not worth doing (the order was refunded meanwhile, the
  /// user deleted the account). The job ends `discarded` (state, counts, `discarded` event with
  /// the reason), is not retried and files no DLQ entry; its dedup id is released as a
  /// completed job's is. asynq's SkipRetry without the archive; what a handler would otherwise
  /// do by cancelling itself.
  static Outcome discard(std::string_view reason) {
    return Outcome{Kind::discard, reason, Duration{0}};
  }

  /// pushback(pause, reason): the downstream refused the call as too many (HTTP 429, `pause`
  /// being its Retry-After). No attempt is used: the queue's downstream
  /// (QueueOptions::downstream) admits no job until `pause` has passed, and this job runs again
  /// then (BullMQ's rate limit from a worker, asynq's RetryAfter). On a queue without a
  /// downstream only this job waits.
  static Outcome pushback(Duration pause, std::string_view reason = "429 too many requests") {
    return Outcome{Kind::pushback, reason, checked(pause, "pushback")};
  }

  Outcome() noexcept = default;

  [[nodiscard]] Kind kind() const noexcept { return kind_; }
  [[nodiscard]] const std::string& reason() const noexcept { return reason_; }
  [[nodiscard]] Duration delay() const noexcept { return delay_; }
  [[nodiscard]] bool ok() const noexcept { return kind_ == Kind::done; }
  /// take_reason() moves the reason out (the engine keeps it in the job's error log).
  [[nodiscard]] std::string take_reason() noexcept { return std::move(reason_); }

 private:
  template <class R>
  friend class Result;
  friend class detail::JobFlow;
  friend Outcome detail::pending_outcome() noexcept;
  Outcome(Kind k, std::string_view reason, Duration d) : kind_(k), reason_(reason), delay_(d) {}
  /// checked(d, factory): d, or Error(invalid_option) for a negative d, as every duration rail
  /// takes (thrown in a handler, it fails the attempt with this message).
  static Duration checked(Duration d, const char* factory) {
    if (d < Duration{0})
      throw Error(ErrorCode::invalid_option,
                  std::string("Outcome::") + factory + ": the duration is negative (" +
                      std::to_string(d.count()) + " ns); expected a duration >= 0");
    return d;
  }
  Kind kind_ = Kind::done;
  std::string reason_;
  Duration delay_{0};
  std::shared_ptr<const void> result_;  // done, on a queue with a result type (Result<R>)
};

namespace detail {
inline Outcome pending_outcome() noexcept {
  Outcome o;
  o.kind_ = Outcome::Kind::pending;
  return o;
}
}  // namespace detail

}  // namespace rail
