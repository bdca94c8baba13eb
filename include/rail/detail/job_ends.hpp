// JobEnds: the one owner of a job's end — completed, dead-lettered, cancelled, discarded or
// forwarded (a resumed job's next attempt handed back to its broker: resumed.hpp): it
// counts the end, hands its lines' turns on (its FIFO group's, its tenant's), lets the job's
// dedup id go, enters it in the
// history, raises its event, tells its waiters and retained ends (EndTracker), and frees its
// slot, or leaves that to the last stale handler that still pins it.
//
// Guarantee: each job that reaches end() ends exactly once, and its payload goes exactly once:
// into its DLQ entry (dead-lettered) or destroyed, through the typed layer's PayloadHooks, once no
// handler pins the slot (final_end). A dead-lettered job's entry is in the DLQ before its event
// is raised, also when a stale handler pins it (filed from a copy of the payload: file_copy; a
// move-only payload's entry waits for that handler).
//
// Entry points: end() (every end but the fast one), complete() (finish()'s common end: nobody
// observes), record() + ended() (cancel's end, whose slot the canceller frees),
// final_end() (the last pin went), reclaim_cancelled() and leave_filed().
// Preconditions: the caller holds the slot in `finishing` (or took it from waiting/delayed by a
// cancel): nothing else writes the slot's fields meanwhile (job_slot.hpp).
// Memory ordering: the slot's end goes through SlotControl::end (slot_table.hpp), which decides
// who frees it; the end's kind in its slot (JobSlot::end_kind) and its history entry come before
// the light fence that makes EndTracker::wanted() safe against a waiter registering by id
// (end_tracker.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <typeindex>
#include <vector>

#include "rail/detail/assert.hpp"
#include "rail/detail/asymmetric_fence.hpp"
#include "rail/detail/dedup_claims.hpp"
#include "rail/detail/end_tracker.hpp"
#include "rail/detail/flow_parts.hpp"
#include "rail/detail/lines.hpp"
#include "rail/event.hpp"

namespace rail::detail {

/// PayloadHooks: what the payload layer (QueueImpl) does with a job's payload once it ended.
class PayloadHooks {
 public:
  /// retire(idx, dead_letter, event): the job in slot idx has ended and nobody pins the slot:
  /// move its payload into a DLQ entry (dead_letter) or destroy it, give the slot back
  /// (JobFlow::release_slot), then file the entry and raise `event` (its dead_lettered event,
  /// if any and not raised yet) once the entry can be found.
  virtual void retire(std::uint32_t idx, bool dead_letter, const Event* event) = 0;
  /// file_copy(idx, event): the job in slot idx is being dead-lettered while a stale handler
  /// still reads its payload: copy the payload into its DLQ entry, leave the slot (leave_filed),
  /// then file the entry and raise `event` (if any). False when the payload cannot be copied (or
  /// the copy threw): nothing was done; retire() files the entry when the last handler returns.
  virtual bool file_copy(std::uint32_t idx, const Event* event) = 0;
  /// run_deferred(id): job `id` has ended and an add was kept until then (keep_last_if_active;
  /// its keep gate said so): add it now, taking over the dedup id the job held for it.
  virtual void run_deferred(JobId id) noexcept = 0;

 protected:
  ~PayloadHooks() = default;
};

/// Holding: a slot this thread holds in `finishing` while it raises the job's events (a failed
/// attempt's, an end's). An observer on this thread that cancels that job must not wait for the
/// holder, itself: the cancel records the request in the frame (honoured before the retry), or
/// answers false once the job is ending. Frames nest (an observer's cancel of another job raises
/// that job's events in turn), so they form a per-thread stack that a cancel walks (of()).
class Holding {
 public:
  // The frame is unlinked by the destructor before it goes out of scope; GCC's dangling-pointer
  // analysis does not see that.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdangling-pointer"
#endif
  Holding(const JobSlot& s, bool ending) noexcept : slot_(&s), ending_(ending), outer_(top()) {
    top() = this;
  }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
  ~Holding() {
    top() = outer_;
  }
  Holding(const Holding&) = delete;
  Holding& operator=(const Holding&) = delete;

  /// of(s): this thread's frame holding s, or null.
  static Holding* of(const JobSlot& s) noexcept {
    for (Holding* h = top(); h; h = h->outer_)
      if (h->slot_ == &s) return h;
    return nullptr;
  }
  /// ending(): the frame raises the job's end (a cancel then has nothing left to cancel).
  [[nodiscard]] bool ending() const noexcept {
    return ending_;
  }
  /// request_cancel() / cancel_requested(): an observer cancelled the job (before its retry).
  void request_cancel() noexcept {
    cancel_ = true;
  }
  [[nodiscard]] bool cancel_requested() const noexcept {
    return cancel_;
  }

 private:
  static Holding*& top() noexcept {
    thread_local Holding* frame = nullptr;
    return frame;
  }
  const JobSlot* slot_;
  bool ending_;
  bool cancel_ = false;
  Holding* outer_;
};

class JobEnds {
 public:
  JobEnds(FlowParts& parts, DedupClaims& claims, Lines& lines, Dispatcher& dispatch,
          PayloadHooks& payloads);
  JobEnds(const JobEnds&) = delete;
  JobEnds& operator=(const JobEnds&) = delete;

