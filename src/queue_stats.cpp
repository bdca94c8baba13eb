#include "rail/detail/queue_stats.hpp"

#include <algorithm>
#include <bit>

namespace rail::detail {

std::size_t QueueStats::history_entries(std::size_t capacity) noexcept {
  return std::bit_ceil(std::max<std::size_t>(capacity, 1024));
}

QueueStats::QueueStats(std::size_t capacity)
    : mask_(history_entries(capacity) - 1),
      bits_(static_cast<unsigned>(std::popcount(mask_))),
      history_(std::make_unique<std::atomic<std::uint32_t>[]>(mask_ + 1)) {}

void QueueStats::add_workers(std::uint32_t n) {
  workers_owner_ = std::make_unique<WorkerCounters[]>(n);
  // relaxed: ordered by the release store below, which counts() acquires.
  worker_count_.store(n, std::memory_order_relaxed);
  workers_.store(workers_owner_.get(), std::memory_order_release);
}

QueueCounts QueueStats::counts(bool paused) const noexcept {
  // acquire: pairs with add_workers' release, so the array and its count are seen built.
  const WorkerCounters* owned = workers_.load(std::memory_order_acquire);
  const std::uint32_t owners = owned ? worker_count_.load(std::memory_order_relaxed) : 0;
  auto r = [&](Counter c) {
    std::uint64_t sum = shared_.read(c);
    for (std::uint32_t w = 0; w < owners; ++w)
      sum += owned[w].read(c);
    return sum;
  };
  auto gauge = [](std::uint64_t in, std::uint64_t out) { return in > out ? in - out : 0; };
  // Every outflow before any inflow: see the header.
  const std::uint64_t attempt_ended = r(kAttemptEnded), from_ready = r(kFromReady),
                      from_delayed = r(kFromDelayed);
  const std::uint64_t started = r(kStarted), to_ready = r(kToReady), to_delayed = r(kToDelayed);
  QueueCounts c;
  c.added = r(kAdded);
  c.completed = r(kCompleted);
  c.failed_attempts = r(kFailedAttempts);
  c.dead_lettered = r(kDeadLettered);
  c.cancelled = r(kCancelled);
  c.discarded = r(kDiscarded);
  c.deduplicated = r(kDeduplicated);
  c.stalled = r(kStalled);
  c.late_outcomes = r(kLateOutcomes);
  c.waiting = gauge(to_ready, from_ready);
  c.delayed = gauge(to_delayed, from_delayed);
  c.active = gauge(started, attempt_ended);
  c.paused = paused;
  return c;
}

std::optional<JobStatus> QueueStats::recall(JobId id) const noexcept {
  const std::uint32_t h = history_[index(id)].load(std::memory_order_relaxed);
  if (h != 0 && (h >> 4) == check(id)) return static_cast<JobStatus>(h & 0xF);
  return std::nullopt;
}

}  // namespace rail::detail
