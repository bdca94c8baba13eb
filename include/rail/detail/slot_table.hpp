// SlotControl: the control word of one job slot and the only code that changes it. Every state
// change of a job is one of the named transitions below; each checks its preconditions
// (RAIL_INVARIANT), so the pin rule lives here and nowhere else.
//
// Word layout: ctl = seq:32 | pins:16 | flags:8 | state:8        (seq in the top bits)
// * state: the SlotState.
// * seq grows on every state change, so a CAS against a word read earlier fails if the slot moved
//   on in between (ABA: a false match needs exactly 2^32 changes of one slot between a read and
//   its CAS). The seq at activation is the delivery's lease token: a handler's outcome counts
//   only if the slot is still active with that seq.
// * pins counts handlers still running on the slot's payload: the live delivery and any stale
//   ones whose lease lapsed. The pin rule: while pins > 0 nobody writes, moves or destroys the
//   payload, and nobody frees the slot. Whoever ends a job with pins == 0 frees it; otherwise the
//   last unpinning handler of an `ended` slot does.
// * flags: kCancelRequested, set on an active slot by cancel(); the live outcome then counts as
//   cancelled. kExpired, set with `cancelled` by expire(): the index's holder ends the job
//   dead-lettered (reason expired) instead of reclaiming a cancelled one (expired()).
//
// State machine. "Holder" is the one party holding the slot's index (a ring, the wheel, or a
// thread that popped it or won it by CAS); holders write plain fields, others only CAS ctl.
//   free       --publish (holder)--------------> waiting | delayed
//   delayed    --fire (wheel owner)------------> waiting
//   waiting    --activate (popper, pins+1)-----> active          (token = the new seq)
//   active     --deactivate (popper, pins-1)---> waiting         (the engine is stopping)
//   active     --finish (live handler, pins-1)-> finishing
//   active     --lapse (lease sweep)-----------> finishing       (the handler keeps its pin)
//   finishing  --leave (holder)----------------> waiting | delayed   (a retry)
//   finishing | cancelled --end (holder)-------> free-now (pins 0) | ended (pins > 0)
//   ended      --unpin to 0 pins---------------> the unpinner frees it
//   waiting | delayed --cancel (any thread, pins+1 while it records the end)--> cancelled
//   waiting | delayed --expire (the expiry sweep)--> cancelled + kExpired (its holder ends it)
//   delayed, pins 0   --begin_update (any thread)--> updating --end_update--> delayed
//   delayed           --begin_retime (wheel owner)--> updating --end_retime--> delayed
//   waiting | delayed, pins 0 --take_unstarted (after shutdown)--> finishing (then freed)
//   any with pins > 0 --unpin (a stale handler leaving)--> same state, pins-1
//   any with pins > 0 --pin (a handler deferring its delivery, Job::defer)--> same state, pins+1
// "free-now" leaves the word as it is: the caller still holds the slot exclusively (pins 0, and
// no transition above applies to finishing/cancelled with 0 pins from another thread) and
// calls mark_free() once it has moved the payload out.
//
// Memory ordering: loads are acquire (whoever acts on a state sees the fields of the party that
// set it); CASes are acq_rel (they take a slot and publish what was written before); the
// holder's plain stores (publish, end_update, mark_free) are release, for the same reason.
// Failure orders are acquire: the loop acts on the reloaded word.
//
// Threading: any thread; see each transition for who may call it. Atom is std::atomic in the
// engine and DeterministicAtomic in tests/slot_table_test.cpp, which replays interleavings.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>

#include "rail/detail/assert.hpp"

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

