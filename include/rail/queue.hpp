// Queue<T>: the handle producers and workers use for one named, typed, bounded queue. Cheap to
// copy (a pointer) and non-owning: the Engine owns the queue. A handle (and the DeadLetterQueue
// reference dlq() returns) must not outlive its Engine, and no thread may use it while the
// Engine is being destroyed: the destructor frees the queue under it, a use-after-free that
// nothing reports. Detecting it would take shared ownership of every queue (a reference count
// on each handle copy); the rule is cheaper. To stop producers that may still hold handles,
// call Engine::shutdown() first (their add() then answers AddStatus::shutting_down while the queue
// still exists), let those threads finish, then destroy the Engine.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "rail/add_receipt.hpp"
#include "rail/async_job.hpp"
#include "rail/batch.hpp"
#include "rail/dead_letter_queue.hpp"
#include "rail/detail/payload_ops.hpp"
#include "rail/detail/queue_front.hpp"
#include "rail/explanation.hpp"
#include "rail/job.hpp"
#include "rail/job_end.hpp"
#include "rail/job_handle.hpp"
#include "rail/job_state.hpp"
#include "rail/options.hpp"
#include "rail/outcome.hpp"
#include "rail/result.hpp"
#include "rail/schedule.hpp"
#include "rail/shutdown_report.hpp"
#include "rail/task.hpp"

namespace rail {

class Engine;
namespace detail {
struct QueueAccess;
}

/// Queue<T, R>: payloads of type T; R is the result type its handler returns
/// (Engine::declare_queue<T, R>, rail::Result<R>), or void for a queue whose jobs only complete.
template <class T, class R = void>
class Queue {
 public:
  /// name() is the queue's name.
  [[nodiscard]] const std::string& name() const noexcept { return impl_->name(); }

  /// add(name, data, options) creates a job, or merges it into a live job with the same dedup id.
  /// Never blocks unless the queue is full under OnFull::block. Throws Error only for bad
  /// options (misuse); what a correct program meets at run time is a status: a full queue is
  /// AddStatus::full (or dead_lettered), an add after Engine::shutdown() began shutting_down.
  AddReceipt add(std::string_view job_name, T data, const JobOptions& options) {
    return impl_->add(job_name, &data, options);
  }
  /// add(name, data) uses QueueOptions::defaults.
  AddReceipt add(std::string_view job_name, T data) {
    return impl_->add(job_name, &data, impl_->options().defaults);
  }

  /// add_tracked(name, data[, options]) adds as add() does and hands back a handle to wait on
  /// the job's end (JobHandle: wait, wait_for, on_end) with its result (BullMQ's
  /// job.waitUntilFinished). A new job's handle is registered before the job can run, so its end
  /// is never missed, retained or not. A duplicate's handle reports the job it merged into; a
  /// kept add (AddStatus::kept), the running job it waits for; an add that created nothing
  /// (full, dedup_full, shutting_down) has a handle already ended with status unknown and the
  /// reason.
  JobHandle<R> add_tracked(std::string_view job_name, T data, const JobOptions& options) {
    auto t = impl_->add_tracked(job_name, &data, options);
    return JobHandle<R>(impl_, std::move(t.waiter), t.added.id, t.added, t.sure);
  }
  JobHandle<R> add_tracked(std::string_view job_name, T data) {
    return add_tracked(job_name, std::move(data), impl_->options().defaults);
  }

  /// track(id): a handle on job `id` of this queue, added earlier: it reports the end if the job
  /// ended and is retained (QueueOptions::keep_ended) or still in the queue's history (status only
  /// then), or waits for it. A job unknown to the queue ends at once with status unknown.
  JobHandle<R> track(JobId id) {
    return JobHandle<R>(impl_, impl_->watch(id), id, AddReceipt{id, AddStatus::added}, false);
  }
  /// end_of(id): job `id`'s end if it ended and is retained (QueueOptions::keep_ended), without
  /// waiting (BullMQ's job.returnvalue); nullopt while it runs or once it is no longer retained.
  [[nodiscard]] std::optional<JobEnd<R>> end_of(JobId id) const {
    auto e = impl_->retained(id);
    if (!e) return std::nullopt;
    return JobHandle<R>::typed(*e);
  }
  /// wait(id, timeout): track(id).wait_for(timeout).
  std::optional<JobEnd<R>> wait(JobId id, Duration timeout) { return track(id).wait_for(timeout); }

