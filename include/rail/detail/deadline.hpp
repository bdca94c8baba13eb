// Deadlines: the one place rail turns "now + duration" into a point in time.
//
// Guarantee: no deadline computation overflows. A sum past the clock's range is "never"
// (kNever, INT64_MAX ns), and so is any duration of Duration::max(): rail itself uses
// Duration::max() to mean "never" (visibility, wait_idle), so users pass it everywhere.
// Every engine deadline (delay, retry_after, backoff, dedup ttl, lease grant and renewal, the
// lease sweep's re-arm, DLQ retention) goes through saturating_add; every real-time wait
// (block_timeout, shutdown grace, wait_idle timeout) through steady_deadline.
//
// What "never" means downstream: a delayed slot whose due time is kNever is parked, not linked
// into the timing wheel (queue_impl.hpp, schedule_or_park), so the wheel never has to carry it
// and the timer thread has nothing to wake for; a lease whose deadline is kNever never lapses; a
// dedup id expiring at kNever is DedupSet::kNoExpiry. Comparisons need no special case:
// `deadline <= now` is false for kNever at every now a clock can report short of INT64_MAX.
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace rail::detail {

/// kNever: the deadline of something that never comes due.
inline constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();

/// saturating_add(now_ns, d): now_ns + d in nanoseconds, or kNever when d is Duration::max() or
/// the sum passes INT64_MAX. A negative d (never accepted from users: options are validated) that
/// passes INT64_MIN clamps there, so the function is total.
[[nodiscard]] constexpr std::int64_t saturating_add(std::int64_t now_ns,
                                                    std::chrono::nanoseconds d) noexcept {
  if (d == std::chrono::nanoseconds::max()) return kNever;
  std::int64_t sum = 0;
  if (__builtin_add_overflow(now_ns, d.count(), &sum))
    return d.count() > 0 ? kNever : std::numeric_limits<std::int64_t>::min();
  return sum;
}

/// aged_out(at_ns, max_age, now_ns): something recorded at at_ns is max_age old or older at
/// now_ns, so it goes: kept while younger than max_age (BullMQ's removeOnComplete {age}, the
/// DLQ's retention and retained ends all mean this). Duration::max(): never ages out.
[[nodiscard]] constexpr bool aged_out(std::int64_t at_ns, std::chrono::nanoseconds max_age,
                                      std::int64_t now_ns) noexcept {
  const std::int64_t due = saturating_add(at_ns, max_age);
  return due != kNever && due <= now_ns;
}

/// is_never(deadline_ns): the deadline saturated (or was given as "never").
[[nodiscard]] constexpr bool is_never(std::int64_t deadline_ns) noexcept {
  return deadline_ns == kNever;
}

/// steady_deadline(d): std::chrono::steady_clock::now() + d, saturated to time_point::max() (a
/// wait that never times out). `steady_clock::now() + d` itself overflows for d near
/// Duration::max(), which made block_timeout = max return `full` at once and shutdown(max) return
/// without waiting.
[[nodiscard]] inline std::chrono::steady_clock::time_point steady_deadline(
    std::chrono::nanoseconds d) noexcept {
  using Steady = std::chrono::steady_clock;
  static_assert(std::is_same_v<Steady::duration, std::chrono::nanoseconds>,
                "steady_deadline saturates in nanoseconds: the steady clock must count them");
  const std::int64_t now = Steady::now().time_since_epoch().count();
  return Steady::time_point{std::chrono::nanoseconds{saturating_add(now, d)}};
}

/// timer_wait_ns(deadline_ns, now_ns): how long a thread may sleep for a deadline, bounded by
/// kMaxTimerSleepNs: condition_variable::wait_for adds its argument to the steady clock's now,
/// which overflows for a deadline near the end of the range. Waking early costs one loop.
inline constexpr std::int64_t kMaxTimerSleepNs = std::int64_t{3600} * 1'000'000'000;
[[nodiscard]] constexpr std::int64_t timer_wait_ns(std::int64_t deadline_ns,
                                                   std::int64_t now_ns) noexcept {
  std::int64_t wait = 0;
  if (__builtin_sub_overflow(deadline_ns, now_ns, &wait)) wait = kMaxTimerSleepNs;
  return wait < kMaxTimerSleepNs ? wait : kMaxTimerSleepNs;
}

}  // namespace rail::detail
