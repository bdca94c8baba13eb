// rail::detail::TimingWheel: a hierarchical timing wheel of intrusive timers, owned by one thread.
// The engine uses it for retry backoff and lease expiry; callers embed a TimerNode in their own
// records (job slots), so schedule() and cancel() allocate nothing and are O(1).
//
// GUARANTEE. A timer never fires before its deadline and fires exactly once, in the first advance()
// at or past it (fire iff deadline <= now; lateness 0 relative to that advance() call).
//
// ALGORITHM. Hierarchical timing wheel with cascading (Varghese & Lauck, "Hashed and Hierarchical
// Timing Wheels", SOSP 1987, scheme 7; Kafka kafka/utils/timer/TimingWheel.scala; the bit-digit
// placement and occupancy bitmaps follow tokio's time wheel and Linux kernel/time/timer.c).
//   * Time is counted in ticks of tick_ns since the wheel's origin tick floor(start_ns / tick_ns).
//     A deadline d belongs to tick t(d) = floor(d / tick) - origin; a tick-k bucket holds the
//     deadlines in [k*tick, (k+1)*tick). The cursor is the tick of now_ns().
//   * A tick number is read as Levels digits of LevelBits bits. A node goes to the level of the
//     highest digit in which its tick differs from the cursor, in the slot named by its own digit
//     there: level = (bit_width(t ^ cursor) - 1) / LevelBits. A node whose tick differs from the
//     cursor above the top digit goes to the overflow list. So a level-L node shares every digit
//     above L with the cursor and its digit L is strictly ahead; level-0 slot (cursor % Slots) is
//     the current, partly elapsed tick.
//   * advance() walks the cursor only to ticks where something happens: the next occupied level-0
//     slot, the start of the next occupied higher-level slot (where it cascades: its nodes are
//     placed again relative to the cursor, landing on a lower level), and the start of the
//     overflow's next aligned window (where the overflow is placed again). Occupancy bitmaps (one
//     bit per slot) find each stop in O(Levels * Slots / 64) words, so advance(now + 10 hours) over
//     a nearly empty wheel costs a handful of stops, not 36 million ticks.
//   * Sub-tick precision: a bucket whose tick has fully elapsed fires whole. The current bucket is
//     kept sorted by deadline, so advance() to a time inside a tick fires its due prefix and stops
//     at the first deadline > now; the rest fire in a later advance(). That is what makes lateness
//     0 with non-aligned clocks instead of "up to one tick".
//   * Deadlines <= now_ns() at schedule() time go to a ready list and fire at the next advance(),
//     even one that does not move time.
//   * Overflow (deadlines outside the current top-level block of Slots^Levels ticks): kept on one
//     list with a lower bound on the start of the earliest window it needs. When the cursor reaches
//     that window, the whole list is placed again (nodes now in range drop into the wheel, the rest
//     stay and the bound is recomputed). We chose this over clamping into the top level's last
//     slot: clamped nodes would re-cascade every top-level revolution, while this list is only
//     touched at windows that hold one of its nodes. At the default <8,4> with a 1 ms tick a window
//     is 49.7 days, so the list is for practically unbounded timeouts.
//
// ORDER. Within one advance(), nodes fire in ascending deadline order, ties in schedule() order.
// (Nodes with equal ticks always share a level and slot, and every move preserves list order, so a
// stable sort of the bucket by deadline yields exactly that.) Exception: nodes scheduled from
// inside on_expire fire in the same call, after the node whose callback scheduled them, but
// otherwise in no promised order relative to the rest.
//
// THREADING. Single owner: one thread calls every member; nothing is thread-safe. Other threads
// hand timers to the owner through queues elsewhere (netty's HashedWheelTimer pattern: "as only the
// worker thread will act on it there is no need for synchronization"). on_expire runs on the owner,
// inside advance(); it may call schedule() and cancel() (including on the node just fired) but not
// advance().
//
// MEMORY ORDERING. None: the wheel has no atomics, hence no Atom seam (STYLE rule 5 is for
// lock-free types; there is nothing here to model-check). Publishing a TimerNode's record to the
// owner, and the owner's writes back to it, are the hand-off queue's contract, not the wheel's.
//
// SHUTDOWN. The owner either drains, advance(INT64_MAX, on_expire) firing everything, or drops its
// nodes with cancel(). The destructor does not touch nodes (their records may already be gone): a
// node still linked when the wheel dies keeps dangling links and must not be reused unreset.
//
// WORKED EXAMPLE: TimingWheel<2, 2>, tick = 10 ns, start = 0. Level 0 has 4 slots of 1 tick, level
// 1 has 4 slots of 4 ticks, so the wheel spans one aligned block of 16 ticks; anything else
// overflows. (tests/timing_wheel_test.cpp, WorkedExampleFromHeader, replays this table.)
//
//   call             cursor  what happens
//   ---------------  ------  -----------------------------------------------------------------
//   schedule(A, 25)     0    tick 2; 2^0 = 0b10: level 0 slot 2
//   schedule(B, 61)     0    tick 6; 6^0 = 0b110: level 1 slot 1 (ticks 4..7)
//   schedule(C, 138)    0    tick 13; 13^0 = 0b1101: level 1 slot 3 (ticks 12..15)
//   schedule(D, 215)    0    tick 21; 21^0 = 0b10101 has a bit above 4: overflow, window 16
//   advance(27)         2    stop at 2: fire A (25 <= 27). Returns 1. One stop, not two ticks.
//   advance(64)         6    stop at 4: cascade level-1 slot 1, B to level 0 slot 2 (tick 6);
//                            stop at 6: fire B (61 <= 64). Returns 1.
//   advance(140)       14    stop at 12: cascade C to level 0 slot 1 (tick 13); stop at 13: fire
//                            C. The next stop (window 16) is past 14: the cursor jumps to 14.
//   schedule(E, 145)   14    tick 14 is the cursor's: sorted into the current bucket.
//   next_event_ns()    14    145: exact, because E sits in the current tick.
//   advance(200)       20    fire E from the current bucket (145 <= 200). Stop at 16: window;
//                            21^16 = 0b101, D to level 1 slot 1 (ticks 20..23). Stop at 20:
//                            cascade, D to level 0 slot 1 (tick 21). 21 > 20: done. Returns 1.
//   next_event_ns()    20    210: D's tick rounded down; no timer can fire before it.
//   advance(212)       21    stop at 21; D (215) is not due, the current bucket keeps it: 0.
//   next_event_ns()    21    215: exact.
//   advance(215)       21    fire D. Returns 1. The wheel is empty.
//
// ERROR BUDGET for the default TimingWheel<8, 4> with a 1 ms tick. Slots are aligned to their
// width, so "span" is an aligned block, not a distance from now: a timer 1 ms away can sit on level
// 1 when a 256 ms boundary lies between (it cascades when the cursor crosses it).
//
//   level     slot width (granularity)  level span (aligned)   max lateness vs the advance() call
//   --------  ------------------------  ---------------------  ----------------------------------
//   0         1 ms                      256 ms                 0
//   1         256 ms                    65.536 s               0 (cascades before firing)
//   2         65.536 s                  4 h 39 min 37 s        0 (cascades before firing)
//   3         4 h 39 min 37 s           49 d 17 h 2 min 47 s   0 (cascades before firing)
//   overflow  one 49.7-day window       beyond level 3         0 (re-placed at its window start)
//
// Lateness against the deadline itself is the owner's: if it sleeps until next_event_ns(), that
// value is exact for the current tick, the tick start for other level-0 nodes, and a cascade or
// window start otherwise, so a timer costs at most Levels + 1 early wake-ups (window, Levels - 1
// cascades, tick start) and is never late.
//
// MEMORY LAYOUT (default <8,4>): 4 * 256 + 2 sentinel TimerNodes, 32 KiB, plus 128 bytes of bits:
//
//   heads_: [L0 s0 .. L0 s255][L1 s0 .. L1 s255][L2 ...][L3 ...][overflow][ready]
//   each sentinel: { prev = tail, next = first, deadline, tag unused }; empty <=> next == itself
//   occupied_[L]: 256 bits, bit s set <=> heads_[L][s] non-empty
//
// Sentinels are TimerNodes so that every list link is a TimerNode* and unlinking never branches on
// "am I first"; the cost is 16 unused bytes per slot. Because the sentinels live inside the wheel,
// the wheel can be neither copied nor moved.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>

