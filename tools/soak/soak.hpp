// The soak harness: a configurable mix of producers, workers and faults run against one
// engine, then an account of every job (Jepsen's total-queue check, in-process). Shared by the
// `soak` program and tests/soak_test.cpp.
//
// Faults, per delivery, chosen by a seeded plan carried in the payload: a retryable failure, a
// thrown exception, a permanent failure, a discard (Outcome::discard), an UnrecoverableError, or a
// hang past the lease (the handler waits until its
// delivery is fenced, then returns an outcome that must be ignored). Some deliveries are async
// (Config::async): the handler defers, and a completer thread applies the same fault through
// the Completion (an exception is a dropped Completion); with Config::coroutines the handler is a
// coroutine that co_awaits the call and applies the fault itself once resumed. Besides: duplicate
// adds inside and outside their dedup window (some in debounce mode, landing on delayed, waiting
// and running jobs), delayed jobs and cancels of them at once, cancellations, pauses and resumes,
// redrives from the DLQ while workers run, and (optionally) a shutdown in the middle of the run
// followed by take_leftovers.
//
// Invariants checked (each violation is counted and the first few are described):
//   1. every accepted job ended exactly once per life — completed, dead-lettered, cancelled or
//      discarded —
//      or, after a mid-run shutdown, was handed back by take_leftovers instead of its last end;
//      a redriven job has one more life per redrive; no event names a job that was never
//      accepted (none lost, none twice, none invented);
//   2. every duplicate add inside its window was merged into the first job; every duplicated id
//      is added again once its window has passed, and each such add creates a new job (or
//      merges into the first one, which a redrive gave its id back to);
//   3. no late outcome changed a job: a completion never comes from a delivery whose lease
//      lapsed or whose attempt timed out, a job ends `cancelled` if and only if a cancel() of it
//      was accepted, and late outcomes == lapses + timeouts; a fenced delivery's stop token
//      (Job::stop_token, which the hanging handlers wait on) is stopped;
//   4. deliveries and attempts agree with the events: a job's starts are numbered exactly 1..n
//      (no gap, no repeat); a completed job's n-1 earlier deliveries each failed or stalled, a
//      dead-lettered job's n all did (or 0 for overflow), counting a stall apart from the
//      failures under StallPolicy::own_budget (and at most max_stalls + 1 of them) and as one
//      of them under count_as_attempt; the DLQ entry's attempts, deliveries and stalls equal
//      what the events said (checked for jobs with one life: a redrive restarts the numbering);
//      a life dead-lettered as expired never started;
//   5. a paused queue starts nothing: after pause() returns, a worker may start the one job it
//      had already taken, and no other until resume();
//   6. with a downstream, never more handlers inside it at once than its largest concurrency
//      limit, however the limits flip; a pushed-back delivery uses no attempt (it counts with
//      the failed and stalled ones in 4, and the DLQ entry's attempts exclude it);
//   7. with FIFO groups, each group's jobs added without a delay or dedup id start in add
//      order, and no job of a group starts before the one that started before it has ended
//      (group_ledger.hpp);
//   8. with tenants and leases off, the capped tenant never runs more handlers at once than
//      its cap (share_watch.hpp). Priorities and tenants run under every other invariant too;
//   9. with batches, each one's on_complete fired exactly once and its on_success exactly once
//      if every member completed (after redrives too), never otherwise (batch_watch.hpp).
//  10. with flows, a parent starts only once every child ended, and only if each child of an
//      edge that does not ignore failures completed; one dead-lettered for a failed dependency
//      never started (flow_watch.hpp).
// Where they are checked: 1-4 job_ledger.hpp, 5 PauseWatch, 6 the handler, 7 group_ledger.hpp,
// 8 share_watch.hpp, 9 batch_watch.hpp, 10 flow_watch.hpp; this file's run() drives the threads and
// hands them the events. The report also counts what the run exercised (delayed jobs, re-adds,
// pauses that held back waiting work, debounces, redrives, jobs handed back), so a caller can tell
// a clean run from one that injected nothing, and states the checker's totals as Jepsen's queue
// checker does: ok, lost, duplicated (ended more often than its lives), and late outcomes applied.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "rail/options.hpp"

