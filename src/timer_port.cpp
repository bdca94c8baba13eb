// TimerPort: see include/rail/detail/timer_port.hpp.
#include "rail/detail/timer_port.hpp"

#include <algorithm>
#include <thread>

#include "rail/detail/deadline.hpp"

namespace rail::detail {

TimerPort::TimerPort(EngineCore& core, const std::string& queue, JobSlot* slots,
                     std::size_t capacity, Duration visibility, std::uint32_t warn_parts)
    : core_(core),
      queue_(queue),
      slots_(slots),
      capacity_(capacity),
      inbox_(capacity),
      min_visibility_ns_(visibility.count()),
      warn_parts_(warn_parts) {}

void TimerPort::tag_nodes(std::uint16_t queue) noexcept {
  index_ = queue;
  for (std::uint32_t i = 0; i < capacity_; ++i)
    slots_[i].timer.tag = (std::uint64_t{queue} << 32) | i;
  sweep_node_.tag = (std::uint64_t{queue} << 32) | kLeaseSweep;
}

ScheduleTable& TimerPort::schedules() {
  return schedules_.get_or_make(
      [&] { return std::make_unique<ScheduleTable>(core_, index_, queue_); });
}

void TimerPort::submit(std::uint32_t idx) noexcept {
  inbox_.push_held(idx);
  core_.signal_timer();
}

void TimerPort::request_sweep() noexcept {
  // release: the owner's acq_rel exchange sees the visibility timeout lowered before this.
  sweep_requested_.store(true, std::memory_order_release);
  core_.signal_timer();
}

bool TimerPort::lower_visibility(std::int64_t v) noexcept {
  // seq_cst: a Dekker hand-off with JobFlow::start_processing (see admit_unusual): either the
  // adder sees processing_ and requests a sweep, or the sweep's arming reads this lower bound.
  std::int64_t cur = min_visibility_ns_.load(std::memory_order_seq_cst);
  while (v < cur) {
    if (min_visibility_ns_.compare_exchange_weak(cur, v, std::memory_order_seq_cst)) return true;
  }
  return false;
}

void sweep_no_later_than(TimerPort& port, std::int64_t deadline) noexcept {
  port.request_sweep_by(deadline);
}

void TimerPort::request_sweep_by(std::int64_t deadline) noexcept {
  std::int64_t cur = sweep_by_ns_.load(std::memory_order_relaxed);
  while (deadline < cur &&
         !sweep_by_ns_.compare_exchange_weak(cur, deadline, std::memory_order_relaxed)) {
  }
  request_sweep();  // release: publishes sweep_by_ns_ to drain's acq_rel exchange
}

void TimerPort::drain(Wheel& wheel, TimerClient& client) noexcept {
  // acq_rel: consumes the request and acquires the min_visibility_ns_ lowered before it.
  if (sweep_requested_.exchange(false, std::memory_order_acq_rel)) {
    // (Re)arm the sweep no later than one shortest visibility timeout from now (its stall
    // warning's share of it), or than a shortened lease's deadline.
    const std::int64_t at = std::min(lease_check_after(wheel.now_ns()),
                                     sweep_by_ns_.exchange(kNever, std::memory_order_relaxed));
    if (!is_never(at) && (!sweep_node_.linked() || sweep_node_.deadline > at)) {
      wheel.cancel(sweep_node_);
      wheel.schedule(sweep_node_, at);
    }
  }
  std::uint32_t idx;
  while (inbox_.try_pop(idx)) {
    JobSlot& s = slots_[idx];
    switch (ctl::state(s.ctl.load())) {
      case SlotState::cancelled:  // cancelled on its way here: the client's to reclaim
        client.timer_reclaim(idx);
        break;
      case SlotState::free:  // taken by take_leftovers on its way here: nothing to run
        break;
      default:
        // relaxed: due_ns was written by the submitter before the inbox push (ring acquire).
        schedule_or_park(s, s.due_ns.load(std::memory_order_relaxed), wheel);
    }
  }
}

void TimerPort::fire(std::uint32_t tag, std::int64_t now, Wheel& wheel,
                     TimerClient& client) noexcept {
  if (ScheduleTable::owns_tag(tag)) [[unlikely]] {
    schedules_.get()->fire(tag, now, wheel);  // linked only once the table was built
    return;
  }
  if (tag == kLeaseSweep) {
    sweep(now, wheel, client);
    return;
  }
  JobSlot& s = slots_[tag];
  std::uint64_t c = s.ctl.load();  // acquire: sees a debounce's payload and due time
  for (;;) {
    switch (ctl::state(c)) {
      case SlotState::updating:
        std::this_thread::yield();  // a debounce is replacing the payload: a few stores
        c = s.ctl.load();
        continue;
      case SlotState::cancelled:
        client.timer_reclaim(tag);
        return;
      case SlotState::free:  // taken by take_leftovers (which unlinks its timer): defensive
        return;
      default:
        break;
    }
    const std::int64_t due = s.due_ns.load(std::memory_order_relaxed);  // ordered by ctl acquire
    if (due > now) {  // a debounce moved the deadline later
      schedule_or_park(s, due, wheel);
      return;
    }
    if (s.ctl.fire(c)) {
      client.timer_fired(tag, now);
      return;
    }
  }
}

bool TimerPort::retime(std::uint32_t idx, std::uint64_t c, std::int64_t due, std::int64_t now,
                       Wheel& wheel, TimerClient& client) noexcept {
  JobSlot& s = slots_[idx];
  if (!s.ctl.begin_retime(c)) return false;
  // A slot turns delayed just before its index is pushed to the inbox (publish_new,
  // fail_attempt's retry): one that was delayed when the inbox was drained may still be in
  // transit. Its submitter is a few instructions from the push and waits for nothing, so wait
  // for the index here, holding the slot in `updating`, rather than take its absence for a
  // broken invariant (PeerRetime.PromoteOfAJobOnItsWayToTheTimerDoesNotAbort pins it).
  bool held = unlink(s, wheel);
  while (!held) {
    std::this_thread::yield();
    drain(wheel, client);
    held = unlink(s, wheel);
  }
  s.due_ns.store(due, std::memory_order_relaxed);  // ordered by end_retime's release
  s.ctl.end_retime();
  fire(idx, now, wheel, client);  // due has come: ready now; else linked (or parked) at due
  return true;
}

bool TimerPort::unlink(JobSlot& s, Wheel& wheel) noexcept {
  if (take_parked(s)) return true;      // due never: held by the wheel owner
  if (!s.timer.linked()) return false;  // fired, or still on its way here
  wheel.cancel(s.timer);
  return true;
}

bool TimerPort::take_parked(JobSlot& s) noexcept {
  // Resetting the deadline keeps "unlinked with deadline kNever" meaning parked.
  if (s.timer.linked() || !is_never(s.timer.deadline)) return false;
  s.timer.deadline = 0;
  return true;
}

void TimerPort::schedule_or_park(JobSlot& s, std::int64_t due, Wheel& wheel) noexcept {
  // Parked: the slot stays `delayed` (counted, visible to state(), cancellable) and nothing but
  // a cancel or a take un-parks it (a debounce only moves a due time later).
  if (is_never(due)) {
    s.timer.deadline = kNever;
    return;
  }
  wheel.schedule(s.timer, due);
}

std::int64_t TimerPort::lease_check_after(std::int64_t now) const noexcept {
  // Inline: only a deadline asked for (see sweep()).
  if (core_.mode() != Mode::threaded) return kNever;
  // seq_cst: see lower_visibility (drain's read must not miss a bound lowered before a request).
  std::int64_t period = min_visibility_ns_.load(std::memory_order_seq_cst);
  // A lease granted after this sweep warns no sooner than its share of the shortest lease.
  if (warn_parts_ != 0 && !is_never(period))
    period = std::max<std::int64_t>(1, fraction_of(period, warn_parts_));
  return saturating_add(now, Duration{period});
}

void TimerPort::sweep(std::int64_t now, Wheel& wheel, TimerClient& client) noexcept {
  // Inline, leases are checked on every timer pass instead (sweep_inline): the sweep's timer
  // stands only for what the client asks for (expiries), so next_timer_in() sees them and
  // nothing re-arms for ever.
  const std::int64_t next = std::min(lease_check_after(now), client.timer_sweep(now, wheel));
  // A sweep due never is not armed: re-arming at a wrapped "now + max" made the timer thread
  // spin. request_sweep() (a shorter visibility timeout) arms it again.
  if (!is_never(next)) wheel.schedule(sweep_node_, next);
}

}  // namespace rail::detail
