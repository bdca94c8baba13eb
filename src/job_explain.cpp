// JobFlow::explain: why a job has not started, and the oldest wait per priority level
// (Queue::explain; the contract and the order of the answers are in include/rail/explanation.hpp).
// Read-only and cold, like state(): the job's own fields are read as state() reads them (the slot's
// id again after the fields: a slot reused meanwhile is read as "not waiting"), the queue's and its
// downstream's figures are snapshots.
#include <algorithm>
#include <string>

#include "rail/detail/job_flow.hpp"

namespace rail::detail {
namespace {

/// in_ms(ns): a wait in whole milliseconds, rounded up (a wait of 1 ns is not "0 ms").
std::string in_ms(std::int64_t ns) {
  return std::to_string(ns <= 0 ? 0 : (ns + 999'999) / 1'000'000) + " ms";
}

/// more_before(text, ahead, one, many): appends "; N more <one|many> before it" when N > 0.
void more_before(std::string& text, std::uint64_t ahead, const char* one, const char* many) {
  if (ahead == 0) return;
  text.append("; ").append(std::to_string(ahead)).append(ahead == 1 ? one : many);
}

std::string jobs_before(std::uint64_t ahead) {
  return ahead == 1 ? std::string("1 waiting job added before it")
                    : std::to_string(ahead) + " waiting jobs added before it";
}

}  // namespace

Explanation JobFlow::explain(JobId id) const {
  Explanation e;
  e.state = state(id);
  const std::int64_t now = parts_.core.now_ns();
  const std::string queue = "queue '" + parts_.name + "'";
  if (e.state.status == JobStatus::delayed) {
    e.holdup = Holdup::delayed;
    e.until = e.state.since;
    e.text = "delayed: due in " + in_ms(e.until.time_since_epoch().count() - now) +
             " (its delay, a retry's backoff or a debounce)";
    return e;
  }
  if (e.state.status == JobStatus::waiting_children) {
    e.holdup = Holdup::children;
    e.text = "waiting for its children to end (JobOptions::after)";
    return e;
  }
  if (e.state.status != JobStatus::waiting) {
    e.text = "not waiting to start: " + std::string(to_string(e.state.status));
    return e;
  }
  // Its slot, for the downstream it calls: read as state() reads a slot (the word, the field,
  // then the word and the id again); a slot that moved meanwhile holds another job by now, and
  // this one started or ended.
  std::uint8_t link = 0;
  std::uint32_t priority = 0;
  bool grouped = false, tenant = false;
  std::uint32_t at = 0;
  bool found = false;
  for (std::uint32_t i = 0; i < parts_.capacity && !found; ++i) {
    const JobSlot& s = parts_.slot(i);
    if (s.id.load(std::memory_order_relaxed) != id) continue;
    const std::uint64_t c = s.ctl.load();
    if (ctl::state(c) != SlotState::waiting && ctl::state(c) != SlotState::delayed) continue;
    link = s.downstream_link();
    priority = s.priority();
    e.priority = priority;
    grouped = s.marked(JobSlot::kGrouped);
    tenant = s.marked(JobSlot::kTenant);
    std::atomic_thread_fence(std::memory_order_acquire);  // the fields before the re-reads
    found = s.id.load(std::memory_order_relaxed) == id && s.ctl.load() == c;
    at = i;
  }
  if (!found) {
    e.state = state(id);
    e.text = "not waiting to start: " + std::string(to_string(e.state.status));
    return e;
  }
  if (!processing()) {
    e.holdup = Holdup::no_processor;
    e.text = "waiting: " + queue + " has no processor (call process())";
    return e;
  }
  if (dispatch_.paused()) {
    e.holdup = Holdup::paused;
    e.text = "waiting: " + queue + " is paused";
    return e;
  }
  if (grouped) {
    // Its place is read under its group's lock, so it is a snapshot of the line as it was; a
    // slot reused since by a job of another group is in no line now (or not where this job was).
    const FifoGroups::Place p = lines_.groups().place(at);
    if (p.holder != FifoGroups::kNone && slot(at).id.load(std::memory_order_relaxed) == id) {
      e.holdup = Holdup::group_turn;
      e.group = p.group;
      e.behind = slot(p.holder).id.load(std::memory_order_relaxed);
      e.ahead = p.ahead;
      e.text = std::string("waiting: behind job ")
                   .append(std::to_string(e.behind))
                   .append(", which holds the turn of group '")
                   .append(e.group)
                   .append("'");
      more_before(e.text, e.ahead, " more job of the group waits before it",
                  " more jobs of the group wait before it");
      return e;
    }
  }
  if (tenant) {
    // As the group's place: a snapshot of the tenant's line under its lock.
    const FifoGroups::Place p = lines_.tenants().place(at);
    if (!p.group.empty() && slot(at).id.load(std::memory_order_relaxed) == id) {
      e.holdup = Holdup::tenant_share;
      e.tenant = p.group;
      e.busy = p.taken;
      e.limit = p.turns;
      e.ahead = p.ahead;
      e.text = std::string("waiting: tenant '")
                   .append(e.tenant)
                   .append("' has ")
                   .append(std::to_string(e.busy))
                   .append(" of its ")
                   .append(std::to_string(e.limit))
                   .append(" jobs ready or running");
      more_before(e.text, e.ahead, " more of its jobs waits before it",
                  " more of its jobs wait before it");
      return e;
    }
  }
  if (const GateLink* gate = links_.link(link)) {
    const DownstreamGate& g = gate->gate();
    const DownstreamSnapshot d = g.limits().snapshot(now);
    const std::string which = "downstream '" + g.name() + "'";
    e.downstream = g.name();
    if (d.paused_until_ns > now) {
      e.holdup = Holdup::downstream_paused;
      e.until = TimePoint{Duration{d.paused_until_ns}};
      e.text = "waiting: " + which + " admits nothing for " + in_ms(d.paused_until_ns - now);
      return e;
    }
    if (d.concurrency != 0 && d.in_flight >= d.concurrency) {
      e.holdup = Holdup::downstream_full;
      e.busy = d.in_flight;
      e.limit = d.concurrency;
      e.text = "waiting: " + which + " has " + std::to_string(d.in_flight) + " of " +
               std::to_string(d.concurrency) + " permits in use";
      return e;
    }
    if (d.tokens && *d.tokens == 0) {
      e.holdup = Holdup::downstream_rate;
      const std::optional<std::int64_t> due = gate->gate().limits().token_due(now);
      if (due && *due != kNever) {
        e.until = TimePoint{Duration{*due}};
        e.text = "waiting: " + which + "'s rate limit has no token for " + in_ms(*due - now);
      } else {
        e.text = "waiting: " + which + "'s rate limit has no token left now";
      }
      return e;
    }
    e.downstream.clear();  // it admits the job now: not what holds it back
  }
  // Its place: the waiting jobs of higher priority, and of its own those with smaller ids. Ids
  // rise in add order on each producing thread (EngineCore::next_ids), so across producers this
  // is the place roughly; so is a level's order under aging, which may move an older job up.
  std::uint64_t higher = 0;
  for (std::uint32_t i = 0; i < parts_.capacity; ++i) {
    const JobSlot& s = parts_.slot(i);
    if (ctl::state(s.ctl.load()) != SlotState::waiting) continue;
    const std::uint32_t p = s.priority();
    if (p > priority) {
      ++higher;
    } else if (p == priority && s.id.load(std::memory_order_relaxed) < id) {
      ++e.ahead;
    }
  }
  e.ahead += higher;
  if (higher > 0) {
    e.holdup = Holdup::higher_priority;
    e.text = std::string("waiting: ")
                 .append(std::to_string(higher))
                 .append(higher == 1 ? " job of higher priority starts"
                                     : " jobs of higher priority start")
                 .append(" first (its priority: ")
                 .append(std::to_string(priority))
                 .append(")");
    return e;
  }
  // After processing() read true (acquire): the workers' start wrote the count and the share.
  const std::uint64_t running = counts().active;
  const std::uint32_t workers = dispatch_.worker_limit();
  if (workers != 0 && running >= workers) {
    e.holdup = Holdup::workers_busy;
    e.busy = static_cast<std::uint32_t>(std::min<std::uint64_t>(running, UINT32_MAX));
    e.limit = workers;
    e.text = "waiting: all " + std::to_string(workers) + " workers of " + queue + " run jobs; " +
             jobs_before(e.ahead) + (e.ahead == 1 ? " waits" : " wait") + " too";
    return e;
  }
  e.holdup = Holdup::queued;
  e.text =
      e.ahead == 0 ? "waiting: next to start" : "waiting: starts after the " + jobs_before(e.ahead);
  return e;
}

std::vector<Duration> JobFlow::oldest_waits() const {
  const std::int64_t now = parts_.core.now_ns();
  std::vector<Duration> waits(parts_.options.priorities);
  for (std::uint32_t l = 0; l < parts_.options.priorities; ++l)
    waits[l] = Duration{dispatch_.oldest_wait(l, now)};
  return waits;
}

}  // namespace rail::detail
