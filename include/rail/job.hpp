// Job<T>: what a handler sees of the job it is running. A view: valid only during the handler
// call; copy out what you need to keep.
#pragma once

#include <atomic>
#include <concepts>
#include <cstdint>
#include <functional>
#include <stop_token>
#include <string_view>
#include <utility>
#include <vector>

#include "rail/child_end.hpp"
#include "rail/clock.hpp"
#include "rail/trace_context.hpp"
#include "rail/completion.hpp"
#include "rail/event.hpp"

namespace rail {

template <class T, class R>
class Queue;

namespace detail {
template <template <class> class Atom>
class SlotControl;
template <template <class> class Atom>
struct BasicLeaseRecord;
class TimerPort;
class JobFlow;
class Completions;
/// report_progress(flow, idx, token, value): Job::progress (ProgressBoard::report).
bool report_progress(JobFlow& flow, std::uint32_t idx, std::uint32_t token, double value) noexcept;
/// job_children(flow, idx): Job::children (FlowNode::children).
std::vector<ChildEnd> job_children(JobFlow& flow, std::uint32_t idx);
/// delivery_stop_token(flow, idx, token): Job::stop_token (StopCells::token).
std::stop_token delivery_stop_token(JobFlow& flow, std::uint32_t idx, std::uint32_t token);
/// sweep_no_later_than(port, deadline): a handler shortened its lease (timer_port.hpp).
void sweep_no_later_than(TimerPort& port, std::int64_t deadline) noexcept;
struct JobFields;
/// defer_job(flow, job): Job::defer (completions.cpp).
Completion defer_job(JobFlow& flow, JobFields& job);

/// Deferral: what a delivery's handler handed to a Completion (Job::defer), read by the
/// delivering worker once the handler returned.
struct Deferral {
  bool taken = false;   // a Completion owns the delivery: its lease, permit and outcome
  bool permit = false;  // the delivery holds a downstream permit (handed over with it)
};

/// JobFacts: what a job shows of itself besides its payload and its delivery's controls, with
/// one set of accessors for the handler's view (Job<T>) and a coroutine's copy (AsyncJob<T>).
/// Filled by the job flow (job_flow.hpp) without knowing the payload type.
class JobFacts {
 public:
  /// id() is the job's engine-unique id (the one add() returned).
  [[nodiscard]] JobId id() const noexcept { return id_; }
  /// name() is the job kind given to add(), e.g. "charge-card".
  [[nodiscard]] std::string_view name() const noexcept { return name_; }
  /// queue() is the queue's name.
  [[nodiscard]] std::string_view queue() const noexcept { return queue_; }
  /// attempt() is this attempt's number, 1-based (BullMQ's attemptsMade + 1).
  [[nodiscard]] std::uint32_t attempt() const noexcept { return failed_attempts_ + 1; }
  /// failed_attempts() counts the failed attempts before this one (BullMQ's attemptsMade); a
  /// delivery whose lease lapsed counts only under StallPolicy::count_as_attempt (SQS).
  [[nodiscard]] std::uint32_t failed_attempts() const noexcept { return failed_attempts_; }
  /// deliveries() counts handler starts including this one (SQS ApproximateReceiveCount).
  [[nodiscard]] std::uint32_t deliveries() const noexcept { return deliveries_; }
  /// stalls() counts the earlier deliveries whose lease lapsed (BullMQ's stalledCounter).
  [[nodiscard]] std::uint32_t stalls() const noexcept { return stalls_; }
  /// max_attempts() is JobOptions::max_attempts (SQS maxReceiveCount).
  [[nodiscard]] std::uint32_t max_attempts() const noexcept { return max_attempts_; }
  /// added_at() / started_at(): when the job was added and when this delivery began.
  [[nodiscard]] TimePoint added_at() const noexcept { return added_at_; }
  [[nodiscard]] TimePoint started_at() const noexcept { return started_at_; }
  /// last_error() is the previous attempt's failure, empty on a first attempt.
  [[nodiscard]] std::string_view last_error() const noexcept { return last_error_; }
  /// trace() is this attempt's place in the job's trace (JobOptions::trace): the producer's
  /// context, this attempt's span, and for a retry the first attempt's span to link to. Pass
  /// trace().attempt.traceparent() on to the services the handler calls.
  [[nodiscard]] JobTrace trace() const noexcept { return attempt_trace(trace_, id_, attempt()); }

