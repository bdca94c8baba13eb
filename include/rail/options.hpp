// Options: plain aggregates with designated-initializer friendly defaults. Each is validated where
// it enters the engine (Engine ctor, Engine::declare_queue, Queue::add, Queue::process); a bad
// value throws rail::Error(invalid_option) with a message naming the field, the value and what is
// expected. Defaults follow BullMQ where rail has an equivalent (max_attempts = 1: no retries).
//
// One convention across every option: a configured count (jobs, threads, entries, attempts) is
// std::uint32_t (a queue's slots are 32-bit indices, so no count can exceed that); a rate's
// count is std::uint64_t since it counts starts over a period of any length; a setting with a
// computed default is std::optional, unset meaning that default (0 is always zero of the thing,
// never "default" or "none"); a duration is never negative (Error(invalid_option)) and
// Duration::max() means never.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "rail/backoff.hpp"
#include "rail/clock.hpp"
#include "rail/dependency.hpp"
#include "rail/journal_options.hpp"
#include "rail/shutdown_report.hpp"
#include "rail/trace_context.hpp"

namespace rail {

/// Dedup mode, after BullMQ's deduplication modes.
enum class DedupMode : std::uint8_t {
  /// Further adds with the same id are merged into the first job (nothing is created). Without a
  /// ttl the id is held until that job completes, is dead-lettered or is cancelled; with a ttl
  /// it is held for the whole window, even after the job completed (SQS FIFO's behaviour).
  merge,
  /// Debounce: an add within the window, while the kept job is still delayed, replaces the kept
  /// job's payload and restarts its delay; the newest payload runs once (BullMQ's debounce).
  debounce,
  /// Replace: an add while the kept job is still delayed replaces its payload and keeps its due
  /// time (BullMQ's deduplication with `replace`, without `extend`): the newest payload runs when
  /// the first add said. Once the job started, duplicates merge.
  replace,
};

/// DedupOptions: `JobOptions.dedup = {.id = "order-4-email", .ttl = 5min}`.
struct DedupOptions {
  std::string id{};               // empty: no deduplication
  std::optional<Duration> ttl{};  // window length; nullopt: held until the job finishes
  DedupMode mode = DedupMode::merge;
  /// extend: each duplicate add within the window restarts it (now + ttl), so a steady stream of
  /// duplicates keeps merging (BullMQ's `extend`). Needs a ttl. Debounce always restarts it.
  bool extend = false;
  /// keep_last_if_active: a duplicate add while the kept job is running is not dropped: the
  /// newest such add is kept (AddStatus::kept) and added as a new job, holding the id,
  /// once the running job ends, so the work it describes runs once more after it (BullMQ's
  /// `keepLastIfActive`). Adds while the kept job waits or is delayed merge as usual, unless an
  /// add is already kept for after it (it ran, then went back for a retry or a lapse): they
  /// replace that one, the newest still wins. The id passes from the ended job to the kept add
  /// with no moment in between at which another add could take it, so the jobs of one id run
  /// in the order of their adds. While the job runs its id is held even past its ttl (BullMQ:
  /// no parallel execution when the ttl expires while the job is active); the ttl counts again
  /// once it stops running. "Runs" starts when a worker takes the job for a start, as state()
  /// reports it active: an add at that moment is kept even if the start then does not happen
  /// (its downstream refuses it, it expired unstarted, or shutdown puts it back).
  bool keep_last_if_active = false;
  /// ttl_from_due: the window starts when the job is due (the add plus its delay) instead of at
  /// the add, so it covers the delay: asynq's Unique(ttl) with ProcessIn(d) holds the key for
  /// d + ttl. Restarts (extend, debounce) also count from the duplicate's own due time. Needs a
  /// ttl.
  bool ttl_from_due = false;
};

/// JobOptions: per-add settings.
struct JobOptions {
  std::uint32_t max_attempts = 1;  // total tries including the first; >= 1
  Backoff backoff{};               // delay policy between tries
  Duration delay{0};               // run no earlier than now + delay
  DedupOptions dedup{};
  /// Lease length of each delivery of this job; unset: QueueOptions::visibility_timeout.
  std::optional<Duration> visibility_timeout{};
  /// The longest one attempt of this job may run; unset: QueueOptions::timeout. See there. The
  /// first add with one makes the queue sweep for deadlines, even without leases. A redriven
  /// job runs under its queue's timeout.
  std::optional<Duration> timeout{};
  /// The longest this job may wait to start, counted from its add; unset:
  /// QueueOptions::expire_after. See there. Longer than `delay`.
  std::optional<Duration> expire_after{};
  /// The downstream service this job calls (Engine::declare_downstream declares it), when it is not
  /// the queue's (QueueOptions::downstream); empty: the queue's. Its permits and tokens admit
  /// the job's deliveries. A queue's jobs may name up to 15 downstreams besides the queue's own.
  std::string downstream{};
  /// The job's FIFO group (SQS FIFO's MessageGroupId); empty: none. The jobs of one group start
  /// one at a time, in the order they became due (add order, for jobs added without a delay):
  /// each holds the group's turn from then until it ends, through its retries; the next starts
  /// once it completed, was dead-lettered, discarded or cancelled. Different groups run in
  /// parallel. At most 256 bytes. A redriven job is in no group (its group has moved on).
  std::string group{};
  /// The job's priority on a queue with priority levels (QueueOptions::priorities): 0 to
  /// priorities - 1, higher first; equal priorities in the order they became ready. 0 on a queue
  /// without levels. A redriven job has priority 0.
  std::uint8_t priority = 0;
  /// The job's tenant (the customer it is for); empty: none. Each tenant has a share of turns
  /// (QueueOptions::tenants, tenant_window): a job starts only while its tenant holds fewer of
  /// its jobs ready or running than that, else it waits in the tenant's line, in order (by
  /// priority first, aged as ready jobs are, when the queue has levels). So one tenant's flood
  /// cannot crowd out the others. At most 256 bytes. A redriven job has none.
  std::string tenant{};
  /// The jobs this one waits for (its children: dependency.hpp), at most kMaxChildren, each
  /// once, on any queue of the engine; empty: none. The job is added in state waiting_children
  /// and becomes ready when the last of them ended (at once if all had), or ends unstarted as
  /// an edge's ChildFailure says. Not with a delay or a dedup id. A redriven job waits for none.
  std::vector<Dependency> after{};
  static constexpr std::uint32_t kMaxChildren = 1u << 20;
  /// The trace the job belongs to (W3C traceparent: trace_context.hpp); unset: the adding
  /// thread's current context (TraceScope), if any. Its handler reads it with Job::trace(), its
  /// events and log lines carry it; a redrive keeps it.
  std::optional<TraceContext> trace{};
};

/// TenantShare: a tenant's weight and cap (QueueOptions::tenants).
struct TenantShare {
  std::string tenant;  // JobOptions::tenant
  std::uint32_t weight =
      1;  // its share: weight x QueueOptions::tenant_window jobs ready or running
  std::optional<std::uint32_t> max_active{};  // and at most this many (unset: no cap)
};

/// OnFull: what add() does when the queue holds `capacity` unfinished jobs.
enum class OnFull : std::uint8_t {
  reject,       // add() returns AddStatus::full at once; nothing is created
  block,        // add() waits up to QueueOptions::block_timeout for room, then returns full
  dead_letter,  // the job is created straight in the DLQ with reason "overflow"
};

/// DlqOptions: bounds and alerting for a queue's dead-letter queue.
struct DlqOptions {
  std::uint32_t max_entries = 100'000;  // at the bound the oldest entry is evicted (evented)
  std::optional<Duration>
      retention{};  // entries this old are evicted (evented): kept while younger
  std::optional<std::uint32_t> alert_depth{};  // unset: no alert; else an alert at this depth
  /// on_alert(depth) is called on the thread that dead-letters the job that brings the depth to
  /// alert_depth (>= 1), with a dlq_alert event; it fires once, and re-arms once the depth has
  /// fallen to alert_rearm_depth (hysteresis: a DLQ hovering around its threshold alerts once).
  std::function<void(std::size_t depth)> on_alert{};
  /// The depth at or below which a fired alert re-arms; unset: alert_depth - 1. Below
  /// alert_depth.
  std::optional<std::uint32_t> alert_rearm_depth{};
  /// alert_age: when the DLQ's oldest entry has been in it this long, a dlq_age_alert event
  /// (its job, its age in `elapsed`, the depth) and on_age_alert(age); once, re-armed when the
  /// DLQ is empty or its oldest entry younger again (redriven, purged, removed, retained out).
  /// Checked by the queue's timer when the age is reached, whether or not anyone reads the DLQ.
  /// Unset: no age alert.
  std::optional<Duration> alert_age{};
  std::function<void(Duration age)> on_age_alert{};
  /// journal: an optional file the DLQ's entries survive a crash in (journal_options.hpp).
  JournalOptions journal{};
};

/// StallPolicy: what a lapsed lease (a stall: the handler outlived its visibility timeout) costs.
/// The peers differ; rail offers both.
enum class StallPolicy : std::uint8_t {
  /// BullMQ (the default): stalls have their own budget, QueueOptions::max_stalls
  /// (maxStalledCount). A stalled job is delivered again at once without using an attempt; the
  /// stall past the budget dead-letters it (reason lease_expired).
  own_budget,
  /// SQS: every delivery counts against JobOptions::max_attempts (maxReceiveCount), so a lapse is a
  /// failed attempt (it is logged as one and redelivered at once, or dead-letters the job with
  /// reason lease_expired on the last); max_stalls is not used.
  count_as_attempt,
};

/// EndRetention: how many ended jobs a queue keeps, with their results (completed) or their
/// reason and errors (dead-lettered, cancelled, discarded, forwarded), for Queue::end_of(id) and
/// waits by id. Bounded both ways, so memory does not grow with the jobs ever run: the oldest go
/// first once a count is reached, and any older than max_age (engine clock) go when the next end is
/// recorded. A handle from add_tracked() sees its job's end whatever is retained. Keeping none
/// costs nothing per job; keeping some costs a lock and a map node per ended job.
struct EndRetention {
  /// Completed jobs to keep; nullopt: 1000 for a queue declared with a result type, else 0.
  std::optional<std::uint32_t> keep_completed{};
  /// Dead-lettered, cancelled, discarded and forwarded jobs to keep; nullopt: as keep_completed.
  std::optional<std::uint32_t> keep_failed{};
  /// Ended jobs go once they are this old (kept while younger: BullMQ's removeOnComplete {age});
  /// Duration::max(): kept until the counts push them.
  Duration max_age = Duration::max();
};

/// ShedOptions: CoDel-style load shedding (QueueOptions::shed). A worker taking a job measures
/// how long it waited to start (since it was added, or due after its delay). When the shortest
/// such wait within an interval stayed above `target`, the queue is overloaded until an interval
/// whose shortest wait is at or below it; meanwhile each job taken that waited more than twice
/// `target` is dead-lettered with reason `shed` instead of run (folly's Codel: slough off what
/// waited too long, keep serving what is fresh). Only a job's first start is measured and shed:
/// a retry or a redelivery runs.
struct ShedOptions {
  std::optional<Duration> target{};                    // unset: no shedding; else > 0
  Duration interval = std::chrono::milliseconds(100);  // > 0 (folly's default)
};

/// QueueOptions: per-queue settings, fixed at declaration.
struct QueueOptions {
  std::uint32_t capacity = 65'536;  // max unfinished jobs (waiting+delayed+active)
  OnFull on_full = OnFull::reject;
  Duration block_timeout = std::chrono::seconds(1);  // for OnFull::block (real time)
  JobOptions defaults{};                             // used by add() calls that pass no JobOptions
  CustomBackoff custom_backoff{};                    // used by Backoff::custom()
  /// Live dedup ids the window has room for (an id lives while its job does, or for its ttl);
  /// past them an add answers `dedup_full`. Unset: max(capacity, 4096), so that a queue full of
  /// jobs with ids never runs out of ids first. The window is sharded and sized so that this
  /// many ids fit whichever shards they hash to, which lets it hold somewhat more.
  std::optional<std::uint32_t> dedup_capacity{};
  DlqOptions dlq{};
  /// Lease length of each delivery (SQS visibility timeout, BullMQ lockDuration; both default
  /// to 30 s). A handler still running when it lapses has stalled: its job is delivered again,
  /// or dead-lettered (reason lease_expired) as stall_policy says; its late outcome is ignored.
  /// Duration::max(): leases never lapse.
  Duration visibility_timeout = std::chrono::seconds(30);
  /// The longest one attempt may run (BullMQ's and Celery's job timeout). An attempt still
  /// running then fails with an error that says so and is retried or dead-lettered (reason
  /// `timeout`) by its job's attempts and backoff; its handler is asked to stop
  /// (Job::stop_token), and its late outcome is ignored, as a lapsed lease's. A handler that
  /// keeps running after that is a zombie (QueueCounts::zombies) until it returns. Not renewed
  /// by extend_lease. Duration::max(): attempts may run for ever (leases aside).
  Duration timeout = Duration::max();
  /// The longest a job may wait to start, counted from its add (RabbitMQ's message TTL with a
  /// dead-letter exchange, folly's expiring add): a job not started by then is dead-lettered
  /// with reason `expired`, on time also when no worker takes it (paused, busy, or no handler
  /// yet), and never once it started (a retry or a lapse's redelivery does not expire). A job's
  /// delay must be shorter. Duration::max(): jobs wait for ever.
  Duration expire_after = Duration::max();
  /// Load shedding (CoDel, as folly's Codel in front of a server): see ShedOptions. Off unless
  /// shed.target is set.
  ShedOptions shed{};
  /// What a stall costs: its own budget (BullMQ, default) or an attempt (SQS). See StallPolicy.
  StallPolicy stall_policy = StallPolicy::own_budget;
  /// StallPolicy::own_budget: how many stalls a job survives (redelivered each time, no attempt
  /// used); the next one dead-letters it. BullMQ's maxStalledCount, default 1. 0 .. 65535.
  std::uint32_t max_stalls = 1;
  /// Stalled-handler alert: a handler that has run this fraction of its lease (or of its
  /// attempt's timeout, whichever ends first) without renewing it raises a `stall_warning`
  /// event (and counts in QueueCounts::stall_warnings) while it can still finish or call
  /// extend_lease: 0.8 warns 24 s into a 30 s lease. Once per lease period: a renewal starts a
  /// new one. The lease sweep then comes every f x the shortest lease (or timeout) a job of the
  /// queue has had, busy or idle, where it comes every shortest lease without warnings.
  /// 0: no warnings. 0 <= f < 1.
  double stall_warning = 0;
  /// The least time between two `progress` events of one job: a chatty handler's reports in
  /// between update state(id) but raise no event. 0: every report raises one.
  Duration progress_interval = std::chrono::milliseconds(100);
  /// What the queue remembers of its ended jobs for Queue::end_of(id) and waits by id (BullMQ's
  /// removeOnComplete / removeOnFail). See EndRetention.
  EndRetention keep_ended{};
  /// The downstream service this queue's handlers call (Engine::declare_downstream declares it):
  /// its concurrency and rate limits decide when each job may start, shared with every other queue
  /// that names it. Empty: none.
  std::string downstream{};
  /// Priority levels (BullMQ's job priority): the queue's ready jobs wait at their
  /// JobOptions::priority, 0 to priorities - 1, and the next to start is the oldest of the
  /// highest level that holds one (O(1): a ring per level and a bitmap of the non-empty ones).
  /// 1 to 8; 1: no levels, the fastest path (per-producer lanes). With several levels the
  /// queue's ready jobs are in rings instead of lanes, and a worker takes them one at a time.
  std::uint32_t priorities = 1;
  /// Aging (with priorities > 1): a ready job ranks one level higher for each priority_max_wait
  /// it has waited, so a steady stream of urgent work cannot starve the rest: a job of level l
  /// starts within (priorities - 1 - l) x priority_max_wait plus the time the jobs ranked above
  /// it take to start. Duration::max(): no aging.
  Duration priority_max_wait = Duration::max();
  /// Fair shares (JobOptions::tenant), on when tenant_window > 0: each tenant may hold weight x
  /// tenant_window of its jobs ready or running at once (weight 1 unless listed here;
  /// max_active caps it); the rest wait in the tenant's line. A job waiting out a retry's
  /// backoff gives its turn to another of its tenant's jobs meanwhile. Work-conserving while the
  /// queue's workers are at most tenant_window (a lone tenant still keeps every worker busy). A
  /// new tenant's first job waits behind at most the other tenants' shares plus a batch per
  /// worker; with every tenant backlogged, jobs in progress split as the weights. Such a queue
  /// keeps its ready jobs in rings (as with priorities), not per-producer lanes. Shares bound
  /// only jobs with a tenant; each tenant not listed has weight 1.
  std::vector<TenantShare> tenants{};
  std::uint32_t tenant_window = 0;  // 0: no fair shares (JobOptions::tenant refused); 1 .. 2^20
  /// Latency histograms (Queue::metrics(): wait, run, end-to-end, retry lateness), recorded by
  /// each worker on its own copy: about 19 KB per worker thread, and a clock reading at each
  /// attempt's end. false: the histograms stay empty; the counters and gauges remain.
  bool histograms = true;
};

/// WorkerOptions: the pool that drains a queue, sized to what the downstream service can take.
/// Pool: which threads run a queue's handlers.
enum class Pool : std::uint8_t {
  dedicated,  // the queue's own WorkerOptions.concurrency threads
  shared,     // the engine's shared pool (EngineOptions.workers threads, shared by its queues)
};

struct WorkerOptions {
  /// The largest concurrency process() accepts. Each unit is an OS thread with its own stack (8 MB
  /// of address space by default) and a worker record; pools beyond a few hundred threads mostly
  /// contend for cores, and a typo such as 10'000 should fail at once, not exhaust the process's
  /// thread limit halfway.
  static constexpr std::uint32_t kMaxConcurrency = 4096;
  /// Handler calls of this queue in flight at once, 1 .. kMaxConcurrency: on a dedicated pool
  /// that many threads of the queue's own, on the shared pool at most that many of the pool's
  /// workers at once (the queue's share). Unset: 1 thread on a dedicated pool, the whole pool on
  /// the shared one.
  std::optional<std::uint32_t> concurrency{};
  Pool pool = Pool::dedicated;
  /// The largest max_pending process() accepts (a lease record of 64 bytes each). Bounded by the
  /// 16-bit pin count of a job's slot (slot_table.hpp): a Completion whose lease lapsed still
  /// pins it, so one job may be pinned by every pending record, every worker and a canceller
  /// (else 65,536 stale Completions of one job overflow its pins:
  /// CompletionRaces.MaxPendingStaysWithinWhatAJobsPinsCanCount pins it).
  static constexpr std::uint32_t kMaxPending = 0xFFFF - kMaxConcurrency - 1;
  /// Jobs whose handler deferred its outcome (Job::defer, completion.hpp) that may await
  /// their Completion at once, 0 .. kMaxPending: the queue keeps a lease record for each.
  /// 0: handlers cannot defer. A defer beyond it throws Error(capacity); bound the jobs in
  /// flight with a downstream's concurrency (at most max_pending) so that it never does.
  std::uint32_t max_pending = 0;

