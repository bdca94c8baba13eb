// Resumed: a job that began elsewhere and runs its next attempt in this process: a broker's
// message that rail::amqp::Consumer hands to its local queue (JobFlow::add_resumed). It carries
// the job's counters and errors so far, so that its handler sees the job's own attempt number,
// last error and budget, and the local queue decides its next step as for any job of its own:
// - success, discard, cancel, or a failure that ends the job (the budget spent, a permanent
//   failure, a backoff that stops): as for a local job;
// - a failure with attempts left, or a lease lapse that would deliver it again: the job ends
//   here as `forwarded` (EventKind::forwarded, JobStatus::forwarded), its next attempt due after
//   the backoff the local queue chose; the broker delivers it then, to any process. A retry
//   whose wait is short may instead stay here (RetryHere), as a local job's does.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "rail/clock.hpp"
#include "rail/dead_letter.hpp"

namespace rail::detail {

/// RetryHere: which of a broker consumer's resumed jobs wait out a failed attempt's retry in
/// this process, holding their deliveries, rather than go back to the broker: those whose wait
/// is at most `within`, while fewer than the consumer's limit hold a place (`room`). A job takes
/// a place at its first retry here and gives it back at its end (JobFlow::retry_here,
/// JobEnds::settle), so held retries never take more than the limit of the consumer's prefetch.
/// `room` is a count and orders nothing else: relaxed operations suffice.
class RetryHere {
 public:
  RetryHere(Duration within, std::int32_t places) noexcept : within_(within), room_(places) {}
  [[nodiscard]] Duration within() const noexcept { return within_; }
  /// take(): a place, if one is free.
  [[nodiscard]] bool take() noexcept {
    std::int32_t left = room_.load(std::memory_order_relaxed);
    while (left > 0)
      if (room_.compare_exchange_weak(left, left - 1, std::memory_order_relaxed)) return true;
    return false;
  }
  void give_back() noexcept { room_.fetch_add(1, std::memory_order_relaxed); }
  [[nodiscard]] std::int32_t free_places() const noexcept {
    return room_.load(std::memory_order_relaxed);
  }

 private:
  const Duration within_;
  std::atomic<std::int32_t> room_;
};

struct Resumed {
  std::uint32_t failed_attempts = 0;  // attempts that failed before this one
  std::uint32_t deliveries = 0;       // handler starts before this one
  std::uint32_t stalls = 0;           // of them, deliveries whose lease lapsed
  std::vector<AttemptError> errors;   // the failed attempts' errors, oldest first
  Duration previous_delay{0};         // the wait the last failure led to (decorrelated jitter)
  /// Its retries and lapses go back to its broker (forwarded). False: they stay here, as a
  /// local job's do, its delivery held meanwhile: a FIFO group's job, whose next attempt must
  /// come before its group's later jobs.
  bool forward = true;
  /// Its short retries stay here (forwarded jobs only; null: every retry goes back).
  std::shared_ptr<RetryHere> retry_here;
};

}  // namespace rail::detail
