// JobFlow: see include/rail/detail/job_flow.hpp (the job's path and the ordering conventions).
#include "rail/detail/job_flow.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <thread>
#include <utility>

#include "rail/detail/allocation.hpp"
#include "rail/detail/assert.hpp"
#include "rail/detail/asymmetric_fence.hpp"
#include "rail/detail/handler_failure.hpp"
#include "rail/detail/scoped_value.hpp"
#include "rail/detail/worker_pool.hpp"
#include "rail/error.hpp"

namespace rail::detail {

namespace {

/// Holding: a slot this thread holds in `finishing` while it raises the job's events
/// (fail_attempt, record_end). An observer on this thread that cancels that job must not wait for
/// the holder, itself: cancel() records the request in the frame (honoured before the retry), or
/// answers false once the job is ending. Frames nest (an observer's cancel of another job raises
/// that job's events in turn), so they form a per-thread stack that try_cancel walks.
struct Holding {
  // The frame is unlinked by the destructor before it goes out of scope; GCC's dangling-pointer
  // analysis does not see that.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdangling-pointer"
#endif
  Holding(const JobSlot& s, bool ending_) noexcept : slot(&s), ending(ending_), outer(top()) {
    top() = this;
  }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
  ~Holding() {
    top() = outer;
  }
  Holding(const Holding&) = delete;
  Holding& operator=(const Holding&) = delete;
  static Holding*& top() noexcept {
    thread_local Holding* frame = nullptr;
    return frame;
  }
  /// of(s): this thread's frame holding s, or null.
  static Holding* of(const JobSlot& s) noexcept {
    for (Holding* h = top(); h; h = h->outer)
      if (h->slot == &s) return h;
    return nullptr;
  }
  const JobSlot* slot;
  bool ending;
  bool cancel = false;
  Holding* outer;
};

std::size_t round_up(std::size_t n, std::size_t align) noexcept {
  return (n + align - 1) / align * align;
}

}  // namespace

// --- construction
// ---------------------------------------------------------------------------------

void JobFlow::FreeCells::operator()(char* p) const noexcept {
  free_aligned(p, bytes, align);
}

JobFlow::JobFlow(EngineCore& core, std::string name, QueueOptions options, std::size_t payload_size,
                 std::size_t payload_align)
    : core_(core),
      name_(std::move(name)),
      options_(std::move(options)),
      stats_(options_.capacity),
      capacity_(options_.capacity),
      stride_(round_up(payload_size, payload_align)),
      slots_(std::make_unique<JobSlot[]>(capacity_)),
      payload_(static_cast<char*>(alloc_aligned(stride_ * capacity_, payload_align)),
               FreeCells{stride_ * capacity_, payload_align}),
      free_(capacity_, sizeof(JobSlot) + stride_),
      dispatch_(core_, stats_, capacity_, slots_.get(), payload_.get(), stride_, name_, *this),
      timers_(core_, slots_.get(), capacity_, options_.visibility_timeout) {
  ends_.configure(options_.results, false);
  if (!options_.downstream.empty()) {
    link_owner_.push_back(
        std::make_unique<GateLink>(*this, core_.downstream(options_.downstream, name_), capacity_));
    links_[0].store(link_owner_.back().get(), std::memory_order_relaxed);  // before attach()
  }
  // Every queue: a link made later (JobOptions::downstream) needs to hear of pauses too.
  dispatch_.listen_to_pauses(this);
}

void JobFlow::declare_result(std::type_index type, std::string (*format)(const void*)) {
  result_type_ = type;
  format_result_ = format;
  ends_.configure(options_.results, type != typeid(void));
}

JobFlow::~JobFlow() {
  for (std::size_t i = 0; i < capacity_; ++i) {
    if (SlotExtra* x = slots_[i].extra) {
      x->~SlotExtra();
      free_aligned(x, sizeof(SlotExtra), alignof(SlotExtra));
    }
  }
}

void JobFlow::attach() {
  index_ = core_.register_queue(this);
  timers_.tag_nodes(index_);
  if (GateLink* own = link(0)) own->gate().attach(own);
}

// --- downstreams
// --------------------------------------------------------------------------------

std::uint8_t JobFlow::link_of(const std::string& downstream) const noexcept {
  // acquire: pairs with link_to's release store of the count.
  const std::size_t n = link_count_.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < n; ++i) {
    const GateLink* l = links_[i].load(std::memory_order_relaxed);  // published with the count
    if (l != nullptr && l->gate().name() == downstream) return static_cast<std::uint8_t>(i);
  }
  return 0;  // unreachable after link_to: the queue's own (admit made every named link)
}

void JobFlow::link_to(const std::string& downstream) {
  if (downstream == options_.downstream) return;  // link 0
  // Every add naming a downstream comes here: the links made already are found without the
  // lock (link_of reads the published ones), so only a link's first add takes it.
  if (link_of(downstream) != 0) return;
  const std::lock_guard lock(links_mu_);
  const std::size_t n = link_count_.load(std::memory_order_relaxed);  // written under the lock
  for (std::size_t i = 1; i < n; ++i)
    if (links_[i].load(std::memory_order_relaxed)->gate().name() == downstream) return;
  DownstreamGate* gate = core_.find_downstream(downstream);
  if (gate == nullptr)
    throw Error(ErrorCode::unknown_downstream,
                "JobOptions.downstream names '" + downstream + "' on queue '" + name_ +
                    "', which was never declared; expected a name given to Engine::downstream()");
  if (n == GateLink::kMaxLinks)
    throw Error(ErrorCode::capacity, "queue '" + name_ + "' already calls " +
                                         std::to_string(GateLink::kMaxLinks - 1) +
                                         " downstreams named per job; JobOptions.downstream '" +
                                         downstream + "' would be one more");
  auto made = std::make_unique<GateLink>(*this, *gate, capacity_);
  link_owner_.reserve(link_owner_.size() + 1);  // no throw after the gate knows the link
  gate->attach(made.get());
  links_[n].store(made.get(), std::memory_order_relaxed);
  link_owner_.push_back(std::move(made));
  // release: a reader that sees the count sees the link stored before it.
  link_count_.store(n + 1, std::memory_order_release);
}

bool GateLink::wake_blocked(std::atomic<std::int64_t>& blocked, bool even_paused) noexcept {
  return flow_.wake_from(*this, blocked, even_paused);
}

void GateLink::promote_leader(JobId id) noexcept {
  flow_.promote_leader(id);
}

// --- adding
// ---------------------------------------------------------------------------------------

void JobFlow::throw_shutting_down() const {
  throw Error(ErrorCode::shutting_down,
              "queue '" + name_ + "' does not accept jobs: the engine is shutting down");
}

void JobFlow::admit_unusual(const JobOptions& o) {
  if (!o.downstream.empty()) link_to(o.downstream);
  if (o.backoff.kind == BackoffKind::custom && !options_.custom_backoff)
    throw Error(ErrorCode::invalid_option,
                "JobOptions.backoff is custom but queue '" + name_ +
                    "' has no QueueOptions.custom_backoff; expected one to compute delays");
  // A shorter lease than the queue's must pull the lease sweep earlier (lease_tracker.hpp).
  // seq_cst, with start_processing's store then request, in one total order: if this load misses
  // processing_, the sweep start_processing requests comes after it and reads the lower bound.
  if (o.visibility_timeout && timers_.lower_visibility(o.visibility_timeout->count()) &&
      processing_.load(std::memory_order_seq_cst) && leases_enabled() &&
      core_.mode() == Mode::threaded)
    timers_.request_sweep();
}

bool JobFlow::acquire_slots_slow(std::uint32_t* out, std::size_t n) {
  if (options_.on_full != OverflowPolicy::block || core_.mode() == Mode::inlined) return false;
  // Cold path: the queue is full. Poll with a growing real-time sleep up to block_timeout;
  // workers freeing slots do not pay for waking blocked producers.
  const auto deadline = steady_deadline(options_.block_timeout);  // max: wait for room
  return poll_until(
      deadline,
      [&] {
        if (try_acquire(out, n)) return true;
        if (!core_.accepting()) throw_shutting_down();
        return false;
      },
      std::chrono::microseconds(1), std::chrono::microseconds(1000));
}

void JobFlow::name_own(const std::uint32_t* idx, std::size_t n, std::string_view name) {
  try {
    for (std::size_t i = 0; i < n; ++i) {
      auto& own = extra(slots_[idx[i]]).own_name;
      if (!own) own = std::make_unique<std::string>();
      own->assign(name);
    }
  } catch (...) {
    for (std::size_t i = 0; i < n; ++i)
      give_back(idx[i]);
    throw;
  }
}

const std::string& JobFlow::log_failure(JobSlot& s, std::uint32_t attempt, std::int64_t now,
                                        std::string reason) {
  auto& log = extra(s).errors;
  // Room for every record on first use, so the log never moves under a stale handler's view
  // of its last error (see SlotExtra; a redrive that kept counters reserved more).
  if (log.capacity() < s.max_attempts) log.reserve(s.max_attempts);
  log.push_back(AttemptRecord{attempt, now, std::move(reason)});
  return log.back().message;
}

SlotExtra& JobFlow::extra(JobSlot& s) {
  if (!s.extra) s.extra = ::new (alloc_aligned(sizeof(SlotExtra), alignof(SlotExtra))) SlotExtra();
  return *s.extra;
}

