// Downstream limits: what the service behind a queue's handlers can take. A pool of
// workers sized to the machine is not a pool sized to the payment API it calls: that API allows
// so many calls in flight (concurrency) and so many per period (rate), and answers 429 with a
// retry-after when pushed past either. DownstreamOptions states those limits; the engine admits a
// job to a handler only when both allow it, and a handler's 429 pauses admissions until the
// retry-after (detail/downstream_limits.hpp holds the lock-free kernel).
//
// Rate semantics follow BullMQ's limiter ({max, duration}): at most `max` starts in any window of
// length `per`, the first included (a sliding window over the times of the last `max` starts:
// detail/rate_window.hpp). A token bucket is the other kind, asked for by name
// (RateLimit::token_bucket): it refills `max` tokens per `per`, exactly (integer arithmetic, no
// drift over any horizon), holds at most `burst` and starts full, so in any window of length w at
// most burst + ceil(w * max / per) jobs start: up to burst + max in the first `per`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "rail/clock.hpp"

namespace rail {

/// RateLimit: at most `max` starts in any window of `per` (kind window, the default: BullMQ's
/// limiter), or a token bucket that refills `max` per `per` and holds `burst` (kind
/// token_bucket: RateLimit::token_bucket(max, per, burst)).
struct RateLimit {
  enum class Kind : std::uint8_t {
    window,        // at most `max` starts in any window of `per`, the first included
    token_bucket,  // `max` tokens per `per`, a bucket of `burst` that starts full
  };
  /// The bound on a bucket's `max` and `burst`: 2^40 (about 10^12) tokens. It keeps the bucket's
  /// counters far from overflow (detail/downstream_limits.hpp: "Bounds").
  static constexpr std::uint64_t kMaxTokens = std::uint64_t{1} << 40;
  /// The bound on a window's `max`: 2^20 starts; the window keeps two 8-byte slots per start.
  static constexpr std::uint64_t kMaxWindowStarts = std::uint64_t{1} << 20;
  std::uint64_t max = 0;                   // starts per `per`: at least 1, at most 1 per ns
  Duration per = std::chrono::seconds(1);  // positive and finite (not Duration::max())
  std::optional<std::uint64_t> burst{};    // token_bucket: capacity, unset: `max`; a window: unset
  Kind kind = Kind::window;

  /// token_bucket(max, per, burst): the bucket kind, named.
  static constexpr RateLimit token_bucket(std::uint64_t max, Duration per,
                                          std::optional<std::uint64_t> burst = {}) noexcept {
    return RateLimit{max, per, burst, Kind::token_bucket};
  }
};

/// DownstreamOptions: the limits of one downstream service, shared by every job that calls it.
struct DownstreamOptions {
  std::optional<std::uint32_t> concurrency{};  // jobs admitted at once (in flight), >= 1; unset:
                                               // unlimited
  std::optional<RateLimit> rate{};             // starts per period; unset: unlimited
};

/// validate(o, name): throws rail::Error(invalid_option) naming the downstream, the field, the
/// value given and what is expected, e.g. "DownstreamOptions('payments').rate.max is 0; expected
/// 1 or more starts per rate.per".
void validate(const DownstreamOptions& o, std::string_view name);

namespace detail {
class DownstreamGate;
class EngineCore;
}  // namespace detail

/// DownstreamStats: a downstream's figures now (each read on its own, not one instant).
struct DownstreamStats {
  std::uint32_t in_flight = 0;                 // jobs admitted and not yet returned
  std::optional<std::uint32_t> concurrency{};  // the limit; unset: unlimited
  std::optional<std::uint64_t> tokens{};       // starts the rate allows now; nullopt: no rate limit
  std::optional<TimePoint> paused_until{};     // a pushback's pause, while it lasts
  std::uint64_t waiting = 0;  // jobs refused a permit or a token, waiting (at most one more
                              // waits on the timing wheel for the next token)
};

/// Downstream: a handle on a declared downstream (Engine::declare_downstream, Engine::downstream).
/// Copyable; valid while its engine lives. Every change takes effect at once: the next job to start
/// sees it, and jobs waiting for a permit or a token are woken to try it.
class Downstream {
 public:
  [[nodiscard]] const std::string& name() const noexcept;
  /// set_concurrency(limit): at most `limit` jobs inside at once (>= 1; nullopt: unlimited).
  /// Lowered below the jobs inside, no job starts until enough have returned.
  /// Error(invalid_option) for 0.
  void set_concurrency(std::optional<std::uint32_t> limit);
  /// set_rate(rate): the new rate (nullopt: none), starting with the tokens the bucket holds
  /// now (at most the new burst). Error(invalid_option) as DownstreamOptions' validation says.
  void set_rate(const std::optional<RateLimit>& rate);
  /// pause_for(d): no job starts before d has passed (what Outcome::pushback does); only
  /// extends a pause in progress.
  void pause_for(Duration d);
  [[nodiscard]] DownstreamStats stats() const;

 private:
  friend class Engine;
  Downstream(detail::DownstreamGate& gate, detail::EngineCore& core) noexcept
      : gate_(&gate), core_(&core) {}
  detail::DownstreamGate* gate_;
  detail::EngineCore* core_;
};

}  // namespace rail
