// MpmcRing<T, Atom>: a bounded, lock-free, multi-producer multi-consumer FIFO ring of trivially
// copyable values (the engine keeps slot indices in it). It never allocates after construction.
//
// Guarantee: each value that try_push/try_push_bulk accepts is returned by exactly one
// try_pop/try_pop_bulk, and successful operations are linearizable as a FIFO at their CAS on
// tail_/head_ (per the Vyukov protocol: the value at position p is the p-th value pushed and the
// p-th value popped). A `false`/0 return ("full"/"empty") is a hint, not a linearizable
// observation; see Progress.
//
// Algorithm: Dmitry Vyukov, "Bounded MPMC queue" (2010), 1024cores.net. Each cell carries a
// sequence number saying which lap it is ready for; producers claim positions by CAS on tail_,
// consumers by CAS on head_, and the cell's sequence number hands the value across. Two changes:
//   * seq counts half-steps, as rigtorp::MPMCQueue's "turn" does: a cell holding position p's slot
//     is free for p when seq == 2p and full with p's value when seq == 2p + 1. Vyukov's encoding
//     (free: p, full: p + 1) makes "full for p" equal "free for p + 1" when capacity is 1, so his
//     queue requires capacity >= 2; ours is exact for every power of two including 1.
//   * try_push_bulk/try_pop_bulk claim up to n consecutive positions with one CAS (see there).
//   * a 4-byte T (the engine's slot indices) shares one 64-bit word with the low 32 bits of its
//     cell's seq (PackedCell): 8 bytes per cell instead of 16, so a ring holds twice as many
//     cells per cache line and costs half the memory per queued job. Comparing 32-bit seqs
//     modulo 2^32 is exact here: a cell's seq is never more than one lap (2 * capacity half-steps,
//     at most 2^30 because packed rings hold at most 2^29 cells) away from the value a thread
//     compares it with, well inside the +-2^31 that a signed 32-bit difference orders, and
//     ownership is still decided by the CAS on the 64-bit head_/tail_. (A thread stalled for
//     some 2^29 operations between reading head_/tail_ and reading a cell could misread it as full
//     or empty; callers treat both as "try again", so it costs a retry, never a value.)
// Positions are 64-bit and only grow (seq holds 2 * position, so 2^63 positions are usable); at
// 10^9 operations per second that lasts ~290 years, so wrap-around is not handled.
//
// Threading contract: any number of threads may call any member concurrently, except the
// constructor and destructor, which must not overlap any other call. The owner publishes the ring
// to other threads by the usual means (thread creation, a mutex, a release store).
//
// Memory-ordering contract: the release store of a cell's seq that marks it full (2p + 1)
// publishes the value written at position p to the consumer whose acquire load of that seq sees
// 2p + 1. The release store that marks it free for the next lap (2(p + capacity)) orders the
// consumer's read of the value before the next producer's overwrite, which that producer's acquire
// load of seq sees. head_ and tail_ are only position counters: they are accessed relaxed because
// no data is published through them. There are no standalone fences (ThreadSanitizer under clang
// models acquire/release on atomics, not std::atomic_thread_fence).
//
// Progress: try_push/try_pop never block on a full or empty ring; they return false. But the
// protocol is not lock-free in the strict sense (Vyukov's known property): a producer that has
// claimed position p and is preempted before publishing makes every consumer report "empty" at p,
// even if later positions are already full, until it resumes; symmetrically, a consumer preempted
// between claim and release makes producers report "full" one lap later. Callers therefore treat
// false as "try again later", never as proof that the ring is empty or full.
//
// Shutdown idiom: the ring has no close. Owners stop calling try_push, then drain with try_pop
// until it returns false with no producer left mid-push (e.g. after joining the producers); the
// destructor does not drain and T is trivially destructible, so nothing leaks.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <type_traits>

#include "rail/detail/prefetch.hpp"
#include "rail/error.hpp"

