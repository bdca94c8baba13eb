// JobFlow: everything a queue does with a job that does not depend on its payload type — where
// each job goes from add to its end — compiled once in src/job_flow.cpp. QueueImpl<T> derives
// from it and adds only what touches a T (payload cells, typed add/redrive/leftovers, building
// a Job<T> for the handler, filing a DeadLetter<T>), through three hooks: the handler's call
// (bind_handler: one indirect call straight into the handler), retire and in_dlq (one indirect
// call each).
//
// Guarantee: every accepted job reaches exactly one end — completed, dead-lettered or cancelled —
// or is reported by shutdown; none is lost, none ends twice, and exactly one outcome per
// delivery counts (a handler whose lease lapsed is fenced by its token: slot_table.hpp).
//
// The pieces, in the order a job passes through them (C = capacity):
//   free_      the free slot indices: recycled ones first, never-used ones only when none is
//              free, so resident memory follows the jobs in flight (free_slots.hpp)
//   slots_[C]  preallocated job records; their control words are SlotControl's (slot_table.hpp),
//              the only code that changes a job's state
//   dispatch_  the ready ring, the workers' stashes, wake-ups and the worker threads: hands each
//              ready job to deliver() (dispatcher.hpp)
//   leases_    one lease record per worker (lease_tracker.hpp)
//   timers_    the inbox to the timing wheel, firing, the lease sweep, unlinking (timer_port.hpp)
//   stats_     counters, gauges and the history of ended jobs (queue_stats.hpp)
// Each index is in exactly one place — the free list, a ring, a stash, the wheel (linked or
// parked) — or held by exactly one thread (job_slot.hpp's ownership invariant).
//
// Add:   pop free -> fill slot and payload -> publish: ready ring (or the timer port when
//        delayed) -> wake.
// Work:  pop a batch of ready (the first job now, the rest into the worker's stash, stealable)
//        -> activate (pin) -> lease -> handler -> finish:
//          done            -> end (completed)
//          retry (+delay)  -> delayed: timer port | no delay: ready
//          out of attempts -> end (dead-lettered: DLQ entry with the payload moved)
//        An end frees the slot at once if no stale handler still pins it, else the last one
//        to return frees it: final_end -> retire. A dead-lettered job's entry is in the DLQ
//        before its event, also when a stale handler pins it (filed from a copy of the
//        payload; a move-only payload's entry waits for that handler: file_copy).
// Timer: the timer port fires delayed -> waiting and pushes ready; its lease sweep takes lapsed
//        deliveries (active -> finishing) and redelivers or dead-letters them.
//
// Memory ordering: a slot's plain fields and payload are written by their holder before the
// index is pushed to a ring (release) and read by the next holder after popping it (acquire).
// Non-holders go through ctl (slot_table.hpp). In this file and job_flow.cpp: ctl loads are
// acquire, CASes acq_rel, the holder's stores release (SlotControl's defaults); id loads are
// relaxed (a cold-path reader validates them against ctl: a CAS fails if the slot was reused);
// due_ns is relaxed (it travels with the inbox push or the ctl release).
//
// Threading: add/add_bulk/cancel/state/pause from any thread; `concurrency` worker threads per
// queue (threaded mode) or the run_until_idle() caller (inline mode) run handlers.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <typeindex>
#include <vector>

#include "rail/add_result.hpp"
#include "rail/dead_letter_queue.hpp"
#include "rail/detail/deadline.hpp"
#include "rail/detail/dedup_set.hpp"
#include "rail/detail/dispatcher.hpp"
#include "rail/detail/downstream_gate.hpp"
#include "rail/detail/end_tracker.hpp"
#include "rail/detail/engine_core.hpp"
#include "rail/detail/free_slots.hpp"
#include "rail/detail/gate_link.hpp"
#include "rail/detail/job_slot.hpp"
#include "rail/detail/lease_tracker.hpp"
#include "rail/detail/pending_jobs.hpp"
#include "rail/detail/prefetch.hpp"
#include "rail/detail/queue_stats.hpp"
#include "rail/detail/schedule_table.hpp"
#include "rail/detail/timer_port.hpp"
#include "rail/event.hpp"
#include "rail/job.hpp"
#include "rail/job_state.hpp"
#include "rail/options.hpp"
#include "rail/outcome.hpp"

namespace rail::detail {

/// validate_job_options(o, where): throws Error(invalid_option) naming the bad field.
void validate_job_options(const JobOptions& o, std::string_view where);
void validate_queue_options(const QueueOptions& o, std::string_view queue);
void validate_worker_options(const WorkerOptions& o, std::string_view queue);
/// reject_job_name(name, queue): throws Error(invalid_option) for an empty or blank job name.
[[noreturn]] void reject_job_name(std::string_view name, std::string_view queue);

class JobFlow : public QueueBase, private JobRunner, private TimerClient, private PauseListener {
  // Pending jobs: Job::defer and the Completion's calls (completion.hpp).
  friend class rail::Completion;
  friend Completion defer_job(JobFlow& flow, JobFields& job);
  friend class GateLink;  // wakes and promotes this queue's jobs

 public:
  JobFlow(const JobFlow&) = delete;
  JobFlow& operator=(const JobFlow&) = delete;

