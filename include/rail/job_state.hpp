// JobState: where a job is now, by id (Queue::state / Engine::state).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "rail/clock.hpp"
#include "rail/event.hpp"

namespace rail {

enum class JobStatus : std::uint8_t {
  waiting,           // ready to start, or paused
  delayed,           // on the timing wheel until `since` (a delay or a retry's backoff)
  waiting_children,  // waits for the jobs it depends on (JobOptions::after) to end
  active,            // a handler has been running it since `since`
  completed,
  dead_lettered,
  cancelled,
  discarded,  // its handler returned Outcome::discard
  forwarded,  // its next attempt went back to the broker it came from (EventKind::forwarded)
  unknown,    // never added, or finished so long ago that the queue's history forgot it
};

std::string_view to_string(JobStatus status) noexcept;

struct JobState {
  JobStatus status = JobStatus::unknown;
  TimePoint since{};  // delayed: due time; active: this delivery's start (waiting: unset)
  std::uint32_t deliveries = 0;       // handler starts so far (live jobs only)
  std::uint32_t failed_attempts = 0;  // failed attempts so far (live jobs only)
  std::uint32_t stalls = 0;           // lapsed leases so far (live jobs only)
  std::optional<double> progress{};   // the handler's last Job::progress report (live jobs only)
  /// Handlers of this job still running though their delivery no longer counts (its lease
  /// lapsed or its attempt timed out: asked to stop, they hold their thread until they return),
  /// also once the job has ended. A figure, as QueueCounts::zombies.
  std::uint32_t zombies = 0;
};

/// JobInfo: one job of a queue's listing (Queue::jobs): its id and state.
struct JobInfo {
  JobId id = 0;
  JobState state;
};

}  // namespace rail