#include "rail/error.hpp"

namespace rail::detail {

/// TimerNode is the intrusive hook a caller embeds in its own record. The wheel owns prev, next
/// and deadline while the node is linked; tag is the owner's and the wheel never reads it.
struct TimerNode {
  TimerNode* prev = nullptr;  // intrusive doubly-linked list links; prev != nullptr <=> linked
  TimerNode* next = nullptr;
  std::int64_t deadline = 0;  // absolute time in ns (same timeline as the wheel's `now`)
  std::uint64_t tag = 0;      // owner's data (the engine stores queue and slot index)

  /// linked() is true from schedule() until the node fires (before on_expire runs) or is cancelled.
  [[nodiscard]] bool linked() const noexcept { return prev != nullptr; }
};
static_assert(sizeof(TimerNode) == 32,
              "TimerNode is embedded in every job slot: keep it two links + two words, 32 bytes");
static_assert(std::is_standard_layout_v<TimerNode> && std::is_trivially_destructible_v<TimerNode>,
              "TimerNode must stay a plain record the owner can place in arrays of slots");

template <unsigned LevelBits = 8, unsigned Levels = 4>
class TimingWheel {
  static_assert(LevelBits >= 1 && LevelBits <= 16,
                "LevelBits is log2(slots per level): 1..16 keeps a level's bitmap scan short");
  static_assert(Levels >= 1, "a wheel needs at least one level");
  static_assert(
      LevelBits * Levels < 64,
      "tick numbers are 64-bit: the wheel's digits must leave at least one bit above them "
      "so the overflow window shift stays defined");