namespace ctl {
constexpr std::uint64_t kCancelRequested = 1;  // in the flags byte
constexpr std::uint64_t kExpired = 2;          // in the flags byte, with `cancelled`
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
constexpr std::uint32_t seq(std::uint64_t c) noexcept {
  return static_cast<std::uint32_t>(c >> kSeqShift);
}
/// zombies(c): the pins of handlers whose delivery no longer counts (a lapse or a timeout fenced
/// it): every pin but an active slot's live delivery. A figure: a handler handing its delivery to
/// a Completion (Job::defer) or a cancel recording its end pins the slot for a moment too.
constexpr std::uint32_t zombies(std::uint64_t c) noexcept {
  const std::uint32_t live = static_cast<SlotState>(c & 0xFF) == SlotState::active ? 1 : 0;
  return pins(c) > live ? pins(c) - live : 0;
}
constexpr std::uint64_t make(std::uint64_t seq, std::uint32_t pins, std::uint64_t flags,
                             SlotState s) noexcept {
  return ((seq & kSeqMask) << kSeqShift) | (std::uint64_t{pins} << kPinsShift) |
         (flags << kFlagsShift) | static_cast<std::uint64_t>(s);
}
/// to(c, s, pin_delta): a state change: seq + 1, pins adjusted, flags cleared.
constexpr std::uint64_t to(std::uint64_t c, SlotState s, int pin_delta = 0) noexcept {
  return make(std::uint64_t{seq(c)} + 1,
              static_cast<std::uint32_t>(static_cast<int>(pins(c)) + pin_delta), 0, s);
}
}  // namespace ctl

/// Pins count handlers on one slot: at most one per delivery still running, so at most the
/// queue's worker threads (WorkerOptions::kMaxConcurrency, 4096), its pending Completions
/// (WorkerOptions::max_pending, at most kMaxPending) plus a canceller's pin: 16 bits never
/// overflow (options.hpp bounds kMaxPending so), however many deliveries stalls and retries add
/// up to.
constexpr std::uint32_t kMaxAttempts = 0xFFFF;  // validate_job_options enforces it

template <template <class> class Atom = std::atomic>
class SlotControl {
 public:
  using Word = std::uint64_t;

  /// load(order): the current word (acquire by default: see the header; shutdown's report reads
  /// it seq_cst, see activate).
  [[nodiscard]] Word load(std::memory_order order = std::memory_order_acquire) const noexcept {
    return word_.load(order);
  }

  /// fenced(token): true once delivery `token`'s work no longer counts (lease lapsed, the job
  /// moved on, or a cancel was requested). What Job::cancelled() answers.
  [[nodiscard]] bool fenced(std::uint32_t token) const noexcept {
    const Word c = load();
    return ctl::state(c) != SlotState::active || ctl::seq(c) != token ||
           (ctl::flags(c) & ctl::kCancelRequested) != 0;
  }

  // --- holder transitions ---------------------------------------------------------------------

  /// publish(to): the holder of a free slot (popped from the free list) makes its new job
  /// waiting or delayed.
  void publish(SlotState to) noexcept {
    // relaxed: the last store (mark_free, usually by another thread) reached us through the free
    // list's release/acquire hand-off, and nobody else writes a free slot's word.
    const Word c = word_.load(std::memory_order_relaxed);
    RAIL_INVARIANT(ctl::state(c) == SlotState::free && ctl::pins(c) == 0,
                   "publish: a new job goes into a free, unpinned slot");
    RAIL_INVARIANT(to == SlotState::waiting || to == SlotState::delayed,
                   "publish: a new job is waiting or delayed");
    // release: a cancel, debounce or worker that finds the slot sees a complete job.
    word_.store(ctl::to(c, to), std::memory_order_release);
  }

