// Engine (engine.hpp): construction and validation of EngineOptions, downstream declarations,
// lookups, shutdown and the destructor's teardown.
#include "rail/engine.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <thread>

#include "rail/detail/add_gate.hpp"
#include "rail/detail/deadline.hpp"
#include "rail/detail/engine_core.hpp"
#include "rail/detail/footprint.hpp"
#include "rail/detail/queue_impl.hpp"

namespace rail {

namespace detail {

/// EngineLife: whether an engine is still there, for what may outlive it (Subscription). A
/// caller into the engine holds `mu` shared; the engine's destructor takes it exclusively, after
/// its last event, to clear `engine`.
struct EngineLife {
  std::shared_mutex mu;
  Engine* engine = nullptr;  // under mu
};

/// EngineState: the engine's queues by name and its timer thread.
struct EngineState {
  std::mutex mu;
  std::map<std::string, std::unique_ptr<QueueBase>, std::less<>> queues;  // under mu
  bool accepting_declarations = true;                                     // under mu
  std::atomic<bool> timer_stop{false};
  std::thread timer_thread;
  std::uint64_t clock_subscription = 0;
  std::function<void(const ShutdownReport&)> on_destroy;  // EngineOptions::on_destroy
};

}  // namespace detail

Engine::Engine(EngineOptions options)
    : state_(std::make_unique<detail::EngineState>()),
      life_(std::make_shared<detail::EngineLife>()) {
  // A tick only sizes the wheel's buckets (a timer fires at its deadline whatever the tick), but
  // outside this range the wheel works against its owner: under 10 us its levels span little
  // (4.3 s in all at 1 ns), so the timer thread wakes at a cascade every few milliseconds for a
  // far timer; over a second, every timer due within the tick lands in the current tick's
  // sorted list, and each insert there is linear.
  if (options.timer_tick < std::chrono::microseconds(10) ||
      options.timer_tick > std::chrono::seconds(1))
    throw Error(ErrorCode::invalid_option,
                "EngineOptions.timer_tick is " + std::to_string(options.timer_tick.count()) +
                    " ns; expected 10 us .. 1 s (1 ms is a good default)");
  if (options.workers == 0u || options.workers > WorkerOptions::kMaxConcurrency)
    throw Error(ErrorCode::invalid_option, "EngineOptions.workers is " +
                                               std::to_string(*options.workers) +
                                               "; expected 1 .. WorkerOptions::kMaxConcurrency (" +
                                               std::to_string(WorkerOptions::kMaxConcurrency) +
                                               ") shared pool threads, or unset for one per core");
  core_ = std::make_unique<detail::EngineCore>(options);
  state_->on_destroy = std::move(options.on_destroy);
  life_->engine = this;  // not shared yet: no Subscription exists
  Clock& clock = core_->clock();
  if (clock.is_manual()) {
    // Inline: the advancing thread fires what became due (jobs move to ready; handlers run in
    // run_until_idle). Threaded: the timer thread is woken to do the same.
    auto* manual = static_cast<ManualClock*>(&clock);
    state_->clock_subscription = manual->subscribe([this](TimePoint) {
      if (core_->mode() == Mode::inlined) {
        core_->process_timers();
      } else {
        core_->signal_timer();
      }
    });
  }
  if (core_->mode() == Mode::threaded) {
    state_->timer_thread = std::thread([this] { core_->timer_loop(state_->timer_stop); });
  }
}

Engine::~Engine() {
  if (state_->clock_subscription != 0)
    static_cast<ManualClock&>(core_->clock()).unsubscribe(state_->clock_subscription);
  core_->stop_accepting();
  // No batch callback from here on: what they capture is often destroyed before the engine.
  if (auto batches = core_->batches_if_any()) batches->close();
  bool shut_down;
  {
    std::lock_guard lock(state_->mu);
    shut_down = !state_->accepting_declarations;
    state_->accepting_declarations = false;
  }
  for (auto& [name, q] : state_->queues)
    q->stop_workers();
  core_->stop_shared_pool();
  join_workers_abandoning();
  // Before the timer thread stops: a completer inside may still hand a retry to the wheel.
  for (auto& [name, q] : state_->queues)
    q->close_completions();
  stop_timer_thread();
  account_for_dropped(shut_down);
  for (auto& [name, q] : state_->queues)
    q->close_waiters();
  {
    // No observer is called from here on: a Subscription reset from now on finds no engine.
    std::unique_lock lock(life_->mu);
    life_->engine = nullptr;
  }
  state_->queues.clear();  // destroys the payloads of whatever was left
}

void Engine::account_for_dropped(bool shut_down) noexcept {
  ShutdownReport dropped;
  try {
    for (auto& [name, q] : state_->queues)
      q->collect_leftovers(dropped);
  } catch (...) {  // no memory for the report: say so, as the jobs go anyway
    std::fputs("rail: Engine destroyed with jobs that never started; no memory to list them\n",
               stderr);
    return;
  }
  // Every handler has returned: what the scan calls still running is a delivery handed to a
  // Completion that never reported (Job::defer); it is dropped too. No events: an observer often
  // captures what C++ destroys before the engine (members declared after it), so the destructor
  // calls no observer; on_destroy is the caller's explicit choice.
  if (state_->on_destroy) {
    try {
      state_->on_destroy(dropped);
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "rail: EngineOptions::on_destroy threw (%s); it must not throw\n",
                   ex.what());
    } catch (...) {
      std::fputs("rail: EngineOptions::on_destroy threw; it must not throw\n", stderr);
    }
    return;
  }
  if (shut_down || dropped.clean()) return;
  std::vector<const LeftoverJob*> all;
  for (const auto* list : {&dropped.not_started, &dropped.still_running})
    for (const LeftoverJob& j : *list)
      all.push_back(&j);
  std::string line = "rail: Engine destroyed without shutdown(): " + std::to_string(all.size()) +
                     " unfinished job(s) dropped (";
  constexpr std::size_t kListed = 10;
  for (std::size_t i = 0; i < all.size() && i < kListed; ++i)
    line += (i ? ", " : "") + std::string("job ") + std::to_string(all[i]->id) + " '" +
            all[i]->name + "' of queue '" + all[i]->queue + "'";
  if (all.size() > kListed) line += ", ...";
  line +=
      "); call Engine::shutdown() and Queue::take_leftovers() to keep them, or set "
      "EngineOptions::on_destroy to receive them";
  std::fprintf(stderr, "%s\n", line.c_str());
}

