// JobFlow's waits: counts and idle (wait_idle, pause_and_wait), and the check that keeps a wait on
// a worker of the shared pool from leaving the pool no worker for the jobs it waits for. Cold path:
// wait_idle polls with a growing sleep.
#include <algorithm>
#include <chrono>
#include <optional>
#include <string>

#include "rail/detail/deadline.hpp"
#include "rail/detail/job_flow.hpp"
#include "rail/detail/poll_until.hpp"
#include "rail/detail/worker_pool.hpp"
#include "rail/error.hpp"

namespace rail::detail {

QueueCounts JobFlow::counts() const noexcept {
  QueueCounts c = parts_.stats.counts(dispatch_.paused());
  c.groups = lines_.groups().groups();
  c.tenants = lines_.tenants().groups();
  // Parked on the wheel, they are in `delayed` too; counted apart (a gauge may lag a moment).
  c.waiting_children = std::min(c.delayed, parts_.parents_waiting.load(std::memory_order_relaxed));
  c.delayed -= c.waiting_children;
  return c;
}

bool JobFlow::idle() const noexcept {
  const QueueCounts c = counts();
  return c.waiting == 0 && c.delayed == 0 && c.waiting_children == 0 && c.active == 0;
}

PoolWait JobFlow::pool_wait(const std::string& what, bool bounded) const {
  PoolWait wait(dispatch_.pool_of_caller());
  if (!wait.enter(bounded)) {
    const std::uint32_t others = wait.workers() - 1;
    throw Error(ErrorCode::would_deadlock,
                what + " on queue '" + parts_.name +
                    "' from a worker of the engine's shared pool: " +
                    (others == 0 ? std::string("the pool's only worker is the caller")
                                 : "the pool's other " + std::to_string(others) +
                                       " worker(s) already wait without a timeout for its jobs") +
                    ", so this wait would leave no worker free to run the queue's jobs; " +
                    (others == 0 ? "wait from outside the pool"
                                 : "wait with a timeout, from outside the pool") +
                    ", or give the pool more workers (EngineOptions.workers)");
  }
  return wait;
}

bool JobFlow::wait_idle(Duration timeout) {
  if (parts_.core.mode() != Mode::threaded)
    throw Error(ErrorCode::wrong_mode, "wait_idle() on queue '" + parts_.name +
                                           "' waits for worker threads; an inline engine has "
                                           "none (use Engine::run_until_idle)");
  if (current_delivery() == this || current_add() == this || parts_.core.in_timer_context())
    throw Error(ErrorCode::would_deadlock,
                "wait_idle() on queue '" + parts_.name +
                    "' was called from one of its own handlers, from an observer of its own "
                    "added or redriven event (the job is published when the observer returns) or "
                    "from a callback of the timer (an observer of retry_due/stalled, a DLQ "
                    "alert), which would wait for itself; wait from outside handlers and "
                    "callbacks");
  // Cold path: poll with a growing sleep. An idle queue stays idle only if nobody adds.
  const auto deadline = steady_deadline(timeout);  // Duration::max(): no timeout
  std::optional<PoolWait> checked;                 // taken when first about to block
  bool stranded = false;  // shutdown stopped the workers with jobs left that none will start
  for (;;) {
    const bool idled = poll_until(deadline, [&] {
      if (idle()) return true;
      // acquire: pairs with stop()'s store. Once the workers are stopped and no handler runs,
      // what is left (waiting, delayed) never starts: the queue never gets idle.
      if (dispatch_.stopping(std::memory_order_acquire) && counts().active == 0)
        return stranded = true;
      // About to block: a wait that would leave the shared pool no worker for the queue's jobs
      // is refused (a queue that is idle already returns from anywhere).
      if (!checked)
        checked.emplace(
            pool_wait("wait_idle()", deadline != std::chrono::steady_clock::time_point::max()));
      return false;
    });
    if (!idled || stranded) return false;
    // The counts show a job ended by a lapse before the timer thread has told the observers;
    // and what they were told may have added jobs (an observer, a schedule's run): look again.
    if (!parts_.core.await_deliveries(deadline)) return false;
    if (idle()) return true;
  }
}

}  // namespace rail::detail
