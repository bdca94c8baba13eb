// EngineCore: see include/rail/detail/engine_core.hpp (its cold, compiled parts).
#include "rail/detail/engine_core.hpp"

namespace rail::detail {

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