void JobFlow::validate_schedule(std::string_view id, std::string_view job_name,
                                const ScheduleOptions& o) {
  admit(job_name, o.job);
  const std::string where = "schedule '" + std::string(id) + "' on queue '" + name_ + "': ";
  if (id.empty() || id.find_first_not_of(" \t\n\r\f\v") == std::string_view::npos)
    throw Error(ErrorCode::invalid_option,
                "schedule on queue '" + name_ + "': the id is blank; expected a name to upsert by");
  if (o.job.delay.count() != 0)
    throw Error(ErrorCode::invalid_option,
                where +
                    "ScheduleOptions.job.delay is set; expected 0 (the schedule decides when "
                    "each run starts)");
  if (!o.job.dedup.id.empty())
    throw Error(ErrorCode::invalid_option,
                where + "ScheduleOptions.job.dedup.id is '" + o.job.dedup.id +
                    "'; expected none (each run is a job of its own; overlap decides whether runs "
                    "may share time)");
  if (o.max_catch_up == 0)
    throw Error(ErrorCode::invalid_option,
                where + "ScheduleOptions.max_catch_up is 0; expected 1 or more");
}

ScheduleTable& JobFlow::schedules() {
  if (ScheduleTable* t = schedules_.load(std::memory_order_acquire)) return *t;
  std::lock_guard lock(schedules_init_mu_);  // cold: once per queue
  if (!schedules_owner_) {
    schedules_owner_ = std::make_unique<ScheduleTable>(core_, index_, name_);
    // release: the wheel's owner (drain_timer_inbox, fire) acquires a fully built table.
    schedules_.store(schedules_owner_.get(), std::memory_order_release);
  }
  return *schedules_owner_;
}

DedupSet& JobFlow::dedup() {
  // acquire: pairs with the release below, so a reader sees a fully built set.
  if (DedupSet* d = dedup_.load(std::memory_order_acquire)) [[likely]]
    return *d;
  std::lock_guard lock(dedup_init_mu_);  // cold: once per queue
  if (!dedup_owner_) {
    // Default: room for the queue's jobs and at least 4096 ids, because ids with a ttl outlive
    // their jobs (a small queue's window would otherwise fill at once).
    auto window = std::make_unique<DedupSet>(
        options_.dedup_capacity ? options_.dedup_capacity : std::max<std::size_t>(capacity_, 4096));
    keep_gates_ = std::make_unique<std::atomic<std::uint64_t>[]>(capacity_);
    dedup_owner_ = std::move(window);
    dedup_.store(dedup_owner_.get(), std::memory_order_release);
  }
  return *dedup_owner_;
}

DedupSet::Claim JobFlow::claim_id(std::uint32_t idx, const JobOptions& o, std::int64_t now,
                                  JobId successor_of) {
  const std::int64_t expires =
      o.dedup.ttl ? saturating_add(now, *o.dedup.ttl) : DedupSet::kNoExpiry;
  return dedup().try_claim(
      o.dedup.id, now, expires,
      [&]() noexcept {
        return std::pair<std::uint64_t, std::uint32_t>{core_.next_ids(1), idx};
      },
      successor_of);
}

std::optional<DedupSet::Claim> JobFlow::live_claim(const JobOptions& o, std::int64_t now) {
  auto live = dedup().find(o.dedup.id, now);
  if (!live) return std::nullopt;
  return DedupSet::Claim{DedupSet::Claim::Result::duplicate, live->first, live->second};
}

void JobFlow::claim_dedup(std::uint32_t idx, const JobOptions& o) {
  JobSlot& s = slots_[idx];
  extra(s).dedup_key = o.dedup.id;
  s.has_dedup = true;
  s.dedup_has_ttl = o.dedup.ttl.has_value();
  // relaxed: the holder's store, published with the job (publish's release).
  keep_gate(idx).store(gate_open(s.id.load(std::memory_order_relaxed)), std::memory_order_relaxed);
}

void JobFlow::reclaim_dedup(std::uint32_t idx, JobId id, const std::string& key, std::int64_t now) {
  JobSlot& s = slots_[idx];
  SlotExtra& x = extra(s);
  DedupSet& window = dedup();
  x.dedup_key.reserve(key.size());  // the last allocation: nothing below throws
  bool ttl;
  if (auto live = window.find(key, now)) {
    if (live->first != id) return;  // another job's now: duplicates merge into that one
    // Kept after the first run (a ttl): it expires on its own; it points at this slot now, so a
    // debounce of the redriven job finds it.
    if (!window.set_value(key, id, idx)) return;  // expired and reclaimed in between
    ttl = true;
  } else {
    const auto claim = window.try_claim(key, now, DedupSet::kNoExpiry, [&]() noexcept {
      return std::pair<std::uint64_t, std::uint32_t>{id, idx};
    });
    if (claim.result != DedupSet::Claim::Result::inserted) return;
    ttl = false;
  }
  x.dedup_key.assign(key);
  s.has_dedup = true;
  s.dedup_has_ttl = ttl;
  keep_gate(idx).store(gate_open(id), std::memory_order_relaxed);  // as claim_dedup
}

void JobFlow::restore_counters(std::uint32_t idx, std::uint32_t attempts, std::uint32_t deliveries,
                               std::uint32_t stalls, const std::vector<AttemptError>& errors) {
  JobSlot& s = slots_[idx];
  // Room for every record the job can still add (its failures and the stall that may end it),
  // so the log never moves under a stale handler's view of its last error (see SlotExtra).
  std::vector<AttemptRecord> log;
  log.reserve(errors.size() + s.max_attempts + 1u);
  for (const auto& e : errors)
    log.push_back(AttemptRecord{e.attempt, e.at.time_since_epoch().count(), e.message});
  extra(s).errors = std::move(log);
  const auto clamp = [](std::uint32_t n) {
    return static_cast<std::uint16_t>(std::min<std::uint32_t>(n, 0xFFFF));
  };
  s.attempts_made.store(clamp(attempts), std::memory_order_relaxed);
  s.deliveries.store(clamp(deliveries), std::memory_order_relaxed);
  s.stalls.store(clamp(stalls), std::memory_order_relaxed);
}

void JobFlow::to_timer(std::uint32_t idx) noexcept {
  stats_.add(kToDelayed);
  timers_.submit(idx);
}

void JobFlow::publish_ready(const std::uint32_t* idx, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    slots_[idx[i]].ctl.publish(SlotState::waiting);
  dispatch_.push_ready_bulk(idx, n);
}

void JobFlow::note_added(const JobSlot& s, Duration delay) const noexcept {
  Event e = make_event(EventKind::added, s, s.added_ns);
  e.attempt = 0;
  e.delay = delay;
  core_.emit(e);
}

void JobFlow::note_redriven(const JobSlot& s, std::int64_t now) const noexcept {
  emit(EventKind::redriven, s, now);
}

void JobFlow::note_overflow(JobId id, std::string_view job_name, std::uint32_t max_attempts,
                            TimePoint now) noexcept {
  stats_.add(kAdded);
  stats_.add(kDeadLettered);
  stats_.remember(id, JobStatus::dead_lettered);
  if (!core_.observed()) return;
  Event ev;
  ev.kind = EventKind::dead_lettered;
  ev.at = now;
  ev.queue = name_;
  ev.job_id = id;
  ev.job_name = job_name;
  ev.max_attempts = max_attempts;
  ev.reason = DeadLetterReason::overflow;
  ev.error = "queue full";
  core_.emit(ev);
}

std::optional<AddResult> JobFlow::dedup_refusal(const DedupSet::Claim& claim,
                                                const JobOptions& o) const {
  using R = DedupSet::Claim::Result;
  if (claim.result == R::full) return AddResult{0, AddStatus::dedup_full};
  if (claim.result == R::key_too_long)
    throw Error(ErrorCode::invalid_option, "JobOptions.dedup.id is " +
                                               std::to_string(o.dedup.id.size()) +
                                               " bytes; expected at most 256");
  return std::nullopt;
}

AddResult JobFlow::note_duplicate(JobId owner, std::string_view job_name, const JobOptions& o,
                                  std::int64_t now, bool debounced, AddStatus status) {
  stats_.add(kDeduplicated);
  if (core_.observed()) {
    Event e;
    e.kind = debounced ? EventKind::debounced : EventKind::deduplicated;
    e.at = TimePoint{Duration{now}};
    e.queue = name_;
    e.job_id = owner;
    e.job_name = job_name;
    e.dedup_id = o.dedup.id;
    e.delay = o.delay;
    core_.emit(e);
  }
  return {owner, debounced ? AddStatus::debounced : status};
}

// --- workers
// --------------------------------------------------------------------------------------

void JobFlow::start_processing(const WorkerOptions& w) {
  const std::uint64_t seed = core_.seed() ^ (std::uint64_t{index_} << 32);
  if (w.pool == Pool::shared && core_.mode() == Mode::threaded) {
    WorkerPool& pool = core_.shared_pool();  // may throw Error(resources): nothing done yet
    make_leases(pool.size(), w.max_pending);
    try {
      dispatch_.join_pool(*this, pool.size(), pool.wake(), *leases_, seed, w.concurrency);
    } catch (...) {
      drop_leases();  // join_pool undid its part: the queue is as before
      throw;
    }
    pool.add(dispatch_);
  } else {
    start_dedicated(w, seed);
  }
  // seq_cst, before the request below: see admit_unusual. (Also the release that publishes
  // leases_ to sweep_inline and run_ready.)
  processing_.store(true, std::memory_order_seq_cst);
  // Threaded: the sweep is a self-re-arming wheel timer. Inline: time moves only through
  // ManualClock::advance, whose process_timers() calls sweep_inline() directly, so no timer is
  // left on the wheel for next_timer_in() to chase forever.
  if (leases_enabled() && core_.mode() == Mode::threaded) timers_.request_sweep();
}

void JobFlow::start_dedicated(const WorkerOptions& w, std::uint64_t seed) {
  const std::uint32_t workers = core_.mode() == Mode::threaded ? w.concurrency : 1;
  make_leases(workers, w.max_pending);
  try {
    dispatch_.start(*this, workers, *leases_, seed, name_);
  } catch (...) {
    // start() joined the threads it had started before any ran a job: undo the rest, so that
    // the queue is as before.
    drop_leases();
    throw;
  }
}