  /// Settled: what a job's end leaves for once it left its slot (ended()).
  struct Settled {
    bool kept = false;             // an add was kept for after it: run_deferred
    std::optional<EndRecord> end;  // its waiters and retained ends want it (EndTracker)
    // The turns it held in its lines, kept until ended() releases them once this end was
    // reported: the next job of a line starts after its event and its waiters.
    Lines::Closing closing{};
  };

  /// end(idx, kind, reason, now, wc, why, result): the job in slot idx ends as `kind` (reason:
  /// a dead-lettered job's; why: a discarded job's error; result: a completed job's).
  void end(std::uint32_t idx, EndKind kind, DeadLetterReason reason, std::int64_t now,
           WorkerContext* wc, std::string_view why = {}, std::shared_ptr<const void> result = {});

  /// complete(idx, wc, result, end): finish()'s common end, kept short and inline: a job done
  /// with nobody observing (no event; its dedup id let go as settle() does; a record only if a
  /// waiter came since finish() looked, the kept add run only if one was kept). end: the end's
  /// time, read only for a queue with histograms (else 0); nullopt: the worker stamps it later
  /// (FlowParts::stamp_end).
  void complete(std::uint32_t idx, WorkerContext& wc, std::shared_ptr<const void>&& result,
                std::optional<std::int64_t> end) {
    JobSlot& s = parts_.slot(idx);
    s.end_reason = DeadLetterReason::none;
    parts_.leave_retry_here(s);  // as settle() does for the other ends
    // Its dedup id goes (or stays for its ttl), unless an add was kept for after it.
    const bool kept = claims_.release_at_end(s, false);
    const bool wanted = note(s, EndKind::completed, &wc, end);
    if (wanted || kept) [[unlikely]] {
      Settled settled;
      settled.kept = kept;
      if (Lines::lined(s)) settled.closing = lines_.close(idx);
      if (wanted) {
        settled.end = record_of(s, EndKind::completed, parts_.core.now_ns(), {}, std::move(result));
      } else {
        result.reset();  // as below: it dies before the job ends and its kept add runs
      }
      leave(idx, EndKind::completed, std::move(settled));
      return;
    }
    // leave() without its Settled: nothing was kept for after this job and nobody wants a
    // record. The result goes now, as end()'s does: before the slot ends and the attempt counts
    // as ended (wait_idle() may return then), not with deliver()'s Outcome afterwards (else a
    // result holding a file outlives wait_idle():
    // ResultsThreaded.ACompletedJobsResultIsDestroyedBeforeWaitIdleReturns).
    result.reset();
    // Nobody observes or waits: nothing to report first, the turns go on now.
    const Turns turns = Lines::lined(s) ? lines_.leave(idx) : Turns{};
    if (s.ctl.end()) final_end(idx);
    if (turns.any()) [[unlikely]] {
      Lines::Closing now;
      now.now = turns;
      hand_turns(std::move(now));
    }
  }

  /// record(s, kind, now, wc, why, result): counts the job's end, lets its dedup id go, notes
  /// it for its waiters and raises its event; the caller then frees the slot and calls ended().
  Settled record(JobSlot& s, EndKind kind, std::int64_t now, WorkerContext* wc,
                 std::string_view why = {}, std::shared_ptr<const void> result = {});
  /// ended(id, settled): after a job left its slot: run the add kept for after it, if its end
  /// found one, and tell its waiters. Not inside record(): a waiter's callback may cancel or
  /// wait, and must not find the slot still held by this thread.
  void ended(JobId id, Settled&& settled) noexcept {
    if (settled.kept) [[unlikely]]
      payloads_.run_deferred(id);
    if (settled.end) [[unlikely]] {
      try {
        tracker_.record(std::move(*settled.end));
      } catch (...) {  // no memory to retain it: its waiter learns it by id from the history
      }
    }
    if (settled.closing.any()) [[unlikely]]
      hand_turns(std::move(settled.closing));
  }
  /// final_end(idx, event): the job in slot idx has ended and its last pin went: its payload
  /// goes (retire).
  void final_end(std::uint32_t idx, const Event* event = nullptr) {
    payloads_.retire(idx, parts_.slot(idx).ended_as() == EndKind::dead_lettered, event);
  }
  /// reclaim_cancelled(idx): cancel recorded the job's end; the caller holds the index: the
  /// slot is freed now, or by the last stale handler or canceller still pinning it. A job the
  /// expiry sweep took (SlotControl::expire) is ended here instead: end_unstarted.
  void reclaim_cancelled(std::uint32_t idx) {
    JobSlot& s = parts_.slot(idx);
    if (SlotControl<>::expired(s.ctl.load())) [[unlikely]] {
      end_unstarted(idx, DeadLetterReason::expired);
      return;
    }
    s.end_as(EndKind::cancelled);
    if (s.ctl.end()) final_end(idx);
  }
  /// end_unstarted(idx, reason): the holder of the index of a job taken unstarted by
  /// SlotControl::expire (the expiry sweep, a parent's failed dependency) ends it: dead-lettered
  /// for `reason`, its entry filed before its event and its waiters, then out of its gauge
  /// (waiting, or delayed: JobSlot::kExpiredDelayed).
  void end_unstarted(std::uint32_t idx, DeadLetterReason reason);
  /// leave_filed(idx): file_copy has copied the entry of the job ending in slot idx: the job
  /// ends (the slot is no longer ours), before the entry is filed and its event raised, so that
  /// observers of the event find it ended (state(), cancel()). The last stale handler to return
  /// only destroys the payload (EndKind::filed).
  void leave_filed(std::uint32_t idx) {
    parts_.slot(idx).end_as(EndKind::filed);
    if (parts_.slot(idx).ctl.end()) final_end(idx);  // the stale handler returned meanwhile
  }

