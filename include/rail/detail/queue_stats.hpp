// QueueStats: one queue's numbers — its counters, the gauges counts() derives from them, its
// latency histograms (latency_recorder.hpp), and the history of ended jobs that state() consults
// once a job has left its slot. The job flow tells it what happened; it owns no job state.
//
// Counters: producers, the timer and cold paths add to striped counters (one padded stripe per
// thread: no two threads share a line); each worker thread adds to its own OwnedCounters with
// plain stores (no locked instruction per job). counts() sums both.
// Gauges: a job moving between gauges is counted into the next one before out of the previous one
// (release increments), and counts() reads every outflow (acquire) before any inflow, so a reader
// that sees a job leave one gauge also sees it enter the next: it may show in two gauges for a
// moment, never in none, and idle() never reports idle with a job in flight.
// History: direct-mapped by id, 4 bytes an entry, max(capacity, 1024) entries rounded up to a
// power of two; a newer job with the same low bits overwrites an older one (state() then says
// unknown).
// Memory ordering: counters as striped_counter.hpp says; the worker array is published with a
// release store that counts() acquires; history entries are relaxed (hints for a cold reader;
// they order nothing).
// Threading: add() from any thread; worker(w).add() by worker w only; the rest from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "rail/add_receipt.hpp"
#include "rail/detail/latency_recorder.hpp"
#include "rail/detail/striped_counter.hpp"
#include "rail/job_state.hpp"
#include "rail/options.hpp"

namespace rail::detail {

enum Counter : std::size_t {
  kAdded,
  kStarted,
  kAttemptEnded,
  kCompleted,
  kFailedAttempts,
  kDeadLettered,
  kCancelled,
  kDiscarded,
  kForwarded,
  kDeduplicated,
  kStalled,
  kStallWarnings,
  kLateOutcomes,
  kTimedOut,
  kExpired,
  kShed,
  kRetried,
  kRedriven,
  kRejected,
  // kAddedReady: a job added straight into `waiting`, counted as both kAdded and kToReady with
  // one locked add (the common add); counts() sums it into both.
  kAddedReady,
  kToReady,
  kFromReady,
  kToDelayed,
  kFromDelayed,
  kCounterKinds
};

using WorkerCounters = OwnedCounters<kCounterKinds>;

class QueueStats {
 public:
  /// QueueStats(capacity, histograms): histograms: QueueOptions::histograms.
  QueueStats(std::size_t capacity, bool histograms);

  /// history_entries(capacity): the ended-job history's length for a queue of `capacity`.
  [[nodiscard]] static std::size_t history_entries(std::size_t capacity) noexcept;
  /// footprint(capacity): the bytes its history takes.
  [[nodiscard]] static std::size_t footprint(std::size_t capacity) noexcept {
    return history_entries(capacity) * sizeof(std::atomic<std::uint32_t>);
  }

  /// add(c, n): a count by any thread (producers, the timer, cold paths, inline mode).
  void add(Counter c, std::uint64_t n = 1) noexcept { shared_.add(c, n); }

  /// add_workers(n): n worker threads will count (and record latencies) on their own; call
  /// before they start. May throw bad_alloc.
  void add_workers(std::uint32_t n);
  /// latency(): the queue's histograms.
  [[nodiscard]] LatencyRecorder& latency() noexcept { return latency_; }
  [[nodiscard]] const LatencyRecorder& latency() const noexcept { return latency_; }
  /// worker(w): worker w's own counters (w < the n given to add_workers).
  [[nodiscard]] WorkerCounters& worker(std::uint32_t w) noexcept { return workers_owner_[w]; }

  /// counts(paused): the snapshot Queue::counts() returns (see the header on gauges).
  [[nodiscard]] QueueCounts counts(bool paused) const noexcept;
  /// idle_mark(): if the gauges show nothing waiting, delayed or active, the total of moves into
  /// waiting or delayed so far (it grows whenever work enters the queue); else nullopt. Read as
  /// counts() reads the gauges, so it never says idle with a job in flight.
  [[nodiscard]] std::optional<std::uint64_t> idle_mark() const noexcept;

  /// remember(id, status): job `id` ended with `status`.
  void remember(JobId id, JobStatus status) noexcept {
    // release: a reader that finds the end here (recall's acquire) also finds it decided in the
    // job's slot (JobSlot::end_kind, stored before this), so an add it makes next finds the
    // job's dedup id let go (dedup_claims.hpp).
    history_[index(id)].store((check(id) << 4) | static_cast<std::uint32_t>(status),
                              std::memory_order_release);
  }
  /// recall(id): how job `id` ended, if the history still knows.
  [[nodiscard]] std::optional<JobStatus> recall(JobId id) const noexcept;

 private:
  /// index(id): id's entry, with consecutive ids on different cache lines. Workers end
  /// neighbouring ids at the same moment; with ids mapped in order, eight of them share a line and
  /// every end would pull it from the other worker's core. Swapping the id's low three bits to the
  /// top of the index keeps the map a bijection on the table while separating neighbours.
  [[nodiscard]] std::size_t index(JobId id) const noexcept {
    const auto low = static_cast<std::size_t>(id & 7);
    const auto rest = static_cast<std::size_t>(id >> 3) & (mask_ >> 3);
    return (low << (bits_ - 3)) | rest;  // bits_ >= 10
  }
  /// check(id): the id bits its index does not encode (28 of them), stored beside the status so
  /// that an entry answers only for its own id. Two ids share an entry and a check only
  /// 2^(28 + bits_) ids apart (2^38 or more), by which time the older one is long forgotten.
  [[nodiscard]] std::uint32_t check(JobId id) const noexcept {
    return static_cast<std::uint32_t>(id >> bits_) & 0x0FFF'FFFFu;
  }

  /// Gauges: the outflows (read first) and inflows behind waiting, delayed and active.
  struct Gauges {
    std::uint64_t attempt_ended, from_ready, from_delayed, started, to_ready, to_delayed;
  };
  /// sum(c): counter c over the shared stripes and the workers' own counters.
  [[nodiscard]] std::uint64_t sum(Counter c) const noexcept;
  [[nodiscard]] Gauges gauges() const noexcept;

  StripedCounters<kCounterKinds> shared_;
  std::atomic<const WorkerCounters*> workers_{nullptr};  // published by add_workers
  std::atomic<std::uint32_t> worker_count_{0};
  std::unique_ptr<WorkerCounters[]> workers_owner_;
  LatencyRecorder latency_;
  std::size_t mask_;
  unsigned bits_;
  std::unique_ptr<std::atomic<std::uint32_t>[]> history_;
};

}  // namespace rail::detail