void JobFlow::make_leases(std::size_t workers, std::uint32_t max_pending) {
  // The workers' records first, then one per pending delivery: one sweep scans both.
  auto leases = std::make_unique<LeaseTracker>(workers + max_pending);
  if (max_pending > 0)
    pending_ =
        std::make_unique<PendingJobs>(*this, max_pending, static_cast<std::uint32_t>(workers));
  leases_ = std::move(leases);
}

void JobFlow::drop_leases() noexcept {
  pending_.reset();
  leases_.reset();
}

std::size_t JobFlow::run_ready(std::size_t max) {
  if (!processing()) return 0;
  return dispatch_.run_inline(*this, *leases_, core_.seed() ^ index_, max);
}

bool JobFlow::deliver(std::uint32_t idx, WorkerContext& wc) {
  JobSlot& s = slots_[idx];
  const ScopedValue<const QueueBase*> delivering(current_delivery(), this);
  // The delivery's number and start time are written before activation, so that state() never
  // sees an active job with its previous count (it reads them against the word: job_slot.hpp).
  // A cancel that wins meanwhile may read the count one high in its event; it is put back.
  // Never before the add: the producer's clock reading may lead ours by the CPUs' counter skew
  // (TscClock: tens of ns), and a job would seem to start before it was added.
  const std::int64_t now = std::max(core_.now_ns(), s.added_ns);
  const std::uint16_t delivered = s.delivered();
  s.started_ns.store(now, std::memory_order_relaxed);
  // Saturating: a redrive that keeps counters carries them on, past what 16 bits can count.
  s.deliveries.store(static_cast<std::uint16_t>(delivered == 0xFFFF ? delivered : delivered + 1),
                     std::memory_order_relaxed);
  const auto a = s.ctl.activate();
  if (a.result != SlotControl<>::Activation::active) {
    s.deliveries.store(delivered, std::memory_order_relaxed);
    if (a.result == SlotControl<>::Activation::cancelled) drop_cancelled(idx);
    return false;  // taken: handed back by take_leftovers after shutdown; drop the index
  }
  // seq_cst: with activate's CAS and shutdown's store, in one order (see SlotControl::activate):
  // a worker that got here after shutdown's report read the job as waiting sees the stop.
  const bool stopping = dispatch_.stopping(std::memory_order_seq_cst);
  if (stopping && s.ctl.deactivate(ctl::seq(a.word))) {
    s.deliveries.store(delivered, std::memory_order_relaxed);
    return false;  // back to waiting, for take_leftovers; its index stays with nobody
  }
  const std::uint32_t token = ctl::seq(a.word);
  // The downstream's admission, before anything counts this delivery: a refused job waits
  // unstarted (throttle), a job flagged cancelled meanwhile ends without running (as at stop).
  bool permit = false;
  bool skip = stopping;
  GateLink* const gate = link(s.link);
  if (gate && !stopping) [[unlikely]] {
    const auto d = gate->gate().admit(s.id.load(std::memory_order_relaxed), now, gate);
    if (d.verdict == DownstreamGate::Verdict::admitted) {
      permit = true;
    } else if (throttle(idx, token, delivered, *gate, d, now, wc)) {
      return true;
    } else {
      skip = true;
    }
  }
  // Into `active` before out of `waiting`: see counts().
  count(&wc, kStarted);
  count(&wc, kFromReady);
  // Start to start: the previous handler's run plus this worker's overhead. Real time even
  // under a manual clock (whose time stands still between advances), on steady_ns()'s timeline
  // whatever the engine clock (see WorkerContext::wall_is_engine_clock).
  const std::int64_t wall = wc.wall_is_engine_clock ? now : steady_ns();
  wc.fast = wall - wc.last_wall_ns < wc.fast_handler_ns;
  wc.last_wall_ns = wall;
  wc.last_start_ns = now;
  JobFields job;
  job.id_ = s.id.load(std::memory_order_relaxed);
  job.name_ = job_name(s);
  job.queue_ = name_;
  job.attempts_made_ = s.attempts();
  job.deliveries_ = s.delivered();
  job.stalls_ = s.stalled();
  job.max_attempts_ = s.max_attempts;
  job.added_at_ = TimePoint{Duration{s.added_ns}};
  job.started_at_ = TimePoint{Duration{now}};
  if (s.extra && !s.extra->errors.empty()) job.last_error_ = s.extra->errors.back().message;
  job.ctl_ = &s.ctl;
  job.token_ = token;
  job.flow_ = this;
  job.idx_ = idx;
  job.clock_ = &core_.clock();
  // Everything that reads the slot's plain fields happens before the lease is granted: from
  // the grant on, a lapse may take the slot (and write its attempt count) at any moment.
  if (core_.observed()) emit(EventKind::started, s, now);
  const bool leased = leases_enabled() && s.visibility_ns != Duration::max().count();
  Deferral deferral{.taken = false, .permit = permit};
  if (pending_) [[unlikely]]
    job.deferral_ = &deferral;
  if (leased) {
    job.record_ = &wc.record;
    job.lease_ = make_lease(idx, token);
    if (core_.mode() == Mode::threaded) job.timers_ = &timers_;
    // After the plain fields above: the sweep reads them after acquiring this lease word.
    LeaseTracker::grant(wc.record, job.lease_, saturating_add(now, Duration{s.visibility_ns}));
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
    // (review: the completion freed the slot under a handler still reading its payload).
    if (slots_[idx].ctl.unpin()) final_end(idx);
    return true;
  }
  if (out.kind() == Outcome::Kind::pending) [[unlikely]]
    out = Outcome::retry(
        "the handler returned Outcome::pending() without calling Job::defer(): nothing would "
        "complete the job");
  if (leased) LeaseTracker::release(wc.record);
  if (permit) return_permit(gate->gate(), out, core_.now_ns());
  finish(idx, token, std::move(out), wc, job.started_at_, job.deliveries_);
  // After finish() returned the slot to the free list (final_end): once counts() shows the
  // attempt ended (drain() returns), the slot is free for the next add.
  count(&wc, kAttemptEnded);
  return true;
}

void JobFlow::return_permit(DownstreamGate& gate, const Outcome& out, std::int64_t now) noexcept {
  // The permit counts calls inside the downstream: given back as the call is over, before its
  // outcome is applied (which may wait for nothing, but a retry's backoff is not a call).
  // A 429 pauses the downstream before the permit goes back: the release may wake a job, and
  // another worker must not admit it into the pause. Before finish(): the downstream refused
  // the call even if the lease lapsed meanwhile (finish() then ignores the outcome).
  if (out.kind() == Outcome::Kind::pushback) [[unlikely]]
    gate.limits().pause_for(now, out.delay());
  gate.release(now);
}

bool JobFlow::finish(std::uint32_t idx, std::uint32_t token, Outcome&& out, WorkerContext& wc,
                     TimePoint started, std::uint32_t delivery, std::uint32_t pending_record) {
  JobSlot& s = slots_[idx];
  // Read while our pin still holds the slot: once a stale handler unpins, the slot may be freed
  // and reused under it (a name the job keeps itself is copied for that reason: the rare case).
  // The name is only for a late outcome's event: read it only if someone observes.
  const JobId id = s.id.load(std::memory_order_relaxed);
  const bool observed = core_.observed();
  std::string own_name;
  std::string_view name;
  if (observed) [[unlikely]] {
    name = job_name(s);
    if (s.name == NameTable::kOwnName) name = own_name = name;
  }
  const auto f = s.ctl.finish(token);
  // The delivery's pin is gone (either way): a deferred delivery's record goes back with it.
  // Not later: a retry made ready below may be delivered, and deferred again, before we return,
  // and with max_pending 1 its defer needs this record (CI hung on that: the defer threw
  // `capacity`, the job was dead-lettered). Not earlier: a lapsed delivery's completer holds
  // its pin until here, and a record taken by the next delivery meanwhile would leave a pin
  // that no record bounds (the pin count at kMaxPending's static_assert).
  if (pending_record != kNoPendingRecord) pending_->give_back(pending_record);
  if (f.result != SlotControl<>::Finish::live) {
    // Stale: the lease lapsed and the job moved on; our pin is dropped. If the job has ended
    // and we were the last handler on it, its deferred end is ours to complete.
    count(&wc, kLateOutcomes);
    if (observed) {
      Event e;
      e.kind = EventKind::late_outcome;
      e.at = TimePoint{Duration{core_.now_ns()}};
      e.queue = name_;
      e.job_id = id;
      e.job_name = name;
      e.elapsed = e.at - started;
      e.deliveries = delivery;
      e.attempt = delivery;
      e.error = out.reason();
      core_.emit(e);
    }
    if (f.result == SlotControl<>::Finish::stale_last) final_end(idx);
    return false;
  }
  const std::uint64_t c = f.word;
  // We hold the slot in `finishing`. A plain completion needs the time only for an event or a
  // record: skip the clock read (~50 ns on a VM) when nobody observes or waits. Only complete()
  // may go without it: it reads the clock itself if a waiter came meanwhile, where end_job
  // (a job with a dedup id) would stamp a late waiter's record or event with 0 (review).
  const bool cancelled = (ctl::flags(c) & ctl::kCancelRequested) != 0;
  const bool plain_done = out.kind() == Outcome::Kind::done && !cancelled && !core_.observed() &&
                          !ends_.wanted() && !s.has_dedup;
  const std::int64_t now = plain_done ? 0 : core_.now_ns();
  if (cancelled) {
    end_job(idx, EndKind::cancelled, DeadLetterReason::none, now, &wc);
    return false;  // the outcome did not count: cancel() decided the end
  }
  if (out.kind() == Outcome::Kind::done) {
    if (plain_done) [[likely]] {
      complete(idx, wc, std::move(out.result_));
    } else {
      end_job(idx, EndKind::completed, DeadLetterReason::none, now, &wc, {},
              std::move(out.result_));
    }
    return true;
  }
  if (out.kind() == Outcome::Kind::discard) {
    end_job(idx, EndKind::discarded, DeadLetterReason::none, now, &wc, out.reason());
    return true;
  }
  if (out.kind() == Outcome::Kind::pushback) {
    // The downstream said "too many" (HTTP 429): deliver paused it for retry_after before the
    // permit went back, and this job waits as long, with no attempt used (BullMQ's rate limit
    // from a worker, asynq's RetryAfter).
    const std::int64_t due = saturating_add(now, out.delay());
    if (core_.observed())
      note_throttled(
          s, now, due, Throttle::pushed_back,
          (link(s.link) ? "downstream '" + link(s.link)->gate().name() + "' pushed back: "
                        : std::string("pushed back: ")) +
              out.reason());
    s.due_ns.store(due, std::memory_order_relaxed);  // published by the inbox push
    s.ctl.leave_finishing(SlotState::delayed);
    to_timer(idx);
    return true;
  }
  const FailKind kind = out.kind() == Outcome::Kind::fail          ? FailKind::permanent
                        : out.kind() == Outcome::Kind::retry_after ? FailKind::retry_after
                                                                   : FailKind::retry;
  fail_attempt(idx, out.take_reason(), kind, out.delay(), wc.rng, now, &wc);
  return true;
}