namespace rail::detail {

// A fixed 64, not std::hardware_destructive_interference_size: g++ derives that constant from
// -mtune and warns (-Winterference-size) when it shapes a header's layout, because two TUs built
// with different flags would disagree on this class's layout (an ODR violation). 64 is the line
// size of every x86-64 and most AArch64 parts rail targets.
inline constexpr std::size_t kRingCacheLine = 64;

template <class T, template <class> class Atom = std::atomic>
class MpmcRing {
  static_assert(std::is_trivially_copyable_v<T>,
                "MpmcRing<T>: T must be trivially copyable; cells are copied by assignment inside "
                "noexcept operations and never destroyed individually (store a pointer or an index "
                "for anything richer)");
  static_assert(std::is_nothrow_default_constructible_v<T>,
                "MpmcRing<T>: T must be nothrow default constructible; every cell holds a T from "
                "construction on");

 public:
  /// MpmcRing(min_capacity) allocates bit_ceil(min_capacity) cells. Throws rail::Error
  /// (invalid_option) when min_capacity is 0 or above 2^31 (2^29 for a 4-byte T: packed cells).
  explicit MpmcRing(std::size_t min_capacity)
      : capacity_(checked_capacity(min_capacity)),
        mask_(capacity_ - 1),
        // Remapping needs 2 * kShuffleBits index bits to swap; smaller rings are a few lines long
        // anyway, so they keep the identity map.
        shuffle_bits_(capacity_ >= (std::size_t{1} << (2 * kShuffleBits)) ? kShuffleBits : 0),
        cells_(static_cast<Cell*>(
            ::operator new (buffer_bytes(capacity_), std::align_val_t{kRingCacheLine}))) {
    std::uninitialized_value_construct_n(cells_, capacity_);
    for (std::uint64_t pos = 0; pos < capacity_; ++pos) {
      // Relaxed: the constructor runs before any other thread can see the ring (threading
      // contract), so whatever publishes the ring publishes these stores too.
      cell_at(pos).init(seq_of(free_for(pos)));
    }
  }

  MpmcRing(const MpmcRing&) = delete;
  MpmcRing& operator=(const MpmcRing&) = delete;

  ~MpmcRing() {
    std::destroy_n(cells_, capacity_);
    ::operator delete (cells_, std::align_val_t{kRingCacheLine});
  }

  /// push_held(value): try_push for a ring with room for every value that can be in it at once
  /// (the engine's index rings: a cell per slot). A failed try_push there is never "full": it is
  /// the transient report of a cell whose previous lap's consumer claimed it but has not yet
  /// released it, a few instructions from done. So retry rather than drop: dropping would lose
  /// the job whose index this is.
  void push_held(const T& value) noexcept {
    while (!try_push(value))
      std::this_thread::yield();
  }
  /// push_held_bulk(values, n): push_held for n values, in order, as few bulk claims as the
  /// transient reports allow.
  void push_held_bulk(const T* values, std::size_t n) noexcept {
    for (std::size_t done = 0; done < n;) {
      const std::size_t k = try_push_bulk(values + done, n - done);
      if (k == 0) std::this_thread::yield();
      done += k;
    }
  }

  /// try_push(value) appends a copy of value and returns true, or returns false without blocking
  /// when the cell at tail_ is not yet free (the ring is full, or a consumer holding that cell from
  /// the previous lap has not released it yet).
  [[nodiscard]] bool try_push(const T& value) noexcept {
    // Relaxed: tail_ only names a candidate position; a stale value is caught below by the cell's
    // seq (or by the CAS), and no data is read through it.
    std::uint64_t pos = tail_.value.load(std::memory_order_relaxed);
    for (;;) {
      Cell& cell = cell_at(pos);
      // Acquire: pairs with the consumer's release store of free_for(pos) in try_pop, so its read
      // of the previous lap's value happens before our overwrite below.
      const std::uint64_t seq = cell.load_seq(std::memory_order_acquire);
      if (seq == seq_of(free_for(pos))) {
        // Relaxed: the CAS only decides which producer owns pos; atomicity of the RMW on the
        // single modification order of tail_ makes the winner unique, and the value travels
        // through seq. On failure pos is reloaded with the current tail_.
        if (tail_.value.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed,
                                              std::memory_order_relaxed)) {
          // Release: publishes the value to the consumer whose acquire load sees full_at(pos).
          cell.publish(seq_of(full_at(pos)), value);
          return true;
        }
      } else if (seq_diff(seq, seq_of(free_for(pos))) < 0) {
        return false;  // the cell still holds position pos - capacity: full
      } else {
        // Another producer already took pos; our tail_ was stale. Relaxed: as above.
        pos = tail_.value.load(std::memory_order_relaxed);
      }
    }
  }

