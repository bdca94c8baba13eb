// EngineCore: the parts of an Engine that its queues call back into — clock, job ids, the
// accepting flag, observers, the queue / shared-pool / downstream registries, and the timing
// wheel with its owner thread — kept apart from Engine so that the typed queue implementation can
// use them without seeing the whole public class (QueueBase is what it sees of each queue).
//
// Guarantees: job ids are unique for the engine's life; once accepting() reads false it stays
// false; no observer and no user callback runs while any thread holds the wheel (events raised
// by the wheel's owner are delivered right after it lets go, in order); a timer never fires
// before its deadline.
//
// Observers: an EventBus (event_bus.hpp) whose owner lock is the wheel's: events raised by the
// wheel's owner wait in it until the wheel is released.
//
// Timer ownership: the wheel is single-owner (rail::detail::TimingWheel): whoever holds wheel_mu_
// owns it. In threaded mode that is the timer thread, or a worker between two batches that finds
// a timer due (poll_timers): at full load the timer thread waits for a core like everyone else,
// and a 10 ms backoff would fire milliseconds late, while a worker is on a core already. Workers
// only try_lock, so they never wait for the wheel. In inline mode the thread calling
// run_until_idle() or advancing the ManualClock owns it. Producers never take the lock: they hand
// slots to the wheel through each queue's timer inbox (an MPMC ring) and signal_timer().
//
// Shutdown: Engine stops accepting (stop_accepting), stops and joins the queues' workers and the
// shared pool, then the timer thread (its loop ends on `stop`); settle_timers() waits out a
// firing in progress. Queues are destroyed before the core, so the gates and the wheel outlive
// every queue that points at them.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <typeindex>
#include <utility>
#include <vector>

#include "rail/add_receipt.hpp"
#include "rail/clock.hpp"
#include "rail/detail/batch_state.hpp"
#include "rail/detail/deadline.hpp"
#include "rail/detail/downstream_gate.hpp"
#include "rail/detail/event_bus.hpp"
#include "rail/detail/name_table.hpp"
#include "rail/detail/scoped_value.hpp"
#include "rail/detail/timing_wheel.hpp"
#include "rail/error.hpp"
#include "rail/event.hpp"
#include "rail/explanation.hpp"
#include "rail/job_state.hpp"
#include "rail/metrics.hpp"
#include "rail/options.hpp"
#include "rail/shutdown_report.hpp"