  /// schedule(id, when, name, data, options) declares a repeatable job: at each due time of
  /// `when` a job named `name` with a copy of `data` is added to this queue (schedule.hpp says
  /// how overlap and missed runs go). Upserted by id: declaring an existing id replaces its
  /// definition and never doubles it. Returns the schedule as it now stands. Throws as add()
  /// does for a bad name or JobOptions, Error(invalid_option) for a blank id or a delay or
  /// dedup id in options.job, and Error(shutting_down) once shutdown began (a declaration). A run
  /// is added as add() would, except that it never waits for room: a full queue refuses it
  /// (ScheduleInfo::refused; filed to the DLQ under OnFull::dead_letter).
  ScheduleInfo schedule(
      std::string_view id, const Schedule& when, std::string_view job_name, T data,
      const ScheduleOptions& options = {}) requires std::is_copy_constructible_v<T> {
    return impl_->schedule(id, when, job_name, &data, options);
  }
  /// every(id, interval, name, data, options): schedule(id, Schedule::every(interval), ...).
  ScheduleInfo every(std::string_view id, Duration interval, std::string_view job_name, T data,
                     const ScheduleOptions& options = {}) requires std::is_copy_constructible_v<T> {
    return schedule(id, Schedule::every(interval), job_name, std::move(data), options);
  }
  /// cron(id, expr, name, data, options): schedule(id, Schedule::cron(expr), ...), in UTC.
  ScheduleInfo cron(std::string_view id, std::string_view expr, std::string_view job_name, T data,
                    const ScheduleOptions& options = {}) requires std::is_copy_constructible_v<T> {
    return schedule(id, Schedule::cron(expr), job_name, std::move(data), options);
  }
  /// unschedule(id) removes schedule `id`: no due time of it comes any more, owed runs are
  /// dropped, runs already added go on. False if there is none.
  bool unschedule(std::string_view id) { return impl_->unschedule(id); }
  /// schedule_info(id): schedule `id` as it stands, or nullopt.
  [[nodiscard]] std::optional<ScheduleInfo> schedule_info(std::string_view id) const {
    return impl_->schedule_info(id);
  }
  /// schedules(): every schedule of this queue, by id.
  [[nodiscard]] std::vector<ScheduleInfo> schedules() const { return impl_->schedules(); }

  /// add_bulk(name, items, options) creates one job per item (payloads are moved from) with
  /// consecutive ids, all or nothing under OnFull::reject/block. One pass over the rings
  /// for the whole batch: the fast way to enqueue many jobs. A batch the queue has no room for
  /// is answered as a full queue answers a single add (`full`, or every item to the DLQ under
  /// OnFull::dead_letter); one larger than the capacity is never waited for under
  /// OnFull::block, since no room could ever come: `full` at once.
  BulkAddReceipt add_bulk(std::string_view job_name, std::span<T> items,
                          const JobOptions& options) {
    return impl_->add_bulk(job_name, items.data(), items.size(), options);
  }
  BulkAddReceipt add_bulk(std::string_view job_name, std::span<T> items) {
    return add_bulk(job_name, items, impl_->options().defaults);
  }

