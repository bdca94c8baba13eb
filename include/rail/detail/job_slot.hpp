// JobSlot: the fixed record behind every unfinished job. A queue of capacity C preallocates C
// slots (and C payload cells); a job lives in one slot from add to its end, so the steady state
// allocates nothing per job.
//
// Ownership invariant: each slot INDEX is held by exactly one party at any time — the free list
// (recycled, or never used yet: free_slots.hpp), the ready ring or a worker's stash, the timer
// inbox or wheel (a job due never is parked: unlinked, held by the wheel owner), or one thread
// that popped it or won it by a CAS on ctl. Only the holder writes the slot's plain fields, which
// is why they need not be atomic.
//
// The control word `ctl` is what non-holders touch (cancel, state(), debounce, lease lapse, a
// stale handler unpinning). Its layout, its state machine and the pin rule are SlotControl's
// (slot_table.hpp), the only code that changes it.
//
// Memory ordering: plain fields and the payload are published by the ring hand-off (an MpmcRing
// push is a release, a pop an acquire) or by ctl (release stores and acq_rel CASes, acquire
// loads). The fields that state() reads while a worker may write them (attempts, deliveries,
// stalls, start time) are relaxed atomics: state() re-reads the word and the id after them, so it
// never mixes two jobs, but a count may lag its job's latest transition by a moment (an approximate
// snapshot, as SQS's ApproximateReceiveCount).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "rail/backoff.hpp"
#include "rail/detail/prefetch.hpp"
#include "rail/detail/slot_table.hpp"
#include "rail/detail/timing_wheel.hpp"
#include "rail/event.hpp"
#include "rail/job_state.hpp"

