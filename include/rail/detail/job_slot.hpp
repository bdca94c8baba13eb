// JobSlot: the fixed record behind every unfinished job. A queue of capacity C preallocates C
// slots (and C payload cells); a job lives in one slot from add to its end, so the steady state
// allocates nothing per job.
//
// Ownership invariant: each slot INDEX is held by exactly one party at any time — the free ring,
// the ready ring, the timer inbox or wheel, or one thread that popped it or won it by a CAS on
// ctl. Only the holder writes the slot's plain fields, which is why they need not be atomic.
//
// The control word `ctl` is what non-holders touch (cancel, state(), debounce, lease lapse,
// a stale handler unpinning):
//   ctl = seq:32 | pins:16 | flags:8 | state:8        (seq in the top bits)
// * state is the SlotState below.
// * seq grows on every state change, so a CAS against a ctl read earlier fails if the slot moved
//   on in between (ABA-safe reuse: a false match needs exactly 2^32 changes of one slot between
//   a read and its CAS). The seq at activation is the delivery's lease token: a
//   handler's outcome counts only if the slot is still active with that seq.
// * pins counts handlers still running on the slot's payload — the live delivery and any stale
//   ones whose lease lapsed. A slot is freed (payload destroyed, index back to the free ring) only
//   by whoever ends the job with pins == 0, or by the last unpinning handler of an ended job.
// * flags: kCancelRequested, set on an active slot by cancel(); the live outcome then counts as
//   cancelled.
//
// State machine (holder-driven unless noted):
//   free --add--> waiting | delayed          delayed --timer--> waiting
//   waiting --pop--> active (pins+1)         active --outcome--> finishing (pins-1)
//   finishing --retry--> waiting | delayed   finishing --end--> free (pins 0) | ended (pins > 0)
//   active --lease lapse (timer)--> waiting | ended         ended --last unpin--> free
//   waiting | delayed --cancel (any thread)--> cancelled --holder--> free | ended
//   delayed --debounce add (any thread)--> updating --> delayed
//
// Memory ordering: plain fields and the payload are published by the ring hand-off (an MpmcRing
// push is a release, a pop an acquire). Transitions by non-holders are acq_rel CASes on ctl, and
// holders load ctl with acquire, so whoever wins a slot by CAS sees the previous holder's writes.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "rail/backoff.hpp"
#include "rail/detail/timing_wheel.hpp"
#include "rail/event.hpp"

