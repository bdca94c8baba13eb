// Dispatcher: hands a queue's ready jobs to workers — the ready ring, the workers' stashes,
// wake-ups, the spinning worker, and the worker threads themselves. It knows slot indices, not
// payloads: each job goes to a JobRunner (the queue's job flow), one indirect call per job.
//
// Ready jobs: the slot indices whose job may start now. Producers, retries and the timer push;
// workers pop. A threaded queue on a machine with several CPUs keeps them in lanes, one per
// producer thread (ready_lanes.hpp): producers on different threads never meet, jobs start in
// add order per producer thread (a worker takes a batch from one lane), and no order holds
// between threads. An inline engine, a one-CPU machine, and a queue whose own downstream hands
// out permits first (below) keep one MPMC ring instead: strict FIFO over every pusher, and a
// head to look at. ("The ring" below means whichever holds them.)
// Batches: a worker takes up to WorkerStash::kCapacity ready jobs with one bulk pop while its
// handlers are fast, and one at a time once a handler was slow (kFastHandlerNs start to start),
// so slow jobs are handed out one by one, in order, to whichever worker is free. Either way an
// idle worker steals from a busy worker's stash before it waits (worker_stash.hpp). The worker
// prefetches a batch's slots and payloads kPrefetchAhead jobs ahead of its deliveries.
// Idle workers: they sleep and are woken by WakeTarget's protocol (wake_target.hpp): one of them
// at a time holds the duty and spins for up to kSpinNs (spin_for_job); producers skip the
// wake-up while it is held (wake_for_ready).
// Permits first: a queue whose own downstream limits concurrency (PermitSource) has its workers
// take a permit before each job, and one job per permit (no batch): a job with no permit free
// for it stays in the ring, ahead of later jobs (the stashes, older, are taken first; a cancel's
// sweep_ready, which has jobs out of the ring for a moment, may let one pass another).
// work_visible() counts such work only while a permit is free, so its workers sleep until a
// release wakes them (GateLink's hungry mark).
// Pause: the paused flag and pause_and_wait's barrier are PauseBarrier's (pause_barrier.hpp): a
// worker checks the pause before taking each job (next_job), so a job it took before seeing the
// pause still runs. One it popped after the pause waits in its stash (paused_after_pop): no job
// added after pause() returned starts before resume(). pause_and_wait() also waits until every
// worker acknowledged the pause between jobs or is parked (asleep, or outside this queue's turn).
// Idle: note_if_idle() runs where a worker (inline: run_inline) runs out of jobs, after a
// pool turn that ran a job (it may have ended on the queue's last), and after a cancel; only
// while someone observes. It raises `idle` when the queue's gauges show nothing waiting,
// delayed or active and work entered it since the last `idle` (the total of moves into
// waiting or delayed grew: QueueStats::idle_mark). idle_raised_mark_ keeps that total;
// an RMW on it orders each checker's earlier counts before the next checker's reads, so of two
// workers ending the last two jobs at once the later check sees both ends (Dekker, no fence).
// Memory ordering: the ring push is a release and its pop an acquire (they carry the slot's
// fields); stop_ is release on store and acquire on load, except its store and the job flow's
// re-check after activation, which are seq_cst (SlotControl::activate explains why); the pause's
// orders are PauseBarrier's.
// Threads: its own (start: WorkerOptions.pool = Pool::dedicated), or the engine's shared pool
// (join_pool: worker_pool.hpp), whose workers take turns over their queues' dispatchers
// (serve_turn). Either way each worker has its own context and stash here, and the workers reach
// the ring only through next_job. A pooled dispatcher's producers wake the pool's sleepers (its
// WakeTarget) instead of its own, and a pool worker counts as parked here while it is not in a
// turn of this queue: pause_and_wait waits only for this queue's handlers.
// Threading: push_ready* from any thread; start/join_pool/stop/join/pause/resume/pause_and_wait
// from any thread, cold; run_inline by the inline engine's caller; serve_turn by pool workers.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "rail/backoff.hpp"
#include "rail/detail/assert.hpp"
#include "rail/detail/engine_core.hpp"
#include "rail/detail/event_count.hpp"
#include "rail/detail/job_slot.hpp"
#include "rail/detail/lease_tracker.hpp"
#include "rail/detail/mpmc_ring.hpp"
#include "rail/detail/pause_barrier.hpp"
#include "rail/detail/queue_stats.hpp"
#include "rail/detail/ready_lanes.hpp"
#include "rail/detail/ready_levels.hpp"
#include "rail/detail/thread_group.hpp"
#include "rail/detail/wake_target.hpp"
#include "rail/detail/worker_stash.hpp"

