// WakeTarget: the idle/wake protocol of a set of workers — where idle workers sleep, where
// producers' wake-ups go, and the duty of the one worker that spins for work instead of sleeping:
// a dispatcher's own, or the shared pool's for every queue on it (worker_pool.hpp).
//
// Guarantee: no wake-up is lost. A push either finds the duty held (its holder will look at the
// ring again before it sleeps, and announce what that look saw but could not take) or notifies a
// sleeper; a job whose wake-up was skipped for a holder whose handler then ran long waits about
// 2 x kWatchNs at most (sleepers watch).
// Algorithm: one idle worker at a time holds the duty and polls for up to Dispatcher::kSpinNs
// before sleeping on the event count; the others sleep at once. Producers skip the wake-up while
// the duty is held (a fence-against-fence Dekker hand-off: Dispatcher::wake_for_ready and
// give_up_duty). A holder whose handlers are fast keeps the duty through the jobs it then finds,
// until one runs long (Dispatcher::spin_for_job, WorkerPool::spin); a worker that sleeps while
// another holds the duty wakes every kWatchNs and looks for work if no job started meanwhile
// (sleep).
// Memory ordering: each operation says which side of which Dekker it is; the duty's CAS, the
// sleepers' count and their loads of each other are seq_cst, giving the duty up is a relaxed
// store followed by a seq_cst fence.
// Also here: PoolDuty and PoolWait, a shared-pool worker's hold on the duty and the rule for
// waits that block on the pool's own jobs.
#pragma once

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <utility>

#include "rail/detail/event_count.hpp"

namespace rail::detail {

/// WakeTarget: where idle workers wait and producers' wake-ups go: the event count they sleep on
/// and the duty of the one worker that looks for work instead (spin_for_job, WorkerPool::spin).
/// A dispatcher's own, or the shared pool's for every queue on it. While the duty is held a
/// producer skips its wake-up: the holder spins on the ready ring, or runs a job it took while
/// spinning and looks again when that returns (a dedicated worker whose handlers are fast keeps
/// the duty through them: Dispatcher::spin_for_job).
struct WakeTarget {
  static constexpr std::uint32_t kIdle = 0, kHeld = 1;
  // Its own line: producers read it on every push; it is written when a worker takes or gives
  // up the duty, and by sleepers counting themselves into `untimed` (once per sleep).
  alignas(64) std::atomic<std::uint32_t> duty{kIdle};
  std::atomic<std::uint32_t> untimed{0};  // a dispatcher's workers asleep without a timeout
  EventCount ec;
  // A shared pool's: its worker threads, and how many of them wait without a timeout for jobs
  // only the pool runs (PoolWait). Cold: touched by such waits only.
  std::uint32_t workers = 0;
  std::atomic<std::uint32_t> waiting{0};

