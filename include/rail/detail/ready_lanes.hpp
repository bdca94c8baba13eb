// ReadyLanes: a queue's ready slot indices in one lane per producer thread, so that producers on
// different threads never write the same line to hand a job over, and workers find the non-empty
// lanes through a summary bitmap instead of trying every lane.
//
// Guarantee: each index pushed is popped exactly once. Indices pushed by one thread to one lane
// pop in push order (a chain in chain order); no order holds between lanes. A push never fails
// and never waits: the lanes are intrusive lists through a `next` word per slot, so every index
// that can exist fits, whatever lane it goes to. The lane of a thread is fixed (own_lane()).
//
// Algorithm: each lane is Dmitry Vyukov's intrusive MPSC queue ("Intrusive MPSC node-based
// queue", 1024cores.net) over the slot indices, with a stub node of its own (index capacity +
// lane). A push is one exchange of the lane's tail and one store of the link from the previous
// node: wait-free, and uncontended while one thread pushes to the lane. A chain (add_bulk) goes
// in with one exchange. The single consumer of Vyukov's queue is whichever worker holds the
// lane's consumer flag (a try-lock, taken with exchange): a worker that finds it taken goes on to
// another lane rather than wait, so no worker waits for another's pops (sweep() does wait: it must
// visit every index). Popping is lock-free for the flag's holder, except that a push between its
// exchange and its link hides the nodes behind it until it links (Vyukov's known property, as a
// claimed but unwritten cell of mpmc_ring.hpp): pop reports nothing, any() still reports work.
// Workers pop their home lane first, then the lanes the bitmap names (a bit per lane, set by a
// push that finds it clear, cleared by a worker that finds the lane empty, and set again if the
// lane filled meanwhile). The bitmap is a hint: a lane whose bit a push and a clear raced away is
// found by the scan that pop_bulk falls back to when the hinted lanes gave nothing, and by any(),
// on which sleeping depends; neither relies on it.
// Invariants: an index is in at most one lane at a time (its holder pushes it once, and only a
// pop hands it back); a lane's head is its stub or its next index to pop, and the lane is empty
// exactly when head and tail are both its stub; next[i] is written by i's pusher (nil, then the
// link to its successor from that successor's pusher) and by the consumer that re-pushes the stub.
// Memory ordering: a push's link store is a release and the consumer's load of it an acquire, so
// the pusher's writes to the slot (and a chain's inner links, relaxed, before it) are visible to
// the worker that pops the index. The tail exchange is acq_rel: the next pusher's link store to
// this node comes after this push's nil store in that word's order (its acquire reads our
// release). The consumer flag is taken and given back with acq_rel exchanges, a failed take
// included: each holder sees the previous holder's head, and a holder's look for more work after
// its release sees what a worker it turned away had seen pushed (release()). head_hint is a relaxed
// copy of the head for any() (a hint); the bitmap is relaxed throughout (a hint, see above).
// Threading: push_chain/push_chain_to from any thread; pop_bulk from any thread (workers); sweep
// from one thread at a time (the caller serialises them). Atom is std::atomic in the engine and
// DeterministicAtomic in tests/ready_lanes_test.cpp.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>

#include "rail/detail/cpu_relax.hpp"
#include "rail/detail/striped_counter.hpp"

namespace rail::detail {

template <template <class> class Atom = std::atomic>
class BasicReadyLanes {
 public:
  static constexpr std::size_t kMaxLanes = 64;  // one bitmap word
  static constexpr std::uint32_t kNil = std::numeric_limits<std::uint32_t>::max();

  /// lanes_for(cpus): the lane count for a machine of `cpus` hardware threads: bit_ceil(cpus),
  /// at most kMaxLanes (1 for one).
  static std::size_t lanes_for(std::size_t cpus) noexcept {
    return std::min(kMaxLanes, std::bit_ceil(std::max<std::size_t>(cpus, 1)));
  }

  /// BasicReadyLanes(capacity, lanes): room for indices 0 .. capacity-1 (capacity < 2^29) in
  /// `lanes` lanes (a power of two, 1 .. kMaxLanes).
  BasicReadyLanes(std::size_t capacity, std::size_t lanes)
      : capacity_(static_cast<std::uint32_t>(capacity)),
        mask_(static_cast<std::uint32_t>(lanes - 1)),
        next_(std::make_unique<Atom<std::uint32_t>[]>(capacity + lanes)),
        lanes_(std::make_unique<Lane[]>(lanes)) {
    for (std::size_t i = 0; i < capacity + lanes; ++i)
      next_[i].store(kNil, std::memory_order_relaxed);  // published with the queue
    for (std::uint32_t k = 0; k <= mask_; ++k) {
      lanes_[k].tail.store(stub(k), std::memory_order_relaxed);
      lanes_[k].head = stub(k);
      lanes_[k].head_hint.store(stub(k), std::memory_order_relaxed);
    }
  }
  BasicReadyLanes(const BasicReadyLanes&) = delete;
  BasicReadyLanes& operator=(const BasicReadyLanes&) = delete;

