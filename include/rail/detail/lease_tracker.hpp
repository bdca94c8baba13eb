// LeaseTracker: the visibility timeouts of the handlers a queue is running (SQS's visibility
// timeout, BullMQ's job lock). One record per worker: a worker runs one handler at a time, so
// "the lease of worker w" is all the state a delivery needs.
//
// Guarantee: a lease that is not renewed is found lapsed by the first sweep at or after its
// deadline, and never before it. The queue arms its sweep on the timing wheel at
// min(earliest live deadline, now + shortest visibility timeout), so a sweep always runs at or
// before any deadline (a lease granted after a sweep cannot end before the next one) and lapses
// are detected within one wheel tick.
// Stall warnings (QueueOptions::stall_warning, a fraction f of each lease): a grant or renewal at
// t with deadline D also sets a warning time t + f x (D - t); the first sweep at or after it
// that finds the lease live and not lapsed warns once for that (lease, warning time) pair, so a
// renewal starts a new period. The queue then arms its sweep within f x the shortest lease.
// Algorithm: grant, renew and release are O(1) stores into the worker's own cache line; the
// sweep, run by the wheel owner, is O(workers) — a handful of records — instead of a wheel timer
// per delivery, which would put a cross-thread hand-off on every job's hot path.
// Threading: grant/renew/release by the record's worker only; sweep by the wheel owner only
// (one thread at a time, handed on with the wheel), which alone writes the warned pair.
// Memory ordering: grant stores the warning time and the deadline, then publishes the lease word
// with release; the sweep's acquire load of the lease word therefore sees that deadline and
// warning time (or a renewed later pair). Renewals store the warning time, then the deadline with
// release, so a sweep that reads a deadline reads its warning time or a later one. The warning
// time is stored with release too, so a sweep that read a later lease's time finds the lease
// word changed behind an acquire fence (a seqlock's re-read) and gives no warning for it. A
// sweep racing a renewal may read the older deadline and lapse the lease, which is the documented
// cost of renewing at the last moment (SQS's ChangeMessageVisibility after the timeout fails the
// same way). Deciding a lapse does not free anything: the queue's CAS on the slot's control word
// decides whether the lapse or the handler's outcome wins, exactly once.
// Shutdown: none; records die with the queue.
#pragma once

#include <algorithm>
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

/// kWarnOne: stall-warning fractions are fixed point, parts of kWarnOne (1 << 16).
constexpr std::uint32_t kWarnOne = std::uint32_t{1} << 16;
/// warn_fraction(f): QueueOptions::stall_warning (0 <= f < 1) in parts of kWarnOne; 0: none.
constexpr std::uint32_t warn_fraction(double f) noexcept {
  if (!(f > 0)) return 0;
  const double parts = f * kWarnOne + 0.5;
  return parts < 1 ? 1 : parts >= kWarnOne ? kWarnOne - 1 : static_cast<std::uint32_t>(parts);
}
/// fraction_of(span, parts): span x parts / kWarnOne, rounded toward zero, without overflow
/// (parts < kWarnOne: the result lies between 0 and span).
constexpr std::int64_t fraction_of(std::int64_t span, std::uint32_t parts) noexcept {
  return (span / kWarnOne) * parts + (span % kWarnOne) * parts / kWarnOne;
}

template <template <class> class Atom = std::atomic>
struct alignas(64) BasicLeaseRecord {
  static constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();
  Atom<std::uint64_t> lease{0};
  Atom<std::int64_t> deadline_ns{0};
  // When the sweep warns that the lease's handler is stalling (kNever: no warning).
  Atom<std::int64_t> warn_ns{kNever};
  // The sweep's own: the lease and warning time it last warned for, and the pair before
  // (relaxed: one sweeper at a time, handed on with the wheel, which orders its accesses).
  Atom<std::uint64_t> warned_lease{0};
  Atom<std::int64_t> warned_ns{0};
  Atom<std::uint64_t> earlier_lease{0};
  Atom<std::int64_t> earlier_ns{0};
  // The fraction of each lease after which the sweep warns, in parts of kWarnOne (0: never);
  // fixed before any worker starts.
  std::uint32_t warn_parts = 0;

