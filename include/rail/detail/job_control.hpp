// JobControl: the calls that act on a job nobody hands them — cancel (Queue::cancel) and retime
// (promote, change_delay, a downstream's leader) — and the return of the slots of jobs cancelled
// while they waited, whose indices stay where the job waited until someone takes them.
//
// Contract: each call acts on a slot it does not hold through SlotControl's CASes
// (slot_table.hpp), re-checking the job's id after every read of the word, so a slot reused
// meanwhile fails the CAS and is never acted on. A cancel ends a waiting or delayed job at once
// (JobEnds::record, event `cancelled`) and flags a running one (its handler's outcome then ends
// it as cancelled). A cancelled job's capacity comes back promptly: a delayed job's timer is
// unlinked at once; a waiting job's index is taken by its popper (drop_cancelled), by the sweep
// of the blocked rings the cancel runs, or by the sweep of the ready ring that an add finding no
// room runs (reclaim_waiting), so the queue never answers `full` while a cancelled job keeps a
// slot an add could take.
// Memory ordering: waiting_cancels_ is incremented release after the cancel's end is recorded
// and loaded acquire by reclaim_waiting, so a sweep after a cancel sees its index as cancelled;
// swept_mark_ is stored release after a sweep's pass and loaded acquire, so an add that finds
// the marks equal sees the slots that pass freed. Sweeps take turns on reclaim_mu_ (cold).
// A parent waiting for its children (JobOptions::after) is parked on the wheel, marked
// JobSlot::kWaitingChildren: a user's retime passes it by, and only its FlowNode's decision
// (release_parent, fail_parent, cancel_parent) or a cancel, an expiry or shutdown moves it on.
// Threading: cancel/retime/reclaim_waiting from any thread; drop_cancelled by the popper that
// holds the index. retime needs the wheel: from a callback that runs while timers fire it throws.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "rail/detail/dispatcher.hpp"
#include "rail/detail/downstream_links.hpp"
#include "rail/detail/flow_parts.hpp"
#include "rail/detail/job_ends.hpp"
#include "rail/detail/lines.hpp"
#include "rail/detail/timer_port.hpp"

namespace rail::detail {

class JobControl {
 public:
  JobControl(FlowParts& parts, Dispatcher& dispatch, DownstreamLinks& links, Lines& lines,
             JobEnds& ends, TimerPort& timers, TimerClient& client) noexcept
      : parts_(parts),
        dispatch_(dispatch),
        links_(links),
        lines_(lines),
        ends_(ends),
        timers_(timers),
        client_(client) {}
  JobControl(const JobControl&) = delete;
  JobControl& operator=(const JobControl&) = delete;

  /// cancel(id): true if job `id` was waiting or delayed and is now cancelled, or is running
  /// and is flagged to end as cancelled; false if it is not live here or its end is decided.
  bool cancel(JobId id);
  /// retime(id, due, held_only): delayed job `id` runs at `due` instead (at once if due has
  /// come); false if it is not delayed. A job held for its downstream (JobSlot::kHeld: it is
  /// waiting) is retimed only with held_only (its gate's call), and then only such a job.
  /// Throws Error(would_deadlock) from a callback run while timers fire.
  bool retime(JobId id, std::int64_t due, bool held_only);

  /// reclaim_waiting(): an add found no free slot. If waiting jobs were cancelled (or indices
  /// held back for a pause) since the last sweep, sweeps the ready ring (Dispatcher::sweep_ready)
  /// and reclaims the slots of the cancelled jobs in it. True if the caller should look for a
  /// free slot again: always once any waiting job was ever cancelled, since a sweep by another
  /// add may have freed slots after the caller's pop failed (else of two adds racing for two
  /// reclaimable slots, the second answers `full` while the first sweeps).
  bool reclaim_waiting() noexcept;
  /// drop_cancelled(idx): the popper of the index of a job cancelled while waiting (from the
  /// ready ring, a blocked ring or a sweep) reclaims its slot.
  void drop_cancelled(std::uint32_t idx);
  /// Expired: what expire() did with the job. `ended`: its index was the caller's (a line's or
  /// the wheel's), so it ended at once; `in_ring`: its index is in a ring or a stash, whose next
  /// holder ends it (after_expiries sweeps them); `in_transit`: on its way to the wheel, whose
  /// owner ends it when it drains; `moved_on`: the word changed since it was read (no change).
  enum class Expired : std::uint8_t { ended, in_ring, in_transit, moved_on };
  /// expire(idx, c, wheel): the expiry sweep (job_expiry.hpp), as the wheel's owner, takes the
  /// unstarted job it found past its time in slot idx's word `c` (SlotControl::expire): whoever
  /// holds its index ends it dead-lettered, reason expired (JobEnds::end_unstarted).
  Expired expire(std::uint32_t idx, std::uint64_t c, Wheel& wheel);
  // --- parents (JobOptions::after; src/job_parents.cpp): FlowNode's decisions, each validated
  // against parent `id` in slot idx in state waiting_children; false when it is no longer there
  // (it ended: cancelled, expired, taken at shutdown). Not from the wheel's owner (FlowNode runs
  // them through EngineCore::after_wheel).
  /// release_parent(idx, id): its children all ended: it leaves waiting_children and is ready
  /// (as a promote would make it).
  bool release_parent(std::uint32_t idx, JobId id);
  /// fail_parent(idx, id, why): a child failed under ChildFailure::fail: dead-lettered unstarted
  /// with reason dependency_failed and error `why`.
  bool fail_parent(std::uint32_t idx, JobId id, std::string why);
  /// cancel_parent(idx, id): a child failed under ChildFailure::cancel: cancelled unstarted.
  bool cancel_parent(std::uint32_t idx, JobId id);

  /// after_expiries(in_ring): after a scan expired jobs, with the wheel released (a ring's sweep
  /// runs payload destructors, which may want the wheel): the ones whose indices are in the
  /// blocked rings, the ready ring and the stashes are ended now (`in_ring`), and the queue may
  /// be idle.
  void after_expiries(bool in_ring) noexcept;

 private:
  /// try_cancel(idx, id): cancel's step on one slot that held `id` (nullopt: it holds another).
  std::optional<bool> try_cancel(std::uint32_t idx, JobId id);
  /// end_cancelled(idx, from): cancel took the job in slot idx from `from` and pins the slot.
  void end_cancelled(std::uint32_t idx, SlotState from);
  /// sweep_blocked(): gives back now the slots of the cancelled jobs in the blocked rings.
  void sweep_blocked() noexcept;
  [[nodiscard]] std::uint64_t sweep_mark() const noexcept {
    // acquire: pairs with end_cancelled's release increment (and held_back's own acquire).
    return waiting_cancels_.load(std::memory_order_acquire) + dispatch_.held_back();
  }

  FlowParts& parts_;
  Dispatcher& dispatch_;
  DownstreamLinks& links_;
  Lines& lines_;
  JobEnds& ends_;
  TimerPort& timers_;
  TimerClient& client_;
  // Cancels of waiting jobs so far, and that count plus the dispatcher's held_back() as the last
  // sweep of the ready jobs read them before it began (see reclaim_waiting).
  std::atomic<std::uint64_t> waiting_cancels_{0};
  std::atomic<std::uint64_t> swept_mark_{0};
  std::mutex reclaim_mu_;
};

}  // namespace rail::detail