  // --- QueueBase ---------------------------------------------------------------------------------
  const std::string& name() const noexcept final { return name_; }
  QueueCounts counts() const noexcept final { return stats_.counts(dispatch_.paused()); }
  /// idle(): nothing waiting, delayed or running (stale handlers included).
  bool idle() const noexcept final;
  void collect_leftovers(ShutdownReport& report) const final;
  void abandon_unstarted() final;
  void drain_timer_inbox(Wheel& wheel) noexcept final {
    timers_.drain(wheel, *this);
    // acquire: a table published by schedules() is fully built.
    if (ScheduleTable* t = schedules_.load(std::memory_order_acquire)) [[unlikely]]
      t->drain(wheel);
  }
  void fire(std::uint32_t tag, std::int64_t now, Wheel& wheel) noexcept final {
    if (ScheduleTable::owns_tag(tag)) [[unlikely]] {
      // A schedule's node is linked only after its table was published (acquire, as above).
      schedules_.load(std::memory_order_acquire)->fire(tag, now, wheel);
      return;
    }
    timers_.fire(tag, now, wheel, *this);
  }
  std::size_t run_ready(std::size_t max) final;
  void stop_workers() noexcept final { dispatch_.stop(); }
  void join_workers() noexcept final { dispatch_.join(); }
  bool cancel_job(std::uint64_t id) final { return cancel(id); }
  JobState job_state(std::uint64_t id) const final { return state(id); }
  void sweep_inline(std::int64_t now) final;

  [[nodiscard]] const QueueOptions& options() const noexcept { return options_; }
  [[nodiscard]] EngineCore& core() noexcept { return core_; }
  /// pool_wait(what, bounded): a wait about to block for this queue's jobs (with a timeout, or
  /// none), checked and counted against the shared pool when the caller is one of its workers
  /// (PoolWait); throws Error(would_deadlock) naming `what` if no worker could run them.
  [[nodiscard]] PoolWait pool_wait(const std::string& what, bool bounded) const;

  // --- lifecycle (see Queue) --------------------------------------------------------------------
  void pause() noexcept { dispatch_.pause(); }
  void resume() noexcept { dispatch_.resume(); }
  bool pause_and_wait(Duration timeout) { return dispatch_.pause_and_wait(timeout); }
  [[nodiscard]] bool paused() const noexcept { return dispatch_.paused(); }
  bool drain(Duration timeout);
  bool cancel(JobId id);
  JobState state(JobId id) const;
  /// retime(id, due): a delayed job runs at `due` instead (promote: now). See Queue::promote.
  bool retime(JobId id, std::int64_t due);
  /// jobs(status, limit): live jobs in `status` (waiting, delayed or active), oldest id first.
  std::vector<JobInfo> jobs(JobStatus status, std::size_t limit) const;

  // --- results and waiting (Engine::queue<T, R>, Queue::add_tracked / result / wait) --------
  /// declare_result(type, format): the queue's result type and its printer (null: none), set
  /// once at declaration, before the queue is handed out; applies the retention defaults.
  void declare_result(std::type_index type, std::string (*format)(const void*));
  [[nodiscard]] std::type_index result_type() const noexcept { return result_type_; }
  [[nodiscard]] EndTracker& ends() noexcept { return ends_; }
  /// end_of(id): job `id`'s end if it ended and is retained, or what its history says (no result
  /// or errors then), or nullopt while it is live (or unknown to the queue: status unknown).
  [[nodiscard]] std::optional<EndRecord> end_of(JobId id) const;

  // --- repeatable jobs (Queue::schedule) ---------------------------------------------------------
  /// validate_schedule(id, job_name, o): throws as admit() does, and Error(invalid_option) for
  /// an empty id or options a schedule decides itself (delay, dedup) or cannot use.
  void validate_schedule(std::string_view id, std::string_view job_name, const ScheduleOptions& o);
  /// schedules(): the queue's schedule table, built on first use (cold).
  [[nodiscard]] ScheduleTable& schedules();
  /// schedules_if_any(): the table, or null when the queue never had a schedule.
  [[nodiscard]] const ScheduleTable* schedules_if_any() const noexcept {
    return schedules_.load(std::memory_order_acquire);
  }

  /// progress(idx, token, value): Job::progress of delivery `token` in slot idx.
  bool progress(std::uint32_t idx, std::uint32_t token, double value) noexcept;

  /// emit_dlq(kind, id, job_name, depth): the DLQ's events (evicted, alert).
  void emit_dlq(EventKind kind, JobId id, std::string_view job_name, std::size_t depth);

 protected:
  /// JobFlow(...): allocates capacity slots and payload cells of payload_size/payload_align.
  /// The queue joins the engine only in attach(), once the derived queue is fully built.
  JobFlow(EngineCore& core, std::string name, QueueOptions options, std::size_t payload_size,
          std::size_t payload_align);
  ~JobFlow();

  /// attach(): registers the queue with the engine (timers may fire it from then on).
  void attach();

