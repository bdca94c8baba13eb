// StripedCounters: per-queue statistics (added, started, completed, ...) that every job bumps.
// A single shared atomic per statistic would make every producer and worker fight over one cache
// line (~30 ns per increment across cores). Instead each thread adds to a padded stripe of its
// own, or of a few; readers sum the stripes.
// Stripes: a thread whose index (this_thread_index(): unique among live threads) is below
// Stripes owns stripe owned_[index] and adds with a plain load and store (one writer); any other
// thread adds to one of Stripes shared stripes, chosen once per thread, with a locked add. A
// locked add waits for the store buffer to drain, and an add's count comes right after the
// stores that filled the job's slot: a plain store lets them drain in the background. An
// exited thread's stripe keeps its counts; the next thread given its index adds to them (it
// inherits them through the index allocator's mutex, so it reads their latest values).
//
// Guarantee: each total is exact once writers are quiescent; while they run, a read returns a
// value each writer's increments were either wholly counted in or not (no torn counts).
// Memory ordering: increments are release and reads acquire, so a reader that sees one of a
// thread's increments also sees every increment that thread made before it. The queue's gauges
// rely on that (QueueImpl::counts: a job is counted into its next state before out of its last,
// so it never shows in none). It costs nothing over relaxed on x86 (plain loads and stores) and
// little on ARMv8 (ldar/stlr). Counters publish no other data.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "rail/detail/thread_index.hpp"

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
    const std::uint32_t thread = this_thread_index();
    if (thread < Stripes) [[likely]] {
      auto& cell = owned_[thread].v[kind];
      // relaxed load: our own last store, or the stripe's previous owner's (see the header).
      // release store: see the ordering note at the top.
      cell.store(cell.load(std::memory_order_relaxed) + n, std::memory_order_release);
      return;
    }
    auto& cell = shared_[this_thread_stripe() & (Stripes - 1)].v[kind];
    cell.fetch_add(n, std::memory_order_release);  // see the ordering note at the top
  }
  [[nodiscard]] std::uint64_t read(std::size_t kind) const noexcept {
    std::uint64_t sum = 0;
    for (const auto& s : owned_)
      sum += s.v[kind].load(std::memory_order_acquire);
    for (const auto& s : shared_)
      sum += s.v[kind].load(std::memory_order_acquire);
    return sum;
  }

 private:
  struct alignas(64) Stripe {
    std::array<std::atomic<std::uint64_t>, Kinds> v{};
  };
  std::array<Stripe, Stripes> owned_{};   // owned_[i]: the thread holding index i
  std::array<Stripe, Stripes> shared_{};  // the other threads', by stripe
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