void Engine::join_workers_abandoning() noexcept {
  auto abandon_all = [this] {
    try {
      for (auto& [name, q] : state_->queues)
        q->abandon_unstarted(true);
    } catch (...) {  // no memory for a waiter's message: the next pass tries again
    }
  };
  abandon_all();
  // A running handler may put its job back to waiting or delayed after that pass (a retry, a
  // pushback, a lapse on the timer thread), and a handler that waits for such a job would keep
  // its worker from returning: while handlers run, the waiters of unstarted jobs hear so again
  // every millisecond until every worker is joined. Workers re-check the stop after activating
  // a job, so once none is active none will run a handler.
  bool running = false;
  for (auto& [name, q] : state_->queues)
    running = running || q->counts().active > 0;
  std::atomic<bool> joined{false};
  std::thread sweeper;
  if (running) {
    try {
      sweeper = std::thread([&] {
        // acquire: pairs with the release store below (nothing to publish; it ends the loop).
        while (!joined.load(std::memory_order_acquire)) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
          abandon_all();
        }
      });
    } catch (...) {  // no thread: the one pass above is all (a waiting handler may then hang)
    }
  }
  for (auto& [name, q] : state_->queues)
    q->join_workers();
  core_->join_shared_pool();
  joined.store(true, std::memory_order_release);
  if (sweeper.joinable()) sweeper.join();
}

void Engine::stop_timer_thread() {
  state_->timer_stop.store(true, std::memory_order_release);  // timer_loop's acquire load sees it
  core_->signal_timer();
  if (state_->timer_thread.joinable()) state_->timer_thread.join();
}

ObserverId Engine::on_event(Observer observer) {
  return core_->events().add(std::move(observer));
}
bool Engine::remove_observer(ObserverId id) noexcept {
  return core_->events().remove(id);
}
std::size_t Engine::observer_count() const {
  return core_->events().size();
}
std::uint64_t Engine::observer_errors() const noexcept {
  return core_->events().errors();
}
Clock& Engine::clock() const noexcept {
  return core_->clock();
}
Mode Engine::mode() const noexcept {
  return core_->mode();
}