  /// warned(lease, at): the sweep gave this record's warning for `lease`'s period warned at `at`
  /// (one of its last two); the sweep's read.
  [[nodiscard]] bool warned(std::uint64_t l, std::int64_t at) const noexcept {
    return (warned_lease.load(std::memory_order_relaxed) == l &&
            warned_ns.load(std::memory_order_relaxed) == at) ||
           (earlier_lease.load(std::memory_order_relaxed) == l &&
            earlier_ns.load(std::memory_order_relaxed) == at);
  }
};

/// Atom is std::atomic in the engine and DeterministicAtomic in tests/lease_test.cpp.
template <template <class> class Atom = std::atomic>
class BasicLeaseTracker {
 public:
  static constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();

  using LeaseRecord = BasicLeaseRecord<Atom>;

  /// BasicLeaseTracker(workers, warn_parts): warn_parts: warn_fraction(stall_warning).
  explicit BasicLeaseTracker(std::size_t workers, std::uint32_t warn_parts = 0)
      : count_(workers == 0 ? 1 : workers), records_(std::make_unique<LeaseRecord[]>(count_)) {
    for (std::size_t w = 0; w < count_; ++w)
      records_[w].warn_parts = warn_parts;
  }

  [[nodiscard]] std::size_t size() const noexcept { return count_; }
  [[nodiscard]] LeaseRecord& record(std::size_t w) noexcept { return records_[w]; }

  /// warn_at(r, now, deadline): when a lease of r running from now to deadline is warned about.
  [[nodiscard]] static std::int64_t warn_at(const LeaseRecord& r, std::int64_t now,
                                            std::int64_t deadline) noexcept {
    if (r.warn_parts == 0 || deadline == kNever) return kNever;
    return now + fraction_of(deadline - now, r.warn_parts);
  }
  /// grant(r, lease, deadline, now): the record's handler holds `lease` from now until deadline.
  static void grant(LeaseRecord& r, std::uint64_t lease, std::int64_t deadline,
                    std::int64_t now) noexcept {
    place(r, lease, deadline, warn_at(r, now, deadline));
  }
  /// hand_over(to, from, lease): `to` takes the lease `from` holds, with its deadline and warning
  /// time (a warning already given is not given again); the caller then takes it off `from`.
  static void hand_over(LeaseRecord& to, const LeaseRecord& from, std::uint64_t lease) noexcept {
    // relaxed: `from` is the caller's own; the warned pair is the sweep's, and a stale read of
    // it is caught by the sweep (warn() finds the pair in `from`).
    const std::int64_t warn = from.warn_ns.load(std::memory_order_relaxed);
    place(to, lease, from.deadline_ns.load(std::memory_order_relaxed),
          from.warned(lease, warn) ? kNever : warn);
  }
  /// renew(r, lease, deadline, now): moves the deadline (and the warning time: a new period
  /// from now) if r still holds `lease`; false otherwise.
  static bool renew(LeaseRecord& r, std::uint64_t lease, std::int64_t deadline,
                    std::int64_t now) noexcept {
    // acquire: a sweep that cleared the lease did so after deciding the lapse; seeing it cleared
    // means the lease is gone.
    if (r.lease.load(std::memory_order_acquire) != lease) return false;
    // release: see place().
    if (r.warn_parts != 0) r.warn_ns.store(warn_at(r, now, deadline), std::memory_order_release);
    r.deadline_ns.store(deadline, std::memory_order_release);
    return r.lease.load(std::memory_order_acquire) == lease;
  }
  /// next_check(r, now): when the sweep next has to look at r's lease (its warning, if still to
  /// come, or its deadline); read by the record's owner, to ask for an earlier sweep after
  /// shortening its lease. A warning time already past bounds nothing: the sweep may have given
  /// it and be armed at the deadline.
  [[nodiscard]] static std::int64_t next_check(const LeaseRecord& r, std::int64_t now) noexcept {
    // relaxed: the caller wrote both.
    const std::int64_t warn = r.warn_ns.load(std::memory_order_relaxed);
    const std::int64_t deadline = r.deadline_ns.load(std::memory_order_relaxed);
    return warn > now && warn < deadline ? warn : deadline;
  }
  /// release(r): the handler returned.
  static void release(LeaseRecord& r) noexcept {
    r.lease.store(0, std::memory_order_release);  // pairs with the sweep's acquire load
  }