// --- pending jobs
// ------------------------------------------------------------------------------

Completion defer_job(JobFlow& flow, JobFields& job) {
  return flow.defer(job);
}

// A stale Completion keeps its delivery's pin: a job's pins add up to the queue's workers, its
// pending records and a canceller, within the slot's 16-bit count (slot_table.hpp).
static_assert(std::uint64_t{WorkerOptions::kMaxConcurrency} + WorkerOptions::kMaxPending + 1 <=
              0xFFFF);

Completion JobFlow::defer(JobFields& job) {
  if (job.deferral_ == nullptr)
    throw Error(ErrorCode::invalid_option,
                "Job::defer() on queue '" + name_ +
                    "', whose WorkerOptions.max_pending is 0; expected process() with "
                    "max_pending >= 1 (the jobs that may await their Completion at once)");
  if (job.deferral_->taken)
    throw Error(ErrorCode::invalid_option, "Job::defer() called twice for delivery " +
                                               std::to_string(job.deliveries_) + " of job " +
                                               std::to_string(job.id_) + " on queue '" + name_ +
                                               "'; expected one Completion per delivery");
  std::uint32_t r = 0;
  if (!pending_->take(r))
    throw Error(ErrorCode::capacity,
                "queue '" + name_ + "' has WorkerOptions.max_pending (" +
                    std::to_string(pending_->size()) +
                    ") jobs awaiting their Completion already; expected fewer in flight (bound "
                    "them with a downstream's concurrency) or a larger max_pending");
  PendingJob& p = pending_->job(r);
  p.idx = job.idx_;
  p.token = job.token_;
  p.delivery = job.deliveries_;
  p.permit = job.deferral_->permit;
  p.link = slots_[job.idx_].link;  // the slot is this handler's (pinned, active)
  p.started_ns = job.started_at_.time_since_epoch().count();
  p.lease = 0;
  if (job.record_ != nullptr) {
    LeaseRecord& worker = *job.record_;
    LeaseRecord& record = leases_->record(pending_->lease_record(r));
    // The lease moves with its deadline unchanged: granted here before the worker's record
    // lets go, so every sweep finds it in one record or both (a lease lapsed from both is
    // lapsed once: the second lapse CAS finds the delivery gone). relaxed: the worker's record
    // is this thread's own; the sweep's CAS is ordered by the word itself.
    LeaseTracker::grant(record, job.lease_, worker.deadline_ns.load(std::memory_order_relaxed));
    std::uint64_t held = job.lease_;
    // acq_rel, like the sweep's CAS on the same word: exactly one of the two clears it.
    if (!worker.lease.compare_exchange_strong(held, 0, std::memory_order_acq_rel,
                                              std::memory_order_relaxed))
      LeaseTracker::release(record);  // the sweep lapsed it meanwhile: nothing left to watch
    else
      p.lease = job.lease_;
    // The record is the Completion's: once it completes, the record serves another delivery,
    // so the handler's view must not renew it (Job::extend_lease says false after defer()).
    job.record_ = nullptr;
  }
  // The Completion takes the delivery's pin; the handler, which may read the payload until it
  // returns (and its Completion may end the job before that), keeps one of its own, dropped by
  // deliver. Last: nothing above throws once the pin is taken.
  slots_[job.idx_].ctl.pin();
  job.deferral_->taken = true;
  return Completion(pending_->hub(), r, job.id_);
}

bool JobFlow::complete_pending(std::uint32_t r, Outcome&& out, std::type_index result_type) {
  const PendingJob p = pending_->job(r);
  if (p.lease != 0) {  // a lapse after this loses to finish()
    LeaseTracker::release(leases_->record(pending_->lease_record(r)));
  }
  if (out.kind() == Outcome::Kind::pending) {
    out = Outcome::retry(
        "Completion::complete(Outcome::pending()): a completion delivers the outcome itself");
  } else if (result_type != typeid(void) && result_type != result_type_) {
    out = Outcome::fail(
        "Completion::complete(Result<R>) with R = " + std::string(result_type.name()) +
        " on queue '" + name_ + "', whose result type is " +
        (result_type_ == typeid(void) ? std::string("none (complete with an Outcome)")
                                      : std::string(result_type_.name())));
  } else if (result_type == typeid(void) && result_type_ != typeid(void) && out.ok()) {
    out = Outcome::fail("Completion::complete(Outcome::done()) on queue '" + name_ +
                        "', which has a result type; expected complete(rail::Result<R>(result))");
  }
  if (p.permit) return_permit(link(p.link)->gate(), out, core_.now_ns());
  // The completer's own context: no worker counters (the shared stripes count), its own
  // randomness for the retry's jitter, and a lease record that nothing uses (finish() grants
  // no lease): the delivery's pending record, lease record included, goes back inside finish(),
  // and only `p`, our copy of it, is read here. (A sweep that cleared the lease word first
  // lapses by the lease value it read, never by the record.)
  LeaseRecord unused;
  WorkerContext wc(unused, SplitMix64(core_.seed() ^ (std::uint64_t{p.token} << 32 | p.idx)),
                   nullptr, nullptr);
  const bool counted =
      finish(p.idx, p.token, std::move(out), wc, TimePoint{Duration{p.started_ns}}, p.delivery, r);
  count(nullptr, kAttemptEnded);  // after finish(), as deliver counts it: see there
  return counted;
}

bool JobFlow::pending_cancelled(std::uint32_t r) const noexcept {
  const PendingJob& p = pending_->job(r);
  return slots_[p.idx].ctl.fenced(p.token);
}

bool JobFlow::extend_pending(std::uint32_t r, Duration d) noexcept {
  const PendingJob& p = pending_->job(r);
  if (p.lease == 0) return !pending_cancelled(r);  // leases disabled, or lapsed at the hand-off
  LeaseRecord& record = leases_->record(pending_->lease_record(r));
  const std::int64_t deadline = saturating_add(core_.now_ns(), d);
  // relaxed: only the Completion's holder renews this record (see Job::extend_lease).
  const std::int64_t before = record.deadline_ns.load(std::memory_order_relaxed);
  if (!LeaseTracker::renew(record, p.lease, deadline)) return false;
  if (deadline < before && core_.mode() == Mode::threaded) sweep_no_later_than(timers_, deadline);
  return !pending_cancelled(r);
}

void JobFlow::fail_attempt(std::uint32_t idx, std::string reason, FailKind kind,
                           Duration explicit_delay, SplitMix64& rng, std::int64_t now,
                           WorkerContext* wc) {
  JobSlot& s = slots_[idx];
  // Saturating: a redrive that keeps counters may start a job at the 16-bit limit.
  const auto attempts =
      static_cast<std::uint16_t>(std::min<std::uint32_t>(s.attempts() + 1u, 0xFFFF));
  s.attempts_made.store(attempts, std::memory_order_relaxed);
  count(wc, kFailedAttempts);
  const std::string& error = log_failure(s, attempts, now, std::move(reason));

  DeadLetterReason dead = DeadLetterReason::none;
  Duration delay{0};
  if (kind == FailKind::permanent) {
    dead = DeadLetterReason::permanent_failure;
  } else if (attempts >= s.max_attempts) {
    dead = kind == FailKind::lapse ? DeadLetterReason::lease_expired
                                   : DeadLetterReason::attempts_exhausted;
  } else if (kind == FailKind::retry_after) {
    delay = explicit_delay;
  } else if (kind == FailKind::retry) {
    RetryContext ctx{s.id.load(std::memory_order_relaxed), attempts, error,
                     Duration{s.prev_delay_ns}};
    delay = next_delay(s.backoff(), ctx, &options_.custom_backoff, rng);
    if (delay.count() < 0) dead = DeadLetterReason::backoff_stopped;
  }
  bool cancel = false;
  if (core_.observed()) {
    Event e = make_event(EventKind::attempt_failed, s, now);
    e.attempt = attempts;  // the attempt that just failed
    e.error = error;
    e.delay = dead == DeadLetterReason::none ? delay : Duration{-1};
    Holding holding(s, dead != DeadLetterReason::none);
    core_.emit(e);
    cancel = holding.cancel;
  }
  if (cancel) {  // an observer of this failure cancelled the job: no retry
    end_job(idx, EndKind::cancelled, DeadLetterReason::none, now, wc);
    return;
  }
  if (dead != DeadLetterReason::none) {
    end_job(idx, EndKind::dead_lettered, dead, now, wc);
    return;
  }
  s.prev_delay_ns = delay.count();
  if (delay.count() > 0) {
    s.due_ns.store(saturating_add(now, delay), std::memory_order_relaxed);
    s.ctl.leave_finishing(SlotState::delayed);
    to_timer(idx);
  } else {
    s.ctl.leave_finishing(SlotState::waiting);
    dispatch_.push_ready(idx);
  }
}