detail::QueueFront* Engine::declare(std::string_view name, QueueOptions options,
                                    const detail::PayloadOps& ops, const std::type_info& result,
                                    std::string (*format)(const void*)) {
  detail::validate_queue_options(options, name);
  detail::check_queue_footprint(name, options.capacity, ops.size, options.priorities);
  std::lock_guard lock(state_->mu);
  if (!state_->accepting_declarations)
    throw Error(ErrorCode::shutting_down,
                "queue '" + std::string(name) + "' declared after shutdown began");
  if (state_->queues.count(std::string(name)))
    throw Error(ErrorCode::queue_exists,
                "queue '" + std::string(name) +
                    "' is already declared; declare it once, then look it up with queue<T>(name)");
  const std::size_t capacity = options.capacity;
  const std::uint32_t priorities = options.priorities;
  // The entry first: once built, the queue is registered with the engine's timers, so storing
  // it must not be able to fail (and leave the engine a pointer to a destroyed queue).
  auto entry = state_->queues.emplace(std::string(name), nullptr).first;
  detail::QueueImpl* queue = nullptr;
  try {
    auto impl =
        std::make_unique<detail::QueueImpl>(*core_, std::string(name), std::move(options), ops);
    if (result != typeid(void)) impl->declare_result(result, format);
    queue = impl.get();
    entry->second = std::move(impl);
  } catch (const std::bad_alloc&) {
    state_->queues.erase(entry);
    detail::throw_queue_allocation_failed(name, capacity, ops.size, priorities);
  } catch (...) {
    state_->queues.erase(entry);
    throw;
  }
  return queue;
}

detail::QueueFront* Engine::find(std::string_view name, const std::type_info& payload,
                                 const std::type_info& result) {
  std::lock_guard lock(state_->mu);
  auto it = state_->queues.find(std::string(name));
  if (it == state_->queues.end())
    throw Error(ErrorCode::unknown_queue,
                "no queue named '" + std::string(name) +
                    "'; declare it first with declare_queue<T>(name, options)");
  if (it->second->payload_type() != std::type_index(payload))
    throw Error(ErrorCode::type_mismatch,
                "queue '" + std::string(name) + "' holds payloads of another type than requested");
  auto* impl = static_cast<detail::QueueImpl*>(it->second.get());
  if (impl->result_type() != std::type_index(result))
    throw Error(ErrorCode::type_mismatch,
                "queue '" + std::string(name) +
                    "' was declared with another result type than requested (queue<T, R>: R "
                    "is the type its handler returns, void for none)");
  return impl;
}

Downstream Engine::declare_downstream(std::string_view name, const DownstreamOptions& options) {
  detail::validate_name("DownstreamOptions", name);
  validate(options, name);
  if (!core_->accepting())
    throw Error(ErrorCode::shutting_down,
                "downstream '" + std::string(name) + "' declared after shutdown began");
  return Downstream(core_->declare_downstream(name, options), *core_);
}

Downstream Engine::downstream(std::string_view name) {
  if (detail::DownstreamGate* gate = core_->find_downstream(name)) return Downstream(*gate, *core_);
  throw Error(ErrorCode::unknown_downstream,
              "no downstream named '" + std::string(name) +
                  "'; declare it first with downstream(name, options)");
}

std::size_t Engine::run_until_idle() {
  if (core_->mode() != Mode::inlined)
    throw Error(ErrorCode::wrong_mode,
                "run_until_idle() runs jobs on the caller's thread and needs an engine built with "
                "EngineOptions.mode = Mode::inlined; this engine runs its own worker threads");
  return detail::run_inline(*core_);
}

namespace detail {
std::size_t run_inline(EngineCore& core) {
  std::size_t ran = 0;
  for (;;) {
    core.process_timers();
    std::size_t round = 0;
    std::size_t n = core.queue_count();
    for (std::size_t i = 0; i < n; ++i)
      round += core.queue_at(i)->run_ready(64);
    ran += round;
    if (round == 0 && core.process_timers() == 0) {
      // Nothing ran and nothing became due: but a timer fired just now may have made a job ready.
      std::size_t again = 0;
      for (std::size_t i = 0; i < n; ++i)
        again += core.queue_at(i)->run_ready(64);
      ran += again;
      if (again == 0) return ran;
    }
  }
}
}  // namespace detail

std::optional<Duration> Engine::next_timer_in() {
  auto next = core_->earliest_timer_ns();
  if (!next) return std::nullopt;
  std::int64_t d = *next - core_->now_ns();
  return Duration{d > 0 ? d : 0};
}

