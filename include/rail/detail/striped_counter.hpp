// StripedCounters: per-queue statistics (added, started, completed, ...) that every job bumps.
// A single shared atomic per statistic would make every producer and worker fight over one cache
// line (~30 ns per increment across cores). Instead each thread adds to one of kStripes padded
// stripes, chosen once per thread; readers sum the stripes.
//
// Guarantee: each total is exact once writers are quiescent; while they run, a read returns a
// value each writer's increments were either wholly counted in or not (no torn counts).
// Memory ordering: increments are release and reads acquire, so a reader that sees one of a
// thread's increments also sees every increment that thread made before it. The queue's gauges
// rely on that (QueueImpl::counts: a job is counted into its next state before out of its last,
// so it never shows in none). It costs nothing over relaxed on x86 (plain loads and stores; the
// locked add either way) and little on ARMv8 (ldar/stlr). Counters publish no other data.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace rail::detail {

inline std::size_t this_thread_stripe() noexcept {
  static std::atomic<std::size_t> next{0};
  // relaxed: only uniqueness-ish spreading matters, not ordering.
  thread_local const std::size_t stripe = next.fetch_add(1, std::memory_order_relaxed);
  return stripe;
}

template <std::size_t Kinds, std::size_t Stripes = 16>
class StripedCounters {
  static_assert((Stripes & (Stripes - 1)) == 0, "Stripes must be a power of two");

 public:
  void add(std::size_t kind, std::uint64_t n = 1) noexcept {
    auto& cell = stripes_[this_thread_stripe() & (Stripes - 1)].v[kind];
    cell.fetch_add(n, std::memory_order_release);  // see the ordering note at the top
  }
  [[nodiscard]] std::uint64_t read(std::size_t kind) const noexcept {
    std::uint64_t sum = 0;
    for (const auto& s : stripes_)
      sum += s.v[kind].load(std::memory_order_acquire);
    return sum;
  }

 private:
  struct alignas(64) Stripe {
    std::array<std::atomic<std::uint64_t>, Kinds> v{};
  };
  std::array<Stripe, Stripes> stripes_{};
};

/// OwnedCounters: the same statistics for a thread that owns them alone (a queue's worker). With
/// one writer an increment needs no locked read-modify-write: a relaxed load and store of the
/// writer's own value cannot lose an update, and cost a plain store instead of a locked
/// instruction, which would also wait for the writer's pending cache misses to drain.
/// Readers load acquire and see each total whole (64-bit atomics do not tear), as above.
template <std::size_t Kinds>
class alignas(64) OwnedCounters {
 public:
  /// add(kind, n): by the owning thread only.
  void add(std::size_t kind, std::uint64_t n = 1) noexcept {
    auto& cell = v_[kind];
    // relaxed load: our own last store. release store: see the ordering note at the top.
    cell.store(cell.load(std::memory_order_relaxed) + n, std::memory_order_release);
  }
  [[nodiscard]] std::uint64_t read(std::size_t kind) const noexcept {
    return v_[kind].load(std::memory_order_acquire);
  }

 private:
  std::array<std::atomic<std::uint64_t>, Kinds> v_{};
};

}  // namespace rail::detail
