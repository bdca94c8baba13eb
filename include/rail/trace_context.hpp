// Trace context: the W3C `traceparent` of the code that added a job, carried to its handler, its
// events and its log lines, so a job that fails three hops away is found in the trace of the
// request that caused it (OpenTelemetry's messaging conventions; asynq#321 is what losing it
// costs).
//
// A job takes its context at add: JobOptions::trace if given, else the adding thread's current
// one (TraceScope), else none. Each attempt is a span of its own in that trace, a child of the
// producer's span; a retry's span also links to the first attempt's (JobTrace). Attempt span ids
// are derived from the job's id and attempt number, so every reader (the handler, an event, a
// log line) names the same span without storing one per attempt.
// Cost: a job without a context costs its add one thread-local read; a queue keeps contexts in
// an array of 32 bytes per slot, allocated on its first add that carries one.
// rail depends on no OpenTelemetry library: the example server shows the wiring.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rail {

/// TraceContext: a W3C trace context: the trace, the parent span, the flags (bit 0: sampled).
struct TraceContext {
  std::array<std::uint8_t, 16> trace_id{};
  std::array<std::uint8_t, 8> span_id{};
  std::uint8_t flags = 0;

  /// valid(): both ids non-zero (the W3C rule); an invalid context is "none". Inline: every
  /// add asks it of the thread's context.
  [[nodiscard]] bool valid() const noexcept {
    std::uint8_t any_trace = 0, any_span = 0;
    for (const std::uint8_t b : trace_id)
      any_trace |= b;
    for (const std::uint8_t b : span_id)
      any_span |= b;
    return any_trace != 0 && any_span != 0;
  }
  /// parse(traceparent): "00-<32 hex>-<16 hex>-<2 hex>" (lowercase; a later version's longer
  /// header is read by its first four fields, as the W3C asks); nullopt when malformed, for
  /// version ff, or for all-zero ids.
  [[nodiscard]] static std::optional<TraceContext> parse(std::string_view traceparent) noexcept;
  /// traceparent(): the header, version 00.
  [[nodiscard]] std::string traceparent() const;
  [[nodiscard]] std::string trace_id_hex() const;
  [[nodiscard]] std::string span_id_hex() const;
  friend bool operator==(const TraceContext&, const TraceContext&) = default;
};

/// JobTrace: an attempt's place in its job's trace (Job::trace()).
struct JobTrace {
  TraceContext producer;  // the context the job was added with (its span is the producer's)
  TraceContext attempt;   // this attempt's span: the producer's trace and flags, its own span id
  /// first_attempt: for a retry (attempt 2 on), the first attempt's span, to link to; unset on
  /// the first attempt.
  std::optional<TraceContext> first_attempt;
  /// valid(): the job was added with a context.
  [[nodiscard]] bool valid() const noexcept { return producer.valid(); }
};

/// attempt_trace(producer, job, attempt): the JobTrace of attempt `attempt` (1-based) of job
/// `job` added with `producer`; all-invalid when producer is. Deterministic: the same inputs
/// always name the same spans.
[[nodiscard]] JobTrace attempt_trace(const TraceContext& producer, std::uint64_t job,
                                     std::uint32_t attempt) noexcept;

namespace detail {
/// thread_trace(): the calling thread's current context (TraceScope's), read inline by add().
[[nodiscard]] inline TraceContext& thread_trace() noexcept {
  thread_local TraceContext current{};
  return current;
}
}  // namespace detail

/// current_trace(): this thread's current context (TraceScope), or an invalid one.
[[nodiscard]] inline TraceContext current_trace() noexcept {
  return detail::thread_trace();
}

/// TraceScope: while it lives, `context` is this thread's current trace context, which add()
/// gives the jobs it creates when their JobOptions::trace is unset; the previous one returns at
/// its end (scopes nest). Set it where a request's span begins: a server's request handler.
class TraceScope {
 public:
  explicit TraceScope(const TraceContext& context) noexcept;
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  TraceContext previous_;
};

}  // namespace rail
