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
  while (!stop_.load(std::memory_order_acquire)) {
    if (round(w, first)) continue;
    if (spin()) continue;
    if (stop_.load(std::memory_order_acquire)) break;
    // Returns at once if a producer signalled since; else sleeps until one does (event_count).
    wake_.ec.wait();
  }
}

/// round(w, first): one turn at every member, starting at `first` (advanced for the next
/// round); true if any job ran.
bool WorkerPool::round(std::uint32_t w, std::uint32_t& first) noexcept {
  // acquire: see the header (members published by add).
  const std::uint32_t n = count_.load(std::memory_order_acquire);
  if (n == 0) return false;
  if (first >= n) first %= n;
  bool ran = false;
  for (std::uint32_t k = 0, i = first; k < n; ++k, i = (i + 1 == n ? 0 : i + 1))
    ran |= members_[i]->serve_turn(w) > 0;
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

/// spin(): if no other worker is spinning, watch every member until a turn may run a job or
/// kSpinNs pass. True: go round (the duty is given up first, and a sleeper woken for each other
/// member with work); false: sleep.
bool WorkerPool::spin() noexcept {
  std::uint32_t none = WakeTarget::kIdle;
  // relaxed: only decides who spins; giving the duty up is ordered by the fence below.
  if (!wake_.duty.compare_exchange_strong(none, WakeTarget::kHeld, std::memory_order_relaxed))
    return false;
  const std::int64_t until = saturating_add(steady_ns(), Duration{Dispatcher::kSpinNs});
  bool seen = false;
  for (std::uint32_t k = 1; !seen; ++k) {
    cpu_relax();
    seen = turns_possible(1) > 0;
    // The clock only every 16 rounds: a round already reads every member.
    if (!seen && k % 16 == 0 && (stop_.load(std::memory_order_acquire) || steady_ns() >= until))
      break;
  }
  // Dekker with wake_for_ready, fence against fence (as in Dispatcher::spin_for_job): either a
  // producer's fence comes first and the count below sees its push, or ours does and the
  // producer sees the duty free and notifies.
  wake_.duty.store(WakeTarget::kIdle, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // Pushes made while we held the duty skipped their wake-ups, to any member. Our round serves one
  // member first and may stay in its handler; every other member with work gets a sleeper (within
  // a member, next_job chains the wake-ups on, as in a dedicated pool). One member: no wake-up,
  // so the steady trickle the spinner exists for costs no system call.
  const std::uint32_t members = turns_possible(size_);
  for (std::uint32_t i = 1; i < members; ++i)
    wake_.ec.notify();
  return seen || members > 0;
}

}  // namespace rail::detail
