// EngineCore: see include/rail/detail/engine_core.hpp (its cold, compiled parts).
#include "rail/detail/engine_core.hpp"

#include <algorithm>
#include <thread>

#include "rail/detail/worker_pool.hpp"

namespace rail::detail {

EngineCore::EngineCore(const EngineOptions& options)
    : clock_(options.clock ? *options.clock : TscClock::instance()),
      mode_(options.mode),
      seed_(options.seed),
      pool_size_(options.workers != 0 ? options.workers
                                      : std::max(1u, std::thread::hardware_concurrency())),
      wheel_(options.timer_tick.count(), clock_.now().time_since_epoch().count()) {}

EngineCore::~EngineCore() = default;  // WorkerPool is complete here

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
    gate.limits().set_concurrency(options.concurrency);
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
                  "with Engine::downstream(name, options)");
}

DownstreamGate* EngineCore::find_downstream(std::string_view name) {
  std::lock_guard lock(downstream_mu_);
  auto it = downstreams_.find(name);
  return it == downstreams_.end() ? nullptr : it->second.get();
}

}  // namespace rail::detail
