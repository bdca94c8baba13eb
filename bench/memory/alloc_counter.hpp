// Allocation accounting for memory_bench (issue 4, item 6). alloc_counter.cpp replaces, in this
// binary only:
//   * the global operator new / delete (every form a C++20 program can call: plain, sized,
//     aligned; nothrow and array forms forward to these by the standard's default definitions);
//   * the C allocator: malloc, calloc, realloc, free, aligned_alloc, posix_memalign, memalign —
//     forwarding to the __libc_* entry points, so code that calls malloc directly (libstdc++
//     internals, std::thread's state, moodycamel's blocks) is counted too. Note: the benchmarks
//     link libmimalloc.so (bench/CMakeLists.txt), which overrides malloc process-wide, so those
//     entry points are libmimalloc's and every contender here allocates from mimalloc;
//   * mimalloc's allocation API (mi_malloc_aligned, mi_free): defined here, they interpose the
//     shared libmimalloc's, and forward to it through dlsym(RTLD_NEXT). rail's own blocks reach
//     mimalloc through a private handle (rail/detail/allocation.hpp) that these do not see;
//     snapshot() adds rail's own count of them.
// Why interpose mimalloc rather than read its statistics: Debian's libmimalloc is built with
// MI_STAT = 0 (release), so mi_stats_* has no allocation counts to give.
//
// Each source keeps a call counter and live-byte gauge (usable size, i.e. including the
// allocator's rounding), process-wide, always on. A measurement is the difference of two
// snapshot()s, so it covers every thread — producers, workers, the engine's timer thread.
// Threading: everything here is thread-safe; counters are relaxed atomics (a snapshot taken after
// the threads involved have synchronized with the taker, e.g. through a completion latch, sees
// all their counts).
#pragma once

#include <cstdint>

namespace bench {

struct AllocSnapshot {
  std::uint64_t new_calls = 0;     // operator new (all forms)
  std::uint64_t malloc_calls = 0;  // malloc/calloc/realloc/aligned forms called directly
  std::uint64_t mi_calls = 0;      // mimalloc allocations (mi_malloc_aligned)
  std::int64_t live_bytes = 0;     // glibc + mimalloc usable bytes currently allocated
  std::int64_t rss_bytes = 0;      // resident set size (/proc/self/statm)

  [[nodiscard]] std::uint64_t calls() const noexcept { return new_calls + malloc_calls + mi_calls; }
};

/// snapshot(): the process-wide totals now.
AllocSnapshot snapshot() noexcept;

}  // namespace bench