// --- leases and timers
// ----------------------------------------------------------------------------

void JobFlow::sweep_inline(std::int64_t now) {
  // processing() (acquire), not leases_: another thread may be in start_processing() building
  // the tracker; its release store of processing_ publishes the finished one.
  if (core_.mode() != Mode::inlined || !leases_enabled() || !processing()) return;
  leases_->sweep(now, [&](std::uint64_t lease, std::int64_t) { lapse(lease, now); });
}

std::int64_t JobFlow::timer_sweep(std::int64_t now) noexcept {
  if (!leases_) return kNever;
  return leases_->sweep(now, [&](std::uint64_t lease, std::int64_t) { lapse(lease, now); });
}

bool JobFlow::throttle(std::uint32_t idx, std::uint32_t token, std::uint16_t delivered,
                       GateLink& gate, const DownstreamGate::Decision& decision, std::int64_t now,
                       WorkerContext& wc) {
  JobSlot& s = slots_[idx];
  s.deliveries.store(delivered, std::memory_order_relaxed);  // no delivery happened
  if (core_.observed()) {
    std::string why = "downstream '" + gate.gate().name() + "': ";
    Throttle cause = Throttle::none;
    switch (decision.why) {
      case Admission::Kind::no_permit:
        why += "every permit is in use";
        cause = Throttle::no_permit;
        break;
      case Admission::Kind::rate_limited:
        why += "no token before its rate refills";
        cause = Throttle::rate_limited;
        break;
      case Admission::Kind::paused:
        why += "paused by a pushback";
        cause = Throttle::paused;
        break;
      case Admission::Kind::admitted:
        break;
    }
    note_throttled(s, now,
                   decision.verdict == DownstreamGate::Verdict::lead ? decision.until_ns : -1,
                   cause, std::move(why));
  }
  if (decision.verdict == DownstreamGate::Verdict::block) {
    // Back to waiting (pins - 1) with its index in the blocked ring: still counted waiting.
    if (!s.ctl.deactivate(token)) {
      // Cancelled meanwhile: deliver goes on with this delivery (ending it unrun), so it keeps
      // its number (soak: a `started` event numbered 0 when this was missing).
      s.deliveries.store(
          static_cast<std::uint16_t>(delivered == 0xFFFF ? delivered : delivered + 1),
          std::memory_order_relaxed);
      return false;
    }
    gate.blocked().push_held(idx);
    gate.gate().blocked(decision.why);
    return true;
  }
  // The leader: to the wheel until its token (or the pause's end), as a retry's backoff goes.
  const auto f = s.ctl.finish(token);
  RAIL_INVARIANT(f.result == SlotControl<>::Finish::live,
                 "throttle: no lease was granted, so nothing but this worker ends the delivery");
  if (ctl::flags(f.word) & ctl::kCancelRequested) {
    // Cancelled since it was activated: it ends here, as a job cancelled at stop does.
    gate.gate().forget_leader(s.id.load(std::memory_order_relaxed));
    count(&wc, kStarted);
    count(&wc, kFromReady);
    end_job(idx, EndKind::cancelled, DeadLetterReason::none, now, &wc);
    count(&wc, kAttemptEnded);
    return true;
  }
  s.due_ns.store(decision.until_ns, std::memory_order_relaxed);  // published by the inbox push
  s.ctl.leave_finishing(SlotState::delayed);
  to_timer(idx);           // into `delayed` ...
  count(&wc, kFromReady);  // ... before out of `waiting`: see counts()
  return true;
}

void JobFlow::note_throttled(const JobSlot& s, std::int64_t now, std::int64_t until, Throttle cause,
                             std::string why) const noexcept {
  Event e = make_event(EventKind::throttled, s, now);
  e.throttle = cause;
  e.delay = until < 0 || is_never(until) ? Duration{-1} : Duration{until - now};
  e.error = std::move(why);
  core_.emit(e);
}

bool JobFlow::wake_from(GateLink& link, std::atomic<std::int64_t>& blocked,
                        bool even_paused) noexcept {
  std::uint32_t idx;
  if ((!even_paused && dispatch_.paused()) || !link.blocked().try_pop(idx)) return false;
  blocked.fetch_sub(1, std::memory_order_relaxed);  // relaxed: a figure (see the gate's fences)
  dispatch_.requeue(idx);
  return true;
}

void JobFlow::promote_leader(JobId id) noexcept {
  try {
    (void)retime(id, core_.now_ns());
  } catch (...) {  // retime allocates nothing; a failure leaves the leader due when it was
  }
}

void JobFlow::timer_fired(std::uint32_t idx, std::int64_t now) noexcept {
  // Read before the push: from then on a worker may take the slot (and end its job).
  const JobId id = slots_[idx].id.load(std::memory_order_relaxed);
  GateLink* const gate = link(slots_[idx].link);
  if (core_.observed()) emit(EventKind::retry_due, slots_[idx], now);
  dispatch_.push_ready(idx);  // into `waiting` (counted there) ...
  stats_.add(kFromDelayed);   // ... before out of `delayed`: see counts()
  // The gate's leader is ready again: it steps down now, not when a worker delivers it, so that
  // a paused queue or busy workers cannot hold up another queue's jobs waiting at the gate. After
  // its push: the job this wakes is behind it in the ready ring, so that the leader, first in
  // line, takes the token it waited for (review: the woken job took it, and the leader, refused,
  // led again, each time, for as long as others waited).
  if (gate) gate->gate().forget_leader(id);
}

void JobFlow::timer_reclaim(std::uint32_t idx) noexcept {
  reclaim_cancelled(idx);
}

void JobFlow::lapse(std::uint64_t lease, std::int64_t now) {
  const std::uint32_t idx = lease_slot(lease);
  JobSlot& s = slots_[idx];
  const auto l = s.ctl.lapse(lease_token(lease));
  if (!l.won) return;  // the handler's outcome won
  const Duration elapsed{now - s.started()};
  stats_.add(kStalled);  // `active` keeps counting the stale handler until it returns
  if (core_.observed()) {
    Event e = make_event(EventKind::stalled, s, now);
    e.elapsed = elapsed;
    core_.emit(e);
  }
  if (ctl::flags(l.word) & ctl::kCancelRequested) {
    // cancel() already answered "flagged": the job ends cancelled, not redelivered.
    end_job(idx, EndKind::cancelled, DeadLetterReason::none, now, nullptr);
    return;
  }
  std::string reason = "lease expired after " + std::to_string(elapsed.count() / 1'000'000) +
                       " ms (visibility timeout " + std::to_string(s.visibility_ns / 1'000'000) +
                       " ms)";
  const std::uint32_t stalls = s.stalled() + 1u;  // compared unsaturated: max_stalls may be 0xFFFF
  s.stalls.store(static_cast<std::uint16_t>(std::min<std::uint32_t>(stalls, 0xFFFF)),
                 std::memory_order_relaxed);
  if (options_.stall_policy == StallPolicy::count_as_attempt) {
    SplitMix64 unused(0);  // a lapse redelivers at once (SQS): no backoff, no randomness
    fail_attempt(idx, std::move(reason), FailKind::lapse, Duration{0}, unused, now, nullptr);
    return;
  }
  // BullMQ: a stall costs no attempt; the one past the budget fails the job. Its error is
  // logged under the attempt it interrupted (attempts_made stays), so the DLQ entry says why;
  // the log has room for it (see SlotExtra; after a redrive that kept counters,
  // restore_counters reserved room for every record the job can still add).
  if (stalls > static_cast<std::uint32_t>(options_.max_stalls)) {
    reason += "; stalled " + std::to_string(stalls) + " times (max_stalls " +
              std::to_string(options_.max_stalls) + ")";
    (void)log_failure(s, s.attempts() + 1u, now, std::move(reason));
    end_job(idx, EndKind::dead_lettered, DeadLetterReason::lease_expired, now, nullptr);
    return;
  }
  s.ctl.leave_finishing(SlotState::waiting);
  dispatch_.push_ready(idx);
}

// --- ends
// -----------------------------------------------------------------------------------------

void JobFlow::end_job(std::uint32_t idx, EndKind kind, DeadLetterReason reason, std::int64_t now,
                      WorkerContext* wc, std::string_view why, std::shared_ptr<const void> result) {
  JobSlot& s = slots_[idx];
  s.end_reason = reason;
  if (kind == EndKind::dead_lettered) {
    end_dead_lettered(idx, now, wc);
    return;
  }
  leave(idx, kind, record_end(s, kind, now, wc, why, std::move(result)));
}

void JobFlow::leave(std::uint32_t idx, EndKind kind, Settled&& settled) {
  JobSlot& s = slots_[idx];
  s.end_kind = kind;
  const JobId id = s.id.load(std::memory_order_relaxed);
  if (s.ctl.end()) final_end(idx);  // else the last stale handler to return frees it
  ended(id, std::move(settled));
}

void JobFlow::complete(std::uint32_t idx, WorkerContext& wc, std::shared_ptr<const void>&& result) {
  JobSlot& s = slots_[idx];
  s.end_reason = DeadLetterReason::none;
  if (note_end(s, EndKind::completed, &wc)) [[unlikely]] {
    // A waiter came since finish() looked: it gets the record end_job would have made.
    Settled settled;
    settled.end = end_record(s, EndKind::completed, core_.now_ns(), {}, std::move(result));
    leave(idx, EndKind::completed, std::move(settled));
    return;
  }
  // leave() without its Settled: nothing was kept for after this job and nobody wants a record.
  // The result goes now, as end_job's does: before the slot ends and the attempt counts as
  // ended (drain() may return then), not with deliver()'s Outcome afterwards (review: a result
  // holding a file outlived drain()).
  result.reset();
  s.end_kind = EndKind::completed;
  if (s.ctl.end()) final_end(idx);
}