  /// Held: what the holder of a ready or blocked index finds in its slot: its job still
  /// waiting, cancelled (the holder reclaims the slot), or taken by take_leftovers after shutdown
  /// (the holder drops the index: the job was handed back to the caller).
  enum class Held : std::uint8_t { waiting, cancelled, taken };
  [[nodiscard]] static Held held(Word c) noexcept {
    const SlotState st = ctl::state(c);
    if (st == SlotState::cancelled) return Held::cancelled;
    if (st == SlotState::free || st == SlotState::finishing) return Held::taken;
    RAIL_INVARIANT(st == SlotState::waiting, "a ready or blocked index's slot is waiting");
    return Held::waiting;
  }
  /// held(): Held for a sweep, which holds the index without starting the job. A cancel after
  /// this read leaves the index to its next holder, who reclaims it then.
  [[nodiscard]] Held held() const noexcept { return held(load()); }

  enum class Activation : std::uint8_t { active, cancelled, taken };
  struct Activated {
    Activation result;
    Word word;  // active: the new word (its seq is the token); cancelled: the cancelled word
  };
  /// activate(): the popper of a ready index starts its job (pins + 1), unless it was cancelled,
  /// or taken by take_leftovers after shutdown (the popper then drops the index: the job was
  /// handed back to the caller).
  Activated activate() noexcept {
    Word c = load();
    for (;;) {
      switch (held(c)) {
        case Held::cancelled:
          return {Activation::cancelled, c};
        case Held::taken:
          return {Activation::taken, c};
        case Held::waiting:
          break;
      }
      const Word active = ctl::to(c, SlotState::active, +1);
      // seq_cst (on x86 the same locked instruction as acq_rel): wins the job against cancel()
      // and take_leftovers, acquires the fields of whoever made it ready, and sits in the single
      // order with shutdown's stop flag and its report's reads of the word: a popper that
      // activates after the report saw the job waiting also sees the stop and deactivates.
      if (word_.compare_exchange_weak(c, active, std::memory_order_seq_cst,
                                      std::memory_order_acquire))
        return {Activation::active, active};
    }
  }

  /// deactivate(token): a popper that activated a job but found the engine stopping puts it
  /// back, unstarted (pins - 1), for take_leftovers. False if a cancel flagged it meanwhile: the
  /// caller then ends it as cancelled without running it.
  [[nodiscard]] bool deactivate(std::uint32_t token) noexcept {
    Word c = load();
    for (;;) {
      RAIL_INVARIANT(ctl::state(c) == SlotState::active && ctl::seq(c) == token,
                     "deactivate: only the popper, before any lease, undoes its activation");
      if (ctl::flags(c) & ctl::kCancelRequested) return false;
      // acq_rel: hands the slot back like leave_finishing.
      if (word_.compare_exchange_weak(c, ctl::to(c, SlotState::waiting, -1),
                                      std::memory_order_acq_rel, std::memory_order_acquire))
        return true;
    }
  }

  /// fire(c): one attempt by the wheel owner to move a delayed slot whose time came (as read in
  /// `c`, its due time checked against c's fields) to waiting. On failure c holds the new word:
  /// a debounce (updating, then delayed with a new due time) or a cancel got there first.
  [[nodiscard]] bool fire(Word& c) noexcept {
    RAIL_INVARIANT(ctl::state(c) == SlotState::delayed, "fire: only a delayed slot becomes ready");
    // acq_rel: wins the slot against a concurrent debounce or cancel.
    return word_.compare_exchange_strong(c, ctl::to(c, SlotState::waiting),
                                         std::memory_order_acq_rel, std::memory_order_acquire);
  }

  /// leave_finishing(to): the holder of a finishing slot retries its job. A CAS loop: a stale
  /// handler may drop its pin meanwhile (the only change anyone else makes in finishing).
  void leave_finishing(SlotState to) noexcept {
    RAIL_INVARIANT(to == SlotState::waiting || to == SlotState::delayed,
                   "leave_finishing: a retry is waiting or delayed");
    Word c = load();
    do {
      RAIL_INVARIANT(ctl::state(c) == SlotState::finishing,
                     "leave_finishing: only the holder of a finishing slot retries it");
      // acq_rel: publishes the slot's fields to whoever takes it next.
    } while (!word_.compare_exchange_weak(c, ctl::to(c, to), std::memory_order_acq_rel,
                                          std::memory_order_acquire));
  }

