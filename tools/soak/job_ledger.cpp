// JobLedger: the soak's account of every job id. Contract: job_ledger.hpp.
#include "soak/job_ledger.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include "rail/options.hpp"

namespace rail::soak {
namespace {

/// delivery_bit(d): delivery d's bit in a Track mask, or 0 if d is outside what a mask holds.
std::uint16_t delivery_bit(std::uint32_t d) {
  return d >= 1 && d <= JobLedger::kMaxDelivery ? static_cast<std::uint16_t>(1u << (d - 1)) : 0;
}

}  // namespace

void JobLedger::on_event(const Event& e, Violations& v) noexcept {
  if (e.job_id == 0) return;
  if (e.job_id > max_id_) {
    v.add("event for job " + std::to_string(e.job_id) + " beyond every id the soak could add");
    return;
  }
  Track& t = track_[e.job_id];
  auto bump = [](std::atomic<std::uint16_t>& a) { a.fetch_add(1, std::memory_order_relaxed); };
  switch (e.kind) {
    case EventKind::added:
      if (e.delay.count() > 0) t.delayed.store(1, std::memory_order_relaxed);
      break;
    case EventKind::started: {
      bump(t.started);
      const std::uint16_t bit = delivery_bit(e.deliveries);
      if (bit == 0)
        v.add("job " + std::to_string(e.job_id) + ": a start numbered " +
              std::to_string(e.deliveries));
      else if (t.started_mask.fetch_or(bit) & bit)
        v.add("job " + std::to_string(e.job_id) + ": delivery " + std::to_string(e.deliveries) +
              " started twice");
      break;
    }
    case EventKind::attempt_failed:
      bump(t.failed);
      break;
    case EventKind::timed_out:
    case EventKind::stalled:
      bump(e.kind == EventKind::stalled ? t.stalled : t.timed_out);
      // A lapse on the wheel's owner raises its events once the wheel is released, while a
      // lapse that dead-letters files the DLQ entry at once: a redrive can come between, and
      // its `redriven` event first. A stall seen while a redriven life's predecessor has not
      // reported its dead_lettered yet is that predecessor's, not one of this life's
      // deliveries; so is one whose delivery started before the latest redrive (its events
      // held back while the job went on to dead-letter and be redriven: a preempted timer
      // thread).
      if (t.dead.load() >= t.redriven.load() &&
          (e.at - e.elapsed).time_since_epoch().count() >= t.redriven_at.load())
        t.stalled_mask.fetch_or(delivery_bit(e.deliveries));
      break;
    case EventKind::late_outcome:
      bump(t.late);
      break;
    case EventKind::completed:
      bump(t.completed);
      t.completed_delivery.store(static_cast<std::uint16_t>(e.deliveries));
      break;
    case EventKind::dead_lettered:
      bump(t.dead);
      if (e.reason == DeadLetterReason::lease_expired) bump(t.stalled_out);
      if (e.reason == DeadLetterReason::expired) {
        bump(t.expired);
        // Never once it started: no delivery of this life may have begun (a redrive clears
        // the mask before the new life's first start). An expiry ended on the wheel's owner
        // raises its event once the wheel is released, while its DLQ entry is filed at once: a
        // redrive, and the next life's starts, can come between. Such an event is an earlier
        // life's (fewer ends than lives so far), and only the current life's is checked.
        if (t.dead.load() > t.redriven.load() && t.started_mask.load() != 0)
          v.add("job " + std::to_string(e.job_id) + ": expired after a delivery started");
      }
      break;
    case EventKind::cancelled:
      bump(t.cancelled);
      break;
    case EventKind::discarded:
      bump(t.discarded);
      break;
    case EventKind::redriven:
      // Raised before the new life is published, so before any of its starts: the delivery
      // numbering restarts here.
      t.redriven_at.store(e.at.time_since_epoch().count());
      bump(t.redriven);
      t.started_mask.store(0);
      t.stalled_mask.store(0);
      break;
    case EventKind::throttled:
      // A pushback ends a delivery (its handler returned); a refusal comes before one.
      if (e.throttle == Throttle::pushed_back) bump(t.pushed);
      break;
    default:
      break;
  }
}

void JobLedger::account(const Config& cfg, const std::unordered_map<JobId, DlqFiled>& dlq,
                        Report& rep, Violations& v) const {
  // Under StallPolicy::own_budget a lapse is not a failed attempt (no attempt_failed event)
  // unless it is the one past the budget, which dead-letters the job with reason lease_expired
  // and is both; so a life's deliveries are its failures, its stalls (less that last one) and
  // its completion. Under count_as_attempt every lapse is also a failure.
  const bool own_budget = cfg.stall_policy == StallPolicy::own_budget;
  for (std::uint64_t id = 1; id <= max_id_; ++id) {
    const Track& t = track_[id];
    std::uint32_t ends = t.completed + t.dead + t.cancelled + t.discarded;
    auto job = [id] { return "job " + std::to_string(id) + ": "; };  // only on a violation
    if (!t.accepted) {
      if (ends || t.started || t.taken) v.add(job() + "events for a job never accepted");
      continue;
    }
    // The checker's account: each life ends once, or its last one is handed back.
    const std::uint32_t lives = 1u + t.redriven, accounted = ends + t.taken;
    if (accounted == lives) {
      ++rep.ok_jobs;
    } else {
      ++(accounted < lives ? rep.lost : rep.duplicated);
      v.add(job() + std::to_string(lives) + " lives, " + std::to_string(ends) + " ends and " +
            std::to_string(t.taken) + " handed back");
    }
    ++rep.accepted;
    rep.completed += t.completed;
    rep.dead_lettered += t.dead;
    rep.cancelled += t.cancelled;
    rep.discarded += t.discarded;
    rep.stalls += t.stalled;
    rep.timed_out += t.timed_out;
    rep.expired += t.expired;
    rep.late_outcomes += t.late;
    rep.deliveries += t.started;
    rep.failed_attempts += t.failed;
    rep.pushbacks += t.pushed;
    if (t.delayed) ++rep.delayed;
    if (accounted != lives) continue;
    if (t.cancel_accepted == 1 && !t.cancelled)  // 2: a parent its edges may cancel
      v.add(job() + "cancel() accepted but it did not end cancelled");
    if (t.cancelled && !t.cancel_accepted)
      v.add(job() + "ended cancelled but no cancel() of it was accepted");
    if (t.completed && (t.stalled_mask & delivery_bit(t.completed_delivery))) {
      ++rep.late_applied;
      v.add(job() + "completed by delivery " + std::to_string(t.completed_delivery) +
            " whose lease had lapsed (life " + std::to_string(lives) + ")");
    }
    if (t.redriven || t.taken) continue;  // the checks below count one whole life
    if (t.late != t.stalled + t.timed_out)
      v.add(job() + std::to_string(t.stalled) + " lapses and " + std::to_string(t.timed_out) +
            " timeouts but " + std::to_string(t.late) + " late outcomes");
    // Starts numbered exactly 1..n: no gap, no repeat (a repeat was reported when it happened).
    const auto all_n =
        static_cast<std::uint16_t>((1u << std::min<std::uint32_t>(t.started, 16)) - 1);
    if (t.started > kMaxDelivery || t.started_mask != all_n)
      v.add(job() + std::to_string(t.started) + " starts, numbered other than 1.." +
            std::to_string(t.started));
    const std::uint32_t ended_deliveries =
        t.failed + (own_budget ? t.stalled.load() - t.stalled_out.load() : 0u) + t.pushed.load();
    if ((t.completed || t.discarded) && ended_deliveries + 1 != t.started)
      v.add(job() + (t.completed ? "completed" : "discarded") + " after " +
            std::to_string(t.started) + " deliveries with " + std::to_string(t.failed) +
            " failures, " + std::to_string(t.stalled) + " stalls and " + std::to_string(t.pushed) +
            " pushbacks");
    if (own_budget && t.stalled > static_cast<std::uint32_t>(QueueOptions{}.max_stalls) + 1)
      v.add(job() + std::to_string(t.stalled) + " stalls, past the budget of " +
            std::to_string(QueueOptions{}.max_stalls));
    if (t.dead) {
      if (ended_deliveries != t.started)
        v.add(job() + "dead-lettered after " + std::to_string(t.started) + " deliveries with " +
              std::to_string(t.failed) + " failures and " + std::to_string(t.stalled) + " stalls");
      auto entry = dlq.find(id);
      if (entry == dlq.end()) {
        v.add(job() + "dead-lettered but not in the DLQ");
      } else if (entry->second.attempts != t.failed || entry->second.deliveries != t.started ||
                 entry->second.stalls != t.stalled) {
        v.add(job() + "DLQ entry says " + std::to_string(entry->second.attempts) + " attempts, " +
              std::to_string(entry->second.deliveries) + " deliveries and " +
              std::to_string(entry->second.stalls) + " stalls; events say " +
              std::to_string(t.failed) + ", " + std::to_string(t.started) + " and " +
              std::to_string(t.stalled));
      }
    }
  }
}

}  // namespace rail::soak