namespace rail::detail {

using Wheel = TimingWheel<>;

/// QueueBase: what the engine needs of a queue whatever its payload type.
class QueueBase {
 public:
  virtual ~QueueBase() = default;
  [[nodiscard]] virtual const std::string& name() const noexcept = 0;
  [[nodiscard]] virtual std::type_index payload_type() const noexcept = 0;
  /// drain_timer_inbox(wheel, now): link every slot handed to the timer since the last call.
  virtual void drain_timer_inbox(Wheel& wheel) noexcept = 0;
  /// fire(slot, now, wheel): slot's timer came due (or may have: debounce moves deadlines).
  virtual void fire(std::uint32_t slot, std::int64_t now_ns, Wheel& wheel) noexcept = 0;
  /// run_ready(max): inline mode: run up to max ready jobs on this thread; returns how many.
  virtual std::size_t run_ready(std::size_t max) = 0;
  /// stop_workers(): workers finish their current job and exit; join_workers() waits for them.
  virtual void stop_workers() noexcept = 0;
  virtual void join_workers() noexcept = 0;
  /// close_completions(): at teardown, after join_workers: Completions still out (Job::defer)
  /// touch the queue no more.
  virtual void close_completions() noexcept = 0;
  [[nodiscard]] virtual QueueCounts counts() const noexcept = 0;
  /// metrics(): Queue::metrics, type-erased for Engine::metrics.
  [[nodiscard]] virtual QueueMetrics metrics() = 0;
  [[nodiscard]] virtual bool idle() const noexcept = 0;
  /// cancel_job(id) / job_state(id): Queue::cancel / Queue::state, type-erased for Engine.
  virtual bool cancel_job(std::uint64_t id) = 0;
  [[nodiscard]] virtual JobState job_state(std::uint64_t id) const = 0;
  /// explain_job(id): Queue::explain, type-erased for Engine::explain.
  [[nodiscard]] virtual Explanation explain_job(std::uint64_t id) const = 0;
  /// sweep_inline(now, wheel): inline mode only, as the wheel's owner: check leases and expired
  /// jobs (threaded engines use a wheel timer).
  virtual void sweep_inline(std::int64_t now_ns, Wheel& wheel) = 0;
  /// collect_leftovers(report): append every unfinished job (cold: scans all slots).
  virtual void collect_leftovers(ShutdownReport& report) const = 0;
  /// abandon_unstarted(dropped): after shutdown, the waiters of jobs that will never start hear
  /// so; `dropped`: the engine is being destroyed, and the jobs with it.
  virtual void abandon_unstarted(bool dropped) = 0;
  /// close_waiters(): at teardown, before the queue is destroyed: every waiter still registered
  /// hears that the engine is gone, and no handle touches the queue again (EndTracker::close).
  virtual void close_waiters() noexcept = 0;
};

class EngineCore;
class WorkerPool;
/// run_inline(core): Engine::run_until_idle's loop (inline mode; the caller checked it): fires
/// due timers and runs ready jobs until neither is left; returns how many jobs ran.
std::size_t run_inline(EngineCore& core);

/// current_delivery(): the queue whose job this thread is delivering (from the start of a
/// delivery to its end, handler and events included), or null. Calls that wait for jobs to end
/// (wait_idle, shutdown) use it not to wait for the caller itself.
inline const QueueBase*& current_delivery() noexcept {
  thread_local const QueueBase* queue = nullptr;
  return queue;
}
/// current_add(): the queue whose new job this thread holds while the observers of its `added`
/// (or `redriven`) event run: the job is published when they return, so a wait for the queue
/// from one of them would wait for itself.
inline const QueueBase*& current_add() noexcept {
  thread_local const QueueBase* queue = nullptr;
  return queue;
}

class EngineCore {
 public:
  static constexpr std::size_t kMaxQueues = 256;

  explicit EngineCore(const EngineOptions& options);
  ~EngineCore();
  EngineCore(const EngineCore&) = delete;
  EngineCore& operator=(const EngineCore&) = delete;

  [[nodiscard]] Clock& clock() const noexcept { return clock_; }
  [[nodiscard]] std::int64_t now_ns() const noexcept {
    return clock_.now().time_since_epoch().count();
  }
  [[nodiscard]] Mode mode() const noexcept { return mode_; }
  [[nodiscard]] std::uint64_t seed() const noexcept { return seed_; }
  [[nodiscard]] NameTable& names() noexcept { return names_; }

  // --- batches (Engine::batch; cold: created on first use) -------------------------------------
  /// batches(): the engine's batch registry, built on first use.
  [[nodiscard]] BatchRegistry& batches() {
    const std::lock_guard lock(batches_mu_);
    if (!batches_) batches_ = std::make_shared<BatchRegistry>();
    return *batches_;
  }
  /// batches_if_any(): the registry, or null while no batch was made.
  [[nodiscard]] std::shared_ptr<BatchRegistry> batches_if_any() const {
    const std::lock_guard lock(batches_mu_);
    return batches_;
  }

  /// next_ids(n): n consecutive job ids, unique in the engine. A thread takes them from a block
  /// of kIdBlock ids it reserved with one RMW of the counter, so producers on different threads
  /// do not all write the counter's line for every job: ids rise per thread, and across threads
  /// they follow no add order. n beyond what the block holds refills it; kIdBlock or more come
  /// straight from the counter, and retire the block.
  static constexpr std::uint64_t kIdBlock = 256;
  [[nodiscard]] std::uint64_t next_ids(std::uint64_t n = 1) noexcept {
    IdBlock& b = id_block();
    // relaxed: see skip_ids_past.
    if (b.engine != serial_ || b.epoch != id_epoch_.load(std::memory_order_relaxed) ||
        b.end - b.next < n) [[unlikely]]
      return refill_ids(b, n);
    const std::uint64_t first = b.next;
    b.next += n;
    return first;
  }
  /// skip_ids_past(id): no id handed out from now on is `id` or below (a DLQ journal's restored
  /// entries keep their ids): moves the counter past it and retires every thread's block. A
  /// thread taking an id from its old block at that very moment may still get one below it.
  void skip_ids_past(std::uint64_t id) noexcept;