  /// own_lane(): the calling thread's lane: its stripe number (striped_counter.hpp: fixed per
  /// thread, consecutive over threads), so threads spread evenly over the lanes.
  [[nodiscard]] std::uint32_t own_lane() const noexcept {
    return static_cast<std::uint32_t>(this_thread_stripe()) & mask_;
  }

  /// push_chain(idx, n): into the calling thread's lane (own_lane()).
  void push_chain(const std::uint32_t* idx, std::size_t n) noexcept {
    push_chain_to(own_lane(), idx, n);
  }
  /// push_chain_to(lane, idx, n): n indices into `lane`, in order, with one exchange (none: no-op).
  void push_chain_to(std::uint32_t lane, const std::uint32_t* idx, std::size_t n) noexcept {
    if (n == 0) return;
    for (std::size_t i = 0; i + 1 < n; ++i)
      next_[idx[i]].store(idx[i + 1], std::memory_order_relaxed);  // published by the link below
    link(lanes_[lane], idx[0], idx[n - 1]);
    announce(lane);
  }

  /// pop_bulk(out, max, home): up to max indices from one lane: `home`'s, else a lane the bitmap
  /// names, else any lane that holds some (the scan). 0 when none could be taken now.
  std::size_t pop_bulk(std::uint32_t* out, std::size_t max, std::uint32_t home) noexcept {
    home &= mask_;
    if (std::size_t n = take(home, out, max)) return n;
    if (mask_ == 0) return 0;
    // relaxed: a hint (see the header). The lanes after home first, then those before it, so
    // workers with different homes start apart.
    const std::uint64_t hinted = nonempty_.load(std::memory_order_relaxed);
    const std::uint64_t after = (std::uint64_t{2} << home) - 1;  // home and below (0 - 1 at 63)
    for (std::uint64_t bits : {hinted & ~after, hinted & (after >> 1)}) {
      for (; bits != 0; bits &= bits - 1)
        if (std::size_t n = take(static_cast<std::uint32_t>(std::countr_zero(bits)), out, max))
          return n;
    }
    for (std::uint32_t d = 1; d <= mask_; ++d) {
      const std::uint32_t k = (home + d) & mask_;
      if (holds(lanes_[k], k))
        if (std::size_t n = take(k, out, max)) return n;
    }
    return 0;
  }

  /// any(): a hint: some lane holds an index, or a push into one is under way.
  [[nodiscard]] bool any() const noexcept {
    for (std::uint32_t k = 0; k <= mask_; ++k)
      if (holds(lanes_[k], k)) return true;
    return false;
  }

  /// sweep(keep, front): takes every index in every lane now (waiting for each lane's consumer
  /// flag) and calls keep(idx) for each, lane by lane in pop order: the indices it keeps go back
  /// into their lane together, in that order, behind what was pushed meanwhile; the others keep()
  /// disposed of. front(put) runs once, holding the calling thread's lane, and may put(idx)
  /// indices from elsewhere (kept already): they go back into that lane ahead of its own. keep
  /// and front run holding a lane's flag, so workers pass that lane by meanwhile: they must not
  /// wait for the lane's workers. A worker turned away meanwhile may have gone to sleep: the
  /// caller wakes one afterwards if any(). Cold.
  template <class Keep, class Front>
  void sweep(Keep&& keep, Front&& front) noexcept {
    const std::uint32_t own = own_lane();
    for (std::uint32_t k = 0; k <= mask_; ++k) {
      Lane& l = lanes_[k];
      while (l.busy.exchange(true, std::memory_order_acq_rel))  // as take()
        cpu_relax();
      // The kept indices are out of the lane (ours) until they go back as one chain.
      std::uint32_t first = kNil, last = kNil;
      const auto put = [&](std::uint32_t idx) {
        if (first == kNil) {
          first = idx;
        } else {
          next_[last].store(idx, std::memory_order_relaxed);  // published by link()
        }
        last = idx;
      };
      if (k == own) front(put);
      // At most capacity_ pops: every index there at the start is out by then, however fast
      // producers push behind them.
      std::uint32_t idx = 0;
      for (std::size_t n = 0; n < capacity_ && pop_one(l, k, idx); ++n)
        if (keep(idx)) put(idx);
      if (first != kNil) {
        link(l, first, last);
        announce(k);
      }
      release(l);
    }
  }

 private:
  friend struct ReadyLanesTestPeer;  // tests clear the bitmap to reach the scan

  struct alignas(64) Lane {
    Atom<std::uint32_t> tail{0};  // producers' line: the last node pushed
    // The consumer's line: its flag, its head, and the head's copy for hints.
    alignas(64) Atom<bool> busy{false};
    std::uint32_t head = 0;  // written only by the flag's holder
    Atom<std::uint32_t> head_hint{0};
  };

