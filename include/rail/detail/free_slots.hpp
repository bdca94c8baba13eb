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
// takes fresh indices while fewer than `warm` were handed out, then from the ring, then from the
// workers' batches (flushed into the ring), else fresh ones again (a CAS on `fresh_`): a slot
// waiting in a partial batch must not send a pop to a never-used one, or a few jobs in flight
// would walk through every slot.
// Batches: a worker thread frees into a batch of its own (push_batched: 16 batches of 14 per
// queue, one cache line each, worker w uses batch w mod 16) that goes to the ring with one bulk
// push when full, and whole (flush) when a dedicated worker idles or exits, or a pool worker ends
// a turn on this queue in which it ran jobs. So the ring's tail and cells move between cores once
// per batch instead of once per job. Slots a worker frees outside those points (a pool worker
// that fires a timer as the wheel's owner, or cancels this queue's job from another queue's
// handler) stay in its batch until the next flush of it. A producer whose pop finds nothing
// flushes every batch into the ring and always looks again before it answers `full` (another
// producer may have flushed them first), so `full` stays exact: a batched slot is free.
// Costs: a batch is guarded by a spin flag, so freeing is not lock-free: a thread that takes the
// flag may wait for a holder preempted inside its few instructions. Its worker takes it once per
// job; it is shared, and contended, when two threads free into it (a queue's workers w and
// w + 16, or another queue's worker w cancelling this queue's jobs) and when producers flush: a
// producer that finds the queue full reads all 16 batch lines and takes every partial batch on
// each failed pop, so while a queue stays full the batches gain nothing and its producers
// contend with its workers. A pop goes to never-used slots only after the ring and the batches
// came up empty, so the touched set exceeds the most jobs in flight (or `warm`) by at most a
// refill's 64.
// Invariant: every index is in the ring, in a batch, held by one party, or at or above `fresh_`,
// exactly once.
// Memory ordering: the ring's push (release) and pop (acquire) carry the previous holder's writes
// to the slot. `fresh_` is relaxed: a never-used slot was written only by the queue's
// constructor, which happens before any add (the queue is published to producers after it). A
// batch's flag is taken with acquire and given back with release: it carries the indices and the
// writes before them from one holder to the next. Its count `n` is also read without the flag, as
// a hint: the store of 0 after the bulk push that emptied it is a release and the hint's load an
// acquire (see flush_batch); other counts are relaxed (a non-zero hint only leads to the flag).
// Threading: any thread pushes and pops. Atom is std::atomic in the engine and
// DeterministicAtomic in tests/free_slots_test.cpp.
#pragma once