  /// process(options, handler) starts the queue's worker pool: `options.concurrency` threads in a
  /// threaded engine (none in an inline one: run_until_idle() runs the handler). The handler is
  /// `Outcome(Job<T>&)` or `void(Job<T>&)` (void means done); a throw is a retryable failure
  /// carrying what(). Call once per queue: a second call throws Error(invalid_option), as does a
  /// concurrency outside 1 .. WorkerOptions::kMaxConcurrency. If the system refuses a worker
  /// thread, throws Error(resources) once the threads already started have exited without
  /// running a job: the queue then has no processor and process() may be called again.
  /// On a queue with a result type R, the handler returns rail::Result<R>: an R when the job
  /// is done, or an Outcome (retry, retry_in, fail, discard, pushback).
  ///
  /// A coroutine handler, `rail::Task(rail::AsyncJob<T>)`, co_awaits its async work without
  /// holding a worker thread (task.hpp); it needs WorkerOptions::max_pending >= 1 (the
  /// coroutines in flight at once), else Error(invalid_option).
  template <class F>
  void process(const WorkerOptions& options, F&& handler) {
    impl_->check_processor(
        options);  // before the handler is taken: a refused one stays the caller's
    // A handler that takes Job<T>& (a generic one too) is synchronous, as it always was; only
    // one that does not is asked about AsyncJob<T> (a generic body may not compile with one).
    if constexpr (std::is_invocable_v<F&, Job<T>&>) {
      process_sync(options, std::forward<F>(handler));
    } else {
      static_assert(std::is_invocable_v<F&, AsyncJob<T>>,
                    "a handler takes rail::Job<T>& (or, a coroutine, rail::AsyncJob<T> by value)");
      static_assert(std::is_same_v<std::invoke_result_t<F&, AsyncJob<T>>, Task>,
                    "a handler taking rail::AsyncJob<T> is a coroutine returning rail::Task");
      static_assert(!std::is_invocable_v<F&, const AsyncJob<T>&> &&
                        !detail::takes_rvalue_reference<std::remove_cvref_t<F>>(),
                    "take rail::AsyncJob<T> by value: a reference outlives the handler call");
      if (options.max_pending == 0)
        throw Error(ErrorCode::invalid_option,
                    "queue '" + name() +
                        "': a coroutine handler (rail::Task) with WorkerOptions.max_pending 0; "
                        "expected max_pending >= 1, the coroutines that may be in flight at once");
      // Shared with every AsyncJob: a coroutine reaches its captures through the closure, which
      // must outlive it even when the queue (or the engine) goes first.
      auto shared = std::make_shared<std::remove_cvref_t<F>>(std::forward<F>(handler));
      bind(
          [shared](Job<T>& job) {
            (*shared)(AsyncJob<T>(job, shared));  // runs to its first suspension
            return detail::pending_outcome();     // its end completes the job
          },
          options);
    }
  }

  /// process_batch(options, batch, handler) starts the queue's workers as process() does, with
  /// a handler that takes many jobs at once: `void(rail::Batch<T>&)`. Each worker hands the
  /// handler up to batch.max jobs, those ready when it looks plus, on the queue's own pool, those
  /// that come within batch.linger of the first (batch.hpp says how a batch forms and ends).
  /// Every job keeps its own lease, downstream permit, outcome (done unless the handler calls
  /// Batch::set), retries and DLQ entry. Error(invalid_option) when batch.max x the workers
  /// passes WorkerOptions::kMaxPending, for bad BatchOptions, and as process() for a second
  /// processor. A queue with a result type is
  /// processed one job at a time (process()): a batch handler returns no results.
  template <class F>
  void process_batch(const WorkerOptions& options, const BatchOptions& batch, F&& handler) {
    static_assert(std::is_void_v<R>,
                  "process_batch: a batch handler returns no results; declare the queue without "
                  "a result type, or process it one job at a time with process()");
    static_assert(std::is_invocable_v<std::decay_t<F>&, Batch<T>&>,
                  "a batch handler takes rail::Batch<T>& (process_batch)");
    impl_->check_processor(
        options);  // before the handler is taken: a refused one stays the caller's
    using Fn = std::decay_t<F>;
    detail::QueueFront::HandlerBox box(new Fn(std::forward<F>(handler)),
                                       [](void* p) { delete static_cast<Fn*>(p); });
    impl_->set_batch_handler(&run_batch<Fn>, std::move(box), options, batch);
  }

 private:
  /// run_batch<Fn>: the queue's BatchRun for a batch handler of type Fn.
  template <class Fn>
  static void run_batch(void* handler, detail::BatchEntry* entries, std::size_t n,
                        Outcome* outcomes, std::uint8_t* set) {
    Batch<T> batch(entries, n, outcomes, set);
    (*static_cast<Fn*>(handler))(batch);
  }

  template <class F>
  void process_sync(const WorkerOptions& options, F&& handler) {
    using Ret = std::invoke_result_t<F&, Job<T>&>;
    if constexpr (!std::is_void_v<R>) {
      static_assert(std::is_convertible_v<Ret, Result<R>>,
                    "a handler of a queue with result type R returns rail::Result<R>: an R when "
                    "the job is done, or an Outcome other than done");
      bind([h = std::forward<F>(handler)](
               Job<T>& job) mutable -> Outcome { return Result<R>(h(job)).take(); },
           options);
    } else if constexpr (std::is_void_v<Ret>) {
      bind(
          [h = std::forward<F>(handler)](Job<T>& job) mutable {
            h(job);
            return Outcome::done();
          },
          options);
    } else {
      static_assert(std::is_convertible_v<Ret, Outcome>, "a handler returns rail::Outcome or void");
      bind(std::forward<F>(handler), options);
    }
  }

