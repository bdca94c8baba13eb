// ReadyLevels: a queue's ready slot indices when rings hold them rather than lanes (an inline
// engine, a one-CPU machine, a queue that takes permits first, a queue with priorities), and the
// jobs a downstream refused (GateLink): one MPMC ring per priority level, and the pick of the
// level the next job comes from.
//
// Guarantee: each entry pushed is popped exactly once, and entries of one level pop in push order
// (MpmcRing's FIFO). Across levels (0 .. L-1, higher first) a pop takes from the highest level
// that holds an entry; with aging (max_wait W > 0) an entry that has waited w at level l ranks
// as level l + floor(w / W), one level more for each W it waited, and a pop takes the oldest
// entry of the level whose oldest entry ranks highest (of equal ranks, the one that waited
// longer). So an entry of level l waits at most (L - 1 - l) x W plus what the entries ranked
// above it by then take to start, however steady the stream above it. "Waited": since it entered
// the levels (its slot's due_ns, stamped by push_new; a sweep's or a pause's put-back keeps the
// stamp). One level (every queue without priorities): each call is the ring's, behind one
// predictable branch, and nothing is stamped.
//
// Algorithm: L <= kMaxLevels MpmcRings of `capacity` cells (an entry's slot is in at most one
// place at a time, so every level has room for all of them), and a bitmap of the levels that may
// hold entries: a hint, set by a push that finds its bit clear, cleared by a pop that finds the
// level empty (and set again if the level filled meanwhile); a pop whose hinted levels gave
// nothing tries every level before it answers "none". The pick peeks at each hinted level's
// oldest entry (MpmcRing::peek, a guess) to rank it; the pop itself is the ring's, so a guess
// that went stale costs a retry, never an entry.
// Memory ordering: MpmcRing's: a push's release publishes the slot's fields (due_ns included) to
// the popper's acquire. The bitmap and a peeked entry's due_ns are read relaxed: guesses that
// order nothing.
// Threading: any thread, as MpmcRing. Sweeps too: each entry a sweep takes is put back or
// disposed of once, but sweeps that overlap may put a level's entries back out of order (the
// dispatcher serialises its own; a gate's blocked jobs accept it, as their cancel sweeps did).
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>

#include "rail/detail/engine_core.hpp"
#include "rail/detail/fifo_groups.hpp"
#include "rail/detail/job_slot.hpp"
#include "rail/detail/mpmc_ring.hpp"

namespace rail::detail {

class ReadyLevels {
 public:
  static constexpr std::uint32_t kMaxLevels = 8;
  static_assert(kMaxLevels == FifoGroups::kMaxLevels, "a tenant's line ranks as the levels do");
  static_assert(kMaxLevels <= (1u << (8 - JobSlot::kPriorityShift)),
                "a job's level is the high bits of its JobSlot::link byte");

  /// ReadyLevels(core, capacity, levels, slots, entry_mask, max_wait_ns): room for every index
  /// below capacity in each of `levels` levels (1 .. kMaxLevels); an entry's slot is
  /// slots[entry & entry_mask] (the rest are the caller's marks); max_wait_ns > 0: aging, on
  /// core's clock.
  ReadyLevels(const EngineCore& core, std::size_t capacity, std::uint32_t levels, JobSlot* slots,
              std::uint32_t entry_mask, std::int64_t max_wait_ns)
      : core_(core),
        levels_(levels),
        mask_(entry_mask),
        max_wait_ns_(max_wait_ns),
        slots_(slots),
        first_(capacity),
        more_(levels > 1 ? std::make_unique<std::optional<MpmcRing<std::uint32_t>>[]>(levels - 1)
                         : nullptr) {
    for (std::uint32_t l = 1; l < levels; ++l)
      more_[l - 1].emplace(capacity);
  }
  ReadyLevels(const ReadyLevels&) = delete;
  ReadyLevels& operator=(const ReadyLevels&) = delete;

  [[nodiscard]] std::uint32_t levels() const noexcept { return levels_; }

  /// push_new(entry): a job that just became waiting enters the levels: at its slot's level,
  /// stamped with the time (the start of its wait) when there are several.
  void push_new(std::uint32_t entry) noexcept {
    if (levels_ == 1) [[likely]] {
      first_.push_held(entry);
      return;
    }
    stamp(entry & mask_);
    push_back(entry);
  }
  /// push_new_bulk(entries, n): push_new for n entries, in order.
  void push_new_bulk(const std::uint32_t* entries, std::size_t n) noexcept {
    if (levels_ == 1) [[likely]] {
      first_.push_held_bulk(entries, n);
      return;
    }
    for (std::size_t i = 0; i < n; ++i)
      push_new(entries[i]);
  }
  /// push_back(entry): an entry of a job that was waiting already (put back after a pop, woken
  /// at a downstream, handed a line's turn): its wait goes on from its stamp.
  void push_back(std::uint32_t entry) noexcept {
    if (levels_ == 1) [[likely]] {
      first_.push_held(entry);
      return;
    }
    put(level_of(slots_[entry & mask_]), entry);
  }
  /// stamp(idx): the job in slot idx became waiting now (its holder says so; with one level
  /// nothing is stamped).
  void stamp(std::uint32_t idx) noexcept {
    if (levels_ == 1) [[likely]]
      return;
    // relaxed: published by the push that follows (see the header).
    slots_[idx].due_ns.store(core_.now_ns(), std::memory_order_relaxed);
  }