namespace rail::detail {

/// WorkerContext: what one worker thread keeps to itself (inline mode: the run_until_idle
/// caller's). Freed slots are not batched here: a slot held back while a later handler of the
/// batch runs would make add() answer `full` (or dead-letter under the overflow policy) with
/// room in the queue.
struct alignas(64) WorkerContext {  // its own lines: written on every job by its worker
  WorkerContext(LeaseRecord& r, SplitMix64 g, WorkerStash* st, WorkerCounters* c) noexcept
      : record(r), rng(g), stash(st), counters(c) {}
  LeaseRecord& record;
  SplitMix64 rng;
  WorkerStash* stash;               // null in inline mode: no batches
  WorkerCounters* counters;         // null in inline mode (any thread may run it)
  OwnedLatency* latency = nullptr;  // its histograms; null inline or with histograms off
  /// unstamped: the last job it completed has no end time yet: its start and add times wait for
  /// the worker's next clock reading (FlowParts::stamp_end).
  bool unstamped = false;
  std::int64_t unstamped_start = 0;
  std::int64_t unstamped_add = 0;
  std::int64_t last_start_ns = 0;  // engine clock: poll_timers' idea of now
  std::int64_t last_wall_ns = 0;   // steady_ns(): the batch-size heuristic's
  /// closing_ns: while a batch's deliveries close (QueueImpl::run_batch), the engine clock's
  /// reading when its handler returned, at which each of them ends; INT64_MIN otherwise.
  std::int64_t closing_ns = INT64_MIN;
  /// fresh_ns: the engine clock's reading of this worker's last delivery while it still serves as
  /// the start of the next job from the same pop: that delivery was held in a batch (no handler
  /// ran), no observer listened, and the next job comes from the worker's own stash, the rest of
  /// the pop the reading followed (next_job). INT64_MIN otherwise. Every job of a pop was added
  /// before the pop, so the reading is never before its add; a later job of the pop starts at
  /// most the pop's delivery time early (microseconds), which moves its lease's end earlier,
  /// never later.
  std::int64_t fresh_ns = INT64_MIN;
  bool holds_permit = false;  // next_job took a PermitSource permit for the job it returned
  bool fast = false;          // the last delivery started within fast_handler_ns of the one before
  bool holds_duty = false;    // kept its WakeTarget's duty through the jobs it runs (spin_for_job)
  std::int64_t fast_handler_ns = 0;  // threaded: set_fast_handler_threshold's (inline: unused)
  /// The engine clock is TscClock, whose readings are steady_ns()'s: a delivery's start time
  /// serves as last_wall_ns without a second reading. Any other clock (manual, SteadyClock, a
  /// user's) is another timeline, and the start reads steady_ns() as well.
  bool wall_is_engine_clock = false;
  PauseMarks pause;  // its side of pause_and_wait's barrier (pause_barrier.hpp)
};

/// set_fast_handler_threshold(ns): workers that Dispatcher::start (or join_pool) sets up from now
/// on count a handler as fast (and take batches) when it started within ns of the one before;
/// returns the previous threshold. A test seam like set_thread_factory: a test of batch mechanics
/// sets it to INT64_MAX, so that a batch forms whatever the machine's speed (under ThreadSanitizer
/// two handler starts are rarely 20 us apart). Production keeps kFastHandlerNs.
std::int64_t set_fast_handler_threshold(std::int64_t ns) noexcept;

/// JobRunner: what the dispatcher hands each popped job to. deliver(idx, wc) runs the job unless
/// it was cancelled (or handed back after stop); returns whether a handler ran.
class JobRunner {
 public:
  virtual bool deliver(std::uint32_t idx, WorkerContext& wc) = 0;
  /// flush_freed(w): worker w idles or ends its turn: the slots it freed in a batch go back
  /// where producers look first (FreeSlots batches).
  virtual void flush_freed(std::uint32_t /*w*/) noexcept {}
  /// worker_idle(w, wc): worker w (context wc) found no job, ends its turn or exits: a batch it
  /// holds runs now (Queue::process_batch). Called on w's thread. Throws only what closing a
  /// delivery throws (as deliver's end: on a worker thread, that ends the process).
  virtual void worker_idle(std::uint32_t /*w*/, WorkerContext& /*wc*/) {}
  /// holds_batch(w): worker w holds jobs of a batch it has not run yet (called on w's thread): it
  /// must not acknowledge a pause before it ran them (worker_idle).
  [[nodiscard]] virtual bool holds_batch(std::uint32_t /*w*/) const noexcept { return false; }
  /// linger_until(w): the steady_ns() until which worker w, out of jobs, looks for more to fill
  /// the batch it holds (BatchOptions::linger); INT64_MIN when it holds none or may not wait.
  [[nodiscard]] virtual std::int64_t linger_until(std::uint32_t /*w*/) const noexcept {
    return INT64_MIN;
  }