 public:
  /// pause() stops workers from starting jobs (running ones finish, and a job a worker took
  /// just before may still start; no job added after pause() returns starts before resume());
  /// adds are still accepted and delayed jobs still become ready. resume() lets workers start
  /// again. Each raises its event (EventKind::paused / resumed) when it changes the state: a second
  /// pause() is silent. Never blocks.
  void pause() noexcept { impl_->pause(); }
  void resume() noexcept { impl_->resume(); }
  [[nodiscard]] bool paused() const noexcept { return impl_->paused(); }

  /// pause_and_wait(timeout) pauses the queue as pause() does, then blocks until no handler of
  /// it is running: every worker has returned from the handler it was running (or had just
  /// taken a job for) and will start nothing until resume(). Handlers still running after their
  /// lease lapsed count as running: they are waited for (BullMQ's pause(doNotWaitActive=false)
  /// waits for its workers' active jobs the same way). Returns true once none runs, false if
  /// `timeout` (real time) passed first; the queue stays paused either way. Threaded and inline
  /// engines (inline, handlers run only inside run_until_idle: it returns at once unless
  /// another thread is in there). Throws Error(would_deadlock), without pausing, when called
  /// from one of this queue's handlers (or an observer of its events on its worker) or from a
  /// timer callback (an observer of retry_due/stalled, a DLQ alert), as wait_idle() does.
  bool pause_and_wait(Duration timeout = Duration::max()) { return impl_->pause_and_wait(timeout); }

  /// wait_idle(timeout) blocks until nothing is waiting, delayed or running on this queue (a
  /// paused queue with jobs never gets there) and the events of the jobs' ends have reached the
  /// observers (a lapse raises them on the timer thread); returns false if `timeout` (real time)
  /// passed first, or once shutdown() stopped the workers and no handler runs while jobs are left
  /// (they never start: take_leftovers() hands them back), also to a wait_idle() that was already
  /// waiting when shutdown() began. Throws Error(would_deadlock) from the queue's own handlers,
  /// observers of its own added/redriven events and timer callbacks, and from a shared-pool worker
  /// whose wait without a timeout would leave the pool no free worker. Threaded engines only
  /// (Error(wrong_mode) inline: use Engine::run_until_idle).
  bool wait_idle(Duration timeout = Duration::max()) { return impl_->wait_idle(timeout); }

  /// cancel(id) removes a waiting or delayed job (its dedup id is released; event `cancelled`),
  /// or flags a running one: its handler sees Job::cancelled() and its outcome is recorded as
  /// cancelled. Returns false if the job is not in this queue or has already ended. Cold path:
  /// scans the queue's slots.
  bool cancel(JobId id) { return impl_->cancel(id); }

  /// state(id) tells where job `id` is now (waiting, delayed until T, active since T with its
  /// deliveries, completed, dead-lettered, cancelled, or unknown). Cold path: scans the slots,
  /// then a history of ended jobs as large as the queue's capacity (rounded up, >= 1024).
  [[nodiscard]] JobState state(JobId id) const { return impl_->state(id); }

  /// explain(id) says why job `id` has not started: the first of delayed, no processor, the
  /// queue paused, its downstream paused, full or out of tokens, every worker busy, or its place
  /// among the waiting jobs (Holdup, explanation.hpp), with the figures and a sentence. A job
  /// that is running or ended answers Holdup::none with its state. Cold path: scans the slots.
  [[nodiscard]] Explanation explain(JobId id) const { return impl_->explain(id); }

  /// oldest_waits() says, per priority level (QueueOptions::priorities; index = level), how long
  /// the oldest ready job of that level has waited to start: 0 for a level with none. A snapshot
  /// (one look per level, each a guess as state()'s); one entry of 0 on a queue without levels.
  [[nodiscard]] std::vector<Duration> oldest_waits() const { return impl_->oldest_waits(); }

  /// metrics() is the queue's counters, gauges (waiting, delayed, active, DLQ depth, lag) and
  /// latency histograms (wait, run, end-to-end, retry lateness), as plain values (metrics.hpp).
  /// Cold: it sums every worker's copies and looks at each slot ever used (for the lag).
  [[nodiscard]] QueueMetrics metrics() const { return impl_->metrics(); }

