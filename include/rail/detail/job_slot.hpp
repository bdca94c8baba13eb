// JobSlot: the fixed record behind every unfinished job. A queue of capacity C preallocates C
// slots (and C payload cells); a job lives in one slot from add to its end, so the steady state
// allocates nothing per job.
//
// Ownership invariant: each slot INDEX is held by exactly one party at any time — the free ring,
// the ready ring, the timer inbox or wheel, or one worker/producer that popped it. Only the holder
// writes the slot's plain fields. That is what lets the fields be non-atomic.
//
// The control word `ctl` is the one field other parties may touch (cancel, state(), debounce):
//   ctl = (seq << 8) | state
// Every transition bumps seq, so a compare-exchange against a ctl value read earlier fails if the
// slot moved on in between (ABA-safe slot reuse; the seq at activation is the lease token that
// fences a late outcome from a previous delivery).
//
// State machine (holder-driven unless noted):
//   free --add--> waiting --pop--> active --done/DLQ--> free
//   free --add(delay)--> delayed --timer--> waiting
//   active --retry--> delayed | waiting
//   delayed --debounce add (any thread)--> updating --> delayed
//
// Memory ordering: plain fields are published by the ring hand-off (a ring push is a release,
// a pop an acquire: rail::detail::MpmcRing). ctl transitions by non-holders use acq_rel CAS so the
// holder that later loads ctl with acquire sees what they wrote (e.g. a debounced payload).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "rail/backoff.hpp"
#include "rail/detail/timing_wheel.hpp"

namespace rail::detail {

enum class SlotState : std::uint8_t { free = 0, waiting, delayed, active, updating };

constexpr std::uint64_t make_ctl(std::uint64_t seq, SlotState s) noexcept {
  return (seq << 8) | static_cast<std::uint64_t>(s);
}
constexpr SlotState ctl_state(std::uint64_t ctl) noexcept {
  return static_cast<SlotState>(ctl & 0xFF);
}
constexpr std::uint64_t ctl_seq(std::uint64_t ctl) noexcept {
  return ctl >> 8;
}
/// next_ctl(c, s): the transition from c to state s.
constexpr std::uint64_t next_ctl(std::uint64_t c, SlotState s) noexcept {
  return make_ctl(ctl_seq(c) + 1, s);
}

/// AttemptRecord: one failed attempt, kept until the job ends (the DLQ keeps them all).
struct AttemptRecord {
  std::uint32_t attempt;
  std::int64_t at_ns;
  std::string message;
};

/// SlotExtra: the cold, variable-size part of a job (errors, dedup id). Allocated the first time
/// a slot's job fails or uses dedup, then kept with the slot and cleared on reuse, so a warm queue
/// allocates only for error strings longer than the small-string buffer.
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
  std::int64_t started_ns = 0;     // start of the current/last attempt
  std::int64_t prev_delay_ns = 0;  // for decorrelated jitter
  std::int64_t backoff_delay_ns = 0;
  std::int64_t backoff_cap_ns = 0;
  SlotExtra* extra = nullptr;       // owned by the queue's slot array
  std::uint32_t attempts_made = 0;  // failed attempts so far
  std::uint32_t max_attempts = 1;
  std::uint16_t name = 0;  // NameTable index
  BackoffKind backoff_kind = BackoffKind::none;
  Jitter jitter = Jitter::none;
  bool has_dedup = false;
  bool dedup_has_ttl = false;

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