  /// take_duty(): true if the caller now holds the duty (nobody did).
  bool take_duty() noexcept {
    std::uint32_t none = kIdle;
    // seq_cst: the Dekker with sleep() (whose load of the duty this CAS orders against the
    // holder's later load of `untimed` in keep_duty); giving the duty up is ordered by its fence.
    return duty.compare_exchange_strong(none, kHeld, std::memory_order_seq_cst,
                                        std::memory_order_relaxed);
  }
  /// keep_duty(): the holder keeps the duty through a job it found. Sleepers counted before it
  /// took the duty sleep without a timeout: wake them, leaving a signal for each of them that is
  /// yet to sleep, so that each sleeps watching (sleep()).
  void keep_duty() noexcept {
    const std::uint32_t n = untimed.load(std::memory_order_seq_cst);  // seq_cst: see sleep()
    if (n != 0) ec.notify_all(static_cast<std::int32_t>(std::min<std::uint32_t>(n, INT32_MAX)));
  }
  /// give_up_duty(): the holder stops holding the duty. The caller then looks for work that
  /// pushes made meanwhile left unannounced, and announces it.
  void give_up_duty() noexcept {
    // Dekker with wake_for_ready, fence against fence: either the producer's fence comes first
    // and the caller's look after ours sees its push, or ours does and the producer sees the
    // duty idle and notifies. Without the fence our store could pass the caller's loads.
    duty.store(kIdle, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }

  /// How long a worker sleeps, while another holds the duty, before it checks for progress: a
  /// job whose wake-up was skipped waits behind the holder's handler, when that handler runs long
  /// after fast ones, for about two of these at most (Dispatcher::spin_for_job, sleep).
  static constexpr std::int64_t kWatchNs = 1'000'000;

  /// sleep(sleepers, started, work): a worker that found no work and could not take the duty
  /// waits for a wake-up (one of `sleepers` workers that wait here). While another worker holds
  /// the duty, producers skip their wake-ups, and a holder whose handlers were fast keeps the duty
  /// through the next one: if that one runs long, the jobs pushed meanwhile wait for it. So while
  /// the duty is held a sleeper wakes every kWatchNs (a "watch") and returns to look for work
  /// itself if no job started since its last look (started(): a count of handler starts) and
  /// work() says some waits. While jobs keep starting it sleeps on: taking work the holder is
  /// about to take would only put a third thread on two busy cores (a watch that looks every
  /// time halves 1P+2W). With the duty idle it sleeps until woken, counted in `untimed`: a holder
  /// that keeps the duty wakes such sleepers, so that they watch. A lone worker has nobody to
  /// watch for: it sleeps until woken. Stop's notify_all ends every wait.
  template <class Started, class Work>
  void sleep(std::uint32_t sleepers, Started started, Work work) noexcept {
    if (sleepers == 1) {
      ec.wait();  // returns at once if a producer signalled since (event_count.hpp)
      return;
    }
    // Dekker with the duty holder (Dispatcher::spin_for_job, WorkerPool::spin), all four
    // seq_cst: our count, then our load of the duty; its CAS taking the duty, then its load of
    // the count when it keeps the duty through a job. Either our load sees the duty held (we
    // watch) or its load sees our count (it wakes us).
    untimed.fetch_add(1, std::memory_order_seq_cst);
    if (duty.load(std::memory_order_seq_cst) == kIdle) {
      ec.wait();
      untimed.fetch_sub(1, std::memory_order_relaxed);  // relaxed: the Dekker is above
      return;
    }
    untimed.fetch_sub(1, std::memory_order_relaxed);
    std::uint64_t seen = started();
    while (!ec.wait_for(kWatchNs)) {
      const std::uint64_t now = started();
      if (now == seen && work()) return;  // stuck behind a long handler: look
      // relaxed: a hint; once the duty is idle producers wake sleepers again, and the caller
      // sleeps as such.
      if (duty.load(std::memory_order_relaxed) == kIdle) return;
      seen = now;
    }
  }
};

/// PoolDuty: a shared-pool worker's hold on its pool's duty (WorkerPool::spin), which it keeps
/// through fast handlers, in any queue, as a dedicated pool's worker does (spin_for_job). A turn
/// (serve_turn) that runs a handler which ran long while `held` ends after it with `ran_long`
/// set: the pool gives the duty up before anything else runs.
struct PoolDuty {
  bool held = false;
  bool ran_long = false;
  /// keep_before: steady clock; a spin that starts before it follows a fast handler and may
  /// keep the duty through the job it finds (set by each turn that ran a handler).
  std::int64_t keep_before = INT64_MIN;
};

/// PoolWait: a shared-pool worker that waits for jobs only its pool runs (wait_idle(), a job
/// handle's wait(), from a handler or an observer on the pool) holds one of the pool's workers
/// until the wait ends. The one rule that decides whether such a wait may block:
/// - without a timeout, the waits are counted per pool, and the one that would leave no worker
///   free to run the awaited jobs is refused (as every worker of a fixed pool waiting on the
///   pool would block forever);
/// - with a timeout, a wait frees its worker by itself and is not counted, except from the
///   pool's only worker, where the awaited jobs could not run before the timeout: refused too.
/// A refused wait counts nothing; the caller throws Error(would_deadlock). Movable, so that it
/// is returned by value: the count is given back once, by the last owner.
/// relaxed: the count orders nothing; each fetch_add's result alone decides, so of two waits
/// racing for the last free worker exactly one fails.
class PoolWait {
 public:
  /// PoolWait(pool): `pool` is the waited-for queue's pool when the caller is one of its
  /// workers (Dispatcher::pool_of_caller), else null: nothing is counted or refused.
  explicit PoolWait(WakeTarget* pool) noexcept : pool_(pool) {}
  ~PoolWait() { leave(); }
  PoolWait(PoolWait&& o) noexcept : pool_(o.pool_), counted_(std::exchange(o.counted_, false)) {}
  PoolWait& operator=(PoolWait&& o) noexcept {
    if (this != &o) {
      leave();
      pool_ = o.pool_;
      counted_ = std::exchange(o.counted_, false);
    }
    return *this;
  }

  /// enter(bounded): whether the wait may block (see the class); counts an unbounded one.
  [[nodiscard]] bool enter(bool bounded) noexcept {
    if (pool_ == nullptr) return true;
    if (bounded) return pool_->workers > 1;
    if (pool_->waiting.fetch_add(1, std::memory_order_relaxed) + 1 >= pool_->workers) {
      pool_->waiting.fetch_sub(1, std::memory_order_relaxed);
      return false;
    }
    counted_ = true;
    return true;
  }
  /// workers(): the pool's size, for the error message.
  [[nodiscard]] std::uint32_t workers() const noexcept { return pool_ ? pool_->workers : 0; }

 private:
  void leave() noexcept {
    if (std::exchange(counted_, false)) pool_->waiting.fetch_sub(1, std::memory_order_relaxed);
  }

  WakeTarget* pool_;
  bool counted_ = false;
};

/// served_target(): the wake target of the shared pool whose worker this thread is (null on
/// any other thread); set once by each pool worker.
inline WakeTarget*& served_target() noexcept {
  thread_local WakeTarget* target = nullptr;
  return target;
}

}  // namespace rail::detail
