// LatencyRecorder: one queue's latency histograms as its job flow records them — wait (due to
// start), run (start to the outcome that counted), end-to-end (add to the end) and retry
// lateness (a retry's due time to its start) — and the snapshots Queue::metrics() merges from
// them.
//
// Guarantee: once the recording threads are quiescent, a snapshot holds every sample recorded,
// each once; while they record, a snapshot may count a sample in its bucket but not yet in the
// sum or max (or the reverse), never half of a count.
// Algorithm: each worker thread records into its own copy (OwnedLatency: one writer, so a bump is
// a relaxed load and store, no locked instruction, on lines no other thread writes); any other
// thread (the timer's lapses and sweeps, a canceller, a Completion's thread) into one shared copy
// with relaxed read-modify-writes. A snapshot adds the copies up (LatencyHistogram's buckets are
// the same everywhere, so they merge by addition).
// Memory ordering: relaxed throughout: a histogram publishes nothing and orders nothing; 64-bit
// atomics do not tear. The workers' array is published as QueueStats publishes its counters
// (release store, acquire load).
// Threading: record(worker(w), ...) by worker w only; record(nullptr, ...) and snapshot() from any
// thread; add_workers before the workers start.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "rail/latency_histogram.hpp"

namespace rail::detail {

enum class Latency : std::uint8_t { wait, run, end_to_end, retry_lateness };
inline constexpr std::size_t kLatencyKinds = 4;

/// AtomicHistogram: LatencyHistogram's buckets, sum and max as atomics.
struct AtomicHistogram {
  std::array<std::atomic<std::uint64_t>, LatencyHistogram::kBuckets> buckets{};
  std::atomic<std::uint64_t> sum{0};
  std::atomic<std::uint64_t> max{0};

  /// record_owned(ns): by the one thread that writes this copy.
  void record_owned(std::uint64_t ns) noexcept {
    bump(buckets[LatencyHistogram::bucket_of(ns)], 1);
    bump(sum, ns);
    // relaxed: our own last store.
    if (ns > max.load(std::memory_order_relaxed)) max.store(ns, std::memory_order_relaxed);
  }
  /// record_shared(ns): by any thread.
  void record_shared(std::uint64_t ns) noexcept {
    buckets[LatencyHistogram::bucket_of(ns)].fetch_add(1, std::memory_order_relaxed);
    sum.fetch_add(ns, std::memory_order_relaxed);
    std::uint64_t seen = max.load(std::memory_order_relaxed);
    while (ns > seen && !max.compare_exchange_weak(seen, ns, std::memory_order_relaxed)) {
    }
  }

 private:
  static void bump(std::atomic<std::uint64_t>& a, std::uint64_t n) noexcept {
    a.store(a.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
};

/// OwnedLatency: one worker's histograms, on lines of their own.
struct alignas(64) OwnedLatency {
  std::array<AtomicHistogram, kLatencyKinds> of{};
};

class LatencyRecorder {
 public:
  /// LatencyRecorder(enabled): a queue's recorder (QueueOptions::histograms); a disabled one
  /// allocates nothing and its worker() copies are null.
  explicit LatencyRecorder(bool enabled);

  [[nodiscard]] bool enabled() const noexcept { return shared_ != nullptr; }
  /// add_workers(n): n workers will record on their own; before they start (may throw
  /// bad_alloc, leaving the recorder as it was).
  void add_workers(std::uint32_t n);
  /// worker(w): worker w's copy (null when disabled).
  [[nodiscard]] OwnedLatency* worker(std::uint32_t w) noexcept {
    return workers_owner_ ? &workers_owner_[w] : nullptr;
  }
  /// record(own, kind, ns): a sample (negative: 0) into `own` (the calling worker's copy), or,
  /// with own null, into the shared copy. Call only when enabled().
  void record(OwnedLatency* own, Latency kind, std::int64_t ns) noexcept {
    const auto v = static_cast<std::uint64_t>(ns < 0 ? 0 : ns);
    const auto k = static_cast<std::size_t>(kind);
    if (own) {
      own->of[k].record_owned(v);
    } else {
      shared_->of[k].record_shared(v);
    }
  }
  /// snapshot(kind): every copy's samples of `kind`, merged (empty when disabled).
  [[nodiscard]] LatencyHistogram snapshot(Latency kind) const;

 private:
  std::unique_ptr<OwnedLatency> shared_;  // used by any thread (record_shared)
  std::unique_ptr<OwnedLatency[]> workers_owner_;
  std::atomic<const OwnedLatency*> workers_{nullptr};  // published by add_workers
  std::atomic<std::uint32_t> worker_count_{0};
};

}  // namespace rail::detail