  /// accepting(): false once shutdown began. acquire pairs with stop_accepting()'s release so a
  /// producer that sees false also sees the shutdown's earlier writes.
  [[nodiscard]] bool accepting() const noexcept {
    return accepting_.load(std::memory_order_acquire);
  }
  void stop_accepting() noexcept { accepting_.store(false, std::memory_order_release); }

  // --- observers -------------------------------------------------------------------------------
  [[nodiscard]] EventBus& events() noexcept { return bus_; }
  [[nodiscard]] const EventBus& events() const noexcept { return bus_; }
  [[nodiscard]] bool observed() const noexcept { return bus_.any(); }
  /// emit(e): delivers e to every observer, with no engine lock held: while this thread owns the
  /// wheel (timers fire, leases lapse) the event waits in the bus until the wheel is released,
  /// so an observer may call back into the engine (next_timer_in, cancel, state).
  void emit(const Event& e) const noexcept {
    if (owns_wheel()) {
      bus_.defer(e);
      return;
    }
    bus_.deliver(e);
  }

  // --- queues ----------------------------------------------------------------------------------
  std::uint16_t register_queue(QueueBase* q) {
    std::size_t n = queue_count_.load(std::memory_order_relaxed);
    if (n == kMaxQueues)
      throw Error(ErrorCode::capacity,
                  "an engine holds at most " + std::to_string(kMaxQueues) + " queues");
    queues_[n] = q;
    // release: the timer thread's acquire load of the count sees a fully built queue.
    queue_count_.store(n + 1, std::memory_order_release);
    return static_cast<std::uint16_t>(n);
  }
  [[nodiscard]] std::size_t queue_count() const noexcept {
    return queue_count_.load(std::memory_order_acquire);
  }
  [[nodiscard]] QueueBase* queue_at(std::size_t i) const noexcept { return queues_[i]; }

  // --- the shared worker pool (cold: created under pool_mu_) -----------------------------------
  /// shared_pool(): the engine's shared pool, started by the first queue that processes on it;
  /// throws Error(resources) if its threads cannot be created (then the next call tries again).
  WorkerPool& shared_pool();
  /// pool_size(): the shared pool's threads (EngineOptions.workers, or the core count).
  [[nodiscard]] std::uint32_t pool_size() const noexcept { return pool_size_; }
  /// stop_shared_pool() / join_shared_pool(): Engine::shutdown and ~Engine, after every queue
  /// was stopped; no-ops when no queue used the pool. A pool that a process() starts after
  /// stop_shared_pool (shutdown waits for handlers, and one may call it) starts stopped, with no
  /// thread, as a stopped queue's workers run nothing: the join that follows never waits for it.
  void stop_shared_pool() noexcept;
  void join_shared_pool() noexcept;

  // --- downstreams (cold: declared and looked up under downstream_mu_) -------------------------
  /// declare_downstream(name, options): downstream `name` with these limits: new, or an existing
  /// one whose limits change at once (Engine::declare_downstream). Options validated by the caller.
  DownstreamGate& declare_downstream(std::string_view name, const DownstreamOptions& options);
  /// downstream(name, queue): the gate queue `queue` names; Error(invalid_option) if undeclared.
  DownstreamGate& downstream(std::string_view name, std::string_view queue);
  /// find_downstream(name): the gate, or null.
  DownstreamGate* find_downstream(std::string_view name);

  // --- timers ----------------------------------------------------------------------------------
  /// owns_wheel(): this thread holds the wheel (it is inside with_wheel). User code reached from
  /// there (a DLQ alert callback, say) must not wait for the wheel again.
  [[nodiscard]] bool owns_wheel() const noexcept { return wheel_owner() == this; }

  /// in_timer_context(): this thread fires timers (the timer thread, or a worker polling them)
  /// or delivers what they raised. A call that waits for jobs to move (wait_idle) would wait for
  /// this very thread.
  [[nodiscard]] bool in_timer_context() const noexcept {
    return owns_wheel() || EventBus::delivering() || timer_thread_mark();
  }

