// Metrics: a queue's numbers at one moment, as plain values, for dashboards, alerting and
// exposition (Prometheus through the optional rail::prometheus target, JSON through
// rail/metrics_json.hpp): every counter of counts(), the gauges (waiting, delayed, active, DLQ
// depth, lag) and the latency histograms its workers record.
//
// Guarantee: each counter is exact once the queue is quiescent, and never runs backwards; while
// jobs move, a snapshot reads counter by counter (as counts() does), not at one instant.
// Cost: Engine::metrics() reads every worker's counters and histograms (4.7 KB each) and looks at
// each slot the queue has ever used for its lag: cold, meant for a scrape every few seconds.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "rail/add_receipt.hpp"
#include "rail/clock.hpp"
#include "rail/latency_histogram.hpp"

namespace rail {

struct QueueMetrics {
  std::string queue;
  /// counts(): the counters (added, completed, failed_attempts, retried, dead_lettered,
  /// redriven, cancelled, stalled (lease lapses), late_outcomes, rejected, ...) and the
  /// waiting, delayed and active gauges.
  QueueCounts counts;
  std::size_t dlq_depth = 0;  // entries in the queue's DLQ now
  /// lag: how long the oldest job waiting to start has waited since it was due (SQS's
  /// ApproximateAgeOfOldestMessage); 0 when none waits.
  Duration lag{0};
  /// histograms: QueueOptions::histograms; when false, the four below stay empty.
  bool histograms = false;
  /// wait: from when the job was due (its add, its delay's or backoff's end, a redelivery) to
  /// each start counted in counts.started (a start cancelled before its handler ran included).
  LatencyHistogram wait;
  /// run: from a start to the attempt's end at its worker (its outcome, or the cancel that
  /// skipped it); a lapsed or timed-out attempt has none. So after quiescence run.count() ==
  /// counts.started - counts.stalled - counts.timed_out. A completion nobody observes or waits
  /// for ends at its worker's next clock reading: its handler's time plus the worker's own work
  /// after it (a few hundred ns, more when that worker fires due timers in between).
  LatencyHistogram run;
  /// end_to_end: from the add to the end (completed, dead-lettered, cancelled, discarded); a
  /// redriven job's from its first add.
  LatencyHistogram end_to_end;
  /// retry_lateness: a retry's start after its due time (the end of the backoff a failed
  /// attempt scheduled: one sample per counts.retried that started).
  LatencyHistogram retry_lateness;
};

struct EngineMetrics {
  TimePoint at{};                    // the engine clock when the snapshot began
  std::vector<QueueMetrics> queues;  // in declaration order

