// LeaseTracker: the visibility timeouts of the handlers a queue is running (SQS's visibility
// timeout, BullMQ's job lock). One record per worker: a worker runs one handler at a time, so
// "the lease of worker w" is all the state a delivery needs.
//
// Guarantee: a lease that is not renewed is found lapsed by the first sweep at or after its
// deadline, and never before it. The queue arms its sweep on the timing wheel at
// min(earliest live deadline, now + shortest visibility timeout), so a sweep always runs at or
// before any deadline (a lease granted after a sweep cannot end before the next one) and lapses
// are detected within one wheel tick.
// Algorithm: grant, renew and release are O(1) stores into the worker's own cache line; the
// sweep, run by the wheel owner, is O(workers) — a handful of records — instead of a wheel timer
// per delivery, which would put a cross-thread hand-off on every job's hot path.
// Threading: grant/renew/release by the record's worker only; sweep by the wheel owner only.
// Memory ordering: grant stores the deadline, then publishes the lease word with release; the
// sweep's acquire load of the lease word therefore sees that deadline (or a renewed later one).
// Renewals store the deadline with release; a sweep racing a renewal may read the older deadline
// and lapse the lease, which is the documented cost of renewing at the last moment (SQS's
// ChangeMessageVisibility after the timeout fails the same way). Deciding a lapse does not free
// anything: the queue's CAS on the slot's control word decides whether the lapse or the handler's
// outcome wins, exactly once.
// Shutdown: none; records die with the queue.
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>

namespace rail::detail {

/// lease word: token:32 | 1:1 | slot index:31; 0 = no lease. The marker bit keeps a live lease
/// nonzero when its token is 0 (a slot's seq wraps) on slot 0; slot indices stay below 2^29.
constexpr std::uint64_t kLeaseMarker = std::uint64_t{1} << 31;
constexpr std::uint64_t make_lease(std::uint32_t slot, std::uint32_t token) noexcept {
  return (std::uint64_t{token} << 32) | kLeaseMarker | slot;
}
constexpr std::uint32_t lease_slot(std::uint64_t lease) noexcept {
  return static_cast<std::uint32_t>(lease & (kLeaseMarker - 1));
}
constexpr std::uint32_t lease_token(std::uint64_t lease) noexcept {
  return static_cast<std::uint32_t>(lease >> 32);
}

template <template <class> class Atom = std::atomic>
struct alignas(64) BasicLeaseRecord {
  Atom<std::uint64_t> lease{0};
  Atom<std::int64_t> deadline_ns{0};
};

/// Atom is std::atomic in the engine and DeterministicAtomic in tests/lease_test.cpp.
template <template <class> class Atom = std::atomic>
class BasicLeaseTracker {
 public:
  static constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();

  using LeaseRecord = BasicLeaseRecord<Atom>;

  explicit BasicLeaseTracker(std::size_t workers)
      : count_(workers == 0 ? 1 : workers), records_(std::make_unique<LeaseRecord[]>(count_)) {}

  [[nodiscard]] std::size_t size() const noexcept { return count_; }
  [[nodiscard]] LeaseRecord& record(std::size_t w) noexcept { return records_[w]; }

  /// grant(w, lease, deadline): worker w's handler holds `lease` until deadline.
  static void grant(LeaseRecord& r, std::uint64_t lease, std::int64_t deadline) noexcept {
    r.deadline_ns.store(deadline, std::memory_order_relaxed);  // published by the release below
    r.lease.store(lease, std::memory_order_release);
  }
  /// renew(r, lease, deadline): moves the deadline if r still holds `lease`; false otherwise.
  static bool renew(LeaseRecord& r, std::uint64_t lease, std::int64_t deadline) noexcept {
    // acquire: a sweep that cleared the lease did so after deciding the lapse; seeing it cleared
    // means the lease is gone.
    if (r.lease.load(std::memory_order_acquire) != lease) return false;
    r.deadline_ns.store(deadline, std::memory_order_release);
    return r.lease.load(std::memory_order_acquire) == lease;
  }
  /// release(r): the handler returned.
  static void release(LeaseRecord& r) noexcept {
    r.lease.store(0, std::memory_order_release);  // pairs with the sweep's acquire load
  }

  /// sweep(now, on_lapse): calls on_lapse(lease, deadline) for every lease whose deadline is
  /// <= now and clears it; returns the earliest deadline still pending (kNever if none).
  template <class OnLapse>
  std::int64_t sweep(std::int64_t now, OnLapse&& on_lapse) {
    std::int64_t earliest = kNever;
    for (std::size_t w = 0; w < count_; ++w) {
      LeaseRecord& r = records_[w];
      std::uint64_t lease = r.lease.load(std::memory_order_acquire);
      if (lease == 0) continue;
      std::int64_t deadline = r.deadline_ns.load(std::memory_order_acquire);
      if (deadline > now) {
        earliest = deadline < earliest ? deadline : earliest;
        continue;
      }
      // relaxed on failure: the worker replaced or released the lease; nothing to do.
      if (r.lease.compare_exchange_strong(lease, 0, std::memory_order_acq_rel,
                                          std::memory_order_relaxed))
        on_lapse(lease, deadline);
    }
    return earliest;
  }

 private:
  std::size_t count_;
  std::unique_ptr<LeaseRecord[]> records_;
};

using LeaseRecord = BasicLeaseRecord<>;
using LeaseTracker = BasicLeaseTracker<>;

}  // namespace rail::detail