  /// after_wheel(f): runs a user callback now, or, while this thread owns the wheel, right after
  /// it releases it (with the deferred events, in order), so that user code never runs with the
  /// wheel held.
  void after_wheel(std::function<void()> f) const {
    if (!owns_wheel()) {
      f();
      return;
    }
    bus_.defer_call(std::move(f));
  }

  /// with_wheel(f): runs f(wheel) as the wheel's owner, then delivers the events f raised.
  /// Cold paths (cancel, take_leftovers) use it to unlink timers; re-entered from the owning
  /// thread it returns nullopt without running f (the caller takes its lock-free path).
  template <class F>
  auto with_wheel(F&& f) -> std::optional<decltype(f(std::declval<Wheel&>()))> {
    if (owns_wheel()) return std::nullopt;
    std::unique_lock lock(wheel_mu_);
    return owned(lock, std::forward<F>(f));
  }

  /// await_deliveries(deadline): waits until the events raised under the wheel before the call
  /// (a lapse, a firing) have reached the observers; false if `deadline` passed first. The owner
  /// delivers them only after it lets the wheel go, and meanwhile the counts may already show
  /// the jobs ended: wait_idle() calls this so that "idle" also means "observed".
  [[nodiscard]] bool await_deliveries(std::chrono::steady_clock::time_point deadline) {
    return bus_.await_deliveries(deadline);
  }

  /// process_timers(): link newly delayed slots, then fire everything due at the clock's now.
  /// Returns the number of timers fired.
  std::size_t process_timers() {
    return with_wheel([&](Wheel&) { return process_timers_locked(); }).value_or(0);
  }
  /// earliest_timer_ns(): the earliest pending timer's deadline, exact (Engine::next_timer_in).
  [[nodiscard]] std::optional<std::int64_t> earliest_timer_ns() {
    return read_wheel([](const Wheel& wheel) { return wheel.earliest_deadline_ns(); });
  }

  /// prepare_worker_thread(): a worker thread's first step. The delivery buffer is a thread_local
  /// with a destructor, and glibc allocates to register that destructor on the thread's first
  /// use of it: building it here keeps that allocation out of the steady state (it happened the
  /// first time a worker fired timers or asked the wheel anything, mid-run).
  static void prepare_worker_thread() noexcept { EventBus::prepare_thread(); }

  /// poll_timers(now): a worker's check between batches, with its latest clock reading. Cheap when
  /// nothing is due (two relaxed loads); otherwise processes the wheel unless its owner is busy.
  void poll_timers(std::int64_t now) {
    // relaxed: both are hints; the work happens under wheel_mu_, which orders it.
    if (now < next_due_ns_.load(std::memory_order_relaxed) &&
        timer_signal_.load(std::memory_order_relaxed) == 0)
      return;
    if (owns_wheel()) return;
    std::unique_lock lock(wheel_mu_, std::try_to_lock);
    if (!lock.owns_lock()) return;  // the timer thread or another worker is on it now
    // The signal is left set: the timer thread must still wake to recompute its own deadline,
    // which may now be later than the earliest timer this call linked.
    owned(lock, [&](Wheel&) { return process_timers_locked(); });
  }

  /// signal_timer(): a slot was handed to the timer (or time moved). Producers call it after
  /// pushing to a timer inbox; the exchange makes repeated signals between two timer-thread
  /// passes cost one RMW each and no syscall.
  void signal_timer() noexcept {
    // acq_rel: the release half publishes the inbox push to the timer thread's exchange(0).
    if (timer_signal_.exchange(1, std::memory_order_acq_rel) == 0) {
      std::lock_guard lock(timer_mu_);
      timer_cv_.notify_one();
    }
  }

  /// settle_timers(): waits for a firing in progress (the timer thread's, or a worker polling
  /// timers) to finish. A firing counts its job into `waiting`, pushes it, and only then counts
  /// it out of `delayed` (counts() over-counts, never under-counts): a worker may end the job in
  /// between, and without this a shutdown that joined every worker could return while the
  /// timer thread still owes that count (engine_stress_test saw `delayed` read 1 after it).
  /// From the wheel's owner (a callback inside a firing) there is nothing to wait for.
  void settle_timers() {
    (void)with_wheel([](Wheel&) { return true; });
  }

