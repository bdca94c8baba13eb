// Outcome: what a handler tells the engine about one attempt. Returning is the normal path; a
// handler may also throw, which counts as Outcome::retry(e.what()), or as Outcome::fail(e.what())
// when what it throws is a rail::UnrecoverableError (unrecoverable_error.hpp).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "rail/clock.hpp"

namespace rail {

namespace detail {
class JobFlow;
}
template <class R>
class Result;

class Outcome {
 public:
  enum class Kind : std::uint8_t {
    done,         // the job completed
    retry,        // the attempt failed; retry after the job's backoff if attempts remain
    retry_after,  // the attempt failed; retry after delay() (overrides backoff) if attempts remain
    fail,      // permanent failure: skip remaining attempts, dead-letter now (UnrecoverableError)
    discard,   // drop the job: it ends `discarded`, with no retry and no DLQ entry
    pushback,  // the downstream refused the call (429): retry after delay(), no attempt used
    pending,   // the handler called Job::defer(): its Completion delivers the outcome later
  };

  /// done() completes the job. Outcome{} is done() too.
  static Outcome done() noexcept { return Outcome{}; }
  /// retry(reason) records a failed attempt; the job's backoff decides when it runs again.
  static Outcome retry(std::string_view reason) {
    return Outcome{Kind::retry, reason, Duration{0}};
  }
  /// retry_after(d, reason) records a failed attempt and runs the next one after d (d >= 0), e.g.
  /// when the downstream answered "429, retry after 30 s".
  static Outcome retry_after(Duration d, std::string_view reason) {
    return Outcome{Kind::retry_after, reason, d < Duration{0} ? Duration{0} : d};
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

  /// pushback(retry_after, reason): the downstream refused the call as too many (HTTP 429,
  /// with its Retry-After). The queue's downstream (QueueOptions::downstream) admits no job
  /// until retry_after has passed, and this job runs again then without using an attempt
  /// (BullMQ's rate limit from a worker, asynq's RetryAfter). retry_after >= 0; on a queue
  /// without a downstream only this job waits.
  static Outcome pushback(Duration retry_after, std::string_view reason = "429 too many requests") {
    return Outcome{Kind::pushback, reason, retry_after < Duration{0} ? Duration{0} : retry_after};
  }

  /// pending(): the handler's work goes on after it returns; the Completion that Job::defer()
  /// gave it delivers the outcome (completion.hpp). Without a defer() first it is a mistake
  /// that counts as a retry saying so: nothing would ever complete the job.
  static Outcome pending() noexcept {
    Outcome o;
    o.kind_ = Kind::pending;
    return o;
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
  Outcome(Kind k, std::string_view reason, Duration d) : kind_(k), reason_(reason), delay_(d) {}
  Kind kind_ = Kind::done;
  std::string reason_;
  Duration delay_{0};
  std::shared_ptr<const void> result_;  // done, on a queue with a result type (Result<R>)
};

}  // namespace rail