  /// shared(share): the shared pool, with at most `share` workers at once (unset: any).
  [[nodiscard]] static constexpr WorkerOptions shared(
      std::optional<std::uint32_t> share = std::nullopt) noexcept {
    return WorkerOptions{share, Pool::shared, 0};
  }
};

/// Mode: whether the engine runs its own threads.
enum class Mode : std::uint8_t {
  threaded,  // worker pools and a timer thread
  inlined,   // no threads: run_until_idle() runs ready jobs on the caller's thread
};

/// EngineOptions: fixed at construction.
struct EngineOptions {
  Clock* clock = nullptr;  // nullptr: TscClock; must outlive the engine
  Mode mode = Mode::threaded;
  Duration timer_tick = std::chrono::milliseconds(1);  // timing-wheel granularity: 10 us .. 1 s
  std::uint64_t seed = 0x5EEDu;  // jitter randomness (per-thread streams derive from it)
  /// The shared worker pool's threads (queues that process with Pool::shared), started by the
  /// first such queue: 1 .. WorkerOptions::kMaxConcurrency; unset: the core count.
  std::optional<std::uint32_t> workers{};
  /// Called once by the engine's destructor, after its workers and timer stopped, with the jobs
  /// it drops:
  /// not_started, those that never started and that take_leftovers() did not take (an add kept
  /// for after a running job has id 0); still_running, deliveries handed to a Completion that
  /// never reported. Always called when set (clean() when nothing was dropped); must not throw
  /// (a throw is caught and reported on stderr). Unset: the destructor prints one line on
  /// stderr when it drops jobs and shutdown() was never called.
  std::function<void(const ShutdownReport&)> on_destroy = nullptr;
};

}  // namespace rail