namespace rail::detail {

/// How a job ended; kept in the slot so the last unpinner can complete a deferred end.
/// `filed`: dead-lettered while a stale handler still read the payload, and its DLQ entry was
/// filed at once from a copy, so the last handler to return only destroys the payload.
enum class EndKind : std::uint8_t {
  none,
  completed,
  dead_lettered,
  cancelled,
  filed,
  discarded,
  forwarded,  // a resumed job's next attempt went back to its broker (JobSlot::kForward)
};

/// status_of(k): the status a job that ended as k reports (filed: dead-lettered).
constexpr JobStatus status_of(EndKind k) noexcept {
  switch (k) {
    case EndKind::completed:
      return JobStatus::completed;
    case EndKind::dead_lettered:
    case EndKind::filed:
      return JobStatus::dead_lettered;
    case EndKind::cancelled:
      return JobStatus::cancelled;
    case EndKind::discarded:
      return JobStatus::discarded;
    case EndKind::forwarded:
      return JobStatus::forwarded;
    case EndKind::none:
      break;
  }
  return JobStatus::unknown;
}

/// AttemptRecord: one failed attempt, kept until the job ends (the DLQ keeps them all).
struct AttemptRecord {
  std::uint32_t attempt;
  std::int64_t at_ns;
  std::string message;
  std::int64_t next_delay_ns = 0;  // the wait it led to (decorrelated jitter's previous delay)
};

class FlowNode;
class RetryHere;

/// SlotRare: what almost no job has: its own name (when the engine's name table is full:
/// name_table.hpp) and, for a parent (JobOptions::after), its dependency record (flow_node.hpp),
/// kept until the slot's next job is filled in, so a stale handler of the parent may still read
/// its children; for a job resumed from a broker whose short retries stay here, its consumer's
/// RetryHere and whether it holds one of its places (resumed.hpp).
struct SlotRare {
  std::string own_name;
  std::shared_ptr<FlowNode> parent;
  std::shared_ptr<RetryHere> retry_here;
  bool holds_retry_place = false;
};

/// SlotExtra: the cold, variable-size part of a job (its error log, dedup id, and the rare
/// parts).
/// Allocated the first time a slot's job fails or uses dedup, then kept with the slot and cleared
/// on reuse, so a warm queue allocates only for error strings longer than the small-string
/// buffer. `errors` reserves room for every attempt on first use so that a stale handler's view
/// of the last error is never invalidated by a reallocation.
struct SlotExtra {
  std::vector<AttemptRecord> errors;
  std::string dedup_key;
  // Boxed: the rare cases must not grow every job that fails or deduplicates (64 bytes keep
  // SlotExtra in one allocator bin).
  std::unique_ptr<SlotRare> rare;
};

// Layout: a plain delivery touches both lines (started_ns and deliveries are on the second).
// All delivery fields on the first line would speed bulk adds but slow single adds: workers that
// keep up take each job as it lands, and each hand-off costs the producer the ring cell's line.
/// DedupHold: whether a job holds a dedup id, and whether for a ttl window (released by the ttl,
/// not by the job's end, unless cancelled); ttl_unless_active: a ttl window held past its end
/// while the job runs (keep_last_if_active: DedupClaims::running).
enum class DedupHold : std::uint8_t { none, until_end, with_ttl, ttl_unless_active };

struct alignas(64) JobSlot {
  SlotControl<> ctl;
  // id is atomic only because cold-path scanners (state(), cancel) read it while the holder may
  // rewrite it on reuse; they validate with ctl. Holder writes are relaxed, published by ctl/ring.
  std::atomic<std::uint64_t> id{0};
  TimerNode timer{};  // links for the timing wheel (delays and backoff)
  // Delayed: run no earlier than this (debounce moves it). Waiting: when it was last due (its
  // add, its delay's or backoff's end, a redelivery, its downstream's hold): its wait's start.
  std::atomic<std::int64_t> due_ns{0};
  std::int64_t added_ns = 0;
  // The start of the current or last delivery; before the first (deliveries 0), the time by
  // which the job must start (JobOptions::expire_after; kNever: none): see expires_at().
  std::atomic<std::int64_t> started_ns{0};
  std::int64_t timeout_ns = 0;  // the longest an attempt may run (max: no limit)
  std::int64_t backoff_delay_ns = 0;
  std::int64_t backoff_cap_ns = 0;
  std::int64_t visibility_ns = 0;                 // lease length of each delivery
  SlotExtra* extra = nullptr;                     // owned by the queue's slot array
  std::atomic<std::uint16_t> failed_attempts{0};  // failed attempts so far (lapses included)
  std::uint16_t max_attempts = 1;                 // JobOptions::max_attempts (SQS maxReceiveCount)
  std::atomic<std::uint16_t> deliveries{0};       // handler starts (SQS ApproximateReceiveCount)
  // NameTable index, or kOwnName: the name is in extra->own_name. Atomic only because the lease
  // sweep's stall warning reads it while the slot may be reused (relaxed: validated by ctl).
  std::atomic<std::uint16_t> name{0};
  std::uint8_t backoff_bits = 0;  // BackoffKind << 4 | Jitter: see backoff() (a byte for `link`)
  // The downstream the job calls (its queue's GateLink, gate_link.hpp: the low 4 bits) and its
  // priority level (JobOptions::priority: the high 4 bits). Written by the holder at the add;
  // atomic only because explain() reads it while the slot may be reused (relaxed: it validates
  // with ctl and the id, as state() does).
  static constexpr unsigned kPriorityShift = 4;  // 16 links (GateLink::kMaxLinks), 16 levels
  std::atomic<std::uint8_t> link{0};
  DedupHold dedup = DedupHold::none;  // the dedup id the job holds (its key in extra)
  // How the job ended: `none` until its end is decided (JobEnds::note sets it before the
  // history entry), kept until the slot's next job is filled in (init_slot resets it after
  // storing the new id). Written by whoever ends the job (its holder; for a cancelled job the
  // canceller and the index's holder, both `cancelled`); read by JobQueries::place, which needs
  // no lossy history to tell a job moving out of its slot that decided its end from one that
  // has not. release stores, acquire loads: a reader that sees a value sees the id of the job
  // that wrote it.
  std::atomic<EndKind> end_kind{EndKind::none};
  DeadLetterReason end_reason = DeadLetterReason::none;
  // Marks, each set or cleared by one read-modify-write: the thread that holds the index
  // writes them, but a canceller also clears kGrouped while a gate's wake or the wheel's owner
  // holds the index and sets or clears another mark (a plain load and store could then bring a
  // cleared mark back). The hand-off of the index publishes them. relaxed: other readers
  // (state(), listings) validate with ctl, as they do id.
  //   kWoken  moved to ready by its gate's wake (GateLink::wake_blocked, while it holds the
  //           index): its deliverer takes it and tells the gate (DownstreamGate::admit's `woken`)
  //   kHeld   waiting on the timing wheel for its downstream (the gate's leader until a token or
  //           a pause's end, or a job the downstream pushed back): in state `delayed` there, but
  //           counted and reported waiting (BullMQ keeps rate-limited jobs in wait); whoever
  //           takes the job off the wheel (or debounces it: then it is delayed) clears it
  //   kGrouped the job belongs to a FIFO group (JobOptions::group): its place there is
  //           FifoGroups' (fifo_groups.hpp); set once it entered the group, cleared when it
  //           leaves it (its end, an undone add, take_leftovers), so a free slot never has it
  //   kTenant the job has a tenant (JobOptions::tenant): its place in the tenant's line is
  //           Lines' (lines.hpp), set and cleared as kGrouped
  //   kExpiredDelayed the expiry sweep (or a failed dependency) took it delayed (not held): it
  //           leaves the `delayed` gauge, not `waiting`, when its holder ends it
  //           (JobEnds::end_unstarted)
  //   kWaitingChildren a parent parked on the wheel until its children end (JobOptions::after),
  //           counted in FlowParts::parents_waiting until whoever takes the mark off (its
  //           release, or its end) counts it out
  //   kRetry  a failed attempt scheduled a retry (on a queue with histograms): the next start
  //           records its lateness and takes the mark (FlowParts::record_start)
  //   kForward a job resumed from a broker (JobFlow::add_resumed): set at its add, before it is
  //           published; a failure with attempts left, or a lapse that would deliver it
  //           again, ends it here as EndKind::forwarded instead (its broker retries it)
  static constexpr std::uint8_t kWoken = 1, kHeld = 2, kGrouped = 4, kTenant = 8,
                                kExpiredDelayed = 16, kWaitingChildren = 32, kRetry = 64,
                                kForward = 128;
  std::atomic<std::uint8_t> marks{0};
  std::atomic<std::uint16_t> stalls{0};  // lapsed leases (BullMQ stalledCounter)