  static constexpr unsigned kSlots = 1u << LevelBits;
  static constexpr std::uint64_t kMask = kSlots - 1;
  static constexpr unsigned kTotalBits = LevelBits * Levels;  // bits of tick the levels cover
  static constexpr std::size_t kBuckets = std::size_t{Levels} * kSlots;
  static constexpr std::size_t kOverflow = kBuckets;   // sentinel index of the overflow list
  static constexpr std::size_t kReady = kBuckets + 1;  // sentinel index of the already-due list
  static constexpr unsigned kWords = kSlots < 64 ? 1 : kSlots / 64;
  static constexpr std::uint64_t kNoTick = std::numeric_limits<std::uint64_t>::max();
  static constexpr std::uint32_t kSortBuffer = 512;  // see sort_by_deadline
  static_assert((kSlots & (kSlots - 1)) == 0, "slot index is a mask of the tick: power of two");

 public:
  /// TimingWheel(tick_ns, start_ns) makes an empty wheel whose time is start_ns. tick_ns is the
  /// slot width of level 0; it trades bookkeeping (stops per second) against nothing else, since
  /// firing is exact to the nanosecond. Throws rail::Error(invalid_option) unless tick_ns > 0.
  TimingWheel(std::int64_t tick_ns, std::int64_t start_ns)
      : tick_(tick_ns), now_(start_ns), origin_(tick_ns > 0 ? floor_div(start_ns, tick_ns) : 0) {
    if (tick_ns <= 0) {
      throw Error(ErrorCode::invalid_option,
                  "TimingWheel tick_ns is " + std::to_string(tick_ns) + "; expected 1 or more");
    }
    for (TimerNode& head : heads_)
      head.prev = head.next = &head;
  }