// state() and cancel() walk the core's registry, not state_->queues: no engine lock is held while a
// queue emits (an observer of `cancelled` may call state() or cancel() again), and queues are
// never removed before the engine dies.
JobState Engine::state(JobId id) {
  const std::size_t n = core_->queue_count();
  for (std::size_t i = 0; i < n; ++i) {
    JobState s = core_->queue_at(i)->job_state(id);
    if (s.status != JobStatus::unknown) return s;
  }
  return JobState{};
}

EngineMetrics Engine::metrics() {
  EngineMetrics m;
  m.at = core_->clock().now();
  const std::size_t n = core_->queue_count();
  m.queues.reserve(n);
  for (std::size_t i = 0; i < n; ++i)
    m.queues.push_back(core_->queue_at(i)->metrics());
  return m;
}

Explanation Engine::explain(JobId id) {
  const std::size_t n = core_->queue_count();
  for (std::size_t i = 0; i < n; ++i) {
    Explanation e = core_->queue_at(i)->explain_job(id);
    if (e.state.status != JobStatus::unknown) return e;
  }
  Explanation none;
  none.text = "unknown: no queue holds job " + std::to_string(id) + " or remembers it";
  return none;
}

bool Engine::cancel(JobId id) {
  const std::size_t n = core_->queue_count();
  for (std::size_t i = 0; i < n; ++i)
    if (core_->queue_at(i)->cancel_job(id)) return true;
  return false;
}

Subscription Engine::subscribe(Observer observer) {
  return Subscription(*this, on_event(std::move(observer)));
}

Subscription::Subscription(Engine& engine, ObserverId id) noexcept : life_(engine.life_), id_(id) {}

void Subscription::reset() noexcept {
  if (life_ && id_ != ObserverId::none) {
    const std::shared_lock lock(life_->mu);  // the engine cannot go while we remove
    if (life_->engine != nullptr) (void)life_->engine->remove_observer(id_);
  }
  life_.reset();
  id_ = ObserverId::none;
}

JobBatch Engine::batch(JobBatchOptions options) {
  if (!core_->accepting())
    throw Error(ErrorCode::shutting_down,
                "Engine::batch: the engine is shutting down; expected a batch before shutdown()");
  return JobBatch(core_->batches().create(std::move(options), nullptr));
}

ShutdownReport Engine::shutdown(Duration grace) {
  if (grace.count() < 0)
    throw Error(ErrorCode::invalid_option,
                "shutdown grace is " + std::to_string(grace.count()) +
                    " ns; expected 0 (report at once) or more (Duration::max(): wait for every "
                    "handler)");
  core_->stop_accepting();
  // An add that passed its accepting() check publishes its job before the report is collected
  // (else it answers `added` for a job the report and its waiters never hear of). Adds take
  // microseconds; the bound only stops an observer of an add that blocks from holding shutdown.
  (void)detail::wait_for_adders(core_.get(), std::max(grace, Duration{std::chrono::seconds(1)}));
  bool first;
  {
    std::lock_guard lock(state_->mu);
    first = state_->accepting_declarations;
    state_->accepting_declarations = false;
  }
  // A second call reports again without waiting: the first one already gave handlers their grace.
  if (!first) grace = Duration{0};
  for (auto& [name, q] : state_->queues)
    q->stop_workers();
  core_->stop_shared_pool();
  const auto deadline = detail::steady_deadline(grace);  // grace = max: wait for every handler
  // Called from a handler (or an observer on a worker), shutdown does not wait for the caller's
  // own job: it is reported as still running.
  const detail::QueueBase* own = detail::current_delivery();
  auto running = [&] {
    for (auto& [name, q] : state_->queues)
      if (q->counts().active > (q.get() == own ? 1u : 0u)) return true;
    return false;
  };
  while (running() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  core_->settle_timers();  // the counts a firing still owes are in before we report
  ShutdownReport report;
  if (auto batches = core_->batches_if_any()) report.open_batches = batches->open();
  for (auto& [name, q] : state_->queues) {
    q->collect_leftovers(report);
    q->abandon_unstarted(false);  // a handle's wait() on a job left unstarted must not hang
  }
  if (report.still_running.empty()) {
    for (auto& [name, q] : state_->queues)
      q->join_workers();
    core_->join_shared_pool();
  }
  return report;
}

}  // namespace rail
