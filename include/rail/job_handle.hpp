// JobHandle<R>: a job's end to wait on (Queue::add_tracked, Queue::track): BullMQ's
// waitUntilFinished, Celery's AsyncResult.get. Cheap to copy (shared); every handle of one job
// sees the same end. A handle may outlive its Engine: the engine's destructor resolves every job
// it drops with status unknown and an error that says so, and a handle whose engine is gone
// reports its end (or that one) without touching the engine (EndWaiter::Visit guards each call
// into the queue; a wait blocked in another thread returns when the destructor gets there).
//
// Waiting:
// - threaded engine: wait() blocks until the job ends; wait_for(t) at most t (real time).
//   Either throws Error(would_deadlock) from a timer callback (the job's retry may need that
//   thread), and wait() also from a handler of the job's own queue, whose workers may all be
//   waiting for jobs only they could run (wait_for is allowed there: it ties up that worker
//   for at most t). On the engine's shared pool, a worker's wait() that would leave the pool no
//   free worker (the others all in such waits) throws Error(would_deadlock) too.
// - inline engine: waiting drives run_until_idle() on the calling thread until the job ends; if
//   the job cannot end without the clock moving (a delay or a backoff on a ManualClock), wait()
//   throws Error(would_deadlock) naming the job and wait_for() returns nullopt. Not from inside
//   a handler (Error(would_deadlock)): run_until_idle does not nest.
// - on_end(cb): cb runs once on the thread where the job ended (at once on the caller's if it
//   has), like an observer: fast, and it must not throw. wait() and wait_for() return after
//   the job's callbacks ran.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <utility>

#include "rail/add_receipt.hpp"
#include "rail/detail/job_flow.hpp"
#include "rail/job_end.hpp"

namespace rail {

template <class T, class R>
class Queue;

template <class R = void>
class JobHandle {
 public:
  /// id() is the job's id; added() is what the add returned (a duplicate's id is the kept
  /// job's, whose end this handle reports; Queue::track(id) has status added).
  [[nodiscard]] JobId id() const noexcept { return id_; }
  [[nodiscard]] const AddReceipt& added() const noexcept { return added_; }

  /// ended(): the job's end if it has ended, without waiting.
  [[nodiscard]] std::optional<JobEnd<R>> ended() const {
    if (auto e = waiter_->ended()) return typed(*e);
    if (!sure_ && !waiter_->sure()) {
      // Tracked by id after the job may have ended: its history (or retained end) tells, and
      // the waiter is settled with it (unregistered, so ends stop being recorded for it). Not
      // for a waiter an add_tracked registered too: its end, result included, is on its way.
      // Refused: the engine is going, and its destructor resolves the waiter. The waiter is
      // resolved after the visit: its on_end callbacks are user code.
      std::optional<detail::EndRecord> found;
      std::shared_ptr<detail::EndWaiter> taken;
      if (const auto visit = waiter_->visit()) {
        found = flow_->end_of(id_);
        if (found) taken = flow_->end_tracker().take(id_);
      }
      // Not taken: whoever took it (the job's end, on its way) resolves it.
      if (taken) (void)taken->resolve(*found);
      if (auto r = waiter_->ended()) return typed(*r);
    }
    return std::nullopt;
  }

  /// wait(): blocks until the job ends and returns its end (see the header for where it throws).
  JobEnd<R> wait() const {
    check_can_wait(true);
    if (auto e = wait_until(std::chrono::steady_clock::time_point::max())) return *e;
    const auto visit = waiter_->visit();
    if (!visit) {  // the engine is going: its destructor resolves the waiter
      (void)waiter_->wait_until(std::chrono::steady_clock::time_point::max());
      return typed(*waiter_->ended());
    }
    throw Error(ErrorCode::would_deadlock,
                "wait() on job " + std::to_string(id_) + " of queue '" + flow_->name() +
                    "': the inline engine ran everything it could and the job has not ended; it "
                    "waits for the clock (a delay or a backoff): advance it, or use wait_for()");
  }
  /// wait_for(timeout): the job's end, or nullopt if `timeout` (real time; inline: the jobs that
  /// can run now) passed first.
  std::optional<JobEnd<R>> wait_for(Duration timeout) const {
    check_can_wait(false);
    return wait_until(detail::steady_deadline(timeout));
  }

