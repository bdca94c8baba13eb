// JobEnd<R>: how a job ended, as its waiters and Queue::end_of(id) see it: completed with its
// result (a queue declared with a result type), dead-lettered with its reason and every
// attempt's error, cancelled, discarded with the handler's reason, or forwarded (a job resumed
// from a broker whose next attempt went back to it). `unknown` when the queue
// cannot tell: never added, forgotten by its history, or left unstarted at shutdown.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rail/clock.hpp"
#include "rail/dead_letter.hpp"
#include "rail/event.hpp"
#include "rail/job_state.hpp"

namespace rail {

template <class R = void>
struct JobEnd {
  JobId id = 0;
  JobStatus status = JobStatus::unknown;  // completed, dead_lettered, cancelled, discarded,
                                          // forwarded, unknown
  std::shared_ptr<const R> result;  // completed, on a queue with a result type (shared, immutable)
  DeadLetterReason reason = DeadLetterReason::none;  // dead_lettered
  // dead_lettered: the last failure; discarded: the reason; forwarded: why it went back (the
  // failure, or the lapse); unknown: why
  std::string error;
  std::vector<AttemptError> errors;  // dead_lettered: every attempt's failure, oldest first
  /// attempt: the number of the attempt that ended the job (completed, discarded; as
  /// Job::attempt() counted it), the failed attempts (dead_lettered), or the failed attempts
  /// before the cancel (cancelled: an attempt the cancel fenced mid-run is not counted) or
  /// before the broker's next (forwarded).
  std::uint32_t attempt = 0;
  TimePoint ended_at{};  // engine clock; unset for unknown

  [[nodiscard]] bool completed() const noexcept { return status == JobStatus::completed; }
};

}  // namespace rail