void JobFlow::end_dead_lettered(std::uint32_t idx, std::int64_t now, WorkerContext* wc) {
  // The DLQ entry exists before the dead_lettered event is raised, so an observer of the event
  // finds it with dlq().get(id): the event is built here, while the slot is ours, and raised by
  // the DLQ once the entry is in (before the evictions and the alert it causes). Its strings
  // are copied: the error log and a job's own name live in the slot, which may be reused by
  // then. Not raised in a Holding frame: by then the job has left its slot, so a cancel of it
  // from an observer finds nothing and answers false.
  JobSlot& s = slots_[idx];
  Settled settled = settle_end(s, EndKind::dead_lettered, wc, now);
  const JobId id = s.id.load(std::memory_order_relaxed);
  std::optional<Event> ev;
  std::string error, own_name;
  if (core_.observed()) {
    ev = make_event(EventKind::dead_lettered, s, now);
    ev->reason = s.end_reason;
    ev->attempt = s.attempts();
    if (s.extra && !s.extra->errors.empty()) ev->error = error = s.extra->errors.back().message;
    if (s.name == NameTable::kOwnName) [[unlikely]]
      ev->job_name = own_name = job_name(s);
  }
  const Event* pending = ev ? &*ev : nullptr;
  // A stale handler still reads the payload (its lease lapsed on the last allowed delivery):
  // the entry cannot take the payload until that handler returns, which may be never. File it
  // now from a copy (both only read it: Job::data() is const), so that it can be inspected and
  // redriven at once. Pins only go down while we hold the slot in `finishing` (nothing activates
  // it), so a copy made for a pin that drops before end() below is merely unneeded.
  // The copy is made while the slot is ours; file_copy leaves the slot before it files the
  // entry and raises the event, so that observers find the job ended (review: an observer's
  // cancel() spun on a slot this thread still held in `finishing`).
  s.end_kind = EndKind::dead_lettered;
  if (ctl::pins(s.ctl.load()) > 0 && file_copy(idx, pending)) {
    ended(id, std::move(settled));
    return;
  }
  if (s.ctl.end()) {
    final_end(idx, pending);  // files the entry (unless filed above) and raises the event
  } else if (pending) {
    core_.emit(*pending);  // a move-only payload: the last handler to return files the entry
  }
  ended(id, std::move(settled));
}

JobFlow::Settled JobFlow::settle_end(JobSlot& s, EndKind kind, WorkerContext* wc, std::int64_t now,
                                     std::string_view why, std::shared_ptr<const void> result) {
  const JobId id = s.id.load(std::memory_order_relaxed);
  // The id follows the job: released when it ends, except that a ttl keeps merging adds of a
  // job that ran (completed or dead-lettered) until it expires; a cancelled job never ran, so
  // its id is free again at once (BullMQ removes a cancelled job's deduplication key). An add
  // kept for after the job takes the id over instead (run_deferred): closing the gate tells.
  Settled settled;
  if (s.has_dedup) {
    const auto idx = static_cast<std::uint32_t>(&s - slots_.get());
    // acq_rel: one total order with an adder's CAS (keep_while_active).
    settled.kept = keep_gate(idx).exchange(0, std::memory_order_acq_rel) == gate_kept(id);
    if (!settled.kept && (!s.dedup_has_ttl || kind == EndKind::cancelled))  // discarded: it ran
      (void)dedup_.load(std::memory_order_acquire)->release(s.extra->dedup_key, id);
  }
  if (note_end(s, kind, wc)) [[unlikely]]
    settled.end = end_record(s, kind, now, why, std::move(result));
  return settled;
}

bool JobFlow::note_end(const JobSlot& s, EndKind kind, WorkerContext* wc) noexcept {
  const JobId id = s.id.load(std::memory_order_relaxed);
  switch (kind) {
    case EndKind::completed:
      count(wc, kCompleted);
      stats_.remember(id, JobStatus::completed);
      break;
    case EndKind::dead_lettered:
      count(wc, kDeadLettered);
      stats_.remember(id, JobStatus::dead_lettered);
      break;
    case EndKind::cancelled:
      count(wc, kCancelled);
      stats_.remember(id, JobStatus::cancelled);
      break;
    case EndKind::discarded:
      count(wc, kDiscarded);
      stats_.remember(id, JobStatus::discarded);
      break;
    case EndKind::none:
    case EndKind::filed:
      RAIL_INVARIANT(false, "a job ends as completed, dead-lettered or cancelled");
  }
  // After the history entry: a waiter by id registered too late for this check finds the job
  // ended there (see EndTracker::wanted; the waiter's side pays for the fence).
  light_fence();
  return ends_.wanted();
}

EndRecord JobFlow::end_record(const JobSlot& s, EndKind kind, std::int64_t now,
                              std::string_view why, std::shared_ptr<const void> result) const {
  EndRecord end;
  end.id = s.id.load(std::memory_order_relaxed);
  end.ended_at = TimePoint{Duration{now}};
  end.attempts = s.attempts();
  switch (kind) {
    case EndKind::completed:
      end.status = JobStatus::completed;
      end.result = std::move(result);
      end.attempts += 1;  // the one that succeeded
      break;
    case EndKind::dead_lettered:
      end.status = JobStatus::dead_lettered;
      end.reason = s.end_reason;
      end.errors = attempt_errors(s);
      if (!end.errors.empty()) end.error = end.errors.back().message;
      break;
    case EndKind::cancelled:
      end.status = JobStatus::cancelled;
      break;
    case EndKind::discarded:
      end.status = JobStatus::discarded;
      end.error = why;
      end.attempts += 1;  // the one that discarded it
      break;
    case EndKind::none:
    case EndKind::filed:
      break;
  }
  return end;
}

JobFlow::Settled JobFlow::record_end(JobSlot& s, EndKind kind, std::int64_t now, WorkerContext* wc,
                                     std::string_view why, std::shared_ptr<const void> result) {
  // Observers below may cancel this job: it is ending. (A frame only when someone observes.)
  std::optional<Holding> holding;
  if (core_.observed()) holding.emplace(s, true);
  // The event shows the result; the record (if any) shares it.
  const std::shared_ptr<const void> shown = core_.observed() ? result : nullptr;
  Settled settled = settle_end(s, kind, wc, now, why, std::move(result));
  if (!core_.observed()) return settled;
  Event e = make_event(kind == EndKind::completed   ? EventKind::completed
                       : kind == EndKind::discarded ? EventKind::discarded
                                                    : EventKind::cancelled,
                       s, now);
  e.error = why;
  std::string text;
  if (shown && format_result_) e.result = text = format_result_(shown.get());
  core_.emit(e);
  return settled;
}

void JobFlow::reclaim_cancelled(std::uint32_t idx) {
  // cancel() recorded the end already; with stale handlers or the canceller still pinning the
  // slot, the last of them frees it.
  slots_[idx].end_kind = EndKind::cancelled;
  if (slots_[idx].ctl.end()) final_end(idx);
}

std::vector<AttemptError> JobFlow::attempt_errors(const JobSlot& s) const {
  std::vector<AttemptError> out;
  if (!s.extra) return out;
  out.reserve(s.extra->errors.size());
  for (const auto& r : s.extra->errors)
    out.push_back(AttemptError{r.attempt, TimePoint{Duration{r.at_ns}}, r.message});
  return out;
}

// --- cancel, state, drain
// -------------------------------------------------------------------------

bool JobFlow::cancel(JobId id) {
  // An ended job's old slot may still carry its id (a redriven job lives in a new slot), so a
  // slot that no longer holds the job does not end the scan.
  for (std::uint32_t i = 0; i < capacity_; ++i) {
    if (slots_[i].id.load(std::memory_order_relaxed) != id) continue;
    if (auto done = try_cancel(i, id)) {
      if (*done) dispatch_.note_if_drained(false);  // the queue's last job may have gone
      return *done;
    }
  }
  return false;
}

std::optional<bool> JobFlow::try_cancel(std::uint32_t idx, JobId id) {
  JobSlot& s = slots_[idx];
  std::uint64_t c = s.ctl.load();
  for (;;) {
    // The id is re-checked after every read of the word: a CAS against that word fails if the
    // slot was reused in between, so acting on a matching id is safe.
    if (s.id.load(std::memory_order_relaxed) != id) return std::nullopt;
    const auto r = s.ctl.cancel(c);
    switch (r.result) {
      case SlotControl<>::Cancel::flagged:
        return true;
      case SlotControl<>::Cancel::not_found:
        return std::nullopt;
      case SlotControl<>::Cancel::busy:
        if (ctl::state(r.word) == SlotState::finishing) {
          if (Holding* h = Holding::of(s)) {
            if (h->ending) return false;  // an observer of the job's end
            h->cancel = true;             // an observer of its failed attempt
            return true;
          }
        }
        if (ctl::state(r.word) == SlotState::finishing || ctl::state(r.word) == SlotState::updating)
          std::this_thread::yield();  // a transition of a few stores is in progress
        c = r.word;
        continue;
      case SlotControl<>::Cancel::taken:
        end_cancelled(idx, ctl::state(r.word));
        return true;
    }
  }
}