  /// try_pop(out): the next entry (see the header); false when none could be taken now.
  [[nodiscard]] bool try_pop(std::uint32_t& out) noexcept {
    if (levels_ == 1) [[likely]]
      return first_.try_pop(out);
    return take(out, [](std::uint32_t) { return true; });
  }
  /// try_pop_bulk(out, max): up to max entries; with several levels one at a time, so that each
  /// pop takes the best-ranked entry of that moment.
  [[nodiscard]] std::size_t try_pop_bulk(std::uint32_t* out, std::size_t max) noexcept {
    if (levels_ == 1) [[likely]]
      return first_.try_pop_bulk(out, max);
    return max > 0 && try_pop(out[0]) ? 1 : 0;
  }
  /// try_pop_if(out, take): try_pop, only if take(entry) holds for the entry it would take.
  template <class Take>
  [[nodiscard]] bool try_pop_if(std::uint32_t& out, Take&& take_it) noexcept {
    if (levels_ == 1) [[likely]]
      return first_.try_pop_if(out, take_it);
    return take(out, take_it);
  }
  /// try_pop_above(out, entry): try_pop, only if the entry it would take ranks above `entry`'s
  /// job now (a higher level, or aged past it); false with one level.
  [[nodiscard]] bool try_pop_above(std::uint32_t& out, std::uint32_t entry) noexcept {
    if (levels_ == 1) return false;
    const std::int64_t now = max_wait_ns_ > 0 ? core_.now_ns() : 0;
    const std::int64_t bar = rank(level_of(slots_[entry & mask_]), entry, now);
    return take(out,
                [&](std::uint32_t e) { return rank(level_of(slots_[e & mask_]), e, now) > bar; });
  }
  /// peek_next(out): a guess of the entry the next try_pop would take.
  [[nodiscard]] bool peek_next(std::uint32_t& out) const noexcept {
    if (levels_ == 1) [[likely]]
      return first_.peek(first_.pops(), out);
    const std::optional<std::uint32_t> l = pick(max_wait_ns_ > 0 ? core_.now_ns() : 0);
    return l && ring(*l).peek(ring(*l).pops(), out);
  }
  /// size_approx(): entries in every level (MpmcRing::size_approx's caveats).
  [[nodiscard]] std::size_t size_approx() const noexcept {
    std::size_t n = first_.size_approx();
    for (std::uint32_t l = 1; l < levels_; ++l)
      n += more_[l - 1]->size_approx();
    return n;
  }
  /// size_approx(level): entries of one level.
  [[nodiscard]] std::size_t size_approx(std::uint32_t level) const noexcept {
    return ring(level).size_approx();
  }
  /// oldest_wait(level, now): how long the oldest entry of `level` has waited (a guess; 0 when
  /// it holds none, or with one level, where nothing is stamped).
  [[nodiscard]] std::int64_t oldest_wait(std::uint32_t level, std::int64_t now) const noexcept {
    std::uint32_t e = 0;
    if (levels_ == 1 || !ring(level).peek(ring(level).pops(), e)) return 0;
    return waited(e, now);
  }

  /// sweep(front, keep): takes each entry present now once, level by level in pop order, and
  /// puts back into its level those keep(entry) keeps (the others keep disposed of). front(put)
  /// runs first and may put(entry) entries from elsewhere: they go in ahead of what the sweep
  /// puts back (each level's present entries are counted before front runs). Cold.
  template <class Front, class Keep>
  void sweep(Front&& front, Keep&& keep) noexcept {
    std::size_t present[kMaxLevels];
    for (std::uint32_t l = 0; l < levels_; ++l)
      present[l] = ring(l).size_approx();
    front([this](std::uint32_t entry) { push_back(entry); });
    std::uint32_t e;
    for (std::uint32_t l = 0; l < levels_; ++l)
      for (std::size_t n = present[l]; n > 0 && ring(l).try_pop(e); --n)
        if (keep(e)) put(l, e);
  }

  /// level_of(s): the level a job waits at (its priority, JobSlot::priority()).
  [[nodiscard]] std::uint32_t level_of(const JobSlot& s) const noexcept {
    return std::min<std::uint32_t>(s.priority(), levels_ - 1);
  }