  // --- results (Engine::declare_queue<T, R>) and who hears of ends ---------------------------
  /// declare_result(type, format): the queue's result type and its printer (null: none), set
  /// once at declaration, before the queue is handed out; applies the retention defaults.
  void declare_result(std::type_index type, std::string (*format)(const void*));
  [[nodiscard]] std::type_index result_type() const noexcept { return result_type_; }
  [[nodiscard]] EndTracker& tracker() noexcept { return tracker_; }
  [[nodiscard]] const EndTracker& tracker() const noexcept { return tracker_; }
  /// attempt_errors(s): the job's failed attempts, as its DLQ entry and end record list them.
  [[nodiscard]] static std::vector<AttemptError> attempt_errors(const JobSlot& s);

 private:
  Settled settle(JobSlot& s, EndKind kind, WorkerContext* wc, std::int64_t now,
                 std::string_view why = {}, std::shared_ptr<const void> result = {});
  /// note(s, kind, wc, end): counts the job's end (and its end-to-end time, when `end` has
  /// one), marks it decided in its slot (JobSlot::end_kind) and enters it in the history; true
  /// when its waiters or retained ends want a record of it (asked after both: see EndTracker).
  bool note(JobSlot& s, EndKind kind, WorkerContext* wc, std::optional<std::int64_t> end) noexcept {
    RAIL_INVARIANT(kind != EndKind::none && kind != EndKind::filed,
                   "a job ends as completed, dead-lettered, cancelled, discarded or forwarded");
    const JobId id = s.id.load(std::memory_order_relaxed);
    if (parts_.timed() && end) parts_.record(wc, Latency::end_to_end, *end - s.added_ns);
    parts_.count(wc, kind == EndKind::completed       ? kCompleted
                     : kind == EndKind::dead_lettered ? kDeadLettered
                     : kind == EndKind::cancelled     ? kCancelled
                     : kind == EndKind::discarded     ? kDiscarded
                                                      : kForwarded);
    // Both before the fence: a waiter by id registered too late for the check below finds the
    // end in the slot while the job is still there (the history is a lossy table: a later end
    // may overwrite the entry before the waiter reads it), or in the history once it left (see
    // EndTracker::wanted and JobQueries::place; the waiter's side pays for the fence).
    s.end_as(kind);
    parts_.stats.remember(id, status_of(kind));
    light_fence();
    return tracker_.wanted();
  }
  /// hand_turns(c): a job's end was reported: the turns it kept (Lines::close) are released,
  /// and the jobs that take them go on: a group's next job to its tenant's line
  /// (Lines::admit_tenant), a tenant's to ready (both were counted waiting while parked). Events
  /// raised while this thread owns the wheel (an end decided by a lapse) wait until it lets the
  /// wheel go; so does this, to stay behind them (if the call cannot be kept for lack of memory,
  /// it runs at once: nothing is lost).
  void hand_turns(Lines::Closing c) noexcept;
  /// leave(idx, kind, settled): the job's end is settled: it leaves slot idx (freed now, or by
  /// the last stale handler to return), then ended().
  void leave(std::uint32_t idx, EndKind kind, Settled&& settled);
  [[nodiscard]] EndRecord record_of(const JobSlot& s, EndKind kind, std::int64_t now,
                                    std::string_view why, std::shared_ptr<const void> result) const;
  void dead_lettered(std::uint32_t idx, std::int64_t now, WorkerContext* wc);
  /// dead_letter_event(s, now, error, own_name): the dead_lettered event of the job in s (if
  /// observed), its strings copied into error and own_name, which must outlive it.
  [[nodiscard]] std::optional<Event> dead_letter_event(const JobSlot& s, std::int64_t now,
                                                       std::string& error,
                                                       std::string& own_name) const;

  FlowParts& parts_;
  DedupClaims& claims_;
  Lines& lines_;
  Dispatcher& dispatch_;
  PayloadHooks& payloads_;
  // Results (Engine::declare_queue<T, R>): R's identity and printer, and who hears of ends.
  std::type_index result_type_{typeid(void)};
  std::string (*format_result_)(const void*) = nullptr;  // null: R cannot be printed
  EndTracker tracker_;
};

}  // namespace rail::detail
