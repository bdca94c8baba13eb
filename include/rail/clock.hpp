// Clocks: where an Engine reads the time. SteadyClock is the real monotonic clock; TscClock (the
// engines' default) is the same time read from the CPU's time-stamp counter at less than half
// the cost; ManualClock is a clock that only moves when a test (or a simulation) calls
// advance(), so retries, delays and dedup windows can be unit-tested to the nanosecond without a
// single sleep.
//
// Guarantee: now() never decreases (TscClock: never on one thread; see there).
// Threading: now() may be called from any thread at any time. ManualClock::advance() may be called
// from any thread; listeners run on the advancing thread, after the new time is visible.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "rail/detail/deadline.hpp"

namespace rail {

/// Duration is rail's unit of time everywhere: nanoseconds.
using Duration = std::chrono::nanoseconds;
/// TimePoint is a point on the engine clock's timeline (steady, not wall time).
using TimePoint = std::chrono::time_point<std::chrono::steady_clock, Duration>;
/// WallTime is a point in civil time, UTC (Unix time: no leap seconds), as cron schedules read it.
using WallTime = std::chrono::sys_time<Duration>;

/// Clock is the engine's source of time.
class Clock {
 public:
  virtual ~Clock() = default;
  /// now() is the current time; monotonic.
  [[nodiscard]] virtual TimePoint now() const noexcept = 0;
  /// is_manual() tells an engine to wait for advance() rather than for real time to pass.
  [[nodiscard]] virtual bool is_manual() const noexcept { return false; }
  /// wall_now() is the current civil time (UTC), for schedules written in calendar terms (cron).
  /// Unlike now() it may jump (the system's time is set); rail reads it when it computes a cron
  /// schedule's next due time and waits on now().
  [[nodiscard]] virtual WallTime wall_now() const noexcept {
    return std::chrono::time_point_cast<Duration>(std::chrono::system_clock::now());
  }
};

/// SteadyClock reads std::chrono::steady_clock.
class SteadyClock final : public Clock {
 public:
  [[nodiscard]] TimePoint now() const noexcept override {
    return std::chrono::time_point_cast<Duration>(std::chrono::steady_clock::now());
  }
  /// instance() is the process-wide steady clock engines use when given none.
  static SteadyClock& instance() noexcept {
    static SteadyClock clock;
    return clock;
  }
};

/// TscClock is SteadyClock's time read from the CPU's invariant time-stamp counter, calibrated
/// against steady_clock and re-anchored every ~0.13 s (detail/tsc_time.hpp): ~10.5 ns a reading
/// where a vDSO clock_gettime takes ~25 on a KVM guest, and an engine reads the clock about
/// twice per job. Where the CPU has no invariant counter (or is not x86-64) it reads
/// steady_clock; so it does for the first 10 ms, while it measures the counter, and for good
/// once the counter jumped or changed rate three times in 10 s.
/// Guarantee: on one thread now() never decreases. Readings on two threads agree to within the
/// CPUs' counter skew plus the calibration's error (tens of nanoseconds on a KVM guest; up to
/// ~2 us in the 0.13 s after the first measurement), so a reading taken after another thread's
/// may be that much earlier. If the counter jumps (a VM restored from a snapshot) by less than
/// a re-anchoring window, readings run ahead by the jump until the next re-anchoring and then
/// stand still until steady_clock catches up. A user who needs steady_clock's exact contract
/// passes `&rail::SteadyClock::instance()` as EngineOptions::clock.
class TscClock final : public Clock {
 public:
  [[nodiscard]] TimePoint now() const noexcept override;
  /// instance() is the process-wide counter clock engines use when given none.
  static TscClock& instance() noexcept;
  /// counting(): readings come from the counter now (false: from steady_clock).
  [[nodiscard]] bool counting() const noexcept;
};

/// ManualClock starts at `start` and moves only when advance() or set() is called.
/// Engines that use it subscribe to be told when time moves, so `clock.advance(500ms)` makes
/// exactly the timers that became due fire (an inline engine moves their jobs to ready at once;
/// a threaded engine's timer thread wakes and does the same). Its civil time (wall_now) is
/// `wall_at_start` (default 1970-01-01 00:00 UTC) plus the time advanced since: a test of a cron
/// schedule states the date it starts on, and the calendar moves with the clock.
class ManualClock final : public Clock {
 public:
  using Listener = std::function<void(TimePoint)>;

  explicit ManualClock(TimePoint start = TimePoint{}, WallTime wall_at_start = WallTime{})
      : now_ns_(start.time_since_epoch().count()),
        start_ns_(start.time_since_epoch().count()),
        wall_at_start_(wall_at_start) {}

  [[nodiscard]] TimePoint now() const noexcept override {
    // acquire pairs with the release in set(): whoever sees the new time also sees the writes
    // the advancing thread made before moving the clock (e.g. a test's setup).
    return TimePoint{Duration{now_ns_.load(std::memory_order_acquire)}};
  }
  [[nodiscard]] bool is_manual() const noexcept override { return true; }
  /// wall_now(): the civil time at start plus the time advanced since (saturating).
  [[nodiscard]] WallTime wall_now() const noexcept override {
    const std::int64_t moved = now().time_since_epoch().count() - start_ns_;  // >= 0: monotonic
    return WallTime{Duration{
        detail::saturating_add(wall_at_start_.time_since_epoch().count(), Duration{moved})}};
  }

  /// advance(d) moves time forward by d (d < 0 is ignored: time never goes back) and runs the
  /// listeners on this thread. Past the end of the range time stops at TimePoint::max().
  void advance(Duration d) {
    if (d.count() <= 0) return;
    set(TimePoint{Duration{detail::saturating_add(now().time_since_epoch().count(), d)}});
  }

  /// set(t) moves time to t if t is later than now.
  void set(TimePoint t) {
    std::int64_t target = t.time_since_epoch().count();
    std::int64_t cur = now_ns_.load(std::memory_order_relaxed);
    // A CAS loop keeps time monotonic when several threads advance at once.
    while (cur < target && !now_ns_.compare_exchange_weak(cur, target, std::memory_order_release,
                                                          std::memory_order_relaxed)) {
    }
    // The lock is held across the calls so that unsubscribe() (an engine's destructor) waits for
    // a call in flight instead of racing it; it is recursive so a listener may (un)subscribe.
    // Iterating by index (not over a copy) keeps advance() allocation-free.
    std::lock_guard lock(mu_);
    const TimePoint moved_to = now();
    for (std::size_t i = 0; i < listeners_.size(); ++i)
      listeners_[i].second(moved_to);
  }

  /// subscribe(fn) calls fn(now) after every advance; returns a token for unsubscribe().
  std::uint64_t subscribe(Listener fn) {
    std::lock_guard lock(mu_);
    listeners_.emplace_back(++next_token_, std::move(fn));
    return next_token_;
  }
  /// unsubscribe(token) stops the calls; it waits for a call running on another thread.
  void unsubscribe(std::uint64_t token) {
    std::lock_guard lock(mu_);
    std::erase_if(listeners_, [token](const auto& l) { return l.first == token; });
  }

 private:
  std::atomic<std::int64_t> now_ns_;
  const std::int64_t start_ns_;
  const WallTime wall_at_start_;
  std::recursive_mutex mu_;
  std::vector<std::pair<std::uint64_t, Listener>> listeners_;
  std::uint64_t next_token_ = 0;
};

}  // namespace rail