  /// on_end(cb): cb(end) once the job ends (see the header).
  void on_end(std::function<void(const JobEnd<R>&)> cb) const {
    if (!sure_) (void)ended();  // a job that ended before it was tracked by id
    waiter_->on_end([cb = std::move(cb)](const detail::EndRecord& e) { cb(typed(e)); });
  }

 private:
  template <class, class>
  friend class Queue;
  JobHandle(detail::JobFlow* flow, std::shared_ptr<detail::EndWaiter> waiter, JobId id,
            AddReceipt added, bool sure)
      : flow_(flow), waiter_(std::move(waiter)), id_(id), added_(added), sure_(sure) {}

  static JobEnd<R> typed(const detail::EndRecord& e) {
    JobEnd<R> out;
    out.id = e.id;
    out.status = e.status;
    if constexpr (!std::is_void_v<R>) out.result = std::static_pointer_cast<const R>(e.result);
    out.reason = e.reason;
    out.error = e.error;
    out.errors = e.errors;
    out.attempt = e.attempt;
    out.ended_at = e.ended_at;
    return out;
  }

  void check_can_wait(bool unbounded) const {
    const auto visit = waiter_->visit();
    if (!visit) return;  // the engine is going or gone: the waiter is resolved, nothing blocks
    const char* what = unbounded ? "wait()" : "wait_for()";
    if (flow_->core().in_timer_context())
      throw Error(ErrorCode::would_deadlock,
                  std::string(what) + " on job " + std::to_string(id_) +
                      " from a callback of the timer (an observer of retry_due/stalled, a DLQ "
                      "alert): the job may need that thread; wait outside timer callbacks");
    const bool in_handler = detail::current_delivery() != nullptr;
    if (flow_->core().mode() == Mode::inlined ? in_handler
                                              : unbounded && detail::current_delivery() == flow_)
      throw Error(ErrorCode::would_deadlock,
                  std::string(what) + " on job " + std::to_string(id_) + " of queue '" +
                      flow_->name() + "' from a handler: " +
                      (flow_->core().mode() == Mode::inlined
                           ? "an inline engine runs jobs only in run_until_idle, which does not "
                             "nest; wait outside handlers"
                           : "its workers may all be waiting for jobs only they could run; use "
                             "wait_for(timeout), or wait outside the queue's handlers"));
  }

  std::optional<JobEnd<R>> wait_until(std::chrono::steady_clock::time_point deadline) const {
    if (inlined()) {
      for (;;) {
        if (auto e = ended()) return e;
        const auto visit = waiter_->visit();
        if (!visit || detail::run_inline(flow_->core()) == 0) return ended();
      }
    }
    // Settled: the end is recorded and its callbacks ran (the header's promise; else a wait
    // returns while another thread still runs an on_end callback:
    // ResultsThreaded.WaitForReturnsOnlyAfterTheJobsCallbacksRan pins it).
    if (!sure_) (void)ended();
    if (waiter_->wait_until(std::chrono::steady_clock::time_point::min())) return ended();
    // About to block with no end in sight (wait(), or a timeout that saturated to never): on the
    // shared pool, counted against its free workers (PoolWait).
    std::optional<detail::PoolWait> counted;
    if (deadline == std::chrono::steady_clock::time_point::max()) {
      // A pool worker's count outlives the visit: the engine joins its workers before it goes.
      if (const auto visit = waiter_->visit())
        counted.emplace(flow_->pool_wait("wait() on job " + std::to_string(id_), false));
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

  [[nodiscard]] bool inlined() const {
    const auto visit = waiter_->visit();
    return visit && flow_->core().mode() == Mode::inlined;
  }

  detail::JobFlow* flow_;  // called only inside a visit of waiter_ (see the header)
  std::shared_ptr<detail::EndWaiter> waiter_;
  JobId id_;
  AddReceipt added_;
  bool sure_;  // registered before the job was published: its end will be recorded
};

}  // namespace rail
