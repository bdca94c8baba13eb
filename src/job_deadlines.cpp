// JobFlow's deadlines: the lease and expiry sweeps, a job that expired or is shed before it
// started, a lapse or a timeout that fences a running delivery (the handler runs on as a zombie,
// asked to stop, its outcome ignored), and a delivery's stop token. See
// include/rail/detail/job_flow.hpp for the job's path and stop_cells.hpp for tokens.
#include <algorithm>
#include <atomic>
#include <string>
#include <utility>

#include "rail/detail/blank.hpp"
#include "rail/detail/job_flow.hpp"

namespace rail::detail {

void JobFlow::sweep_inline(std::int64_t now, Wheel& wheel) {
  if (parts_.core.mode() != Mode::inlined) return;
  (void)expiry_.sweep(
      now, wheel, dispatch_.stopping(std::memory_order_acquire));  // the sweep's timer asks again
  // processing() (acquire), not leases_: another thread may be in start_processing() building
  // the tracker; its release store of processing_ publishes the finished one.
  if (!parts_.leases_enabled() || !processing()) return;
  (void)sweep_leases(now);
}

std::int64_t JobFlow::sweep_leases(std::int64_t now) {
  return leases_->sweep(
      now, [&](std::uint64_t lease, std::int64_t deadline) { lapse(lease, deadline, now); },
      [&](std::uint64_t lease, std::int64_t deadline) { warn_stalling(lease, deadline, now); });
}

void JobFlow::sweep_by(std::int64_t due) noexcept {
  timers_.request_sweep_by(due);
}

std::int64_t JobFlow::timer_sweep(std::int64_t now, Wheel& wheel) noexcept {
  // The DLQ's age alert rides on the same sweep (DeadLetterStore::sweep_alerts).
  const std::int64_t expiry = std::min(
      expiry_.sweep(now, wheel, dispatch_.stopping(std::memory_order_acquire)), dlq_sweep(now));
  // Inline, leases are sweep_inline's.
  if (!leases_ || parts_.core.mode() != Mode::threaded) return expiry;
  return std::min(expiry, sweep_leases(now));
}

bool JobFlow::drop_unstarted(std::uint32_t idx, std::uint32_t token, std::int64_t expire,
                             bool carried, std::int64_t now, WorkerContext& wc) {
  JobSlot& s = slot(idx);
  DeadLetterReason why = DeadLetterReason::expired;
  if (now < expire) {
    // How long it waited to start: since it was added, or due after its delay.
    if (!shed_ || !shed_->report(now - s.due_ns.load(std::memory_order_relaxed), now)) return false;
    why = DeadLetterReason::shed;
  }
  // It never started: its count and expiry as they were (state() and the DLQ entry read them).
  s.started_ns.store(expire, std::memory_order_relaxed);
  s.deliveries.store(0, std::memory_order_relaxed);
  if (carried) links_.link(0)->give_back();
  // Woken from its downstream's blocked ring, it took a wake it cannot use: hand it on, as a
  // cancelled job's popper does (JobControl::drop_cancelled).
  if (GateLink* gate = links_.link(s.downstream_link())) {
    (void)s.take_mark(JobSlot::kWoken);
    gate->gate().pass_wake();
  }
  const auto f = s.ctl.finish(token);
  RAIL_INVARIANT(f.result == SlotControl<>::Finish::live,
                 "drop_unstarted: no lease was granted, so nothing but this worker ends it");
  // It leaves `waiting` (never `active`) once its end is recorded: as a worker's ends, so that a
  // queue seen idle has its DLQ entry.
  if (ctl::flags(f.word) & ctl::kCancelRequested) {
    ends_.end(idx, EndKind::cancelled, DeadLetterReason::none, now, &wc);  // cancel answered so
  } else {
    parts_.count(&wc, why == DeadLetterReason::expired ? kExpired : kShed);
    ends_.end(idx, EndKind::dead_lettered, why, now, &wc);
  }
  parts_.count(&wc, kFromReady);
  return true;
}

void JobFlow::lapse(std::uint64_t lease, std::int64_t deadline, std::int64_t now) {
  const std::uint32_t idx = lease_slot(lease);
  JobSlot& s = slot(idx);
  const auto l = s.ctl.lapse(lease_token(lease));
  if (!l.won) return;  // the handler's outcome won
  // Its handler runs on (`active` counts it until it returns, a zombie meanwhile): ask it to stop.
  parts_.ask_to_stop(idx, lease_token(lease));
  const Duration elapsed{now - s.started()};
  // The deadline that passed was the timeout's (a sweep may come late: not the time it ran).
  if (s.timeout_ns != kNever && deadline >= saturating_add(s.started(), Duration{s.timeout_ns})) {
    time_out(idx, elapsed, ctl::flags(l.word), now);
    return;
  }
  parts_.stats.add(kStalled);
  if (parts_.core.observed()) {
    Event e = parts_.event(EventKind::stalled, s, now);
    e.elapsed = elapsed;
    parts_.core.emit(e);
  }
  if (ctl::flags(l.word) & ctl::kCancelRequested) {
    // cancel() already answered "flagged": the job ends cancelled, not redelivered.
    ends_.end(idx, EndKind::cancelled, DeadLetterReason::none, now, nullptr);
    return;
  }
  std::string reason = "lease expired after " + std::to_string(elapsed.count() / 1'000'000) +
                       " ms (visibility timeout " + std::to_string(s.visibility_ns / 1'000'000) +
                       " ms)";
  const std::uint32_t stalls = s.stalled() + 1u;  // compared unsaturated: max_stalls may be 0xFFFF
  s.stalls.store(static_cast<std::uint16_t>(std::min<std::uint32_t>(stalls, 0xFFFF)),
                 std::memory_order_relaxed);
  if (parts_.options.stall_policy == StallPolicy::count_as_attempt) {
    SplitMix64 unused(0);  // a lapse redelivers at once (SQS): no backoff, no randomness
    fail_attempt(idx, std::move(reason), FailKind::lapse, Duration{0}, unused, now, nullptr);
    return;
  }
  // BullMQ: a stall costs no attempt; the one past the budget fails the job, and that failure
  // is an attempt made (its attempt_failed event, the DLQ entry and a redrive that keeps
  // counters count it, as BullMQ's attemptsMade does). Its error is logged under that attempt,
  // so the entry says why; the log has room for it (see SlotExtra; after a redrive that kept
  // counters, restore_counters reserved room for every record the job can still add).
  if (stalls > static_cast<std::uint32_t>(parts_.options.max_stalls)) {
    reason += "; stalled " + std::to_string(stalls) + " times (max_stalls " +
              std::to_string(parts_.options.max_stalls) + ")";
    SplitMix64 unused(0);  // no retry: no backoff, no randomness
    fail_attempt(idx, std::move(reason), FailKind::stalled_out, Duration{0}, unused, now, nullptr);
    return;
  }
  if (s.marked(JobSlot::kForward)) [[unlikely]] {
    forward(idx, reason, now, now, nullptr);  // its broker delivers it again, at once
    return;
  }
  s.due_ns.store(now, std::memory_order_relaxed);  // due again now: its wait starts
  s.ctl.leave_finishing(SlotState::waiting);
  dispatch_.push_ready(idx);
}

void JobFlow::warn_stalling(std::uint64_t lease, std::int64_t deadline, std::int64_t now) noexcept {
  // The delivery runs on in its handler, which may end it at any moment and the slot may take
  // another job: read as a seqlock over the slot's atomic fields (JobQueries reads a live job so),
  // the word, then the fields, then the word again. Nothing plain of the slot is read; a name
  // the slot keeps itself (NameTable full) is left out for that reason.
  const std::uint32_t idx = lease_slot(lease);
  const JobSlot& s = slot(idx);
  const std::uint64_t c = s.ctl.load();  // acquire: the fields below are the delivery's or newer
  if (ctl::state(c) != SlotState::active || ctl::seq(c) != lease_token(lease)) return;
  const std::uint16_t name = s.name_id();
  Event e = blank<Event>();
  e.kind = EventKind::stall_warning;
  e.at = TimePoint{Duration{now}};
  e.queue = parts_.name;
  e.job_id = s.id.load(std::memory_order_relaxed);
  e.attempt = s.attempts() + 1u;
  e.deliveries = s.delivered();
  e.elapsed = Duration{now - s.started()};
  e.delay = Duration{deadline - now};
  std::atomic_thread_fence(std::memory_order_acquire);  // the re-read below comes after them
  const std::uint64_t again = s.ctl.load(std::memory_order_relaxed);
  if (ctl::state(again) != SlotState::active || ctl::seq(again) != lease_token(lease))
    return;  // it ended meanwhile: no warning owed
  parts_.stats.add(kStallWarnings);
  if (!parts_.core.observed()) return;
  if (name != NameTable::kOwnName) e.job_name = parts_.core.names().name(name);
  parts_.core.emit(e);
}

void JobFlow::time_out(std::uint32_t idx, Duration elapsed, std::uint64_t flags, std::int64_t now) {
  JobSlot& s = slot(idx);
  parts_.stats.add(kTimedOut);
  if (parts_.core.observed()) {
    Event e = parts_.event(EventKind::timed_out, s, now);
    e.elapsed = elapsed;
    parts_.core.emit(e);
  }
  if (flags & ctl::kCancelRequested) {
    // cancel() already answered "flagged": the job ends cancelled, not retried.
    ends_.end(idx, EndKind::cancelled, DeadLetterReason::none, now, nullptr);
    return;
  }
  std::string reason = "timed out after " + std::to_string(elapsed.count() / 1'000'000) +
                       " ms (timeout " + std::to_string(s.timeout_ns / 1'000'000) + " ms)";
  // The backoff's jitter wants randomness: a stream of the job's own (no worker's is at hand).
  SplitMix64 rng(s.id.load(std::memory_order_relaxed) ^ static_cast<std::uint64_t>(now));
  fail_attempt(idx, std::move(reason), FailKind::timeout, Duration{0}, rng, now, nullptr);
}

std::stop_token delivery_stop_token(JobFlow& flow, std::uint32_t idx, std::uint32_t token) {
  return flow.stop_token(idx, token);
}

std::stop_token JobFlow::stop_token(std::uint32_t idx, std::uint32_t token) {
  const SlotControl<>& ctl = slot(idx).ctl;
  return parts_.stops.token(idx, token, [&ctl, token] { return ctl.fenced(token); });
}

}  // namespace rail::detail
