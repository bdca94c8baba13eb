// FifoGroups: lines of jobs by key, each with a number of turns: a queue's FIFO groups
// (JobOptions::group, SQS FIFO's MessageGroupId: one turn per group) and its tenants'
// shares (JobOptions::tenant: weight x QueueOptions::tenant_window turns, or the tenant's cap).
// The jobs of one line take its turns in the order they joined it; different lines are
// independent. A ranked set of lines (Ranking: the tenants' of a queue with priority levels)
// hands a turn to its highest-ranked parked job instead: its priority, aged by its wait as
// ReadyLevels ranks ready jobs, then the order they joined; so a tenant's urgent job is not
// stuck behind its own backlog, and a steady stream of urgent ones cannot starve the rest. A job
// joins when it becomes due (at its add, or when its delay ends) and holds its turn from then until
// it ends: across retries, lapses and downstream waits.
//
// Contract:
// * enter(idx, key): the holder of slot idx, before publishing its job, names the job's group. The
//   group's record is made here, so this is the one call that allocates (and may throw).
// * join(idx, publish): the job in slot idx is due. It takes a turn if one is free (true: the
//   caller makes it ready) or parks at the tail of the line (false: the line holds its index
//   from then on). publish: the add's own publication of the slot (waiting), made under the lock
//   so the job is in the line before a cancel can find it waiting. A job that is no longer waiting
//   (a cancel came between its timer and the join) joins nothing: true, and its popper drops it.
// * leave(idx), or close(idx) then release(): the job in slot idx ended (or its add was undone,
//   or take_leftovers took it), exactly once per enter (close keeps its turn taken until its end
//   is reported). A turn holder hands its turn to the first job of the line still
//   waiting, whose index is returned (the caller makes it ready; kNone: none); a parked job is
//   unlinked. A line with no job left is forgotten.
// * unpark(idx): a cancel took the parked job in slot idx out of `waiting`: unlinks it; true if it
//   was parked (the caller then holds its index, as a popper would).
// * place(idx): the line, a turn holder, the turns taken and free, and the jobs ahead of a
//   parked job (explain; cold).
//
// Invariants, under the shard's lock: a line has a record while it has a job entered and not
// left, or closed and not released (`jobs`); while a parked job is waiting, every turn is taken
// (join takes a free turn rather than park; leave hands a freed turn to the first waiting job); a
// parked job taken out of `waiting` stays linked until its taker unparks it, and the hand-off
// passes over it. A line's turns are fixed when its record is made (turns_of), so only a job's end
// frees one. Memory follows the groups that have jobs now, not every group ever seen: records go
// when their last job leaves and a shard's table shrinks when an eighth full.
//
// Algorithm: 64 shards by the key's hash, each an open-addressing table of group records with
// linear probing and backward-shift deletion (as DedupSet: no tombstones), load at most 1/2, under
// a SpinLock (spin_lock.hpp; why not lock-free: dedup_set.hpp). A line is a doubly linked list
// through per-slot members, so joining, handing the turn on and unlinking are O(1) (a hand-off
// also passes over the cancelled jobs not yet unlinked). A ranked line keeps one such list per
// level (levels above 0 in a block allocated with its record), and a hand-off looks at the first
// waiting job of each: O(levels).
//
// Memory ordering: records, links and roles are read and written only under their shard's lock
// (acquire/release). A member's key and hash are written by enter() and read by join() and
// leave(), each called by the holder of the slot's index at the time, so the hand-offs of the
// index (ring pushes and pops, ctl) order them. A slot's ctl word is read under the lock with
// SlotControl's acquire.
//
// Threading: any thread; each call takes at most one shard lock (place: each in turn) and runs no
// callback under it but a ranked line's clock (LineRanking::now_ns), read when a hand-off compares
// two levels' jobs. A job's wait counts from when it became due (JobFlow::join_lines' stamp): a
// job in both a group and a tenant comes to its tenant's line with the wait it spent in its
// group's. Built lazily: a queue that never sees a group pays one pointer.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "rail/detail/job_slot.hpp"
#include "rail/detail/lazy_owned.hpp"
#include "rail/detail/spin_lock.hpp"