 protected:
  ~JobRunner() = default;
};

/// PermitSource: the downstream of a queue's own (QueueOptions::downstream), from which its
/// workers take a permit before they take a job (next_job, run_inline) while it limits
/// concurrency: a job that finds no permit free stays in the ready ring, ahead of every later job,
/// so one permit runs the queue's jobs one at a time in ring order (BullMQ checks its concurrency
/// before it moves a job from wait to active, for the same reason). The job carries the permit
/// (WorkerContext::holds_permit) into its delivery, which keeps it or gives it back.
/// Wake-ups: a worker refused a permit marks the source hungry (take, may_take); the next
/// permit released wakes the queue's workers (DownstreamGate::release).
class PermitSource {
 public:
  enum class Take : std::uint8_t {
    unlimited,  // no concurrency limit now: take jobs without a permit (batches)
    taken,      // one permit, for one job
    refused,    // every permit is in use: take no job
  };
  /// limited(): a hint: a limit is in force, so next_job takes the permit path. A limit set
  /// while jobs are popped without one binds them at their admission instead (as a job of
  /// another queue that names the downstream): they are not held in line.
  virtual bool limited() noexcept = 0;
  virtual Take take() noexcept = 0;
  /// give_back(): a permit taken for a job that was not there (or waits for a pause).
  virtual void give_back() noexcept = 0;
  /// may_take(): a hint, for wake-ups: take() would not be refused. False marks the source
  /// hungry (with the fence that makes it the waiter's side of release's Dekker).
  virtual bool may_take() noexcept = 0;
  /// free_now(): a hint: a permit is free now; marks nothing (a worker that holds a permit asks
  /// this: were it to mark, its own release would wake a sleeper for the permit it takes back).
  virtual bool free_now() noexcept = 0;

 protected:
  ~PermitSource() = default;
};

/// PauseListener: told when the queue's paused state changed (pause(), pause_and_wait(),
/// resume()), after the change, on the caller's thread.
class PauseListener {
 public:
  virtual void pause_changed() noexcept = 0;

 protected:
  ~PauseListener() = default;
};

class Dispatcher {
 public:
  /// Start to start, the time under which a worker's handlers count as fast (batches).
  static constexpr std::int64_t kFastHandlerNs = 20'000;
  /// How long the spinner polls for work before sleeping.
  static constexpr std::int64_t kSpinNs = 50'000;

