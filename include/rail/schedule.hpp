// Repeatable jobs: a schedule adds a job to its queue at each due time (BullMQ's job schedulers,
// asynq's periodic tasks, folly's FunctionScheduler). A schedule is a timer on the engine's
// timing wheel, not a job: nothing waits in the queue between runs, and each due time adds one
// ordinary job (its own id, attempts, backoff, lease, events and end) with a copy of the
// schedule's payload.
//
// When: Schedule::every(interval) is due at declaration + interval, + 2 intervals, ... on the
// engine's clock; Schedule::cron("*/5 * * * *") at the minutes a crontab(5) line names, read in
// UTC from the clock's civil time (Clock::wall_now; a ManualClock's moves with advance()).
// Upsert: declaring a schedule under an id that exists replaces it (never doubles it): the
// payload, job name and options apply from the next run on; the due times stay where they were
// when `when` is unchanged, and restart from now when it changed.
// Overlap: by default a run never starts while the previous run of the same schedule is
// still live (added and not ended: waiting, running or backing off between attempts); a due
// time that comes meanwhile is missed. ScheduleOptions::overlap lets runs pile up instead.
// Missed runs: a due time is missed when the previous run is still live (no overlap) or when
// the timer fires late past further due times (the process was busy, or a ManualClock jumped).
// MissedRuns says what then happens to them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "rail/clock.hpp"
#include "rail/cron.hpp"
#include "rail/options.hpp"

namespace rail {

/// Schedule: when a repeatable job is due. Value type; compare with ==.
class Schedule {
 public:
  /// every(interval): due every `interval` of the engine's clock, the first one interval after
  /// the schedule is declared. Error(invalid_option) unless interval > 0.
  static Schedule every(Duration interval);
  /// cron(expr): due at each minute the five-field crontab(5) expression names, in UTC
  /// (CronExpr::parse: Error(invalid_option) naming the bad field).
  static Schedule cron(std::string_view expr) { return Schedule(CronExpr::parse(expr)); }

  [[nodiscard]] bool is_cron() const noexcept { return cron_.has_value(); }
  /// interval(): every()'s interval (0 for a cron schedule).
  [[nodiscard]] Duration interval() const noexcept { return interval_; }
  /// cron_expr(): cron()'s expression, or null.
  [[nodiscard]] const CronExpr* cron_expr() const noexcept { return cron_ ? &*cron_ : nullptr; }
  /// describe(): "every 5m" or "cron '*/5 * * * *' UTC", for logs and ScheduleInfo.
  [[nodiscard]] std::string describe() const;

  friend bool operator==(const Schedule& a, const Schedule& b) noexcept {
    return a.interval_ == b.interval_ && a.cron_ == b.cron_;
  }

 private:
  explicit Schedule(Duration interval) : interval_(interval) {}
  explicit Schedule(CronExpr expr) : cron_(std::move(expr)) {}
  Duration interval_{0};
  std::optional<CronExpr> cron_;
};

/// MissedRuns: what becomes of due times that passed without a run.
enum class MissedRuns : std::uint8_t {
  /// Dropped and counted (ScheduleInfo::skipped); the schedule runs at its next due time.
  /// A timer that fires late runs once for the latest due time. (BullMQ, cron.)
  skip,
  /// Coalesced: however many were missed, one run makes up for them, at once if nothing of the
  /// schedule is live, else as soon as the live run ends (anacron, systemd's Persistent=true).
  run_once,
  /// Each one runs: at once with overlap, else one after another as each run ends
  /// (folly FunctionScheduler's steady mode). At most ScheduleOptions::max_catch_up missed runs
  /// are made up at a time (besides the due time that fired); older ones are skipped and counted.
  catch_up,
};

/// ScheduleOptions: how a schedule's runs are added.
struct ScheduleOptions {
  /// The options of each run's job (attempts, backoff, lease). delay and dedup must be unset:
  /// the schedule decides when a run starts, and its runs are separate jobs.
  JobOptions job{};
  MissedRuns missed = MissedRuns::skip;
  /// overlap: a run may start while an earlier run of the schedule is still live.
  bool overlap = false;
  /// run_now: also run once when the schedule is declared (or its `when` changes), then follow
  /// the schedule (BullMQ's `immediately`). Without overlap, a run of the schedule that is still
  /// live makes this run a missed due time (skipped, or owed as `missed` says).
  bool run_now = false;
  /// catch_up: the most missed runs owed at once (>= 1).
  std::uint32_t max_catch_up = 1000;
};

/// ScheduleInfo: a schedule as it stands (Queue::schedules, Queue::schedule_info).
struct ScheduleInfo {
  std::string id;
  std::string when;      // Schedule::describe()
  std::string job_name;  // the name of each run's job
  /// next_run: the engine-clock time of the next due time (nullopt: none comes).
  std::optional<TimePoint> next_run;
  std::uint64_t runs = 0;     // runs added to the queue (jobs created)
  std::uint64_t skipped = 0;  // due times dropped (MissedRuns) without a run
  std::uint64_t refused = 0;  // runs the queue did not take (full, or filed to its DLQ on overflow)
  /// failed: runs whose add threw (the payload's copy, or no memory), with the latest error;
  /// the schedule's first one is also printed on stderr. A run dropped because shutdown began
  /// counts nowhere.
  std::uint64_t failed = 0;
  std::string last_error;
  std::uint32_t live = 0;  // runs added and not ended yet
  std::uint64_t owed = 0;  // missed runs waiting for the live run to end (run_once, catch_up)
  JobId last_job = 0;      // the id of the latest run's job (0: none yet)
};

}  // namespace rail