  /// end(): the holder of a finishing or cancelled slot ends its job. True: nobody pins it, the
  /// caller still holds it and must mark_free() it. False: stale handlers pin it; it is now
  /// `ended` and the last of them frees it.
  [[nodiscard]] bool end() noexcept {
    Word c = load();
    for (;;) {
      RAIL_INVARIANT(ctl::state(c) == SlotState::finishing || ctl::state(c) == SlotState::cancelled,
                     "end: only the holder of a finishing or cancelled slot ends its job");
      if (ctl::pins(c) == 0) return true;
      // acq_rel: the last unpinner acquires what the end wrote into the slot.
      if (word_.compare_exchange_weak(c, ctl::to(c, SlotState::ended), std::memory_order_acq_rel,
                                      std::memory_order_acquire))
        return false;
    }
  }

  /// mark_free(): the slot's job is over and its payload gone; the caller then hands the index
  /// to the free list.
  void mark_free() noexcept {
    const Word c = load();
    RAIL_INVARIANT(ctl::pins(c) == 0, "mark_free: no handler may still read a freed slot");
    RAIL_INVARIANT(ctl::state(c) == SlotState::finishing || ctl::state(c) == SlotState::cancelled ||
                       ctl::state(c) == SlotState::ended,
                   "mark_free: only an ended job's slot is freed");
    // release: the next holder (a producer popping the free list) sees a clean slot. A plain
    // store: with zero pins in these states nobody else changes the word (see the header).
    word_.store(ctl::to(c, SlotState::free), std::memory_order_release);
  }

  // --- handler transitions --------------------------------------------------------------------

  enum class Finish : std::uint8_t {
    live,        // the outcome counts: the caller holds the slot in `finishing`
    stale,       // the lease lapsed: the outcome does not count; the pin was dropped
    stale_last,  // stale, and ours was the last pin of an ended job: the caller frees it
  };
  struct Finished {
    Finish result;
    Word word;  // live: the word before the CAS (its flags carry kCancelRequested)
  };
  /// finish(token): the handler of delivery `token` returned. Exactly one of it and a lapse of
  /// the same delivery wins the slot.
  Finished finish(std::uint32_t token) noexcept {
    Word c = load();
    for (;;) {
      RAIL_INVARIANT(ctl::pins(c) > 0, "finish: a returning handler holds a pin");
      if (ctl::state(c) == SlotState::active && ctl::seq(c) == token) {
        // acq_rel: fences the lease sweep (which CASes the same word) and cancel().
        if (word_.compare_exchange_weak(c, ctl::to(c, SlotState::finishing, -1),
                                        std::memory_order_acq_rel, std::memory_order_acquire))
          return {Finish::live, c};
        continue;
      }
      const Word u = unpinned(c);
      if (word_.compare_exchange_weak(c, u, std::memory_order_acq_rel, std::memory_order_acquire))
        return {last_of_ended(u) ? Finish::stale_last : Finish::stale, u};
    }
  }

  // --- other threads --------------------------------------------------------------------------

  struct Lapsed {
    bool won;
    Word word;  // won: the word before the CAS (its flags carry kCancelRequested)
  };
  /// lapse(token): the lease sweep takes the slot of delivery `token` from its handler, which
  /// keeps its pin (it is still reading the payload). Loses to the handler's own finish.
  Lapsed lapse(std::uint32_t token) noexcept {
    Word c = load();
    for (;;) {
      if (ctl::state(c) != SlotState::active || ctl::seq(c) != token) return {false, c};
      // acq_rel: against the handler's finish CAS on the same word; exactly one wins.
      if (word_.compare_exchange_weak(c, ctl::to(c, SlotState::finishing),
                                      std::memory_order_acq_rel, std::memory_order_acquire))
        return {true, c};
    }
  }

