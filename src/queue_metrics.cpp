// QueueImpl::metrics: a queue's counters, gauges and latency histograms as Queue::metrics()
// returns them (include/rail/metrics.hpp): the counters as counts() reads them, the DLQ's depth,
// the lag from one pass over the slots ever used, and each histogram merged from the workers'
// copies (latency_recorder.hpp).
#include <algorithm>

#include "rail/detail/queue_impl.hpp"

namespace rail::detail {

QueueMetrics QueueImpl::metrics() {
  QueueMetrics m;
  m.queue = name();
  m.counts = JobFlow::counts();
  m.dlq_depth = dlq().size();
  const std::int64_t now = core().now_ns();
  if (const auto due = queries().oldest_due(touched()))
    m.lag = Duration{std::max<std::int64_t>(0, now - *due)};
  const LatencyRecorder& latency = stats().latency();
  m.histograms = latency.enabled();
  m.wait = latency.snapshot(Latency::wait);
  m.run = latency.snapshot(Latency::run);
  m.end_to_end = latency.snapshot(Latency::end_to_end);
  m.retry_lateness = latency.snapshot(Latency::retry_lateness);
  return m;
}

}  // namespace rail::detail
