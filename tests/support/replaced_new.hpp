// ReplacedNew: a global operator new for tests that count allocations or make one fail. It
// counts every allocation (allocations()), and throws std::bad_alloc for the next allocation of a
// given size on the thread that asked (fail_next_of_size). Include it in exactly one file of a
// test binary, and only outside the sanitizers, whose runtimes define operator new themselves.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace rail::test {

inline std::atomic<std::uint64_t> g_new_calls{0};
inline thread_local std::size_t g_fail_size = 0;  // 0: none

/// allocations(): operator new calls so far, on every thread.
inline std::uint64_t allocations() noexcept {
  // relaxed: a statistics counter, read after the measured code by the thread that ran it.
  return g_new_calls.load(std::memory_order_relaxed);
}
/// fail_next_of_size(n): this thread's next allocation of exactly n bytes throws bad_alloc.
inline void fail_next_of_size(std::size_t n) noexcept {
  g_fail_size = n;
}
/// failure_pending(): fail_next_of_size's allocation has not come yet.
inline bool failure_pending() noexcept {
  return g_fail_size != 0;
}

}  // namespace rail::test

// noinline on all three: when g++ 12 inlines them, it sees malloc on one side and a sized
// operator delete on the other, and it warns -Wmismatched-new-delete, although these replacements
// are matched by construction.
[[gnu::noinline]] void* operator new(std::size_t n) {
  rail::test::g_new_calls.fetch_add(1, std::memory_order_relaxed);  // see allocations()
  if (n != 0 && n == rail::test::g_fail_size) {
    rail::test::g_fail_size = 0;
    throw std::bad_alloc();
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
[[gnu::noinline]] void operator delete(void* p) noexcept {
  std::free(p);
}
[[gnu::noinline]] void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
