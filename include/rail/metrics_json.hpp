// metrics_json: Engine::metrics() as JSON (nlohmann-json), for dashboards and scripts: the
// optional rail::json target (header-only; it links nlohmann-json, which the engine does not).
//
//   {"at_ns": 1234, "queues": [{"queue": "payments",
//     "values": {"jobs_added": 120, ..., "dlq_depth": 3, "lag_seconds": 0.002},
//     "histograms": {"job_wait_seconds": {"count": 117, "sum": 0.41, "max": 0.02,
//                    "p50": 0.0031, "p90": 0.0079, "p99": 0.012, "p999": 0.019,
//                    "buckets": [[1e-06, 0], ..., [300, 117]]}, ...}}]}
//
// Keys are the Prometheus names (metrics.hpp: for_each_value, for_each_histogram) without the
// `rail_` prefix and the `_total` suffix; times are seconds; "buckets" lists [le, cumulative
// count] at kExpositionBounds. The histograms are omitted for a queue without them.
// Threading: plain functions of a snapshot.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "rail/metrics.hpp"

namespace rail {

/// json_key(name): a metric's Prometheus name as metrics_json spells it.
[[nodiscard]] inline std::string json_key(std::string_view name) {
  if (name.starts_with("rail_")) name.remove_prefix(5);
  if (name.ends_with("_total")) name.remove_suffix(6);
  return std::string(name);
}

/// to_json(h): a histogram's count, sum, max, percentiles (seconds) and cumulative buckets.
[[nodiscard]] inline nlohmann::json to_json(const LatencyHistogram& h) {
  const auto s = [](Duration d) { return std::chrono::duration<double>(d).count(); };
  nlohmann::json j{{"count", h.count()},
                   {"sum", s(h.sum())},
                   {"max", s(h.max())},
                   {"p50", s(h.percentile(0.5))},
                   {"p90", s(h.percentile(0.9))},
                   {"p99", s(h.percentile(0.99))},
                   {"p999", s(h.percentile(0.999))}};
  nlohmann::json buckets = nlohmann::json::array();
  for (double le : kExpositionBounds)
    buckets.push_back({le, cumulative_at(h, le)});
  j["buckets"] = std::move(buckets);
  return j;
}

/// to_json(m): one queue's metrics.
[[nodiscard]] inline nlohmann::json to_json(const QueueMetrics& m) {
  nlohmann::json values = nlohmann::json::object();
  for_each_value(m, [&](const MetricInfo& info, double v) { values[json_key(info.name)] = v; });
  nlohmann::json j{{"queue", m.queue}, {"values", std::move(values)}};
  if (m.histograms) {
    nlohmann::json hs = nlohmann::json::object();
    for_each_histogram(m, [&](const MetricInfo& info, const LatencyHistogram& h) {
      hs[json_key(info.name)] = to_json(h);
    });
    j["histograms"] = std::move(hs);
  }
  return j;
}

/// to_json(m): every queue's, with the snapshot's engine-clock time.
[[nodiscard]] inline nlohmann::json to_json(const EngineMetrics& m) {
  nlohmann::json queues = nlohmann::json::array();
  for (const auto& q : m.queues)
    queues.push_back(to_json(q));
  return {{"at_ns", m.at.time_since_epoch().count()}, {"queues", std::move(queues)}};
}

}  // namespace rail