  // The sentinels are inside the wheel and every linked node points at them.
  TimingWheel(const TimingWheel&) = delete;
  TimingWheel& operator=(const TimingWheel&) = delete;

  /// schedule(node, deadline_ns) links node to fire at deadline_ns and sets node.deadline.
  /// Precondition: !node.linked(). A deadline <= now_ns() fires at the next advance(), even one
  /// that does not move time. O(1) (one division; a deadline inside the current tick is inserted
  /// in order into that tick's bucket, O(1) when deadlines arrive in order). Never blocks.
  void schedule(TimerNode& node, std::int64_t deadline_ns) noexcept {
    assert(!node.linked() && "TimingWheel::schedule: node is already linked; cancel() it first");
    node.deadline = deadline_ns;
    ++size_;
    if (deadline_ns <= now_) {
      append(heads_[kReady], node);
      if (deadline_ns < ready_min_) ready_min_ = deadline_ns;
      return;
    }
    const std::uint64_t tick = tick_of(deadline_ns);
    if (tick == cursor_) {
      // The current tick is partly elapsed and its bucket is kept sorted so advance() can stop at
      // the first deadline > now without scanning the rest.
      TimerNode& head = heads_[tick & kMask];
      insert_sorted(head, node);
      set_bit(0, tick & kMask);
      return;
    }
    place(node, tick);
  }

  /// cancel(node) unlinks node if it is linked and returns whether it was. Cancelling a node that
  /// already fired or was never scheduled returns false and does nothing. O(1). Never blocks.
  bool cancel(TimerNode& node) noexcept {
    if (!node.linked()) return false;
    unlink(node);
    return true;
  }

  /// advance(now_ns, on_expire) moves the wheel's time to now_ns (time never moves backwards: an
  /// earlier now_ns leaves it unchanged), cascading higher levels as their slots come due, and
  /// calls on_expire(TimerNode&) for every node whose deadline <= now_ns(), after unlinking it.
  /// on_expire may schedule() and cancel() (a node it schedules with a deadline <= now_ns() fires
  /// within this same call, so a callback that always re-arms an already-due node never returns);
  /// it must not call advance(). Returns the number of nodes fired. Cost: O(fired + stops *
  /// Levels * Slots / 64 + nodes cascaded); empty ticks cost nothing.
  /// If on_expire throws, the exception propagates with the wheel consistent: the node it was
  /// called for is already unlinked, and the due nodes not yet fired fire at the next advance().
  template <class F>
  std::size_t advance(std::int64_t now_ns, F&& on_expire) {
    assert(!advancing_ && "TimingWheel::advance called from inside on_expire");
    AdvanceGuard guard(advancing_);
    if (now_ns > now_) now_ = now_ns;
    const std::uint64_t target = tick_of(now_);
    std::size_t fired = fire_ready(on_expire);
    for (;;) {
      fired += fire_current(on_expire);
      if (cursor_ == target) break;
      const std::uint64_t stop = next_stop();
      if (stop > target) {
        // Nothing is placed at a tick in (cursor_, target], so no slot comes due and no bucket
        // holds anything on the way: the cursor may jump. Every level-L node still shares the
        // digits above L with the new cursor, because its own slot start lies beyond target.
        cursor_ = target;
        break;
      }
      cursor_ = stop;
      ++steps_;
      cascade_at_cursor();
    }
    // Nodes that callbacks scheduled as already due. Loop: their callbacks may schedule more.
    while (heads_[kReady].next != &heads_[kReady])
      fired += fire_ready(on_expire);
    return fired;
  }

