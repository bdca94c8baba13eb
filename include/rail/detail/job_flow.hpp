// JobFlow: where a queue's jobs go from add to their end, whatever their payload type: the slots
// and free list, the add sequence, publishing, delivery to the handler, the handler's outcome
// (finish: done, retry with backoff, dead-letter), lease lapses and timer firings, compiled once
// in src/. QueueImpl derives from it and adds only what touches a payload (payload cells, add,
// redrive and leftovers, DLQ entries) through the payload type's table, with bind_handler (one
// indirect call straight into the typed handler) and PayloadHooks (job_ends.hpp).
//
// Guarantee: every accepted job reaches exactly one end — completed, dead-lettered, cancelled,
// discarded, or forwarded (a job resumed from a broker: resumed.hpp) — or is reported by shutdown;
// none is lost, none ends twice, and exactly one outcome per delivery counts (a handler whose lease
// lapsed is fenced by its token: slot_table.hpp).
//
// The parts, each with its own contract, in the order a job meets them (C = capacity):
//   parts_        engine, name, options, counters, slots[C] (flow_parts.hpp); a slot's control
//                 word is SlotControl's (slot_table.hpp), the only code that changes a job's state
//   free_         free slot indices, recycled first (free_slots.hpp)
//   claims_       dedup ids and keep gates (dedup_claims.hpp)
//   lines_        FIFO groups' and tenants' lines, and their turns (lines.hpp)
//   dispatch_     the ready ring, stashes, wake-ups and worker threads (dispatcher.hpp)
//   links_        the downstreams the jobs call and their blocked rings (downstream_links.hpp)
//   timers_       the wheel: delays, retries, the lease sweep, schedules (timer_port.hpp)
//   completions_  deliveries handed to a Completion (completions.hpp)
//   ends_         a job's end, its waiters and retained ends (job_ends.hpp)
//   progress_     Job::progress reports and their events (progress_board.hpp)
//   queries_      state, ends and listings, read-only (job_queries.hpp)
//   control_      cancel, retime, the slots of cancelled waiting jobs (job_control.hpp)
//   expiry_       jobs not started within their expire_after, ended on time (job_expiry.hpp)
//   leftovers_    the jobs left at shutdown (leftovers.hpp)
// Each index is in exactly one place — the free list, a ring, a stash, the wheel (linked or
// parked) — or held by exactly one thread (job_slot.hpp's ownership invariant).
//
// Add:    pop free -> fill slot and payload -> publish: ready ring (or the timer port when
//         delayed, or parked there while it waits for its children: flow_node.hpp) -> wake.
// Work:   pop a batch of ready (the first job now, the rest into the worker's stash, stealable)
//         -> activate (pin) -> downstream admission -> lease -> handler -> finish:
//           done            -> ends_ (completed)
//           retry (+delay)  -> delayed: timer port | no delay: ready | resumed: ends_ (forwarded)
//           out of attempts -> ends_ (dead-lettered: DLQ entry with the payload moved)
// Timer:  the timer port fires delayed -> waiting and pushes ready; its deadline sweep takes
//         lapsed or timed-out deliveries (active -> finishing) and redelivers, retries or
//         dead-letters them (job_deadlines.cpp).
// The cold calls are units of their own: cancel, retime, parents (control_), Job::progress
// (progress_), state, ends and listings (queries_), shutdown's leftovers (leftovers_).
//
// Memory ordering: a slot's plain fields and payload are written by their holder before the
// index is pushed to a ring (release) and read by the next holder after popping it (acquire).
// Non-holders go through ctl with SlotControl's orders. Slot ids are loaded relaxed: a cold-path
// reader validates them against ctl (a CAS fails if the slot was reused). due_ns is relaxed: it
// travels with the inbox push or the ctl release.
//
// Threading: add/add_bulk/cancel/state/pause from any thread; `concurrency` worker threads per
// queue, the shared pool's workers, or the run_until_idle() caller (inline mode) run handlers.
#pragma once

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

