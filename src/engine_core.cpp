// EngineCore: see include/rail/detail/engine_core.hpp (its cold, compiled parts).
#include "rail/detail/engine_core.hpp"

#include <algorithm>
#include <thread>

#include "rail/detail/worker_pool.hpp"

namespace rail::detail {

std::uint64_t EngineCore::next_serial() noexcept {
  static std::atomic<std::uint64_t> serials{0};
  return serials.fetch_add(1, std::memory_order_relaxed) + 1;  // relaxed: a number
}

EngineCore::EngineCore(const EngineOptions& options)
    : clock_(options.clock ? *options.clock : TscClock::instance()),
      mode_(options.mode),
      seed_(options.seed),
      pool_size_(options.workers.value_or(std::max(1u, std::thread::hardware_concurrency()))),
      wheel_(options.timer_tick.count(), clock_.now().time_since_epoch().count()) {}

EngineCore::~EngineCore() = default;  // WorkerPool is complete here

void EngineCore::timer_loop(const std::atomic<bool>& stop) {
  timer_thread_mark() = true;
  while (!stop.load(std::memory_order_acquire)) {
    std::optional<std::int64_t> next = *with_wheel([&](Wheel& wheel) {
      process_timers_locked();
      return wheel.next_event_ns();
    });
    std::unique_lock lock(timer_mu_);
    auto woken = [&] {
      // acq_rel: consumes a signal and acquires the pushes made before it.
      return timer_signal_.exchange(0, std::memory_order_acq_rel) != 0 ||
             stop.load(std::memory_order_acquire);
    };
    if (!next || clock_.is_manual()) {
      // A manual clock moves only through advance(), which signals us.
      timer_cv_.wait(lock, woken);
    } else {
      const auto wait_ns = timer_wait_ns(*next, now_ns());  // bounded: see deadline.hpp
      if (wait_ns > 0) timer_cv_.wait_for(lock, std::chrono::nanoseconds(wait_ns), woken);
    }
  }
}

std::size_t EngineCore::process_timers_locked() {
  std::size_t n = queue_count();
  for (std::size_t i = 0; i < n; ++i)
    queues_[i]->drain_timer_inbox(wheel_);
  std::int64_t now = now_ns();
  std::size_t fired = wheel_.advance(now, [&](TimerNode& node) {
    queues_[node.tag >> 32]->fire(static_cast<std::uint32_t>(node.tag), now, wheel_);
  });
  if (mode_ == Mode::inlined)
    for (std::size_t i = 0; i < n; ++i)
      queues_[i]->sweep_inline(now, wheel_);
  // relaxed: a hint for poll_timers(); a stale value only makes a worker check early or leave
  // the firing to the timer thread.
  next_due_ns_.store(wheel_.next_event_ns().value_or(std::numeric_limits<std::int64_t>::max()),
                     std::memory_order_relaxed);
  return fired;
}

WorkerPool& EngineCore::shared_pool() {
  const std::lock_guard lock(pool_mu_);
  if (!pool_) {
    auto pool = std::make_unique<WorkerPool>(pool_size_);
    if (pool_stopped_) pool->stop();  // see the header: no thread is started then
    pool->start();  // throws Error(resources): nothing kept, the next call tries again
    pool_ = std::move(pool);
  }
  return *pool_;
}

void EngineCore::stop_shared_pool() noexcept {
  const std::lock_guard lock(pool_mu_);
  pool_stopped_ = true;  // a pool started from now on starts stopped
  if (pool_) pool_->stop();
}

void EngineCore::join_shared_pool() noexcept {
  WorkerPool* pool;
  {
    const std::lock_guard lock(pool_mu_);
    pool = pool_.get();
  }
  if (pool) pool->join();  // not under the lock: a handler on the pool may be starting a queue
}

DownstreamGate& EngineCore::declare_downstream(std::string_view name,
                                               const DownstreamOptions& options) {
  std::lock_guard lock(downstream_mu_);
  const std::int64_t now = now_ns();
  if (auto it = downstreams_.find(name); it != downstreams_.end()) {
    DownstreamGate& gate = *it->second;
    gate.limits().set_rate(options.rate, now);  // the one step that may throw, first
    gate.limits().set_concurrency(options.concurrency.value_or(0));
    gate.changed();
    return gate;
  }
  auto gate = std::make_unique<DownstreamGate>(std::string(name), options, now);
  DownstreamGate& ref = *gate;
  downstreams_.emplace(std::string(name), std::move(gate));
  return ref;
}

DownstreamGate& EngineCore::downstream(std::string_view name, std::string_view queue) {
  if (DownstreamGate* gate = find_downstream(name)) return *gate;
  throw Error(ErrorCode::invalid_option,
              "QueueOptions('" + std::string(queue) + "').downstream is '" + std::string(name) +
                  "', which is not declared; expected the name of a downstream declared first "
                  "with Engine::declare_downstream(name, options)");
}

DownstreamGate* EngineCore::find_downstream(std::string_view name) {
  std::lock_guard lock(downstream_mu_);
  auto it = downstreams_.find(name);
  return it == downstreams_.end() ? nullptr : it->second.get();
}

std::uint64_t EngineCore::refill_ids(IdBlock& b, std::uint64_t n) noexcept {
  // relaxed: ids need uniqueness, not ordering.
  if (n >= kIdBlock) {
    // Past the block: this thread's next ids come from a new one above these (rising per thread).
    b.next = b.end;
    return next_id_.fetch_add(n, std::memory_order_relaxed);
  }
  b.engine = serial_;
  b.epoch = id_epoch_.load(std::memory_order_relaxed);
  b.next = next_id_.fetch_add(kIdBlock, std::memory_order_relaxed);
  b.end = b.next + kIdBlock;
  const std::uint64_t first = b.next;
  b.next += n;
  return first;
}

void EngineCore::skip_ids_past(std::uint64_t id) noexcept {
  // relaxed: the counter only grows; a concurrent add's reservation lands past it either way.
  const std::uint64_t next = next_id_.load(std::memory_order_relaxed);
  if (id >= next) (void)next_id_.fetch_add(id - next + 1, std::memory_order_relaxed);
  // relaxed: a hint to every thread's next take (see the header's caveat).
  id_epoch_.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace rail::detail
