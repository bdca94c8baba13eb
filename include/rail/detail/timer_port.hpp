// TimerPort: a queue's one door to the engine's timing wheel — the inbox of delayed slots, the
// firing of their timers, the lease sweep's timer, unlinking the timer of a job that leaves
// early (cancel, take_leftovers), and the queue's repeatable jobs (its ScheduleTable, built on
// the first schedule), whose timers it routes by tag. Nothing else in a queue touches the wheel
// or a slot's node.
//
// Threads: any thread submits a delayed slot (submit) or asks for the lease sweep (request_sweep,
// lower_visibility); everything that takes a Wheel& runs as the wheel's owner (the timer thread,
// a worker polling timers, or a cold path inside EngineCore::with_wheel), one thread at a time.
// The wheel owner acts on the job through its TimerClient (the queue's job flow): a slot whose
// time came, a cancelled slot whose index came back, a lease sweep.
//
// Ownership: a delayed slot's index is held by the inbox, then by the wheel (linked, or parked:
// unlinked with deadline kNever when due never — see deadline.hpp), until fire() hands it on or
// unlink()/take_parked() give it to the caller (job_slot.hpp's ownership invariant).
// Memory ordering: the inbox is an MpmcRing (push release, pop acquire), which carries the slot's
// due time written before submit(). sweep_requested_ is release on store and acq_rel on the
// owner's exchange, which also carries a min_visibility_ns_ lowered before the request;
// min_visibility_ns_ is seq_cst: with JobFlow's processing_ flag it is one side of a Dekker
// hand-off (JobFlow::admit_unusual), and it publishes no other data.
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <string>

#include "rail/clock.hpp"
#include "rail/detail/engine_core.hpp"
#include "rail/detail/job_slot.hpp"
#include "rail/detail/lazy_owned.hpp"
#include "rail/detail/lease_tracker.hpp"
#include "rail/detail/mpmc_ring.hpp"
#include "rail/detail/schedule_table.hpp"

namespace rail::detail {

/// TimerClient: what the wheel owner calls back into (the job flow). Each call runs as the
/// wheel's owner: it must not wait for the wheel (EngineCore::emit defers observers already).
class TimerClient {
 public:
  /// timer_fired(idx, now): slot idx moved delayed -> waiting (this port won the CAS); the
  /// index is the client's to push ready.
  virtual void timer_fired(std::uint32_t idx, std::int64_t now) noexcept = 0;
  /// timer_reclaim(idx): a cancelled slot's index came back from the inbox or the wheel.
  virtual void timer_reclaim(std::uint32_t idx) noexcept = 0;
  /// timer_sweep(now, wheel): lapse every lease due by now and end the jobs expired by then;
  /// returns the earliest remaining lease deadline or expiry (kNever when none).
  virtual std::int64_t timer_sweep(std::int64_t now, Wheel& wheel) noexcept = 0;

 protected:
  ~TimerClient() = default;
};

class TimerPort {
 public:
  /// TimerPort(core, queue, slots, capacity, visibility, warn_parts): slots[0, capacity) are
  /// the slots of queue `queue`; visibility is its lease length (Duration::max(): no lease sweep
  /// unless a job asks for a shorter one); warn_parts its stall warning's share of a lease
  /// (lease_tracker.hpp; 0: none).
  TimerPort(EngineCore& core, const std::string& queue, JobSlot* slots, std::size_t capacity,
            Duration visibility, std::uint32_t warn_parts);
  TimerPort(const TimerPort&) = delete;
  TimerPort& operator=(const TimerPort&) = delete;

  /// tag_nodes(queue): the wheel hands back only a node; its tag routes the firing to
  /// queue `queue`'s slot (or its sweep, or a schedule). Once, before any timer is armed.
  void tag_nodes(std::uint16_t queue) noexcept;

  /// schedules(): the queue's schedule table, built on first use (cold; after tag_nodes).
  [[nodiscard]] ScheduleTable& schedules();
  /// schedules_if_any(): the table, or null when the queue never had a schedule.
  [[nodiscard]] const ScheduleTable* schedules_if_any() const noexcept { return schedules_.get(); }