  /// sweep(now, on_lapse, on_warn): calls on_lapse(lease, deadline) for every lease whose
  /// deadline is <= now and clears it, and on_warn(lease, deadline) once for every live one whose
  /// warning time is <= now (see the header); returns the earliest deadline or warning time still
  /// pending (kNever if none).
  /// Records are visited first to last: a lease handed over (hand_over) goes from a worker's
  /// record to a later one, placed there before it leaves the worker's, so every sweep finds it
  /// in one record or both.
  template <class OnLapse, class OnWarn>
  std::int64_t sweep(std::int64_t now, OnLapse&& on_lapse, OnWarn&& on_warn) {
    std::int64_t earliest = kNever;
    for (std::size_t w = 0; w < count_; ++w) {
      LeaseRecord& r = records_[w];
      std::uint64_t lease = r.lease.load(std::memory_order_acquire);
      if (lease == 0) continue;
      std::int64_t deadline = r.deadline_ns.load(std::memory_order_acquire);
      if (deadline > now) {
        earliest = deadline < earliest ? deadline : earliest;
        if (r.warn_parts != 0)
          earliest = std::min(earliest, warn(r, lease, deadline, now, on_warn));
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
  /// warn(r, lease, deadline, now, on_warn): r's live lease, not lapsed by now: warns if its
  /// time came and it was not warned for this period yet, in r or in the record it was handed
  /// over from; returns when it will be (kNever: no warning pending).
  template <class OnWarn>
  std::int64_t warn(LeaseRecord& r, std::uint64_t lease, std::int64_t deadline, std::int64_t now,
                    OnWarn& on_warn) {
    // relaxed: written before the deadline just read with acquire, so this is its period's
    // warning time or a later one's: a renewal's, or a later lease's (checked below).
    const std::int64_t at = r.warn_ns.load(std::memory_order_relaxed);
    if (at == kNever) return kNever;
    // relaxed: the sweep's own words (see the record).
    if (r.warned(lease, at)) return kNever;
    if (at > now) return at;
    // A seqlock's check: if `at` was a later lease's, its release store came after this lease
    // was released, so after the acquire fence the lease word no longer reads `lease`.
    std::atomic_thread_fence(std::memory_order_acquire);
    if (r.lease.load(std::memory_order_relaxed) != lease) return kNever;  // released meanwhile
    // A hand-over reads the worker's warned pair before it clears the worker's record: a sweep
    // that warned through that record in between leaves the period pending here too. The pairs
    // are the sweep's own, so a scan finds it; warnings are rare, so O(records) each is cheap.
    // Between that warning and this record's first visit after the hand-over, the worker's
    // record can warn once more at most (its next lease, earlier in the same pass): each record
    // keeps its last two pairs.
    bool given = false;
    for (std::size_t w = 0; w < count_ && !given; ++w)
      given = records_[w].warned(lease, at);
    r.earlier_lease.store(r.warned_lease.load(std::memory_order_relaxed),
                          std::memory_order_relaxed);
    r.earlier_ns.store(r.warned_ns.load(std::memory_order_relaxed), std::memory_order_relaxed);
    r.warned_lease.store(lease, std::memory_order_relaxed);
    r.warned_ns.store(at, std::memory_order_relaxed);
    if (!given) on_warn(lease, deadline);
    return kNever;
  }

  static void place(LeaseRecord& r, std::uint64_t lease, std::int64_t deadline,
                    std::int64_t warn) noexcept {
    // release, with warnings on: a sweep that reads this warning time or deadline and then finds
    // the lease word unchanged knows they are this lease's (warn()). Off, the warning time stays
    // kNever and the deadline is published by the lease word's release.
    if (r.warn_parts != 0) {
      r.warn_ns.store(warn, std::memory_order_release);
      r.deadline_ns.store(deadline, std::memory_order_release);
    } else {
      r.deadline_ns.store(deadline, std::memory_order_relaxed);
    }
    r.lease.store(lease, std::memory_order_release);
  }

  std::size_t count_;
  std::unique_ptr<LeaseRecord[]> records_;
};

using LeaseRecord = BasicLeaseRecord<>;
using LeaseTracker = BasicLeaseTracker<>;

}  // namespace rail::detail