  /// next_event_ns() returns a time t such that no timer fires before t, or std::nullopt when the
  /// wheel is empty. It is exact (the earliest deadline) when that timer is in the current tick,
  /// the earliest deadline rounded down to its tick when it is elsewhere on level 0, and otherwise
  /// the start of the next cascade or overflow window, never later than the true earliest
  /// deadline. A value <= now_ns() means "something is due: advance now". O(Levels * Slots / 64).
  [[nodiscard]] std::optional<std::int64_t> next_event_ns() const noexcept {
    if (size_ == 0) return std::nullopt;
    // Ready nodes are due already (deadline <= now_), earlier than anything placed in the wheel.
    // ready_min_ is a lower bound: cancel() does not raise it, which only makes t earlier.
    if (heads_[kReady].next != &heads_[kReady]) return ready_min_;
    const TimerNode& current = heads_[cursor_ & kMask];
    if (current.next != &current) return current.next->deadline;  // sorted: front is earliest
    // Levels are nested blocks, so the first occupied stop is the earliest (see next_stop()).
    return tick_to_ns(next_stop());
  }
  /// earliest_deadline_ns(): the earliest deadline of any timer (exact; nullopt: empty), the time
  /// an advance() must reach to fire something, where next_event_ns() may answer a cascade step.
  /// It is in the ready list, the current tick, the first stop's bucket (levels are nested: see
  /// next_stop()) or the overflow. Cold: O(Levels * Slots / 64) plus a walk of that bucket.
  [[nodiscard]] std::optional<std::int64_t> earliest_deadline_ns() const noexcept {
    if (size_ == 0) return std::nullopt;
    const auto earliest_in = [](const TimerNode& head) noexcept {
      std::int64_t m = std::numeric_limits<std::int64_t>::max();
      for (const TimerNode* n = head.next; n != &head; n = n->next)
        m = std::min(m, n->deadline);
      return m;
    };
    const TimerNode& ready = heads_[kReady];
    const TimerNode& current = heads_[cursor_ & kMask];
    if (ready.next != &ready || current.next != &current)
      return std::min(earliest_in(ready), earliest_in(current));
    for (unsigned level = 0; level < Levels; ++level) {
      const unsigned digit = static_cast<unsigned>((cursor_ >> (level * LevelBits)) & kMask);
      const unsigned slot = next_occupied(level, digit + 1);
      if (slot < kSlots) return earliest_in(heads_[std::size_t{level} * kSlots + slot]);
    }
    return earliest_in(heads_[kOverflow]);
  }

  /// size() is the number of linked nodes (scheduled, not yet fired or cancelled).
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

  /// now_ns() is the wheel's current time: the largest now_ns any advance() was given, or start_ns.
  [[nodiscard]] std::int64_t now_ns() const noexcept { return now_; }

  /// tick_ns() is the level-0 slot width given to the constructor.
  [[nodiscard]] std::int64_t tick_ns() const noexcept { return tick_; }

  /// steps() counts the ticks at which advance() stopped to cascade or fire, since construction.
  /// It is the cost model of advance() made observable: tests use it to show that a long advance
  /// skips empty ticks, and the engine may export it as a metric.
  [[nodiscard]] std::uint64_t steps() const noexcept { return steps_; }

 private:
  // Sets a flag for the duration of advance() so re-entry is caught in debug builds, and clears it
  // even when on_expire throws.
  struct AdvanceGuard {
    explicit AdvanceGuard(bool& flag) noexcept : flag_(flag) { flag_ = true; }
    ~AdvanceGuard() { flag_ = false; }
    AdvanceGuard(const AdvanceGuard&) = delete;
    AdvanceGuard& operator=(const AdvanceGuard&) = delete;
    bool& flag_;
  };

  static constexpr std::int64_t floor_div(std::int64_t a, std::int64_t b) noexcept {
    const std::int64_t q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
  }