  // --- the payload type's hooks -----------------------------------------------------------------
  /// run_handler(idx, job): runs the handler on slot idx's payload; may throw (a failed attempt).
  /// One indirect call per job: run_handler_ is instantiated for the payload and handler types
  /// (QueueImpl<T>::set_handler), where a virtual hook and a std::function would make two.
  Outcome run_handler(std::uint32_t idx, const JobFields& job) {
    return run_handler_(handler_ctx_, *this, idx, job);
  }
  using RunHandler = Outcome (*)(void* handler, JobFlow& flow, std::uint32_t idx,
                                 const JobFields& job);
  /// bind_handler(run, handler): before the workers start (their start publishes it), or to
  /// unbind (null) once a failed start stopped them.
  void bind_handler(RunHandler run, void* handler) noexcept {
    run_handler_ = run;
    handler_ctx_ = handler;
  }
  /// retire(idx, dead_letter, event): the job in slot idx has ended and nobody pins the slot:
  /// move its payload into a DLQ entry (dead_letter) or destroy it, give the slot back
  /// (release_slot), then file the entry and raise `event` (its dead_lettered event, if any and
  /// not raised yet) once the entry can be found.
  virtual void retire(std::uint32_t idx, bool dead_letter, const Event* event) = 0;
  /// in_dlq(id): the job is in the DLQ (state() of a dead-lettered job no longer remembered).
  [[nodiscard]] virtual bool in_dlq(JobId id) const = 0;
  /// dlq_end(id): job `id`'s end as its DLQ entry tells it (reason, errors), if it is there.
  [[nodiscard]] virtual std::optional<EndRecord> dlq_end(JobId id) const = 0;
  /// collect_deferred(report): lists the adds kept for after a running job (not started).
  virtual void collect_deferred(ShutdownReport& report) const = 0;
  /// run_deferred(id): job `id` has ended and an add was kept until then (keep_last_if_active;
  /// its keep gate said so): add it now, taking over the dedup id the job held for it.
  virtual void run_deferred(JobId id) noexcept = 0;
  /// file_copy(idx, event): the job in slot idx is being dead-lettered while a stale handler
  /// still reads its payload: copy the payload into its DLQ entry, leave the slot (leave_filed),
  /// then file the entry and raise `event` (if any). False when the payload cannot be copied (or
  /// the copy threw): nothing was done; retire() files the entry when the last handler returns.
  virtual bool file_copy(std::uint32_t idx, const Event* event) = 0;

  // --- for the typed layer ----------------------------------------------------------------------
  [[nodiscard]] void* cell(std::uint32_t idx) const noexcept {
    return payload_.get() + std::size_t{idx} * stride_;
  }
  [[nodiscard]] JobSlot& slot(std::uint32_t idx) const noexcept { return slots_[idx]; }
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
  /// job_name(s): the name of the job in s (read by its holder, or while it cannot change).
  [[nodiscard]] std::string_view job_name(const JobSlot& s) const noexcept {
    if (s.name == NameTable::kOwnName) [[unlikely]]
      return *s.extra->own_name;
    return core_.names().name(s.name);
  }
  /// name_jobs(idx, n, name_id, name): before init_slot, a name the table could not intern is
  /// copied into each slot; on failure (bad_alloc) the slots go back to the free list.
  void name_jobs(const std::uint32_t* idx, std::size_t n, std::uint16_t name_id,
                 std::string_view name) {
    if (name_id == NameTable::kOwnName) [[unlikely]]
      name_own(idx, n, name);
  }
  [[nodiscard]] std::vector<AttemptError> attempt_errors(const JobSlot& s) const;

  /// start_processing(w): the handler is set; start the workers (once per queue, unless it threw:
  /// then nothing was started and it may be called again).
  void start_processing(const WorkerOptions& w);
  [[nodiscard]] bool processing() const noexcept {
    return processing_.load(std::memory_order_acquire);
  }

  // --- pending jobs (Job::defer, completion.hpp) -------------------------------------------------
  /// defer(job): the handler of `job` hands its delivery to a Completion (Job::defer's throws).
  Completion defer(JobFields& job);
  /// complete_pending(r, out, result_type): pending record r's Completion delivers `out` (of a
  /// Result<R> with R = result_type, or void): applied as the handler's outcome. True if it
  /// counted. Called inside the hub (CompletionHub::enter).
  bool complete_pending(std::uint32_t r, Outcome&& out, std::type_index result_type);
  /// pending_cancelled(r) / extend_pending(r, d): Completion::cancelled / extend_lease, inside
  /// the hub.
  [[nodiscard]] bool pending_cancelled(std::uint32_t r) const noexcept;
  bool extend_pending(std::uint32_t r, Duration d) noexcept;
  /// close_completions(): the engine's teardown, once no worker runs: Completions still out
  /// complete nothing from now on (CompletionHub::close).
  void close_completions() noexcept final {
    if (pending_) pending_->hub()->close();
  }

  /// admit(name, o): throws unless the engine accepts jobs and name and o are valid here.
  void admit(std::string_view name, const JobOptions& o) {
    if (!core_.accepting()) [[unlikely]]
      throw_shutting_down();
    // Blank: no visible character. The first one usually is, so this is a compare or two.
    if (name.empty() || name.find_first_not_of(" \t\n\r\f\v") == std::string_view::npos)
        [[unlikely]]
      reject_job_name(name, name_);
    validate_job_options(o, "JobOptions");
    if (o.backoff.kind == BackoffKind::custom || o.visibility_timeout || !o.downstream.empty())
        [[unlikely]]
      admit_unusual(o);
  }
  [[noreturn]] void throw_shutting_down() const;