 protected:
  friend class JobFlow;
  friend class Completions;  // a deferred delivery's facts (Job::defer)
  JobId id_ = 0;
  std::string_view name_;
  std::string_view queue_;
  std::uint32_t failed_attempts_ = 0;
  std::uint32_t deliveries_ = 0;
  std::uint32_t stalls_ = 0;
  std::uint32_t max_attempts_ = 0;
  TimePoint added_at_{};
  TimePoint started_at_{};
  std::string_view last_error_;
  TraceContext trace_{};  // the job's producer context (invalid: none)
};

/// JobFields: everything a Job<T> shows but its payload: the facts and the delivery's controls.
struct JobFields : JobFacts {
  const SlotControl<std::atomic>* ctl_ = nullptr;
  std::uint32_t token_ = 0;
  BasicLeaseRecord<std::atomic>* record_ = nullptr;
  std::uint64_t lease_ = 0;
  const Clock* clock_ = nullptr;
  TimerPort* timers_ = nullptr;  // threaded mode: where a shortened lease asks for an earlier sweep
  JobFlow* flow_ = nullptr;      // where progress reports go
  std::uint32_t idx_ = 0;        // the job's slot
  Deferral* deferral_ = nullptr;         // null: the queue allows no pending jobs (max_pending 0)
  std::int64_t timeout_at_ = INT64_MAX;  // the attempt's timeout: extend_lease renews no later
  bool renewable_ = false;    // it holds a lease (not only a timeout): extend_lease renews it
  std::uint32_t worker_ = 0;  // the delivering worker, 0 .. the queue's workers (batches)
};

/// fenced(job): Job::cancelled() (job_view.cpp): the delivery no longer counts.
bool fenced(const JobFields& job) noexcept;
/// extend_lease(job, d): Job::extend_lease (job_view.cpp).
bool extend_lease(JobFields& job, Duration d) noexcept;
}  // namespace detail

template <class T>
class AsyncJob;

template <class T>
class Job : private detail::JobFields {
 public:
  using detail::JobFacts::added_at;
  using detail::JobFacts::attempt;
  using detail::JobFacts::deliveries;
  using detail::JobFacts::failed_attempts;
  using detail::JobFacts::id;
  using detail::JobFacts::last_error;
  using detail::JobFacts::max_attempts;
  using detail::JobFacts::name;
  using detail::JobFacts::queue;
  using detail::JobFacts::stalls;
  using detail::JobFacts::started_at;
  using detail::JobFacts::trace;
  /// data() is the payload. Read-only: after a lease lapse two handlers may read it at once, and
  /// the DLQ may copy it while a stale handler reads it (so T's const reads and its copy
  /// constructor must only read: no mutable caches, no non-atomic intrusive counts).
  [[nodiscard]] const T& data() const noexcept { return *data_; }

  /// cancelled() is true once the handler's work no longer counts: cancel() was called for this
  /// job, or this delivery's lease lapsed (the job went to another worker or to the DLQ).
  /// Long handlers should poll it and return early.
  [[nodiscard]] bool cancelled() const noexcept { return detail::fenced(*this); }

  /// stop_token() is this delivery's stop request: stopped when its attempt times out
  /// (QueueOptions::timeout), its lease lapses or cancel() is called for its job, when
  /// cancelled() turns true. Pass it to what the handler waits on (a std::stop_callback, a
  /// std::condition_variable_any wait, std::jthread), so that the handler returns early instead
  /// of running on as a zombie. Its stop_callbacks run on the thread that stops it: the timer
  /// thread for a timeout or a lapse (keep them short: every timer of the engine waits for
  /// them), cancel()'s caller for a cancel. Valid for this delivery: a token kept after the
  /// handler returns may see a later delivery's stop. The first call on a queue allocates its
  /// cells, and a call after a stop one stop state; a handler that never calls it pays nothing.
  [[nodiscard]] std::stop_token stop_token() const {
    return detail::delivery_stop_token(*flow_, idx_, token_);
  }

  /// children() are the ends of the jobs this one waited for (JobOptions::after), in that
  /// order, each with its queue and result (ChildEnd::result<R>()); empty for a job that waited
  /// for none. A copy: a fan-in of n children copies n ends.
  [[nodiscard]] std::vector<ChildEnd> children() const {
    return detail::job_children(*flow_, idx_);
  }

  /// progress(value) reports how far the handler got, e.g. a percentage (BullMQ's
  /// updateProgress): state(id).progress shows the latest value while the job lives (retries
  /// included), and a `progress` event carries it, at most once per
  /// QueueOptions::progress_interval for the job (reports in between update state() only).
  /// Returns false, dropping the report, once this delivery no longer counts (cancelled()), or
  /// for NaN.
  bool progress(double value) noexcept {
    return detail::report_progress(*flow_, idx_, token_, value);
  }

  /// extend_lease(d) renews this delivery's lease to end d from now (SQS ChangeMessageVisibility,
  /// BullMQ extendLock): a heartbeat for handlers that outlive the visibility timeout. Returns
  /// false if the lease had already lapsed (the job was delivered again; stop working on it).
  /// Duration::max() (or any d reaching past the clock's range) makes the lease never lapse.
  /// After defer(start), the Completion renews the lease (Completion::extend_lease); this returns
  /// false.
  bool extend_lease(Duration d) noexcept { return detail::extend_lease(*this, d); }

  /// defer(start): the handler's work goes on after it returns (an async call to a network
  /// service). defer hands this delivery to a Completion (its lease, which keeps running, its
  /// downstream permit and its outcome), calls start(std::move(completion)) to pass it to
  /// whatever finishes the work, and returns the Outcome the handler returns. start takes the
  /// Completion by value (or moves it out of a reference before it returns: one left behind is
  /// dropped when defer returns, which fails the attempt):
  ///
  ///   return job.defer([&](rail::Completion c) {
  ///     http.post_async(job.data(), [c = std::move(c)](Response r) mutable {
  ///       c.complete(r.ok() ? rail::Outcome::done() : rail::Outcome::retry(r.status_text()));
  ///     });
  ///   });
  ///
  /// The Completion may complete the job from any thread (completion.hpp); once deferred, what
  /// the handler returns or throws is ignored: the Completion decides (one that is destroyed
  /// without complete(), say because start threw, fails the attempt). Throws
  /// Error(invalid_option) on a queue whose WorkerOptions::max_pending is 0 or when called
  /// twice for one delivery, Error(capacity) when max_pending jobs are pending already (a throw
  /// from the handler: the attempt fails with that message); start is not called then.
  template <class Start>
  requires std::invocable<Start, Completion> Outcome defer(Start&& start) {
    std::invoke(std::forward<Start>(start), detail::defer_job(*flow_, *this));
    return detail::pending_outcome();
  }

 private:
  template <class, class>
  friend class Queue;        // builds the handler's view
  friend class AsyncJob<T>;  // copies the facts
  Job(const detail::JobFields& fields, const T* data) noexcept
      : detail::JobFields(fields), data_(data) {}
  const T* data_;
};

}  // namespace rail