  /// downstream_link(): `link`, read by the holder or a validating reader.
  [[nodiscard]] std::uint8_t downstream_link() const noexcept {
    return link.load(std::memory_order_relaxed) & ((1u << kPriorityShift) - 1);
  }
  /// priority(): the job's priority level (JobOptions::priority), as downstream_link() reads.
  [[nodiscard]] std::uint32_t priority() const noexcept {
    return link.load(std::memory_order_relaxed) >> kPriorityShift;
  }
  [[nodiscard]] bool marked(std::uint8_t m) const noexcept {
    return (marks.load(std::memory_order_relaxed) & m) != 0;
  }
  /// mark(m, on): sets or clears m, leaving the other marks as they are.
  void mark(std::uint8_t m, bool on) noexcept {
    if (on) {
      marks.fetch_or(m, std::memory_order_relaxed);
    } else {
      marks.fetch_and(static_cast<std::uint8_t>(~m), std::memory_order_relaxed);
    }
  }
  /// take_mark(m): clears m; whether it was set.
  bool take_mark(std::uint8_t m) noexcept {
    if (!marked(m)) return false;  // the common case costs a load
    return (marks.fetch_and(static_cast<std::uint8_t>(~m), std::memory_order_relaxed) & m) != 0;
  }

  // The holder's reads and writes of the fields state() also reads (relaxed: see the header).
  [[nodiscard]] std::uint16_t attempts() const noexcept {
    return failed_attempts.load(std::memory_order_relaxed);
  }
  [[nodiscard]] std::uint16_t name_id() const noexcept {
    return name.load(std::memory_order_relaxed);
  }
  [[nodiscard]] std::uint16_t delivered() const noexcept {
    return deliveries.load(std::memory_order_relaxed);
  }
  [[nodiscard]] std::uint16_t stalled() const noexcept {
    return stalls.load(std::memory_order_relaxed);
  }
  [[nodiscard]] std::int64_t started() const noexcept {
    return started_ns.load(std::memory_order_relaxed);
  }
  /// expires_at(): when the job, never started yet, expires (kNever: it does not, or it has
  /// started). A scanner that does not hold the index validates it with ctl, as state() does.
  // acquire, then the count: deliver writes the count before the start time (release), so a
  // start time read from a delivery under way comes with its count (never taken for an expiry).
  [[nodiscard]] std::int64_t expires_at() const noexcept {
    const std::int64_t at = started_ns.load(std::memory_order_acquire);
    return delivered() == 0 ? at : std::numeric_limits<std::int64_t>::max();
  }

  /// ended_as() / end_as(k): end_kind, read and written as its comment says.
  [[nodiscard]] EndKind ended_as() const noexcept {
    return end_kind.load(std::memory_order_acquire);
  }
  void end_as(EndKind k) noexcept { end_kind.store(k, std::memory_order_release); }

  [[nodiscard]] Backoff backoff() const noexcept {
    return Backoff{static_cast<BackoffKind>(backoff_bits >> 4), Duration{backoff_delay_ns},
                   static_cast<Jitter>(backoff_bits & 0xF), Duration{backoff_cap_ns}};
  }
  void set_backoff(const Backoff& b) noexcept {
    static_assert(static_cast<unsigned>(BackoffKind::custom) < 16 &&
                  static_cast<unsigned>(Jitter::decorrelated) < 16);
    backoff_bits = static_cast<std::uint8_t>(static_cast<unsigned>(b.kind) << 4 |
                                             static_cast<unsigned>(b.jitter));
    backoff_delay_ns = b.delay.count();
    backoff_cap_ns = b.cap.count();
  }
};
static_assert(sizeof(SlotExtra) <= 64, "see SlotExtra::own_name");
static_assert(sizeof(JobSlot) <= 128,
              "a job's engine overhead must stay within two cache lines (bench target: <= 128 B)");
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

/// kSlotLines: the cache lines of a slot header (alignas(64), so whole lines).
inline constexpr std::size_t kSlotLines = sizeof(JobSlot) / 64;
/// prefetch_slot(s, lines): starts fetching, for writing, the first `lines` lines of slot header
/// s (prefetch.hpp): the thread that takes a job next writes its header.
inline void prefetch_slot(const JobSlot& s, std::size_t lines = kSlotLines) noexcept {
  const auto* p = reinterpret_cast<const char*>(&s);
  for (std::size_t line = 0; line < lines && line < kSlotLines; ++line)
    prefetch_for_write(p + line * 64);
}

}  // namespace rail::detail
