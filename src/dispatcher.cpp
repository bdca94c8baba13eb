#include "rail/detail/dispatcher.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <string>
#include <system_error>

#include "rail/detail/deadline.hpp"
#include "rail/error.hpp"

namespace rail::detail {
namespace {

std::int64_t steady_ns() noexcept {
  return std::chrono::steady_clock::now().time_since_epoch().count();
}

void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

/// prefetch_for_write(p): starts fetching p's line in exclusive state, so the CAS that follows
/// does not pay a second trip to upgrade a shared copy. __builtin_prefetch(p, 1) emits PREFETCHW
/// only when the target flags allow it (not for generic x86-64), so it is spelled out; CPUs
/// without the instruction execute it as a no-op (its opcode space was reserved as NOP).
void prefetch_for_write(const void* p) noexcept {
#if defined(__x86_64__)
  asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p, 1);
#endif
}

// acquire/release: a factory installed by a test is fully visible to the start() that loads it.
std::atomic<ThreadFactory> g_thread_factory{nullptr};

std::thread spawn(std::function<void()> body) {
  if (ThreadFactory f = g_thread_factory.load(std::memory_order_acquire)) return f(std::move(body));
  return std::thread(std::move(body));
}

}  // namespace

ThreadFactory set_thread_factory(ThreadFactory f) noexcept {
  return g_thread_factory.exchange(f, std::memory_order_acq_rel);
}

Dispatcher::Dispatcher(EngineCore& core, QueueStats& stats, std::size_t capacity,
                       const JobSlot* slots, const void* payload, std::size_t payload_stride)
    : core_(core),
      stats_(stats),
      slots_(slots),
      payload_(static_cast<const char*>(payload)),
      payload_stride_(payload_stride),
      ready_(capacity) {}

Dispatcher::~Dispatcher() {
  stop();
  join();
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
    stashes_ = std::make_unique<WorkerStash[]>(workers);
    const bool manual = core_.clock().is_manual();
    for (std::uint32_t w = 0; w < workers; ++w) {
      contexts_.push_back(std::make_unique<WorkerContext>(leases.record(w), SplitMix64(seed ^ w),
                                                          &stashes_[w], nullptr));
      contexts_.back()->manual_clock = manual;
    }
    threads_.reserve(workers);  // a created thread is never dropped by a failing push_back
    for (std::uint32_t w = 0; w < workers; ++w)
      threads_.push_back(spawn([this, &runner, w] {
        if (pass_gate()) worker_loop(runner, w, *contexts_[w]);
      }));
  } catch (const std::system_error& e) {
    const std::size_t started = threads_.size();
    abandon_start();
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
    abandon_start();
    throw;
  }
  stats_.add_workers(workers);
  for (std::uint32_t w = 0; w < workers; ++w)
    contexts_[w]->counters = &stats_.worker(w);
  // relaxed: a sizing hint for wake-ups; the workers see it through the gate.
  worker_count_.store(workers, std::memory_order_relaxed);
  // release: the workers' acquire in pass_gate() sees their contexts and counters complete.
  gate_.store(kGateOpen, std::memory_order_release);
  gate_.notify_all();
}

/// pass_gate(): a new worker waits until start() created every thread; false: start() failed
/// and the worker must exit without touching anything.
bool Dispatcher::pass_gate() noexcept {
  gate_.wait(kGateClosed, std::memory_order_acquire);
  return gate_.load(std::memory_order_acquire) == kGateOpen;
}

/// abandon_start(): start() failed halfway: the threads it created exit at the gate and are
/// joined, and what it built for them goes, so that start() may run again.
void Dispatcher::abandon_start() noexcept {
  gate_.store(kGateAbandoned, std::memory_order_release);
  gate_.notify_all();
  for (auto& t : threads_)
    t.join();
  threads_.clear();
  contexts_.clear();
  stashes_.reset();
  gate_.store(kGateClosed, std::memory_order_relaxed);  // no thread is left to read it
}