  // Ticks are counted from origin_ in unsigned arithmetic: every tick the wheel stores is >= the
  // cursor >= origin_, and the distance between two int64 values always fits in uint64, so the
  // wrap-around subtraction is exact even for start_ns near INT64_MIN and deadlines near INT64_MAX.
  [[nodiscard]] std::uint64_t tick_of(std::int64_t ns) const noexcept {
    return static_cast<std::uint64_t>(floor_div(ns, tick_)) - static_cast<std::uint64_t>(origin_);
  }
  // Start of a relative tick in ns. Only called for ticks at or below some stored deadline's tick,
  // so the absolute tick times tick_ is <= that deadline and cannot overflow.
  [[nodiscard]] std::int64_t tick_to_ns(std::uint64_t tick) const noexcept {
    return static_cast<std::int64_t>(static_cast<std::uint64_t>(origin_) + tick) * tick_;
  }

  [[nodiscard]] TimerNode& bucket(unsigned level, std::uint64_t slot) noexcept {
    return heads_[std::size_t{level} * kSlots + slot];
  }

  void set_bit(unsigned level, std::uint64_t slot) noexcept {
    occupied_[level][slot / 64] |= std::uint64_t{1} << (slot % 64);
  }
  void clear_bit(unsigned level, std::uint64_t slot) noexcept {
    occupied_[level][slot / 64] &= ~(std::uint64_t{1} << (slot % 64));
  }
  // First occupied slot >= from on `level`, or kSlots when none.
  [[nodiscard]] unsigned next_occupied(unsigned level, unsigned from) const noexcept {
    if (from >= kSlots) return kSlots;
    unsigned word_index = from / 64;
    std::uint64_t word = occupied_[level][word_index] & (~std::uint64_t{0} << (from % 64));
    for (;;) {
      if (word != 0) return word_index * 64 + static_cast<unsigned>(std::countr_zero(word));
      if (++word_index == kWords) return kSlots;
      word = occupied_[level][word_index];
    }
  }

  static void append(TimerNode& head, TimerNode& node) noexcept {
    node.prev = head.prev;
    node.next = &head;
    head.prev->next = &node;
    head.prev = &node;
  }

  // Stable: the node goes after every node with an equal deadline. Walks from the tail because the
  // common case is a deadline later than everything already in the tick.
  static void insert_sorted(TimerNode& head, TimerNode& node) noexcept {
    TimerNode* after = head.prev;
    while (after != &head && after->deadline > node.deadline)
      after = after->prev;
    node.prev = after;
    node.next = after->next;
    after->next->prev = &node;
    after->next = &node;
  }

  void unlink(TimerNode& node) noexcept {
    TimerNode* const before = node.prev;
    TimerNode* const after = node.next;
    before->next = after;
    after->prev = before;
    node.prev = node.next = nullptr;
    --size_;
    // In a circular list with a sentinel, the two neighbours coincide only when the sentinel is
    // all that is left, so `before` is then the head of the list that just became empty.
    if (before == after) list_emptied(static_cast<std::size_t>(before - heads_.data()));
  }

  void list_emptied(std::size_t head_index) noexcept {
    if (head_index < kBuckets) {
      clear_bit(static_cast<unsigned>(head_index / kSlots), head_index % kSlots);
    } else if (head_index == kOverflow) {
      overflow_window_ = kNoTick;
    } else {
      ready_min_ = std::numeric_limits<std::int64_t>::max();
    }
  }

  // Links node at the level where its tick first differs from the cursor (see ALGORITHM).
  // Precondition: tick >= cursor_. Appends, so list order is arrival order.
  void place(TimerNode& node, std::uint64_t tick) noexcept {
    const std::uint64_t differing = tick ^ cursor_;
    if ((differing >> kTotalBits) != 0) {
      append(heads_[kOverflow], node);
      const std::uint64_t window = (tick >> kTotalBits) << kTotalBits;
      if (window < overflow_window_) overflow_window_ = window;
      return;
    }
    const unsigned level =
        differing <= kMask ? 0u : static_cast<unsigned>(std::bit_width(differing) - 1) / LevelBits;
    const std::uint64_t slot = (tick >> (level * LevelBits)) & kMask;
    append(bucket(level, slot), node);
    set_bit(level, slot);
  }