  /// timer_loop(stop): the timer thread's body (src/engine_core.cpp).
  void timer_loop(const std::atomic<bool>& stop);

 private:
  /// read_wheel(f): f(wheel) once the slots in transit to it are linked; read only from inside a
  /// firing (a callback on the wheel's owner), where the inboxes are the owner's to drain.
  template <class F>
  auto read_wheel(F&& f) -> decltype(f(std::declval<Wheel&>())) {
    if (owns_wheel()) return f(wheel_);
    return *with_wheel([&](Wheel& wheel) {
      const std::size_t n = queue_count();
      for (std::size_t i = 0; i < n; ++i)
        queues_[i]->drain_timer_inbox(wheel);
      return f(wheel);
    });
  }

  static bool& timer_thread_mark() noexcept {
    thread_local bool mark = false;
    return mark;
  }

  static const EngineCore*& wheel_owner() noexcept {
    thread_local const EngineCore* owner = nullptr;
    return owner;
  }

  /// owned(lock, f): runs f as the owner of the locked wheel, releases it, then delivers the
  /// events f deferred (EventBus::release_and_deliver).
  template <class F>
  auto owned(std::unique_lock<std::mutex>& lock, F&& f) -> decltype(f(std::declval<Wheel&>())) {
    // The owner mark is cleared however f leaves (an allocation failure in a cold path's f, say):
    // a stale mark would defer this thread's events forever, without the lock.
    auto result = [&] {
      const ScopedValue<const EngineCore*> owning(wheel_owner(), this);
      return f(wheel_);
    }();
    bus_.release_and_deliver(lock);
    return result;
  }

  /// process_timers_locked(): the wheel's owner links what the queues' inboxes hold, fires
  /// what is due and, inline, sweeps leases (src/engine_core.cpp).
  std::size_t process_timers_locked();

  Clock& clock_;
  Mode mode_;
  std::uint64_t seed_;
  NameTable names_;
  mutable std::mutex batches_mu_;
  std::shared_ptr<BatchRegistry> batches_;  // shared: a batch outliving the engine holds it
  /// IdBlock: the ids a thread reserved: [next, end) of engine `engine` (its serial) as of
  /// id epoch `epoch`.
  struct IdBlock {
    std::uint64_t engine = 0;
    std::uint64_t epoch = 0;
    std::uint64_t next = 0;
    std::uint64_t end = 0;
  };
  static IdBlock& id_block() noexcept {
    thread_local IdBlock block;
    return block;
  }
  std::uint64_t refill_ids(IdBlock& b, std::uint64_t n) noexcept;

  static std::uint64_t next_serial() noexcept;
  const std::uint64_t serial_ = next_serial();  // this engine's among the process's, from 1
  // Ids: the counter (ids from 1; relaxed: ids need uniqueness, not ordering) and the epoch that
  // retires the threads' blocks (skip_ids_past).
  alignas(64) std::atomic<std::uint64_t> next_id_{1};
  std::atomic<std::uint64_t> id_epoch_{0};
  alignas(64) std::atomic<bool> accepting_{true};

  std::array<QueueBase*, kMaxQueues> queues_{};
  std::atomic<std::size_t> queue_count_{0};
  std::uint32_t pool_size_;
  std::mutex pool_mu_;
  std::unique_ptr<WorkerPool> pool_;  // guarded by pool_mu_; never replaced once started
  bool pool_stopped_ = false;         // guarded by pool_mu_: stop_shared_pool() ran
  // Gates live as long as the engine core: queues (destroyed first) point at them.
  std::mutex downstream_mu_;
  std::map<std::string, std::unique_ptr<DownstreamGate>, std::less<>> downstreams_;

  std::mutex wheel_mu_;
  Wheel wheel_;
  mutable EventBus bus_{wheel_mu_};  // emit() is const: raising an event is not a change
  alignas(64) std::atomic<std::uint32_t> timer_signal_{0};
  // When the wheel's earliest timer may fire, as of the last processing; read by every worker
  // between batches, written once per processing: a line of its own.
  alignas(64) std::atomic<std::int64_t> next_due_ns_{std::numeric_limits<std::int64_t>::max()};
  std::mutex timer_mu_;
  std::condition_variable timer_cv_;
};

}  // namespace rail::detail