  /// try_pop(out) moves the oldest value into out and returns true, or returns false without
  /// blocking when the cell at head_ is not yet full (the ring is empty, or the producer that
  /// claimed that position has not published yet; see Progress).
  [[nodiscard]] bool try_pop(T& out) noexcept {
    // Relaxed: as in try_push; seq validates the candidate.
    std::uint64_t pos = head_.value.load(std::memory_order_relaxed);
    for (;;) {
      Cell& cell = cell_at(pos);
      // Acquire: pairs with the producer's release store of full_at(pos), so its write of the
      // value happens before our read below.
      const std::uint64_t seq = cell.load_seq(std::memory_order_acquire);
      if (seq == seq_of(full_at(pos))) {
        // Relaxed: ownership only, as in try_push.
        if (head_.value.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed,
                                              std::memory_order_relaxed)) {
          out = cell.read();
          // Release: orders our read of the value before the next lap's producer overwrites it
          // (that producer's acquire load sees free_for(pos + capacity)).
          cell.release_to(seq_of(free_for(pos + capacity_)));
          return true;
        }
      } else if (seq_diff(seq, seq_of(full_at(pos))) < 0) {
        return false;  // the cell is free for pos but not yet published: empty
      } else {
        pos = head_.value.load(std::memory_order_relaxed);  // stale head_; relaxed as above
      }
    }
  }

  /// try_push_bulk(values, n) appends values[0..k) for the largest k <= n whose cells are free,
  /// claiming them with one CAS on tail_, and returns k (0 when full or n == 0). Never blocks.
  ///
  /// Why the scanned prefix stays free until the CAS: a cell seen with seq == free_for(q) can only
  /// change when the producer that owns position q publishes it (no consumer touches it until it is
  /// full_at(q)). Owning q requires moving tail_ past q, so if our CAS from pos to pos + k wins,
  /// no one else owned any q in [pos, pos + k) (tail_ only grows: no ABA), and every seq we saw is
  /// still current. Publishing is per cell, in position order, so consumers can start on the
  /// first value while we still write the rest.
  [[nodiscard]] std::size_t try_push_bulk(const T* values, std::size_t n) noexcept {
    n = std::min(n, capacity_);  // position pos + capacity is the same cell as pos
    if (n == 0) return 0;
    // Relaxed: candidate only, validated by seq and the CAS (see try_push).
    std::uint64_t pos = tail_.value.load(std::memory_order_relaxed);
    for (;;) {
      std::size_t k = 0;
      bool stale = false;
      while (k < n) {
        // Acquire: same pairing as try_push, once per cell we may overwrite.
        const std::uint64_t seq = cell_at(pos + k).load_seq(std::memory_order_acquire);
        if (seq == seq_of(free_for(pos + k))) {
          ++k;
          continue;
        }
        stale = seq_diff(seq, seq_of(free_for(pos + k))) > 0;
        break;
      }
      if (k == 0) {
        if (!stale) return 0;                               // full at pos
        pos = tail_.value.load(std::memory_order_relaxed);  // stale tail_; relaxed as above
        continue;
      }
      // Relaxed: ownership of [pos, pos + k) only, as in try_push. A stale pos fails here.
      if (tail_.value.compare_exchange_weak(pos, pos + k, std::memory_order_relaxed,
                                            std::memory_order_relaxed)) {
        for (std::size_t i = 0; i < k; ++i) {
          // Release: publishes values[i] to the consumer of pos + i (see try_push).
          cell_at(pos + i).publish(seq_of(full_at(pos + i)), values[i]);
        }
        return k;
      }
    }
  }

  /// try_pop_bulk(out, max) moves the oldest k <= max values into out[0..k), claiming them with
  /// one CAS on head_, and returns k (0 when empty or max == 0). Never blocks. The argument that
  /// the scanned prefix stays full until the CAS mirrors try_push_bulk: a cell at full_at(q)
  /// changes only when the consumer owning q releases it.
  [[nodiscard]] std::size_t try_pop_bulk(T* out, std::size_t max) noexcept {
    max = std::min(max, capacity_);
    if (max == 0) return 0;
    // Relaxed: candidate only (see try_pop).
    std::uint64_t pos = head_.value.load(std::memory_order_relaxed);
    for (;;) {
      std::size_t k = 0;
      bool stale = false;
      while (k < max) {
        // Acquire: same pairing as try_pop, once per cell we will read.
        const std::uint64_t seq = cell_at(pos + k).load_seq(std::memory_order_acquire);
        if (seq == seq_of(full_at(pos + k))) {
          ++k;
          continue;
        }
        stale = seq_diff(seq, seq_of(full_at(pos + k))) > 0;
        break;
      }
      if (k == 0) {
        if (!stale) return 0;                               // empty at pos
        pos = head_.value.load(std::memory_order_relaxed);  // stale head_; relaxed as above
        continue;
      }
      // Relaxed: ownership only (see try_push).
      if (head_.value.compare_exchange_weak(pos, pos + k, std::memory_order_relaxed,
                                            std::memory_order_relaxed)) {
        for (std::size_t i = 0; i < k; ++i) {
          Cell& cell = cell_at(pos + i);
          out[i] = cell.read();
          // Release: orders our read before the next lap's overwrite (see try_pop).
          cell.release_to(seq_of(free_for(pos + i + capacity_)));
        }
        return k;
      }
    }
  }

  /// try_pop_if(out, take): try_pop of the oldest value, only if take(value) holds; false when
  /// the ring is empty (as try_pop) or take refused it. The value judged is the value claimed:
  /// it is read with its seq in one load (packed rings only, as peek), and pos's cell keeps it
  /// until head_ moves past pos, which only the CAS from pos that claims it can do. take() must
  /// judge the value alone (it may be stale by the time the CAS fails).
  template <class Take>
  [[nodiscard]] bool try_pop_if(T& out, Take&& take) noexcept {
    static_assert(kPacked, "MpmcRing::try_pop_if reads the value with its seq: 4-byte T only");
    std::uint64_t pos = head_.value.load(std::memory_order_relaxed);  // relaxed: as in try_pop
    for (;;) {
      Cell& cell = cell_at(pos);
      // Acquire: as try_pop's load of seq (the value's publication).
      const std::uint64_t word = cell.word.load(std::memory_order_acquire);
      const std::uint64_t seq = word >> 32;
      if (seq == seq_of(full_at(pos))) {
        const T v = std::bit_cast<T>(static_cast<std::uint32_t>(word));
        if (!take(v)) return false;
        // Relaxed: ownership only, as in try_pop.
        if (head_.value.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed,
                                              std::memory_order_relaxed)) {
          out = v;
          cell.release_to(seq_of(free_for(pos + capacity_)));  // release: as in try_pop
          return true;
        }
      } else if (seq_diff(seq, seq_of(full_at(pos))) < 0) {
        return false;  // as in try_pop: empty
      } else {
        pos = head_.value.load(std::memory_order_relaxed);
      }
    }
  }

  /// pops(): how many values were popped so far (head_), as of some recent moment: a hint, and
  /// the position the next try_pop would most likely take.
  [[nodiscard]] std::uint64_t pops() const noexcept {
    return head_.value.load(std::memory_order_relaxed);  // relaxed: a figure, orders nothing
  }
  /// peek(pos, out): a guess of the value at position pos (pops(): the next pop's): true, with
  /// it, when pos's cell holds a value published for pos. Nothing is taken and nothing is
  /// linearizable: another consumer may pop the value first, so a caller may only use it as a
  /// guess (to prefetch what the value names). Packed rings only: the seq and the value are one
  /// word, read with one load, so the value is always the one pushed at pos, never one of
  /// another lap or a released cell's 0 (else two loads of the word could pair them:
  /// MpmcRingSchedule.APeekRacingPushesAndPopsOnlyEverSeesPushedValues pins it).
  [[nodiscard]] bool peek(std::uint64_t pos, T& out) const noexcept {
    static_assert(kPacked, "MpmcRing::peek reads the value with its seq: 4-byte T only");
    // Relaxed: nothing is read on the strength of the guess, and the word carries its own seq.
    return cell_at(pos).load_full(seq_of(full_at(pos)), out, std::memory_order_relaxed);
  }
  /// prefetch(pos): starts fetching the cell of position pos, for writing: a pop of it writes
  /// the cell (release_to), and its line was last written by the pusher.
  void prefetch(std::uint64_t pos) const noexcept { prefetch_for_write(&cell_at(pos)); }

  /// footprint(min_capacity): the bytes a ring built with min_capacity (valid for the
  /// constructor) allocates for its cells, for sizing a queue before it is built.
  [[nodiscard]] static std::size_t footprint(std::size_t min_capacity) noexcept {
    return buffer_bytes(std::bit_ceil(min_capacity));
  }

  /// capacity() is the number of cells: min_capacity rounded up to a power of two.
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }

  /// size_approx() is tail - head from two separate relaxed loads: possibly stale, and counting
  /// claimed-but-unpublished cells. Clamped to [0, capacity()] because the two loads are not one
  /// snapshot (a relaxed head_ read may be newer than the tail_ read that follows it).
  [[nodiscard]] std::size_t size_approx() const noexcept {
    // Relaxed: a statistic; nothing is read on the strength of it.
    const std::uint64_t head = head_.value.load(std::memory_order_relaxed);
    const std::uint64_t tail = tail_.value.load(std::memory_order_relaxed);
    if (tail <= head) return 0;
    return static_cast<std::size_t>(std::min<std::uint64_t>(tail - head, capacity_));
  }

 private:
  // Sized and aligned to the next power of two (capped at a line) so cells tile cache lines
  // exactly: a cell never straddles two lines, and kShuffleBits below is exact.
  struct Unpadded {
    Atom<std::uint64_t> seq;
    T value;
  };
  static constexpr std::size_t kCellAlign =
      std::max(alignof(Unpadded), std::min(std::bit_ceil(sizeof(Unpadded)), kRingCacheLine));

  // Both cell layouts offer the same five operations, so the algorithm above is written once.
  // Orders are the callers' (documented at each call); publish and release_to store with release.
  struct alignas(kCellAlign) WideCell {
    Atom<std::uint64_t> seq;  // free_for(p) or full_at(p) for the position p this cell serves
    T value;
    std::uint64_t load_seq(std::memory_order o) const noexcept { return seq.load(o); }
    void init(std::uint64_t s) noexcept { seq.store(s, std::memory_order_relaxed); }
    void publish(std::uint64_t s, const T& v) noexcept {
      value = v;
      seq.store(s, std::memory_order_release);
    }
    // The caller's acquire load of seq (which saw the value's full_at) orders this plain read.
    T read() const noexcept { return value; }
    void release_to(std::uint64_t s) noexcept { seq.store(s, std::memory_order_release); }
  };
  struct alignas(8) PackedCell {
    Atom<std::uint64_t> word;  // (seq mod 2^32) << 32 | the value's 4 bytes
    std::uint64_t load_seq(std::memory_order o) const noexcept { return word.load(o) >> 32; }
    void init(std::uint64_t s) noexcept { word.store(s << 32, std::memory_order_relaxed); }
    void publish(std::uint64_t s, const T& v) noexcept {
      word.store((s << 32) | std::bit_cast<std::uint32_t>(v), std::memory_order_release);
    }
    // Relaxed: the caller's acquire load of this word saw the value's full_at, and nobody writes
    // the word again until the caller releases it, so this reads that same store.
    T read() const noexcept {
      return std::bit_cast<T>(static_cast<std::uint32_t>(word.load(std::memory_order_relaxed)));
    }
    void release_to(std::uint64_t s) noexcept { word.store(s << 32, std::memory_order_release); }
    // peek's and try_pop_if's: one load, so the value read is the one stored with seq s.
    bool load_full(std::uint64_t s, T& out, std::memory_order o) const noexcept {
      const std::uint64_t w = word.load(o);
      if ((w >> 32) != s) return false;
      out = std::bit_cast<T>(static_cast<std::uint32_t>(w));
      return true;
    }
  };
  static constexpr bool kPacked = sizeof(T) == 4;
  using Cell = std::conditional_t<kPacked, PackedCell, WideCell>;

  /// seq_of(s): s as a cell stores it (mod 2^32 when packed).
  static constexpr std::uint64_t seq_of(std::uint64_t s) noexcept {
    return kPacked ? (s & 0xFFFF'FFFFULL) : s;
  }
  /// seq_diff(a, b): the signed distance a - b between two cell seqs, modulo the seq's width.
  static constexpr std::int64_t seq_diff(std::uint64_t a, std::uint64_t b) noexcept {
    return kPacked ? static_cast<std::int32_t>(static_cast<std::uint32_t>(a - b))
                   : static_cast<std::int64_t>(a - b);
  }
  static_assert(kRingCacheLine % sizeof(Cell) == 0 || sizeof(Cell) % kRingCacheLine == 0,
                "MpmcRing: cells must tile cache lines for the index remap to separate neighbours");

  // Index remap (atomic_queue's remap_index): swap the low kShuffleBits bits of the cell index
  // with the next kShuffleBits, so positions p and p + 1 land a multiple of 2^kShuffleBits cells
  // (at least one line) apart. Without it, up to 64 / sizeof(Cell) producers (or consumers) working
  // on consecutive positions write the same line and bounce it between cores on every operation.
  // The cost: a bulk operation of k values touches k lines instead of k * sizeof(Cell) / 64. rail's
  // bulk batches are short and its single operations are the common case under contention, so the
  // remap is on for every ring big enough to swap the bits (see the constructor); it is a
  // compile-time property of T, not a tuning knob.
  static constexpr unsigned kShuffleBits =
      sizeof(Cell) >= kRingCacheLine
          ? 0u
          : static_cast<unsigned>(std::countr_zero(kRingCacheLine / sizeof(Cell)));

  // head_ and tail_ each own a cache line: producers hammer tail_, consumers head_, and sharing a
  // line would make every push invalidate every consumer's head_ and vice versa.
  struct alignas(kRingCacheLine) PaddedIndex {
    Atom<std::uint64_t> value{0};
  };
  static_assert(alignof(PaddedIndex) >= kRingCacheLine && sizeof(PaddedIndex) % kRingCacheLine == 0,
                "MpmcRing: head_ and tail_ must each occupy whole cache lines");

  static std::size_t checked_capacity(std::size_t min_capacity) {
    // Packed cells compare 32-bit seqs, which must stay well within +-2^31 (see top).
    constexpr std::size_t kMax = std::size_t{1} << (sizeof(T) == 4 ? 29 : 31);
    if (min_capacity == 0 || min_capacity > kMax) {
      throw Error(ErrorCode::invalid_option,
                  "MpmcRing min_capacity is " + std::to_string(min_capacity) + "; expected 1 to " +
                      std::to_string(kMax) + " (rounded up to a power of two)");
    }
    return std::bit_ceil(min_capacity);
  }

  // Whole lines, so the last line of cells is not shared with the next heap object.
  static std::size_t buffer_bytes(std::size_t capacity) noexcept {
    const std::size_t bytes = capacity * sizeof(Cell);
    return (bytes + kRingCacheLine - 1) / kRingCacheLine * kRingCacheLine;
  }

  static constexpr std::uint64_t free_for(std::uint64_t pos) noexcept { return 2 * pos; }
  static constexpr std::uint64_t full_at(std::uint64_t pos) noexcept { return 2 * pos + 1; }

  Cell& cell_at(std::uint64_t pos) const noexcept {
    const std::size_t index = static_cast<std::size_t>(pos) & mask_;
    const std::size_t low = (std::size_t{1} << shuffle_bits_) - 1;
    const std::size_t mix = (index ^ (index >> shuffle_bits_)) & low;
    return cells_[index ^ mix ^ (mix << shuffle_bits_)];
  }

  // Read-only after construction and read by every operation: a line of their own, so writes to
  // head_ and tail_ never invalidate it.
  alignas(kRingCacheLine) const std::size_t capacity_;
  const std::size_t mask_;
  const unsigned shuffle_bits_;
  Cell* const cells_;
  PaddedIndex head_;  // next position to pop
  PaddedIndex tail_;  // next position to push
};

}  // namespace rail::detail