namespace rail::soak {

struct Config {
  std::uint64_t jobs = 200'000;  // jobs to add (distinct adds, duplicates not counted)
  std::uint32_t producers = 4;
  std::uint32_t workers = 8;
  bool manual_clock = false;  // a driver thread advances a ManualClock
  std::uint64_t seed = 1;
  double fail = 0.05;           // per delivery: retryable failure
  double throw_ = 0.02;         // per delivery: exception
  double permanent = 0.01;      // per delivery: Outcome::fail, or (one in two) UnrecoverableError
  double discard = 0.005;       // per delivery: Outcome::discard
  double hang = 0.002;          // per delivery: outlives its lease
  double duplicate = 0.05;      // per add: re-add with the same dedup id
  double delayed = 0.05;        // per add: a delay of 1-5 ms
  double cancel = 0.01;         // per add: try to cancel it later
  bool pauses = true;           // a thread pauses and resumes the queue
  bool redrives = true;         // a thread redrives DLQ entries while the workers run
  double debounce = 0.3;        // of the duplicate adds: in debounce mode (the rest merge)
  double cancel_delayed = 0.2;  // of the delayed adds: cancelled at once
  double shutdown_at = 0;       // > 0: shut down once this fraction of the jobs is accepted
  std::chrono::milliseconds visibility{50};
  bool leases = true;  // false: no visibility timeout (and no hangs: Config::hang must be 0)
  // QueueOptions::timeout: an attempt running longer fails (a hang shorter than the lease then
  // times out rather than stalls). Duration::max(): none.
  Duration timeout = Duration::max();
  // QueueOptions::expire_after: a job not started within it after its add is dead-lettered
  // (reason expired), and must never have started (invariant 4). Duration::max(): none.
  Duration expire_after = Duration::max();
  StallPolicy stall_policy = StallPolicy::own_budget;  // what a lapsed lease costs
  std::size_t capacity = 8192;
  // Downstream (issue 14): the queue calls one, whose concurrency (workers / 2) and rate are
  // flipped at run time by a thread of their own; a handler pushes back (Outcome::pushback,
  // 1 ms) at this rate per delivery.
  bool downstream = true;
  double pushback = 0.003;
  // The downstream has a rate and no concurrency limit (BullMQ's plain {max, duration}
  // limiter): the flipper changes only its rate, down to 1,000/s with burst 1, where a stalled
  // wake-up chain leaves jobs waiting with tokens free.
  bool rate_only_downstream = false;
  // A second queue ("soak-side") calls the same downstream from the other kind of pool (the
  // shared pool when the soak's queue has its own threads, two threads of its own otherwise):
  // a gate whose blocked jobs sit in two queues' rings. It adds jobs / 10 plain jobs, each of
  // which must complete; its calls count against the downstream's concurrency as well. Not with
  // a mid-run shutdown.
  bool side_queue = false;
  // The queue runs on the engine's shared pool of `workers` threads (WorkerOptions::shared)
  // instead of threads of its own.
  bool shared_pool = false;
  // Async handlers (issue 14): this share of the deliveries defers (Job::defer) and a completer
  // thread applies the delivery's fate through its Completion a little later.
  double async = 0.1;
  // Coroutine handlers (issue 14): the handler is a rail::Task coroutine; the async share parks
  // on the simulated call (co_await) and the completer resumes it, after which it co_returns
  // the fate or throws.
  bool coroutines = false;
  // FIFO groups (JobOptions::group): > 0 puts each producer's adds in groups of its own, round
  // robin over groups / producers of them (at least one each); invariant 7 checks them.
  std::uint32_t groups = 0;
  // Priorities (QueueOptions::priorities): > 1 gives each job a level from its plan, uniform
  // over 0 .. priorities - 1, its wait aged past priority_max_wait (Duration::max(): never).
  std::uint32_t priorities = 1;
  Duration priority_max_wait = Duration::max();
  // Fair shares (JobOptions::tenant): > 0 puts each job in one of `tenants` tenants from its
  // plan, half of them in tenant-0, which weighs 3 and runs at most tenant_cap jobs at once;
  // invariant 8 checks the cap when leases are off.
  std::uint32_t tenants = 0;
  std::uint32_t tenant_cap = 2;
  // Batches (Engine::batch): > 0 adds each producer's fresh jobs through batches of this many
  // members; invariant 9 checks their callbacks (batch_watch.hpp).
  std::uint32_t batch_size = 0;
  // Flows (JobOptions::after): > 0 makes every flow_every-th fresh add of a producer a parent of
  // its last 3 jobs; invariant 10 checks them (flow_watch.hpp).
  std::uint32_t flow_every = 0;
  // Live progress (reporter.hpp): called every progress_every on a thread of its own with the
  // jobs ended so far, the jobs the run adds and the DLQ's depth; unset: none.
  std::function<void(std::uint64_t ended, std::uint64_t jobs, std::uint64_t dlq)> progress{};
  std::chrono::milliseconds progress_every{200};
};

struct Report {
  std::uint64_t accepted = 0, completed = 0, dead_lettered = 0, cancelled = 0, discarded = 0;
  std::uint64_t duplicates_merged = 0, duplicates_new = 0, stalls = 0, late_outcomes = 0;
  std::uint64_t timed_out = 0;  // attempts past their timeout (Config::timeout)
  std::uint64_t expired = 0;    // jobs dead-lettered unstarted (Config::expire_after)
  std::uint64_t batches = 0, batches_succeeded = 0;  // Config::batch_size
  std::uint64_t parents_started = 0, dependency_failed = 0, parents_refused = 0;  // flow_every
  std::uint64_t deliveries = 0, failed_attempts = 0, cancels_accepted = 0, delayed = 0;
  std::uint64_t pauses = 0, pauses_with_work = 0, starts_while_paused = 0;
  std::uint64_t pushbacks = 0, throttled = 0, limit_changes = 0, most_inside = 0;
  std::uint64_t debounced = 0, redriven = 0, handed_back = 0, delayed_cancelled = 0;
  std::uint64_t deferred = 0;             // deliveries a Completion completed (or dropped)
  std::uint64_t grouped_started = 0;      // jobs in a FIFO group that started (Config::groups)
  std::uint64_t tenant_most_active = 0;   // tenant-0's handlers at once, at most (Config::tenants)
  std::array<double, 8> level_wait_ms{};  // mean wait per priority level (Config::priorities)
  // The checker's totals: jobs accounted for exactly (ok), with a life that never ended and was
  // not handed back (lost), with more ends than lives (duplicated), and completions that came
  // from a delivery whose lease had lapsed (late outcomes applied).
  std::uint64_t ok_jobs = 0, lost = 0, duplicated = 0, late_applied = 0;
  std::uint64_t violations = 0;
  std::vector<std::string> first_violations;
  double seconds = 0;
  [[nodiscard]] bool ok() const noexcept { return violations == 0; }
};

/// run(config) runs the mix to the end, drains, checks the invariants.
Report run(const Config& config);

/// print(report, out) prints the figures and the verdict.
void print(const Report& report, const Config& config, std::ostream& out);

}  // namespace rail::soak