#include <algorithm>
#include <array>
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

  /// Indices a batch holds before it goes to the ring, and batches per queue (worker threads map
  /// onto them by index; two sharing one only share its flag).
  static constexpr std::uint32_t kBatch = 14;
  static constexpr std::uint32_t kBatches = 16;

  /// try_pop(out): a free index (recycled first once warm), or false when every slot is in use.
  bool try_pop(std::uint32_t& out) noexcept {
    if (try_pop_once(out)) return true;
    // Always look again: another thread may have flushed the batches meanwhile (else `full`
    // while a free index waits in the ring:
    // ThreadedEngine.TwoAddsRacingForSlotsAnotherQueuesWorkerFreedBothGetOne pins it).
    flush_all();
    return try_pop_once(out);
  }

  /// next_hint(out, popped): the index the calling thread's next try_pop will probably return,
  /// for it to prefetch that slot; `popped` is how many it popped since its previous call. Also
  /// starts fetching the ring cell of the pop after that one, so that the next guess hits.
  /// Recycled slots are guessed only while the caller looks like the only popper: with several
  /// producers the next index goes to another one as often as not, and a prefetch for writing
  /// would pull its lines away from the producer that fills them. So the guess is made only if
  /// the ring's pop count moved by exactly `popped` since the caller's previous call (remembered
  /// per thread, for the last 4 queues it added to). During the warm phase every producer guesses
  /// the next never-used slot: a brief phase, a few MB of slots.
  [[nodiscard]] bool next_hint(std::uint32_t& out, std::size_t popped) const noexcept {
    if (const std::size_t f = touched(); f < warm_) {  // try_pop_once hands out a fresh one
      out = static_cast<std::uint32_t>(f);
      return true;
    }
    // Keyed by address, as a number: a queue rebuilt at a forgotten one's address costs at most
    // one wrong guess.
    struct Last {
      std::uintptr_t ring = 0;
      std::uint64_t pops = 0;
    };
    thread_local std::array<Last, 4> last_pops{};
    thread_local std::uint32_t next_victim = 0;
    const auto key = reinterpret_cast<std::uintptr_t>(this);
    Last* last = nullptr;
    for (Last& l : last_pops)
      if (l.ring == key) last = &l;
    const std::uint64_t pops = recycled_.pops();
    if (last == nullptr) {  // a queue this thread did not add to lately: learn, do not guess
      last_pops[next_victim++ % last_pops.size()] = {key, pops};
      return false;
    }
    const bool alone = pops - last->pops == popped;
    last->pops = pops;
    if (!alone) return false;
    recycled_.prefetch(pops + 1);
    return recycled_.peek(pops, out);
  }

  /// push_batched(i, worker): i is free again, freed by worker thread `worker` (see Batches).
  void push_batched(std::uint32_t i, std::uint32_t worker) noexcept {
    Batch& b = batches_[worker % kBatches];
    lock(b);
    // relaxed: under the flag, which orders it.
    const std::uint32_t n = b.n.load(std::memory_order_relaxed);
    b.idx[n] = i;
    if (n + 1 == kBatch) {
      spill(b, kBatch);
    } else {
      // relaxed: a non-zero count only sends a flusher to the flag, whose acquire orders idx.
      b.n.store(n + 1, std::memory_order_relaxed);
    }
    unlock(b);
  }
  /// flush(worker): worker's batch goes to the ring (a dedicated worker idles or exits, or a pool
  /// worker's turn on this queue ended).
  void flush(std::uint32_t worker) noexcept { flush_batch(batches_[worker % kBatches]); }

 private:
  bool try_pop_once(std::uint32_t& out) noexcept {
    if (touched() < warm_ && take_fresh(&out, 1)) return true;
    if (recycled_.try_pop(out)) return true;
    // A full queue's producer retries here on every add: with no never-used slot left, skip the
    // refill's two read-modify-writes. Before touching never-used slots, take back the freed ones
    // waiting in workers' batches: else a few jobs in flight would walk through every slot.
    if (fresh_left() > 0 && (reclaim_batches(out) || refill(out))) return true;
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

 public:
  /// try_pop_bulk(out, n): all n indices, or none (returns 0) when fewer than n are free.
  std::size_t try_pop_bulk(std::uint32_t* out, std::size_t n) noexcept {
    if (const std::size_t got = try_pop_bulk_once(out, n)) return got;
    flush_all();
    // A flush (ours, or another thread's that emptied the batches first) may still be writing
    // ring cells: while enough indices look free, wait them out as the single pop does (else
    // add_bulk can answer `full` right after wait_idle():
    // ThreadedEngine.ABulkAddAfterDrainFindsEverySlotTheWorkersFreed pins it).
    for (;;) {
      if (const std::size_t got = try_pop_bulk_once(out, n)) return got;
      if (recycled_.size_approx() + fresh_left() < n &&
          refilling_.load(std::memory_order_acquire) == 0)
        return 0;
      std::this_thread::yield();
    }
  }

 private:
  std::size_t try_pop_bulk_once(std::uint32_t* out, std::size_t n) noexcept {
    // An estimate: the pops below decide. With fewer than n free, popping some only to push them
    // back would churn the ring against the workers; a bulk add then answers `full` (unlike a
    // single pop, it does not wait out a push in flight).
    if (recycled_.size_approx() + fresh_left() < n) return 0;
    if (touched() < warm_ && take_fresh(out, n)) return n;
    std::size_t got = 0;
    bool flushed = false;
    while (got < n) {
      const std::size_t k = recycled_.try_pop_bulk(out + got, n - got);
      if (k == 0) {
        if (flushed) break;
        flush_all();  // freed slots before never-used ones, as in try_pop_once
        flushed = true;
        continue;
      }
      got += k;
    }
    if (got == n || take_fresh(out + got, n - got)) return n;
    for (std::size_t i = 0; i < got; ++i)  // rare: the queue filled up meanwhile
      push(out[i]);
    return 0;
  }

 public:
  /// push(i): i is free again.
  void push(std::uint32_t i) noexcept { recycled_.push_held(i); }

  /// touched(): how many slots were ever handed out (the high-water mark of jobs in flight).
  [[nodiscard]] std::size_t touched() const noexcept {
    return fresh_.load(std::memory_order_relaxed);  // relaxed: a figure, orders nothing
  }

 private:
  [[nodiscard]] std::size_t fresh_left() const noexcept { return capacity_ - touched(); }

  /// reclaim_batches(out): the ring ran dry: flush the workers' batches into it and pop again.
  bool reclaim_batches(std::uint32_t& out) noexcept {
    flush_all();
    return recycled_.try_pop(out);
  }

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

  struct alignas(64) Batch {
    Atom<std::uint32_t> flag{0};  // 1 while a thread moves the batch's indices
    Atom<std::uint32_t> n{0};     // idx[0, n) are free; read unlocked only as a hint
    std::uint32_t idx[kBatch];
  };
  static_assert(sizeof(Batch) == 64, "a batch is one cache line");

  static void lock(Batch& b) noexcept {
    // acquire: sees the indices the last holder wrote; release on unlock publishes ours.
    while (b.flag.exchange(1, std::memory_order_acquire) != 0)
      std::this_thread::yield();
  }
  static void unlock(Batch& b) noexcept { b.flag.store(0, std::memory_order_release); }
  /// flush_all(): every batch into the ring (a producer found nothing).
  void flush_all() noexcept {
    for (Batch& b : batches_)
      flush_batch(b);
  }
  void flush_batch(Batch& b) noexcept {
    // A hint. acquire: a 0 stored by a spill (another flusher's, or the worker's own full batch;
    // release) orders that spill's ring push before our next pop; an append made before the
    // caller's pop (ordered by the caller's synchronisation with the freeing worker: drain's
    // counts, or a handle's wait once no stale handler still pins the slot) is seen.
    if (b.n.load(std::memory_order_acquire) == 0) return;
    lock(b);
    spill(b, b.n.load(std::memory_order_relaxed));  // relaxed: under the flag
    unlock(b);
  }
  /// spill(b, n): the caller holds b's flag: its n indices go to the ring and b is empty.
  void spill(Batch& b, std::uint32_t n) noexcept {
    recycled_.push_held_bulk(b.idx, n);
    b.n.store(0, std::memory_order_release);  // after the push: see flush_batch's hint
  }

  const std::size_t capacity_;
  const std::size_t warm_;
  std::array<Batch, kBatches> batches_{};
  MpmcRing<std::uint32_t, Atom> recycled_;
  alignas(64) Atom<std::size_t> fresh_{0};
  Atom<std::uint32_t> refilling_{0};  // refills between claiming fresh indices and pushing them
};

using FreeSlots = BasicFreeSlots<>;

/// freeing_worker(): this thread's worker index for free-slot batches (set by worker threads,
/// dedicated and pooled), or -1: any other thread frees straight into the ring.
inline int& freeing_worker() noexcept {
  thread_local int w = -1;
  return w;
}

}  // namespace rail::detail
