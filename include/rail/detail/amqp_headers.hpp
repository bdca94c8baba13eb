// rail's message headers on the broker: their names, and how a job's options and counters are
// written into them and read back. The Producer writes them, the Consumer's relay reads them
// into a resumed job and rewrites them for a retry or a dead letter, DeadLetters reads them.
// Contract: a reader never throws on a header that is missing or of another type; it answers
// the default it was given (a message of an older rail, or one published by hand, still runs).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "rail/backoff.hpp"
#include "rail/dead_letter.hpp"
#include "rail/detail/amqp_connection.hpp"

namespace rail::detail::amqp {

// The headers (x-rail-v 1). Counters are the job's so far; errors are per failed attempt.
inline constexpr std::string_view kVersionHeader = "x-rail-v";
inline constexpr std::string_view kCodecHeader = "x-rail-codec";     // JournalCodec<T>::name()
inline constexpr std::string_view kAddedHeader = "x-rail-added-ms";  // wall clock, Unix ms
inline constexpr std::string_view kVisibilityHeader = "x-rail-visibility-ms";
inline constexpr std::string_view kTimeoutHeader = "x-rail-timeout-ms";
inline constexpr std::string_view kGroupHeader = "x-rail-group";  // JobOptions::group
inline constexpr std::string_view kAttemptHeader = "x-rail-attempt";  // failed attempts
inline constexpr std::string_view kMaxAttemptsHeader = "x-rail-max-attempts";
inline constexpr std::string_view kDeliveriesHeader = "x-rail-deliveries";
inline constexpr std::string_view kStallsHeader = "x-rail-stalls";
inline constexpr std::string_view kBackoffHeader = "x-rail-backoff";
// The wait the last failure led to, in ns (decorrelated jitter starts its next from it).
inline constexpr std::string_view kPreviousDelayHeader = "x-rail-previous-delay-ns";
inline constexpr std::string_view kReasonHeader = "x-rail-reason";  // a dead letter's
inline constexpr std::string_view kErrorHeader = "x-rail-error";    // an error of no attempt

/// header_int(h, key, otherwise) / header_text(h, key): a header's value, or the default.
[[nodiscard]] std::int64_t header_int(const Fields& h, std::string_view key,
                                      std::int64_t otherwise);
[[nodiscard]] std::string header_text(const Fields& h, std::string_view key);
/// header_count(h, key, otherwise): a counter header, clamped to what a job's counters hold.
[[nodiscard]] std::uint32_t header_count(const Fields& h, std::string_view key,
                                         std::uint32_t otherwise);
/// set_header(h, key, value): replaces key's value, or appends it.
void set_header(Fields& h, std::string_view key, FieldValue value);
/// error_key(attempt): the header of failed attempt `attempt`'s error ("x-rail-error-N").
[[nodiscard]] std::string error_key(std::uint32_t attempt);
/// header_errors(h, failed): the errors of failed attempts 1 .. failed that h holds, oldest
/// first (their `at` unset: the broker keeps no time for them).
[[nodiscard]] std::vector<AttemptError> header_errors(const Fields& h, std::uint32_t failed);
/// backoff_header(b) / parse_backoff(text): "kind:delay_ns:jitter:cap_ns"; a text that does not
/// parse, or is out of range, reads as the default Backoff.
[[nodiscard]] std::string backoff_header(const Backoff& b);
[[nodiscard]] Backoff parse_backoff(const std::string& text);

}  // namespace rail::detail::amqp
