// WorkerStash: the few ready slot indices a worker took from its queue's ready ring in one bulk
// pop, which the worker runs one by one and which idle workers of the same queue may steal.
//
// Why it exists: a job handed from a producer to a worker crosses cores several times (its ready
// ring cell, the ring's head, its slot). Popping a batch with one CAS amortizes the ring's part
// over the batch and lets the worker prefetch its slots a few jobs ahead (peek). A private batch
// would make jobs wait behind a slow handler while other workers sit idle; stealing removes that:
// an idle worker takes the oldest index of a busy worker's stash before it sleeps.
//
// Algorithm: a bounded array of kCapacity cells and one 64-bit word `range_` = tail:32 | head:32
// (positions; cell = position mod kCapacity). The owner fills only an empty stash: it writes the
// cells at [tail, tail + n) and then stores the new tail with one release store. Owner and thieves
// take the oldest position `head` the same way: read its cell, then CAS range_ from the value they
// read to head + 1; the CAS winner owns that index.
// Invariants: head <= tail <= head + kCapacity (positions mod 2^32); the cells at [head, tail)
// are never written while the range holds them, because the owner writes only when head == tail.
// Why the plain store in fill() is safe: thieves only CAS a non-empty range, and the owner fills
// only after seeing it empty, so no CAS can interleave with the owner's load-then-store; a thief
// holding an older, non-empty snapshot fails its CAS because head and tail only grow.
// ABA: a thief's snapshot could only match again after 2^32 positions went through this one
// stash while the thief sat between its load and its CAS; the worker would have to run four
// billion jobs meanwhile, which the engine does not guard against (as with ctl's seq).
// Memory ordering: fill() writes cells relaxed and publishes them with the release store of
// range_; take()'s acquire load of range_ therefore sees the cell values. The winning CAS is
// acq_rel so that, chained through range_, each taker's read of its cell happens before a later
// fill() overwrites it (the owner's next fill follows its own acquire load that saw the range
// empty). The cells are atomics only because a losing thief may read a cell the owner is
// rewriting (such a read is discarded by the failed CAS), and because peek() reads them
// unsynchronised: the index it names is a prefetch hint, which may be taken or stale by then.
// Threading: fill() by the owning worker only; take(), peek() and empty() by any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

namespace rail::detail {

/// Atom is std::atomic in the engine and DeterministicAtomic in tests/slot_table_test.cpp.
template <template <class> class Atom = std::atomic>
class alignas(64) BasicWorkerStash {
 public:
  static constexpr std::uint32_t kCapacity = 16;

  /// fill(idx, n): the owner hands n <= kCapacity indices to the stash. Requires an empty stash
  /// (the owner's last take() returned false).
  void fill(const std::uint32_t* idx, std::uint32_t n) noexcept {
    // Relaxed: only the owner writes range_ outside CASes, and it saw the stash empty through
    // its own acquire load in take(), so this reads its own latest value.
    const std::uint64_t r = range_.load(std::memory_order_relaxed);
    const auto head = static_cast<std::uint32_t>(r);
    for (std::uint32_t i = 0; i < n; ++i)
      // Relaxed: published by the release store below.
      cells_[(head + i) % kCapacity].store(idx[i], std::memory_order_relaxed);
    // Release: a taker's acquire load of range_ sees the cells written above.
    range_.store(pack(head, head + n), std::memory_order_release);
  }

  /// take(out): moves the oldest index into out and returns true, or returns false when empty.
  bool take(std::uint32_t& out) noexcept {
    // Acquire: pairs with fill()'s release store (the cells' values).
    std::uint64_t r = range_.load(std::memory_order_acquire);
    for (;;) {
      const auto head = static_cast<std::uint32_t>(r);
      const auto tail = static_cast<std::uint32_t>(r >> 32);
      if (head == tail) return false;
      // Relaxed: range_'s acquire above ordered it; a concurrent rewrite implies range_ changed,
      // and then the CAS below fails and the value is dropped.
      const std::uint32_t v = cells_[head % kCapacity].load(std::memory_order_relaxed);
      // acq_rel: the winner's cell read is ordered before the owner's next fill (see the header);
      // on failure r is reloaded with acquire for the next round's cell read.
      if (range_.compare_exchange_weak(r, pack(head + 1, tail), std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
        out = v;
        return true;
      }
    }
  }

  /// peek(k, out): a hint for prefetching: the index k places after the oldest, if the stash
  /// held one when looked at. It may be taken (or stolen) by the time the caller uses it, and
  /// from a thread other than the owner the cell may show an older fill's index: only a
  /// prefetch may act on it. Every value a cell holds is an index some fill stored, or 0.
  bool peek(std::uint32_t k, std::uint32_t& out) const noexcept {
    // Relaxed: a hint; the cell read is atomic, so a concurrent fill is no data race.
    const std::uint64_t r = range_.load(std::memory_order_relaxed);
    const auto head = static_cast<std::uint32_t>(r);
    const auto tail = static_cast<std::uint32_t>(r >> 32);
    if (tail - head <= k) return false;
    out = cells_[(head + k) % kCapacity].load(std::memory_order_relaxed);
    return true;
  }

  /// empty(): a hint for thieves scanning stashes; false may be stale by the time they act.
  [[nodiscard]] bool empty() const noexcept {
    // Relaxed: a hint only; take() revalidates.
    const std::uint64_t r = range_.load(std::memory_order_relaxed);
    return static_cast<std::uint32_t>(r) == static_cast<std::uint32_t>(r >> 32);
  }

 private:
  static constexpr std::uint64_t pack(std::uint32_t head, std::uint32_t tail) noexcept {
    return (std::uint64_t{tail} << 32) | head;
  }

  Atom<std::uint64_t> range_{0};
  std::array<Atom<std::uint32_t>, kCapacity> cells_{};
};

using WorkerStash = BasicWorkerStash<>;

}  // namespace rail::detail