  /// acquire_slots(out, n): takes n free slots (all or none), waiting per OverflowPolicy::block.
  bool acquire_slots(std::uint32_t* out, std::size_t n) {
    if (try_acquire(out, n)) [[likely]]
      return true;
    return acquire_slots_slow(out, n);
  }
  /// try_acquire_slots(out, n): acquire_slots without waiting for room.
  bool try_acquire_slots(std::uint32_t* out, std::size_t n) noexcept { return try_acquire(out, n); }
  /// release_slot(idx): the caller holds idx and has destroyed (or never built) its payload.
  void release_slot(std::uint32_t idx) noexcept {
    slots_[idx].ctl.mark_free();
    if (const int w = freeing_worker(); w >= 0) {
      free_.push_batched(idx, static_cast<std::uint32_t>(w));
    } else {
      free_.push(idx);
    }
  }
  /// leave_filed(idx): file_copy has copied the entry of the job ending in slot idx: the job
  /// ends (the slot is no longer ours), before the entry is filed and its event raised, so that
  /// observers of the event find it ended (state(), cancel()). The last stale handler to return
  /// only destroys the payload (EndKind::filed).
  void leave_filed(std::uint32_t idx) {
    slots_[idx].end_kind = EndKind::filed;
    if (slots_[idx].ctl.end()) final_end(idx);  // the stale handler returned meanwhile
  }
  /// stepped_aside(id): job `id`, delayed, is now due later than its downstream's token or pause
  /// (a debounce): if it was the gate's leader, another job leads (forget_leader).
  void stepped_aside(JobId id) noexcept {
    for_each_link([id](GateLink& l) { l.gate().forget_leader(id); });
  }
  /// warm_slot(idx): starts fetching, for writing, slot idx (every line) and its payload cell's
  /// first line: an add is about to fill them, and their lines were last written on a worker's
  /// core (or left the caches), so the misses overlap each other and the time until then instead
  /// of stalling the add one by one (prefetch.hpp).
  void warm_slot(std::uint32_t idx) const noexcept {
    const auto* s = reinterpret_cast<const char*>(&slots_[idx]);
    for (std::size_t line = 0; line < sizeof(JobSlot); line += kRingCacheLine)
      prefetch_for_write(s + line);
    prefetch_for_write(cell(idx));
  }
  /// warm_next_slot(added): an add of `added` jobs is done: warm the slot the next add will
  /// probably take (FreeSlots::next_hint). A wrong guess costs four line fetches. Single adds
  /// of one producer ran 1.7 to 2.5 times as fast with it (1P+2W: 2.27 -> 3.92 M jobs/s with the
  /// queue's own workers, 1.97 -> 4.85 with the shared pool), their slot misses no longer
  /// stalling the add.
  void warm_next_slot(std::size_t added) const noexcept {
    std::uint32_t next;
    if (free_.next_hint(next, added) && next < capacity_) warm_slot(next);
  }
  /// give_back(idx): a slot acquired but never filled (a duplicate add) returns unused.
  void give_back(std::uint32_t idx) noexcept { free_.push(idx); }

  /// init_slot(...): the holder fills a fresh job's fields (the payload is the caller's).
  void init_slot(std::uint32_t idx, std::uint64_t id, std::uint16_t name_id, std::int64_t now,
                 const JobOptions& o) noexcept {
    JobSlot& s = slots_[idx];
    s.id.store(id, std::memory_order_relaxed);  // published by the ring push (or ctl release)
    s.name = name_id;
    s.added_ns = now;
    s.started_ns.store(0, std::memory_order_relaxed);
    s.prev_delay_ns = 0;
    s.attempts_made.store(0, std::memory_order_relaxed);
    s.deliveries.store(0, std::memory_order_relaxed);
    s.stalls.store(0, std::memory_order_relaxed);
    s.max_attempts = static_cast<std::uint16_t>(o.attempts);
    s.visibility_ns = o.visibility_timeout.value_or(options_.visibility_timeout).count();
    s.end_kind = EndKind::none;
    s.end_reason = DeadLetterReason::none;
    s.has_dedup = false;
    s.link = o.downstream.empty() ? 0 : link_of(o.downstream);  // admit made it
    s.set_backoff(o.backoff);
    if (s.extra) s.extra->errors.clear();
  }
  /// live_claim(o, now): the claim of a live job holding dedup id o.dedup.id, if any (a full
  /// queue's add checks it: a duplicate is a duplicate whether or not there is room).
  std::optional<DedupSet::Claim> live_claim(const JobOptions& o, std::int64_t now);
  /// claim_id(idx, o, now, successor_of): claims dedup id o.dedup.id for a new job in slot idx
  /// (its id is drawn only if the claim is inserted), taking it over from job `successor_of`
  /// if that one holds it (a kept add after its ended job).
  DedupSet::Claim claim_id(std::uint32_t idx, const JobOptions& o, std::int64_t now,
                           JobId successor_of = 0);
  /// claim_dedup(idx, o): slot idx's job now holds dedup id o.dedup.id.
  void claim_dedup(std::uint32_t idx, const JobOptions& o);
  /// reclaim_dedup(idx, id, key, now): a redriven job `id` in slot idx holds dedup id `key`
  /// again: still its own (a ttl from its first run), or free and claimed now (until it ends).
  /// Held by another job since: this one runs without it. May throw (bad_alloc) before any change.
  void reclaim_dedup(std::uint32_t idx, JobId id, const std::string& key, std::int64_t now);
  /// restore_counters(idx, ...): a redrive that keeps counters carries them and the error log
  /// into slot idx (after init_slot). May throw (bad_alloc) before any change to the counters.
  void restore_counters(std::uint32_t idx, std::uint32_t attempts, std::uint32_t deliveries,
                        std::uint32_t stalls, const std::vector<AttemptError>& errors);
  /// link_to(downstream): finds or makes the link to a declared downstream (cold: admit);
  /// Error(unknown_downstream) or Error(capacity) past kMaxLinks.
  void link_to(const std::string& downstream);
  /// own_downstream(s): the downstream the job named if it is not the queue's (else empty).
  [[nodiscard]] std::string own_downstream(const JobSlot& s) const {
    return s.link == 0 ? std::string() : link(s.link)->gate().name();
  }
  /// own_visibility(s): the job's lease length if it is not the queue's.
  [[nodiscard]] std::optional<Duration> own_visibility(const JobSlot& s) const noexcept {
    if (s.visibility_ns == options_.visibility_timeout.count()) return std::nullopt;
    return Duration{s.visibility_ns};
  }