  /// find(queue): the named queue's metrics, or null.
  [[nodiscard]] const QueueMetrics* find(std::string_view queue) const noexcept {
    for (const auto& q : queues)
      if (q.queue == queue) return &q;
    return nullptr;
  }
};

/// MetricInfo: one figure of QueueMetrics as an exposition names it: Prometheus's conventions
/// (the `rail_` prefix, `_total` for counters, `_seconds` for times), one sentence of help.
enum class MetricType : std::uint8_t { counter, gauge, histogram };
struct MetricInfo {
  std::string_view name;
  std::string_view help;
  MetricType type;
};

/// for_each_value(m, fn): fn(info, value) for each counter and gauge of m, in a fixed order:
/// what rail::prometheus and rail/metrics_json.hpp both publish.
template <class Fn>
void for_each_value(const QueueMetrics& m, Fn&& fn) {
  using T = MetricType;
  const QueueCounts& c = m.counts;
  const auto n = [](std::uint64_t v) { return static_cast<double>(v); };
  fn(MetricInfo{"rail_jobs_added_total", "Jobs added (redriven ones included).", T::counter},
     n(c.added));
  fn(MetricInfo{"rail_jobs_deduplicated_total", "Adds merged into a live job by dedup id.",
                T::counter},
     n(c.deduplicated));
  fn(MetricInfo{"rail_attempts_started_total", "Attempts started (redeliveries included).",
                T::counter},
     n(c.started));
  fn(MetricInfo{"rail_jobs_completed_total", "Jobs completed.", T::counter}, n(c.completed));
  fn(MetricInfo{"rail_attempts_failed_total", "Attempts that failed (lapses included).",
                T::counter},
     n(c.failed_attempts));
  fn(MetricInfo{"rail_jobs_retried_total", "Failed attempts followed by a retry.", T::counter},
     n(c.retried));
  fn(MetricInfo{"rail_jobs_dead_lettered_total", "Jobs moved to the dead-letter queue.",
                T::counter},
     n(c.dead_lettered));
  fn(MetricInfo{"rail_jobs_redriven_total", "Dead letters sent back to the queue.", T::counter},
     n(c.redriven));
  fn(MetricInfo{"rail_jobs_cancelled_total", "Jobs cancelled.", T::counter}, n(c.cancelled));
  fn(MetricInfo{"rail_jobs_discarded_total", "Jobs their handler discarded.", T::counter},
     n(c.discarded));
  fn(MetricInfo{"rail_jobs_forwarded_total",
                "Jobs from a broker whose next attempt went back to it (rail::amqp).", T::counter},
     n(c.forwarded));
  fn(MetricInfo{"rail_leases_lapsed_total", "Deliveries whose lease lapsed (stalled).", T::counter},
     n(c.stalled));
  fn(MetricInfo{"rail_stall_warnings_total",
                "Handlers that ran past QueueOptions::stall_warning of their lease.", T::counter},
     n(c.stall_warnings));
  fn(MetricInfo{"rail_late_outcomes_total", "Outcomes of lapsed or timed-out deliveries, ignored.",
                T::counter},
     n(c.late_outcomes));
  fn(MetricInfo{"rail_attempts_timed_out_total", "Attempts past their timeout.", T::counter},
     n(c.timed_out));
  fn(MetricInfo{"rail_jobs_expired_total", "Jobs dead-lettered unstarted past expire_after.",
                T::counter},
     n(c.expired));
  fn(MetricInfo{"rail_jobs_shed_total", "Jobs dead-lettered by load shedding.", T::counter},
     n(c.shed));
  fn(MetricInfo{"rail_jobs_rejected_total", "Adds refused because the queue was full.", T::counter},
     n(c.rejected));
  fn(MetricInfo{"rail_jobs_waiting", "Jobs ready to start or held by their downstream.", T::gauge},
     n(c.waiting));
  fn(MetricInfo{"rail_jobs_delayed", "Jobs waiting out a delay or a backoff.", T::gauge},
     n(c.delayed));
  fn(MetricInfo{"rail_jobs_waiting_children", "Jobs waiting for the jobs they depend on.",
                T::gauge},
     n(c.waiting_children));
  fn(MetricInfo{"rail_jobs_active", "Attempts running now.", T::gauge}, n(c.active));
  fn(MetricInfo{"rail_zombie_handlers", "Handlers still running after their lease lapsed.",
                T::gauge},
     n(c.zombies));
  fn(MetricInfo{"rail_dlq_depth", "Entries in the dead-letter queue.", T::gauge}, n(m.dlq_depth));
  fn(MetricInfo{"rail_lag_seconds", "How long the oldest waiting job has waited since due.",
                T::gauge},
     std::chrono::duration<double>(m.lag).count());
  fn(MetricInfo{"rail_queue_paused", "1 while the queue is paused.", T::gauge},
     c.paused ? 1.0 : 0.0);
}

/// for_each_histogram(m, fn): fn(info, histogram) for each latency histogram of m.
template <class Fn>
void for_each_histogram(const QueueMetrics& m, Fn&& fn) {
  using T = MetricType;
  fn(MetricInfo{"rail_job_wait_seconds", "From a job's due time to its attempt's start.",
                T::histogram},
     m.wait);
  fn(MetricInfo{"rail_job_run_seconds", "From an attempt's start to its outcome.", T::histogram},
     m.run);
  fn(MetricInfo{"rail_job_end_to_end_seconds", "From a job's add to its end.", T::histogram},
     m.end_to_end);
  fn(MetricInfo{"rail_retry_lateness_seconds", "From a retry's due time to its start.",
                T::histogram},
     m.retry_lateness);
}

/// kExpositionBounds: the upper bounds (seconds) of the buckets an exposition publishes
/// (Prometheus's `le`), 1 us to 5 min. A sample counts under the first bound at or above its
/// bucket's highest value (LatencyHistogram::count_at_most), so a cumulative count may leave out
/// samples within 6.25% below a bound, never includes one above it.
inline constexpr std::array<double, 25> kExpositionBounds = {
    1e-6,  2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01,
    0.025, 0.05,   0.1,  0.25, 0.5,    1,    2.5,  5,      10,   30,   60,     300};

/// cumulative_at(h, le_seconds): LatencyHistogram::count_at_most for a bound in seconds.
[[nodiscard]] inline std::uint64_t cumulative_at(const LatencyHistogram& h, double le_seconds) {
  return h.count_at_most(Duration{static_cast<std::int64_t>(le_seconds * 1e9 + 0.5)});
}

}  // namespace rail
