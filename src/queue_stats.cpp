// QueueStats (queue_stats.hpp): a queue's striped counters and the counts() snapshot.
#include "rail/detail/queue_stats.hpp"

#include <algorithm>
#include <bit>

namespace rail::detail {

std::size_t QueueStats::history_entries(std::size_t capacity) noexcept {
  return std::bit_ceil(std::max<std::size_t>(capacity, 1024));
}

QueueStats::QueueStats(std::size_t capacity, bool histograms)
    : latency_(histograms),
      mask_(history_entries(capacity) - 1),
      bits_(static_cast<unsigned>(std::popcount(mask_))),
      history_(std::make_unique<std::atomic<std::uint32_t>[]>(mask_ + 1)) {}

void QueueStats::add_workers(std::uint32_t n) {
  latency_.add_workers(n);  // first: what may throw leaves the counters as they were
  workers_owner_ = std::make_unique<WorkerCounters[]>(n);
  // relaxed: ordered by the release store below, which counts() acquires.
  worker_count_.store(n, std::memory_order_relaxed);
  workers_.store(workers_owner_.get(), std::memory_order_release);
}

std::uint64_t QueueStats::sum(Counter c) const noexcept {
  // acquire: pairs with add_workers' release, so the array and its count are seen built.
  const WorkerCounters* owned = workers_.load(std::memory_order_acquire);
  const std::uint32_t owners = owned ? worker_count_.load(std::memory_order_relaxed) : 0;
  std::uint64_t total = shared_.read(c);
  for (std::uint32_t w = 0; w < owners; ++w)
    total += owned[w].read(c);
  return total;
}

QueueStats::Gauges QueueStats::gauges() const noexcept {
  // Every outflow before any inflow: see the header.
  Gauges g{};
  g.attempt_ended = sum(kAttemptEnded);
  g.from_ready = sum(kFromReady);
  g.from_delayed = sum(kFromDelayed);
  g.started = sum(kStarted);
  g.to_ready = sum(kToReady) + sum(kAddedReady);
  g.to_delayed = sum(kToDelayed);
  return g;
}

QueueCounts QueueStats::counts(bool paused) const noexcept {
  auto gauge = [](std::uint64_t in, std::uint64_t out) { return in > out ? in - out : 0; };
  const Gauges g = gauges();
  QueueCounts c;
  c.added = sum(kAdded) + sum(kAddedReady);
  c.completed = sum(kCompleted);
  c.failed_attempts = sum(kFailedAttempts);
  c.dead_lettered = sum(kDeadLettered);
  c.cancelled = sum(kCancelled);
  c.discarded = sum(kDiscarded);
  c.forwarded = sum(kForwarded);
  c.deduplicated = sum(kDeduplicated);
  c.stalled = sum(kStalled);
  c.stall_warnings = sum(kStallWarnings);
  c.late_outcomes = sum(kLateOutcomes);
  c.timed_out = sum(kTimedOut);
  c.expired = sum(kExpired);
  c.shed = sum(kShed);
  c.retried = sum(kRetried);
  c.redriven = sum(kRedriven);
  c.rejected = sum(kRejected);
  // Every fenced delivery (a lapse or a timeout) leaves a handler running until it returns its
  // late outcome.
  c.zombies = gauge(c.stalled + c.timed_out, c.late_outcomes);
  c.waiting = gauge(g.to_ready, g.from_ready);
  c.delayed = gauge(g.to_delayed, g.from_delayed);
  c.active = gauge(g.started, g.attempt_ended);
  c.started = g.started;
  c.paused = paused;
  return c;
}

std::optional<std::uint64_t> QueueStats::idle_mark() const noexcept {
  const Gauges g = gauges();
  if (g.started > g.attempt_ended || g.to_ready > g.from_ready || g.to_delayed > g.from_delayed)
    return std::nullopt;
  return g.to_ready + g.to_delayed;
}

std::optional<JobStatus> QueueStats::recall(JobId id) const noexcept {
  // acquire: see remember().
  const std::uint32_t h = history_[index(id)].load(std::memory_order_acquire);
  if (h != 0 && (h >> 4) == check(id)) return static_cast<JobStatus>(h & 0xF);
  return std::nullopt;
}

}  // namespace rail::detail
