// FreeSlots: the free slot indices of a queue. Recycled slots come first; a slot never used
// before is handed out only when no recycled one is free.
//
// Why: a queue preallocates `capacity` slots and payload cells, but the operating system maps a
// page only when it is first touched. Handing out never-used slots only when the recycled ones
// run out keeps the touched set at the most jobs ever in flight at once, so resident memory
// follows the jobs in flight rather than the capacity (a plain FIFO of all slots hands each one
// out in turn and eventually touches them all: a queue of 16 KB payloads with 4 jobs in flight
// grew by ~1 GB over 70,000 adds). A LIFO stack would do the same, but its one top word is
// written by the producer (pop) and every worker (push) for each job; the ring keeps producers
// on its head and workers on its tail, as before.
//
// Reuse distance: a slot freed a moment ago is still hot in the freeing worker's cache, and
// handing it straight back to the producer bounces its lines between the two cores on every job
// (1 producer + 1 worker ran at a third of the speed). So the first `warm` slots are handed out
// fresh before any is reused, and the ring then recycles them oldest first: a slot comes back at
// least `warm` jobs after it was freed, and the touched set stays at max(warm, most jobs ever in
// flight). The queue sizes `warm` in bytes (kWarmBytes of slots and payloads: more than a core's
// private cache, so a reused slot has left the freeing core's cache), not in slots.
//
// Algorithm: `recycled_` is an MPMC ring (mpmc_ring.hpp) with room for every index; `fresh_`
// counts the indices handed out for the first time: [fresh_, capacity) were never used. A pop
// takes fresh indices while fewer than kWarmSlots were handed out, then from the ring, else
// fresh ones again (a CAS on `fresh_`).
// Invariant: every index is in the ring, held by one party, or at or above `fresh_`, exactly once.
// Memory ordering: the ring's push (release) and pop (acquire) carry the previous holder's writes
// to the slot. `fresh_` is relaxed: a never-used slot was written only by the queue's
// constructor, which happens before any add (the queue is published to producers after it).
// Threading: any thread pushes and pops. Atom is std::atomic in the engine and
// DeterministicAtomic in tests/free_slots_test.cpp.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>

#include "rail/detail/mpmc_ring.hpp"

namespace rail::detail {

template <template <class> class Atom = std::atomic>
class BasicFreeSlots {
 public:
  /// The bytes of slots (headers and payloads) handed out fresh before any is reused.
  static constexpr std::size_t kWarmBytes = std::size_t{2} << 20;

  /// BasicFreeSlots(n, slot_bytes): n slots of slot_bytes each (header and payload).
  BasicFreeSlots(std::size_t n, std::size_t slot_bytes)
      : capacity_(n),
        warm_(std::min(
            n, std::max<std::size_t>(16, kWarmBytes / std::max<std::size_t>(slot_bytes, 1)))),
        recycled_(n) {}

  /// warm(): slots handed out fresh before any is reused.
  [[nodiscard]] std::size_t warm() const noexcept { return warm_; }

  /// try_pop(out): a free index (recycled first once warm), or false when every slot is in use.
  bool try_pop(std::uint32_t& out) noexcept {
    if (touched() < warm_ && take_fresh(&out, 1)) return true;
    if (recycled_.try_pop(out)) return true;
    // A full queue's producer retries here on every add: with no never-used slot left, skip the
    // refill's two read-modify-writes.
    if (fresh_left() > 0 && refill(out)) return true;
    // A false from the ring is a hint: a freeing worker may have claimed a cell and not yet
    // written it (later cells may be full), or a refill may hold fresh indices on their way into
    // the ring. Answering "none" then would make add() report `full` with room in the queue, so
    // retry while either is visible (size_approx counts claimed cells).
    while (recycled_.size_approx() > 0 || refilling_.load(std::memory_order_acquire) > 0) {
      if (recycled_.try_pop(out)) return true;
      std::this_thread::yield();
    }
    return false;
  }

  /// try_pop_bulk(out, n): all n indices, or none (returns 0) when fewer than n are free.
  std::size_t try_pop_bulk(std::uint32_t* out, std::size_t n) noexcept {
    // An estimate: the pops below decide. With fewer than n free, popping some only to push them
    // back would churn the ring against the workers; a bulk add then answers `full` (unlike a
    // single pop, it does not wait out a push in flight).
    if (recycled_.size_approx() + fresh_left() < n) return 0;
    if (touched() < warm_ && take_fresh(out, n)) return n;
    std::size_t got = 0;
    while (got < n) {
      const std::size_t k = recycled_.try_pop_bulk(out + got, n - got);
      if (k == 0) break;
      got += k;
    }
    if (got == n || take_fresh(out + got, n - got)) return n;
    for (std::size_t i = 0; i < got; ++i)  // rare: the queue filled up meanwhile
      push(out[i]);
    return 0;
  }

  /// push(i): i is free again.
  void push(std::uint32_t i) noexcept { recycled_.push_held(i); }

  /// touched(): how many slots were ever handed out (the high-water mark of jobs in flight).
  [[nodiscard]] std::size_t touched() const noexcept {
    return fresh_.load(std::memory_order_relaxed);  // relaxed: a figure, orders nothing
  }

 private:
  [[nodiscard]] std::size_t fresh_left() const noexcept { return capacity_ - touched(); }

  /// refill(out): the ring ran dry while never-used slots remain: claim a chunk of them with one
  /// CAS, keep one and put the rest in the ring, so that the next adds pop instead of each
  /// polling an empty ring (whose cell the workers are about to write) and then claiming one.
  bool refill(std::uint32_t& out) noexcept {
    constexpr std::size_t kChunk = 64;
    std::uint32_t chunk[kChunk];
    // acq_rel: try_pop's acquire load sees a refill in flight before the fresh counter it drained.
    refilling_.fetch_add(1, std::memory_order_acq_rel);
    const std::size_t n = std::min(kChunk, fresh_left());
    if (n == 0 || !take_fresh(chunk, n)) {
      const bool one = take_fresh(&out, 1);
      refilling_.fetch_sub(1, std::memory_order_acq_rel);
      return one;
    }
    out = chunk[0];
    recycled_.push_held_bulk(chunk + 1, n - 1);
    refilling_.fetch_sub(1, std::memory_order_acq_rel);  // release: after the pushes above
    return true;
  }

  bool take_fresh(std::uint32_t* out, std::size_t n) noexcept {
    // relaxed: see the header (never-used slots carry only the constructor's writes).
    std::size_t f = fresh_.load(std::memory_order_relaxed);
    do {
      if (n > capacity_ - f) return false;
    } while (!fresh_.compare_exchange_weak(f, f + n, std::memory_order_relaxed));
    for (std::size_t i = 0; i < n; ++i)
      out[i] = static_cast<std::uint32_t>(f + i);
    return true;
  }

  const std::size_t capacity_;
  const std::size_t warm_;
  MpmcRing<std::uint32_t, Atom> recycled_;
  alignas(64) Atom<std::size_t> fresh_{0};
  Atom<std::uint32_t> refilling_{0};  // refills between claiming fresh indices and pushing them
};

using FreeSlots = BasicFreeSlots<>;

}  // namespace rail::detail
