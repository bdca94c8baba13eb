// JobFlow's hot path: construction and storage, the add sequence's out-of-line steps,
// delivery and a handler's outcome (finish, fail_attempt); downstream refusals and timer firings
// are job_throttle.cpp's, a delivery's deadlines job_deadlines.cpp's. See
// include/rail/detail/job_flow.hpp for the job's path and the ordering conventions.
#include "rail/detail/job_flow.hpp"

#include <algorithm>
#include <chrono>
#include <utility>

#include "rail/detail/allocation.hpp"
#include "rail/detail/assert.hpp"
#include "rail/detail/blank.hpp"
#include "rail/detail/handler_failure.hpp"
#include "rail/detail/scoped_value.hpp"
#include "rail/error.hpp"

namespace rail::detail {

namespace {
std::size_t round_up(std::size_t n, std::size_t align) noexcept {
  return (n + align - 1) / align * align;
}
}  // namespace

// --- construction --------------------------------------------------------------------------------

void JobFlow::FreeCells::operator()(char* p) const noexcept {
  free_aligned(p, bytes, align);
}

JobFlow::JobFlow(EngineCore& core, std::string name, QueueOptions options, std::size_t payload_size,
                 std::size_t payload_align)
    : parts_(core, std::move(name), std::move(options)),
      stride_(round_up(payload_size, payload_align)),
      payload_(static_cast<char*>(alloc_aligned(stride_ * parts_.capacity, payload_align)),
               FreeCells{stride_ * parts_.capacity, payload_align}),
      free_(parts_.capacity, sizeof(JobSlot) + stride_),
      // Rings, not lanes, for a queue that takes permits first or has fair shares (a tenant's
      // hand-offs would otherwise refill one worker's home lane ahead of other producers' jobs).
      dispatch_(parts_.core, parts_.stats, parts_.capacity,
                !parts_.options.downstream.empty() || parts_.options.tenant_window != 0,
                parts_.options.priorities, parts_.aging_ns(), parts_.slots.get(), payload_.get(),
                stride_, parts_.name, *this),
      links_(parts_, *this, dispatch_),
      claims_(parts_),
      lines_(parts_),
      ends_(parts_, claims_, lines_, dispatch_, *this),
      // The sweep comes at least once per lease or timeout, whichever is shorter.
      timers_(parts_.core, parts_.name, parts_.slots.get(), parts_.capacity,
              std::min(parts_.options.visibility_timeout, parts_.options.timeout),
              warn_fraction(parts_.options.stall_warning)),
      completions_(parts_, *this, links_, timers_),
      progress_(parts_),
      queries_(parts_, ends_.tracker(), progress_, *this),
      control_(parts_, dispatch_, links_, lines_, ends_, timers_, *this),
      expiry_(parts_, control_, timers_),
      leftovers_(parts_, free_, lines_, ends_.tracker(), timers_, *this),
      shed_(parts_.options.shed.target
                ? std::make_unique<Codel>(*parts_.options.shed.target, parts_.options.shed.interval)
                : nullptr) {
  // Every queue: a link made later (JobOptions::downstream) needs to hear of pauses too.
  dispatch_.listen_to_pauses(this);
}

JobFlow::~JobFlow() = default;

void JobFlow::attach() {
  index_ = parts_.core.register_queue(this);
  timers_.tag_nodes(index_);
  links_.attach();
}

// --- the error log and the wheel -----------------------------------------------------------------

const std::string& JobFlow::log_failure(JobSlot& s, std::uint32_t attempt, std::int64_t now,
                                        std::string reason) {
  auto& log = parts_.extra(s).errors;
  // Room for every record on first use, so the log never moves under a stale handler's view
  // of its last error (see SlotExtra; a redrive that kept counters reserved more).
  if (log.capacity() < s.max_attempts) log.reserve(s.max_attempts);
  log.push_back(AttemptRecord{attempt, now, std::move(reason)});
  return log.back().message;
}

// close_now: close_delivery's body, inlined into deliver (one call less per job).
[[gnu::always_inline]] inline void JobFlow::close_now(OpenDelivery& d, Outcome&& out,
                                                      WorkerContext& wc) {
  if (out.kind() == Outcome::Kind::pending) [[unlikely]]
    out = Outcome::retry(
        "the handler returned the Outcome of a Job::defer that did not defer this delivery: "
        "nothing would complete the job");
  if (d.leased) LeaseTracker::release(*d.job.record_);
  // A permit of the queue's own downstream: this worker takes the next job at once (next_job).
  if (d.permit) return_permit(d.gate->gate(), out, end_now(wc), d.own_gate ? d.gate : nullptr);
  finish(d.job.idx_, d.job.token_, std::move(out), wc, d.job.started_at_, d.job.deliveries_);
  // After finish() returned the slot to the free list (final_end): once counts() shows the
  // attempt ended (wait_idle() returns), the slot is free for the next add.
  parts_.count(&wc, kAttemptEnded);
}

bool JobFlow::deliver(std::uint32_t idx, WorkerContext& wc) {
  JobSlot& s = slot(idx);
  const ScopedValue<const QueueBase*> delivering(current_delivery(), this);
  // A delivery nested in a batch's closes (run_until_idle from an end's observer, inline) ends
  // at its own time, not the batch's.
  const ScopedValue<std::int64_t> own_time(wc.closing_ns, INT64_MIN);
  // The permit of the queue's own downstream that the worker took for this job (PermitSource);
  // every way out of here either keeps it for the handler or gives it back.
  bool carried = std::exchange(wc.holds_permit, false);
  // The delivery's number and start time are written before activation, so that state() never
  // sees an active job with its previous count (it reads them against the word: job_slot.hpp).
  // A cancel that wins meanwhile may read the count one high in its event; it is put back.
  // Never before the add: the producer's clock reading may lead ours by the CPUs' counter skew
  // (TscClock: tens of ns), and a job would seem to start before it was added.
  // A held job's successor from the same pop reuses its reading (WorkerContext::fresh_ns).
  const bool reused = wc.fresh_ns != INT64_MIN;
  const std::int64_t read = reused ? std::exchange(wc.fresh_ns, INT64_MIN) : parts_.core.now_ns();
  const std::int64_t now = std::max(read, s.added_ns);
  parts_.stamp_end(wc, now);  // the job this worker completed before, if its end waits for a time
  const std::uint16_t delivered = s.delivered();
  const std::int64_t expire = s.started();  // before the first delivery: JobSlot::expires_at
  // Saturating: a redrive that keeps counters carries them on, past what 16 bits can count.
  s.deliveries.store(static_cast<std::uint16_t>(delivered == 0xFFFF ? delivered : delivered + 1),
                     std::memory_order_relaxed);
  // release: after the count, so the expiry sweep never takes this time for an expiry.
  s.started_ns.store(now, std::memory_order_release);
  const auto a = s.ctl.activate();
  if (a.result != SlotControl<>::Activation::active) {
    s.started_ns.store(expire, std::memory_order_relaxed);
    s.deliveries.store(delivered, std::memory_order_relaxed);
    if (carried) links_.link(0)->give_back();
    if (a.result == SlotControl<>::Activation::cancelled) control_.drop_cancelled(idx);
    return false;  // taken: handed back by take_leftovers after shutdown; drop the index
  }
  // seq_cst: with activate's CAS and shutdown's store, in one order (see SlotControl::activate):
  // a worker that got here after shutdown's report read the job as waiting sees the stop.
  const bool stopping = dispatch_.stopping(std::memory_order_seq_cst);
  // A job that names another downstream, or that will not run, has no use for the permit.
  if (carried && (s.downstream_link() != 0 || stopping)) [[unlikely]] {
    links_.link(0)->give_back();
    carried = false;
  }
  if (stopping) {
    // Undone before the word moves (expires_at's order).
    s.started_ns.store(expire, std::memory_order_relaxed);
    s.deliveries.store(delivered, std::memory_order_relaxed);
    if (s.ctl.deactivate(ctl::seq(a.word)))
      return false;  // back to waiting, for take_leftovers; its index stays with nobody
    // Cancelled meanwhile: it ends unrun with this delivery counted, as below.
    s.deliveries.store(static_cast<std::uint16_t>(delivered == 0xFFFF ? delivered : delivered + 1),
                       std::memory_order_relaxed);
    s.started_ns.store(now, std::memory_order_relaxed);
  }
  const std::uint32_t token = ctl::seq(a.word);
  // Never started yet: past its expiry, or shed by an overloaded queue, it ends unrun.
  if (delivered == 0 && (now >= expire || shed_) && !stopping) [[unlikely]] {
    if (drop_unstarted(idx, token, expire, carried, now, wc)) return true;
  }
  // The downstream's admission, before anything counts this delivery: a refused job waits
  // unstarted (throttle), a job flagged cancelled meanwhile ends without running (as at stop).
  bool permit = false;
  bool skip = stopping;
  GateLink* const gate = links_.link(s.downstream_link());
  const bool own_gate = s.downstream_link() == 0;  // read before the lease: see below
  if (gate && !stopping) [[unlikely]] {
    const bool woken = s.take_mark(JobSlot::kWoken);  // ours: the index's holder
    // A refusal gives a carried permit back (admit).
    const auto d =
        gate->gate().admit(s.id.load(std::memory_order_relaxed), now, gate, woken, carried);
    if (d.verdict == DownstreamGate::Verdict::admitted) {
      permit = true;
    } else if (throttle(idx, token, delivered, expire, *gate, d, now, wc)) {
      return true;
    } else {
      skip = true;
    }
  }
  // Into `active` before out of `waiting`: see counts().
  parts_.count(&wc, kStarted);
  parts_.count(&wc, kFromReady);
  if (parts_.timed()) parts_.record_start(wc, s, now);
  // Start to start: the previous handler's run plus this worker's overhead. Real time even
  // under a manual clock (whose time stands still between advances), on steady_ns()'s timeline
  // whatever the engine clock (see WorkerContext::wall_is_engine_clock).
  const std::int64_t wall = wc.wall_is_engine_clock ? now : reused ? wc.last_wall_ns : steady_ns();
  wc.fast = wall - wc.last_wall_ns < wc.fast_handler_ns;
  wc.last_wall_ns = wall;
  wc.last_start_ns = now;
  OpenDelivery open{.job = blank<JobFields>(),
                    .gate = gate,
                    .permit = permit,
                    .own_gate = own_gate,
                    .leased = false};
  JobFields& job = open.job;
  job.id_ = s.id.load(std::memory_order_relaxed);
  job.name_ = job_name(s);
  job.queue_ = parts_.name;
  job.failed_attempts_ = s.attempts();
  job.deliveries_ = s.delivered();
  job.stalls_ = s.stalled();
  job.max_attempts_ = s.max_attempts;
  job.added_at_ = TimePoint{Duration{s.added_ns}};
  job.started_at_ = TimePoint{Duration{now}};
  if (s.extra && !s.extra->errors.empty()) job.last_error_ = s.extra->errors.back().message;
  if (parts_.traces.any()) [[unlikely]]
    job.trace_ = parts_.traces.of(idx);
  job.ctl_ = &s.ctl;
  job.token_ = token;
  job.flow_ = this;
  job.idx_ = idx;
  job.clock_ = &parts_.core.clock();
  // The worker's index among the queue's: its lease record's, the workers' records coming first
  // (make_leases).
  job.worker_ = static_cast<std::uint32_t>(&wc.record - &leases_->record(0));
  // Everything that reads the slot's plain fields happens before the lease is granted: from
  // the grant on, a lapse may take the slot (and write its attempt count) at any moment.
  if (parts_.core.observed()) parts_.emit(EventKind::started, s, now);
  // A deadline: its lease's end (on a queue with leases), or its attempt's timeout if sooner
  // (lapse tells them apart by the deadline).
  const bool lease = parts_.options.visibility_timeout != Duration::max() &&
                     s.visibility_ns != Duration::max().count();
  const std::int64_t timeout_at = saturating_add(now, Duration{s.timeout_ns});
  const bool leased = parts_.leases_enabled() && (lease || s.timeout_ns != kNever);
  job.timeout_at_ = timeout_at;
  job.renewable_ = lease;
  // A batch queue holds the delivery open in its worker's batch, leased in a record of its own.
  const std::uint32_t held_at = held_max_ != 0 && !skip ? next_held(job.worker_) : kNotHeld;
  const bool held = held_at != kNotHeld;
  Deferral deferral{.taken = false, .permit = permit};
  if (completions_.enabled() && !held) [[unlikely]]
    job.deferral_ = &deferral;
  if (leased) {
    LeaseRecord& record = held ? held_record(job.worker_, held_at) : wc.record;
    job.record_ = &record;
    job.lease_ = make_lease(idx, token);
    if (parts_.core.mode() == Mode::threaded) job.timers_ = &timers_;
    // After the plain fields above: the sweep reads them after acquiring this lease word.
    LeaseTracker::grant(
        record, job.lease_,
        std::min(lease ? saturating_add(now, Duration{s.visibility_ns}) : kNever, timeout_at), now);
  }
  open.leased = leased;
  if (held) {
    // No user code runs before the next job of this pop unless the batch fills (run_batch then
    // drops the reading); an observer might advance a clock between two starts.
    if (wc.stash != nullptr && !wc.stash->empty() && !parts_.core.observed()) wc.fresh_ns = read;
    hold(std::move(open), cell(idx), wc);
    return true;
  }

  Outcome out;  // done: a job flagged cancelled after stop ends cancelled without running
  if (!skip) {
    try {
      out = run_handler(idx, job);
    } catch (...) {
      out = handler_failure(std::current_exception());
    }
  }
  if (deferral.taken) [[unlikely]] {
    // A Completion owns the delivery: its lease, its permit and its outcome. Nothing of the
    // slot is read from here on: the completion may have ended the job already. The handler's
    // own pin (defer took it) goes; if the job ended meanwhile, the last pin frees its slot
    // (else the completion frees it under a handler still reading its payload:
    // CompletionRaces.CompletingInsideTheHandlerKeepsThePayloadUntilTheHandlerReturns pins it).
    if (slot(idx).ctl.unpin()) ends_.final_end(idx);
    return true;
  }
  close_now(open, std::move(out), wc);
  return true;
}

void JobFlow::stamp_end(WorkerContext& wc) noexcept {
  if (wc.unstamped) parts_.stamp_end(wc, parts_.core.now_ns());
}

void JobFlow::close_delivery(OpenDelivery& d, Outcome&& out, WorkerContext& wc) {
  close_now(d, std::move(out), wc);
}

bool JobFlow::finish(std::uint32_t idx, std::uint32_t token, Outcome&& out, WorkerContext& wc,
                     TimePoint started, std::uint32_t delivery, std::uint32_t pending_record) {
  JobSlot& s = slot(idx);
  // Read while our pin still holds the slot: once a stale handler unpins, the slot may be freed
  // and reused under it (a name the job keeps itself is copied for that reason: the rare case).
  // The name is only for a late outcome's event: read it only if someone observes.
  const JobId id = s.id.load(std::memory_order_relaxed);
  const bool observed = parts_.core.observed();
  std::string own_name;
  std::string_view name;
  if (observed) [[unlikely]] {
    name = job_name(s);
    if (s.name_id() == NameTable::kOwnName) name = own_name = name;
  }
  const auto f = s.ctl.finish(token);
  // The delivery's pin is gone (either way): a deferred delivery's record goes back with it.
  // Not later: a retry made ready below may be delivered, and deferred again, before we return,
  // and with max_pending 1 its defer needs this record (else the defer throws `capacity` and
  // the job is dead-lettered:
  // CompletionThreads.ARetriedJobsNextDeferFindsTheRecordItsCompletionGaveBack pins it). Not
  // earlier: a lapsed delivery's completer holds its pin until here, and a record taken by the
  // next delivery meanwhile would leave a pin that no record bounds (the pin count at
  // kMaxPending's static_assert).
  if (pending_record != kNoPendingRecord) completions_.give_back(pending_record);
  if (f.result != SlotControl<>::Finish::live) {
    // Stale: the lease lapsed and the job moved on; our pin is dropped. If the job has ended
    // and we were the last handler on it, its deferred end is ours to complete.
    parts_.count(&wc, kLateOutcomes);
    if (observed) {
      Event e;
      e.kind = EventKind::late_outcome;
      e.at = TimePoint{Duration{parts_.core.now_ns()}};
      e.queue = parts_.name;
      e.job_id = id;
      e.job_name = name;
      e.elapsed = e.at - started;
      e.deliveries = delivery;
      e.attempt = delivery;
      e.error = out.reason();
      parts_.core.emit(e);
    }
    if (f.result == SlotControl<>::Finish::stale_last) ends_.final_end(idx);
    return false;
  }
  const std::uint64_t c = f.word;
  // We hold the slot in `finishing`. A plain completion needs the time only for an event or a
  // record: skip the clock read (~50 ns on a VM) when nobody observes or waits. Only complete()
  // may go without it: it reads the clock itself if a waiter came meanwhile, where end() would
  // stamp a late waiter's record or event with 0
  // (ResultsThreaded.AWaiterThatCameDuringADedupJobsEndGetsItsEndTime pins it).
  const bool cancelled = (ctl::flags(c) & ctl::kCancelRequested) != 0;
  const bool plain_done = out.kind() == Outcome::Kind::done && !cancelled &&
                          !parts_.core.observed() && !ends_.tracker().wanted();
  // With histograms, a plain completion on a worker of the queue's own takes its end's time from
  // the worker's next reading (its next start, or its going idle: stamp_end), so that a job
  // costs one reading, not two: its run time then includes the worker's own work after the
  // handler returned (a few hundred ns). A second one before that reads the clock for both. Only
  // on the TSC clock: a manual clock a test advances after wait_idle() would time the advance.
  const bool timed = parts_.timed();
  // A batch's closes share the reading taken when its handler returned (closing_ns).
  const bool batched = wc.closing_ns != INT64_MIN;
  const bool unstamped = plain_done && timed && wc.latency != nullptr && !wc.unstamped &&
                         wc.wall_is_engine_clock && !batched;
  const bool reads = !plain_done || (timed && !unstamped);  // else no time is needed now
  const std::int64_t now = batched ? wc.closing_ns : reads ? parts_.core.now_ns() : 0;
  if (timed && !unstamped) {
    parts_.stamp_end(wc, now);
    parts_.record(&wc, Latency::run, now - started.time_since_epoch().count());
  }
  if (cancelled) {
    ends_.end(idx, EndKind::cancelled, DeadLetterReason::none, now, &wc);
    return false;  // the outcome did not count: cancel() decided the end
  }
  if (out.kind() == Outcome::Kind::done) {
    if (plain_done) [[likely]] {
      if (unstamped) {  // read while we hold the slot (complete() may free it)
        wc.unstamped = true;
        wc.unstamped_start = started.time_since_epoch().count();
        wc.unstamped_add = s.added_ns;
      }
      ends_.complete(idx, wc, std::move(out.result_),
                     unstamped ? std::nullopt : std::optional<std::int64_t>(now));
    } else {
      ends_.end(idx, EndKind::completed, DeadLetterReason::none, now, &wc, {},
                std::move(out.result_));
    }
    return true;
  }
  if (out.kind() == Outcome::Kind::discard) {
    ends_.end(idx, EndKind::discarded, DeadLetterReason::none, now, &wc, out.reason());
    return true;
  }
  if (out.kind() == Outcome::Kind::pushback) {
    // The downstream said "too many" (HTTP 429): deliver paused it for the pushback's pause before
    // the permit went back, and this job waits as long, with no attempt used (BullMQ's rate limit
    // from a worker, asynq's RetryAfter).
    const std::int64_t due = saturating_add(now, out.delay());
    if (parts_.core.observed())
      note_throttled(s, now, due, Throttle::pushed_back,
                     (links_.link(s.downstream_link())
                          ? "downstream '" + links_.link(s.downstream_link())->gate().name() +
                                "' pushed back: "
                          : std::string("pushed back: ")) +
                         out.reason());
    s.due_ns.store(due, std::memory_order_relaxed);  // published by the inbox push
    s.mark(JobSlot::kHeld, true);                    // waiting for its downstream, not delayed
    // Into `waiting` before the job can be cancelled there (and before out of `active`): see
    // counts().
    parts_.stats.add(kToReady);
    s.ctl.leave_finishing(SlotState::delayed);
    timers_.submit(idx);
    return true;
  }
  const FailKind kind = out.kind() == Outcome::Kind::fail       ? FailKind::permanent
                        : out.kind() == Outcome::Kind::retry_in ? FailKind::retry_in
                                                                : FailKind::retry;
  fail_attempt(idx, out.take_reason(), kind, out.delay(), wc.rng, now, &wc);
  return true;
}

void JobFlow::fail_attempt(std::uint32_t idx, std::string reason, FailKind kind,
                           Duration explicit_delay, SplitMix64& rng, std::int64_t now,
                           WorkerContext* wc) {
  JobSlot& s = slot(idx);
  // Saturating: a redrive that keeps counters may start a job at the 16-bit limit.
  const auto attempts =
      static_cast<std::uint16_t>(std::min<std::uint32_t>(s.attempts() + 1u, 0xFFFF));
  s.failed_attempts.store(attempts, std::memory_order_relaxed);
  parts_.count(wc, kFailedAttempts);
  const std::string& error = log_failure(s, attempts, now, std::move(reason));

  DeadLetterReason dead = DeadLetterReason::none;
  Duration delay{0};
  if (kind == FailKind::permanent) {
    dead = DeadLetterReason::permanent_failure;
  } else if (kind == FailKind::stalled_out) {
    dead = DeadLetterReason::lease_expired;
  } else if (attempts >= s.max_attempts) {
    dead = kind == FailKind::lapse     ? DeadLetterReason::lease_expired
           : kind == FailKind::timeout ? DeadLetterReason::timeout
                                       : DeadLetterReason::attempts_exhausted;
  } else if (kind == FailKind::retry_in) {
    delay = explicit_delay;
  } else if (kind == FailKind::retry || kind == FailKind::timeout) {
    // The wait the previous failure led to (the record before this one's; none after a
    // redrive that kept counters: the jitter starts again from the base).
    const auto& log = s.extra->errors;
    const Duration previous{log.size() >= 2 ? log[log.size() - 2].next_delay_ns : 0};
    RetryContext ctx{s.id.load(std::memory_order_relaxed), attempts, error, previous};
    delay = next_delay(s.backoff(), ctx, &parts_.options.custom_backoff, rng);
    if (delay.count() < 0) dead = DeadLetterReason::backoff_stopped;
  }
  bool cancel = false;
  if (parts_.core.observed()) {
    Event e = parts_.event(EventKind::attempt_failed, s, now);
    e.attempt = attempts;  // the attempt that just failed
    e.error = error;
    e.delay = dead == DeadLetterReason::none ? delay : Duration{-1};
    Holding holding(s, dead != DeadLetterReason::none);
    parts_.core.emit(e);
    cancel = holding.cancel_requested();
  }
  if (cancel) {  // an observer of this failure cancelled the job: no retry
    ends_.end(idx, EndKind::cancelled, DeadLetterReason::none, now, wc);
    return;
  }
  if (dead != DeadLetterReason::none) {
    ends_.end(idx, EndKind::dead_lettered, dead, now, wc);
    return;
  }
  s.extra->errors.back().next_delay_ns = delay.count();
  parts_.count(wc, kRetried);
  // A lapse goes back to the broker even under count_as_attempt (its handler may still run).
  if (s.marked(JobSlot::kForward) && (kind == FailKind::lapse || !retry_here(s, delay)))
      [[unlikely]] {
    forward(idx, error, saturating_add(now, delay), now, wc);
    return;
  }
  if (parts_.timed()) s.mark(JobSlot::kRetry, true);  // its next start records its lateness
  if (delay.count() > 0) {
    s.due_ns.store(saturating_add(now, delay), std::memory_order_relaxed);
    // Its tenant's turn goes to another of its jobs meanwhile (it takes one again when due);
    // its group's it keeps, so the group's order holds across the retry.
    if (s.marked(JobSlot::kTenant)) [[unlikely]] {
      const std::uint32_t next = lines_.step_aside(idx);
      if (next != FifoGroups::kNone) dispatch_.requeue(next);
    }
    // Into `delayed` before the job can be cancelled there: see counts().
    parts_.stats.add(kToDelayed);
    s.ctl.leave_finishing(SlotState::delayed);
    timers_.submit(idx);
  } else {
    s.due_ns.store(now, std::memory_order_relaxed);  // due again now: its wait starts
    s.ctl.leave_finishing(SlotState::waiting);
    dispatch_.push_ready(idx);
  }
}

void JobFlow::emit_dlq(EventKind kind, JobId id, std::string_view job_name, std::size_t depth,
                       Duration elapsed) {
  if (!parts_.core.observed()) return;
  Event e;
  e.kind = kind;
  e.at = TimePoint{Duration{parts_.core.now_ns()}};
  e.queue = parts_.name;
  e.job_id = id;
  e.job_name = job_name;
  e.depth = depth;
  e.elapsed = elapsed;
  parts_.core.emit(e);
}

void JobFlow::close_waiters() noexcept {
  std::string why;
  try {
    why = "the engine of queue '" + parts_.name + "' was destroyed before it ended";
  } catch (...) {  // no memory for the words: close all the same
  }
  ends_.tracker().close(why);
}

bool report_progress(JobFlow& flow, std::uint32_t idx, std::uint32_t token, double value) noexcept {
  return flow.progress(idx, token, value);
}

}  // namespace rail::detail