  /// publish_new(idx, now, delay): a filled slot enters the waiting or delayed state.
  void publish_new(std::uint32_t idx, std::int64_t now, Duration delay) noexcept {
    JobSlot& s = slots_[idx];
    if (delay.count() > 0) {
      s.due_ns.store(saturating_add(now, delay), std::memory_order_relaxed);  // see publish()
      s.ctl.publish(SlotState::delayed);
      to_timer(idx);
    } else {
      s.ctl.publish(SlotState::waiting);
      dispatch_.push_ready(idx);
    }
  }
  /// publish_ready(idx, n): n filled slots become waiting at once (add_bulk).
  void publish_ready(const std::uint32_t* idx, std::size_t n) noexcept;

  /// note_added(s, delay) / note_redriven(s, now): the add's event.
  void note_added(const JobSlot& s, Duration delay) const noexcept;
  void note_redriven(const JobSlot& s, std::int64_t now) const noexcept;
  /// note_overflow(id, job_name, max_attempts, now): a full queue dead-lettered an add.
  void note_overflow(JobId id, std::string_view job_name, std::uint32_t max_attempts,
                     TimePoint now) noexcept;
  /// dedup_refusal(claim, o): the add's status when the window refused the id (full), throws
  /// when the id is too long; nullopt for a duplicate of a kept job.
  std::optional<AddResult> dedup_refusal(const DedupSet::Claim& claim, const JobOptions& o) const;
  /// note_duplicate(owner, job_name, o, now, debounced): a duplicate add merged into `owner`.
  AddResult note_duplicate(JobId owner, std::string_view job_name, const JobOptions& o,
                           std::int64_t now, bool debounced,
                           AddStatus status = AddStatus::duplicate);

  /// take_unstarted(take): after shutdown, under the wheel, hands every job that never started
  /// and that no handler pins to take(idx, delayed), which moves its payload out and destroys
  /// it; the slot is then freed here. False if called while this thread owns the wheel.
  bool take_unstarted(const std::function<void(std::uint32_t, bool)>& take);

  DedupSet& dedup();

  /// The keep gate of a slot whose job holds a dedup id, a hand-off between adds that keep a
  /// newer add for after the running job (keep_last_if_active) and the job's end:
  ///   open(id)  the job may still get a kept add   (set by the holder when the job claims)
  ///   kept(id)  an add is kept for after it        (an adder's CAS from open, once)
  ///   0         closed: the job has ended           (the holder's exchange in settle_end)
  /// One atomic word carries the whole decision, so exactly one of two things happens: the
  /// adder's CAS comes first, and the ending job sees kept(id), holds its dedup id for the kept
  /// add and runs it (run_deferred); or the exchange comes first, and the CAS fails: the add is
  /// not kept and finds the id released (or held for a ttl). The id in the word makes the CAS
  /// fail on a slot reused since the adder looked (ids are never reused). A kept add whose job
  /// let the id go first could run after a newer add's job (CI saw it: the newest add lost).
  static constexpr std::uint64_t gate_open(JobId id) noexcept { return id << 1; }
  static constexpr std::uint64_t gate_kept(JobId id) noexcept { return id << 1 | 1; }

