// rail::prometheus (include/rail/prometheus.hpp): a snapshot's counters, gauges and histograms as
// prometheus-cpp metric families, one family per metric, one labelled series per queue.
#include <chrono>
#include <limits>
#include <map>
#include <string>

#include "rail/prometheus.hpp"

namespace rail::prometheus {
namespace {

namespace pc = ::prometheus;

/// family(out, index, info): the family of `info` in out, created at its first series.
pc::MetricFamily& family(std::vector<pc::MetricFamily>& out,
                         std::map<std::string_view, std::size_t>& index, const MetricInfo& info) {
  const auto [it, fresh] = index.try_emplace(info.name, out.size());
  if (fresh) {
    pc::MetricFamily f;
    f.name = std::string(info.name);
    f.help = std::string(info.help);
    f.type = info.type == MetricType::counter ? pc::MetricType::Counter
             : info.type == MetricType::gauge ? pc::MetricType::Gauge
                                              : pc::MetricType::Histogram;
    out.push_back(std::move(f));
  }
  return out[it->second];
}

}  // namespace

std::vector<pc::MetricFamily> families(const EngineMetrics& m) {
  std::vector<pc::MetricFamily> out;
  std::map<std::string_view, std::size_t> index;  // MetricInfo names are string literals
  for (const QueueMetrics& q : m.queues) {
    const pc::ClientMetric::Label label{"queue", q.queue};
    for_each_value(q, [&](const MetricInfo& info, double v) {
      pc::ClientMetric c;
      c.label.push_back(label);
      if (info.type == MetricType::counter) {
        c.counter.value = v;
      } else {
        c.gauge.value = v;
      }
      family(out, index, info).metric.push_back(std::move(c));
    });
    if (!q.histograms) continue;
    for_each_histogram(q, [&](const MetricInfo& info, const LatencyHistogram& h) {
      pc::ClientMetric c;
      c.label.push_back(label);
      c.histogram.sample_count = h.count();
      c.histogram.sample_sum = std::chrono::duration<double>(h.sum()).count();
      for (double le : kExpositionBounds)
        c.histogram.bucket.push_back({cumulative_at(h, le), le});
      c.histogram.bucket.push_back({h.count(), std::numeric_limits<double>::infinity()});
      family(out, index, info).metric.push_back(std::move(c));
    });
  }
  return out;
}

std::vector<pc::MetricFamily> Collector::Collect() const {
  return families(engine_.metrics());
}

}  // namespace rail::prometheus
