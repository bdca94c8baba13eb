// FreeStack: the free slot indices of a queue, handed out most recently freed first.
//
// Why LIFO: a queue preallocates `capacity` slots and payload cells, but the operating system
// maps a page only when it is first touched. Handing out the slot freed last keeps reusing the
// same few slots (and their cache lines), so resident memory follows the jobs in flight rather
// than the capacity: a FIFO hands out every slot in turn and eventually touches them all (a queue
// of 16 KB payloads with 4 jobs in flight grew by ~1 GB over 70,000 adds).
//
// Algorithm: a Treiber stack over the slot indices. `top_` = tag:32 | (index + 1):32, 0 = empty;
// next_[i] holds the index below i, plus one (0 = bottom). pop reads the top, reads its next,
// and CASes top to (tag + 1, next); push writes next_[i] = top and CASes top to (tag + 1, i).
// Bulk operations move a chain with one CAS: pop_bulk walks n links from the top, push_bulk links
// its indices locally first.
// Invariants: every index is either in the stack (reachable from top_ exactly once) or held by
// one party; the tag grows on every successful CAS.
// ABA: a pop that read top = (t, i) and next_[i] = j can only succeed if top_ is still (t, i);
// any pop or push in between raised the tag, so a stale j is never installed. A false match
// needs exactly 2^32 CASes on one stack between a thread's load and its CAS.
// Memory ordering: push's CAS is release: the pusher's writes to the slot (its payload destroyed,
// the control word marked free) and to next_[i] happen before whoever pops i, whose load and CAS
// of top_ are acquire. next_ entries are relaxed atomics: a popper may read one that a concurrent
// push is rewriting, but then the tag moved and its CAS fails, discarding the value.
// Threading: any thread pushes and pops. Atom is std::atomic in the engine and
// DeterministicAtomic in tests/free_stack_test.cpp.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "rail/detail/assert.hpp"

namespace rail::detail {

template <template <class> class Atom = std::atomic>
class BasicFreeStack {
 public:
  /// BasicFreeStack(n): holds the indices 0..n-1, 0 on top (so a fresh queue starts at slot 0).
  explicit BasicFreeStack(std::size_t n) : next_(std::make_unique<Atom<std::uint32_t>[]>(n)) {
    RAIL_INVARIANT(n < (std::size_t{1} << 31), "slot indices fit in 31 bits");
    for (std::size_t i = 0; i + 1 < n; ++i)
      next_[i].store(static_cast<std::uint32_t>(i + 2), std::memory_order_relaxed);
    if (n > 0) top_.store(pack(0, 1), std::memory_order_release);
  }

  /// try_pop(out): the most recently pushed index, or false when the stack is empty.
  bool try_pop(std::uint32_t& out) noexcept { return try_pop_bulk(&out, 1) == 1; }

  /// try_pop_bulk(out, n): all n indices, or none (returns 0) when fewer than n are free.
  std::size_t try_pop_bulk(std::uint32_t* out, std::size_t n) noexcept {
    if (n == 0) return 0;
    // acquire: sees the next_ links and slot writes of the pushes that built this stack.
    std::uint64_t top = top_.load(std::memory_order_acquire);
    for (;;) {
      std::uint32_t link = link_of(top);
      std::size_t got = 0;
      while (got < n && link != 0) {
        out[got++] = link - 1;
        // relaxed: validated by the CAS below (see the header).
        link = next_[link - 1].load(std::memory_order_relaxed);
      }
      if (got < n) return 0;
      // acq_rel: acquire as above on success; release keeps the tag chain ordered for pushers.
      if (top_.compare_exchange_weak(top, pack(tag_of(top) + 1, link), std::memory_order_acq_rel,
                                     std::memory_order_acquire))
        return n;
    }
  }

  /// push(i): i becomes the top.
  void push(std::uint32_t i) noexcept { push_chain(i, i); }

  /// push_bulk(idx, n): pushes n indices with one CAS; idx[0] ends on top.
  void push_bulk(const std::uint32_t* idx, std::size_t n) noexcept {
    if (n == 0) return;
    for (std::size_t k = 0; k + 1 < n; ++k)
      // relaxed: the chain is ours until the release CAS in push_chain publishes it.
      next_[idx[k]].store(idx[k + 1] + 1, std::memory_order_relaxed);
    push_chain(idx[0], idx[n - 1]);
  }

  /// empty(): a hint (another thread may push or pop at once).
  [[nodiscard]] bool empty() const noexcept {
    return link_of(top_.load(std::memory_order_relaxed)) == 0;  // relaxed: a hint only
  }

 private:
  static constexpr std::uint64_t pack(std::uint32_t tag, std::uint32_t link) noexcept {
    return (std::uint64_t{tag} << 32) | link;
  }
  static constexpr std::uint32_t tag_of(std::uint64_t top) noexcept {
    return static_cast<std::uint32_t>(top >> 32);
  }
  static constexpr std::uint32_t link_of(std::uint64_t top) noexcept {
    return static_cast<std::uint32_t>(top);
  }

  /// push_chain(first, last): first..last are linked already; puts them on top.
  void push_chain(std::uint32_t first, std::uint32_t last) noexcept {
    // relaxed: only the tag and link matter here; the CAS below orders the publication.
    std::uint64_t top = top_.load(std::memory_order_relaxed);
    do {
      // relaxed: published by the release CAS.
      next_[last].store(link_of(top), std::memory_order_relaxed);
      // release: the slot writes and links above happen before a popper's acquire.
    } while (!top_.compare_exchange_weak(top, pack(tag_of(top) + 1, first + 1),
                                         std::memory_order_release, std::memory_order_relaxed));
  }

  alignas(64) Atom<std::uint64_t> top_{0};
  std::unique_ptr<Atom<std::uint32_t>[]> next_;
};

using FreeStack = BasicFreeStack<>;

}  // namespace rail::detail