  /// keep_while_active(idx, owner, key, keep, undo): under the caller's lock on its kept adds,
  /// keeps an add for after job `owner` if it is running in slot idx and no end closed its gate:
  /// calls keep() (which records the add), then moves the gate from open to kept, and holds the
  /// dedup id `key` for the job past its ttl (until the kept add takes it over): else a newer
  /// add could make a job, once the ttl lapsed, that the older kept add would follow. False:
  /// nothing kept (keep() undone by `undo`).
  template <class Keep, class Undo>
  bool keep_while_active(std::uint32_t idx, JobId owner, std::string_view key, Keep&& keep,
                         Undo&& undo) {
    const SlotState st = ctl::state(slots_[idx].ctl.load());
    if ((st != SlotState::active && st != SlotState::finishing) ||
        slots_[idx].id.load(std::memory_order_relaxed) != owner)
      return false;  // waiting or delayed: a duplicate merges as usual; or it ended
    keep();
    std::uint64_t open = gate_open(owner);
    // acq_rel: one total order with the holder's exchange in settle_end (see above).
    if (!keep_gate(idx).compare_exchange_strong(open, gate_kept(owner), std::memory_order_acq_rel,
                                                std::memory_order_acquire)) {
      undo();
      return false;
    }
    if (dedup().set_expiry(key, owner, DedupSet::kNoExpiry)) return true;
    // The ttl lapsed and another add took the id since the caller's claim: that add is newer
    // than the job, so this one merges into it instead. Reopen the gate unless the job's end
    // closed it meanwhile (then run_deferred finds nothing kept: the id is not the job's).
    undo();
    std::uint64_t kept = gate_kept(owner);
    (void)keep_gate(idx).compare_exchange_strong(kept, gate_open(owner), std::memory_order_acq_rel,
                                                 std::memory_order_acquire);
    return false;
  }
  std::atomic<std::uint64_t>& keep_gate(std::uint32_t idx) const noexcept {
    return keep_gates_[idx];  // allocated with the dedup window (dedup())
  }

  EngineCore& core_;
  const std::string name_;
  const QueueOptions options_;
  QueueStats stats_;

 private:
  /// start_dedicated(w, seed): start_processing on the queue's own threads (or inline).
  void start_dedicated(const WorkerOptions& w, std::uint64_t seed);
  /// make_leases(workers, max_pending) / drop_leases(): the lease records of the workers and of
  /// the pending deliveries (PendingJobs), before the workers start; undone if they fail to.
  void make_leases(std::size_t workers, std::uint32_t max_pending);
  void drop_leases() noexcept;
  // JobRunner / TimerClient
  bool deliver(std::uint32_t idx, WorkerContext& wc) final;
  void flush_freed(std::uint32_t w) noexcept final { free_.flush(w); }
  void timer_fired(std::uint32_t idx, std::int64_t now) noexcept final;

  /// PauseListener: a queue that calls a downstream hands on a wake its paused ready ring may
  /// hold (wake_blocked passes a paused queue by while another can take the wake), and takes one
  /// back when it resumes.
  void pause_changed() noexcept final {
    for_each_link([](GateLink& l) { l.gate().pass_wake(); });
  }

  // Downstreams: the queue's links to the gates its jobs call (gate_link.hpp).
  /// link(i): link i, or null (link 0 of a queue without a downstream of its own).
  [[nodiscard]] GateLink* link(std::uint8_t i) const noexcept {
    // relaxed: a job's link number reached this thread through the slot's publication, which
    // comes after the link's (release) store: that store happens before this load.
    return links_[i].load(std::memory_order_relaxed);
  }
  template <class F>
  void for_each_link(F&& f) const noexcept {
    // acquire: pairs with link_to's release store of the count (the links before it are in).
    const std::size_t n = link_count_.load(std::memory_order_acquire);
    for (std::size_t i = 0; i < n; ++i)
      if (GateLink* l = links_[i].load(std::memory_order_relaxed)) f(*l);
  }
  /// link_of(downstream): the link number of an add's JobOptions::downstream, which admit made
  /// (link_to): 0 for none or the queue's own.
  [[nodiscard]] std::uint8_t link_of(const std::string& downstream) const noexcept;
  /// wake_from(link, blocked) / promote_leader(id): GateLink's BlockedQueue calls.
  bool wake_from(GateLink& link, std::atomic<std::int64_t>& blocked, bool even_paused) noexcept;
  void promote_leader(JobId id) noexcept;
  /// throttle(idx, token, delivered, decision, now, wc): the gate refused the job deliver just
  /// activated (delivery `token`, whose count was `delivered` before): it waits, unstarted and
  /// with no attempt used, in the blocked ring or (the gate's leader) on the wheel. False if a
  /// cancel flagged it meanwhile: deliver then ends it as cancelled without running it.
  bool throttle(std::uint32_t idx, std::uint32_t token, std::uint16_t delivered, GateLink& gate,
                const DownstreamGate::Decision& decision, std::int64_t now, WorkerContext& wc);
  /// sweep_blocked(): a waiting job was cancelled: give back the slots of the cancelled jobs
  /// in the blocked ring now, rather than when wakes pop them.
  void sweep_blocked() noexcept;
  /// note_throttled(s, now, until, cause, why): the job's `throttled` event (observed engines
  /// only).
  void note_throttled(const JobSlot& s, std::int64_t now, std::int64_t until, Throttle cause,
                      std::string why) const noexcept;
  void timer_reclaim(std::uint32_t idx) noexcept final;
  std::int64_t timer_sweep(std::int64_t now) noexcept final;

  /// FailKind: why an attempt failed, as far as what happens next is concerned.
  enum class FailKind : std::uint8_t {
    retry,        // backoff decides the delay
    retry_after,  // the handler gave the delay
    permanent,    // dead-letter now
    lapse,        // the lease lapsed: redeliver at once (SQS), lease_expired when exhausted
  };

