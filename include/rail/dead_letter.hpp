// DeadLetter<T>: one entry of a queue's dead-letter queue: the job's id, name and payload, why it
// died, every attempt's error with its time, its counters and timestamps, and the options a
// redrive brings back. DeadLetterInfo is the same entry without its payload: what a tool that
// does not know the payload type reads (and what the engine, compiled once for every payload
// type, keeps beside a typed payload).
#pragma once

#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rail/backoff.hpp"
#include "rail/clock.hpp"
#include "rail/event.hpp"

namespace rail {

/// AttemptError: one failed attempt.
struct AttemptError {
  std::uint32_t attempt = 0;
  TimePoint at{};
  std::string message;
};

/// DeadLetterInfo: a DLQ entry without its payload.
struct DeadLetterInfo {
  JobId id = 0;
  std::string name;
  DeadLetterReason reason = DeadLetterReason::none;
  std::uint32_t failed_attempts = 0;
  std::uint32_t max_attempts = 0;
  TimePoint added_at{};              // when the job was first added
  TimePoint dead_at{};               // when it entered the DLQ
  std::vector<AttemptError> errors;  // every failed attempt, oldest first
  std::uint32_t deliveries = 0;      // handler starts (SQS ApproximateReceiveCount)
  std::uint32_t stalls = 0;          // of them, deliveries whose lease lapsed
  // The job's own options, which a redrive keeps (an overflowed job's are those of its add).
  Backoff backoff{};
  std::optional<Duration> visibility_timeout{};  // unset: the queue's
  std::string dedup_id;                          // empty: none
  std::string downstream;                        // JobOptions::downstream; empty: the queue's
  TraceContext trace{};  // JobOptions::trace (invalid: none); not kept by the DLQ journal
  [[nodiscard]] std::string_view last_error() const noexcept {
    return errors.empty() ? std::string_view{} : std::string_view{errors.back().message};
  }
};

/// DeadLetter<T>: one DLQ entry: its DeadLetterInfo fields and the payload.
template <class T>
struct DeadLetter : DeadLetterInfo {
  T data;
};

/// DeadLetterVisitor<F, T>: a callable that DeadLetterQueue<T>::visit and ::inspect can hand
/// each entry to, in place.
template <class F, class T>
concept DeadLetterVisitor =
    (std::invocable<F&, const DeadLetter<T>&>);  // (): clang-format 14 misparses it bare

/// RedriveStatus: what a redrive did with an entry.
enum class RedriveStatus : std::uint8_t { redriven, not_found, queue_full, shutting_down };

/// RedriveOptions: how a redriven job starts over.
struct RedriveOptions {
  /// true (the default, as SQS, whose moved messages are received afresh): attempts, deliveries,
  /// stalls and the error log start from zero. false (BullMQ's job.retry() without
  /// resetAttemptsMade): they carry on, so a job that had exhausted its attempts gets one more
  /// delivery, and its next failure dead-letters it with every error so far.
  bool reset_counters = true;
};

}  // namespace rail
