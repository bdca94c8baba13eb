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
// takes fresh indices while fewer than `warm` were handed out, then from the caller's stock (see
// Stocks), then from the ring, then from the workers' batches (flushed into the ring), else fresh
// ones again (a CAS on `fresh_`): a slot waiting in a partial batch must not send a pop to a
// never-used one, or a few jobs in flight would walk through every slot.
// Stocks: a producer thread pops from a stock of its own (16 stocks of up to 13 indices per
// queue, one cache line each; thread t uses stock own_stock(): its stripe mod 16), refilled from
// the ring with one bulk pop when empty. So producers on different threads do not meet on the
// ring's head once per job, only once per restock, and a producer knows its next index exactly
// (next_hint) whoever else pops. A stock keeps its indices in the ring's order (oldest popped
// first). Before it takes a never-used slot, a pop takes one from another stock and spills the
// rest of that stock into the ring (a bulk pop spills them all), so that the stocks of threads
// that stopped adding do not keep their indices out of use. Before it answers `full`, a pop holds
// every stock's flag at once (Frozen: no index enters or leaves a stock meanwhile) while it takes
// from a stock (a bulk pop: spills them all) and looks at the batches and the ring again. Bulk pops
// never fill a stock.
// Batches: a worker thread frees into a batch of its own (push_batched: 16
// batches of 14 per queue, one cache line each, worker w uses batch w mod 16) that goes to the ring
// with one bulk push when full, and whole (flush) when a dedicated worker idles or exits, or a pool
// worker ends a turn on this queue in which it ran jobs. So the ring's tail and cells move between
// cores once per batch instead of once per job. Slots a worker frees outside those points (a pool
// worker that fires a timer as the wheel's owner, or cancels this queue's job from another queue's
// handler) stay in its batch until the next flush of it. A producer whose pop finds nothing
// flushes every batch into the ring and always looks again before it answers `full` (another
// producer may have flushed them first), so `full` stays exact: a batched slot is free.
// Costs: a batch is guarded by a spin flag, so freeing is not lock-free: a thread that takes the
// flag may wait for a holder preempted inside its few instructions. Its worker takes it once per
// job; it is shared, and contended, when two threads free into it (a queue's workers w and
// w + 16, or another queue's worker w cancelling this queue's jobs) and when producers flush: a
// producer that finds the queue full reads all 16 batch lines and takes every partial batch on
// each failed pop, so while a queue stays full the batches gain nothing and its producers
// contend with its workers. A stock's flag is taken by its owner once per pop (uncontended
// while one thread uses the stock: its own line, no other writer) and by other producers only
// when the queue looks full. A pop goes to never-used slots only after the ring, the batches and
// the stocks came up empty (the stocks by a look at their counts, which a restock in progress
// can escape), so the touched set exceeds the most jobs in flight (or `warm`) by at most a
// refill's 64 plus what the stocks hold (16 x 13).
// Invariant: every index is in the ring, in a batch, in a stock, held by one party, or at or
// above `fresh_`, exactly once.
// Memory ordering: the ring's push (release) and pop (acquire) carry the previous holder's writes
// to the slot. `fresh_` is relaxed: a never-used slot was written only by the queue's
// constructor, which happens before any add (the queue is published to producers after it). A
// batch's flag is taken with acquire and given back with release: it carries the indices and the
// writes before them from one holder to the next. Its count `n` is also read without the flag, as
// a hint: the store of 0 after the bulk push that emptied it is a release and the hint's load an
// acquire (see flush_batch); other counts are relaxed (a non-zero hint only leads to the flag).
// A stock's flag works as a batch's. Its `n` is read without the flag by next_hint and by the
// looks before a never-used slot, and its `peek` (the index its next pop returns) only by
// next_hint: all relaxed, guesses that order nothing (a stale count only leads to the flag).
// The looks before `full` hold every stock's flag rather than trust a count: a producer's
// restock (its bulk pop from the ring) is not ordered before anything the looker reads, so only
// the flag shows the indices it moved. A look before a never-used slot that misses a stock's
// indices costs one never-used slot, not exactness.
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
#include "rail/detail/striped_counter.hpp"

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

  /// Indices a stock holds, and stocks per queue (producer threads map onto them by stripe; two
  /// sharing one share its flag).
  static constexpr std::uint32_t kStock = 13;
  static constexpr std::uint32_t kStocks = 16;
  /// own_stock(): the calling thread's stock (its stripe, striped_counter.hpp).
  [[nodiscard]] static std::uint32_t own_stock() noexcept {
    return static_cast<std::uint32_t>(this_thread_stripe() % kStocks);
  }

  /// try_pop(out): a free index (recycled first once warm), or false when every slot is in use.
  bool try_pop(std::uint32_t& out) noexcept { return try_pop(out, own_stock()); }
  /// try_pop(out, stock): try_pop as the owner of `stock` (tests pick it; the engine's is
  /// own_stock()).
  bool try_pop(std::uint32_t& out, std::uint32_t stock) noexcept {
    if (touched() >= warm_ && take_stocked(stocks_[stock % kStocks], out)) [[likely]]
      return true;
    if (try_pop_once(out, false)) return true;
    // Always look again: another thread may have flushed the batches meanwhile (else `full`
    // while a free index waits in the ring:
    // ThreadedEngine.TwoAddsRacingForSlotsAnotherQueuesWorkerFreedBothGetOne pins it), and
    // other producers' stocks may hold free indices. With every stock's flag held no index
    // enters or leaves a stock, so one look at the stocks, the batches and the ring sees every
    // free index that stays free (looking one stock at a time, an index could move through the
    // ring from a stock not yet looked at into one already passed).
    const Frozen frozen(*this);
    if (take_frozen(out)) return true;
    flush_batches();
    return try_pop_once(out, true);
  }

  /// next_hint(out): the index the calling thread's next try_pop will probably return, for it to
  /// prefetch that slot. Exact while its stock holds one (unless a producer that found the queue
  /// full takes it first); else the ring's next pop, which the next restock takes first unless
  /// another producer pops before it. Also starts fetching the ring's next cell then. During the
  /// warm phase every producer guesses the next never-used slot: a brief phase, a few MB of
  /// slots.
  [[nodiscard]] bool next_hint(std::uint32_t& out) const noexcept {
    if (const std::size_t f = touched(); f < warm_) {  // try_pop hands out a fresh one
      out = static_cast<std::uint32_t>(f);
      return true;
    }
    const Stock& s = stocks_[own_stock()];
    // relaxed: a guess (see the header); a stock's owner wrote both.
    if (s.n.load(std::memory_order_relaxed) > 0) {
      out = s.peek.load(std::memory_order_relaxed);
      return true;
    }
    const std::uint64_t pops = recycled_.pops();
    recycled_.prefetch(pops);
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
  /// try_pop_once(out, frozen): a pop from the ring, the batches or never-used slots; `frozen`:
  /// the caller holds every stock's flag (Frozen) and has looked in them.
  bool try_pop_once(std::uint32_t& out, bool frozen) noexcept {
    if (touched() < warm_ && take_fresh(&out, 1)) return true;
    if (recycled_.try_pop(out)) return true;
    // A full queue's producer retries here on every add: with no never-used slot left, skip the
    // refill's two read-modify-writes. Before touching never-used slots, take back the freed ones
    // waiting in workers' batches and other producers' stocks: else a few jobs in flight would
    // walk through every slot.
    if (fresh_left() > 0 &&
        (reclaim_batches(out) || (!frozen && take_any_stocked(out)) || refill(out)))
      return true;
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
    if (const std::size_t got = try_pop_bulk_once(out, n, false)) return got;
    // Too few in the ring: take back every stock (holding their flags throughout, so that no
    // producer restocks from what we spill: see try_pop) and every batch, and look again. A
    // flush (ours, or another thread's that emptied the batches first) may still be writing
    // ring cells: while enough indices look free, wait them out as the single pop does (else
    // add_bulk can answer `full` right after wait_idle():
    // ThreadedEngine.ABulkAddAfterDrainFindsEverySlotTheWorkersFreed pins it).
    const Frozen frozen(*this);
    spill_frozen();
    flush_batches();
    for (;;) {
      if (const std::size_t got = try_pop_bulk_once(out, n, true)) return got;
      if (recycled_.size_approx() + fresh_left() < n &&
          refilling_.load(std::memory_order_acquire) == 0)
        return 0;
      std::this_thread::yield();
    }
  }

 private:
  /// try_pop_bulk_once(out, n, frozen): one bulk look; `frozen` as for try_pop_once.
  std::size_t try_pop_bulk_once(std::uint32_t* out, std::size_t n, bool frozen) noexcept {
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
        // Freed slots (batched or stocked) before never-used ones.
        flush_batches();
        if (!frozen) spill_stocks();
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
    flush_batches();
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
  struct alignas(64) Stock {
    Atom<std::uint32_t> flag{0};  // 1 while a thread takes or moves the stock's indices
    Atom<std::uint32_t> n{0};     // idx[0, n) are free, idx[n - 1] next; unlocked: next_hint's
    Atom<std::uint32_t> peek{0};  // idx[n - 1] while n > 0, for next_hint
    std::uint32_t idx[kStock];
  };
  static_assert(sizeof(Stock) == 64, "a stock is one cache line");

  template <class Locked>
  static void lock(Locked& b) noexcept {
    // acquire: sees the indices the last holder wrote; release on unlock publishes ours.
    while (b.flag.exchange(1, std::memory_order_acquire) != 0)
      std::this_thread::yield();
  }
  template <class Locked>
  static void unlock(Locked& b) noexcept {
    b.flag.store(0, std::memory_order_release);
  }

  /// take_stocked(s, out): the caller's stock's next index, restocking it from the ring first if
  /// it is empty; false when the ring had none either.
  bool take_stocked(Stock& s, std::uint32_t& out) noexcept {
    lock(s);
    // relaxed: under the flag, which orders it.
    if (s.n.load(std::memory_order_relaxed) == 0) {
      const auto n = static_cast<std::uint32_t>(recycled_.try_pop_bulk(s.idx, kStock));
      std::reverse(s.idx, s.idx + n);  // the oldest last: popped first
      settle(s, n);
    }
    const bool got = take_held(s, out);
    unlock(s);
    return got;
  }
  /// take_any_stocked(out): an index from the first stock that holds one, each looked at under
  /// its flag in turn (not exact: see try_pop; it keeps never-used slots for when no stock holds
  /// a free one). The rest of that stock goes to the ring: a stock whose thread stopped adding
  /// (or adds seldom) would otherwise keep its indices out of use, and every pop would come here.
  bool take_any_stocked(std::uint32_t& out) noexcept {
    for (Stock& s : stocks_) {
      // A hint: a restock in progress is missed, which costs a never-used slot at most.
      if (s.n.load(std::memory_order_relaxed) == 0) continue;
      lock(s);
      const bool got = take_held(s, out);
      if (got) spill_held(s);
      unlock(s);
      if (got) return true;
    }
    return false;
  }
  /// spill_stocks(): every stock's indices into the ring, one stock at a time.
  void spill_stocks() noexcept {
    for (Stock& s : stocks_) {
      if (s.n.load(std::memory_order_relaxed) == 0) continue;  // a hint, as in take_any_stocked
      lock(s);
      spill_held(s);
      unlock(s);
    }
  }
  /// settle(s, n): the caller holds s's flag and leaves idx[0, n) in it.
  static void settle(Stock& s, std::uint32_t n) noexcept {
    // relaxed: read unlocked only by next_hint, as a guess.
    s.n.store(n, std::memory_order_relaxed);
    if (n > 0) s.peek.store(s.idx[n - 1], std::memory_order_relaxed);
  }

  /// Frozen: holds every stock's flag, in index order, for its lifetime. Other code holds at
  /// most one stock flag at a time and never waits for another while holding it, so the order
  /// rules out deadlock. Used only where the queue looks full (a cold path).
  class Frozen {
   public:
    explicit Frozen(BasicFreeSlots& f) noexcept : f_(f) {
      for (Stock& s : f_.stocks_)
        lock(s);
    }
    ~Frozen() {
      for (Stock& s : f_.stocks_)
        unlock(s);
    }
    Frozen(const Frozen&) = delete;
    Frozen& operator=(const Frozen&) = delete;

   private:
    BasicFreeSlots& f_;
  };
  /// take_frozen(out): under Frozen, an index from the first stock that holds one.
  bool take_frozen(std::uint32_t& out) noexcept {
    for (Stock& s : stocks_)
      if (take_held(s, out)) return true;
    return false;
  }
  /// spill_frozen(): under Frozen, every stock's indices into the ring.
  void spill_frozen() noexcept {
    for (Stock& s : stocks_)
      spill_held(s);
  }
  /// take_held(s, out): the caller holds s's flag: its next index, or false when it is empty.
  static bool take_held(Stock& s, std::uint32_t& out) noexcept {
    std::uint32_t n = s.n.load(std::memory_order_relaxed);  // relaxed: under the flag
    if (n == 0) return false;
    out = s.idx[--n];
    settle(s, n);
    return true;
  }
  /// spill_held(s): the caller holds s's flag: its indices go to the ring.
  void spill_held(Stock& s) noexcept {
    const std::uint32_t n = s.n.load(std::memory_order_relaxed);  // relaxed: under the flag
    if (n == 0) return;
    recycled_.push_held_bulk(s.idx, n);
    settle(s, 0);
  }
  /// flush_batches(): every batch into the ring (a pop found the ring empty).
  void flush_batches() noexcept {
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
  std::array<Stock, kStocks> stocks_{};
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