#include "rail/add_receipt.hpp"
#include "rail/batch.hpp"
#include "rail/dead_letter.hpp"
#include "rail/detail/add_gate.hpp"
#include "rail/detail/assert.hpp"
#include "rail/detail/codel.hpp"
#include "rail/detail/completions.hpp"
#include "rail/detail/deadline.hpp"
#include "rail/detail/dedup_claims.hpp"
#include "rail/detail/dispatcher.hpp"
#include "rail/detail/downstream_links.hpp"
#include "rail/detail/flow_parts.hpp"
#include "rail/detail/free_slots.hpp"
#include "rail/detail/job_control.hpp"
#include "rail/detail/job_ends.hpp"
#include "rail/detail/job_expiry.hpp"
#include "rail/detail/job_queries.hpp"
#include "rail/detail/lazy_owned.hpp"
#include "rail/detail/lease_tracker.hpp"
#include "rail/detail/leftovers.hpp"
#include "rail/detail/lines.hpp"
#include "rail/detail/prefetch.hpp"
#include "rail/detail/progress_board.hpp"
#include "rail/detail/resumed.hpp"
#include "rail/detail/timer_port.hpp"
#include "rail/detail/validation.hpp"
#include "rail/event.hpp"
#include "rail/explanation.hpp"
#include "rail/job.hpp"
#include "rail/job_state.hpp"
#include "rail/options.hpp"
#include "rail/outcome.hpp"