  /// promote(id) runs a delayed job now (BullMQ promote): it becomes waiting at once. A job
  /// waiting out a retry's backoff is delayed too, and is promoted the same way. Returns false
  /// if job `id` is not delayed in this queue (waiting, held back by its downstream, running,
  /// ended or unknown). Throws
  /// Error(would_deadlock) from a callback that runs while timers fire. Cold path: scans the
  /// queue's slots.
  bool promote(JobId id) { return impl_->promote(id); }
  /// change_delay(id, d) makes a delayed job due at now + d instead (BullMQ changeDelay); d = 0
  /// promotes it, Duration::max() parks it until promoted or cancelled. Returns and throws as
  /// promote().
  bool change_delay(JobId id, Duration d) { return impl_->change_delay(id, d); }

  /// jobs(status, limit) lists up to `limit` of this queue's live jobs in `status` (waiting,
  /// delayed or active; other statuses list nothing: ended jobs are in the history of state()
  /// and, dead-lettered, in dlq()), oldest first (BullMQ getJobs, asynq's inspector). A
  /// snapshot: jobs that move while it is taken may be missed. Cold path: one pass over the
  /// queue's slots, fine for an admin endpoint; no payloads (state(id) or the DLQ for more).
  [[nodiscard]] std::vector<JobInfo> jobs(JobStatus status, std::size_t limit = SIZE_MAX) const {
    return impl_->jobs(status, limit);
  }

  /// take_leftovers() (after Engine::shutdown) moves out the jobs that never started, payload
  /// included, so the caller can persist them.
  [[nodiscard]] std::vector<Leftover<T>> take_leftovers() {
    std::vector<Leftover<T>> out;
    impl_->take_leftovers([&](LeftoverJob&& job, bool was_delayed, void* data) {
      out.push_back(Leftover<T>{job.id, std::move(job.name),
                                std::move(*std::launder(static_cast<T*>(data))),
                                job.failed_attempts, was_delayed});
    });
    return out;
  }

  /// dlq() is this queue's dead-letter queue.
  [[nodiscard]] DeadLetterQueue<T> dlq() const noexcept { return DeadLetterQueue<T>(impl_->dlq()); }

  /// counts() is the queue's jobs by state, read counter by counter without stopping the
  /// workers: exact once the queue is quiet (after wait_idle()); while jobs move, one may be
  /// counted ended (completed) before its attempt's end leaves `active`. Each gauge reads its
  /// outflow first, so it never shows a job twice.
  [[nodiscard]] QueueCounts counts() const noexcept { return impl_->counts(); }

  /// capacity() is QueueOptions::capacity.
  [[nodiscard]] std::size_t capacity() const noexcept { return impl_->options().capacity; }

 private:
  friend class Engine;
  friend struct detail::QueueAccess;
  explicit Queue(detail::QueueFront* impl) noexcept : impl_(impl) {}

  /// bind(f, options): f is called as `Outcome f(Job<T>&)` (process() adapts the rest); binds it
  /// as the queue's handler and starts the workers.
  template <class F>
  void bind(F&& f, const WorkerOptions& options) {
    using Fn = std::decay_t<F>;
    static_assert(std::is_convertible_v<std::invoke_result_t<Fn&, Job<T>&>, Outcome>);
    detail::QueueFront::HandlerBox box(new Fn(std::forward<F>(f)),
                                       [](void* p) { delete static_cast<Fn*>(p); });
    impl_->set_handler(&run_with<Fn>, std::move(box), options);
  }
  /// run_with<Fn>: the queue's RunHandler for a handler of type Fn: one indirect call per job.
  template <class Fn>
  static Outcome run_with(void* handler, const void* payload, detail::JobFields& fields) {
    Job<T> job(fields, std::launder(static_cast<const T*>(payload)));
    return (*static_cast<Fn*>(handler))(job);
  }

  detail::QueueFront* impl_;
};

namespace detail {
/// QueueAccess: the queue behind a Queue handle, for rail's own bridges (rail::amqp), which
/// add through calls a handle does not offer (QueueFront::resume).
struct QueueAccess {
  template <class T, class R>
  static QueueFront& front(const Queue<T, R>& q) noexcept {
    return *q.impl_;
  }
};
}  // namespace detail

}  // namespace rail