  // Takes every node off `head` (leaving it empty) and places each again relative to the cursor.
  // Nodes are re-linked one by one in list order, which keeps equal-tick nodes in arrival order.
  void replace_all(TimerNode& head) noexcept {
    if (head.next == &head) return;  // an empty list's chain would start at the sentinel itself
    TimerNode* node = head.next;
    head.prev->next = nullptr;  // terminate the detached chain
    head.prev = head.next = &head;
    while (node != nullptr) {
      TimerNode* const following = node->next;
      place(*node, tick_of(node->deadline));
      node = following;
    }
  }

  // The smallest tick > cursor_ at which the wheel has work, or kNoTick. Levels are nested: every
  // level-L node shares all digits above L with the cursor, so level-L stops all lie inside the
  // cursor's current level-(L+1) block, while every node on a higher level (or in the overflow)
  // lies beyond it. Hence the first level with an occupied slot ahead of the cursor gives the stop.
  [[nodiscard]] std::uint64_t next_stop() const noexcept {
    for (unsigned level = 0; level < Levels; ++level) {
      const unsigned shift = level * LevelBits;
      const unsigned digit = static_cast<unsigned>((cursor_ >> shift) & kMask);
      // Level 0 excludes the current slot (it is the current tick, handled by fire_current); on
      // higher levels the cursor's own slot is always empty (it cascaded when the cursor entered).
      const unsigned slot = next_occupied(level, digit + 1);
      if (slot < kSlots) {
        const unsigned block_shift = shift + LevelBits;
        return ((cursor_ >> block_shift) << block_shift) | (std::uint64_t{slot} << shift);
      }
    }
    return overflow_window_;
  }

  // The cursor has just arrived at a stop: bring everything due here down to level 0, then sort
  // the new current bucket (it was built by appends, and advance() may stop inside this tick).
  void cascade_at_cursor() noexcept {
    if (cursor_ >= overflow_window_) {
      overflow_window_ = kNoTick;  // place() recomputes it for the nodes that stay
      replace_all(heads_[kOverflow]);
    }
    // Top-down is not needed for correctness (place() never targets the cursor's own slot on a
    // level >= 1), but it moves each node once per level at most, in order.
    for (unsigned level = Levels - 1; level >= 1; --level) {
      const std::uint64_t slot = (cursor_ >> (level * LevelBits)) & kMask;
      TimerNode& head = bucket(level, slot);
      if (head.next == &head) continue;
      clear_bit(level, slot);
      replace_all(head);
    }
    sort_by_deadline(heads_[cursor_ & kMask]);
  }

  // Fires the due prefix of the current bucket: everything when its tick has fully elapsed, the
  // deadlines <= now_ when advance() stopped inside it. Re-reads the front after each callback,
  // because on_expire may cancel or schedule any node, including the next one.
  template <class F>
  std::size_t fire_current(F& on_expire) {
    TimerNode& head = heads_[cursor_ & kMask];
    std::size_t fired = 0;
    while (head.next != &head && head.next->deadline <= now_) {
      TimerNode& node = *head.next;
      unlink(node);
      ++fired;
      on_expire(node);
    }
    return fired;
  }

  // Fires the ready list in deadline order (ties in schedule order). Nodes that callbacks add to
  // it meanwhile are appended and fire in this same loop.
  template <class F>
  std::size_t fire_ready(F& on_expire) {
    TimerNode& head = heads_[kReady];
    sort_by_deadline(head);
    std::size_t fired = 0;
    while (head.next != &head) {
      TimerNode& node = *head.next;
      unlink(node);
      ++fired;
      on_expire(node);
    }
    return fired;
  }

