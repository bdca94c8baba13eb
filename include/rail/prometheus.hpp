// rail::prometheus: an engine's metrics for a server that already exposes prometheus-cpp: the
// optional rail::prometheus target, built when Debian's prometheus-cpp-dev is installed. One line
// exposes every queue:
//
//   prometheus::Exposer exposer{"127.0.0.1:9464"};
//   auto rail_metrics = rail::prometheus::collector(engine);
//   exposer.RegisterCollectable(rail_metrics);   // or registry-style: keep rail_metrics alive
//
// Each scrape calls Engine::metrics() and publishes, with a `queue` label, the counters
// (`rail_jobs_completed_total`, ...), the gauges (`rail_jobs_waiting`, `rail_dlq_depth`,
// `rail_lag_seconds`, ...) and the latency histograms (`rail_job_wait_seconds`, ...:
// kExpositionBounds as `le`), named as metrics.hpp's for_each_value / for_each_histogram say.
// Contract: the collector reads the engine on the scraping thread; it must be destroyed (or
// unregistered) before the engine: Collect() on a collector whose engine is gone is a use after
// free, as any reference to the engine would be.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <memory>
#include <vector>

#include "rail/engine.hpp"

namespace rail::prometheus {

/// families(m): the metric families of a snapshot (what Collect() returns), for a caller that
/// serializes or filters them itself.
[[nodiscard]] std::vector<::prometheus::MetricFamily> families(const EngineMetrics& m);

/// Collector: a prometheus::Collectable over one engine.
class Collector final : public ::prometheus::Collectable {
 public:
  explicit Collector(Engine& engine) noexcept : engine_(engine) {}
  /// Collect(): the engine's metrics now (Engine::metrics(): cold, see metrics.hpp).
  [[nodiscard]] std::vector<::prometheus::MetricFamily> Collect() const override;

 private:
  Engine& engine_;
};

/// collector(engine): a Collector to register with an Exposer or hold beside a Registry.
[[nodiscard]] inline std::shared_ptr<Collector> collector(Engine& engine) {
  return std::make_shared<Collector>(engine);
}

}  // namespace rail::prometheus
