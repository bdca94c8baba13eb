// JobControl: cancel, retime and the return of cancelled jobs' slots. Contract and ordering:
// job_control.hpp.
#include "rail/detail/job_control.hpp"

#include <algorithm>
#include <thread>

#include "rail/detail/scoped_value.hpp"
#include "rail/error.hpp"

namespace rail::detail {

bool JobControl::cancel(JobId id) {
  // An ended job's old slot may still carry its id (a redriven job lives in a new slot), so a
  // slot that no longer holds the job does not end the scan.
  for (std::uint32_t i = 0; i < parts_.capacity; ++i) {
    if (parts_.slot(i).id.load(std::memory_order_relaxed) != id) continue;
    if (auto done = try_cancel(i, id)) {
      if (*done) dispatch_.note_if_idle(false);  // the queue's last job may have gone
      return *done;
    }
  }
  return false;
}

std::optional<bool> JobControl::try_cancel(std::uint32_t idx, JobId id) {
  JobSlot& s = parts_.slot(idx);
  std::uint64_t c = s.ctl.load();
  for (;;) {
    // The id is re-checked after every read of the word: a CAS against that word fails if the
    // slot was reused in between, so acting on a matching id is safe.
    if (s.id.load(std::memory_order_relaxed) != id) return std::nullopt;
    const auto r = s.ctl.cancel(c);
    switch (r.result) {
      case SlotControl<>::Cancel::flagged:
        // Running: its handler is asked to stop (its delivery's token: the word's sequence).
        parts_.ask_to_stop(idx, ctl::seq(r.word));
        return true;
      case SlotControl<>::Cancel::not_found:
        return std::nullopt;
      case SlotControl<>::Cancel::busy:
        if (ctl::state(r.word) == SlotState::finishing) {
          if (Holding* h = Holding::of(s)) {
            if (h->ending()) return false;  // an observer of the job's end
            h->request_cancel();            // an observer of its failed attempt
            return true;
          }
        }
        if (ctl::state(r.word) == SlotState::finishing || ctl::state(r.word) == SlotState::updating)
          std::this_thread::yield();  // a transition of a few stores is in progress
        c = r.word;
        continue;
      case SlotControl<>::Cancel::taken:
        end_cancelled(idx, ctl::state(r.word));
        return true;
    }
  }
}

void JobControl::end_cancelled(std::uint32_t idx, SlotState from) {
  // cancel() took a waiting or delayed job and holds a pin on its slot: record its end, then
  // give the slot back. A delayed job's timer is unlinked here, so its capacity returns at once
  // instead of at its deadline; a waiting job's slot returns when a worker pops its index, when
  // an add that finds no room sweeps the ready ring (reclaim_waiting) or, in a blocked
  // ring (which only wakes pop), when the sweep below does.
  JobSlot& s = parts_.slot(idx);
  // Parked in a line (its group's, or holding its group's turn, its tenant's), its index is the
  // line's: out of it, the index is ours. Before the end is recorded, which closes the turns it
  // holds.
  bool held = from == SlotState::waiting && lines_.unpark(idx);
  JobEnds::Settled settled = ends_.record(s, EndKind::cancelled, parts_.core.now_ns(), nullptr);
  // Out of its gauge once the end is recorded and observed (as a worker's ends are): a drain()
  // that sees the queue idle then also finds the `cancelled` event delivered.
  // A job held on the wheel for its downstream was counted waiting.
  const bool waiting = from == SlotState::waiting || s.marked(JobSlot::kHeld);
  parts_.stats.add(waiting ? kFromReady : kFromDelayed);
  const JobId id = s.id.load(std::memory_order_relaxed);
  // A leader of its downstream's waiting jobs leaves the wheel: another job must lead.
  if (GateLink* gate = links_.link(s.downstream_link()); gate && from == SlotState::delayed)
    gate->gate().forget_leader(id);
  if (from == SlotState::delayed) {
    // As the wheel's owner: link what is in transit, then take the node off the wheel; its
    // index is then ours. Re-entered from a timer callback while this thread owns the wheel, a
    // linked node is reclaimed when it fires, but a parked one never fires, so take it here.
    held = parts_.core
               .with_wheel([&](Wheel& wheel) {
                 timers_.drain(wheel, client_);
                 return timers_.unlink(s, wheel);
               })
               .value_or(parts_.core.owns_wheel() && TimerPort::take_parked(s));
  }
  if (s.ctl.unpin()) {
    ends_.final_end(idx);  // the index's holder came by while we recorded the end
  } else if (held) {
    ends_.reclaim_cancelled(idx);
  }
  if (from == SlotState::waiting) {
    sweep_blocked();
    // Its index may be in the ready ring: the next add that finds no room sweeps it. release:
    // see reclaim_waiting. Before ends_.ended(), whose kept add must find the slot this
    // cancel frees rather than go to the DLQ as an overflow
    // (ThreadedEngine.AKeptAddRunByTheCancelOfItsWaitingJobTakesTheSlotTheCancelFrees pins it),
    // and before cancel() returns.
    waiting_cancels_.fetch_add(1, std::memory_order_release);
  }
  ends_.ended(id, std::move(settled));  // an add kept while the job ran before a lapse requeued it
}

JobControl::Expired JobControl::expire(std::uint32_t idx, std::uint64_t c, Wheel& wheel) {
  JobSlot& s = parts_.slot(idx);
  if (!s.ctl.expire(c)) return Expired::moved_on;
  if (ctl::state(c) == SlotState::delayed) {
    // Marked before the wheel is released (which publishes it to a later owner's drain): it
    // leaves `delayed` when it ends, unless it was held for its downstream (counted waiting).
    if (!s.marked(JobSlot::kHeld)) s.mark(JobSlot::kExpiredDelayed, true);
    if (GateLink* gate = links_.link(s.downstream_link()))
      gate->gate().forget_leader(s.id.load(std::memory_order_relaxed));  // another must lead
    if (!timers_.unlink(s, wheel)) return Expired::in_transit;           // drain() reclaims it
    ends_.reclaim_cancelled(idx);
    return Expired::ended;
  }
  // Parked in a line (its group's, or waiting for its tenant's turn), its index is the line's:
  // out of it, the index is ours.
  if (lines_.unpark(idx)) {
    ends_.reclaim_cancelled(idx);
    return Expired::ended;
  }
  // release: a sweep of the ready ring after this (reclaim_waiting) sees it taken.
  waiting_cancels_.fetch_add(1, std::memory_order_release);
  return Expired::in_ring;
}

void JobControl::after_expiries(bool in_ring) noexcept {
  if (in_ring) {
    sweep_blocked();
    (void)reclaim_waiting();
  }
  dispatch_.note_if_idle(false);
}

void JobControl::drop_cancelled(std::uint32_t idx) {
  GateLink* const gate =
      links_.link(parts_.slot(idx).downstream_link());  // read while the index is still ours
  ends_.reclaim_cancelled(idx);
  // Woken from the blocked ring, it took a wake it cannot use: hand it on (else a cancelled job
  // behind a cancelled leader strands the rest:
  // DownstreamWakeups.CancellingTheLeaderAndTheJobBehindItLeavesNoJobStranded pins it).
  if (gate) [[unlikely]]
    gate->gate().pass_wake();
}

bool JobControl::reclaim_waiting() noexcept {
  // Not from inside a sweep of any queue: a cancelled payload's destructor that adds to a full
  // queue would wait for a lock this thread holds (its own queue's, or one whose sweep is up
  // this thread's stack).
  thread_local bool sweeping = false;
  if (sweeping) return false;
  // acquire: pairs with end_cancelled's release increment, so a sweep after it sees the cancel
  // (an add ordered after a cancel, on the same thread or synchronised with it, sees it).
  const std::uint64_t cancels = waiting_cancels_.load(std::memory_order_acquire);
  if (cancels == 0) return false;  // no waiting job was ever cancelled: nothing to reclaim
  // What a sweep must have seen: every cancel so far, and every index a worker held back for a
  // pause (Dispatcher::held_back: popped before the last sweep's pass, stashed after it, it
  // would wait out the pause with a cancelled job's slot:
  // ThreadedEngine.APausedQueueGivesBackEveryCancelledSlotDedicated pins it). Both only grow,
  // so their sum equals the last sweep's only if neither moved since. acquire: pairs with the
  // release store below, so the slots that sweep freed are visible to the caller's next look.
  if (sweep_mark() == swept_mark_.load(std::memory_order_acquire)) return true;
  const std::lock_guard lock(reclaim_mu_);
  // Read before the pass: a cancel or a hold-back during it leaves the marks apart, for the next
  // add that finds no room. Equal already: another add swept while we waited for the lock.
  const std::uint64_t seen = sweep_mark();
  if (seen == swept_mark_.load(std::memory_order_relaxed)) return true;
  const ScopedValue<bool> mark(sweeping, true);
  dispatch_.sweep_ready([this](std::uint32_t idx) {
    switch (parts_.slot(idx).ctl.held()) {
      case SlotControl<>::Held::waiting:
        return true;
      case SlotControl<>::Held::cancelled:
        drop_cancelled(idx);  // as its popper would
        return false;
      case SlotControl<>::Held::taken:
        return false;  // as its popper would
    }
    return true;
  });
  swept_mark_.store(seen, std::memory_order_release);  // after the pass: see above
  return true;
}

void JobControl::sweep_blocked() noexcept {
  // Cold (a cancel). The blocked ring is popped only by wakes, which a stalled downstream may
  // not make for a long time: a cancelled job there would keep its slot (and count as blocked)
  // as long, and a queue full of cancelled jobs would answer `full`
  // (DownstreamWakeupThreaded.CancelledBlockedJobsGiveTheirSlotsBack pins it). Each index present
  // now is taken once: a cancelled job's slot is reclaimed, as a popper reclaims it; one taken by
  // take_leftovers after shutdown is dropped, as a popper drops it; the rest go back, in order.
  links_.for_each([this](GateLink& link) {
    std::int64_t removed = 0;
    link.blocked().sweep([](auto&&) {},
                         [&](std::uint32_t idx) {
                           const auto held = parts_.slot(idx).ctl.held();
                           if (held == SlotControl<>::Held::waiting) return true;
                           ++removed;
                           if (held == SlotControl<>::Held::cancelled) ends_.reclaim_cancelled(idx);
                           return false;
                         });
    link.gate().swept(removed, parts_.core.now_ns());
  });
}

bool JobControl::retime(JobId id, std::int64_t due, bool held_only) {
  // As the wheel's owner: the timer is unlinked and relinked (or fired) in one step, so an
  // earlier due time takes effect at once rather than when the old timer would have fired.
  const auto done = parts_.core.with_wheel([&](Wheel& wheel) {
    timers_.drain(wheel, client_);  // slots in transit to the wheel are linked now
    const std::int64_t now = parts_.core.now_ns();
    for (std::uint32_t i = 0; i < parts_.capacity; ++i) {
      JobSlot& s = parts_.slot(i);
      if (s.id.load(std::memory_order_relaxed) != id) continue;
      for (;;) {
        const std::uint64_t c = s.ctl.load();
        // The id is re-read after the word: retime's CAS against c fails if the slot moved on.
        if (ctl::state(c) != SlotState::delayed || s.id.load(std::memory_order_relaxed) != id)
          break;
        // Held for its downstream, the job is waiting, not delayed: a user's promote or
        // change_delay does not apply (BullMQ: "not in the delayed state"). The gate's applies
        // only to a job still held: one a debounce moved later waits for that now.
        if (s.marked(JobSlot::kHeld) != held_only) break;
        // A parent waiting for its children starts when they end, not when a user says.
        if (s.marked(JobSlot::kWaitingChildren)) break;
        // A gate's leader is held, so only its gate retimes it, to now: it fires here and steps
        // down in timer_fired. A user's retime never moves a leader
        // (DownstreamWakeups.ALeaderIsWaitingSoChangeDelayAndPromoteLeaveItToItsGate pins it).
        if (timers_.retime(i, c, std::max(due, now), now, wheel, client_)) return true;
        // The CAS failed: a stale handler unpinned (the job is still delayed: try again), or
        // the job moved on (the loop ends).
      }
    }
    return false;
  });
  if (!done)
    throw Error(ErrorCode::would_deadlock,
                "promote/change_delay on queue '" + parts_.name +
                    "' was called from a callback that runs while timers fire (an observer of "
                    "retry_due/stalled, a DLQ alert); call it from outside those callbacks");
  return *done;
}

}  // namespace rail::detail