  // Stable merge of two null-terminated chains; on equal deadlines `first` wins, which is what
  // keeps ties in arrival order.
  static TimerNode* merge(TimerNode* first, TimerNode* second) noexcept {
    TimerNode* result = nullptr;
    TimerNode** tail = &result;
    while (first != nullptr && second != nullptr) {
      if (second->deadline < first->deadline) {
        *tail = second;
        second = second->next;
      } else {
        *tail = first;
        first = first->next;
      }
      tail = &(*tail)->next;
    }
    *tail = first != nullptr ? first : second;
    return result;
  }

  // Stable bottom-up merge sort of one list, in place, no allocation (libstdc++ list::sort's bins:
  // bin i holds a sorted run of 2^i nodes, older than any run in a lower bin). Buckets are usually
  // already sorted, because deadlines tend to be scheduled in order, so check that first: O(n).
  static void sort_by_deadline(TimerNode& head) noexcept {
    // A bucket of up to kSortBuffer nodes (a 1 ms slot rarely holds more) is gathered into an
    // array in one walk, sorted there and relinked: the walk is the only pass that chases
    // pointers through cold nodes, where the list merge sort below makes log2(n) of them.
    // (deadline, position) keys keep ties in list order, as the merge sort does.
    struct Key {
      std::int64_t deadline;
      std::uint32_t position;
      TimerNode* node;
    };
    std::array<Key, kSortBuffer> keys;
    std::uint32_t n = 0;
    bool sorted = true;
    for (TimerNode* node = head.next; node != &head; node = node->next) {
      if (n > 0 && node->deadline < keys[n - 1].deadline) sorted = false;
      if (n == kSortBuffer) {
        n = 0;  // too many for the buffer: the list merge sort below
        break;
      }
      keys[n] = Key{node->deadline, n, node};
      ++n;
    }
    if (sorted && n > 0) return;
    if (n > 0) {
      std::sort(keys.begin(), keys.begin() + n, [](const Key& a, const Key& b) noexcept {
        return a.deadline != b.deadline ? a.deadline < b.deadline : a.position < b.position;
      });
      TimerNode* before = &head;
      for (std::uint32_t i = 0; i < n; ++i) {
        keys[i].node->prev = before;
        before->next = keys[i].node;
        before = keys[i].node;
      }
      before->next = &head;
      head.prev = before;
      return;
    }
    if (head.next == &head) return;
    head.prev->next = nullptr;
    std::array<TimerNode*, 64> bins{};  // 2^64 nodes cannot exist, so bin 63 never carries
    for (TimerNode* node = head.next; node != nullptr;) {
      TimerNode* const following = node->next;
      node->next = nullptr;
      TimerNode* carry = node;
      std::size_t bin = 0;
      for (; bins[bin] != nullptr; ++bin) {
        carry = merge(bins[bin], carry);
        bins[bin] = nullptr;
      }
      bins[bin] = carry;
      node = following;
    }
    TimerNode* chain = nullptr;
    for (TimerNode* run : bins) {
      if (run != nullptr) chain = merge(run, chain);
    }
    TimerNode* before = &head;
    for (TimerNode* node = chain; node != nullptr; node = node->next) {
      node->prev = before;
      before->next = node;
      before = node;
    }
    before->next = &head;
    head.prev = before;
  }

  std::int64_t tick_;
  std::int64_t now_;          // wheel time; only ever increases
  std::int64_t origin_;       // absolute tick of start_ns; relative tick 0
  std::uint64_t cursor_ = 0;  // relative tick of the last stop; == tick_of(now_) between calls
  std::uint64_t overflow_window_ = kNoTick;  // lower bound on the overflow's earliest window start
  std::int64_t ready_min_ = std::numeric_limits<std::int64_t>::max();  // lower bound, ready list
  std::size_t size_ = 0;
  std::uint64_t steps_ = 0;
  bool advancing_ = false;
  std::array<std::array<std::uint64_t, kWords>, Levels> occupied_{};
  std::array<TimerNode, kBuckets + 2> heads_{};  // [level * kSlots + slot], overflow, ready
};

}  // namespace rail::detail