  void admit_unusual(const JobOptions& o);
  void name_own(const std::uint32_t* idx, std::size_t n, std::string_view name);
  bool acquire_slots_slow(std::uint32_t* out, std::size_t n);
  bool try_acquire(std::uint32_t* out, std::size_t n) noexcept {
    if (pop_free(out, n)) [[likely]]
      return true;
    // No room: jobs cancelled while waiting may still hold theirs (reclaim_cancelled_waiting).
    return reclaim_cancelled_waiting() && pop_free(out, n);
  }
  bool pop_free(std::uint32_t* out, std::size_t n) noexcept {
    // All or nothing: with fewer than n free none is handed out, so a bulk add on a nearly full
    // queue neither churns the free list against the workers nor reorders it. One job: a plain
    // pop (the bulk path's size estimate would read the workers' end of the ring on every add).
    if (n == 1) return free_.try_pop(*out);
    return free_.try_pop_bulk(out, n) == n;
  }
  /// reclaim_cancelled_waiting(): an add found no free slot. A job cancelled while waiting
  /// leaves its index in the ready ring, where only a popper can take it, and keeps its slot
  /// till then: on a paused queue, or one whose workers are busy, for as long. If cancels have
  /// happened since the last pass, sweeps the ready ring (Dispatcher::sweep_ready) and reclaims
  /// the slots of the cancelled jobs in it, so that a cancel gives its capacity back before
  /// the queue answers `full`. True if the caller should look for a free slot again: always
  /// once any waiting job was ever cancelled, since a sweep by another add may have freed slots
  /// after the caller's pop failed (review: of two adds racing for two reclaimable slots, the
  /// second answered `full` while the first swept). Cold: one pass per burst of cancels, under
  /// reclaim_mu_.
  bool reclaim_cancelled_waiting() noexcept;
  /// drop_cancelled(idx): the popper of the index of a job cancelled while waiting (from the
  /// ready ring, a blocked ring or a sweep) reclaims its slot.
  void drop_cancelled(std::uint32_t idx);
  void to_timer(std::uint32_t idx) noexcept;
  [[nodiscard]] bool leases_enabled() const noexcept {
    return options_.visibility_timeout != Duration::max();
  }
  SlotExtra& extra(JobSlot& s);
  /// log_failure(s, attempt, now, reason): appends to the job's error log; returns its text.
  const std::string& log_failure(JobSlot& s, std::uint32_t attempt, std::int64_t now,
                                 std::string reason);
  /// status_of(state) / live_state(s, c): a live job's status, and its state as slot s with
  /// word c shows it (the caller validates c afterwards: a seqlock read).
  static JobStatus status_of(SlotState st) noexcept;
  JobState live_state(const JobSlot& s, std::uint64_t c) const noexcept;

  /// finish(...): the handler of delivery `token` returned `out`; true if it counted (live).
  /// A deferred delivery passes its pending record, which goes back with the delivery's pin.
  static constexpr std::uint32_t kNoPendingRecord = ~std::uint32_t{0};
  bool finish(std::uint32_t idx, std::uint32_t token, Outcome&& out, WorkerContext& wc,
              TimePoint started, std::uint32_t delivery,
              std::uint32_t pending_record = kNoPendingRecord);
  /// return_permit(out, now): a delivery that held a downstream permit is over; a pushback
  /// pauses the downstream first.
  void return_permit(DownstreamGate& gate, const Outcome& out, std::int64_t now) noexcept;
  void fail_attempt(std::uint32_t idx, std::string reason, FailKind kind, Duration explicit_delay,
                    SplitMix64& rng, std::int64_t now, WorkerContext* wc);
  void lapse(std::uint64_t lease, std::int64_t now);
  void end_job(std::uint32_t idx, EndKind kind, DeadLetterReason reason, std::int64_t now,
               WorkerContext* wc, std::string_view why = {},
               std::shared_ptr<const void> result = {});
  /// Settled: what a job's end leaves for once it left its slot (ended()).
  struct Settled {
    bool kept = false;             // an add was kept for after it: run_deferred
    std::optional<EndRecord> end;  // its waiters and retained ends want it (EndTracker)
  };
  /// record_end / settle_end: count the job's end, let its dedup id go and note it for its
  /// waiters (`result`: a completed job's); record_end also raises its event.
  Settled record_end(JobSlot& s, EndKind kind, std::int64_t now, WorkerContext* wc,
                     std::string_view why = {}, std::shared_ptr<const void> result = {});
  Settled settle_end(JobSlot& s, EndKind kind, WorkerContext* wc, std::int64_t now,
                     std::string_view why = {}, std::shared_ptr<const void> result = {});
  /// note_end(s, kind, wc): counts the job's end and enters it in the history; true when its
  /// waiters or retained ends want a record of it (asked after the entry: see EndTracker).
  bool note_end(const JobSlot& s, EndKind kind, WorkerContext* wc) noexcept;
  /// leave(idx, kind, settled): the job's end is settled: it leaves slot idx (freed now, or by
  /// the last stale handler to return), then ended().
  void leave(std::uint32_t idx, EndKind kind, Settled&& settled);
  /// complete(idx, wc, result): finish()'s common end, kept short: a job done with nobody
  /// observing and no dedup id (no event, no kept add; a record only if a waiter came since).
  void complete(std::uint32_t idx, WorkerContext& wc, std::shared_ptr<const void>&& result);
  EndRecord end_record(const JobSlot& s, EndKind kind, std::int64_t now, std::string_view why,
                       std::shared_ptr<const void> result) const;
  void end_dead_lettered(std::uint32_t idx, std::int64_t now, WorkerContext* wc);
  void reclaim_cancelled(std::uint32_t idx);
  std::optional<bool> try_cancel(std::uint32_t idx, JobId id);
  void end_cancelled(std::uint32_t idx, SlotState from);
  /// ended(id, settled): after a job left its slot: run the add kept for after it, if its end
  /// found one, and tell its waiters (settle_end's answers). Here, not in settle_end: a waiter's
  /// callback may cancel or wait, and must not find the slot still held by this thread.
  void ended(JobId id, Settled&& settled) noexcept {
    if (settled.kept) [[unlikely]]
      run_deferred(id);
    if (settled.end) [[unlikely]] {
      try {
        ends_.record(std::move(*settled.end));
      } catch (...) {  // no memory to retain it: its waiter learns it by id from the history
      }
    }
  }
  void final_end(std::uint32_t idx, const Event* event = nullptr) {
    retire(idx, slots_[idx].end_kind == EndKind::dead_lettered, event);
  }

