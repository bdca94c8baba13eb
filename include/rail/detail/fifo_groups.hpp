// FifoGroups: a queue's FIFO groups (JobOptions::group, SQS FIFO's MessageGroupId). The jobs of
// one group start one at a time, in the order they joined its line; different groups run in
// parallel. A job joins when it becomes due (at its add, or when its delay ends) and holds its
// group's turn from then until it ends: across retries, lapses and downstream waits.
//
// Contract:
// * enter(idx, key): the holder of slot idx, before publishing its job, names the job's group. The
//   group's record is made here, so this is the one call that allocates (and may throw).
// * join(idx, publish): the job in slot idx is due. It takes the turn if nobody holds it (true:
//   the caller makes it ready) or parks at the tail of the line (false: the line holds its index
//   from then on). publish: the add's own publication of the slot (waiting), made under the lock
//   so the job is in the line before a cancel can find it waiting. A job that is no longer waiting
//   (a cancel came between its timer and the join) joins nothing: true, and its popper drops it.
// * leave(idx): the job in slot idx ended (or its add was undone, or take_leftovers took it),
//   exactly once per enter. A turn holder hands the turn to the first job of the line still
//   waiting, whose index is returned (the caller makes it ready; kNone: none); a parked job is
//   unlinked. A group with no job left is forgotten.
// * unpark(idx): a cancel took the parked job in slot idx out of `waiting`: unlinks it; true if it
//   was parked (the caller then holds its index, as a popper would).
// * place(idx): the group, turn holder and jobs ahead of a parked job (explain; cold).
//
// Invariants, under the shard's lock: a group has a record while it has a job entered and not
// left (`jobs`); a parked job has a holder ahead of it unless every parked job has left
// `waiting` (join makes a joiner the holder when nobody holds the turn; leave hands the turn to
// the first waiting job); a parked job taken out of `waiting` stays linked until its taker
// unparks it, and the hand-off passes over it. Memory follows the groups that have jobs now, not
// every group ever seen: records go when their last job leaves and a shard's table shrinks when an
// eighth full.
//
// Algorithm: 64 shards by the key's hash, each an open-addressing table of group records with
// linear probing and backward-shift deletion (as DedupSet: no tombstones), load at most 1/2, under
// a SpinLock (spin_lock.hpp; why not lock-free: dedup_set.hpp). A line is a doubly linked list
// through per-slot members, so joining, handing the turn on and unlinking are O(1) (a hand-off
// also passes over the cancelled jobs not yet unlinked).
//
// Memory ordering: records, links and roles are read and written only under their shard's lock
// (acquire/release). A member's key and hash are written by enter() and read by join() and
// leave(), each called by the holder of the slot's index at the time, so the hand-offs of the
// index (ring pushes and pops, ctl) order them. A slot's ctl word is read under the lock with
// SlotControl's acquire.
//
// Threading: any thread; each call takes at most one shard lock (place: each in turn) and runs no
// callback under it. Built lazily: a queue that never sees a group pays one pointer.
#pragma once

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

class FifoGroups {
 public:
  static constexpr std::uint32_t kNone = 0xFFFF'FFFF;
  static constexpr std::size_t kMaxKeyBytes = 256;  // validate_job_options enforces it

  FifoGroups(JobSlot* slots, std::size_t capacity) noexcept : slots_(slots), capacity_(capacity) {}
  FifoGroups(const FifoGroups&) = delete;
  FifoGroups& operator=(const FifoGroups&) = delete;

  /// enter(idx, key): see the header. Throws std::bad_alloc (nothing entered then).
  void enter(std::uint32_t idx, std::string_view key);
  /// join(idx, publish): see the header; true: the caller makes the job ready.
  bool join(std::uint32_t idx, bool publish) noexcept;
  /// leave(idx): see the header; the index of the job that takes the turn, or kNone.
  std::uint32_t leave(std::uint32_t idx) noexcept;
  /// unpark(idx): see the header.
  bool unpark(std::uint32_t idx) noexcept;

  struct Place {
    std::string group;             // its key
    std::uint32_t holder = kNone;  // the slot of the job holding the turn (kNone: none now)
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
  static constexpr std::size_t kMinTable = 8;
  enum class Role : std::uint8_t { none, holder, parked };

  struct alignas(64) Member {  // one per slot: the slot's job in its group
    std::string key;
    std::uint64_t hash = 0;
    std::uint32_t next = kNone, prev = kNone;  // its line, while parked
    Role role = Role::none;
  };
  struct Group {  // a group with jobs; empty table cell: jobs == 0
    std::string key;
    std::uint64_t hash = 0;
    std::uint32_t jobs = 0;                    // entered and not left
    std::uint32_t holder = kNone;              // the turn's holder
    std::uint32_t head = kNone, tail = kNone;  // the parked jobs, oldest first
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
  static Group& find(Shard& sh, const Member& m) noexcept;
  /// insert(sh, key, hash): the record for key, made if missing (may grow the table: bad_alloc).
  static Group& insert(Shard& sh, std::string_view key, std::uint64_t hash);
  /// erase(sh, g): removes g's record by backward shift, then shrinks an eighth-full table.
  static void erase(Shard& sh, Group& g) noexcept;
  static void rehash(Shard& sh, std::size_t size);
  void link_tail(Group& g, std::uint32_t idx) noexcept;
  void unlink(Group& g, std::uint32_t idx) noexcept;

  JobSlot* const slots_;
  const std::size_t capacity_;
  LazyOwned<Tables> tables_;
};

}  // namespace rail::detail