namespace rail::detail {

enum class SlotState : std::uint8_t {
  free = 0,
  waiting,
  delayed,
  active,
  finishing,
  updating,
  cancelled,
  ended,
};

/// How a job ended; kept in the slot so the last unpinner can complete a deferred end.
enum class EndKind : std::uint8_t { none, completed, dead_lettered, cancelled };

namespace ctl {
constexpr std::uint64_t kCancelRequested = 1;  // in the flags byte
constexpr unsigned kFlagsShift = 8;
constexpr unsigned kPinsShift = 16;
constexpr unsigned kSeqShift = 32;
constexpr std::uint64_t kSeqMask = 0xFFFF'FFFFULL;

constexpr SlotState state(std::uint64_t c) noexcept {
  return static_cast<SlotState>(c & 0xFF);
}
constexpr std::uint64_t flags(std::uint64_t c) noexcept {
  return (c >> kFlagsShift) & 0xFF;
}
constexpr std::uint32_t pins(std::uint64_t c) noexcept {
  return static_cast<std::uint32_t>((c >> kPinsShift) & 0xFFFF);
}
constexpr std::uint64_t seq(std::uint64_t c) noexcept {
  return c >> kSeqShift;
}
constexpr std::uint64_t make(std::uint64_t seq, std::uint32_t pins, std::uint64_t flags,
                             SlotState s) noexcept {
  return ((seq & kSeqMask) << kSeqShift) | (std::uint64_t{pins} << kPinsShift) |
         (flags << kFlagsShift) | static_cast<std::uint64_t>(s);
}
/// to(c, s): a state change: seq + 1, pins kept, flags cleared.
constexpr std::uint64_t to(std::uint64_t c, SlotState s) noexcept {
  return make(seq(c) + 1, pins(c), 0, s);
}
/// to(c, s, pin_delta): a state change that also takes (+1) or drops (-1) a pin.
constexpr std::uint64_t to(std::uint64_t c, SlotState s, int pin_delta) noexcept {
  return make(seq(c) + 1, static_cast<std::uint32_t>(static_cast<int>(pins(c)) + pin_delta), 0, s);
}
/// unpin(c): same state, seq and flags, one pin fewer (a stale handler leaving).
constexpr std::uint64_t unpin(std::uint64_t c) noexcept {
  return c - (std::uint64_t{1} << kPinsShift);
}
/// with_flag(c, f): same state and seq, flag set.
constexpr std::uint64_t with_flag(std::uint64_t c, std::uint64_t f) noexcept {
  return c | (f << kFlagsShift);
}
}  // namespace ctl

/// Pins count handlers on one slot: at most one per delivery, and a job has at most
/// JobOptions::attempts (<= kMaxAttempts) deliveries, so 16 bits never overflow.
constexpr std::uint32_t kMaxAttempts = 0xFFFF;  // validate_job_options enforces it

/// AttemptRecord: one failed attempt, kept until the job ends (the DLQ keeps them all).
struct AttemptRecord {
  std::uint32_t attempt;
  std::int64_t at_ns;
  std::string message;
};

/// SlotExtra: the cold, variable-size part of a job (its error log and dedup id).
/// Allocated the first time a slot's job fails or uses dedup, then kept with the slot and cleared
/// on reuse, so a warm queue allocates only for error strings longer than the small-string
/// buffer. `errors` reserves room for every attempt on first use so that a stale handler's view
/// of the last error is never invalidated by a reallocation.
struct SlotExtra {
  std::vector<AttemptRecord> errors;
  std::string dedup_key;
};

struct alignas(64) JobSlot {
  std::atomic<std::uint64_t> ctl{0};
  // id is atomic only because cold-path scanners (state(), cancel) read it while the holder may
  // rewrite it on reuse; they validate with ctl. Holder writes are relaxed, published by ctl/ring.
  std::atomic<std::uint64_t> id{0};
  TimerNode timer{};                    // links for the timing wheel (delays and backoff)
  std::atomic<std::int64_t> due_ns{0};  // delayed: run no earlier than this (debounce moves it)
  std::int64_t added_ns = 0;
  std::int64_t started_ns = 0;     // start of the current/last delivery
  std::int64_t prev_delay_ns = 0;  // for decorrelated jitter
  std::int64_t backoff_delay_ns = 0;
  std::int64_t backoff_cap_ns = 0;
  std::int64_t visibility_ns = 0;   // lease length of each delivery
  SlotExtra* extra = nullptr;       // owned by the queue's slot array
  std::uint16_t attempts_made = 0;  // failed attempts so far (lease lapses included)
  std::uint16_t max_attempts = 1;   // JobOptions::attempts (SQS maxReceiveCount)
  std::uint16_t deliveries = 0;     // handler starts (SQS ApproximateReceiveCount)
  std::uint16_t name = 0;           // NameTable index
  BackoffKind backoff_kind = BackoffKind::none;
  Jitter jitter = Jitter::none;
  bool has_dedup = false;
  bool dedup_has_ttl = false;
  EndKind end_kind = EndKind::none;
  DeadLetterReason end_reason = DeadLetterReason::none;

  [[nodiscard]] Backoff backoff() const noexcept {
    return Backoff{backoff_kind, Duration{backoff_delay_ns}, jitter, Duration{backoff_cap_ns}};
  }
  void set_backoff(const Backoff& b) noexcept {
    backoff_kind = b.kind;
    jitter = b.jitter;
    backoff_delay_ns = b.delay.count();
    backoff_cap_ns = b.cap.count();
  }
};
static_assert(sizeof(JobSlot) <= 128,
              "a job's engine overhead must stay within two cache lines (bench target: <= 128 B)");
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

}  // namespace rail::detail
