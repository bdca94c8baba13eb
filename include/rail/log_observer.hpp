// A ready-made observer that prints one timestamped line per job stage, in the style of the
// BullMQ/RabbitMQ/SQS logs engineers already read:
//   [05:10:01.833] WORKER picked up job 2 (charge-card) - attempt #1
//   [05:10:01.837] ❌ FAILED job 2 attempt 1/3: Simulated payment gateway timeout - retry in 500ms
//   [05:10:03.407] ✅ COMPLETED job 2 (charge-card) after 3 attempt(s)
// Lines are written whole (one lock per line): it is for humans, not for the hot path.
#pragma once

#include <ostream>
#include <string>

#include "rail/clock.hpp"
#include "rail/event.hpp"

namespace rail {

struct LogOptions {
  /// Timestamps: wall-clock time of day for a real clock; for a ManualClock, the virtual time
  /// since the clock's epoch (00:00:00.000 at start) so test output is reproducible.
  bool wall_clock = true;
  /// Prefix failures, completions and dead letters with ❌ ✅ 💀 as the seed's logs do.
  bool emoji = true;
  /// Print `added`, `retry_due` and `idle` lines too (noisy; off by default).
  bool verbose = false;
};

/// format_time(t, clock, options) renders the [HH:MM:SS.mmm] stamp used by the log observer.
std::string format_time(TimePoint t, const Clock& clock, const LogOptions& options);

/// format_event(e, clock, options) is the line the log observer prints for `e`, without a
/// trailing newline; empty for events the options leave out.
std::string format_event(const Event& e, const Clock& clock, const LogOptions& options);

/// make_log_observer(out, clock, options) returns an observer printing format_event lines to out.
/// `out` and `clock` must outlive the engine it is attached to.
Observer make_log_observer(std::ostream& out, const Clock& clock, LogOptions options = {});

}  // namespace rail