namespace rail::detail {

class JobFlow : public QueueBase,
                private JobRunner,
                private TimerClient,
                private PauseListener,
                private PayloadHooks,
                private DlqLookup {
 public:
  JobFlow(const JobFlow&) = delete;
  JobFlow& operator=(const JobFlow&) = delete;

  // --- QueueBase ---------------------------------------------------------------------------------
  const std::string& name() const noexcept final { return parts_.name; }
  QueueCounts counts() const noexcept final;  // queue_waits.cpp
  /// waiting_in_line(): waiting jobs in the ready ring, not held at a downstream (a figure:
  /// DownstreamStats::waiting of the queue's own downstream, while its permits are in use).
  [[nodiscard]] std::uint64_t waiting_in_line() const noexcept {
    return links_.waiting_in_line(counts().waiting);
  }
  /// idle(): nothing waiting, delayed or running (stale handlers included).
  bool idle() const noexcept final;
  void collect_leftovers(ShutdownReport& report) const final {
    leftovers_.collect(report);
    collect_deferred(report);
  }
  void abandon_unstarted(bool dropped) final { leftovers_.abandon_unstarted(dropped); }
  void close_waiters() noexcept final;
  void drain_timer_inbox(Wheel& wheel) noexcept final { timers_.drain_all(wheel, *this); }
  void fire(std::uint32_t tag, std::int64_t now, Wheel& wheel) noexcept final {
    timers_.fire(tag, now, wheel, *this);
  }
  std::size_t run_ready(std::size_t max) final;
  void stop_workers() noexcept final { dispatch_.stop(); }
  void join_workers() noexcept final { dispatch_.join(); }
  void close_completions() noexcept final { completions_.close(); }
  bool cancel_job(std::uint64_t id) final { return cancel(id); }
  JobState job_state(std::uint64_t id) const final { return state(id); }
  Explanation explain_job(std::uint64_t id) const final { return explain(id); }
  void sweep_inline(std::int64_t now, Wheel& wheel) final;

  [[nodiscard]] const QueueOptions& options() const noexcept { return parts_.options; }
  [[nodiscard]] EngineCore& core() const noexcept { return parts_.core; }
  /// pool_wait(what, bounded): a wait about to block for this queue's jobs (with a timeout, or
  /// none), checked and counted against the shared pool when the caller is one of its workers
  /// (PoolWait); throws Error(would_deadlock) naming `what` if no worker could run them.
  [[nodiscard]] PoolWait pool_wait(const std::string& what, bool bounded) const;

  // --- lifecycle and admin (see Queue) ---------------------------------------------------------
  void pause() noexcept { dispatch_.pause(); }
  void resume() noexcept { dispatch_.resume(); }
  bool pause_and_wait(Duration timeout) { return dispatch_.pause_and_wait(timeout); }
  [[nodiscard]] bool paused() const noexcept { return dispatch_.paused(); }
  bool wait_idle(Duration timeout);
  bool cancel(JobId id) { return control_.cancel(id); }
  [[nodiscard]] JobControl& control() noexcept { return control_; }  // FlowNode's decisions
  /// children(idx): Job::children of the job in slot idx, which the caller pins (job_adding.cpp).
  [[nodiscard]] std::vector<ChildEnd> children(std::uint32_t idx) const;
  [[nodiscard]] JobState state(JobId id) const { return queries_.state(id); }
  /// explain(id): Queue::explain (job_explain.cpp).
  [[nodiscard]] Explanation explain(JobId id) const;
  /// oldest_waits(): Queue::oldest_waits (job_explain.cpp).
  [[nodiscard]] std::vector<Duration> oldest_waits() const;
  /// retime(id, due, held_only): a delayed job runs at `due` instead (promote: now). See
  /// Queue::promote. held_only: the gate's call, for its leader held on the wheel.
  bool retime(JobId id, std::int64_t due, bool held_only = false) {
    return control_.retime(id, due, held_only);
  }
  /// jobs(status, limit): live jobs in `status` (waiting, delayed or active), oldest id first.
  [[nodiscard]] std::vector<JobInfo> jobs(JobStatus status, std::size_t limit) const {
    return queries_.jobs(status, limit);
  }
  /// progress(idx, token, value): Job::progress of delivery `token` in slot idx.
  bool progress(std::uint32_t idx, std::uint32_t token, double value) noexcept {
    return progress_.report(idx, token, value);
  }
  /// stop_token(idx, token): Job::stop_token of delivery `token` in slot idx (StopCells).
  [[nodiscard]] std::stop_token stop_token(std::uint32_t idx, std::uint32_t token);
  /// emit_dlq(kind, id, job_name, depth, elapsed): the DLQ's events (evicted, the alerts).
  void emit_dlq(EventKind kind, JobId id, std::string_view job_name, std::size_t depth,
                Duration elapsed = {});
  /// sweep_by(due): the queue's timer sweep runs no later than due (the DLQ's age alert).
  void sweep_by(std::int64_t due) noexcept;  // job_deadlines.cpp

  // --- for the DLQ bridge (dead_letter_bridge.hpp) -------------------------------------------
  /// dead_letter_info(idx): the DLQ entry of the job ending in slot idx, but its payload.
  [[nodiscard]] DeadLetterInfo dead_letter_info(std::uint32_t idx) const;  // job_adding.cpp
  /// redrive_with(e, reset_counters, fill): DLQ entry e's job again, with its own id, name,
  /// options and (unless reset) counters: takes a slot, fills it from e, then fill(cell) places
  /// the payload (must not throw) and the job is published. Everything that may throw comes
  /// before fill, so a throw leaves the payload with the entry.
  template <class Fill>
  RedriveStatus redrive_with(const DeadLetterInfo& e, bool reset_counters,
                             Fill&& fill);  // add_with.hpp
  /// note_overflow(id, job_name, max_attempts, now): a full queue dead-lettered an add.
  void note_overflow(JobId id, std::string_view job_name, std::uint32_t max_attempts,
                     TimePoint now) noexcept;

  // --- results and waiting (declare_queue<T, R>, Queue::add_tracked / end_of / wait) -----
  void declare_result(std::type_index type, std::string (*format)(const void*)) {
    ends_.declare_result(type, format);
  }
  [[nodiscard]] std::type_index result_type() const noexcept { return ends_.result_type(); }
  [[nodiscard]] EndTracker& end_tracker() noexcept { return ends_.tracker(); }
  /// end_of(id): job `id`'s end if it ended and is retained, or what its history says (no result
  /// or errors then), or nullopt while it is live (or unknown to the queue: status unknown).
  [[nodiscard]] std::optional<EndRecord> end_of(JobId id) const { return queries_.end_of(id); }
  [[nodiscard]] const JobQueries& queries() const noexcept { return queries_; }

  // --- repeatable jobs (Queue::schedule) ---------------------------------------------------------
  /// validate_schedule(id, job_name, o): throws as admit() does, as validate_schedule_options,
  /// and Error(shutting_down) once shutdown began (a declaration, as Engine::declare_queue).
  void validate_schedule(std::string_view id, std::string_view job_name, const ScheduleOptions& o) {
    if (!core().accepting()) [[unlikely]]
      throw_shutting_down();
    admit(job_name, o.job);
    validate_schedule_options(id, o, parts_.name);
  }
  [[nodiscard]] ScheduleTable& schedules() { return timers_.schedules(); }
  [[nodiscard]] const ScheduleTable* schedules_if_any() const noexcept {
    return timers_.schedules_if_any();
  }

  // --- a delivery's end (deliver, Completions) -------------------------------------------------
  /// defer(job): the handler of `job` hands its delivery to a Completion (Completions::defer).
  Completion defer(JobFields& job) { return completions_.defer(job); }
  /// finish(...): the handler of delivery `token` returned `out`; true if it counted (live).
  /// A deferred delivery passes its pending record, which goes back with the delivery's pin.
  static constexpr std::uint32_t kNoPendingRecord = ~std::uint32_t{0};
  bool finish(std::uint32_t idx, std::uint32_t token, Outcome&& out, WorkerContext& wc,
              TimePoint started, std::uint32_t delivery,
              std::uint32_t pending_record = kNoPendingRecord);
  /// close_delivery(d, out, wc): the handler of open delivery d gave `out`: its lease and
  /// permit go back, then finish() (deliver, and each job of a batch once its handler returned).
  void close_delivery(OpenDelivery& d, Outcome&& out, WorkerContext& wc);

 protected:
  /// JobFlow(...): allocates capacity slots and payload cells of payload_size/payload_align.
  /// The queue joins the engine only in attach(), once the derived queue is fully built.
  JobFlow(EngineCore& core, std::string name, QueueOptions options, std::size_t payload_size,
          std::size_t payload_align);
  ~JobFlow();

  /// attach(): registers the queue with the engine (timers may fire it from then on).
  void attach();

  // --- the payload type's hooks (besides PayloadHooks) -----------------------------------------
  /// run_handler(idx, job): runs the handler on slot idx's payload; may throw (a failed attempt).
  /// One indirect call per job: run_handler_ is instantiated for the payload and handler types
  /// (Queue<T, R>::process), where a virtual hook and a std::function would make two.
  Outcome run_handler(std::uint32_t idx, JobFields& job) {
    return run_handler_(handler_ctx_, cell(idx), job);
  }
  using RunHandler = Outcome (*)(void* handler, const void* payload, JobFields& job);
  /// hold(d, payload, wc): a batch queue's hook (hold_deliveries): deliver opened d for a job
  /// that runs, and hands it over instead of running a handler; d must be closed
  /// (close_delivery) on worker d.job.worker_'s thread. Its lease, if any, is in
  /// held_record(w, next_held(w)), which deliver asked for before it granted the lease.
  virtual void hold(OpenDelivery&& d, const void* payload, WorkerContext& wc) = 0;
  /// next_held(w): how many deliveries worker w holds open (below held_max_), or kNotHeld when
  /// it may hold no more now: deliver then runs the bound handler instead.
  static constexpr std::uint32_t kNotHeld = ~std::uint32_t{0};
  [[nodiscard]] virtual std::uint32_t next_held(std::uint32_t w) const noexcept = 0;
  /// hold_deliveries(max): before the workers start: deliveries go to hold(), each worker
  /// holding up to `max` of them, each with a lease record of its own (make_leases).
  void hold_deliveries(std::uint32_t max) noexcept { held_max_ = max; }
  /// bind_handler(run, handler): before the workers start (their start publishes it), or to
  /// unbind (null) once a failed start stopped them.
  void bind_handler(RunHandler run, void* handler) noexcept {
    run_handler_ = run;
    handler_ctx_ = handler;
  }
  // DlqLookup (in_dlq, dlq_end): the typed layer's DLQ answers for JobQueries.
  /// collect_deferred(report): lists the adds kept for after a running job (not started).
  virtual void collect_deferred(ShutdownReport& report) const = 0;

  // --- for the typed layer ----------------------------------------------------------------------
  [[nodiscard]] void* cell(std::uint32_t idx) const noexcept {
    return payload_.get() + std::size_t{idx} * stride_;
  }
  [[nodiscard]] JobSlot& slot(std::uint32_t idx) const noexcept { return parts_.slot(idx); }
  [[nodiscard]] std::size_t capacity() const noexcept { return parts_.capacity; }
  /// stamp_end(wc): wc's worker goes idle: a job it completed without a time gets now (the
  /// flow's FlowParts::stamp_end).
  void stamp_end(WorkerContext& wc) noexcept;  // job_flow.cpp
  /// touched(): the slots ever used (FreeSlots::touched): the rest never held a job.
  [[nodiscard]] std::size_t touched() const noexcept { return free_.touched(); }
  [[nodiscard]] QueueStats& stats() noexcept { return parts_.stats; }
  [[nodiscard]] std::string_view job_name(const JobSlot& s) const noexcept {
    return parts_.job_name(s);
  }
  [[nodiscard]] DedupClaims& claims() noexcept { return claims_; }
  [[nodiscard]] DownstreamLinks& links() noexcept { return links_; }
  [[nodiscard]] const DownstreamLinks& links() const noexcept { return links_; }
  /// own_visibility(s): the job's lease length if it is not the queue's.
  [[nodiscard]] std::optional<Duration> own_visibility(const JobSlot& s) const noexcept {
    if (s.visibility_ns == parts_.options.visibility_timeout.count()) return std::nullopt;
    return Duration{s.visibility_ns};
  }
  /// name_jobs(idx, n, name_id, name): before init_slot, a name the table could not intern is
  /// copied into each slot; on failure (bad_alloc) the slots go back to the free list.
  void name_jobs(const std::uint32_t* idx, std::size_t n, std::uint16_t name_id,
                 std::string_view name) {
    if (name_id == NameTable::kOwnName) [[unlikely]]
      name_own(idx, n, name);
  }

  /// start_processing(w): the handler is set; start the workers (once per queue, unless it threw:
  /// then nothing was started and it may be called again).
  void start_processing(const WorkerOptions& w);
  [[nodiscard]] bool processing() const noexcept {
    return processing_.load(std::memory_order_acquire);
  }

  // --- adding -----------------------------------------------------------------------------------
  /// Added: what add_with did. `duplicate`: a live job holds the add's dedup id (claim, at now);
  /// `no_room`: no slot (after waiting, where the add may wait); `refused`: the window refused
  /// the id (result says how). Only `added` used the payload.
  struct Added {
    enum class What : std::uint8_t { added, no_room, duplicate, refused };
    What what = What::added;
    AddReceipt result{};
    DedupSet::Claim claim{};
    std::int64_t now = 0;
  };
  /// add_with(job_name, o, may_block, prior, watch, fill): one add, the whole sequence: admit,
  /// take a slot, claim the dedup id (taking it over from ended job `prior`, which held it for
  /// this kept add), fill the slot, register the waiter in *watch before the job is published
  /// (add_tracked), fill(cell) (must not throw), count, raise `added`, publish.
  template <class Fill>
  Added add_with(std::string_view job_name, const JobOptions& o, bool may_block, JobId prior,
                 std::shared_ptr<EndWaiter>* watch, Fill&& fill);

  /// admit(name, o): throws unless name and o are valid here (whether the engine still
  /// accepts jobs is the caller's check: a status for an add, an Error for a declaration).
  void admit(std::string_view name, const JobOptions& o) {
    // Blank: no visible character. The first one usually is, so this is a compare or two.
    if (name.empty() || name.find_first_not_of(" \t\n\r\f\v") == std::string_view::npos)
        [[unlikely]]
      reject_job_name(name, parts_.name);
    validate_job_options(o, "JobOptions");
    if (o.backoff.kind == BackoffKind::custom || o.visibility_timeout || o.timeout ||
        !o.downstream.empty() || o.priority != 0 || !o.tenant.empty() || o.expire_after ||
        !o.after.empty() ||
        (o.delay.count() > 0 && parts_.options.expire_after != Duration::max()) ||
        ((o.trace || thread_trace().valid()) && !parts_.traces.any())) [[unlikely]]
      admit_unusual(o);
  }
  [[noreturn]] void throw_shutting_down() const;

  /// acquire_slots(out, n): takes n free slots (all or none), waiting per OnFull::block.
  bool acquire_slots(std::uint32_t* out, std::size_t n) {
    if (try_acquire(out, n)) [[likely]]
      return true;
    return acquire_slots_slow(out, n);
  }
  /// release_slot(idx): the caller holds idx and has destroyed (or never built) its payload.
  void release_slot(std::uint32_t idx) noexcept {
    slot(idx).ctl.mark_free();
    if (const int w = freeing_worker(); w >= 0) {
      free_.push_batched(idx, static_cast<std::uint32_t>(w));
    } else {
      free_.push(idx);
    }
  }
  /// give_back(idx): a slot acquired but never published (a duplicate add, a failed one)
  /// returns unused; a job that entered its group leaves it.
  void give_back(std::uint32_t idx) noexcept {
    if (Lines::lined(slot(idx))) [[unlikely]]
      (void)lines_.leave(idx);  // it never joined: no turn to hand on
    free_.push(idx);
  }
  /// enter_lines(idx, n, o): after init_slot, n jobs of one add enter the lines o names (its
  /// group, its tenant); on failure (bad_alloc) the slots go back to the free list, as
  /// name_jobs's do.
  void enter_lines(const std::uint32_t* idx, std::size_t n, const JobOptions& o);
  /// leave_filed(idx): see JobEnds::leave_filed (PayloadHooks::file_copy calls it).
  void leave_filed(std::uint32_t idx) { ends_.leave_filed(idx); }
  /// warm_next_slot(): an add is done: warm the slot the next add will probably take
  /// (FreeSlots::next_hint), so that its lines, last written on a worker's core, arrive while the
  /// producer does other work instead of stalling its next add. A wrong guess costs four line
  /// fetches.
  void warm_next_slot() const noexcept {
    std::uint32_t next;
    if (free_.next_hint(next) && next < parts_.capacity) warm_slot(next);
  }

  /// init_slot(...): the holder fills a fresh job's fields (the payload is the caller's).
  void init_slot(std::uint32_t idx, std::uint64_t id, std::uint16_t name_id, std::int64_t now,
                 const JobOptions& o) noexcept;  // add_with.hpp
  /// expire_at(o, now): when a job added now with options o expires (kNever: it does not);
  /// published(expire): jobs that expire then were just published (JobExpiry::added).
  [[nodiscard]] std::int64_t expire_at(const JobOptions& o, std::int64_t now) const noexcept {
    return saturating_add(now, o.expire_after.value_or(parts_.options.expire_after));
  }
  void published(std::int64_t expire) noexcept { expiry_.added(expire); }
  /// count_new(idx, delay): counts the fresh job in slot idx as added, before its event and its
  /// publish_new(idx, now, delay, ready) with the same delay (its lines entered). One count when
  /// it goes straight into `waiting` (ready: true), which counts that move too.
  [[nodiscard]] bool count_new(std::uint32_t idx, Duration delay) noexcept;  // add_with.hpp
  /// publish_new(idx, now, delay, ready): a filled slot enters the waiting or delayed state;
  /// ready is count_new's answer (the move into `waiting` is counted).
  void publish_new(std::uint32_t idx, std::int64_t now, Duration delay,
                   bool ready) noexcept;  // add_with.hpp
  /// join_lines(idx, publish): the job in slot idx, in a group or a tenant's line, is due: it
  /// joins its lines (Lines::join, which publishes it when `publish`), counted waiting from then
  /// on, and is made ready once it holds its turns.
  void join_lines(std::uint32_t idx, bool publish) noexcept;
  /// publish_ready(idx, n): n filled slots become waiting at once (add_bulk).
  void publish_ready(const std::uint32_t* idx, std::size_t n) noexcept;

  /// note_added(s, delay): the add's event.
  void note_added(const JobSlot& s, Duration delay) const noexcept;
  /// note_duplicate(owner, job_name, o, now, debounced): a duplicate add merged into `owner`.
  AddReceipt note_duplicate(JobId owner, std::string_view job_name, const JobOptions& o,
                            std::int64_t now, bool debounced,
                            AddStatus status = AddStatus::duplicate);

  /// take_unstarted(take): after shutdown, under the wheel, hands every job that never started
  /// and that no handler pins to take(idx, delayed), which moves its payload out and destroys
  /// it; the slot is then freed here. False if called while this thread owns the wheel.
  bool take_unstarted(const std::function<void(std::uint32_t, bool)>& take) {
    return leftovers_.take(take);
  }

  /// begin_redrive(of, reset_counters, idx): takes slot idx and fills it from DLQ entry `of`
  /// (nothing taken unless redriven). end_redrive(idx): the payload is in: count, raise, publish.
  RedriveStatus begin_redrive(const DeadLetterInfo& of, bool reset_counters, std::uint32_t& idx);
  void end_redrive(std::uint32_t idx) noexcept;
  /// restore_counters(idx, ...): a redrive that keeps counters carries them and the error log
  /// into slot idx (after init_slot). May throw (bad_alloc) before any change to the counters.
  void restore_counters(std::uint32_t idx, std::uint32_t attempts, std::uint32_t deliveries,
                        std::uint32_t stalls, const std::vector<AttemptError>& errors);

  /// add_resumed(job_name, o, r, fill): a job that began elsewhere runs its next attempt here
  /// (resumed.hpp): added as add_with adds, with a fresh id and r's counters, marked kForward;
  /// it never waits for room nor overflows (full: AddStatus::full, nothing taken). Throws
  /// Error(invalid_option) for options a resumed job cannot have (dedup, group, tenant, after,
  /// delay).
  /// begin_resumed / end_resumed: its steps before and after the fill (job_resuming.cpp).
  template <class Fill>
  AddReceipt add_resumed(std::string_view job_name, const JobOptions& o, const Resumed& r,
                         Fill&& fill);  // add_with.hpp
  AddReceipt begin_resumed(std::string_view job_name, const JobOptions& o, const Resumed& r,
                           std::uint32_t& idx);
  void end_resumed(std::uint32_t idx) noexcept;

  /// FailKind: why an attempt failed, as far as what happens next is concerned.
  enum class FailKind : std::uint8_t {
    retry,        // backoff decides the delay
    retry_in,     // the handler gave the delay
    permanent,    // dead-letter now
    lapse,        // the lease lapsed: redeliver at once (SQS), lease_expired when exhausted
    stalled_out,  // a lapse past the stall budget (BullMQ): an attempt made, lease_expired now
    timeout,      // the attempt ran past its timeout: backoff decides, timeout when exhausted
  };

  // --- workers (job_flow.cpp) -------------------------------------------------------------------
  /// start_dedicated(w, seed): start_processing on the queue's own threads (or inline).
  void start_dedicated(const WorkerOptions& w, std::uint64_t seed);
  /// make_leases(workers, max_pending) / drop_leases(): the lease records of the workers, the
  /// pending (Completions) and the held deliveries (held_max_ per worker), before the start.
  void make_leases(std::size_t workers, std::uint32_t max_pending);
  void drop_leases() noexcept;
  // JobRunner / TimerClient / PauseListener
  bool deliver(std::uint32_t idx, WorkerContext& wc) final;
  /// close_now(d, out, wc): close_delivery's body (job_flow.cpp only: inlined into deliver).
  inline void close_now(OpenDelivery& d, Outcome&& out, WorkerContext& wc);
  /// end_now(wc): the time a delivery closing on wc ends: its batch's (closing_ns), else now.
  [[nodiscard]] std::int64_t end_now(const WorkerContext& wc) const noexcept {
    return wc.closing_ns != INT64_MIN ? wc.closing_ns : parts_.core.now_ns();
  }
  void flush_freed(std::uint32_t w) noexcept final { free_.flush(w); }
  void timer_fired(std::uint32_t idx, std::int64_t now) noexcept final;
  void timer_reclaim(std::uint32_t idx) noexcept final { ends_.reclaim_cancelled(idx); }
  std::int64_t timer_sweep(std::int64_t now, Wheel& wheel) noexcept final;
  void pause_changed() noexcept final { links_.pass_wakes(); }
  /// throttle(...): the gate refused the job deliver just activated (delivery `token`, count
  /// `delivered` before): it waits unstarted in the blocked ring or (the gate's leader) on the
  /// wheel. False if a cancel flagged it meanwhile: deliver ends it cancelled, unrun.
  bool throttle(std::uint32_t idx, std::uint32_t token, std::uint16_t delivered,
                std::int64_t expire, GateLink& gate, const DownstreamGate::Decision& decision,
                std::int64_t now, WorkerContext& wc);
  /// drop_unstarted(idx, token, expire, carried, now, wc): deliver's job, never started, ends
  /// unrun (true) if past `expire` or shed by shed_ (carried: it holds the queue's permit).
  bool drop_unstarted(std::uint32_t idx, std::uint32_t token, std::int64_t expire, bool carried,
                      std::int64_t now, WorkerContext& wc);
  /// note_throttled(s, now, until, cause, why): the job's `throttled` event (observed only).
  void note_throttled(const JobSlot& s, std::int64_t now, std::int64_t until, Throttle cause,
                      std::string why) const noexcept;
  void fail_attempt(std::uint32_t idx, std::string reason, FailKind kind, Duration explicit_delay,
                    SplitMix64& rng, std::int64_t now, WorkerContext* wc);
  /// forward(idx, why, due, now, wc): a resumed job (kForward) that would run again here ends
  /// instead, its next attempt due at `due` on its broker (job_resuming.cpp).
  void forward(std::uint32_t idx, std::string_view why, std::int64_t due, std::int64_t now,
               WorkerContext* wc);
  /// retry_here(s, delay): whether the failed attempt of resumed job s retries here, after
  /// `delay`, rather than being forwarded: its RetryHere takes waits that short and it holds a
  /// place, or one is free (taken now, given back at its end). The finishing holder's call.
  bool retry_here(JobSlot& s, Duration delay) noexcept;
  /// sweep_leases(now): the lease sweep (lapses, stall warnings); when it is next due.
  /// lapse(lease, deadline, now): the sweep found `lease` past its `deadline`; time_out(...):
  /// it was the attempt's timeout (flags: the word lapse won); warn_stalling(lease, deadline,
  /// now): `lease` passed its stall warning (job_deadlines.cpp, all).
  std::int64_t sweep_leases(std::int64_t now);
  void lapse(std::uint64_t lease, std::int64_t deadline, std::int64_t now);
  void warn_stalling(std::uint64_t lease, std::int64_t deadline, std::int64_t now) noexcept;
  void time_out(std::uint32_t idx, Duration elapsed, std::uint64_t flags, std::int64_t now);
  /// log_failure(s, attempt, now, reason): appends to the job's error log; returns its text.
  const std::string& log_failure(JobSlot& s, std::uint32_t attempt, std::int64_t now,
                                 std::string reason);

  // --- adding (job_flow.cpp) --------------------------------------------------------------------
  void admit_unusual(const JobOptions& o);
  void admit_children(const JobOptions& o) const;  // JobOptions::after's own checks
  void name_own(const std::uint32_t* idx, std::size_t n, std::string_view name);
  /// prepare_parent(idx, id, after): job `id` in slot idx waits for `after`: its FlowNode (kept
  /// by the slot) and its waiting_children mark; the add then parks it. Throws as FlowNode::make.
  std::shared_ptr<FlowNode> prepare_parent(std::uint32_t idx, JobId id,
                                           const std::vector<Dependency>& after);
  bool acquire_slots_slow(std::uint32_t* out, std::size_t n);
  bool try_acquire(std::uint32_t* out, std::size_t n) noexcept {
    if (pop_free(out, n)) [[likely]]
      return true;
    // No room: jobs cancelled while waiting may still hold theirs (JobControl::reclaim_waiting).
    return control_.reclaim_waiting() && pop_free(out, n);
  }
  bool pop_free(std::uint32_t* out, std::size_t n) noexcept {
    // All or nothing: with fewer than n free none is handed out, so a bulk add on a nearly full
    // queue neither churns the free list against the workers nor reorders it. One job: a plain
    // pop (the bulk path's size estimate would read the workers' end of the ring on every add).
    if (n == 1) return free_.try_pop(*out);
    return free_.try_pop_bulk(out, n) == n;
  }
  /// warm_slot(idx): starts fetching, for writing, slot idx (every line) and its payload cell's
  /// first line (prefetch.hpp).
  void warm_slot(std::uint32_t idx) const noexcept {
    prefetch_slot(slot(idx));
    prefetch_for_write(cell(idx));
  }

  struct FreeCells {
    std::size_t bytes = 0;
    std::size_t align = 0;
    void operator()(char* p) const noexcept;
  };

  FlowParts parts_;  // first: every part below refers to it
  const std::size_t stride_;
  std::uint16_t index_ = 0;
  std::unique_ptr<char[], FreeCells> payload_;
  FreeSlots free_;
  Dispatcher dispatch_;
  DownstreamLinks links_;
  DedupClaims claims_;
  Lines lines_;  // FIFO groups' and tenants' lines (lines.hpp)
  JobEnds ends_;
  TimerPort timers_;  // after ends_: a schedule's live runs hold waiters that leave its tracker
  Completions completions_;
  std::unique_ptr<LeaseTracker> leases_;
  std::atomic<bool> processing_{false};  // start_processing ran: admit may re-arm the sweep
  ProgressBoard progress_;
  JobQueries queries_;  // after progress_ and ends_, which it reads
  JobControl control_;
  JobExpiry expiry_;  // after control_, which ends the jobs it finds expired
  Leftovers leftovers_;
  std::unique_ptr<Codel> shed_;       // QueueOptions::shed; null: no shedding
  RunHandler run_handler_ = nullptr;  // bind_handler
  void* handler_ctx_ = nullptr;
  std::uint32_t held_max_ = 0;    // hold_deliveries; 0: deliveries run their handler at once
  std::uint32_t held_first_ = 0;  // the first held delivery's lease record (make_leases)

  /// held_record(w, i): the lease record of worker w's held delivery i.
  [[nodiscard]] LeaseRecord& held_record(std::uint32_t w, std::uint32_t i) const noexcept {
    RAIL_INVARIANT(i < held_max_, "a worker holds at most held_max_ deliveries open");
    return leases_->record(held_first_ + std::size_t{w} * held_max_ + i);
  }
};

}  // namespace rail::detail

#include "rail/detail/add_with.hpp"  // add_with's body, which needs JobFlow complete