  /// Dispatcher(...): the ready jobs have room for every slot, in lanes or rings (see the
  /// header; rings_only: rings whatever the machine, for a queue whose own downstream will hand
  /// out permits (take_permits_from follows) or with fair shares; levels and max_wait_ns: its
  /// priority levels and their aging, ready_levels.hpp).
  /// slots/payload/payload_stride let next_job prefetch a batch's slots and payloads without
  /// knowing the payload type. `queue` names the queue in its events and `owner` is it (both
  /// outlive the dispatcher).
  Dispatcher(EngineCore& core, QueueStats& stats, std::size_t capacity, bool rings_only,
             std::uint32_t levels, std::int64_t max_wait_ns, JobSlot* slots, const void* payload,
             std::size_t payload_stride, std::string_view queue, const QueueBase& owner);
  ~Dispatcher();
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  /// start(runner, workers, leases, seed, queue): threaded engines start `workers` threads;
  /// inline ones start none (run_inline). Once per dispatcher, unless it threw: all or nothing,
  /// the threads wait at a gate that opens once every one of them exists, so when one cannot be
  /// created the others are joined before any ran a job, start() throws (Error(resources) naming
  /// `queue` when the system refused a thread) and may be called again.
  void start(JobRunner& runner, std::uint32_t workers, LeaseTracker& leases, std::uint64_t seed,
             std::string_view queue);
  /// join_pool(runner, pool_size, wake, leases, seed, share): instead of start(): the engine's
  /// shared pool of pool_size workers will run this queue's jobs (serve_turn), at most `share`
  /// of them at once (0: any number); its producers wake `wake`, the pool's. The caller then
  /// adds the dispatcher to the pool. Once per dispatcher.
  void join_pool(JobRunner& runner, std::uint32_t pool_size, WakeTarget& wake, LeaseTracker& leases,
                 std::uint64_t seed, std::uint32_t share);
  /// serve_turn(w, duty): pool worker w runs up to kTurn of this queue's jobs; returns how many
  /// ran (0 at once when none is visible, the queue's share of the pool is taken, it is paused or
  /// stopped). A worker that holds the pool's duty stops after a handler that ran long (PoolDuty).
  std::uint32_t serve_turn(std::uint32_t w, PoolDuty& duty) noexcept;
  /// jobs_started(): how many handlers this dispatcher's workers started (a watch's progress).
  [[nodiscard]] std::uint64_t jobs_started() const noexcept;
  /// Jobs a pool worker runs from one queue before it moves on to the next.
  static constexpr std::uint32_t kTurn = WorkerStash::kCapacity;
  /// work_visible(): a ready job in the ring or in any worker's stash (a hint, for wake-ups).
  [[nodiscard]] bool work_visible() const noexcept;
  /// turn_possible(): a hint that serve_turn would run a job: work is visible, the queue is
  /// neither paused nor stopped, and its share of the pool is not taken.
  [[nodiscard]] bool turn_possible() const noexcept {
    // relaxed: a hint; serve_turn decides with next_job's own loads.
    return !stop_.load(std::memory_order_relaxed) && !pause_.paused_now() &&
           (share_ == 0 || serving_.load(std::memory_order_relaxed) < share_) && work_visible();
  }

  /// push_ready(idx, counted): a job may start now (counted into `waiting` unless the caller
  /// counted it, its wait starting now), and a worker will look.
  void push_ready(std::uint32_t idx, bool counted = false) noexcept {
    if (!counted) stats_.add(kToReady);
    stamp_ready(idx);
    requeue(idx);
  }
  void push_ready_bulk(const std::uint32_t* idx, std::size_t n) noexcept;
  /// requeue(idx): push_ready without the count and the stamp: for a job that never left
  /// `waiting` (its downstream refused it, then woke it; a line handed it a turn), counted
  /// there already, its wait going on.
  void requeue(std::uint32_t idx) noexcept {
    push_entries(&idx, 1);
    wake_for_ready();
  }
  /// stamp_ready(idx): the job in slot idx became waiting now: where its wait starts, for the
  /// priority levels' aging (ready_levels.hpp; nothing without levels).
  void stamp_ready(std::uint32_t idx) noexcept {
    if (ring_) ring_->stamp(idx);
  }
  /// one_at_a_time(): workers pop one ready job at a time (priority levels: each pop takes the
  /// best-ranked job of its moment), so a pop never fills a batch.
  [[nodiscard]] bool one_at_a_time() const noexcept { return ring_ && ring_->levels() > 1; }

