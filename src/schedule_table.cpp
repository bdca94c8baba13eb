// ScheduleTable (schedule_table.hpp): a queue's repeatable jobs: upsert, the timer per schedule,
// runs added at each due time, missed runs, and the accounting ScheduleInfo reports.
#include "rail/detail/schedule_table.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "rail/detail/deadline.hpp"
#include "rail/error.hpp"

namespace rail::detail {

namespace {
/// A cron schedule's timer that fires late counts at most this many passed due times (each is
/// a calendar search): a clock that jumped years must not stall the timer thread.
constexpr std::uint64_t kMaxCronCount = 10'000;
}  // namespace

struct ScheduleTable::Entry {
  std::string id;
  std::uint32_t index = 0;
  TimerNode node{};                       // the wheel owner's
  std::shared_ptr<const Definition> def;  // a run being added keeps the one it started with
  // Under mu_:
  std::int64_t next_due = kNever;  // engine clock
  WallTime next_wall{};            // cron: the civil time next_due stands for
  bool rearm = false;              // drain() must (re)link or unlink the node
  bool removed = false;
  ScheduleInfo tally;  // runs, skipped, refused, failed, live, owed, last_job (rest: info_of)
  std::unordered_map<JobId, std::shared_ptr<EndWaiter>> waiters;  // of live runs
};

ScheduleTable::ScheduleTable(EngineCore& core, std::uint16_t queue_index, std::string queue_name)
    : core_(core), queue_index_(queue_index), queue_name_(std::move(queue_name)) {}

ScheduleTable::~ScheduleTable() {
  // The table goes with its queue, and queues go only with the engine, after the timer thread
  // stopped and the clock's listener left: nothing advances the wheel again, and its destructor
  // does not touch nodes (timing_wheel.hpp, SHUTDOWN), so the nodes are left linked, as the job
  // slots' are. Unlinking them here would write into their neighbours, which may be timer nodes
  // of a queue the engine destroyed just before: a write into freed memory
  // (ScheduleRaces.EngineDestructionDoesNotTouchTimersOfQueuesDestroyedBefore pins it).
}

void ScheduleTable::first_due(Entry& e, std::int64_t now, WallTime wall) const {
  const Schedule& when = e.def->when;
  if (!when.is_cron()) {
    e.next_due = saturating_add(now, when.interval());
    return;
  }
  const std::optional<WallTime> next = when.cron_expr()->next_after(wall);
  if (!next) {
    e.next_due = kNever;
    return;
  }
  e.next_wall = *next;
  e.next_due = saturating_add(now, *next - wall);
}

void ScheduleTable::owe(ScheduleInfo& tally, const ScheduleOptions& o, std::uint64_t missed) {
  if (missed == 0) return;
  switch (o.missed) {
    case MissedRuns::skip:
      tally.skipped += missed;
      break;
    case MissedRuns::run_once:  // one owed run makes up for all of them
      tally.skipped += missed - (tally.owed == 0 ? 1 : 0);
      tally.owed = 1;
      break;
    case MissedRuns::catch_up:  // the oldest owed ones go past the bound; as many stay owed
      tally.owed += missed;
      if (tally.owed > o.max_catch_up) {
        tally.skipped += tally.owed - o.max_catch_up;
        tally.owed = o.max_catch_up;
      }
      break;
  }
}

ScheduleInfo ScheduleTable::upsert(std::string_view id, Definition def) {
  auto shared_def = std::make_shared<const Definition>(std::move(def));
  std::shared_ptr<Entry> started;
  ScheduleInfo out;
  {
    std::lock_guard lock(mu_);
    const std::int64_t now = core_.now_ns();
    const WallTime wall = core_.clock().wall_now();
    auto it = by_id_.find(id);
    std::shared_ptr<Entry> e;
    bool fresh_times = true;
    if (it == by_id_.end()) {
      if (free_.empty() && slots_.size() >= kTagBit)
        throw Error(ErrorCode::capacity, "queue '" + queue_name_ + "' holds too many schedules");
      e = std::make_shared<Entry>();
      e->id = std::string(id);
      if (free_.empty()) {
        e->index = static_cast<std::uint32_t>(slots_.size());
        slots_.push_back(nullptr);
      } else {
        e->index = free_.back();
        free_.pop_back();
      }
      e->node.tag = (std::uint64_t{queue_index_} << 32) | kTagBit | e->index;
      slots_[e->index] = e;
      by_id_.emplace(e->id, e->index);
    } else {
      e = slots_[it->second];
      fresh_times = !(e->def->when == shared_def->when);
    }
    e->def = std::move(shared_def);
    const ScheduleOptions& o = e->def->options;
    // Owed runs follow the new options: skip owes none, run_once at most one.
    const std::uint64_t keep_owed = o.missed == MissedRuns::skip ? 0
                                    : o.missed == MissedRuns::run_once
                                        ? std::min<std::uint64_t>(e->tally.owed, 1)
                                        : std::min<std::uint64_t>(e->tally.owed, o.max_catch_up);
    e->tally.skipped += e->tally.owed - keep_owed;
    e->tally.owed = keep_owed;
    if (fresh_times) {
      first_due(*e, now, wall);
      e->rearm = true;
      dirty_ = true;
      if (o.run_now && (o.overlap || e->tally.live == 0)) {
        ++e->tally.live;
        started = e;
      } else if (o.run_now) {
        // A run of the schedule is live: the run asked for now is a missed due time, as one
        // that fires meanwhile would be (else it is dropped uncounted, and run_once or
        // catch_up never runs it: ScheduleRacesInline.RunNowThatMeetsALiveRunIsAMissedDueTime pins
        // it).
        owe(e->tally, o, 1);
      }
    }
    out = info_of(*e);
  }
  sync();
  if (started) start_later(std::move(started), 1);
  return out;
}

bool ScheduleTable::remove(std::string_view id) {
  {
    std::lock_guard lock(mu_);
    auto it = by_id_.find(id);
    if (it == by_id_.end()) return false;
    Entry& e = *slots_[it->second];
    e.removed = true;
    e.rearm = true;
    e.tally.skipped += e.tally.owed;
    e.tally.owed = 0;
    by_id_.erase(it);
    dirty_ = true;
  }
  sync();
  return true;
}

void ScheduleTable::sync() {
  // From a cold caller the node is linked before the call returns, so next_timer_in() and a
  // ManualClock advance right after see it; from the wheel's owner (a callback while timers
  // fire) the next pass links it. Either way the timer thread re-reads its deadline.
  (void)core_.with_wheel([&](Wheel& wheel) {
    drain(wheel);
    return 0;
  });
  core_.signal_timer();
}

void ScheduleTable::drain(Wheel& wheel) noexcept {
  std::lock_guard lock(mu_);
  if (!dirty_) return;
  dirty_ = false;
  for (auto& slot : slots_) {
    if (!slot || !slot->rearm) continue;
    Entry& e = *slot;
    e.rearm = false;
    (void)wheel.cancel(e.node);
    if (e.removed) {
      free_.push_back(e.index);
      slot.reset();  // run callbacks hold it weakly: it goes once its live runs' waiters do
      continue;
    }
    if (!is_never(e.next_due)) wheel.schedule(e.node, e.next_due);
  }
}

void ScheduleTable::fire(std::uint32_t tag, std::int64_t now, Wheel& wheel) noexcept {
  std::shared_ptr<Entry> started;
  std::uint64_t start = 0;
  {
    std::lock_guard lock(mu_);
    const std::uint32_t index = tag & ~kTagBit;
    if (index >= slots_.size() || !slots_[index] || slots_[index]->removed) return;
    Entry& e = *slots_[index];
    if (e.rearm) return;  // upsert moved it: drain() links it at its new due time
    const Schedule& when = e.def->when;
    const ScheduleOptions& o = e.def->options;
    // n: the due times that passed, this one included; then the first due time after now.
    std::uint64_t n = 1;
    if (!when.is_cron()) {
      const std::int64_t step = when.interval().count();
      n += static_cast<std::uint64_t>((now - e.next_due) / step);
      std::int64_t next = 0;
      if (__builtin_mul_overflow(static_cast<std::int64_t>(n), step, &next) ||
          __builtin_add_overflow(e.next_due, next, &next))
        next = kNever;
      e.next_due = next;
    } else {
      const WallTime wall = core_.clock().wall_now();
      if (wall < e.next_wall) {
        // The civil clock was set back: the due time has not come in its terms yet.
        e.next_due = saturating_add(now, e.next_wall - wall);
        wheel.schedule(e.node, e.next_due);
        return;
      }
      const CronExpr& expr = *when.cron_expr();
      for (WallTime w = e.next_wall; n < kMaxCronCount; ++n) {
        const std::optional<WallTime> later = expr.next_after(w);
        if (!later || *later > wall) break;
        w = *later;
      }
      const std::optional<WallTime> next = expr.next_after(wall);
      e.next_wall = next.value_or(WallTime::max());
      e.next_due = next ? saturating_add(now, *next - wall) : kNever;
    }
    if (!is_never(e.next_due)) wheel.schedule(e.node, e.next_due);

    if (!o.overlap && e.tally.live > 0) {
      owe(e.tally, o, n);  // the live run blocks every one of them
    } else if (o.missed != MissedRuns::catch_up) {
      start = 1;  // the run that starts now makes up for the missed ones (skip, run_once)
      e.tally.skipped += n - 1;
    } else if (!o.overlap) {
      start = 1;
      owe(e.tally, o, n - 1);  // caught up one after another, as each run ends
    } else {
      // The due time that fired runs, and with it up to max_catch_up of the missed ones, as
      // many as would be owed without overlap: the due time itself does not count against
      // max_catch_up
      // (ScheduleRacesInline.CatchUpWithOverlapRunsTheDueTimeAndUpToMaxCatchUpMissedOnes pins it).
      // Bounded by what the 32-bit live count can still hold (max_catch_up may be 2^32 - 1).
      start = std::min<std::uint64_t>(1 + std::min<std::uint64_t>(n - 1, o.max_catch_up),
                                      std::numeric_limits<std::uint32_t>::max() - e.tally.live);
      e.tally.skipped += n - start;
    }
    e.tally.live += static_cast<std::uint32_t>(start);
    if (start > 0) started = slots_[index];
  }
  if (started) start_later(std::move(started), start);
}

void ScheduleTable::start_later(std::shared_ptr<Entry> e, std::uint64_t n) {
  core_.after_wheel([this, e = std::move(e), n] { add_runs(e, n); });
}

void ScheduleTable::add_runs(const std::shared_ptr<Entry>& e, std::uint64_t n) {
  for (std::uint64_t i = 0; i < n; ++i) {
    std::shared_ptr<const Definition> def;
    {
      std::lock_guard lock(mu_);
      if (e->removed || !core_.accepting()) {  // removed meanwhile, or shutting down
        e->tally.live -= static_cast<std::uint32_t>(n - i);
        return;
      }
      def = e->def;
    }
    std::shared_ptr<EndWaiter> waiter;
    AddReceipt r{0, AddStatus::full};
    std::optional<std::string> threw;  // the add threw: its error (the payload's copy, memory)
    try {
      r = def->add(&waiter);
    } catch (const std::exception& x) {
      threw = failure_text(e->id, x.what());
    } catch (...) {
      threw = failure_text(e->id, "an exception not derived from std::exception");
    }
    const bool shutting_down = r.status == AddStatus::shutting_down;
    std::unique_lock lock(mu_);
    if (r.status != AddStatus::added || !waiter) {
      --e->tally.live;
      // A run dropped because shutdown began is not a refusal, as it is not when shutdown began
      // before the check above (else the count depends on which side of it shutdown falls:
      // ScheduleRacesInline.ARunDroppedBecauseShutdownBeganIsNotCountedAsRefused pins it).
      if (shutting_down) continue;
      if (threw) {
        const bool first = e->tally.failed++ == 0;
        e->tally.last_error = *threw;
        lock.unlock();
        // The schedule's first failure on stderr, as the engine reports an observer's throw:
        // nobody may be reading the schedule's info.
        if (first) std::fprintf(stderr, "rail: %s (reported once per schedule)\n", threw->c_str());
        continue;
      }
      ++e->tally.refused;
      if (r.id != 0) e->tally.last_job = r.id;  // filed to the DLQ (OnFull::dead_letter)
      continue;
    }
    ++e->tally.runs;
    e->tally.last_job = r.id;
    e->waiters.emplace(r.id, waiter);
    lock.unlock();
    // At once, on this thread, if the run has ended already.
    waiter->on_end([this, weak = std::weak_ptr<Entry>(e), id = r.id](const EndRecord&) {
      run_ended(weak, id);
    });
  }
}

std::string ScheduleTable::failure_text(const std::string& id, const char* what) const {
  return "a run of schedule '" + id + "' on queue '" + queue_name_ + "' was not added: " + what;
}

void ScheduleTable::run_ended(const std::weak_ptr<Entry>& weak, JobId id) {
  std::shared_ptr<Entry> e = weak.lock();
  if (!e) return;
  std::shared_ptr<EndWaiter> waiter;  // released outside the lock: it may leave the tracker
  bool start = false;
  {
    std::lock_guard lock(mu_);
    auto it = e->waiters.find(id);
    if (it == e->waiters.end()) return;  // heard already
    waiter = std::move(it->second);
    e->waiters.erase(it);
    --e->tally.live;
    if (!e->removed && e->tally.owed > 0 && (e->def->options.overlap || e->tally.live == 0)) {
      --e->tally.owed;
      ++e->tally.live;
      start = true;
    }
  }
  if (start) start_later(std::move(e), 1);
}

ScheduleInfo ScheduleTable::info_of(const Entry& e) {
  ScheduleInfo i = e.tally;
  i.id = e.id;
  i.when = e.def->when.describe();
  i.job_name = e.def->job_name;
  if (!is_never(e.next_due)) i.next_run = TimePoint{Duration{e.next_due}};
  return i;
}

std::optional<ScheduleInfo> ScheduleTable::info(std::string_view id) const {
  std::lock_guard lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return std::nullopt;
  return info_of(*slots_[it->second]);
}

std::vector<ScheduleInfo> ScheduleTable::list() const {
  std::lock_guard lock(mu_);
  std::vector<ScheduleInfo> out;
  out.reserve(by_id_.size());
  for (const auto& [id, index] : by_id_)
    out.push_back(info_of(*slots_[index]));
  return out;
}

}  // namespace rail::detail
