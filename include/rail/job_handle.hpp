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

#include <functional>
#include <memory>
#include <optional>
#include <utility>

#include "rail/add_receipt.hpp"
#include "rail/clock.hpp"
#include "rail/job_end.hpp"

namespace rail {

template <class T, class R>
class Queue;
class JobBatch;

namespace detail {
class QueueFront;
class EndWaiter;

/// JobWatch: a JobHandle without its result type: the waiting, compiled once in src/.
class JobWatch {
 public:
  JobWatch(QueueFront* queue, std::shared_ptr<EndWaiter> waiter, JobId id, bool sure) noexcept;
  // Out of line, as the rest: a handle's copies and its end cost a user's TU one call each.
  JobWatch(const JobWatch&) noexcept;
  JobWatch(JobWatch&&) noexcept;
  JobWatch& operator=(const JobWatch&) noexcept;
  JobWatch& operator=(JobWatch&&) noexcept;
  ~JobWatch();
  [[nodiscard]] JobId id() const noexcept { return id_; }
  [[nodiscard]] std::optional<JobEnd<void>> ended() const;
  [[nodiscard]] JobEnd<void> wait() const;
  [[nodiscard]] std::optional<JobEnd<void>> wait_for(Duration timeout) const;
  void on_end(std::function<void(const JobEnd<void>&)> cb) const;
  /// waiter(): the job's end as the queue reports it (a JobBatch watches it).
  [[nodiscard]] const std::shared_ptr<EndWaiter>& waiter() const noexcept { return waiter_; }
  /// queue(): the job's queue (a parent's FlowNode reads its name and result type).
  [[nodiscard]] QueueFront* queue() const noexcept { return queue_; }

 private:
  void check_can_wait(bool unbounded) const;
  std::optional<JobEnd<void>> wait_until(std::chrono::steady_clock::time_point deadline) const;
  [[nodiscard]] bool inlined() const;

  QueueFront* queue_;  // called only inside a visit of waiter_ (see the header)
  std::shared_ptr<EndWaiter> waiter_;
  JobId id_;
  bool sure_;  // registered before the job was published: its end will be recorded
};
}  // namespace detail

template <class R = void>
class JobHandle {
 public:
  /// id() is the job's id; added() is what the add returned (a duplicate's id is the kept
  /// job's, whose end this handle reports; Queue::track(id) has status added).
  [[nodiscard]] JobId id() const noexcept { return watch_.id(); }
  [[nodiscard]] const AddReceipt& added() const noexcept { return added_; }

  /// ended(): the job's end if it has ended, without waiting.
  [[nodiscard]] std::optional<JobEnd<R>> ended() const {
    if (auto e = watch_.ended()) return typed(*e);
    return std::nullopt;
  }
  /// wait(): blocks until the job ends and returns its end (see the header for where it throws).
  JobEnd<R> wait() const { return typed(watch_.wait()); }
  /// wait_for(timeout): the job's end, or nullopt if `timeout` (real time; inline: the jobs that
  /// can run now) passed first.
  std::optional<JobEnd<R>> wait_for(Duration timeout) const {
    if (auto e = watch_.wait_for(timeout)) return typed(*e);
    return std::nullopt;
  }
  /// on_end(cb): cb(end) once the job ends (see the header).
  void on_end(std::function<void(const JobEnd<R>&)> cb) const {
    watch_.on_end([cb = std::move(cb)](const JobEnd<void>& e) { cb(typed(e)); });
  }

 private:
  template <class, class>
  friend class Queue;
  friend class JobBatch;
  friend struct Dependency;
  JobHandle(detail::QueueFront* queue, std::shared_ptr<detail::EndWaiter> waiter, JobId id,
            AddReceipt added, bool sure)
      : watch_(queue, std::move(waiter), id, sure), added_(added) {}

  static JobEnd<R> typed(const JobEnd<void>& e) {
    if constexpr (std::is_void_v<R>) {
      return e;
    } else {
      JobEnd<R> out;
      out.id = e.id;
      out.status = e.status;
      out.result = std::static_pointer_cast<const R>(e.result);
      out.reason = e.reason;
      out.error = e.error;
      out.errors = e.errors;
      out.attempt = e.attempt;
      out.ended_at = e.ended_at;
      return out;
    }
  }

  detail::JobWatch watch_;
  AddReceipt added_;
};

}  // namespace rail