namespace rail::detail {

/// LineRanking: how a ranked set of lines orders its parked jobs (levels 1: in join order). A
/// job's level is its JobSlot::priority() (capped at levels - 1); max_wait_ns > 0: aging, its
/// wait read from its slot's due_ns (stamped when it became due) and now_ns(ctx).
struct LineRanking {
  std::uint32_t levels = 1;
  std::int64_t max_wait_ns = 0;
  std::int64_t (*now_ns)(const void* ctx) = nullptr;
};

class FifoGroups {
 public:
  static constexpr std::uint32_t kNone = 0xFFFF'FFFF;
  static constexpr std::size_t kMaxKeyBytes = 256;  // validate_job_options enforces it

  static constexpr std::uint32_t kMaxLevels = 8;  // ReadyLevels::kMaxLevels

  /// TurnsOf: the turns of a new line with key `key` (at least 1); null: 1 for every line.
  using TurnsOf = std::uint32_t (*)(const void* ctx, std::string_view key);
  using Ranking = LineRanking;

  FifoGroups(JobSlot* slots, std::size_t capacity, TurnsOf turns_of = nullptr,
             const void* ctx = nullptr, Ranking ranking = {}) noexcept
      : slots_(slots),
        capacity_(capacity),
        turns_of_(turns_of),
        ctx_(ctx),
        ranking_{std::min(std::max<std::uint32_t>(1, ranking.levels), kMaxLevels),
                 ranking.max_wait_ns, ranking.now_ns} {}
  FifoGroups(const FifoGroups&) = delete;
  FifoGroups& operator=(const FifoGroups&) = delete;

  /// enter(idx, key): see the header. Throws std::bad_alloc (nothing entered then).
  void enter(std::uint32_t idx, std::string_view key);
  /// join(idx, publish): see the header; true: the caller makes the job ready.
  bool join(std::uint32_t idx, bool publish) noexcept;
  /// leave(idx): see the header; the index of the job that takes the turn, or kNone.
  std::uint32_t leave(std::uint32_t idx) noexcept;

  /// step_aside(idx): the turn's holder in slot idx gives its turn up for a while (a retry's
  /// backoff) and stays entered; it joins again when due. The job that takes the turn, or kNone.
  std::uint32_t step_aside(std::uint32_t idx) noexcept;

  /// Closing: a turn whose job has ended but whose end is not reported yet (close()).
  struct Closing {
    std::uint64_t hash = 0;
    std::uint32_t idx = kNone;  // the ended job's slot
    std::string key;            // its line's; empty: nothing to release
    [[nodiscard]] bool pending() const noexcept { return !key.empty(); }
  };
  /// close(idx): leave() in two steps, for an end that is reported after its job left its slot:
  /// the job leaves its line now, but a turn it holds stays taken (its line's record with it)
  /// until release(), so no job takes it before the end is reported. Throws bad_alloc (copying
  /// the key) before it changes anything.
  [[nodiscard]] Closing close(std::uint32_t idx);
  /// release(c): the turn close() kept goes on: the index of the job that takes it, or kNone.
  std::uint32_t release(const Closing& c) noexcept;
  /// unpark(idx): see the header.
  bool unpark(std::uint32_t idx) noexcept;

  struct Place {
    std::string group;             // its line's key
    std::uint32_t holder = kNone;  // the slot of a job holding a turn (kNone: none now)
    std::uint32_t taken = 0;       // turns taken
    std::uint32_t turns = 1;       // turns of the line
    std::uint64_t ahead = 0;       // parked jobs still waiting ahead of it
  };
  /// place(idx): where the job in slot idx is parked, or nullopt-like (holder kNone, empty group)
  /// if it is not parked now. Cold: O(groups + parked jobs).
  [[nodiscard]] Place place(std::uint32_t idx) const;

  /// groups(): the groups with jobs now (a snapshot); table_bytes(): what their tables take.
  [[nodiscard]] std::size_t groups() const noexcept {
    const Tables* t = tables_.get();
    return t ? t->live.load(std::memory_order_relaxed) : 0;  // a gauge: orders nothing
  }
  [[nodiscard]] std::size_t table_bytes() const noexcept;

 private:
  static constexpr std::size_t kShards = 64;
  // A shard's table never shrinks below 64 records (4.5 KB; 288 KB for all 64 shards once each
  // saw a line): a queue whose lines come and go by the thousand then adds and ends jobs
  // without rehashing (allocating) as its backlog swings.
  static constexpr std::size_t kMinTable = 64;
  enum class Role : std::uint8_t { none, holder, parked };

