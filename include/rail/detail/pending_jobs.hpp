// PendingJobs: the deliveries a queue's handlers handed to a Completion (Job::defer), and the
// CompletionHub the Completions share with the queue so that either may outlive the other.
//
// A pending delivery holds what a running handler holds: its slot's pin (slot_table.hpp: the
// job stays `active`, exactly one of the completion and a lapse wins it), a lease record that
// the queue's lease sweep scans like a worker's, and the downstream permit if it took one. The
// records are preallocated (WorkerOptions::max_pending of them, behind the workers' records in
// the queue's LeaseTracker) and handed out through a ring of free record numbers, so deferring
// allocates nothing.
//
// CompletionHub algorithm: one word, bit 63 `closed`, bits 0..62 the completers inside the
// queue. enter() adds one and backs out if closed; leave() takes one away; close() (the engine's
// teardown, after its workers were joined) sets the bit and waits until nobody is inside.
// Invariant: once close() returned, no completer is inside the queue and none will enter, so
// the queue may be destroyed; a Completion then only drops its reference to the hub.
// Memory ordering: enter's fetch_add and close's fetch_or are RMWs of one word, so they are
// ordered: an enter before the close is seen by the closer (it waits), an enter after it sees
// the bit (and touches nothing). enter is acquire so that nothing the completer reads of the
// queue moves above it; leave is release and the closer's wait acquire, so everything a
// completer did happens before the queue's destruction.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "rail/detail/assert.hpp"
#include "rail/detail/mpmc_ring.hpp"
#include "rail/event.hpp"

namespace rail::detail {

class Completions;

class CompletionHub {
 public:
  explicit CompletionHub(Completions& completions) noexcept : completions_(completions) {}

  [[nodiscard]] Completions& completions() const noexcept { return completions_; }

  /// enter(): true if the queue is still there (the caller must leave()); false once closed.
  [[nodiscard]] bool enter() noexcept {
    // acquire: see the header.
    if ((word_.fetch_add(1, std::memory_order_acquire) & kClosed) == 0) return true;
    word_.fetch_sub(1, std::memory_order_relaxed);  // closed: the closer ignores this count
    return false;
  }
  void leave() noexcept {
    word_.fetch_sub(1, std::memory_order_release);  // pairs with close()'s acquire loads
  }
  /// close(): no completer enters from now on; returns once none is inside.
  void close() noexcept {
    // acq_rel: ordered against every enter (see the header).
    word_.fetch_or(kClosed, std::memory_order_acq_rel);
    // A completer inside runs one finish (no waits of rail's own); observers may take longer.
    while ((word_.load(std::memory_order_acquire) & ~kClosed) != 0)
      std::this_thread::yield();
  }

 private:
  static constexpr std::uint64_t kClosed = std::uint64_t{1} << 63;
  Completions& completions_;
  std::atomic<std::uint64_t> word_{0};
};

/// PendingJob: one deferred delivery, written by the deferring handler's thread before the
/// Completion leaves it and read by the completer after it got the Completion (the user's
/// hand-off of the Completion orders the two), so plain fields.
struct PendingJob {
  std::uint32_t idx = 0;       // the job's slot
  std::uint32_t token = 0;     // the delivery (the slot's seq at activation)
  std::uint32_t delivery = 0;  // the job's delivery count, for a late outcome's event
  bool permit = false;         // it holds a permit of its downstream's gate
  std::uint8_t link = 0;       // the job's GateLink (gate_link.hpp)
  std::uint64_t lease = 0;     // its lease word (0: leases disabled)
  std::int64_t started_ns = 0;
  bool renewable = false;  // a lease, not only a timeout: extend_lease renews it
};

class PendingJobs {
 public:
  /// PendingJobs(completions, n, first_record): room for n pending deliveries, whose lease
  /// records are the queue tracker's records first_record .. first_record + n - 1.
  PendingJobs(Completions& completions, std::uint32_t n, std::uint32_t first_record)
      : hub_(std::make_shared<CompletionHub>(completions)),
        jobs_(std::make_unique<PendingJob[]>(n)),
        free_(n),
        size_(n),
        first_record_(first_record) {
    for (std::uint32_t r = 0; r < n; ++r)
      (void)free_.try_push(r);  // the ring has room for every record
  }

  /// take(r): a free record number, false when max_pending deliveries are pending already. The
  /// ring can look empty while a give_back's push is in flight (its position claimed, its value
  /// not yet published: mpmc_ring.hpp), so a failed pop is final only when every record is
  /// taken; otherwise the record is on its way and the take yields until it lands (the pusher
  /// runs a few instructions, unless preempted). Without this, a queue whose deferrals reach
  /// max_pending exactly (process_batch's max x workers) answered `capacity` spuriously.
  [[nodiscard]] bool take(std::uint32_t& r) noexcept {
    for (;;) {
      if (free_.try_pop(r)) {
        // relaxed: a count, ordering nothing (the ring orders the record's data); RMWs on one
        // word are totally ordered, so the count is exact once the takes and gives settle.
        taken_.fetch_add(1, std::memory_order_relaxed);
        return true;
      }
      if (taken_.load(std::memory_order_relaxed) >= static_cast<std::int64_t>(size_)) return false;
      std::this_thread::yield();
    }
  }
  /// give_back(r): its completion was applied. Uncounted before the push, so a take that meets
  /// the push in flight waits for it instead of failing. The ring has room for every record, but
  /// a push can still find its cell held by a pop of the previous lap that claimed it and has
  /// not released it yet (mpmc_ring.hpp): it retries until that pop is done, never drops r.
  void give_back(std::uint32_t r) noexcept {
    // relaxed: as in take(). A give follows its take's count, so the count was at least 1.
    const std::int64_t out = taken_.fetch_sub(1, std::memory_order_relaxed);
    RAIL_INVARIANT(out > 0, "a pending record given back that was not taken (or given back twice)");
    while (!free_.try_push(r))
      std::this_thread::yield();
  }
  [[nodiscard]] PendingJob& job(std::uint32_t r) noexcept { return jobs_[r]; }
  [[nodiscard]] const PendingJob& job(std::uint32_t r) const noexcept { return jobs_[r]; }
  [[nodiscard]] std::uint32_t size() const noexcept { return size_; }
  [[nodiscard]] std::uint32_t lease_record(std::uint32_t r) const noexcept {
    return first_record_ + r;
  }
  [[nodiscard]] const std::shared_ptr<CompletionHub>& hub() const noexcept { return hub_; }

 private:
  std::shared_ptr<CompletionHub> hub_;
  std::unique_ptr<PendingJob[]> jobs_;
  MpmcRing<std::uint32_t> free_;
  // Records taken and not given back. A record's give follows its take's count (the Completion
  // exists only once take() returned), so the count never falls below the records out.
  std::atomic<std::int64_t> taken_{0};
  std::uint32_t size_;
  std::uint32_t first_record_;
};

}  // namespace rail::detail
