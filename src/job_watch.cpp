// JobWatch: waiting on a job's end for JobHandle<R>, whatever R; the contract is in
// include/rail/job_handle.hpp.
#include <algorithm>
#include <chrono>
#include <string>

#include "rail/detail/queue_impl.hpp"
#include "rail/error.hpp"
#include "rail/job_handle.hpp"

namespace rail::detail {

namespace {
// The waiting reaches the job flow of the handle's queue.
JobFlow& flow_of(QueueFront* queue) noexcept {
  return QueueImpl::of(*queue);
}
}  // namespace

JobWatch::JobWatch(QueueFront* queue, std::shared_ptr<EndWaiter> waiter, JobId id,
                   bool sure) noexcept
    : queue_(queue), waiter_(std::move(waiter)), id_(id), sure_(sure) {}

JobWatch::JobWatch(const JobWatch&) noexcept = default;
JobWatch::JobWatch(JobWatch&&) noexcept = default;
JobWatch& JobWatch::operator=(const JobWatch&) noexcept = default;
JobWatch& JobWatch::operator=(JobWatch&&) noexcept = default;
JobWatch::~JobWatch() = default;

std::optional<JobEnd<void>> JobWatch::ended() const {
  if (auto e = waiter_->ended()) return e;
  if (!sure_ && !waiter_->sure()) {
    // Tracked by id after the job may have ended: its history (or retained end) tells, and the
    // waiter is settled with it (unregistered, so ends stop being recorded for it). Not for a
    // waiter an add_tracked registered too: its end, result included, is on its way. Refused:
    // the engine is going, and its destructor resolves the waiter. The waiter is resolved after
    // the visit: its on_end callbacks are user code.
    std::optional<EndRecord> found;
    std::shared_ptr<EndWaiter> taken;
    if (const auto visit = waiter_->visit()) {
      JobFlow& flow = flow_of(queue_);
      found = flow.end_of(id_);
      if (found) taken = flow.end_tracker().take(id_);
    }
    // Not taken: whoever took it (the job's end, on its way) resolves it.
    if (taken) (void)taken->resolve(*found);
    if (auto r = waiter_->ended()) return r;
  }
  return std::nullopt;
}

JobEnd<void> JobWatch::wait() const {
  check_can_wait(true);
  if (auto e = wait_until(std::chrono::steady_clock::time_point::max())) return *e;
  const auto visit = waiter_->visit();
  if (!visit) {  // the engine is going: its destructor resolves the waiter
    (void)waiter_->wait_until(std::chrono::steady_clock::time_point::max());
    return *waiter_->ended();
  }
  throw Error(ErrorCode::would_deadlock,
              "wait() on job " + std::to_string(id_) + " of queue '" + flow_of(queue_).name() +
                  "': the inline engine ran everything it could and the job has not ended; it "
                  "waits for the clock (a delay or a backoff): advance it, or use wait_for()");
}

std::optional<JobEnd<void>> JobWatch::wait_for(Duration timeout) const {
  check_can_wait(false);
  return wait_until(steady_deadline(timeout));
}

void JobWatch::on_end(std::function<void(const JobEnd<void>&)> cb) const {
  if (!sure_) (void)ended();  // a job that ended before it was tracked by id
  waiter_->on_end(std::move(cb));
}

void JobWatch::check_can_wait(bool unbounded) const {
  const auto visit = waiter_->visit();
  if (!visit) return;  // the engine is going or gone: the waiter is resolved, nothing blocks
  JobFlow& flow = flow_of(queue_);
  const char* what = unbounded ? "wait()" : "wait_for()";
  if (flow.core().in_timer_context())
    throw Error(ErrorCode::would_deadlock,
                std::string(what) + " on job " + std::to_string(id_) +
                    " from a callback of the timer (an observer of retry_due/stalled, a DLQ "
                    "alert): the job may need that thread; wait outside timer callbacks");
  const bool in_handler = current_delivery() != nullptr;
  const bool inlined_engine = flow.core().mode() == Mode::inlined;
  if (inlined_engine ? in_handler : unbounded && current_delivery() == &flow)
    throw Error(
        ErrorCode::would_deadlock,
        std::string(what) + " on job " + std::to_string(id_) + " of queue '" + flow.name() +
            "' from a handler: " +
            (inlined_engine ? "an inline engine runs jobs only in run_until_idle, which does not "
                              "nest; wait outside handlers"
                            : "its workers may all be waiting for jobs only they could run; use "
                              "wait_for(timeout), or wait outside the queue's handlers"));
}

std::optional<JobEnd<void>> JobWatch::wait_until(
    std::chrono::steady_clock::time_point deadline) const {
  if (inlined()) {
    for (;;) {
      if (auto e = ended()) return e;
      const auto visit = waiter_->visit();
      if (!visit || run_inline(flow_of(queue_).core()) == 0) return ended();
    }
  }
  // Settled: the end is recorded and its callbacks ran (the header's promise; else a wait
  // returns while another thread still runs an on_end callback:
  // ResultsThreaded.WaitForReturnsOnlyAfterTheJobsCallbacksRan pins it).
  if (!sure_) (void)ended();
  if (waiter_->wait_until(std::chrono::steady_clock::time_point::min())) return ended();
  // About to block with no end in sight (wait(), or a timeout that saturated to never): on the
  // shared pool, counted against its free workers (PoolWait).
  std::optional<PoolWait> counted;
  if (deadline == std::chrono::steady_clock::time_point::max()) {
    // A pool worker's count outlives the visit: the engine joins its workers before it goes.
    if (const auto visit = waiter_->visit())
      counted.emplace(flow_of(queue_).pool_wait("wait() on job " + std::to_string(id_), false));
  }
  // Tracked at add (sure_): the end will be recorded; sleep until it is. By id: the end may
  // have been recorded before the waiter was (see end_tracker.hpp): re-check now and then.
  auto poll = std::chrono::milliseconds(1);
  for (;;) {
    if (!sure_) (void)ended();  // by id: the history may know it ended
    if (waiter_->wait_until(std::chrono::steady_clock::time_point::min())) return ended();
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return std::nullopt;
    const auto wake = sure_ || deadline - now < poll ? deadline : now + poll;
    if (waiter_->wait_until(wake)) return ended();
    poll = std::min(poll * 2, std::chrono::milliseconds(50));
  }
}

bool JobWatch::inlined() const {
  const auto visit = waiter_->visit();
  return visit && flow_of(queue_).core().mode() == Mode::inlined;
}

}  // namespace rail::detail