  struct alignas(64) Member {  // one per slot: the slot's job in its group
    std::string key;
    std::uint64_t hash = 0;
    std::uint32_t next = kNone, prev = kNone;  // its line, while parked
    Role role = Role::none;
  };
  struct Ends {  // a list of parked jobs, oldest first
    std::uint32_t head = kNone, tail = kNone;
  };
  struct Group {  // a line with jobs; empty table cell: jobs == 0
    std::string key;
    std::uint64_t hash = 0;
    std::uint32_t jobs = 0;         // entered and not left
    std::uint32_t turns = 1;        // its turns (turns_of, when the record was made)
    std::uint32_t taken = 0;        // turns held
    std::uint32_t holder = kNone;   // the latest job to take a turn (explain)
    Ends first;                     // the parked jobs (of level 0, in a ranked line)
    std::unique_ptr<Ends[]> upper;  // a ranked line's levels 1 .. levels - 1
    [[nodiscard]] Ends& ends(std::uint32_t level) noexcept {
      return level == 0 ? first : upper[level - 1];
    }
    [[nodiscard]] const Ends& ends(std::uint32_t level) const noexcept {
      return level == 0 ? first : upper[level - 1];
    }
  };
  struct alignas(64) Shard {
    mutable SpinLock<> lock;
    std::vector<Group> table;  // power-of-two size, or empty
    std::size_t count = 0;     // records in use
  };
  struct Tables {
    explicit Tables(std::size_t capacity) : members(std::make_unique<Member[]>(capacity)) {}
    std::unique_ptr<Member[]> members;
    Shard shards[kShards];
    std::atomic<std::size_t> live{0};  // records in all shards (changed under their locks)
  };

  [[nodiscard]] Shard& shard_of(std::uint64_t hash) const noexcept {
    return tables_.get()->shards[(hash >> 58) & (kShards - 1)];
  }
  [[nodiscard]] Member& member(std::uint32_t idx) const noexcept {
    return tables_.get()->members[idx];
  }
  /// find(sh, m): m's group's record in sh (under its lock; it has one while m is entered).
  static Group& find(Shard& sh, const Member& m) noexcept { return find(sh, m.key, m.hash); }
  static Group& find(Shard& sh, std::string_view key, std::uint64_t hash) noexcept;
  /// hand_on(g): a turn of g is free: the first parked job still waiting (of a ranked line: the
  /// highest-ranked of each level's first) takes it (its index, or kNone); the ones passed over
  /// left `waiting` and stay linked until their takers unpark them.
  std::uint32_t hand_on(Group& g) noexcept;
  /// first_waiting(e): the first job of list e still waiting, or kNone.
  [[nodiscard]] std::uint32_t first_waiting(const Ends& e) const noexcept;
  /// level_of(idx): the list of its line the job in slot idx parks in.
  [[nodiscard]] std::uint32_t level_of(std::uint32_t idx) const noexcept;
  /// empty(g): no job of g is parked.
  [[nodiscard]] bool empty(const Group& g) const noexcept;
  /// take_turn(g, idx) / free_turn(g, idx): the job in slot idx takes a turn of g / gives one
  /// back, which hand_on passes to the first waiting parked job (its index, or kNone).
  /// free_turn leaves the member's role to its caller (release's slot may hold a new job).
  void take_turn(Group& g, std::uint32_t idx) noexcept;
  std::uint32_t free_turn(Group& g, std::uint32_t idx) noexcept;
  /// drop_job(sh, g): one job of g is gone for good; a record with none left is erased.
  void drop_job(Shard& sh, Group& g) noexcept;
  /// insert(sh, key, hash, turns): the record for key, made with `turns` if missing (may grow
  /// the table: bad_alloc).
  Group& insert(Shard& sh, std::string_view key, std::uint64_t hash, std::uint32_t turns);
  /// erase(sh, g): removes g's record by backward shift, then shrinks an eighth-full table.
  void erase(Shard& sh, Group& g) noexcept;
  static void rehash(Shard& sh, std::size_t size);
  void link_tail(Group& g, std::uint32_t idx) noexcept;
  void unlink(Group& g, std::uint32_t idx) noexcept;

  JobSlot* const slots_;
  const std::size_t capacity_;
  const TurnsOf turns_of_;
  const void* const ctx_;
  const Ranking ranking_;
  LazyOwned<Tables> tables_;
};

}  // namespace rail::detail