void JobFlow::end_cancelled(std::uint32_t idx, SlotState from) {
  // cancel() took a waiting or delayed job and holds a pin on its slot: record its end, then
  // give the slot back. A delayed job's timer is unlinked here, so its capacity returns at once
  // instead of at its deadline; a waiting job's slot returns when a worker pops its index, when
  // an add that finds no room sweeps the ready ring (reclaim_cancelled_waiting) or, in a blocked
  // ring (which only wakes pop), when the sweep below does.
  JobSlot& s = slots_[idx];
  Settled settled = record_end(s, EndKind::cancelled, core_.now_ns(), nullptr);
  // Out of its gauge once the end is recorded and observed (as a worker's ends are): a drain()
  // that sees the queue idle then also finds the `cancelled` event delivered.
  stats_.add(from == SlotState::waiting ? kFromReady : kFromDelayed);
  const JobId id = s.id.load(std::memory_order_relaxed);
  // A leader of its downstream's waiting jobs leaves the wheel: another job must lead.
  if (GateLink* gate = link(s.link); gate && from == SlotState::delayed)
    gate->gate().forget_leader(id);
  bool held = false;
  if (from == SlotState::delayed) {
    // As the wheel's owner: link what is in transit, then take the node off the wheel; its
    // index is then ours. Re-entered from a timer callback while this thread owns the wheel, a
    // linked node is reclaimed when it fires, but a parked one never fires, so take it here.
    held = core_
               .with_wheel([&](Wheel& wheel) {
                 timers_.drain(wheel, *this);
                 return timers_.unlink(s, wheel);
               })
               .value_or(core_.owns_wheel() && TimerPort::take_parked(s));
  }
  if (s.ctl.unpin()) {
    final_end(idx);  // the index's holder came by while we recorded the end
  } else if (held) {
    reclaim_cancelled(idx);
  }
  if (from == SlotState::waiting) {
    sweep_blocked();
    // Its index may be in the ready ring: the next add that finds no room sweeps it. release:
    // see reclaim_cancelled_waiting. Before ended(), whose kept add (review: it was filed to the
    // DLQ as an overflow) must find the slot this cancel frees, and before cancel() returns.
    waiting_cancels_.fetch_add(1, std::memory_order_release);
  }
  ended(id, std::move(settled));  // an add kept while the job ran before a lapse requeued it
}

void JobFlow::drop_cancelled(std::uint32_t idx) {
  GateLink* const gate = link(slots_[idx].link);  // read while the index is still ours
  reclaim_cancelled(idx);
  // Woken from the blocked ring, it took a wake it cannot use: hand it on (review: a cancelled
  // job behind a cancelled leader stranded the rest).
  if (gate) [[unlikely]]
    gate->gate().pass_wake();
}

bool JobFlow::reclaim_cancelled_waiting() noexcept {
  // Not from inside a sweep of any queue: a cancelled payload's destructor that adds to a full
  // queue would wait for a lock this thread holds (its own queue's, or one whose sweep is up
  // this thread's stack).
  thread_local bool sweeping = false;
  if (sweeping) return false;
  // acquire: pairs with end_cancelled's release increment, so a sweep after it sees the cancel
  // (an add ordered after a cancel, on the same thread or synchronised with it, sees it).
  const std::uint64_t cancels = waiting_cancels_.load(std::memory_order_acquire);
  if (cancels == 0) return false;  // no waiting job was ever cancelled: nothing to reclaim
  // What a sweep must have seen: every cancel so far, and every index a worker held back for a
  // pause (Dispatcher::held_back: popped before the last sweep's pass, stashed after it, it
  // would wait out the pause with a cancelled job's slot: review of cbfe419). Both only grow,
  // so their sum equals the last sweep's only if neither moved since. acquire: pairs with the
  // release store below, so the slots that sweep freed are visible to the caller's next look.
  if (sweep_mark() == swept_mark_.load(std::memory_order_acquire)) return true;
  const std::lock_guard lock(reclaim_mu_);
  // Read before the pass: a cancel or a hold-back during it leaves the marks apart, for the next
  // add that finds no room. Equal already: another add swept while we waited for the lock.
  const std::uint64_t seen = sweep_mark();
  if (seen == swept_mark_.load(std::memory_order_relaxed)) return true;
  const ScopedValue<bool> mark(sweeping, true);
  dispatch_.sweep_ready([this](std::uint32_t idx) {
    switch (slots_[idx].ctl.held()) {
      case SlotControl<>::Held::waiting:
        return true;
      case SlotControl<>::Held::cancelled:
        drop_cancelled(idx);  // as its popper would
        return false;
      case SlotControl<>::Held::taken:
        return false;  // as its popper would
    }
    return true;
  });
  swept_mark_.store(seen, std::memory_order_release);  // after the pass: see above
  return true;
}

void JobFlow::sweep_blocked() noexcept {
  // Cold (a cancel). The blocked ring is popped only by wakes, which a stalled downstream may
  // not make for a long time: a cancelled job there would keep its slot (and count as blocked)
  // as long (review: a queue full of cancelled jobs answered `full`). Each index present now is
  // taken once: a cancelled job's slot is reclaimed, as a popper reclaims it; one taken by
  // take_leftovers after shutdown is dropped, as a popper drops it; the rest go back, in order.
  for_each_link([this](GateLink& link) {
    MpmcRing<std::uint32_t>& ring = link.blocked();
    std::int64_t removed = 0;
    std::uint32_t idx;
    for (std::size_t n = ring.size_approx(); n > 0 && ring.try_pop(idx); --n) {
      const auto held = slots_[idx].ctl.held();
      if (held == SlotControl<>::Held::waiting) {
        ring.push_held(idx);
        continue;
      }
      ++removed;
      if (held == SlotControl<>::Held::cancelled) reclaim_cancelled(idx);
    }
    link.gate().swept(removed, core_.now_ns());
  });
}

bool JobFlow::retime(JobId id, std::int64_t due) {
  // As the wheel's owner: the timer is unlinked and relinked (or fired) in one step, so an
  // earlier due time takes effect at once rather than when the old timer would have fired.
  const auto done = core_.with_wheel([&](Wheel& wheel) {
    timers_.drain(wheel, *this);  // slots in transit to the wheel are linked now
    const std::int64_t now = core_.now_ns();
    for (std::uint32_t i = 0; i < capacity_; ++i) {
      JobSlot& s = slots_[i];
      if (s.id.load(std::memory_order_relaxed) != id) continue;
      for (;;) {
        const std::uint64_t c = s.ctl.load();
        // The id is re-read after the word: retime's CAS against c fails if the slot moved on.
        if (ctl::state(c) != SlotState::delayed || s.id.load(std::memory_order_relaxed) != id)
          break;
        if (timers_.retime(i, c, std::max(due, now), now, wheel, *this)) {
          // Due later than now: if it led its downstream's waiting jobs, it no longer waits for
          // their token; another leads (review: a leader parked by change_delay held them). Due
          // now, it fired above and stepped down in timer_fired.
          if (due > now) stepped_aside(id);
          return true;
        }
        // The CAS failed: a stale handler unpinned (the job is still delayed: try again), or
        // the job moved on (the loop ends).
      }
    }
    return false;
  });
  if (!done)
    throw Error(ErrorCode::would_deadlock,
                "promote/change_delay on queue '" + name_ +
                    "' was called from a callback that runs while timers fire (an observer of "
                    "retry_due/stalled, a DLQ alert); call it from outside those callbacks");
  return *done;
}

std::vector<JobInfo> JobFlow::jobs(JobStatus status, std::size_t limit) const {
  std::vector<JobInfo> out;
  if (limit == 0) return out;
  // The `limit` oldest (smallest ids: ids are given in add order) in a max-heap by id, so a
  // listing of 100 costs one pass plus O(log 100) per job, whatever the queue holds; a job newer
  // than every kept one is skipped before its state is read.
  const auto newer = [](const JobInfo& a, const JobInfo& b) { return a.id < b.id; };
  for (std::uint32_t i = 0; i < capacity_; ++i) {
    const JobSlot& s = slots_[i];
    const std::uint64_t c = s.ctl.load();
    if (status_of(ctl::state(c)) != status) continue;
    JobInfo j;
    j.id = s.id.load(std::memory_order_relaxed);
    if (out.size() == limit && j.id >= out.front().id) continue;
    j.state = live_state(s, c);
    // A seqlock read, as state(): the fields describe one job only if the word did not move.
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.ctl.load() != c) continue;  // it moved on: skipped, as if listed a moment later
    if (out.size() == limit) {
      std::pop_heap(out.begin(), out.end(), newer);
      out.back() = j;
    } else {
      out.push_back(j);
    }
    std::push_heap(out.begin(), out.end(), newer);
  }
  std::sort_heap(out.begin(), out.end(), newer);  // oldest first
  return out;
}

JobStatus JobFlow::status_of(SlotState st) noexcept {
  switch (st) {
    case SlotState::waiting:
      return JobStatus::waiting;
    case SlotState::delayed:
    case SlotState::updating:
      return JobStatus::delayed;
    case SlotState::active:
    case SlotState::finishing:
      return JobStatus::active;
    default:
      return JobStatus::unknown;  // ended or reused: the history knows
  }
}

JobState JobFlow::live_state(const JobSlot& s, std::uint64_t c) const noexcept {
  JobState st;
  st.status = status_of(ctl::state(c));
  switch (st.status) {
    case JobStatus::delayed:
      st.since = TimePoint{Duration{s.due_ns.load(std::memory_order_relaxed)}};
      break;
    case JobStatus::active:
      st.since = TimePoint{Duration{s.started()}};
      break;
    default:
      break;
  }
  st.deliveries = s.delivered();
  st.attempts_made = s.attempts();
  st.stalls = s.stalled();
  // acquire: pairs with the release that published the cells.
  if (const ProgressCell* cells = progress_.load(std::memory_order_acquire)) {
    const ProgressCell& p = cells[&s - slots_.get()];
    // relaxed: a hint read beside the slot's counters (state() validates the slot, not this).
    if (p.id.load(std::memory_order_relaxed) == s.id.load(std::memory_order_relaxed))
      st.progress = std::bit_cast<double>(p.bits.load(std::memory_order_relaxed));
  }
  return st;
}

bool report_progress(JobFlow& flow, std::uint32_t idx, std::uint32_t token, double value) noexcept {
  return flow.progress(idx, token, value);
}

