// WorkerPool (worker_pool.hpp): the engine's shared pool, its threads and the queues that join it.
#include "rail/detail/worker_pool.hpp"

#include <string>
#include <system_error>

#include "rail/detail/assert.hpp"
#include "rail/detail/cpu_relax.hpp"
#include "rail/detail/deadline.hpp"
#include "rail/detail/free_slots.hpp"
#include "rail/error.hpp"

namespace rail::detail {

void WorkerPool::start() {
  // acquire: as the workers' loads. A pool stopped before it started (the engine was shutting
  // down) has nothing to run: no thread, and join() returns at once.
  if (stop_.load(std::memory_order_acquire)) return;
  try {
    threads_.spawn(size_, [this](std::uint32_t w) { worker_loop(w); });
  } catch (const std::system_error& e) {
    const std::size_t started = threads_.size();
    throw Error(ErrorCode::resources,
                "the engine's shared worker pool could not start thread " +
                    std::to_string(started + 1) + " of " + std::to_string(size_) + " (" + e.what() +
                    "); the " + std::to_string(started) +
                    " it had started exited before running a job. Expected the system to allow " +
                    std::to_string(size_) +
                    " more threads (ulimit -u, the cgroup's pids.max, memory for their stacks); "
                    "build the engine with a lower EngineOptions.workers, or call process() "
                    "again once threads are free");
  }
  threads_.open();
}

void WorkerPool::add(Dispatcher& d) {
  {
    const std::lock_guard lock(add_mu_);
    const std::uint32_t n = count_.load(std::memory_order_relaxed);
    RAIL_INVARIANT(n < kMaxMembers, "a pool has at most one member per queue of its engine");
    members_[n] = &d;
    // release: a worker that loads the new count sees the member and its join_pool writes.
    count_.store(n + 1, std::memory_order_release);
  }
  // Jobs added before the queue joined (or while it joined: see Dispatcher::join_pool) were
  // announced to nobody. seq_cst fence: also a push whose producer skipped its wake-up for a
  // spinner that then gave up its duty without seeing us as a member: that spinner's load of
  // count_ missed our store, so its fence precedes ours, and the producer's precedes its (it saw
  // the duty taken): the check below sees the push.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (d.work_visible())
    for (std::uint32_t i = 0; i < size_; ++i)
      wake_.ec.notify();
}

void WorkerPool::stop() noexcept {
  stop_.store(true, std::memory_order_release);  // the workers' acquire loads see it
  wake_.ec.notify_all(INT32_MAX / 2);            // every later wait() returns at once
}

void WorkerPool::worker_loop(std::uint32_t w) {
  EngineCore::prepare_worker_thread();
  served_target() = &wake_;                // Dispatcher::pool_of_caller
  freeing_worker() = static_cast<int>(w);  // slots this thread frees go through its batches
  std::uint32_t first = w;                 // workers start their rounds at different members
  PoolDuty duty;
  while (!stop_.load(std::memory_order_acquire)) {
    if (round(w, first, duty)) continue;
    if (spin(duty)) continue;
    if (stop_.load(std::memory_order_acquire)) break;
    sleep();
  }
}

/// round(w, first, duty): one turn at every member, starting at `first` (advanced for the next
/// round); true if any job ran.
bool WorkerPool::round(std::uint32_t w, std::uint32_t& first, PoolDuty& duty) noexcept {
  // acquire: see the header (members published by add).
  const std::uint32_t n = count_.load(std::memory_order_acquire);
  if (n == 0) return false;
  if (first >= n) first %= n;
  bool ran = false;
  for (std::uint32_t k = 0, i = first; k < n; ++k, i = (i + 1 == n ? 0 : i + 1)) {
    ran |= members_[i]->serve_turn(w, duty) > 0;
    if (duty.ran_long) give_up_duty(duty, 0);  // mid-round: it may have passed their queues
  }
  first = first + 1 == n ? 0 : first + 1;
  return ran;
}

std::uint32_t WorkerPool::turns_possible(std::uint32_t most) const noexcept {
  const std::uint32_t n = count_.load(std::memory_order_acquire);  // as in round()
  std::uint32_t found = 0;
  for (std::uint32_t i = 0; i < n && found < most; ++i)
    found += members_[i]->turn_possible() ? 1 : 0;
  return found;
}

std::uint64_t WorkerPool::jobs_started() const noexcept {
  const std::uint32_t n = count_.load(std::memory_order_acquire);  // as in round()
  std::uint64_t started = 0;
  for (std::uint32_t i = 0; i < n; ++i)
    started += members_[i]->jobs_started();
  return started;
}

/// spin(duty): if no other worker holds the duty (or this one kept it), watch every member until
/// a turn may run a job or kSpinNs pass. True: go round; false: sleep.
/// A worker whose last handler was fast (duty.keep_before) keeps the duty through the round, as
/// in a dedicated pool (Dispatcher::spin_for_job: why, and what bounds the wait of a job queued
/// behind a handler that turns slow): producers of every member go on skipping their wake-ups.
/// Otherwise it gives the duty up before it goes round, and a sleeper is woken for each other
/// member with work (its round may stay in the first one's handler); within a member next_job
/// chains the wake-ups on, as in a dedicated pool. One member: no wake-up, so the steady trickle
/// the spinner exists for costs no system call.
bool WorkerPool::spin(PoolDuty& duty) noexcept {
  if (!duty.held) {
    if (!wake_.take_duty()) return false;
    duty.held = true;
  }
  const std::int64_t start = steady_ns();
  const std::int64_t until = saturating_add(start, Duration{Dispatcher::kSpinNs});
  const bool fast = start < duty.keep_before;
  bool seen = false;
  for (std::uint32_t k = 1; !seen; ++k) {
    cpu_relax();
    seen = turns_possible(1) > 0;
    // The clock only every 16 rounds: a round already reads every member.
    if (!seen && k % 16 == 0 && (stop_.load(std::memory_order_acquire) || steady_ns() >= until))
      break;
  }
  if (seen && fast && size_ > 1) {
    wake_.keep_duty();  // through the round
    return true;
  }
  return give_up_duty(duty, 1) > 0 || seen;
}

/// give_up_duty(duty, serves): the worker stops holding the duty; returns how many members have
/// work. Pushes made while it held the duty skipped their wake-ups, to any member: every member
/// with work gets a sleeper, but the `serves` (0 or 1) the caller is about to serve itself.
std::uint32_t WorkerPool::give_up_duty(PoolDuty& duty, std::uint32_t serves) noexcept {
  duty.held = false;
  duty.ran_long = false;
  wake_.give_up_duty();  // the count below is the look it asks for
  const std::uint32_t members = turns_possible(size_);
  for (std::uint32_t i = serves; i < members; ++i)
    wake_.ec.notify();
  return members;
}

/// sleep(): as a dedicated pool's worker sleeps (WakeTarget::sleep), over every member: its watch
/// goes round if no job started anywhere since its last look and a turn may run one.
void WorkerPool::sleep() noexcept {
  wake_.sleep(
      size_, [this] { return jobs_started(); }, [this] { return turns_possible(1) > 0; });
}

}  // namespace rail::detail