  // --- any thread -------------------------------------------------------------------------------
  /// submit(idx): the caller holds delayed slot idx (due_ns written): hand it to the wheel.
  void submit(std::uint32_t idx) noexcept;
  /// request_sweep(): (re)arm the lease sweep within one shortest visibility timeout.
  void request_sweep() noexcept;
  /// lower_visibility(v): a job's lease is shorter than any before; true if it lowered the bound
  /// (the caller then requests a sweep, once processing has begun).
  bool lower_visibility(std::int64_t v) noexcept;
  /// request_sweep_by(deadline): (re)arm the sweep no later than deadline (a handler shortened
  /// its lease: extend_lease to less than it had; a job expires then). An inline engine checks
  /// leases on every timer pass, so there the sweep's timer stands only for such deadlines.
  void request_sweep_by(std::int64_t deadline) noexcept;

  // --- the wheel's owner ------------------------------------------------------------------------
  /// drain(wheel, client): link every slot submitted since the last call.
  void drain(Wheel& wheel, TimerClient& client) noexcept;
  /// drain_all(wheel, client): a timer pass's first step: drain(), then link or unlink the
  /// schedules' nodes that changed (ScheduleTable::drain).
  void drain_all(Wheel& wheel, TimerClient& client) noexcept {
    drain(wheel, client);
    if (ScheduleTable* t = schedules_.get()) [[unlikely]]
      t->drain(wheel);
  }
  /// fire(tag, now, wheel, client): the timer tagged `tag` (a slot index, the sweep or a
  /// schedule) is due.
  void fire(std::uint32_t tag, std::int64_t now, Wheel& wheel, TimerClient& client) noexcept;
  /// unlink(s, wheel): takes a delayed slot's timer off the wheel after a cancel or a take;
  /// true if its index is now the caller's (linked or parked), false if it fired or is still in
  /// transit (drain first for that: the wheel owner then reclaims it when it arrives).
  [[nodiscard]] bool unlink(JobSlot& s, Wheel& wheel) noexcept;
  /// retime(idx, c, due, now, wheel, client): moves the due time of delayed slot idx, whose
  /// word the caller read as c (and checked the job's id after), to `due`, the inbox drained
  /// first; a due time that has come fires it at once. False if the slot moved on since c (it
  /// fired, is being debounced or cancelled, or holds another job now).
  [[nodiscard]] bool retime(std::uint32_t idx, std::uint64_t c, std::int64_t due, std::int64_t now,
                            Wheel& wheel, TimerClient& client) noexcept;
  /// take_parked(s): a slot due never is held by the wheel owner with no node linked; takes its
  /// index (true) or says it is not parked. Touches only the node's deadline, never the wheel's
  /// lists, so a callback re-entered while its thread owns the wheel may call it.
  [[nodiscard]] static bool take_parked(JobSlot& s) noexcept;
  /// parked(s): the wheel owner holds slot s parked (due never), not in transit in the inbox.
  [[nodiscard]] static bool parked(const JobSlot& s) noexcept {
    return !s.timer.linked() && is_never(s.timer.deadline);
  }

 private:
  static constexpr std::uint32_t kLeaseSweep = 0xFFFF'FFFFu;  // the sweep's tag

  /// schedule_or_park(s, due, wheel): links s's node at due, or parks it when due is never.
  static void schedule_or_park(JobSlot& s, std::int64_t due, Wheel& wheel) noexcept;
  void sweep(std::int64_t now, Wheel& wheel, TimerClient& client) noexcept;
  /// lease_check_after(now): when a sweep must come at the latest for leases granted after now
  /// (kNever inline: sweep_inline checks them on every timer pass).
  [[nodiscard]] std::int64_t lease_check_after(std::int64_t now) const noexcept;

  EngineCore& core_;
  const std::string& queue_;
  std::uint16_t index_ = 0;  // the queue's (tag_nodes)
  JobSlot* slots_;
  std::size_t capacity_;
  MpmcRing<std::uint32_t> inbox_;
  std::atomic<std::int64_t> min_visibility_ns_;
  std::uint32_t warn_parts_;                  // QueueOptions::stall_warning (lease_tracker.hpp)
  TimerNode sweep_node_{};                    // the wheel owner's, like the slots' nodes
  std::atomic<bool> sweep_requested_{false};  // request_sweep() -> the wheel owner (drain)
  // The earliest deadline a shortened lease asked for since the last drain (kNever: none);
  // relaxed, carried by sweep_requested_'s release/acq_rel like the visibility bound.
  std::atomic<std::int64_t> sweep_by_ns_{std::numeric_limits<std::int64_t>::max()};
  // Repeatable jobs. A schedule's node is linked only after the table was published, so the
  // wheel's owner finds it built (LazyOwned's acquire).
  LazyOwned<ScheduleTable> schedules_;
};

}  // namespace rail::detail
