// TscClock (clock.hpp): steady_clock's time read from the invariant TSC, calibrated by
// detail/tsc_time.hpp; steady_clock itself where no invariant counter exists.
#include <chrono>
#include <cstdint>

#include "rail/clock.hpp"
#include "rail/detail/cpu_relax.hpp"
#include "rail/detail/tsc_time.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

namespace rail {
namespace detail {
namespace {

/// CpuCounter: the x86-64 time-stamp counter against steady_clock (TscTime's Source).
struct CpuCounter {
  [[nodiscard]] std::uint64_t ticks() const noexcept {
#if defined(__x86_64__)
    return __rdtsc();
#else
    return 0;
#endif
  }
  [[nodiscard]] std::int64_t kernel_ns() const noexcept {
    return std::chrono::steady_clock::now().time_since_epoch().count();
  }
  /// usable(): CPUID 0x80000007 EDX bit 8, the invariant TSC: one rate in every power state, on
  /// every core (Linux's constant_tsc and nonstop_tsc flags). Without it the counter may stop
  /// or change speed, and TscTime reads the kernel's clock.
  [[nodiscard]] bool usable() const noexcept {
#if defined(__x86_64__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(0x80000000u, &a, &b, &c, &d) == 0 || a < 0x80000007u) return false;
    if (__get_cpuid(0x80000007u, &a, &b, &c, &d) == 0) return false;
    return (d & (1u << 8)) != 0;
#else
    return false;
#endif
  }
};

/// process_time(): the one calibration the process shares (built on first use: the clock may be
/// read during other statics' construction).
BasicTscTime<CpuCounter>& process_time() noexcept {
  static BasicTscTime<CpuCounter> time;
  return time;
}

}  // namespace

std::int64_t steady_ns() noexcept {
  return process_time().now();
}

}  // namespace detail

TimePoint TscClock::now() const noexcept {
  // Per thread, never back: a re-anchoring or a move to a CPU whose counter trails may step
  // the raw reading back by tens of nanoseconds (tsc_time.hpp).
  thread_local std::int64_t last = INT64_MIN;
  std::int64_t t = detail::steady_ns();
  if (t < last) {
    t = last;
  } else {
    last = t;
  }
  return TimePoint{Duration{t}};
}

TscClock& TscClock::instance() noexcept {
  static TscClock clock;
  return clock;
}

bool TscClock::counting() const noexcept {
  return detail::process_time().measured();
}

}  // namespace rail
