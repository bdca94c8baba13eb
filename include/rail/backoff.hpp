// Backoff: how long a failed attempt waits before the next one.
//
// Formulas (failed_attempts counts failed attempts so far, so it is 1 when the first retry is
// being scheduled; BullMQ's convention):
//   fixed        d(n) = delay
//   exponential  d(n) = delay * 2^(n-1)                       (BullMQ: 500 ms, 1000 ms, 2000 ms...)
// then `cap` bounds the result, then jitter (AWS Architecture Blog, "Exponential Backoff And
// Jitter", 2015) spreads retries so that a burst of failures does not retry in lock-step:
//   full          random in [0, d]
//   equal         d/2 + random in [0, d/2]
//   decorrelated  min(cap, random in [delay, 3 * previous])    (previous starts at delay)
// A custom backoff is a function of the attempt and the error; returning a negative duration
// stops retrying (the job is dead-lettered), as BullMQ's backoffStrategy returning -1 does.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string_view>

#include "rail/clock.hpp"

namespace rail {

enum class BackoffKind : std::uint8_t { none, fixed, exponential, custom };
enum class Jitter : std::uint8_t { none, full, equal, decorrelated };

/// RetryContext is what a custom backoff function sees.
struct RetryContext {
  std::uint64_t job_id = 0;
  std::uint32_t failed_attempts = 0;  // failed attempts so far, >= 1
  std::string_view error;             // the failure that is being retried
  Duration previous_delay{0};         // the delay used before the previous attempt (0 at first)
};

/// CustomBackoff decides the delay before the next attempt; < 0 means "do not retry".
using CustomBackoff = std::function<Duration(const RetryContext&)>;

/// Backoff is a value type describing the retry delay policy of a job.
struct Backoff {
  BackoffKind kind = BackoffKind::none;
  Duration delay{0};
  Jitter jitter = Jitter::none;
  Duration cap = Duration::max();  // upper bound applied before jitter

  static constexpr Backoff none() noexcept { return {}; }
  static constexpr Backoff fixed(Duration d) noexcept { return {BackoffKind::fixed, d}; }
  static constexpr Backoff exponential(Duration base) noexcept {
    return {BackoffKind::exponential, base};
  }
  /// custom() uses QueueOptions::custom_backoff (BullMQ's settings.backoffStrategy).
  static constexpr Backoff custom() noexcept { return {BackoffKind::custom}; }

  constexpr Backoff with_jitter(Jitter j) const noexcept {
    Backoff b = *this;
    b.jitter = j;
    return b;
  }
  constexpr Backoff capped_at(Duration c) const noexcept {
    Backoff b = *this;
    b.cap = c;
    return b;
  }
  friend constexpr bool operator==(const Backoff&, const Backoff&) = default;
};

/// validate(b, where) throws rail::Error(invalid_option) naming `where` if b is unusable.
void validate(const Backoff& b, std::string_view where);

/// SplitMix64 is the engine's per-thread random source for jitter: tiny, fast, good enough for
/// spreading retries (not for anything security-related).
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) noexcept : state_(seed) {}
  std::uint64_t next() noexcept {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  /// uniform(lo, hi) is uniform in [lo, hi] (inclusive); lo <= hi.
  std::int64_t uniform(std::int64_t lo, std::int64_t hi) noexcept {
    auto span = static_cast<std::uint64_t>(hi - lo) + 1;
    if (span == 0) return static_cast<std::int64_t>(next());  // the whole 64-bit range
    return lo + static_cast<std::int64_t>(next() % span);
  }

 private:
  std::uint64_t state_;
};

/// next_delay() computes the delay before the next attempt of a job with policy `b`, or a
/// negative duration when the job must not be retried (only a custom function says so).
/// `custom` is consulted only for BackoffKind::custom.
inline Duration next_delay(const Backoff& b, const RetryContext& ctx, const CustomBackoff* custom,
                           SplitMix64& rng) {
  std::int64_t base = b.delay.count();
  std::int64_t cap = b.cap.count();
  std::int64_t d = 0;
  switch (b.kind) {
    case BackoffKind::none:
      return Duration{0};
    case BackoffKind::custom:
      return (custom && *custom) ? (*custom)(ctx) : Duration{-1};
    case BackoffKind::fixed:
      d = base;
      break;
    case BackoffKind::exponential: {
      // delay * 2^(n-1), saturating instead of overflowing for large n.
      std::uint32_t shift = ctx.failed_attempts == 0 ? 0 : ctx.failed_attempts - 1;
      if (shift >= 63 || base > (std::numeric_limits<std::int64_t>::max() >> shift)) {
        d = std::numeric_limits<std::int64_t>::max();
      } else {
        d = base << shift;
      }
      break;
    }
  }
  d = std::min(d, cap);
  switch (b.jitter) {
    case Jitter::none:
      return Duration{d};
    case Jitter::full:
      return Duration{rng.uniform(0, d)};
    case Jitter::equal:
      return Duration{d / 2 + rng.uniform(0, d - d / 2)};
    case Jitter::decorrelated: {
      std::int64_t prev = ctx.previous_delay.count() > 0 ? ctx.previous_delay.count() : base;
      std::int64_t hi = prev > std::numeric_limits<std::int64_t>::max() / 3
                            ? std::numeric_limits<std::int64_t>::max()
                            : prev * 3;
      hi = std::max(hi, base);
      return Duration{std::min(cap, rng.uniform(base, hi))};
    }
  }
  return Duration{d};
}

}  // namespace rail
