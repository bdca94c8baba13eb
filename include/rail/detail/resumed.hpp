// Resumed: a job that began elsewhere and runs its next attempt in this process: a broker's
// message that rail::amqp::Consumer hands to its local queue (JobFlow::add_resumed). It carries
// the job's counters and errors so far, so that its handler sees the job's own attempt number,
// last error and budget, and the local queue decides its next step as for any job of its own:
// - success, discard, cancel, or a failure that ends the job (the budget spent, a permanent
//   failure, a backoff that stops): as for a local job;
// - a failure with attempts left, or a lease lapse that would deliver it again: the job ends
//   here as `forwarded` (EventKind::forwarded, JobStatus::forwarded), its next attempt due after
//   the backoff the local queue chose; the broker delivers it then, to any process.
#pragma once

#include <cstdint>
#include <vector>

#include "rail/clock.hpp"
#include "rail/dead_letter.hpp"

namespace rail::detail {

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
};

}  // namespace rail::detail
