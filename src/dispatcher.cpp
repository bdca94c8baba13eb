// Dispatcher (dispatcher.hpp): a queue's workers, how they find ready jobs, sleep and wake, and
// the shared pool's turns; the permit-first path is in dispatcher_permits.cpp.
#include "rail/detail/dispatcher.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "rail/detail/cpu_relax.hpp"
#include "rail/detail/deadline.hpp"
#include "rail/detail/free_slots.hpp"
#include "rail/detail/prefetch.hpp"
#include "rail/detail/scoped_value.hpp"
#include "rail/error.hpp"

namespace rail::detail {
namespace {

// relaxed: a plain number, read by start() and copied into each worker's context before the
// worker thread exists (the thread's creation orders it).
std::atomic<std::int64_t> g_fast_handler_ns{Dispatcher::kFastHandlerNs};

}  // namespace

std::int64_t set_fast_handler_threshold(std::int64_t ns) noexcept {
  return g_fast_handler_ns.exchange(ns, std::memory_order_relaxed);
}

Dispatcher::Dispatcher(EngineCore& core, QueueStats& stats, std::size_t capacity, bool rings_only,
                       std::uint32_t levels, std::int64_t max_wait_ns, JobSlot* slots,
                       const void* payload, std::size_t payload_stride, std::string_view queue,
                       const QueueBase& owner)
    : core_(core),
      stats_(stats),
      queue_(queue),
      owner_(owner),
      slots_(slots),
      payload_(static_cast<const char*>(payload)),
      payload_stride_(payload_stride) {
  // Lanes for a threaded queue on several CPUs, unless it takes permits first, has fair shares
  // or priority levels (see the header).
  const std::size_t lanes = core.mode() == Mode::threaded && !rings_only && levels == 1
                                ? ReadyLanes::lanes_for(std::thread::hardware_concurrency())
                                : 1;
  if (lanes > 1) {
    lanes_ = std::make_unique<ReadyLanes>(capacity, lanes);
  } else {
    ring_.emplace(core, capacity, levels, slots, ~kNamesOther, max_wait_ns);
  }
}

Dispatcher::~Dispatcher() {
  stop();
  join();
}

void Dispatcher::make_contexts(std::uint32_t workers, LeaseTracker& leases, std::uint64_t seed) {
  stashes_ = std::make_unique<WorkerStash[]>(workers);
  const bool wall = wall_is_engine_clock();
  const std::int64_t fast_ns = g_fast_handler_ns.load(std::memory_order_relaxed);
  for (std::uint32_t w = 0; w < workers; ++w) {
    contexts_.push_back(std::make_unique<WorkerContext>(leases.record(w), SplitMix64(seed ^ w),
                                                        &stashes_[w], nullptr));
    contexts_.back()->wall_is_engine_clock = wall;
    contexts_.back()->fast_handler_ns = fast_ns;
  }
}

bool Dispatcher::wall_is_engine_clock() const noexcept {
  return dynamic_cast<TscClock*>(&core_.clock()) != nullptr;
}

void Dispatcher::start(JobRunner& runner, std::uint32_t workers, LeaseTracker& leases,
                       std::uint64_t seed, std::string_view queue) {
  if (core_.mode() != Mode::threaded) {
    worker_count_.store(1, std::memory_order_relaxed);
    return;
  }
  // Nothing a worker could observe (its counters, the worker count, a job) exists until every
  // thread does: a failure halfway then undoes only what this call built.
  try {
    make_contexts(workers, leases, seed);
    runner_ = &runner;  // before the threads, whose start publishes it
    threads_.spawn(workers,
                   [this, &runner](std::uint32_t w) { worker_loop(runner, w, *contexts_[w]); });
  } catch (const std::system_error& e) {
    const std::size_t started = threads_.size();
    contexts_.clear();
    stashes_.reset();
    throw Error(ErrorCode::resources,
                "queue '" + std::string(queue) + "': process() could not start worker thread " +
                    std::to_string(started + 1) + " of " + std::to_string(workers) + " (" +
                    e.what() + "); the " + std::to_string(started) +
                    " it had started exited before running a job and the queue has no processor. "
                    "Expected the system to allow " +
                    std::to_string(workers) +
                    " more threads (ulimit -u, the cgroup's pids.max, memory for their stacks); "
                    "call process() again with a lower WorkerOptions.concurrency or once threads "
                    "are free");
  } catch (...) {
    contexts_.clear();
    stashes_.reset();
    throw;
  }
  try {
    stats_.add_workers(workers);  // the counters' array: may throw bad_alloc
  } catch (...) {
    threads_.abandon();  // the threads wait at the gate: they exit without running a job
    contexts_.clear();
    stashes_.reset();
    throw;
  }
  for (std::uint32_t w = 0; w < workers; ++w) {
    contexts_[w]->counters = &stats_.worker(w);
    contexts_[w]->latency = stats_.latency().worker(w);
  }
  // relaxed: a sizing hint for wake-ups; the workers see it through the gate.
  worker_count_.store(workers, std::memory_order_relaxed);
  // release: pause_and_wait's acquire load sees contexts_ complete.
  contexts_ready_.store(true, std::memory_order_release);
  threads_.open();  // release: the workers see their contexts and counters complete
}

void Dispatcher::join_pool(JobRunner& runner, std::uint32_t pool_size, WakeTarget& wake,
                           LeaseTracker& leases, std::uint64_t seed, std::uint32_t share) {
  try {  // what may throw (bad_alloc) comes first, and is undone: process() may be called again
    make_contexts(pool_size, leases, seed);
    stats_.add_workers(pool_size);
  } catch (...) {
    contexts_.clear();
    stashes_.reset();
    throw;
  }
  for (std::uint32_t w = 0; w < pool_size; ++w) {
    contexts_[w]->counters = &stats_.worker(w);
    contexts_[w]->latency = stats_.latency().worker(w);
    // Not in a turn of this queue: parked as far as pause_and_wait is concerned.
    contexts_[w]->pause.parked.store(true, std::memory_order_relaxed);
  }
  pool_runner_ = &runner;
  runner_ = &runner;
  share_ = share;
  worker_count_.store(pool_size, std::memory_order_relaxed);  // a sizing hint, as in start()
  contexts_ready_.store(true, std::memory_order_release);     // as in start()
  // Producers notify the pool from now on. A push made just before this store may have woken
  // our own (unwatched) event count: a Dekker, fence against the fence in wake_for_ready: either
  // that producer loads the pool's target, or the pool's check for work, after it publishes us
  // (WorkerPool::add, which the caller runs next), sees its push. The pool's workers see this
  // dispatcher, and what was written above, through that publication.
  wake_.store(&wake, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

std::uint32_t Dispatcher::serve_turn(std::uint32_t w, PoolDuty& duty) noexcept {
  if (!turn_possible()) return 0;  // most visits: an idle queue costs a few loads
  if (share_ != 0) {
    // relaxed: a count of workers, ordering nothing; RMWs on one word are totally ordered, so
    // never more than share_ are in.
    std::uint32_t in = serving_.load(std::memory_order_relaxed);
    do {
      if (in >= share_) return 0;
    } while (!serving_.compare_exchange_weak(in, in + 1, std::memory_order_relaxed));
  }
  WorkerContext& wc = *contexts_[w];
  wc.holds_duty = duty.held;  // next_job passes wake-ups on unless the worker holds the duty
  wc.pause.unpark();          // against pause_and_wait (PauseBarrier): once per turn
  std::uint32_t ran = 0, idx = 0;
  bool more = true;
  while (ran < kTurn && (more = next_job(w, wc, idx))) {
    ++ran;
    // A job held in a batch ran no handler (fresh_ns kept): nothing ran long.
    if (!pool_runner_->deliver(idx, wc) || !duty.held || wc.fresh_ns != INT64_MIN) continue;
    // One clock read per job while the worker holds the pool's duty, as in run().
    if (ran_long(wc, steady_ns())) {
      wc.holds_duty = false;
      duty.ran_long = true;
      break;
    }
  }
  if (ran > 0)  // a spin right after this turn keeps the duty if its last handler was fast
    duty.keep_before = saturating_add(wc.last_wall_ns, Duration{wc.fast_handler_ns});
  if (!more) wc.fast = false;  // as after idling in worker_loop
  if (ran > 0) {               // the worker moves on: as before it idles
    pool_runner_->worker_idle(w, wc);
    pool_runner_->flush_freed(w);
  }
  // This worker may have run the queue dry: also when the turn ended on kTurn with the last job
  // (next_job never failed; the next turn finds nothing visible and returns before looking).
  // Only while observed (note_if_idle), and once per turn, not per job.
  if (ran > 0) note_if_idle(true);
  wc.pause.park();  // our last handler's end happens before a waiter sees us parked
  if (share_ != 0) {
    serving_.fetch_sub(1, std::memory_order_relaxed);
    // The turn ended with work left: a worker turned away by the share may be asleep by now.
    if (more) wake_for_ready(!wc.holds_duty);
  }
  return ran;
}

void Dispatcher::push_ready_bulk(const std::uint32_t* idx, std::size_t n) noexcept {
  stats_.add(kToReady, n);
  for (std::size_t i = 0; ring_ && ring_->levels() > 1 && i < n; ++i)
    ring_->stamp(idx[i]);
  push_entries(idx, n);
  const std::size_t wake = std::max<std::size_t>(1, std::min<std::size_t>(n, workers()));
  // seq_cst fence, then acquire: as in wake_for_ready (join_pool's hand-off needs our pushes
  // ordered before the load of the target). Once per bulk.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  WakeTarget& t = *wake_.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < wake; ++i)
    t.ec.notify();
}

std::size_t Dispatcher::run_inline(JobRunner& runner, LeaseTracker& leases, std::uint64_t seed,
                                   std::size_t max) {
  if (!inline_context_) {
    inline_context_.emplace(leases.record(0), SplitMix64(seed), nullptr, nullptr);
    // Nothing inline reads the start-to-start time (batch sizes, linger and the duty are the
    // threaded workers'), so a start's own reading serves for it, as on a worker.
    inline_context_->wall_is_engine_clock = wall_is_engine_clock();
  }
  std::size_t ran = 0;
  std::uint32_t idx;
  // Checked before every job: a handler may pause the queue or shut the engine down, and after
  // stop nothing new starts (take_leftovers may have handed ready jobs back).
  while (ran < max && !pause_.paused() && !stop_.load(std::memory_order_acquire)) {
    // acquire: a sweep that ended before this load has put back what it took (sweep_ready).
    const std::uint64_t gen = sweep_gen_.load(std::memory_order_acquire);
    if (pop_inline(*inline_context_, idx)) {
      if (paused_after_pop()) [[unlikely]] {
        if (std::exchange(inline_context_->holds_permit, false)) permits_->give_back();
        hold_back(nullptr, 0, &idx, 1);
        break;
      }
      if (runner.deliver(idx, *inline_context_)) ++ran;
      continue;
    }
    // An add on another thread may be sweeping the ring, holding a job that was ready before
    // this call (else run_until_idle returns with it still waiting:
    // ThreadedEngine.InlineRunUntilIdleRunsAJobReadyBeforeItWhileAnotherThreadSweeps pins it):
    // empty only if no sweep ran across the pop. The acquire fence pairs with the sweep's
    // release fence, through the ring head our pop read.
    std::atomic_thread_fence(std::memory_order_acquire);
    if (gen % 2 == 0 && sweep_gen_.load(std::memory_order_relaxed) == gen) break;
    std::this_thread::yield();
  }
  runner.worker_idle(
      0, *inline_context_);  // a batch the caller holds runs before run_until_idle returns
  if (ran < max) note_if_idle(false);  // ran out of jobs (or paused): idle now?
  return ran;
}

void Dispatcher::stop() noexcept {
  // seq_cst: in one order with the job flow's activation and its re-check (SlotControl::activate).
  stop_.store(true, std::memory_order_seq_cst);
  // Our own workers: every later wait() returns at once. (A pool's workers look at stop_ in
  // their next turn of this queue; the pool is stopped by the engine.)
  own_.ec.notify_all(INT32_MAX / 2);
}

void Dispatcher::join() noexcept {
  threads_.join();
}

void Dispatcher::raise_if_idle(bool on_worker) noexcept {
  // acq_rel RMW: orders this thread's counts before the next checker's reads, and the previous
  // checker's counts before ours (see the header: the last two ends are never both missed).
  std::uint64_t last = idle_raised_mark_.fetch_add(0, std::memory_order_acq_rel);
  const std::optional<std::uint64_t> mark = stats_.idle_mark();
  if (!mark) return;
  while (*mark > last) {
    // acq_rel: one winner per mark, and marks only grow: a slower checker with an older mark
    // cannot raise the event twice for one transition.
    if (idle_raised_mark_.compare_exchange_weak(last, *mark, std::memory_order_acq_rel,
                                                std::memory_order_acquire)) {
      if (!on_worker) {
        emit_queue_event(EventKind::idle);
        return;
      }
      // As a delivery of this queue: an observer on its worker must not wait for that worker
      // (wait_idle, pause_and_wait throw would_deadlock).
      const ScopedValue<const QueueBase*> delivering(current_delivery(), &owner_);
      emit_queue_event(EventKind::idle);
      return;
    }
  }
}

void Dispatcher::emit_queue_event(EventKind kind) const noexcept {
  if (!core_.observed()) return;
  Event e;
  e.kind = kind;
  e.at = TimePoint{Duration{core_.now_ns()}};
  e.queue = queue_;
  core_.emit(e);
}

void Dispatcher::worker_loop(JobRunner& runner, std::uint32_t w, WorkerContext& wc) {
  std::uint32_t idx = 0;
  EngineCore::prepare_worker_thread();
  freeing_worker() = static_cast<int>(w);  // slots this thread frees go through its batch
  // However the loop ends, a pause_and_wait no longer waits for this worker, and what it freed
  // is in the ring.
  struct Exit {
    JobRunner& runner;
    std::uint32_t w;
    WorkerContext& wc;
    ~Exit() {
      runner.worker_idle(w, wc);  // a batch it holds runs before the worker goes
      runner.flush_freed(w);
      wc.pause.exit();
    }
  } exit{runner, w, wc};
  while (!stop_.load(std::memory_order_acquire)) {
    if (next_job(w, wc, idx)) {
      run(runner, idx, wc);
      continue;
    }
    // A batch to wait for or to run is no fast handler: producers must not skip their wake-ups
    // for this worker meanwhile.
    if (wc.holds_duty && runner.holds_batch(w)) give_up_duty(wc);
    if (linger(runner, w, wc, idx)) {
      run(runner, idx, wc);
      continue;
    }
    runner.worker_idle(w, wc);  // a batch it holds runs now: no job is left to fill it
    wc.fast = false;        // after idling, the next handler's speed is unknown: one job at a time
    runner.flush_freed(w);  // before it waits: what it freed must not wait with it
    note_if_idle(true);     // this worker ran out of jobs: the queue may be idle now
    if (spin_for_job(w, wc, idx)) {
      run(runner, idx, wc);
      continue;
    }
    if (stop_.load(std::memory_order_acquire)) break;
    // Returns at once if a producer (or a worker filling its stash) signalled since; else sleeps
    // until one does. Either way the loop re-checks the ring and the stashes (event_count.hpp).
    // Parked meanwhile: between jobs, so a pause_and_wait need not wait for (or wake) us. The
    // semaphore's wake-ups go to any worker, so a pause cannot count on waking each one.
    wc.pause.park();
    sleep();
    wc.pause.unpark();  // once per wake-up, not per job
  }
}

/// linger(runner, w, wc, idx): worker w holds a batch that is not full and found no job: it looks
/// for one until the batch's linger ends (doubling sleeps from 10 us, at most 1 ms), the queue is
/// paused or the dispatcher stops; true with idx set when one came.
bool Dispatcher::linger(JobRunner& runner, std::uint32_t w, WorkerContext& wc,
                        std::uint32_t& idx) noexcept {
  const std::int64_t until = runner.linger_until(w);
  if (until == INT64_MIN) return false;
  std::int64_t pause_ns = 10'000;
  for (std::int64_t now = steady_ns(); now < until; now = steady_ns()) {
    if (stop_.load(std::memory_order_acquire) || pause_.paused()) return false;
    if (next_job(w, wc, idx)) return true;
    std::this_thread::sleep_for(std::chrono::nanoseconds(std::min(pause_ns, until - now)));
    pause_ns = std::min<std::int64_t>(pause_ns * 2, 1'000'000);
  }
  return false;
}

/// sleep(): a worker that found no work and could not take the duty waits, watching while the
/// duty is held (WakeTarget::sleep).
void Dispatcher::sleep() noexcept {
  own_.sleep(
      workers(), [this] { return jobs_started(); }, [this] { return work_visible(); });
}

std::uint64_t Dispatcher::jobs_started() const noexcept {
  std::uint64_t n = 0;
  for (std::uint32_t w = 0; w < workers(); ++w)
    n += stats_.worker(w).read(kStarted);
  return n;
}

/// run(runner, idx, wc): delivers a job; a worker that kept the duty through it gives the duty up
/// when its handler ran long (kFastHandlerNs or more): a slow handler is no reason for producers
/// to skip their wake-ups, and the next may be as slow. One clock read per job, only while the
/// worker holds the duty (a wake-up saved per push pays for it).
void Dispatcher::run(JobRunner& runner, std::uint32_t idx, WorkerContext& wc) {
  if (!runner.deliver(idx, wc) || !wc.holds_duty || wc.fresh_ns != INT64_MIN) return;
  if (ran_long(wc, steady_ns())) give_up_duty(wc);
}

/// give_up_duty(wc): the worker stops holding the duty it kept through its jobs (spin_for_job).
void Dispatcher::give_up_duty(WorkerContext& wc) noexcept {
  wc.holds_duty = false;
  own_.give_up_duty();
  // Work pushed or stashed while we held the duty went unannounced (ours, other workers',
  // timers fired by poll_timers): a sleeper must take it if our handler runs long.
  if (work_visible()) own_.ec.notify();
}

/// spin_for_job(w, wc, idx): if no other worker holds the duty (or this one kept it), spin
/// for a job until kSpinNs pass; true with idx set when one came. A false return leaves the
/// caller to sleep(). At a steady rate the spinner catches each job within a hand-off (~100 ns)
/// instead of a futex wake-up (1-5 us, and on a busy machine a wait for a core); one spinner,
/// unlike every idle worker spinning, leaves the other cores to the producers and the busy
/// workers.
/// When the worker's last handler ran for less than fast_handler_ns (from its start to this
/// spin), on a dispatcher with more workers, it keeps the duty through the job it found (and
/// those it finds after it, while they stay fast: run()): producers go on skipping their
/// wake-ups, and it takes their jobs when its handler returns. Giving the duty up
/// for each job would make every push during a handler wake a sleeper: with one producer and two
/// workers on two cores that is a system call per few jobs for the producer and a third thread
/// fighting for the cores (1P+2W then runs several times slower than one worker). Should the
/// handler run long after all, the jobs pushed meanwhile wait for it, or for a sleeper's watch
/// (WakeTarget::sleep(): about 2 x kWatchNs at most); once a handler ran long the worker gives the
/// duty up.
bool Dispatcher::spin_for_job(std::uint32_t w, WorkerContext& wc, std::uint32_t& idx) noexcept {
  WakeTarget& t = own_;
  if (!wc.holds_duty) {
    if (!t.take_duty()) return false;
    wc.holds_duty = true;
  }
  const std::int64_t start = steady_ns();
  const std::int64_t until = saturating_add(start, Duration{kSpinNs});
  // Keep the duty through the job we find (see above), or give it up before we take it.
  const bool keep = workers() > 1 && !ran_long(wc, start);
  bool got = false, seen = false;
  for (std::uint32_t round = 1; !got && !seen; ++round) {
    // `pause`, not sched_yield: on a busy machine a yield hands the core away for milliseconds.
    cpu_relax();
    if (keep) {
      got = next_job(w, wc, idx);
    } else if (!pause_.seen(wc.pause, [&] { return may_acknowledge(w); })) {
      // As next_job: nothing starts while paused, nobody is woken.
      core_.poll_timers(wc.last_start_ns);  // as next_job would
      seen = work_visible();
    }
    // The clock only every 64 rounds: a read costs as much as a few dozen pauses.
    if (!got && !seen && round % 64 == 0 &&
        (stop_.load(std::memory_order_acquire) || steady_ns() >= until))
      break;
  }
  if (got) {
    t.keep_duty();  // through the job
    return true;
  }
  // Give the duty up before we take a job, and then take it with next_job, which wakes sleepers
  // for the work beyond ours (pushes skipped their wake-ups while we held the duty; we hold it
  // no more, so next_job's wake-ups are not skipped) without a job in our hands (see there).
  // Taking our job first and waking a sleeper after would let the sleeper land on our core
  // ahead of us and run the others while our job waits out its time slice (milliseconds, at
  // the p99.9). After a timeout we look once more too, as a push made while we stop would
  // otherwise wait for the next wake-up.
  wc.holds_duty = false;
  t.give_up_duty();
  if (next_job(w, wc, idx)) return true;  // false at once after stop
  // This look is the one that pushes which skipped their wake-ups count on (give_up_duty's
  // Dekker), and it can fail with their work in sight: a worker popping the same lane turned us
  // away (ReadyLanes::take), or a push is between its claim and its publication. The popper
  // looks again after its release only if it popped some (next_job's `more`) or goes on to spin
  // (worker_loop); one in this same last look that popped none would sleep too, and every
  // worker with it. So a look that fails with work visible announces it, as give_up_duty(wc)
  // does: a sleeper, or this worker's own sleep at once, looks again (and the spin that look
  // leads to announces again should it fail so too). Not while paused: nothing would start.
  // relaxed: a resume() this load misses notifies after its store (resume()), and that RMW on
  // the event count is ordered with our sleep's: the sleep returns.
  if (!pause_.paused_now() && work_visible()) t.ec.notify();
  return false;
}

/// work_visible(): a ready job in the ring or in any worker's stash (a hint, for wake-ups).
bool Dispatcher::work_visible() const noexcept {
  // Work with no permit for it is none: the worker sleeps, and the permit's release wakes it
  // (unless the head of the line needs no permit of ours).
  return work_queued() && (permits_ == nullptr || other_at_head() || permits_->may_take());
}

/// work_queued(): a ready job in the ring or in any worker's stash (a hint).
bool Dispatcher::work_queued() const noexcept {
  if (ready_any()) return true;
  for (std::uint32_t w = 0; w < workers(); ++w)
    if (!stashes_[w].empty()) return true;
  return false;
}

/// next_job(w, wc, idx): the next job for worker w — from its own stash, else a new batch from
/// the ready ring, else stolen from another worker's stash. False when there is none, or the
/// queue is paused (stashed jobs then wait with the rest: nothing new starts while paused).
bool Dispatcher::next_job(std::uint32_t w, WorkerContext& wc, std::uint32_t& idx) noexcept {
  // The last delivery's reading serves the next job only if it comes from the same pop: the
  // stash (WorkerContext::fresh_ns). Cleared first: every other way out, a pause or stop
  // included (time passes before the next look), drops it.
  const std::int64_t fresh = std::exchange(wc.fresh_ns, INT64_MIN);
  // After stop nothing new starts: shutdown may already have reported a ready job as not started
  // and handed its payload back (take_leftovers).
  if (stop_.load(std::memory_order_acquire)) return false;
  if (pause_.seen(wc.pause, [&] { return may_acknowledge(w); })) return false;
  if (permits_ != nullptr && permits_->limited()) [[unlikely]] {
    // A permit only for a job in sight: a spinner would otherwise take and give back one per
    // look, each give-back a release that wakes the gate's waiters.
    core_.poll_timers(wc.last_start_ns);  // as below: a timer may make a job ready
    if (!work_queued()) return false;
    switch (permits_->take()) {
      case PermitSource::Take::unlimited:
        break;
      case PermitSource::Take::taken:
        return next_permitted_job(w, wc, idx);
      case PermitSource::Take::refused:
        // No permit of ours: a job at the head of the line that calls another downstream
        // needs none.
        if (!ring_->try_pop_if(idx, [](std::uint32_t e) { return (e & kNamesOther) != 0; }))
          return false;
        idx = slot_of(idx);
        if (paused_after_pop()) [[unlikely]]
          return hold_back(&wc, w, &idx, 1);
        return true;
    }
  }
  if (wc.stash->take(idx)) {
    wc.fresh_ns = fresh;
    std::uint32_t ahead;
    if (wc.stash->peek(kPrefetchAhead - 1, ahead)) prefetch_job(ahead, true);
    return true;
  }
  // A batch boundary: fire any timer that came due (backoffs, delays, lease sweeps) if the timer
  // thread has not.
  core_.poll_timers(wc.last_start_ns);
  std::array<std::uint32_t, WorkerStash::kCapacity> batch;
  const std::size_t want = wc.fast ? batch.size() : 1;
  const std::size_t n = pop_ready(batch.data(), want, w);
  if (n == 0) {
    if (!steal(w, wc, idx)) return false;
    if (paused_after_pop()) [[unlikely]]
      return hold_back(&wc, w, &idx, 1);
    return true;
  }
  if (paused_after_pop()) [[unlikely]]
    return hold_back(&wc, w, batch.data(), n);
  // The slots were written on the producer's core: start the misses of the batch's first jobs
  // now, so they overlap instead of stalling one delivery each, and each take from the stash
  // starts those of the job kPrefetchAhead places behind it: a rolling window, since the core
  // tracks only so many misses at once (a whole batch's would be partly dropped). The first
  // take's peek reaches batch[kPrefetchAhead + 1] when we keep batch[0] and stash the rest, so
  // the pop covers one more. A pop of one job (workers keeping up with single adds) fetches only
  // the slot's first line: the second costs that hand-off more than it saves.
  for (std::size_t i = 0; i < std::min<std::size_t>(n, kPrefetchAhead + 1); ++i)
    prefetch_job(batch[i], n > 1);
  // Work we leave behind is announced, so that sleepers join in: one wake-up per stashed job
  // (each woken worker steals one) and one more if the ring still holds jobs; every worker that
  // finds work does the same, so the wake-ups chain as far as the work goes. Pushes made while a
  // spinner was on duty skipped theirs; this is where they are made up for. A worker that keeps
  // the duty through fast handlers (spin_for_job) makes none, unless a full batch left more
  // behind it: the work then outruns one worker, and sleepers must join in. Another worker always
  // does (wake_for_ready says why). (The holder makes none rather than have wake_for_ready skip
  // them, the duty being its own: a seq_cst fence each, for nothing.)
  std::size_t wake = 0;
  if (workers() > 1) {
    const bool more = ready_any();
    // A worker that pops one job at a time never fills a batch: work left behind outruns it
    // whenever there is more.
    if ((more && (n == batch.size() || one_at_a_time())) || !wc.holds_duty)
      wake = std::min<std::size_t>((n - 1) + (more ? 1 : 0), workers() - 1);
  }
  if (wake > 0) {
    // The woken worker may land on our core ahead of us (the other cores busy): a job in our
    // hands would wait for that core, milliseconds should the woken worker go on to spin. So all
    // we popped goes into the stash first, where the woken worker (or any other) steals the
    // oldest once the ring is empty, and we take ours back out after the wake-ups (none left:
    // others took them all).
    wc.stash->fill(batch.data(), static_cast<std::uint32_t>(n));
    for (std::size_t i = 0; i < wake; ++i)
      wake_for_ready(true);
    return wc.stash->take(idx);
  }
  idx = batch[0];
  if (n > 1) wc.stash->fill(batch.data() + 1, static_cast<std::uint32_t>(n - 1));
  return true;
}

/// steal(w, wc, idx): takes the oldest job of another worker's stash, trying each once.
bool Dispatcher::steal(std::uint32_t w, const WorkerContext& wc, std::uint32_t& idx) noexcept {
  const std::size_t n = workers();
  for (std::size_t k = 1; k < n; ++k) {
    WorkerStash& victim = stashes_[(w + k) % n];
    if (!victim.empty() && victim.take(idx)) {
      // Chain on, as next_job does (a permit holder's look marks no hunger: free_now).
      if (n > 2 && work_queued() && (permits_ == nullptr || permits_->free_now()))
        wake_for_ready(!wc.holds_duty);
      return true;
    }
  }
  return false;
}

}  // namespace rail::detail