void Dispatcher::push_ready_bulk(const std::uint32_t* idx, std::size_t n) noexcept {
  stats_.add(kToReady, n);
  std::size_t done = 0;
  while (done < n) {
    const std::size_t k = ready_.try_push_bulk(idx + done, n - done);
    if (k == 0) std::this_thread::yield();  // transient, as in push_ready
    done += k;
  }
  const std::size_t wake = std::max<std::size_t>(1, std::min<std::size_t>(n, workers()));
  for (std::size_t i = 0; i < wake; ++i)
    ready_ec_.notify();
}

std::size_t Dispatcher::run_inline(JobRunner& runner, LeaseTracker& leases, std::uint64_t seed,
                                   std::size_t max) {
  if (!inline_context_)
    inline_context_.emplace(leases.record(0), SplitMix64(seed), nullptr, nullptr);
  std::size_t ran = 0;
  std::uint32_t idx;
  // Checked before every job: a handler may pause the queue or shut the engine down, and after
  // stop nothing new starts (take_leftovers may have handed ready jobs back).
  while (ran < max && !paused_.load(std::memory_order_acquire) &&
         !stop_.load(std::memory_order_acquire) && ready_.try_pop(idx)) {
    if (runner.deliver(idx, *inline_context_)) ++ran;
  }
  return ran;
}

void Dispatcher::stop() noexcept {
  // seq_cst: in one order with the job flow's activation and its re-check (SlotControl::activate).
  stop_.store(true, std::memory_order_seq_cst);
  ready_ec_.notify_all(INT32_MAX / 2);  // every later wait() returns at once
}

void Dispatcher::join() noexcept {
  for (auto& t : threads_)
    if (t.joinable() && t.get_id() != std::this_thread::get_id()) t.join();
}

void Dispatcher::resume() noexcept {
  paused_.store(false, std::memory_order_release);  // workers' acquire load sees it
  // One signal per worker: each may be between its paused check and its wait().
  ready_ec_.notify_all(static_cast<std::int32_t>(std::max<std::uint32_t>(workers(), 1)));
}

void Dispatcher::worker_loop(JobRunner& runner, std::uint32_t w, WorkerContext& wc) {
  std::uint32_t idx = 0;
  while (!stop_.load(std::memory_order_acquire)) {
    if (next_job(w, wc, idx)) {
      runner.deliver(idx, wc);
      continue;
    }
    wc.fast = false;  // after idling, the next handler's speed is unknown: one job at a time
    if (spin_for_job(w, wc, idx)) {
      runner.deliver(idx, wc);
      continue;
    }
    if (stop_.load(std::memory_order_acquire)) break;
    // Returns at once if a producer (or a worker filling its stash) signalled since; else sleeps
    // until one does. Either way the loop re-checks the ring and the stashes (event_count.hpp).
    ready_ec_.wait();
  }
}

/// spin_for_job(w, wc, idx): if no other worker is spinning, spin for a job until kSpinNs pass;
/// true with idx set when one came. A false return leaves the caller to wait(). At a steady rate
/// the spinner catches each job within a hand-off (~100 ns) instead of a futex wake-up (1-5 us,
/// and on a busy machine a wait for a core); one spinner, unlike every idle worker spinning,
/// leaves the other cores to the producers and the busy workers.
bool Dispatcher::spin_for_job(std::uint32_t w, WorkerContext& wc, std::uint32_t& idx) noexcept {
  std::uint32_t none = 0;
  // relaxed: only decides who spins; clearing the duty is ordered by the fence below.
  if (!spinning_.compare_exchange_strong(none, 1, std::memory_order_relaxed)) return false;
  const std::int64_t until = saturating_add(steady_ns(), Duration{kSpinNs});
  bool got = false;
  for (std::uint32_t round = 1; !got; ++round) {
    // `pause`, not sched_yield: on a busy machine a yield hands the core away for milliseconds.
    cpu_relax();
    got = next_job(w, wc, idx);
    // The clock only every 64 rounds: a read costs as much as a few dozen pauses.
    if (!got && round % 64 == 0 && (stop_.load(std::memory_order_acquire) || steady_ns() >= until))
      break;
  }
  // Dekker with wake_for_ready(), fence against fence: either the producer's fence comes first
  // and our re-check below sees its push, or ours does and the producer sees spinning_ == 0 and
  // notifies. Without the fence our store could pass the re-check's loads, and a push made while
  // we stop would wait for the next wake-up.
  spinning_.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (got) {
    // Work pushed or stashed while we held the duty went unannounced (ours, other workers',
    // timers fired by poll_timers): a sleeper must take it if our handler runs long.
    if (work_visible()) ready_ec_.notify();
    return true;
  }
  return next_job(w, wc, idx);  // false at once after stop
}

