// JobFlow's downstream refusals and timer firings: a delivery its downstream refused (throttle:
// back to waiting in the gate's blocked ring, or to the wheel as the gate's leader until its
// token), the throttled event, and a timer's firing (a delayed or held job due again). See
// include/rail/detail/job_flow.hpp for the job's path and the ordering conventions.
#include <string>
#include <utility>

#include "rail/detail/assert.hpp"
#include "rail/detail/job_flow.hpp"

namespace rail::detail {

bool JobFlow::throttle(std::uint32_t idx, std::uint32_t token, std::uint16_t delivered,
                       std::int64_t expire, GateLink& gate,
                       const DownstreamGate::Decision& decision, std::int64_t now,
                       WorkerContext& wc) {
  JobSlot& s = slot(idx);
  // No delivery happened: undone before the word moves (expires_at's order).
  s.started_ns.store(expire, std::memory_order_relaxed);
  s.deliveries.store(delivered, std::memory_order_relaxed);
  if (parts_.core.observed()) {
    std::string why = "downstream '" + gate.gate().name() + "': ";
    Throttle cause = Throttle::none;
    switch (decision.why) {
      case Admission::Kind::no_permit:
        why += "every permit is in use";
        cause = Throttle::no_permit;
        break;
      case Admission::Kind::rate_limited:
        why += "no token before its rate refills";
        cause = Throttle::rate_limited;
        break;
      case Admission::Kind::paused:
        why += "paused by a pushback";
        cause = Throttle::paused;
        break;
      case Admission::Kind::admitted:
        break;
    }
    note_throttled(s, now,
                   decision.verdict == DownstreamGate::Verdict::lead ? decision.until_ns : -1,
                   cause, std::move(why));
  }
  if (decision.verdict == DownstreamGate::Verdict::block) {
    // Back to waiting (pins - 1) with its index in the blocked ring: still counted waiting.
    if (!s.ctl.deactivate(token)) {
      // Cancelled meanwhile: deliver goes on with this delivery (ending it unrun), so it keeps
      // its number (else its `started` event is numbered 0:
      // DownstreamInline.AJobCancelledAsItIsRefusedEndsCancelledWithItsDeliveryNumbered pins it).
      s.deliveries.store(
          static_cast<std::uint16_t>(delivered == 0xFFFF ? delivered : delivered + 1),
          std::memory_order_relaxed);
      s.started_ns.store(now, std::memory_order_relaxed);
      return false;
    }
    gate.blocked().push_back(idx);
    gate.gate().blocked(decision.why);
    if (delivered == 0) published(expire);  // unstarted again: the expiry sweep may take it
    return true;
  }
  // The leader: to the wheel until its token (or the pause's end), as a retry's backoff goes.
  const auto f = s.ctl.finish(token);
  RAIL_INVARIANT(f.result == SlotControl<>::Finish::live,
                 "throttle: no lease was granted, so nothing but this worker ends the delivery");
  if (ctl::flags(f.word) & ctl::kCancelRequested) {
    // Cancelled since it was activated: it ends here, as a job cancelled at stop does.
    gate.gate().forget_leader(s.id.load(std::memory_order_relaxed));
    parts_.count(&wc, kStarted);
    parts_.count(&wc, kFromReady);
    if (parts_.timed()) {  // a start that ran nothing, as a delivery skipped for its cancel
      parts_.record_start(wc, s, now);
      parts_.record(&wc, Latency::run, 0);
    }
    ends_.end(idx, EndKind::cancelled, DeadLetterReason::none, now, &wc);
    parts_.count(&wc, kAttemptEnded);
    return true;
  }
  // It waits for its downstream, not for a delay: still counted in `waiting` (it never left).
  s.due_ns.store(decision.until_ns, std::memory_order_relaxed);  // published by the inbox push
  s.mark(JobSlot::kHeld, true);
  s.ctl.leave_finishing(SlotState::delayed);
  timers_.submit(idx);
  if (delivered == 0) published(expire);
  return true;
}

void JobFlow::note_throttled(const JobSlot& s, std::int64_t now, std::int64_t until, Throttle cause,
                             std::string why) const noexcept {
  Event e = parts_.event(EventKind::throttled, s, now);
  e.throttle = cause;
  e.delay = until < 0 || is_never(until) ? Duration{-1} : Duration{until - now};
  e.error = std::move(why);
  parts_.core.emit(e);
}

void JobFlow::timer_fired(std::uint32_t idx, std::int64_t now) noexcept {
  // Read before the push: from then on a worker may take the slot (and end its job).
  const JobId id = slot(idx).id.load(std::memory_order_relaxed);
  GateLink* const gate = links_.link(slot(idx).downstream_link());
  // A job held for its downstream was counted waiting all along.
  const bool held = slot(idx).take_mark(JobSlot::kHeld);
  // The gate's leader is ready again: it steps down now, not when a worker delivers it, so that
  // a paused queue or busy workers cannot hold up another queue's jobs waiting at the gate. While
  // the index is ours: a job of higher priority it wakes is served ahead of it, and it carries
  // the chain (DownstreamGate::step_down).
  using StepDown = DownstreamGate::StepDown;
  const StepDown step = gate ? gate->gate().step_down(id, gate, idx) : StepDown::not_leader;
  if (step == StepDown::outranked) slot(idx).mark(JobSlot::kWoken, true);
  if (parts_.core.observed()) parts_.emit(EventKind::retry_due, slot(idx), now);
  if (Lines::lined(slot(idx))) [[unlikely]] {
    join_lines(idx, false);  // into `waiting` (counted there), in its lines ...
  } else if (held) {
    parts_.stats.add(kToReady);  // into `waiting` (counted there) ...
    dispatch_.requeue(idx);      // ... with its wait going on: it was waiting all along
  } else {
    dispatch_.push_ready(idx);  // into `waiting` (counted there) ...
  }
  parts_.stats.add(held ? kFromReady : kFromDelayed);  // ... before out of its gauge: counts()
  // None outranks it: the job it wakes comes after its push, behind it in the ready levels, so
  // that the leader, first in line, takes the token it waited for (else the woken job takes it,
  // and the leader, refused, leads again, each time, for as long as others wait:
  // DownstreamWakeups.TheLeaderIsNotOvertakenByTheJobsItWakes pins it).
  if (step == StepDown::in_line) gate->gate().wake_next();
}

}  // namespace rail::detail