  [[nodiscard]] std::uint32_t stub(std::uint32_t lane) const noexcept { return capacity_ + lane; }
  [[nodiscard]] std::uint64_t lane_bits() const noexcept {
    return mask_ == kMaxLanes - 1 ? ~std::uint64_t{0} : (std::uint64_t{1} << (mask_ + 1)) - 1;
  }

  /// release(l): gives up l's consumer flag. An RMW, acq_rel: it reads the write of every worker
  /// that take() turned away meanwhile (their exchanges of true), so whatever those workers saw
  /// pushed before they were turned away is visible to the holder's look for more work after
  /// this (Dispatcher::next_job's `more`, sweep_ready's wake-up): a job pushed while the flag was
  /// held is then found by the holder, or by the wake-up its push made.
  static void release(Lane& l) noexcept { (void)l.busy.exchange(false, std::memory_order_acq_rel); }

  /// announce(k): lane k was pushed to: its bit is set.
  void announce(std::uint32_t k) noexcept {
    const std::uint64_t bit = std::uint64_t{1} << k;
    // relaxed: a hint (see the header); the read keeps a set bit's line shared while it stays set.
    if ((nonempty_.load(std::memory_order_relaxed) & bit) == 0)
      nonempty_.fetch_or(bit, std::memory_order_relaxed);
  }

  /// link(l, first, last): appends the chain first..last (its inner links stored) to lane l.
  void link(Lane& l, std::uint32_t first, std::uint32_t last) noexcept {
    next_[last].store(kNil, std::memory_order_relaxed);  // published by the exchange's release
    // acq_rel: see the header (the next pusher's link comes after our nil store).
    const std::uint32_t prev = l.tail.exchange(last, std::memory_order_acq_rel);
    // release: publishes the chain's slots and inner links to the consumer's acquire load.
    next_[prev].store(first, std::memory_order_release);
  }

  /// holds(l, k): a hint: lane k is not empty (head and tail are not both its stub).
  [[nodiscard]] bool holds(const Lane& l, std::uint32_t k) const noexcept {
    // relaxed: a hint; a pop acquires what it takes from the links.
    return l.tail.load(std::memory_order_relaxed) != stub(k) ||
           l.head_hint.load(std::memory_order_relaxed) != stub(k);
  }

  /// take(k, out, max): pops up to max indices from lane k unless another worker holds its flag.
  /// Finding the lane empty clears its bit (set again if a push came meanwhile).
  std::size_t take(std::uint32_t k, std::uint32_t* out, std::size_t max) noexcept {
    Lane& l = lanes_[k];
    // acq_rel, and an RMW even when it fails: a worker turned away here may go to sleep on the
    // strength of it, so the holder's release (an RMW too) must read this write and see what
    // was pushed before it (see release()).
    if (l.busy.exchange(true, std::memory_order_acq_rel)) return 0;
    std::size_t n = 0;
    while (n < max && pop_one(l, k, out[n]))
      ++n;
    const bool empty = n == 0 && !holds(l, k);
    release(l);
    if (empty && mask_ != 0) {
      const std::uint64_t bit = std::uint64_t{1} << k;
      nonempty_.fetch_and(~bit, std::memory_order_relaxed);
      if (holds(l, k)) nonempty_.fetch_or(bit, std::memory_order_relaxed);  // a push came
    }
    return n;
  }

  /// pop_one(l, k, out): Vyukov's pop, by the holder of l's flag.
  bool pop_one(Lane& l, std::uint32_t k, std::uint32_t& out) noexcept {
    std::uint32_t h = l.head;
    // acquire: pairs with the link store of the push that appended the successor.
    std::uint32_t nx = next_[h].load(std::memory_order_acquire);
    if (h == stub(k)) {
      if (nx == kNil) return false;  // empty, or a push not yet linked
      set_head(l, nx);
      h = nx;
      nx = next_[h].load(std::memory_order_acquire);
    }
    if (nx != kNil) {
      set_head(l, nx);
      out = h;
      return true;
    }
    // h is the last linked node: unless a push is between its exchange and its link, re-push
    // the stub behind it so that h can leave.
    if (l.tail.load(std::memory_order_acquire) != h) return false;
    link(l, stub(k), stub(k));
    nx = next_[h].load(std::memory_order_acquire);
    if (nx == kNil) return false;  // a push got in before the stub and has not linked yet
    set_head(l, nx);
    out = h;
    return true;
  }

  static void set_head(Lane& l, std::uint32_t h) noexcept {
    l.head = h;
    l.head_hint.store(h, std::memory_order_relaxed);  // a hint for holds()
  }

  std::uint32_t capacity_;
  std::uint32_t mask_;
  std::unique_ptr<Atom<std::uint32_t>[]> next_;  // per slot, then per lane's stub
  std::unique_ptr<Lane[]> lanes_;
  // Bit k: lane k may hold indices (a hint, see the header). Its own line.
  alignas(64) Atom<std::uint64_t> nonempty_{0};
};

using ReadyLanes = BasicReadyLanes<>;

}  // namespace rail::detail