bool JobFlow::progress(std::uint32_t idx, std::uint32_t token, double value) noexcept {
  JobSlot& s = slots_[idx];
  if (std::isnan(value) || s.ctl.fenced(token)) return false;
  ProgressCell* cells = progress_.load(std::memory_order_acquire);
  if (cells == nullptr) [[unlikely]] {
    try {
      std::lock_guard lock(progress_init_mu_);  // cold: once per queue
      if (!progress_owner_) {
        progress_owner_ = std::make_unique<ProgressCell[]>(capacity_);
        progress_.store(progress_owner_.get(), std::memory_order_release);
      }
      cells = progress_owner_.get();
    } catch (...) {  // no memory for the cells: the report is dropped
      return false;
    }
  }
  ProgressCell& p = cells[idx];
  const JobId id = s.id.load(std::memory_order_relaxed);
  const std::int64_t now = core_.now_ns();
  // relaxed: this handler is the cell's only writer while its delivery counts (see the member).
  const bool first = p.id.load(std::memory_order_relaxed) != id;
  p.bits.store(std::bit_cast<std::uint64_t>(value), std::memory_order_relaxed);
  if (first) p.id.store(id, std::memory_order_relaxed);
  const std::int64_t last = p.last_event_ns.load(std::memory_order_relaxed);
  if (core_.observed() && (first || now - last >= options_.progress_interval.count())) {
    p.last_event_ns.store(now, std::memory_order_relaxed);
    Event e = make_event(EventKind::progress, s, now);
    e.progress = value;
    core_.emit(e);
  }
  return true;
}

JobState JobFlow::state(JobId id) const {
  for (std::uint32_t i = 0; i < capacity_; ++i) {
    const JobSlot& s = slots_[i];
    if (s.id.load(std::memory_order_relaxed) != id) continue;
    for (;;) {
      const std::uint64_t c = s.ctl.load();
      const JobState st = live_state(s, c);
      // A seqlock read: the fields describe the job only if neither the word nor the id moved
      // while they were read (the fence keeps the re-reads after the field loads).
      std::atomic_thread_fence(std::memory_order_acquire);
      if (s.id.load(std::memory_order_relaxed) != id) break;
      if (s.ctl.load() != c) continue;
      if (st.status != JobStatus::unknown) return st;
      break;
    }
  }
  if (auto ended = stats_.recall(id)) return JobState{*ended};
  if (in_dlq(id)) return JobState{JobStatus::dead_lettered};
  return JobState{};
}

std::optional<EndRecord> JobFlow::end_of(JobId id) const {
  // The history first: a job whose end is in it may still hold its slot for a moment (its end
  // record, if one is coming, is then on its way); a redriven job runs again under its id, so
  // a live slot comes next, and only then what was retained of an earlier end.
  for (std::uint32_t i = 0; i < capacity_; ++i) {
    const JobSlot& s = slots_[i];
    if (s.id.load(std::memory_order_relaxed) != id) continue;
    const SlotState st = ctl::state(s.ctl.load());
    if (s.id.load(std::memory_order_relaxed) == id &&
        (st == SlotState::waiting || st == SlotState::delayed || st == SlotState::active ||
         st == SlotState::updating))
      return std::nullopt;  // live (a finishing job's end is decided: the history may have it)
  }
  const std::optional<JobStatus> ended = stats_.recall(id);
  if (auto retained = ends_.retained(id); retained && (!ended || retained->status == *ended))
    return retained;
  const JobState st = ended ? JobState{*ended} : state(id);
  if (st.status == JobStatus::waiting || st.status == JobStatus::delayed ||
      st.status == JobStatus::active)
    return std::nullopt;  // finishing, its end not in the history yet
  if (st.status == JobStatus::dead_lettered) {
    if (auto filed = dlq_end(id)) return filed;  // reason and errors from its entry
  }
  EndRecord end;
  end.id = id;
  end.status = st.status;
  if (st.status == JobStatus::unknown)
    end.error = "job " + std::to_string(id) + " is not in queue '" + name_ +
                "': never added here, or ended so long ago that the queue's history forgot it";
  return end;  // ended, but not retained: its status only (no result, no errors)
}

bool JobFlow::idle() const noexcept {
  const QueueCounts c = counts();
  return c.waiting == 0 && c.delayed == 0 && c.active == 0;
}

PoolWait JobFlow::pool_wait(const std::string& what, bool bounded) const {
  PoolWait wait(dispatch_.pool_of_caller());
  if (!wait.enter(bounded)) {
    const std::uint32_t others = wait.workers() - 1;
    throw Error(ErrorCode::would_deadlock,
                what + " on queue '" + name_ + "' from a worker of the engine's shared pool: " +
                    (others == 0 ? std::string("the pool's only worker is the caller")
                                 : "the pool's other " + std::to_string(others) +
                                       " worker(s) already wait without a timeout for its jobs") +
                    ", so this wait would leave no worker free to run the queue's jobs; " +
                    (others == 0 ? "wait from outside the pool"
                                 : "wait with a timeout, from outside the pool") +
                    ", or give the pool more workers (EngineOptions.workers)");
  }
  return wait;
}

bool JobFlow::drain(Duration timeout) {
  if (core_.mode() != Mode::threaded)
    throw Error(ErrorCode::wrong_mode, "drain() on queue '" + name_ +
                                           "' waits for worker threads; an inline engine has "
                                           "none (use Engine::run_until_idle)");
  if (current_delivery() == this || core_.in_timer_context())
    throw Error(ErrorCode::would_deadlock,
                "drain() on queue '" + name_ +
                    "' was called from one of its own handlers or from a callback of the timer "
                    "(an observer of retry_due/stalled, a DLQ alert), which would wait for "
                    "itself; drain from outside handlers and callbacks");
  // Cold path: poll with a growing sleep. A drained queue stays drained only if nobody adds.
  const auto deadline = steady_deadline(timeout);  // Duration::max(): no timeout
  std::optional<PoolWait> checked;                 // taken when first about to block
  for (;;) {
    const bool idled = poll_until(deadline, [&] {
      if (idle()) return true;
      // About to block: a wait that would leave the shared pool no worker for the queue's jobs
      // is refused (a queue that is idle already drains from anywhere).
      if (!checked)
        checked.emplace(
            pool_wait("drain()", deadline != std::chrono::steady_clock::time_point::max()));
      return false;
    });
    if (!idled) return false;
    // The counts show a job ended by a lapse before the timer thread has told the observers;
    // and what they were told may have added jobs (an observer, a schedule's run): look again.
    if (!core_.await_deliveries(deadline)) return false;
    if (idle()) return true;
  }
}

// --- shutdown
// -------------------------------------------------------------------------------------

void JobFlow::collect_leftovers(ShutdownReport& report) const {
  for (std::size_t i = 0; i < capacity_; ++i) {
    const JobSlot& s = slots_[i];
    // seq_cst: see SlotControl::activate (a job reported waiting here never starts).
    const std::uint64_t c = s.ctl.load(std::memory_order_seq_cst);
    const SlotState st = ctl::state(c);
    // A handler is still running on the slot while it holds a pin: the live delivery, or a stale
    // one whose lease lapsed, whatever became of the job since (waiting again, ended).
    const bool running = ctl::pins(c) > 0 || st == SlotState::active || st == SlotState::finishing;
    const bool unstarted =
        st == SlotState::waiting || st == SlotState::delayed || st == SlotState::updating;
    if (!running && !unstarted) continue;
    LeftoverJob j{name_, s.id.load(std::memory_order_relaxed), std::string(job_name(s)),
                  s.attempts()};
    if (unstarted) report.not_started.push_back(j);
    if (running) report.still_running.push_back(std::move(j));
  }
  collect_deferred(report);
}

void JobFlow::abandon_unstarted() {
  if (!ends_.wanted()) return;
  for (std::size_t i = 0; i < capacity_; ++i) {
    const JobSlot& s = slots_[i];
    const SlotState st = ctl::state(s.ctl.load(std::memory_order_seq_cst));  // as collect_leftovers
    if (st != SlotState::waiting && st != SlotState::delayed && st != SlotState::updating) continue;
    const JobId id = s.id.load(std::memory_order_relaxed);
    ends_.abandon(id, "the engine shut down before job " + std::to_string(id) + " of queue '" +
                          name_ + "' started; Queue::take_leftovers() hands it back");
  }
}

bool JobFlow::take_unstarted(const std::function<void(std::uint32_t, bool)>& take) {
  // As the wheel's owner: a delayed job's timer is unlinked with the job, so nothing fires a
  // slot whose payload was handed back.
  return core_
      .with_wheel([&](Wheel& wheel) {
        timers_.drain(wheel, *this);  // slots in transit to the wheel are linked now
        for (std::uint32_t i = 0; i < capacity_; ++i) {
          JobSlot& s = slots_[i];
          const std::optional<SlotState> from = s.ctl.take_unstarted();
          if (!from) continue;
          const bool delayed = *from == SlotState::delayed;
          stats_.add(delayed ? kFromDelayed : kFromReady);  // out of its gauge: it left
          take(i, delayed);
          s.ctl.mark_free();
          // A delayed job's index was on the wheel: back to the free list. A waiting one's stays
          // in the ready ring, which nothing pops after stop (next_job, run_ready).
          if (delayed && timers_.unlink(s, wheel)) free_.push(i);
        }
        return true;
      })
      .has_value();
}

// --- events
// ---------------------------------------------------------------------------------------

Event JobFlow::make_event(EventKind kind, const JobSlot& s, std::int64_t now) const noexcept {
  Event e;
  e.kind = kind;
  e.at = TimePoint{Duration{now}};
  e.queue = name_;
  e.job_id = s.id.load(std::memory_order_relaxed);
  e.job_name = job_name(s);
  e.attempt = s.attempts() + 1u;
  e.max_attempts = s.max_attempts;
  e.deliveries = s.delivered();
  return e;
}

void JobFlow::emit_dlq(EventKind kind, JobId id, std::string_view job_name, std::size_t depth) {
  if (!core_.observed()) return;
  Event e;
  e.kind = kind;
  e.at = TimePoint{Duration{core_.now_ns()}};
  e.queue = name_;
  e.job_id = id;
  e.job_name = job_name;
  e.depth = depth;
  core_.emit(e);
}

}  // namespace rail::detail