  /// count(wc, c): a worker bumps its own counters; anyone else (wc null) the shared stripes.
  void count(WorkerContext* wc, Counter c, std::uint64_t n = 1) noexcept {
    if (wc && wc->counters) {
      wc->counters->add(c, n);
    } else {
      stats_.add(c, n);
    }
  }

  Event make_event(EventKind kind, const JobSlot& s, std::int64_t now) const noexcept;
  void emit(EventKind kind, const JobSlot& s, std::int64_t now) const noexcept {
    core_.emit(make_event(kind, s, now));
  }

  struct FreeCells {
    std::size_t bytes = 0;
    std::size_t align = 0;
    void operator()(char* p) const noexcept;
  };

  const std::size_t capacity_;
  const std::size_t stride_;
  std::uint16_t index_ = 0;
  std::unique_ptr<JobSlot[]> slots_;
  std::unique_ptr<char[], FreeCells> payload_;
  FreeSlots free_;
  Dispatcher dispatch_;
  TimerPort timers_;
  // The downstreams the queue's jobs call (gates owned by the engine), each with the ring of this
  // queue's jobs it refused: link 0 is QueueOptions::downstream's (null without one), the others
  // JobOptions::downstream's, made on first use under links_mu_ and never removed.
  std::array<std::atomic<GateLink*>, GateLink::kMaxLinks> links_{};
  std::atomic<std::size_t> link_count_{1};
  std::vector<std::unique_ptr<GateLink>> link_owner_;
  std::mutex links_mu_;
  std::unique_ptr<LeaseTracker> leases_;
  // Deliveries handed to a Completion (WorkerOptions::max_pending > 0), set before processing_.
  std::unique_ptr<PendingJobs> pending_;
  std::atomic<bool> processing_{false};  // start_processing ran: admit may re-arm the sweep
  // Cancels of waiting jobs so far, and that count plus the dispatcher's held_back() as the last
  // sweep of the ready jobs read them before it began (see reclaim_cancelled_waiting); sweeps
  // take turns on reclaim_mu_.
  std::atomic<std::uint64_t> waiting_cancels_{0};
  std::atomic<std::uint64_t> swept_mark_{0};
  [[nodiscard]] std::uint64_t sweep_mark() const noexcept {
    // acquire: pairs with end_cancelled's release increment (and held_back's own acquire).
    return waiting_cancels_.load(std::memory_order_acquire) + dispatch_.held_back();
  }
  std::mutex reclaim_mu_;
  // The dedup window is built on the first add that carries a dedup id: a queue that never
  // deduplicates should not pay its memory (capacity x max key bytes).
  std::atomic<DedupSet*> dedup_{nullptr};
  // Results (Engine::queue<T, R>): R's identity and printer, and who hears of ends.
  std::type_index result_type_{typeid(void)};
  std::string (*format_result_)(const void*) = nullptr;  // null: R cannot be printed
  EndTracker ends_;
  RunHandler run_handler_ = nullptr;  // bind_handler
  void* handler_ctx_ = nullptr;
  // Progress (Job::progress): one cell per slot, allocated on the queue's first report. A cell
  // belongs to the job whose id it holds; the live handler is its only writer (a stale one is
  // fenced first), state() reads it relaxed (a hint, like the slot's counters).
  struct ProgressCell {
    std::atomic<JobId> id{0};
    std::atomic<std::uint64_t> bits{0};  // the value's double bits
    std::atomic<std::int64_t> last_event_ns{0};
  };
  std::atomic<ProgressCell*> progress_{nullptr};
  std::unique_ptr<ProgressCell[]> progress_owner_;
  std::mutex progress_init_mu_;
  std::unique_ptr<DedupSet> dedup_owner_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> keep_gates_;  // one per slot, with dedup_owner_
  std::mutex dedup_init_mu_;
  // Repeatable jobs: built on the first schedule. After ends_: a schedule's live runs hold
  // waiters that leave ends_ when the table goes.
  std::atomic<ScheduleTable*> schedules_{nullptr};
  std::unique_ptr<ScheduleTable> schedules_owner_;
  std::mutex schedules_init_mu_;
};

}  // namespace rail::detail
