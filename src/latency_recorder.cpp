// LatencyRecorder (include/rail/detail/latency_recorder.hpp): the copies' allocation and the
// merged snapshots.
#include "rail/detail/latency_recorder.hpp"

namespace rail::detail {

LatencyRecorder::LatencyRecorder(bool enabled)
    : shared_(enabled ? std::make_unique<OwnedLatency>() : nullptr) {}

void LatencyRecorder::add_workers(std::uint32_t n) {
  if (!enabled()) return;
  workers_owner_ = std::make_unique<OwnedLatency[]>(n);
  // relaxed: ordered by the release store below, which snapshot() acquires.
  worker_count_.store(n, std::memory_order_relaxed);
  workers_.store(workers_owner_.get(), std::memory_order_release);
}

LatencyHistogram LatencyRecorder::snapshot(Latency kind) const {
  LatencyHistogram out;
  if (!enabled()) return out;
  const auto k = static_cast<std::size_t>(kind);
  const auto add = [&](const AtomicHistogram& h) {
    for (std::size_t i = 0; i < LatencyHistogram::kBuckets; ++i)
      out.add_bucket(i, h.buckets[i].load(std::memory_order_relaxed));
    out.sum_ += h.sum.load(std::memory_order_relaxed);
    out.note_max(h.max.load(std::memory_order_relaxed));
  };
  add(shared_->of[k]);
  // acquire: pairs with add_workers' release, so the array and its count are seen built.
  const OwnedLatency* owned = workers_.load(std::memory_order_acquire);
  const std::uint32_t owners = owned ? worker_count_.load(std::memory_order_relaxed) : 0;
  for (std::uint32_t w = 0; w < owners; ++w)
    add(owned[w].of[k]);
  return out;
}

}  // namespace rail::detail