  /// sweep_ready(keep): cold: takes each index that is ready now once (in the workers' stashes,
  /// the lanes or the ring) and puts it back unless keep(idx) is false, in which case keep
  /// disposed of it. What stays keeps its order: the stashes' jobs (popped first, so older) go in
  /// front of the ring's, which are popped and pushed back behind them (lanes: each lane's go back
  /// into it, the stashes' into the sweeper's lane ahead of its own); only what is pushed or
  /// popped meanwhile can pass them. A paused worker's stash is emptied so: its
  /// cancelled jobs give their slots back, its others wait in the ring. Workers pop alongside;
  /// those that found the ring empty meanwhile are woken. Callers take turns
  /// (JobFlow::reclaim_cancelled_waiting holds a lock).
  template <class Keep>
  void sweep_ready(Keep&& keep) noexcept {
    // Odd while a sweep runs (see run_inline). relaxed, then a release fence: the fence
    // orders the increment before the pops below (relaxed CASes on the ring's head), for an
    // inline runner whose failed pop saw one of them and then fences with acquire.
    sweep_gen_.fetch_add(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    std::uint32_t idx;
    bool kept = false;
    // acquire: the stashes exist and worker_count_ is theirs once contexts_ready_ reads true
    // (start / join_pool publish them with a release store); before that there are none.
    const std::uint32_t stashes = contexts_ready_.load(std::memory_order_acquire)
                                      ? worker_count_.load(std::memory_order_relaxed)
                                      : 0;
    // Each stash's jobs, as a thief: each take wins its index against the owner and other
    // thieves (worker_stash.hpp).
    const auto empty_stashes = [&](auto&& put) {
      for (std::uint32_t w = 0; w < stashes; ++w)
        while (stashes_[w].take(idx))
          if (keep(idx)) put(idx);
    };
    if (lanes_) {
      // Each lane's kept jobs go back into it together; the stashes' (popped first, so older)
      // into the sweeper's lane ahead of its own (their own lane is not known).
      lanes_->sweep([&](std::uint32_t i) { return keep(i) && (kept = true); },
                    [&](auto&& put) {
                      empty_stashes([&](std::uint32_t i) {
                        put(i);
                        kept = true;
                      });
                    });
    } else {
      // Counted before the stashes' jobs go in behind them, so those (popped first, so older)
      // stay in front of the ring's.
      ring_->sweep(
          [&](auto&& put) {
            empty_stashes([&](std::uint32_t i) {
              put(entry_of(i));
              kept = true;
            });
          },
          [&](std::uint32_t e) { return keep(slot_of(e)) && (kept = true); });
    }
    // release: the pushes back happen before an inline runner's acquire load that reads it.
    sweep_gen_.fetch_add(1, std::memory_order_release);
    // Lanes: a worker turned away from a lane the sweep held may have gone to sleep with a job
    // pushed there meanwhile (ReadyLanes::sweep).
    if (kept || (lanes_ && lanes_->any())) wake_for_ready();
  }

  /// held_back(): how many times a worker (or the inline runner) popped ready jobs and then kept
  /// them back for a pause (into its stash; inline, back into the ring). A cancel sweep that ran
  /// while they were in its hand missed them: JobFlow sweeps again when this moved.
  [[nodiscard]] std::uint64_t held_back() const noexcept {
    // acquire: pairs with the release increment after the indices are back where a sweep looks.
    return held_back_.load(std::memory_order_acquire);
  }

  /// run_inline(runner, leases, seed, max): inline mode: runs up to max ready jobs on this thread.
  std::size_t run_inline(JobRunner& runner, LeaseTracker& leases, std::uint64_t seed,
                         std::size_t max);

  /// stop(): workers exit after their current job; nothing new starts. join() waits for them
  /// (never for the calling thread itself).
  void stop() noexcept;
  void join() noexcept;
  [[nodiscard]] bool stopping(std::memory_order order) const noexcept { return stop_.load(order); }

  /// pause() / resume(): Queue::pause / resume; each raises its event when it changed the state.
  void pause() noexcept;
  void resume() noexcept;
  [[nodiscard]] bool paused() const noexcept { return pause_.paused(); }
  /// take_permits_from(p): workers take one of p's permits before each job from now on (see
  /// PermitSource). Once, at the queue's construction, before any worker starts.
  void take_permits_from(PermitSource* p) noexcept {
    RAIL_INVARIANT(!lanes_, "a queue that takes permits first was built with ready lanes");
    permits_ = p;
  }
  /// wake_workers(): a permit came free for a hungry PermitSource: a worker looks, even while
  /// one holds the duty (it may be running a long handler; a worker's own release skips this).
  void wake_workers() noexcept { wake_for_ready(true); }
  /// listen_to_pauses(l): l hears every change of the paused state from now on. Once, at the
  /// queue's construction, before any pause.
  void listen_to_pauses(PauseListener* l) noexcept { pause_listener_ = l; }
  /// pause_and_wait(timeout): Queue::pause_and_wait.
  bool pause_and_wait(Duration timeout);

  /// note_if_idle(on_worker): the queue may have become idle (see the header); on_worker:
  /// called by one of its worker threads, which its observers must not wait for.
  void note_if_idle(bool on_worker) noexcept {
    if (!core_.observed()) [[likely]]
      return;  // relaxed hint: nothing to pay when nobody observes
    raise_if_idle(on_worker);
  }

  /// pool_of_caller(): this queue's shared pool, when the caller is one of that pool's workers
  /// (a handler or an observer on it); else null. See PoolWait.
  [[nodiscard]] WakeTarget* pool_of_caller() const noexcept {
    WakeTarget* const t = wake_.load(std::memory_order_relaxed);  // set before any turn
    return pooled() && served_target() == t ? t : nullptr;
  }

  /// workers(): worker threads (0 before start, 1 in inline mode).
  [[nodiscard]] std::uint32_t workers() const noexcept {
    return worker_count_.load(std::memory_order_relaxed);  // a sizing hint for wake-ups
  }
  /// oldest_wait(level, now): ReadyLevels::oldest_wait (0 with lanes: no levels).
  [[nodiscard]] std::int64_t oldest_wait(std::uint32_t level, std::int64_t now) const noexcept {
    return ring_ ? ring_->oldest_wait(level, now) : 0;
  }
  /// worker_limit(): how many of this queue's jobs may run at once: its own workers, or its
  /// share of the shared pool (0 before start).
  [[nodiscard]] std::uint32_t worker_limit() const noexcept {
    const std::uint32_t n = workers();
    return share_ != 0 && share_ < n ? share_ : n;
  }

 private:
  /// paused_after_pop(): a worker (or the inline runner) that popped work after it checked
  /// paused_ asks again before starting it: a pause() that returned before the job's add must
  /// hold that job (test: ThreadedEngine.BlockedAddTakesTheSlotOfAJobCancelledOnAnotherThread
  /// saw a job added to a paused queue run). No fence needed: the add that pushed what we
  /// popped came after the pause, and our pop acquired its push (the ring's cell hand-off), so
  /// the pause's store happens before this load, which must see it (write-read coherence).
  /// Once per batch, on a line the entry check just read.
  [[nodiscard]] bool paused_after_pop() const noexcept { return pause_.paused_now(); }

  void worker_loop(JobRunner& runner, std::uint32_t w, WorkerContext& wc);
  void make_contexts(std::uint32_t workers, LeaseTracker& leases, std::uint64_t seed);
  /// wall_is_engine_clock(): the engine clock reads steady_ns()'s timeline (WorkerContext).
  [[nodiscard]] bool wall_is_engine_clock() const noexcept;
  /// kPrefetchAhead: how many jobs ahead of its next delivery a worker fetches the lines of.
  static constexpr std::uint32_t kPrefetchAhead = 4;
  /// prefetch_job(idx, whole): starts fetching the lines a delivery of the job in slot idx reads
  /// and writes: its slot header's first line (and the second if `whole`) and its payload's first
  /// line. idx is any slot index (a peeked one may be stale: a wasted fetch at worst).
  void prefetch_job(std::uint32_t idx, bool whole) const noexcept {
    prefetch_slot(slots_[idx], whole ? kSlotLines : 1);
    prefetch_for_read(payload_ + idx * payload_stride_);
  }
  bool next_job(std::uint32_t w, WorkerContext& wc, std::uint32_t& idx) noexcept;
  [[nodiscard]] bool work_queued() const noexcept;
  /// Ring entries of a queue that takes permits (PermitSource) mark a job that names another
  /// downstream than the queue's (JobSlot::link != 0): it needs none of the queue's permits, so
  /// a worker refused one may still take it from the head of the line (try_pop_if). Read from
  /// the slot by whoever pushes the index (it holds the job then); slot indices stay below 2^29.
  static constexpr std::uint32_t kNamesOther = std::uint32_t{1} << 31;
  [[nodiscard]] std::uint32_t entry_of(std::uint32_t idx) const noexcept {
    return permits_ != nullptr && slots_[idx].downstream_link() != 0 ? idx | kNamesOther : idx;
  }
  [[nodiscard]] static std::uint32_t slot_of(std::uint32_t entry) noexcept {
    return entry & ~kNamesOther;
  }
  /// push_entries(idx, n): pushes n ready indices, in order: into this thread's lane as one
  /// chain, or into the rings, each marked (entry_of) if need be.
  void push_entries(const std::uint32_t* idx, std::size_t n) noexcept;
  /// put_back_entries(idx, n): push_entries for jobs popped and put back (a pause's hold-back
  /// inline): into the rings without a new start of their wait (ready_levels.hpp).
  void put_back_entries(const std::uint32_t* idx, std::size_t n) noexcept;
  /// pop_ready(out, max, w): up to max ready indices (marks stripped) for worker w.
  std::size_t pop_ready(std::uint32_t* out, std::size_t max, std::uint32_t w) noexcept;
  /// ready_any(): a hint: a ready index is in the lanes or the ring.
  [[nodiscard]] bool ready_any() const noexcept {
    return lanes_ ? lanes_->any() : ring_->size_approx() > 0;
  }
  /// other_at_head(): a hint: the ready job next in line names another downstream
  /// (kNamesOther). The rings': a queue with a PermitSource has no lanes.
  [[nodiscard]] bool other_at_head() const noexcept {
    std::uint32_t e = 0;
    return ring_->peek_next(e) && (e & kNamesOther) != 0;
  }
  bool next_permitted_job(std::uint32_t w, WorkerContext& wc, std::uint32_t& idx) noexcept;
  bool pop_inline(WorkerContext& wc, std::uint32_t& idx) noexcept;
  bool hold_back(WorkerContext* wc, std::uint32_t w, const std::uint32_t* idx,
                 std::size_t n) noexcept;
  /// may_acknowledge(w): worker w may acknowledge a pause: it holds no batch it has yet to run.
  [[nodiscard]] bool may_acknowledge(std::uint32_t w) const noexcept {
    return runner_ == nullptr || !runner_->holds_batch(w);
  }
  bool spin_for_job(std::uint32_t w, WorkerContext& wc, std::uint32_t& idx) noexcept;
  bool linger(JobRunner& runner, std::uint32_t w, WorkerContext& wc, std::uint32_t& idx) noexcept;
  void run(JobRunner& runner, std::uint32_t idx, WorkerContext& wc);
  void give_up_duty(WorkerContext& wc) noexcept;
  void sleep() noexcept;
  /// ran_long(wc, now): the handler wc's worker started last has run fast_handler_ns or more by
  /// `now` (steady_ns()).
  [[nodiscard]] static bool ran_long(const WorkerContext& wc, std::int64_t now) noexcept {
    return now - wc.last_wall_ns >= wc.fast_handler_ns;
  }
  bool steal(std::uint32_t w, const WorkerContext& wc, std::uint32_t& idx) noexcept;
  /// workers_acknowledged(epoch): PauseBarrier::acknowledged over this queue's workers.
  [[nodiscard]] bool workers_acknowledged(std::uint64_t epoch) const noexcept;
  void raise_if_idle(bool on_worker) noexcept;
  void emit_queue_event(EventKind kind) const noexcept;

  /// wake_for_ready(even_if_held): after a push to the ready ring (or a stash), make sure a
  /// worker will look. While the duty is held its holder looks, unless `even_if_held`: a worker
  /// saw more work than one worker keeps up with (the holder alone would fall behind), or the
  /// work was left by a worker that is not the holder. Only the holder's own leftovers may wait
  /// for the holder to come back: should its handler run long, the one sleeper whose watch then
  /// finds the work would otherwise run all of it alone, each start it makes counting as
  /// progress to the other watches
  /// (ThreadedEngine.ABacklogBehindALongHandlerOfTheDutyHolderRunsOnSeveralWorkers pins it).
  void wake_for_ready(bool even_if_held = false) noexcept {
    // seq_cst: orders our push before the loads below: the duty (see spin_for_job) and the
    // target itself (see join_pool).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    // acquire: a pool's target is fully built before join_pool publishes it.
    WakeTarget& t = *wake_.load(std::memory_order_acquire);
    // relaxed: ordered by the fence (give_up_duty's Dekker).
    if (!even_if_held && t.duty.load(std::memory_order_relaxed) != WakeTarget::kIdle)
      return;  // its holder looks
    t.ec.notify();
  }
  [[nodiscard]] bool pooled() const noexcept {
    return wake_.load(std::memory_order_relaxed) != &own_;  // set once, before any serve_turn
  }

  EngineCore& core_;
  QueueStats& stats_;
  std::string_view queue_;
  const QueueBase& owner_;
  const JobSlot* slots_;
  const char* payload_;
  std::size_t payload_stride_;
  // The ready jobs: lanes, or (lanes_ null) the rings, one per priority level; see the header.
  std::unique_ptr<ReadyLanes> lanes_;
  std::optional<ReadyLevels> ring_;
  // Sweeps of the ready ring begun plus ended (sweep_ready); cold.
  std::atomic<std::uint64_t> sweep_gen_{0};
  // The dedicated workers' wake target; wake_ points at it, or at the shared pool's.
  WakeTarget own_;
  std::atomic<WakeTarget*> wake_{&own_};
  std::unique_ptr<WorkerStash[]> stashes_;  // threaded mode: one per worker
  std::vector<std::unique_ptr<WorkerContext>> contexts_;
  std::optional<WorkerContext> inline_context_;  // inline mode: the run_until_idle caller
  ThreadGroup threads_;                          // dedicated workers
  JobRunner* pool_runner_ = nullptr;             // pooled: set before the pool sees us
  JobRunner* runner_ = nullptr;  // the queue's, threaded (start, join_pool): see may_acknowledge
  std::uint32_t share_ = 0;      // pooled: most pool workers at once (0: any)
  // pooled: workers in a turn of this queue (counted only under a share); its own line.
  alignas(64) std::atomic<std::uint32_t> serving_{0};
  // contexts_ is complete (release; set once): pause_and_wait may read it.
  std::atomic<bool> contexts_ready_{false};
  std::atomic<std::uint32_t> worker_count_{0};
  std::atomic<bool> stop_{false};
  PauseBarrier pause_;
  std::atomic<std::uint64_t> held_back_{0};  // see held_back()
  PauseListener* pause_listener_ = nullptr;  // set before the queue is published
  PermitSource* permits_ = nullptr;          // set before any worker starts
  // The idle_mark of the last `idle` (see the header); only touched when observed.
  alignas(64) std::atomic<std::uint64_t> idle_raised_mark_{0};
};

}  // namespace rail::detail
