// Engine: owns the clock binding, the timing wheel and its thread, the queues and their worker
// pools. Embed one per process (or one per test).
//
// Guarantee: every job a queue accepts ends exactly once — completed or dead-lettered — or is
// listed by shutdown(); destroying an engine never loses track of a job silently (its events,
// its shutdown report and the destructor's report say where each went).
// Threading: all members are thread-safe. queue() declarations, on_event() and remove_observer()
// are cold (locked); add/process paths and event delivery are lock-free (see
// detail/queue_impl.hpp, detail/observer_list.hpp).
// Shutdown: shutdown(grace) stops accepting, lets running handlers finish until `grace` passes
// and reports what was left. The destructor stops accepting and starts nothing more, waits for
// running handlers to return (a handler that never returns blocks destruction: rail cannot kill
// a thread), then drops every job that never started and was not taken (take_leftovers): their
// waiters hear status unknown with the reason, and the dropped jobs go to
// EngineOptions::on_destroy as a ShutdownReport; with no callback and no shutdown() before, one
// line on stderr names them. It calls no observer (what they capture is often destroyed before
// the engine). JobHandles and Subscriptions may outlive the engine.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rail/clock.hpp"
#include "rail/downstream.hpp"
#include "rail/error.hpp"
#include "rail/event.hpp"
#include "rail/job_batch.hpp"
#include "rail/journal_codec.hpp"
#include "rail/metrics.hpp"
#include "rail/options.hpp"
#include "rail/queue.hpp"
#include "rail/shutdown_report.hpp"

namespace rail {

class Engine;

namespace detail {
class EngineCore;
class QueueBase;
class QueueFront;
struct PayloadOps;

/// EngineLife: whether an engine is still there, for what may outlive it (Subscription;
/// src/engine.cpp). EngineState: the engine's queues and timer thread (src/engine.cpp).
struct EngineLife;
struct EngineState;
}  // namespace detail

/// Subscription: owns one observer of an engine (Engine::subscribe) and removes it when
/// destroyed or reset(), as Engine::remove_observer does (it waits for calls in progress unless
/// it runs inside an observer). Move-only; an empty one owns nothing. It may outlive its engine:
/// reset() and the destructor then do nothing (the engine's observers went with it).
class Subscription {
 public:
  Subscription() noexcept = default;
  Subscription(Engine& engine, ObserverId id) noexcept;
  Subscription(Subscription&& other) noexcept
      : life_(std::move(other.life_)), id_(std::exchange(other.id_, ObserverId::none)) {}
  Subscription& operator=(Subscription&& other) noexcept {
    if (this != &other) {
      reset();
      life_ = std::move(other.life_);
      id_ = std::exchange(other.id_, ObserverId::none);
    }
    return *this;
  }
  Subscription(const Subscription&) = delete;
  Subscription& operator=(const Subscription&) = delete;
  ~Subscription() { reset(); }

  /// reset() removes the observer now (if any) and leaves the subscription empty.
  void reset() noexcept;
  /// release() leaves the observer in place for the engine's lifetime; returns its id.
  ObserverId release() noexcept {
    life_.reset();
    return std::exchange(id_, ObserverId::none);
  }
  [[nodiscard]] ObserverId id() const noexcept { return id_; }
  explicit operator bool() const noexcept { return id_ != ObserverId::none; }

 private:
  std::shared_ptr<detail::EngineLife> life_;
  ObserverId id_ = ObserverId::none;
};

class Engine {
 public:
  /// Engine(options) validates options (Error(invalid_option)) and, in threaded mode, starts the
  /// timer thread. Worker threads start with Queue::process.
  explicit Engine(EngineOptions options = {});
  /// ~Engine(): see the header's Shutdown paragraph (what it waits for and what it drops).
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// declare_queue<T>(name, options) declares a queue of payload type T. Error(queue_exists) if
  /// `name` is already declared; Error(invalid_option) for bad options or a name that is blank,
  /// over 255 bytes or holds a control character; Error(capacity) naming the bytes it would need
  /// when its preallocation (capacity x (128 B + sizeof(T)) plus rings, detail/footprint.hpp)
  /// exceeds the machine's physical memory or cannot be allocated.
  ///
  /// declare_queue<T, R>(name, options) declares a queue whose handler returns a result of type
  /// R (rail::Result<R>): its jobs' results reach the `completed` event (as text when R has an
  /// operator<<), their handles (Queue::add_tracked) and Queue::end_of(id).
  template <class T, class R = void>
  Queue<T, R> declare_queue(std::string_view name, QueueOptions options) {
    static_assert(std::is_nothrow_move_constructible_v<T>,
                  "a queue's payload type must be nothrow move constructible: jobs move between "
                  "the queue, the DLQ and redrive on paths that must not fail halfway");
    return Queue<T, R>(declare(name, std::move(options), detail::payload_ops<T>(), typeid(R),
                               detail::result_printer<R>()));
  }