/// work_visible(): a ready job in the ring or in any worker's stash (a hint, for wake-ups).
bool Dispatcher::work_visible() const noexcept {
  if (ready_.size_approx() > 0) return true;
  for (std::uint32_t w = 0; w < workers(); ++w)
    if (!stashes_[w].empty()) return true;
  return false;
}

/// next_job(w, wc, idx): the next job for worker w — from its own stash, else a new batch from
/// the ready ring, else stolen from another worker's stash. False when there is none, or the
/// queue is paused (stashed jobs then wait with the rest: nothing new starts while paused).
bool Dispatcher::next_job(std::uint32_t w, WorkerContext& wc, std::uint32_t& idx) noexcept {
  // After stop nothing new starts: shutdown may already have reported a ready job as not started
  // and handed its payload back (take_leftovers).
  if (stop_.load(std::memory_order_acquire) || paused_.load(std::memory_order_acquire))
    return false;
  if (wc.stash->take(idx)) return true;
  // A batch boundary: fire any timer that came due (backoffs, delays, lease sweeps) if the timer
  // thread has not.
  core_.poll_timers(wc.last_start_ns);
  std::array<std::uint32_t, WorkerStash::kCapacity> batch;
  const std::size_t want = wc.fast ? batch.size() : 1;
  const std::size_t n = ready_.try_pop_bulk(batch.data(), want);
  if (n == 0) return steal(w, idx);
  // The slots were written on the producer's core: start every miss of the batch now, so they
  // overlap instead of stalling one delivery each.
  for (std::size_t i = 0; i < n; ++i) {
    prefetch_for_write(&slots_[batch[i]]);
    __builtin_prefetch(payload_ + batch[i] * payload_stride_, 0);
  }
  idx = batch[0];
  if (n > 1) wc.stash->fill(batch.data() + 1, static_cast<std::uint32_t>(n - 1));
  // Work we leave behind is announced, so that sleepers join in: one wake-up per stashed job
  // (each woken worker steals one) and one more if the ring still holds jobs; every worker that
  // finds work does the same, so the wake-ups chain as far as the work goes. Pushes made while a
  // spinner was on duty skipped theirs; this is where they are made up for.
  if (workers() > 1) {
    std::size_t wake = (n - 1) + (ready_.size_approx() > 0 ? 1 : 0);
    wake = std::min<std::size_t>(wake, workers() - 1);
    for (std::size_t i = 0; i < wake; ++i)
      wake_for_ready();
  }
  return true;
}

/// steal(w, idx): takes the oldest job of another worker's stash, trying each once.
bool Dispatcher::steal(std::uint32_t w, std::uint32_t& idx) noexcept {
  const std::size_t n = workers();
  for (std::size_t k = 1; k < n; ++k) {
    WorkerStash& victim = stashes_[(w + k) % n];
    if (!victim.empty() && victim.take(idx)) {
      if (n > 2 && work_visible()) wake_for_ready();  // chain on, as next_job does
      return true;
    }
  }
  return false;
}

}  // namespace rail::detail
