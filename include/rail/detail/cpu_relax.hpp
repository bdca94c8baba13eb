// cpu_relax(): the body of a spin-wait iteration, and steady_ns(), the clock a spinner reads to
// bound its spin.
//
// Why `pause` and not sched_yield: on a busy machine a yield hands the core away for
// milliseconds, while the awaited store is usually a hand-off (~100 ns) away. `pause` also
// yields the core to a sibling hyperthread and avoids the memory-order mis-speculation flush on
// leaving the spin.
#pragma once

#include <cstdint>

namespace rail::detail {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
  __asm__ __volatile__("yield" ::: "memory");
#endif
  // Other targets: spin without a hint; callers bound their spins by time or count.
}

/// steady_ns(): the steady clock in ns, read from the CPU's counter as TscClock reads it but not
/// clamped per thread (a spin's bound, a wait's deadline: not the engine's clock, which a test
/// may hold still). src/tsc_clock.cpp.
[[nodiscard]] std::int64_t steady_ns() noexcept;

}  // namespace rail::detail