  /// declare_downstream(name, options) declares the downstream service `name` (a payment gateway, a
  /// mail API) with its limits: at most options.concurrency jobs inside it at once and
  /// options.rate starts per period, across every queue whose QueueOptions::downstream names it
  /// (declare it before those queues). Called again for a declared name, it changes the limits
  /// at once (a gateway announced a new quota). Error(invalid_option) naming the field for bad
  /// options (rail::validate) or a name that is blank, over 255 bytes or holds a control
  /// character; Error(shutting_down) once shutdown() began.
  Downstream declare_downstream(std::string_view name, const DownstreamOptions& options);
  /// downstream(name): a declared downstream; Error(unknown_downstream) if there is none.
  Downstream downstream(std::string_view name);

  /// declare_journaled_queue<T>(name, options) declares a queue whose DLQ keeps a journal file
  /// (options.dlq.journal), with declare_queue<T>'s behaviour and errors otherwise. It
  /// checks the journal's requirements where declare_queue<T> cannot: T must satisfy
  /// rail::JournalCodable, so a payload type without a rail::JournalCodec is a compile error
  /// naming T and the unmet requirement (declare_queue<T> compiles, since a journal is a run-time
  /// option, and throws when one is asked for); and an empty options.dlq.journal.path is
  /// Error(invalid_option) naming the queue, not a DLQ silently kept in memory only. Only the DLQ
  /// is journaled: waiting and running jobs live in memory, as with declare_queue<T>.
  template <JournalCodable T, class R = void>
  Queue<T, R> declare_journaled_queue(std::string_view name, QueueOptions options) {
    if (options.dlq.journal.path.empty())
      throw Error(ErrorCode::invalid_option,
                  "QueueOptions('" + std::string(name) +
                      "').dlq.journal.path is empty; expected the path of the DLQ's journal file "
                      "(declare_journaled_queue declares a queue whose DLQ keeps one; "
                      "declare_queue<T>(name, options) declares a queue without)");
    return declare_queue<T, R>(name, std::move(options));
  }

  /// queue<T>(name) looks up a queue that declare_queue declared (one verb per act: declare
  /// creates, the bare noun finds, as downstream(name) does). Error(unknown_queue) if there is
  /// none; Error(type_mismatch) if it was declared with another payload type or result type.
  template <class T, class R = void>
  Queue<T, R> queue(std::string_view name) {
    return Queue<T, R>(find(name, typeid(T), typeid(R)));
  }

  /// on_event(observer) adds an observer of every job stage on every queue, called after the
  /// observers added before it, and returns its id for remove_observer (ignore it to keep the
  /// observer for the engine's lifetime). Any number of observers; add them before adding jobs
  /// to see every event. Never waits. Called from inside an observer, the new one first sees
  /// the events emitted after on_event returns (not the one being delivered). An observer must
  /// not throw: if it does, the exception is caught (the job's transition and the other
  /// observers go on), counted in observer_errors(), and the first one is reported on stderr.
  /// Throws std::bad_alloc (nothing added) if memory runs out. Cold: takes a lock that emit()
  /// never takes; emit() reads the observers lock-free.
  ObserverId on_event(Observer observer);

  /// remove_observer(id) removes an observer; false if `id` names none (already removed, or
  /// none). Once it returns the observer is never called again. Called outside any observer it
  /// also waits until no call of it is in progress on any thread (it waits for the observer
  /// calls in progress when it began, of any observer) and destroys its callable before
  /// returning: what the observer uses may be destroyed at once. Do not call it while holding a
  /// lock an observer may wait for. Called from inside an observer (this engine's or
  /// another's, a self-removal included) it does not wait, which could deadlock: the current
  /// event's delivery on this thread skips the removed observer from then on, a call already
  /// running on another thread may still finish, and the callable is destroyed later (by an
  /// on_event or remove_observer whose wait covers it, or the engine's destructor). Never throws.
  bool remove_observer(ObserverId id) noexcept;

