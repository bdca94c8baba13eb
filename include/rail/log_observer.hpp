// A ready-made observer that prints one timestamped line per job stage, in the style of the
// BullMQ/RabbitMQ/SQS logs engineers already read:
//   [05:10:01.833] WORKER picked up job 2 (charge-card) - attempt #1
//   [05:10:01.837] ❌ FAILED job 2 attempt 1/3: Simulated payment gateway timeout - retry in 500ms
//   [05:10:03.407] ✅ COMPLETED job 2 (charge-card) after 3 attempt(s)
// Or, for log shippers (LogFormat::json), one JSON object per line with the same facts as
// fields:
//   {"time":"05:10:01.837","at_ns":...,"event":"attempt_failed","queue":"payments","job_id":2,
//    "job":"charge-card","attempt":1,"max_attempts":3,"deliveries":1,
//    "error":"Simulated payment gateway timeout","delay_ms":500}
// Lines are written whole (one lock per line): it is for logs, not for the hot path.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "rail/clock.hpp"
#include "rail/event.hpp"

namespace rail {

/// LogFormat: how the log observer writes an event.
enum class LogFormat : std::uint8_t {
  text,  // a line for people (the seed's style)
  json,  // one JSON object per line (JSON Lines): the event's fields, for log shippers
};

struct LogOptions {
  /// Timestamps: wall-clock time of day for a real clock; for a ManualClock, the virtual time
  /// since the clock's epoch (00:00:00.000 at start) so test output is reproducible.
  bool wall_clock = true;
  /// Prefix failures, completions and dead letters with ❌ ✅ 💀 as the seed's logs do.
  bool emoji = true;
  /// Print `added`, `retry_due`, `throttled`, `progress` and `idle` lines too (noisy; off by
  /// default).
  bool verbose = false;
  LogFormat format = LogFormat::text;
};

/// logs(kind, options): whether the log observer writes events of this kind.
bool logs(EventKind kind, const LogOptions& options) noexcept;

/// format_time(t, clock, options) renders the [HH:MM:SS.mmm] stamp used by the log observer.
std::string format_time(TimePoint t, const Clock& clock, const LogOptions& options);

/// format_event(e, clock, options) is the line the log observer prints for `e`, without a
/// trailing newline; empty for events the options leave out (logs()).
std::string format_event(const Event& e, const Clock& clock, const LogOptions& options);

/// format_event_json(e, clock, options): format_event's LogFormat::json line: an object with
/// "time" (format_time's stamp, without brackets), "at_ns" (the engine clock), "event",
/// "queue", and the fields the event carries: "job_id", "job", "attempt", "max_attempts",
/// "deliveries", "error", "reason", "delay_ms" (null: none), "elapsed_ms", "dedup_id",
/// "depth", "progress", "throttle", "result"; for a job with a trace context (JobOptions::trace),
/// "trace_id", "parent_span_id" (the producer's span) and, for an event of one attempt (started,
/// attempt_failed, completed, discarded, stalled, timed_out, late_outcome, progress), "span_id"
/// (the attempt's: attempt_trace). Strings are escaped as RFC 8259 asks.
std::string format_event_json(const Event& e, const Clock& clock, const LogOptions& options);

/// make_log_observer(out, clock, options) returns an observer printing format_event lines to out.
/// `out` and `clock` must outlive the engine it is attached to.
Observer make_log_observer(std::ostream& out, const Clock& clock, LogOptions options = {});

}  // namespace rail