  enum class Cancel : std::uint8_t {
    taken,      // waiting/delayed -> cancelled, with a pin for the canceller (drop it with unpin)
    flagged,    // active: the live outcome will count as cancelled
    busy,       // finishing or updating: a transition of a few stores is in progress; retry
    not_found,  // free, cancelled or ended, or the word no longer matches `expected_seq`
  };
  struct Cancelled {
    Cancel result;
    Word word;  // taken: the word before the CAS (waiting or delayed)
  };
  /// cancel(c): one attempt to cancel the job the caller found in the word `c` (its id was
  /// checked against that word's seq by the caller). A CAS failure reports `busy` with the new
  /// word so the caller re-validates the id before retrying.
  Cancelled cancel(Word c) noexcept {
    switch (ctl::state(c)) {
      case SlotState::waiting:
      case SlotState::delayed:
        // acq_rel: takes the job from whoever holds its index; they see `cancelled` and reclaim
        // the slot. The pin keeps them from freeing it while the canceller records the end.
        if (word_.compare_exchange_strong(c, ctl::to(c, SlotState::cancelled, +1),
                                          std::memory_order_acq_rel, std::memory_order_acquire))
          return {Cancel::taken, c};
        return {Cancel::busy, c};
      case SlotState::active:
        if (ctl::flags(c) & ctl::kCancelRequested) return {Cancel::flagged, c};
        if (word_.compare_exchange_strong(c, c | (ctl::kCancelRequested << ctl::kFlagsShift),
                                          std::memory_order_acq_rel, std::memory_order_acquire))
          return {Cancel::flagged, c};
        return {Cancel::busy, c};
      case SlotState::finishing:
      case SlotState::updating:
        return {Cancel::busy, load()};
      default:
        return {Cancel::not_found, c};
    }
  }

  /// expire(c): the expiry sweep's one attempt to take the unstarted job it found in word `c`
  /// (waiting or delayed, past its time: the caller checked both against c) from whoever holds
  /// its index, as cancel() takes one, marked kExpired; the holder then ends it (no pin: the
  /// sweep records nothing). False if the word moved on.
  [[nodiscard]] bool expire(Word c) noexcept {
    if (ctl::state(c) != SlotState::waiting && ctl::state(c) != SlotState::delayed) return false;
    // acq_rel: as cancel()'s.
    return word_.compare_exchange_strong(
        c, ctl::to(c, SlotState::cancelled) | (ctl::kExpired << ctl::kFlagsShift),
        std::memory_order_acq_rel, std::memory_order_acquire);
  }
  /// expired(c): c is the word of a job that expire() took (until its slot ends).
  [[nodiscard]] static constexpr bool expired(Word c) noexcept {
    return ctl::state(c) == SlotState::cancelled && (ctl::flags(c) & ctl::kExpired) != 0;
  }

  /// pin(): a running handler that hands its delivery to a Completion (Job::defer) adds a pin
  /// for itself: the Completion now holds the delivery's pin (its finish drops it, and may end
  /// the job) while the handler, which has not returned yet, still reads the payload. Dropped
  /// with unpin() as the handler returns. The caller holds a pin, so the slot cannot be freed.
  void pin() noexcept {
    Word c = load();
    do {
      RAIL_INVARIANT(ctl::pins(c) > 0, "pin: only a pin holder adds one");
      // relaxed: the caller's own pin keeps the slot; a pin publishes nothing (seq unchanged,
      // so no transition's CAS is fooled: one that read the word before just retries).
    } while (!word_.compare_exchange_weak(c, c + (Word{1} << ctl::kPinsShift),
                                          std::memory_order_relaxed, std::memory_order_relaxed));
  }