  /// subscribe(observer) is on_event with an owner: the returned Subscription removes the
  /// observer (remove_observer, with its waiting rule) when it is destroyed or reset.
  [[nodiscard]] Subscription subscribe(Observer observer);

  /// observer_count() is the number of observers added and not removed (cold).
  [[nodiscard]] std::size_t observer_count() const;

  /// observer_errors() is how many observer calls have thrown on this engine so far.
  [[nodiscard]] std::uint64_t observer_errors() const noexcept;

  /// clock() is the engine's clock.
  [[nodiscard]] Clock& clock() const noexcept;
  [[nodiscard]] Mode mode() const noexcept;

  /// run_until_idle() (inline mode only): fires the timers that are due at the clock's current
  /// time and runs ready jobs on this thread until none is ready; returns how many attempts ran.
  /// Error(wrong_mode) on a threaded engine.
  std::size_t run_until_idle();

  /// next_timer_in(): how far the clock must move for the earliest timer to fire (0 if one is
  /// due already), or nullopt if no job is delayed: exact, so with a ManualClock one advance by
  /// this amount and run_until_idle() run the next delayed job (a retry, a delay, a schedule's
  /// run, a lease sweep), and a loop of the two replays a whole scenario in virtual time.
  [[nodiscard]] std::optional<Duration> next_timer_in();

  /// state(id) asks every queue where job `id` is (see Queue::state); cold.
  [[nodiscard]] JobState state(JobId id);
  /// batch(options): a new batch of jobs (job_batch.hpp): add jobs of any queue through it,
  /// seal() it, and its on_complete and on_success fire exactly once. Error(shutting_down) once
  /// shutdown began.
  [[nodiscard]] JobBatch batch(JobBatchOptions options = {});

  /// explain(id) says why job `id` has not started, in whichever queue holds it (see
  /// Queue::explain); Holdup::none with status unknown when no queue knows it. Cold.
  [[nodiscard]] Explanation explain(JobId id);
  /// metrics() is every queue's Queue::metrics(), in declaration order, with the time it was
  /// taken: what an exposition (rail::prometheus, rail/metrics_json.hpp) or a dashboard reads.
  [[nodiscard]] EngineMetrics metrics();
  /// cancel(id) cancels job `id` in whichever queue holds it (see Queue::cancel); cold.
  bool cancel(JobId id);

  /// shutdown(grace) stops accepting adds (they answer AddStatus::shutting_down), waits for the
  /// adds already past that check on other threads (up to max(grace, 1 s): only an observer of
  /// an add that blocks takes longer; detail/add_gate.hpp), stops workers from starting new jobs,
  /// waits up to `grace` (real time) for running handlers, and reports what was left. Idempotent: a
  /// second call reports again without waiting. A negative grace is Error(invalid_option).
  /// Observers may still be called after it returns, until the engine is destroyed: the timer
  /// keeps time, so a delayed job still comes due (retry_due; it then waits, as no worker starts
  /// it, unless take_leftovers() took it), a handler that outlived `grace` may still lapse
  /// (stalled) or end, and DLQ alerts may fire. Only the destructor guarantees no further
  /// calls: whatever an observer captures must outlive the engine.
  ShutdownReport shutdown(Duration grace = std::chrono::seconds(30));

 private:
  friend class Subscription;  // shares life_
  /// declare(name, options, ops, result, format): declare_queue for the payload type of `ops`
  /// and the result type `result` (printed by `format`; null for void).
  detail::QueueFront* declare(std::string_view name, QueueOptions options,
                              const detail::PayloadOps& ops, const std::type_info& result,
                              std::string (*format)(const void*));
  /// find(name, payload, result): queue<T, R>(name)'s lookup and type checks.
  detail::QueueFront* find(std::string_view name, const std::type_info& payload,
                           const std::type_info& result);
  ShutdownReport collect_leftovers();
  void stop_timer_thread();
  /// join_workers_abandoning(): the destructor joins the workers while telling the waiters of
  /// jobs that will never start, so that a handler waiting for one returns.
  void join_workers_abandoning() noexcept;
  /// account_for_dropped(shut_down): the destructor's report of the jobs it drops (see ~Engine).
  void account_for_dropped(bool shut_down) noexcept;

  std::unique_ptr<detail::EngineCore> core_;
  std::unique_ptr<detail::EngineState> state_;  // the queues, the timer thread (src/engine.cpp)
  const std::shared_ptr<detail::EngineLife> life_;
};

}  // namespace rail