 private:
  [[nodiscard]] MpmcRing<std::uint32_t>& ring(std::uint32_t level) noexcept {
    return level == 0 ? first_ : *more_[level - 1];
  }
  [[nodiscard]] const MpmcRing<std::uint32_t>& ring(std::uint32_t level) const noexcept {
    return level == 0 ? first_ : *more_[level - 1];
  }
  void put(std::uint32_t level, std::uint32_t entry) noexcept {
    ring(level).push_held(entry);
    const std::uint32_t bit = std::uint32_t{1} << level;
    // The push before the hint's load, as take()'s clear before its re-check (store-load on
    // both sides): of a push and a clear that race, one sees the other, so a level never holds
    // entries with its bit clear for longer than the race. A hint for all that (see the header).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if ((hint_.load(std::memory_order_relaxed) & bit) == 0)
      hint_.fetch_or(bit, std::memory_order_relaxed);
  }

  /// waited(entry, now): how long entry's job has waited at `now` (a guess when read by anyone
  /// but its holder: relaxed).
  [[nodiscard]] std::int64_t waited(std::uint32_t entry, std::int64_t now) const noexcept {
    return std::max<std::int64_t>(
        0, now - slots_[entry & mask_].due_ns.load(std::memory_order_relaxed));
  }
  /// rank(level, entry, now): entry's rank at `now`: its level, one more per max_wait it waited
  /// (its level alone without aging).
  [[nodiscard]] std::int64_t rank(std::uint32_t level, std::uint32_t entry,
                                  std::int64_t now) const noexcept {
    const auto l = static_cast<std::int64_t>(level);
    return max_wait_ns_ > 0 ? l + waited(entry, now) / max_wait_ns_ : l;
  }

  /// pick(now): the level the next pop should take from, among the hinted ones (all levels with
  /// entries when none is hinted); nullopt: none holds any.
  [[nodiscard]] std::optional<std::uint32_t> pick(std::int64_t now) const noexcept {
    std::uint32_t bits = hint_.load(std::memory_order_relaxed);
    // A bit may be stale (a level emptied by pops, which clear nothing): the hinted levels are
    // taken as they hold entries now.
    std::uint32_t holding = 0;
    for (std::uint32_t rest = bits; rest != 0; rest &= rest - 1) {
      const auto l = static_cast<std::uint32_t>(std::countr_zero(rest));
      if (ring(l).size_approx() > 0) holding |= std::uint32_t{1} << l;
    }
    if (holding == 0)
      for (std::uint32_t l = 0; l < levels_; ++l)
        if (ring(l).size_approx() > 0) holding |= std::uint32_t{1} << l;
    bits = holding;
    if (bits == 0) return std::nullopt;
    const auto top = static_cast<std::uint32_t>(std::bit_width(bits) - 1);
    if (max_wait_ns_ <= 0) return top;
    // Aging: rank each hinted level by its oldest entry's wait; of equal ranks the entry that
    // waited longer wins (as equal priorities start in the order they became ready).
    std::uint32_t best = top;
    std::int64_t best_rank = -1, best_waited = 0;
    for (std::uint32_t rest = bits; rest != 0;) {
      const auto l = static_cast<std::uint32_t>(std::bit_width(rest) - 1);
      rest &= ~(std::uint32_t{1} << l);
      std::uint32_t e = 0;
      if (!ring(l).peek(ring(l).pops(), e)) continue;
      const std::int64_t w = waited(e, now);
      const std::int64_t r = rank(l, e, now);
      if (r > best_rank || (r == best_rank && w > best_waited)) {
        best_rank = r;
        best_waited = w;
        best = l;
      }
    }
    return best;
  }

  /// take(out, take_it): the pop of several levels: from the picked level, clearing the hint of
  /// a level found empty and picking again.
  template <class Take>
  bool take(std::uint32_t& out, Take&& take_it) noexcept {
    const std::int64_t now = max_wait_ns_ > 0 ? core_.now_ns() : 0;
    for (std::uint32_t tries = 0; tries <= levels_; ++tries) {
      const std::optional<std::uint32_t> l = pick(now);
      if (!l) return false;
      MpmcRing<std::uint32_t>& r = ring(*l);
      if (r.try_pop_if(out, take_it)) return true;
      if (r.size_approx() > 0) return false;  // its head was refused, or is being pushed
      const std::uint32_t bit = std::uint32_t{1} << *l;
      hint_.fetch_and(~bit, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_seq_cst);                      // see put()
      if (r.size_approx() > 0) hint_.fetch_or(bit, std::memory_order_relaxed);  // refilled
    }
    return false;
  }

  const EngineCore& core_;
  const std::uint32_t levels_;
  const std::uint32_t mask_;
  const std::int64_t max_wait_ns_;
  JobSlot* const slots_;
  MpmcRing<std::uint32_t> first_;  // level 0, inline: a queue without levels reaches it directly
  std::unique_ptr<std::optional<MpmcRing<std::uint32_t>>[]> more_;  // levels 1 .. L-1
  // Levels that may hold entries (several levels only); its own line: pushes and pops of every
  // level write it.
  alignas(64) std::atomic<std::uint32_t> hint_{0};
};

}  // namespace rail::detail