  /// unpin(): a stale handler or a canceller leaves. True if it was the last pin of an ended job:
  /// the caller then frees the slot.
  [[nodiscard]] bool unpin() noexcept {
    Word c = load();
    Word u;
    do {
      RAIL_INVARIANT(ctl::pins(c) > 0, "unpin: only a pin holder unpins");
      u = unpinned(c);
      // acq_rel: the last unpinner acquires the end's writes; the others publish their reads.
    } while (
        !word_.compare_exchange_weak(c, u, std::memory_order_acq_rel, std::memory_order_acquire));
    return last_of_ended(u);
  }

  /// begin_update(c): a debounce takes a delayed slot to replace its payload and deadline. Only
  /// with no pins: a stale handler of an earlier delivery may still be reading the payload.
  [[nodiscard]] bool begin_update(Word c) noexcept {
    if (ctl::state(c) != SlotState::delayed || ctl::pins(c) != 0) return false;
    // acq_rel: takes the slot from the timer (which CASes delayed->waiting) and acquires the
    // job's fields; if the slot was reused since `c`, its seq moved and this fails.
    return word_.compare_exchange_strong(c, ctl::to(c, SlotState::updating),
                                         std::memory_order_acq_rel, std::memory_order_acquire);
  }
  /// end_update(): the debounce hands the slot back, delayed.
  void end_update() noexcept {
    const Word c = load();
    RAIL_INVARIANT(ctl::state(c) == SlotState::updating, "end_update: only after begin_update");
    // release: the timer's acquire load sees the new payload and due time. A plain store: in
    // `updating` nobody else changes the word (cancel and the timer wait it out, and a pin
    // cannot be taken: activation needs `waiting`).
    word_.store(ctl::to(c, SlotState::delayed), std::memory_order_release);
  }

  /// begin_retime(c): the wheel's owner takes a delayed slot to move its due time (promote,
  /// change_delay). Any pins: a stale handler may still read the payload, which a retime does
  /// not touch; excluding debounce (and cancel, which waits out `updating`) is what it is for.
  [[nodiscard]] bool begin_retime(Word c) noexcept {
    if (ctl::state(c) != SlotState::delayed) return false;
    // acq_rel: as begin_update.
    return word_.compare_exchange_strong(c, ctl::to(c, SlotState::updating),
                                         std::memory_order_acq_rel, std::memory_order_acquire);
  }
  /// end_retime(): the slot back to delayed. A CAS, unlike end_update: a stale handler may
  /// unpin meanwhile, and its unpin must not be overwritten.
  void end_retime() noexcept {
    Word c = load();
    do {
      RAIL_INVARIANT(ctl::state(c) == SlotState::updating, "end_retime: only after begin_retime");
      // release: the timer's acquire load sees the new due time.
    } while (!word_.compare_exchange_weak(c, ctl::to(c, SlotState::delayed),
                                          std::memory_order_release, std::memory_order_acquire));
  }

  /// take_unstarted(): after shutdown, takes a waiting or delayed job whose payload no stale
  /// handler reads (pins 0); the caller moves the payload out and calls mark_free(). Returns the
  /// state it was taken from, or nullopt when there was nothing to take.
  [[nodiscard]] std::optional<SlotState> take_unstarted() noexcept {
    Word c = load();
    for (;;) {
      const SlotState st = ctl::state(c);
      if ((st != SlotState::waiting && st != SlotState::delayed) || ctl::pins(c) != 0)
        return std::nullopt;
      // acq_rel: wins the slot against cancel, a debounce and the timer.
      if (word_.compare_exchange_weak(c, ctl::to(c, SlotState::finishing),
                                      std::memory_order_acq_rel, std::memory_order_acquire))
        return st;
    }
  }

 private:
  static constexpr Word unpinned(Word c) noexcept { return c - (Word{1} << ctl::kPinsShift); }
  static constexpr bool last_of_ended(Word u) noexcept {
    return ctl::state(u) == SlotState::ended && ctl::pins(u) == 0;
  }

  Atom<Word> word_{0};
};

}  // namespace rail::detail
