// FifoGroups: a queue's FIFO groups. Contract, invariants and ordering: fifo_groups.hpp.
#include "rail/detail/fifo_groups.hpp"

#include <algorithm>
#include <utility>

#include "rail/detail/assert.hpp"
#include "rail/detail/hash_bytes.hpp"

namespace rail::detail {

void FifoGroups::enter(std::uint32_t idx, std::string_view key) {
  Tables& t = tables_.get_or_make([&] { return std::make_unique<Tables>(capacity_); });
  Member& m = t.members[idx];
  RAIL_INVARIANT(m.role == Role::none, "enter: a fresh job is in no line");
  m.key.assign(key);  // may throw: nothing entered
  m.hash = hash_bytes(key);
  // Before the lock: turns_of_ may scan the queue's options.
  const std::uint32_t turns = turns_of_ ? std::max<std::uint32_t>(1, turns_of_(ctx_, key)) : 1;
  Shard& sh = shard_of(m.hash);
  const SpinGuard guard(sh.lock);
  // insert may throw (a table that grows): nothing entered then.
  if (insert(sh, m.key, m.hash, turns).jobs++ == 0) t.live.fetch_add(1, std::memory_order_relaxed);
}

bool FifoGroups::join(std::uint32_t idx, bool publish) noexcept {
  Member& m = member(idx);
  Shard& sh = shard_of(m.hash);
  const SpinGuard guard(sh.lock);
  JobSlot& s = slots_[idx];
  if (publish) s.ctl.publish(SlotState::waiting);
  if (m.role == Role::holder) return true;  // a retry of a turn's holder
  RAIL_INVARIANT(m.role == Role::none, "join: a job joins its line once");
  // Cancelled between its timer and here (or right after the add's publication): it joins
  // nothing, and whoever pops its index drops it.
  if (s.ctl.held() != SlotControl<>::Held::waiting) return true;
  Group& g = find(sh, m);
  if (g.taken < g.turns) {
    take_turn(g, idx);
    return true;
  }
  link_tail(g, idx);
  return false;
}

std::uint32_t FifoGroups::leave(std::uint32_t idx) noexcept {
  Member& m = member(idx);
  Shard& sh = shard_of(m.hash);
  const SpinGuard guard(sh.lock);
  Group& g = find(sh, m);
  std::uint32_t next = kNone;
  if (m.role == Role::parked) {
    unlink(g, idx);
  } else if (m.role == Role::holder) {
    next = free_turn(g, idx);
  }
  m.role = Role::none;
  drop_job(sh, g);
  return next;
}

std::uint32_t FifoGroups::step_aside(std::uint32_t idx) noexcept {
  Member& m = member(idx);
  Shard& sh = shard_of(m.hash);
  const SpinGuard guard(sh.lock);
  if (m.role != Role::holder) return kNone;
  m.role = Role::none;  // entered still (its record stays): join() takes a turn again
  return free_turn(find(sh, m), idx);
}

FifoGroups::Closing FifoGroups::close(std::uint32_t idx) {
  Member& m = member(idx);
  Closing c{m.hash, idx, m.key};  // may throw: nothing changed
  Shard& sh = shard_of(m.hash);
  const SpinGuard guard(sh.lock);
  Group& g = find(sh, m);
  if (m.role == Role::holder) {
    // Its turn (and its job's count, which keeps the record) stays until release(); so does
    // its name as the line's holder, for explain.
    m.role = Role::none;
    return c;
  }
  if (m.role == Role::parked) unlink(g, idx);
  m.role = Role::none;
  drop_job(sh, g);
  c.key.clear();
  return c;
}

std::uint32_t FifoGroups::release(const Closing& c) noexcept {
  Shard& sh = shard_of(c.hash);
  const SpinGuard guard(sh.lock);
  Group& g = find(sh, c.key, c.hash);
  const std::uint32_t next = free_turn(g, c.idx);
  drop_job(sh, g);
  return next;
}

std::uint32_t FifoGroups::first_waiting(const Ends& e) const noexcept {
  for (std::uint32_t i = e.head; i != kNone; i = member(i).next)
    if (slots_[i].ctl.held() == SlotControl<>::Held::waiting) return i;
  return kNone;
}

std::uint32_t FifoGroups::hand_on(Group& g) noexcept {
  std::uint32_t best = kNone;
  if (ranking_.levels == 1) {
    best = first_waiting(g.first);
  } else {
    // As ReadyLevels::pick: the highest level, or with aging the highest rank (a level more per
    // max_wait waited; of equal ranks, the longer wait). The clock (a user's Clock, under this
    // lock) is read only when two levels have a job to compare.
    std::uint32_t first[kMaxLevels];
    std::uint32_t found = 0;
    for (std::uint32_t l = ranking_.levels; l-- > 0;) {
      first[l] = first_waiting(g.ends(l));
      if (first[l] == kNone) continue;
      if (found++ == 0) best = first[l];
      if (ranking_.max_wait_ns <= 0 || !ranking_.now_ns) break;  // no aging: the top one
    }
    if (found > 1) {
      const std::int64_t now = ranking_.now_ns(ctx_);
      std::int64_t best_rank = -1, best_waited = 0;
      for (std::uint32_t l = ranking_.levels; l-- > 0;) {
        const std::uint32_t i = first[l];
        if (i == kNone) continue;
        // relaxed: the stamp was written by the job's holder before it parked, under this lock.
        const std::int64_t waited =
            std::max<std::int64_t>(0, now - slots_[i].due_ns.load(std::memory_order_relaxed));
        const std::int64_t rank = static_cast<std::int64_t>(l) + waited / ranking_.max_wait_ns;
        if (rank > best_rank || (rank == best_rank && waited > best_waited)) {
          best_rank = rank;
          best_waited = waited;
          best = i;
        }
      }
    }
  }
  if (best == kNone) return kNone;
  unlink(g, best);
  take_turn(g, best);
  return best;
}

std::uint32_t FifoGroups::level_of(std::uint32_t idx) const noexcept {
  return ranking_.levels == 1 ? 0 : std::min(slots_[idx].priority(), ranking_.levels - 1);
}

bool FifoGroups::empty(const Group& g) const noexcept {
  for (std::uint32_t l = 0; l < ranking_.levels; ++l)
    if (g.ends(l).head != kNone) return false;
  return true;
}

void FifoGroups::take_turn(Group& g, std::uint32_t idx) noexcept {
  ++g.taken;
  g.holder = idx;
  member(idx).role = Role::holder;
}

std::uint32_t FifoGroups::free_turn(Group& g, std::uint32_t idx) noexcept {
  RAIL_INVARIANT(g.taken > 0, "a holder's line counts its turn");
  --g.taken;
  if (g.holder == idx) g.holder = kNone;
  return hand_on(g);  // the caller sets its member's role: release()'s slot may be reused
}

void FifoGroups::drop_job(Shard& sh, Group& g) noexcept {
  RAIL_INVARIANT(g.jobs > 0, "a line's job leaves once per enter");
  if (--g.jobs == 0) {
    erase(sh, g);
    tables_.get()->live.fetch_sub(1, std::memory_order_relaxed);
  }
}

bool FifoGroups::unpark(std::uint32_t idx) noexcept {
  Member& m = member(idx);
  Shard& sh = shard_of(m.hash);
  const SpinGuard guard(sh.lock);
  if (m.role != Role::parked) return false;
  unlink(find(sh, m), idx);
  m.role = Role::none;
  return true;
}

FifoGroups::Place FifoGroups::place(std::uint32_t idx) const {
  Place p;
  const Tables* t = tables_.get();
  if (!t) return p;
  for (const Shard& sh : t->shards) {
    const SpinGuard guard(sh.lock);
    for (const Group& g : sh.table) {
      if (g.jobs == 0 || empty(g)) continue;
      // Ahead: the waiting jobs of higher levels (aging aside) and those before it in its own.
      std::uint64_t ahead = 0;
      for (std::uint32_t l = ranking_.levels; l-- > 0;) {
        for (std::uint32_t i = g.ends(l).head; i != kNone; i = t->members[i].next) {
          if (i == idx) {
            p.group = g.key;  // may throw bad_alloc: the guard unlocks
            p.holder = g.holder;
            p.taken = g.taken;
            p.turns = g.turns;
            p.ahead = ahead;
            return p;
          }
          if (slots_[i].ctl.held() == SlotControl<>::Held::waiting) ++ahead;
        }
      }
    }
  }
  return p;
}

std::size_t FifoGroups::table_bytes() const noexcept {
  const Tables* t = tables_.get();
  if (!t) return 0;
  std::size_t n = 0;
  for (const Shard& sh : t->shards) {
    const SpinGuard guard(sh.lock);
    n += sh.table.capacity() * sizeof(Group);
    for (const Group& g : sh.table) {
      if (g.key.capacity() > std::string().capacity()) n += g.key.capacity() + 1;
      if (g.upper) n += (ranking_.levels - 1) * sizeof(Ends);
    }
  }
  return n;
}

// --- the table: open addressing, linear probing, backward-shift deletion --------------------

FifoGroups::Group& FifoGroups::find(Shard& sh, std::string_view key, std::uint64_t hash) noexcept {
  const std::size_t mask = sh.table.size() - 1;
  for (std::size_t i = hash & mask;; i = (i + 1) & mask) {
    Group& g = sh.table[i];
    RAIL_INVARIANT(g.jobs != 0, "find: a line with an entered job has a record");
    if (g.hash == hash && g.key == key) return g;
  }
}

FifoGroups::Group& FifoGroups::insert(Shard& sh, std::string_view key, std::uint64_t hash,
                                      std::uint32_t turns) {
  if (!sh.table.empty()) {
    const std::size_t mask = sh.table.size() - 1;
    for (std::size_t i = hash & mask; sh.table[i].jobs != 0; i = (i + 1) & mask)
      if (sh.table[i].hash == hash && sh.table[i].key == key) return sh.table[i];
  }
  if ((sh.count + 1) * 2 > sh.table.size())
    rehash(sh, sh.table.empty() ? kMinTable : sh.table.size() * 2);
  const std::size_t mask = sh.table.size() - 1;
  std::size_t i = hash & mask;
  while (sh.table[i].jobs != 0)
    i = (i + 1) & mask;
  Group& g = sh.table[i];
  // May throw: the cell stays empty (jobs == 0). A ranked line's block stays with its cell when
  // the line goes (erase), so lines that come and go allocate none once their cells have one.
  if (ranking_.levels > 1) {
    if (!g.upper) g.upper = std::make_unique<Ends[]>(ranking_.levels - 1);
    std::fill_n(g.upper.get(), ranking_.levels - 1, Ends{});
  }
  g.key.assign(key);
  g.hash = hash;
  g.holder = kNone;
  g.first = Ends{};
  g.taken = 0;
  g.turns = turns;
  ++sh.count;
  return g;  // jobs == 0: the caller counts its job
}

void FifoGroups::erase(Shard& sh, Group& g) noexcept {
  RAIL_INVARIANT(g.taken == 0 && empty(g), "erase: a line with no job left");
  const std::size_t mask = sh.table.size() - 1;
  std::size_t hole = static_cast<std::size_t>(&g - sh.table.data());
  std::string().swap(g.key);  // a long name's buffer goes with its group
  // Its levels' block is kept for the next line in this shard: it goes to the cell the shift
  // leaves empty (whose own block, if any, moved with its record).
  std::unique_ptr<Ends[]> spare = std::move(g.upper);
  // Backward shift (Knuth, TAOCP vol. 3, 6.4 Algorithm R): an entry after the hole moves into it
  // unless its home lies cyclically in (hole, j], so every entry stays reachable from its home.
  for (std::size_t j = (hole + 1) & mask; sh.table[j].jobs != 0; j = (j + 1) & mask) {
    const std::size_t home = sh.table[j].hash & mask;
    const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (stays) continue;
    sh.table[hole] = std::move(sh.table[j]);
    sh.table[j].jobs = 0;
    hole = j;
  }
  sh.table[hole].jobs = 0;
  sh.table[hole].upper = std::move(spare);
  --sh.count;
  // An eighth full: half the size, a quarter full after, so a shard whose groups come and go
  // around one count does not rehash on every add and end. Not below the minimum.
  if (sh.table.size() > kMinTable && sh.count * 8 <= sh.table.size()) {
    try {
      rehash(sh, sh.table.size() / 2);
    } catch (...) {  // no memory for the smaller table: keep the larger one
    }
  }
}

void FifoGroups::rehash(Shard& sh, std::size_t size) {
  std::vector<Group> table(size);  // may throw: sh unchanged
  const std::size_t mask = size - 1;
  for (Group& g : sh.table) {
    if (g.jobs == 0) continue;
    std::size_t i = g.hash & mask;
    while (table[i].jobs != 0)
      i = (i + 1) & mask;
    table[i] = std::move(g);
  }
  sh.table.swap(table);
}

// --- lines ----------------------------------------------------------------------------------

void FifoGroups::link_tail(Group& g, std::uint32_t idx) noexcept {
  Member& m = member(idx);
  Ends& e = g.ends(level_of(idx));
  m.prev = e.tail;
  m.next = kNone;
  if (e.tail == kNone) {
    e.head = idx;
  } else {
    member(e.tail).next = idx;
  }
  e.tail = idx;
  m.role = Role::parked;
}

void FifoGroups::unlink(Group& g, std::uint32_t idx) noexcept {
  Member& m = member(idx);
  RAIL_INVARIANT(m.role == Role::parked, "unlink: a parked job");
  // Its level is its priority, fixed while it is entered: the list link_tail put it in.
  Ends& e = g.ends(level_of(idx));
  (m.prev == kNone ? e.head : member(m.prev).next) = m.next;
  (m.next == kNone ? e.tail : member(m.next).prev) = m.prev;
  m.next = m.prev = kNone;
}

}  // namespace rail::detail
