// QueueImpl<T>: one named, typed, bounded queue with its worker pool — the engine's hot path.
//
// Guarantee: every accepted job reaches exactly one end — completed, dead-lettered or cancelled —
// or is reported by shutdown; none is lost, none ends twice, and exactly one outcome per
// delivery counts (a handler whose lease lapsed is fenced by its token: job_slot.hpp).
//
// Structure (C = capacity):
//   slots_[C], payload_[C]  preallocated job records (detail/job_slot.hpp)
//   free_      the free slot indices: recycled ones first, never-used ones only when none is
//              free, so resident memory follows the jobs in flight (free_slots.hpp)
//   dispatch_  the ready ring, the workers' stashes, wake-ups and the worker threads: hands each
//              ready job to deliver() (dispatcher.hpp)
//   inbox_     MPMC ring of indices to link into the timing wheel (sweep_requested_: the
//              lease sweep's own (re)arm request)
//   leases_    one lease record per worker (detail/lease_tracker.hpp)
//   stats_     counters, gauges and the history of ended jobs (queue_stats.hpp)
// Each index is in exactly one place — the free list, a ring, a stash, the wheel (linked or
// parked) — or held by exactly one thread (job_slot.hpp's ownership invariant); every ring has
// room for every index, so pushing a held index never fails for long (push_held).
//
// Add:   pop free -> fill slot and payload -> push ready (or inbox when delayed) -> wake.
// Work:  pop a batch of ready (the first job now, the rest into the worker's stash, stealable)
//        -> CAS waiting->active (pin) -> lease -> handler -> CAS active->finishing:
//          done            -> end (completed)
//          retry (+delay)  -> delayed: inbox (the timer links it) | no delay: ready
//          out of attempts -> end (dead-lettered: DLQ entry with the payload moved)
//        An end frees the slot at once if no stale handler still pins it, else the last one
//        to return frees it (and files the DLQ entry).
// Timer: the wheel owner drains inbox_ into the wheel; when a slot's time comes it CASes
//        delayed->waiting and pushes ready. The lease sweep (one wheel timer per queue) CASes
//        active->finishing for lapsed leases and redelivers or dead-letters them.
//
// Memory ordering: a slot's plain fields and payload are written by their holder before the
// index is pushed to a ring (release) and read by the next holder after popping it (acquire).
// Non-holders go through ctl with acq_rel CASes (job_slot.hpp). The conventions below hold for
// every access in this file, so individual lines do not repeat them:
//   * ctl loads are acquire: whoever acts on a state sees the fields of the party that set it;
//     ctl CASes are acq_rel (they both take a slot and publish what was written before);
//     plain ctl stores by the holder are release (they publish the fields to the next taker).
//   * id loads are relaxed: a cold-path reader validates them against ctl (a CAS fails if the
//     slot was reused), and a holder's id is already ordered by the ring or ctl hand-off.
//   * due_ns is relaxed: it travels with the inbox push (ring release) or the ctl release.
//   * the dispatcher's stop and pause flags: see dispatcher.hpp. min_visibility_ns_ is relaxed:
//     it publishes no data, only a number.
//
// Threading: add/add_bulk/cancel/state/pause from any thread; `concurrency` worker threads per
// queue (threaded mode) or the run_until_idle() caller (inline mode) run handlers.
// Shutdown: stop_workers() makes workers exit after their current handler; join_workers() waits.
#pragma once

#include <array>
#include <bit>
#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "rail/add_result.hpp"
#include "rail/dead_letter_queue.hpp"
#include "rail/detail/allocation.hpp"
#include "rail/detail/assert.hpp"
#include "rail/detail/deadline.hpp"
#include "rail/detail/dedup_set.hpp"
#include "rail/detail/dispatcher.hpp"
#include "rail/detail/engine_core.hpp"
#include "rail/detail/free_slots.hpp"
#include "rail/detail/job_slot.hpp"
#include "rail/detail/lease_tracker.hpp"
#include "rail/detail/mpmc_ring.hpp"
#include "rail/detail/payload.hpp"
#include "rail/detail/queue_stats.hpp"
#include "rail/detail/worker_stash.hpp"
#include "rail/error.hpp"
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

template <class T>
class QueueImpl final : public QueueBase, private JobRunner {
  static_assert(std::is_nothrow_move_constructible_v<T>,
                "a queue's payload type must be nothrow move constructible: jobs move between "
                "the queue, the DLQ and redrive on paths that must not fail halfway");

  static constexpr std::uint32_t kLeaseSweep = 0xFFFF'FFFFu;  // the sweep's timer tag

 public:
  using Handler = std::function<Outcome(Job<T>&)>;

  QueueImpl(EngineCore& core, std::string name, QueueOptions options)
      : core_(core),
        name_(std::move(name)),
        options_(std::move(options)),
        capacity_(options_.capacity),
        slots_(std::make_unique<JobSlot[]>(capacity_)),
        payload_(
            static_cast<Storage*>(alloc_aligned(sizeof(Storage) * capacity_, alignof(Storage))),
            FreeCells{sizeof(Storage) * capacity_}),
        free_(capacity_, sizeof(JobSlot) + sizeof(Storage)),
        inbox_(capacity_),
        stats_(capacity_),
        dispatch_(core_, stats_, capacity_, slots_.get(), payload_.get(), sizeof(Storage)),
        min_visibility_ns_(options_.visibility_timeout.count()),
        dlq_(*this, options_.dlq) {
    index_ = core_.register_queue(this);
    // The wheel hands back only the node; its tag routes the firing to this queue's slot.
    for (std::uint32_t i = 0; i < capacity_; ++i)
      slots_[i].timer.tag = (std::uint64_t{index_} << 32) | i;
    sweep_node_.tag = (std::uint64_t{index_} << 32) | kLeaseSweep;
  }

  ~QueueImpl() override {
    stop_workers();
    join_workers();
    // Whatever is still unfinished dies with the queue: destroy the payloads it holds.
    for (std::size_t i = 0; i < capacity_; ++i) {
      if (ctl::state(slots_[i].ctl.load()) != SlotState::free)
        payload(static_cast<std::uint32_t>(i)).~T();
      if (slots_[i].extra) {
        slots_[i].extra->~SlotExtra();
        free_aligned(slots_[i].extra, sizeof(SlotExtra), alignof(SlotExtra));
      }
    }
  }

  QueueImpl(const QueueImpl&) = delete;
  QueueImpl& operator=(const QueueImpl&) = delete;

  // --- QueueBase ---------------------------------------------------------------------------------
  const std::string& name() const noexcept override { return name_; }
  std::type_index payload_type() const noexcept override { return typeid(T); }
  [[nodiscard]] const QueueOptions& options() const noexcept { return options_; }
  [[nodiscard]] DeadLetterQueue<T>& dlq() noexcept { return dlq_; }
  [[nodiscard]] EngineCore& core() noexcept { return core_; }

  QueueCounts counts() const noexcept override { return stats_.counts(dispatch_.paused()); }

  void collect_leftovers(ShutdownReport& report) const override {
    for (std::size_t i = 0; i < capacity_; ++i) {
      const JobSlot& s = slots_[i];
      // seq_cst: see SlotControl::activate (a job reported waiting here never starts).
      const std::uint64_t c = s.ctl.load(std::memory_order_seq_cst);
      const SlotState st = ctl::state(c);
      // A handler is still running on the slot while it holds a pin: the live delivery, or a
      // stale one whose lease lapsed, whatever became of the job since (waiting again, ended).
      const bool running =
          ctl::pins(c) > 0 || st == SlotState::active || st == SlotState::finishing;
      const bool unstarted =
          st == SlotState::waiting || st == SlotState::delayed || st == SlotState::updating;
      if (!running && !unstarted) continue;
      LeftoverJob j{name_, s.id.load(std::memory_order_relaxed),
                    std::string(core_.names().name(s.name)), s.attempts()};
      if (unstarted) report.not_started.push_back(j);
      if (running) report.still_running.push_back(std::move(j));
    }
  }

  // --- adding
  // --------------------------------------------------------------------------------------
  AddResult add(std::string_view job_name, T&& data, const JobOptions& o) {
    if (!core_.accepting()) throw_shutting_down();
    check_options(o);
    std::uint16_t name_id = core_.names().intern(job_name);
    std::uint32_t idx;
    if (!acquire_slots(&idx, 1)) return overflow(name_id, std::move(data), o);
    std::int64_t now = core_.now_ns();
    JobSlot& s = slots_[idx];
    std::uint64_t id;
    if (!o.dedup.id.empty()) {
      std::int64_t expires = o.dedup.ttl ? saturating_add(now, *o.dedup.ttl) : DedupSet::kNoExpiry;
      auto claim = dedup().try_claim(o.dedup.id, now, expires, [&]() noexcept {
        return std::pair<std::uint64_t, std::uint64_t>{core_.next_ids(1), idx};
      });
      if (claim.result != DedupSet::Claim::Result::inserted) {
        free_.push(idx);
        return on_dedup_conflict(claim, job_name, std::move(data), o, now);
      }
      id = claim.owner;
      extra(s).dedup_key = o.dedup.id;
      s.has_dedup = true;
      s.dedup_has_ttl = o.dedup.ttl.has_value();
    } else {
      id = core_.next_ids(1);
      s.has_dedup = false;
    }
    init_slot(idx, id, name_id, now, o);
    ::new (&payload_[idx]) T(std::move(data));
    stats_.add(kAdded);
    if (core_.observed()) emit_added(s, o.delay);
    publish_new(idx, now, o.delay);
    return {id, AddStatus::added};
  }

  /// add_bulk: all payloads get one name and one set of options (no dedup: ids differ per job).
  BulkAddResult add_bulk(std::string_view job_name, std::span<T> items, const JobOptions& o) {
    if (!core_.accepting()) throw_shutting_down();
    check_options(o);
    if (!o.dedup.id.empty())
      throw Error(ErrorCode::invalid_option,
                  "add_bulk: JobOptions.dedup.id is '" + o.dedup.id +
                      "'; one dedup id cannot cover several jobs — use add() per job for dedup");
    if (items.empty()) return {AddStatus::added, 0, 0};
    if (items.size() > capacity_)
      throw Error(ErrorCode::invalid_option, "add_bulk: " + std::to_string(items.size()) +
                                                 " jobs exceed queue '" + name_ + "' capacity " +
                                                 std::to_string(capacity_));
    std::uint16_t name_id = core_.names().intern(job_name);
    constexpr std::size_t kChunk = 256;
    std::uint32_t idx[kChunk];
    // All-or-nothing: reserve every slot first, so a full queue creates nothing.
    std::vector<std::uint32_t> big;
    std::uint32_t* held = idx;
    if (items.size() > kChunk) {
      big.resize(items.size());
      held = big.data();
    }
    if (!acquire_slots(held, items.size())) {
      if (options_.on_full != OverflowPolicy::dead_letter) return {AddStatus::full, 0, 0};
      BulkAddResult r{AddStatus::dead_lettered, 0, items.size()};
      for (auto& item : items) {
        auto one = overflow(name_id, std::move(item), o);
        if (r.first_id == 0) r.first_id = one.id;
      }
      return r;
    }
    std::int64_t now = core_.now_ns();
    std::uint64_t first = core_.next_ids(items.size());
    bool observed = core_.observed();
    for (std::size_t i = 0; i < items.size(); ++i) {
      std::uint32_t k = held[i];
      slots_[k].has_dedup = false;
      init_slot(k, first + i, name_id, now, o);
      ::new (&payload_[k]) T(std::move(items[i]));
      if (observed) emit_added(slots_[k], o.delay);
    }
    stats_.add(kAdded, items.size());
    if (o.delay.count() > 0) {
      for (std::size_t i = 0; i < items.size(); ++i)
        publish_new(held[i], now, o.delay);
    } else {
      for (std::size_t i = 0; i < items.size(); ++i) {
        slots_[held[i]].ctl.publish(SlotState::waiting);
      }
      dispatch_.push_ready_bulk(held, items.size());
    }
    return {AddStatus::added, first, items.size()};
  }

  // --- workers
  // -------------------------------------------------------------------------------------
  void set_handler(Handler h, const WorkerOptions& w) {
    std::lock_guard lock(handler_mu_);
    if (handler_)
      throw Error(ErrorCode::invalid_option,
                  "queue '" + name_ + "' already has a processor; call process() once per queue");
    validate_worker_options(w, name_);
    handler_ = std::move(h);
    std::uint32_t workers = core_.mode() == Mode::threaded ? w.concurrency : 1;
    leases_ = std::make_unique<LeaseTracker>(workers);
    try {
      dispatch_.start(*this, workers, *leases_, core_.seed() ^ (std::uint64_t{index_} << 32),
                      name_);
    } catch (...) {
      // start() joined the threads it had started before any ran a job: undo the rest, so that
      // the queue is as before and process() may be called again.
      handler_ = nullptr;
      leases_.reset();
      throw;
    }
    // Threaded: the sweep is a self-re-arming wheel timer. Inline: time moves only through
    // ManualClock::advance, whose process_timers() calls sweep_inline() directly, so no timer is
    // left on the wheel for next_timer_in() to chase forever.
    if (leases_enabled() && core_.mode() == Mode::threaded) arm_sweep();
    processing_.store(true, std::memory_order_release);  // check_options reads it
  }

  std::size_t run_ready(std::size_t max) override {
    if (!handler_) return 0;
    return dispatch_.run_inline(*this, *leases_, core_.seed() ^ index_, max);
  }

  void stop_workers() noexcept override { dispatch_.stop(); }
  void join_workers() noexcept override { dispatch_.join(); }

  // --- lifecycle
  // -----------------------------------------------------------------------------------
  void pause() noexcept { dispatch_.pause(); }
  void resume() noexcept { dispatch_.resume(); }
  [[nodiscard]] bool paused() const noexcept { return dispatch_.paused(); }

  /// idle(): nothing waiting, delayed or running (stale handlers included).
  [[nodiscard]] bool idle() const noexcept override {
    QueueCounts c = counts();
    return c.waiting == 0 && c.delayed == 0 && c.active == 0;
  }

  bool drain(Duration timeout) {
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
    auto pause = std::chrono::microseconds(10);
    while (!idle()) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(2000));
    }
    return true;
  }

  bool cancel_job(std::uint64_t id) override { return cancel(id); }
  JobState job_state(std::uint64_t id) const override { return state(id); }

  /// cancel(id): see Queue::cancel.
  bool cancel(JobId id) {
    // An ended job's old slot may still carry its id (a redriven job lives in a new slot), so a
    // slot that no longer holds the job does not end the scan.
    for (std::uint32_t i = 0; i < capacity_; ++i) {
      if (slots_[i].id.load(std::memory_order_relaxed) != id) continue;
      if (auto done = try_cancel(i, id)) return *done;
    }
    return false;
  }

  /// state(id): see Queue::state. Cold: scans the slots, then the history of ended jobs.
  JobState state(JobId id) const {
    for (std::uint32_t i = 0; i < capacity_; ++i) {
      const JobSlot& s = slots_[i];
      if (s.id.load(std::memory_order_relaxed) != id) continue;
      for (;;) {
        const std::uint64_t c = s.ctl.load();
        JobState st;
        switch (ctl::state(c)) {
          case SlotState::waiting:
            st.status = JobStatus::waiting;
            break;
          case SlotState::delayed:
          case SlotState::updating:
            st.status = JobStatus::delayed;
            st.since = TimePoint{Duration{s.due_ns.load(std::memory_order_relaxed)}};
            break;
          case SlotState::active:
          case SlotState::finishing:
            st.status = JobStatus::active;
            st.since = TimePoint{Duration{s.started()}};
            break;
          default:
            st.status = JobStatus::unknown;  // ended or reused: the history below knows
        }
        st.deliveries = s.delivered();
        st.attempts_made = s.attempts();
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
    if (dlq_.contains(id)) return JobState{JobStatus::dead_lettered};
    return JobState{};
  }

  /// take_leftovers(): after shutdown, moves out every job that never started and that no
  /// handler still reads (a stale handler of a redelivered job pins it: shutdown reports it as
  /// still running, and a later call takes it once that handler returned).
  std::vector<Leftover<T>> take_leftovers() {
    if (core_.accepting())
      throw Error(ErrorCode::wrong_mode,
                  "take_leftovers() on queue '" + name_ + "' needs Engine::shutdown() first");
    std::vector<Leftover<T>> out;
    // As the wheel's owner: a delayed job's timer is unlinked with the job, so nothing fires a
    // slot whose payload was handed back.
    auto taken = core_.with_wheel([&](Wheel& wheel) {
      drain_timer_inbox(wheel);  // slots in transit to the wheel are linked now
      for (std::uint32_t i = 0; i < capacity_; ++i) {
        JobSlot& s = slots_[i];
        const std::optional<SlotState> from = s.ctl.take_unstarted();
        if (!from) continue;
        const bool delayed = *from == SlotState::delayed;
        stats_.add(delayed ? kFromDelayed : kFromReady);  // out of its gauge: it left
        out.push_back(Leftover<T>{s.id.load(std::memory_order_relaxed),
                                  std::string(core_.names().name(s.name)), std::move(payload(i)),
                                  s.attempts(), delayed});
        payload(i).~T();
        s.ctl.mark_free();
        // A delayed job's index was on the wheel: back to the free list. A waiting one's stays in
        // the ready ring, which nothing pops after stop (next_job, run_ready).
        if (delayed && (s.timer.linked() || take_parked(s))) {
          wheel.cancel(s.timer);  // a parked node is not linked: cancel() does nothing
          free_.push(i);
        }
      }
      return true;
    });
    if (!taken)
      throw Error(ErrorCode::would_deadlock,
                  "take_leftovers() on queue '" + name_ +
                      "' was called from a callback that runs while timers fire; call it after "
                      "Engine::shutdown() returned, outside handlers and callbacks");
    return out;
  }

  // --- timers
  // --------------------------------------------------------------------------------------
  void drain_timer_inbox(Wheel& wheel) noexcept override {
    // acq_rel: consumes the request and acquires the min_visibility_ns_ lowered before it.
    if (sweep_requested_.exchange(false, std::memory_order_acq_rel)) {
      // (Re)arm the sweep no later than one shortest visibility timeout from now.
      std::int64_t at = saturating_add(
          wheel.now_ns(), Duration{min_visibility_ns_.load(std::memory_order_relaxed)});
      if (!is_never(at) && (!sweep_node_.linked() || sweep_node_.deadline > at)) {
        wheel.cancel(sweep_node_);
        wheel.schedule(sweep_node_, at);
      }
    }
    std::uint32_t idx;
    while (inbox_.try_pop(idx)) {
      JobSlot& s = slots_[idx];
      switch (ctl::state(s.ctl.load())) {
        case SlotState::cancelled:  // cancelled on its way here: ours to reclaim
          reclaim_cancelled(idx);
          break;
        case SlotState::free:  // taken by take_leftovers on its way here: nothing to run
          break;
        default:
          // relaxed: due_ns was written by the pusher before the inbox push (ring acquire).
          schedule_or_park(s, s.due_ns.load(std::memory_order_relaxed), wheel);
      }
    }
  }

  void fire(std::uint32_t idx, std::int64_t now, Wheel& wheel) noexcept override {
    if (idx == kLeaseSweep) {
      sweep_leases(now, wheel);
      return;
    }
    JobSlot& s = slots_[idx];
    std::uint64_t c = s.ctl.load();  // acquire: sees a debounce's payload and due time
    for (;;) {
      switch (ctl::state(c)) {
        case SlotState::updating:
          std::this_thread::yield();  // a debounce is replacing the payload: a few stores
          c = s.ctl.load();
          continue;
        case SlotState::cancelled:
          reclaim_cancelled(idx);
          return;
        case SlotState::free:  // taken by take_leftovers (which unlinks its timer): defensive
          return;
        default:
          break;
      }
      std::int64_t due = s.due_ns.load(std::memory_order_relaxed);  // ordered by ctl acquire
      if (due > now) {  // a debounce moved the deadline later
        schedule_or_park(s, due, wheel);
        return;
      }
      if (s.ctl.fire(c)) {
        if (core_.observed()) emit(EventKind::retry_due, s, now);
        dispatch_.push_ready(idx);  // into `waiting` (counted there) ...
        stats_.add(kFromDelayed);   // ... before out of `delayed`: see counts()
        return;
      }
    }
  }

  // --- DLQ support
  // ----------------------------------------------------------------------------------
  RedriveStatus redrive(DeadLetter<T>&& e) {
    if (!core_.accepting()) return RedriveStatus::shutting_down;
    std::uint32_t idx;
    if (!acquire_slots(&idx, 1)) return RedriveStatus::queue_full;
    std::int64_t now = core_.now_ns();
    JobOptions o = options_.defaults;
    o.attempts = static_cast<std::int32_t>(e.max_attempts);
    slots_[idx].has_dedup = false;
    init_slot(idx, e.id, core_.names().intern(e.name), now, o);
    slots_[idx].added_ns = e.added_at.time_since_epoch().count();
    ::new (&payload_[idx]) T(std::move(e.data));
    stats_.add(kAdded);
    if (core_.observed()) emit(EventKind::redriven, slots_[idx], now);
    publish_new(idx, now, Duration{0});
    return RedriveStatus::redriven;
  }

  void emit_dlq(EventKind kind, JobId id, std::string_view job_name, std::size_t depth) {
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

 private:
  using Storage = std::aligned_storage_t<sizeof(T), alignof(T)>;

  T& payload(std::uint32_t idx) noexcept {
    return *std::launder(reinterpret_cast<T*>(&payload_[idx]));
  }

  SlotExtra& extra(JobSlot& s) {
    if (!s.extra)
      s.extra = ::new (alloc_aligned(sizeof(SlotExtra), alignof(SlotExtra))) SlotExtra();
    return *s.extra;
  }

  DedupSet& dedup() {
    // acquire: pairs with the release below, so a reader sees a fully built set.
    if (DedupSet* d = dedup_.load(std::memory_order_acquire)) [[likely]]
      return *d;
    std::lock_guard lock(dedup_init_mu_);  // cold: once per queue
    if (!dedup_owner_) {
      // Default: room for the queue's jobs and at least 4096 ids, because ids with a ttl outlive
      // their jobs (a small queue's window would otherwise fill at once).
      dedup_owner_ = std::make_unique<DedupSet>(options_.dedup_capacity
                                                    ? options_.dedup_capacity
                                                    : std::max<std::size_t>(capacity_, 4096));
      dedup_.store(dedup_owner_.get(), std::memory_order_release);
    }
    return *dedup_owner_;
  }

  [[nodiscard]] bool leases_enabled() const noexcept {
    return options_.visibility_timeout != Duration::max();
  }

  void check_options(const JobOptions& o) {
    validate_job_options(o, "JobOptions");
    if (o.backoff.kind == BackoffKind::custom && !options_.custom_backoff) [[unlikely]]
      throw Error(ErrorCode::invalid_option,
                  "JobOptions.backoff is custom but queue '" + name_ +
                      "' has no QueueOptions.custom_backoff; expected one to compute delays");
    if (o.visibility_timeout) [[unlikely]] {
      // A shorter lease than the queue's must pull the lease sweep earlier (lease_tracker.hpp).
      std::int64_t v = o.visibility_timeout->count();
      std::int64_t cur = min_visibility_ns_.load(std::memory_order_relaxed);
      bool lowered = false;
      while (v < cur && !(lowered = min_visibility_ns_.compare_exchange_weak(
                              cur, v, std::memory_order_relaxed))) {
      }
      // acquire: pairs with set_handler's release, so a sweep is armed by one of the two.
      if (lowered && processing_.load(std::memory_order_acquire) && leases_enabled() &&
          core_.mode() == Mode::threaded)
        arm_sweep();
    }
  }

  [[noreturn]] void throw_shutting_down() const {
    throw Error(ErrorCode::shutting_down,
                "queue '" + name_ + "' does not accept jobs: the engine is shutting down");
  }

  /// acquire_slots: takes n free slots (all or none), waiting per OverflowPolicy::block.
  bool acquire_slots(std::uint32_t* out, std::size_t n) {
    if (try_acquire(out, n)) return true;
    if (options_.on_full != OverflowPolicy::block || core_.mode() == Mode::inlined) return false;
    // Cold path: the queue is full. Poll with a growing real-time sleep up to block_timeout;
    // workers freeing slots do not pay for waking blocked producers.
    const auto deadline = steady_deadline(options_.block_timeout);  // max: wait for room
    auto pause = std::chrono::microseconds(1);
    while (std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(pause);
      if (try_acquire(out, n)) return true;
      if (!core_.accepting()) throw_shutting_down();
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
    return false;
  }

  bool try_acquire(std::uint32_t* out, std::size_t n) noexcept {
    // All or nothing: with fewer than n free none is handed out, so a bulk add on a nearly full
    // queue neither churns the free list against the workers nor reorders it.
    // One job: a plain pop (the bulk path's size estimate would read the workers' end of the
    // ring on every add).
    if (n == 1) return free_.try_pop(*out);
    return free_.try_pop_bulk(out, n) == n;
  }

  /// push_held(ring, idx): hands an index we hold to a ring. Every ring has room for every index,
  /// so a failed try_push is never "full": it is the Vyukov ring's transient report when the
  /// consumer of that cell's previous lap claimed it but has not yet released it. The consumer is
  /// a few instructions from done, so retry rather than drop — dropping would lose the job.
  static void push_held(MpmcRing<std::uint32_t>& ring, std::uint32_t idx) noexcept {
    while (!ring.try_push(idx))
      std::this_thread::yield();
  }

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
    s.max_attempts = static_cast<std::uint16_t>(o.attempts);
    s.visibility_ns = o.visibility_timeout.value_or(options_.visibility_timeout).count();
    s.end_kind = EndKind::none;
    s.end_reason = DeadLetterReason::none;
    s.set_backoff(o.backoff);
    if (s.extra) s.extra->errors.clear();
  }

  /// publish_new: a filled slot enters the waiting or delayed state.
  void publish_new(std::uint32_t idx, std::int64_t now, Duration delay) noexcept {
    JobSlot& s = slots_[idx];
    if (delay.count() > 0) {
      s.due_ns.store(saturating_add(now, delay), std::memory_order_relaxed);  // see publish()
      s.ctl.publish(SlotState::delayed);
      push_delayed(idx);
    } else {
      s.ctl.publish(SlotState::waiting);
      dispatch_.push_ready(idx);
    }
  }

  void push_delayed(std::uint32_t idx) noexcept {
    stats_.add(kToDelayed);
    push_held(inbox_, idx);
    core_.signal_timer();
  }
  /// schedule_or_park(s, due, wheel): the wheel owner links a delayed slot's timer, or parks it
  /// when it is due never (deadline.hpp): the node stays unlinked with deadline kNever, the slot
  /// stays `delayed` (counted, visible to state(), cancellable) and its index is held by the
  /// wheel owner until cancel() or take_leftovers() takes it (take_parked()). Nothing else un-parks
  /// a slot: a debounce only moves a due time later.
  static void schedule_or_park(JobSlot& s, std::int64_t due, Wheel& wheel) noexcept {
    if (is_never(due)) {
      s.timer.deadline = kNever;
      return;
    }
    wheel.schedule(s.timer, due);
  }
  /// take_parked(s): under the wheel, takes a parked slot's index back (true) or says it is not
  /// parked. Resetting the node's deadline keeps "unlinked with deadline kNever" meaning parked.
  static bool take_parked(JobSlot& s) noexcept {
    if (s.timer.linked() || !is_never(s.timer.deadline)) return false;
    s.timer.deadline = 0;
    return true;
  }
  void arm_sweep() noexcept {
    // release: the timer's acq_rel exchange sees the visibility timeout lowered before this.
    sweep_requested_.store(true, std::memory_order_release);
    core_.signal_timer();
  }

  AddResult overflow(std::uint16_t name_id, T&& data, const JobOptions& o) {
    if (options_.on_full != OverflowPolicy::dead_letter) return {0, AddStatus::full};
    std::uint64_t id = core_.next_ids(1);
    TimePoint now{Duration{core_.now_ns()}};
    DeadLetter<T> e{id,
                    std::string(core_.names().name(name_id)),
                    std::move(data),
                    DeadLetterReason::overflow,
                    0,
                    static_cast<std::uint32_t>(o.attempts),
                    now,
                    now,
                    {}};
    stats_.add(kAdded);
    stats_.add(kDeadLettered);
    stats_.remember(id, JobStatus::dead_lettered);
    if (core_.observed()) {
      Event ev;
      ev.kind = EventKind::dead_lettered;
      ev.at = now;
      ev.queue = name_;
      ev.job_id = id;
      ev.job_name = core_.names().name(name_id);
      ev.max_attempts = e.max_attempts;
      ev.reason = DeadLetterReason::overflow;
      ev.error = "queue full";
      core_.emit(ev);
    }
    dlq_.push(std::move(e));
    return {id, AddStatus::dead_lettered};
  }

  AddResult on_dedup_conflict(const DedupSet::Claim& claim, std::string_view job_name, T&& data,
                              const JobOptions& o, std::int64_t now) {
    using R = DedupSet::Claim::Result;
    if (claim.result == R::full) return {0, AddStatus::dedup_full};
    if (claim.result == R::key_too_long)
      throw Error(ErrorCode::invalid_option, "JobOptions.dedup.id is " +
                                                 std::to_string(o.dedup.id.size()) +
                                                 " bytes; expected at most 256");
    AddStatus status = AddStatus::duplicate;
    if (o.dedup.mode == DedupMode::debounce && try_debounce(claim, std::move(data), o, now))
      status = AddStatus::debounced;
    stats_.add(kDeduplicated);
    if (core_.observed()) {
      Event e;
      e.kind = status == AddStatus::debounced ? EventKind::debounced : EventKind::deduplicated;
      e.at = TimePoint{Duration{now}};
      e.queue = name_;
      e.job_id = claim.owner;
      e.job_name = job_name;
      e.dedup_id = o.dedup.id;
      e.delay = o.delay;
      core_.emit(e);
    }
    return {claim.owner, status};
  }

  /// try_debounce: while the kept job is still delayed, replace its payload and restart its
  /// delay (the timer re-arms lazily: fire() sees due_ns moved and reschedules).
  bool try_debounce(const DedupSet::Claim& claim, T&& data, const JobOptions& o, std::int64_t now) {
    auto idx = static_cast<std::uint32_t>(claim.value);
    if (idx >= capacity_) return false;
    JobSlot& s = slots_[idx];
    const std::uint64_t c = s.ctl.load();
    // The id is read after the word: if begin_update's CAS against that word succeeds, the slot
    // was not reused in between, so the id belongs to the job it takes.
    if (s.id.load(std::memory_order_relaxed) != claim.owner) return false;
    // Fails unless the job is still delayed and no stale handler of it still reads the payload:
    // the add then merges as a plain duplicate instead of writing under a reader.
    if (!s.ctl.begin_update(c)) return false;
    replace_payload(payload(idx), std::move(data));  // any payload: see payload.hpp
    std::int64_t due =
        std::max(s.due_ns.load(std::memory_order_relaxed), saturating_add(now, o.delay));
    s.due_ns.store(due, std::memory_order_relaxed);
    if (o.dedup.ttl)
      (void)dedup().set_expiry(o.dedup.id, claim.owner, saturating_add(now, *o.dedup.ttl));
    s.ctl.end_update();
    return true;
  }

  /// count(wc, c): a worker bumps its own counters; anyone else (wc null) the shared stripes.
  void count(WorkerContext* wc, Counter c, std::uint64_t n = 1) noexcept {
    if (wc && wc->counters) {
      wc->counters->add(c, n);
    } else {
      stats_.add(c, n);
    }
  }

  /// deliver(idx): we popped idx from the ready ring. Runs the handler unless the job was
  /// cancelled meanwhile; returns whether a handler ran.
  bool deliver(std::uint32_t idx, WorkerContext& wc) override {
    JobSlot& s = slots_[idx];
    const QueueBase* const outer = std::exchange(current_delivery(), this);
    struct Restore {
      const QueueBase* queue;
      ~Restore() { current_delivery() = queue; }
    } restore{outer};
    // The delivery's number and start time are written before activation, so that state() never
    // sees an active job with its previous count (it reads them against the word: job_slot.hpp).
    // A cancel that wins meanwhile may read the count one high in its event; it is put back.
    std::int64_t now = core_.now_ns();
    const std::uint16_t delivered = s.delivered();
    s.started_ns.store(now, std::memory_order_relaxed);
    s.deliveries.store(static_cast<std::uint16_t>(delivered + 1), std::memory_order_relaxed);
    const auto a = s.ctl.activate();
    if (a.result != SlotControl<>::Activation::active) {
      s.deliveries.store(delivered, std::memory_order_relaxed);
      if (a.result == SlotControl<>::Activation::cancelled) reclaim_cancelled(idx);
      return false;  // taken: handed back by take_leftovers after shutdown; drop the index
    }
    // seq_cst: with activate's CAS and shutdown's store, in one order (see SlotControl::activate):
    // a worker that got here after shutdown's report read the job as waiting sees the stop.
    const bool stopping = dispatch_.stopping(std::memory_order_seq_cst);
    if (stopping && s.ctl.deactivate(ctl::seq(a.word))) {
      s.deliveries.store(delivered, std::memory_order_relaxed);
      return false;  // back to waiting, for take_leftovers; its index stays with nobody
    }
    // Into `active` before out of `waiting`: see counts().
    count(&wc, kStarted);
    count(&wc, kFromReady);
    const std::uint32_t token = ctl::seq(a.word);
    // Start to start: the previous handler's run plus this worker's overhead. Real time even
    // under a manual clock (whose time stands still between advances).
    const std::int64_t wall =
        wc.manual_clock ? std::chrono::steady_clock::now().time_since_epoch().count() : now;
    wc.fast = wall - wc.last_wall_ns < Dispatcher::kFastHandlerNs;
    wc.last_wall_ns = wall;
    wc.last_start_ns = now;
    Job<T> job;
    job.id_ = s.id.load(std::memory_order_relaxed);
    job.name_ = core_.names().name(s.name);
    job.queue_ = name_;
    job.data_ = &payload(idx);
    job.attempts_made_ = s.attempts();
    job.deliveries_ = s.delivered();
    job.max_attempts_ = s.max_attempts;
    job.added_at_ = TimePoint{Duration{s.added_ns}};
    job.started_at_ = TimePoint{Duration{now}};
    if (s.extra && !s.extra->errors.empty()) job.last_error_ = s.extra->errors.back().message;
    job.ctl_ = &s.ctl;
    job.token_ = token;
    job.clock_ = &core_.clock();
    // Everything that reads the slot's plain fields happens before the lease is granted: from
    // the grant on, a lapse may take the slot (and write its attempt count) at any moment.
    if (core_.observed()) emit(EventKind::started, s, now);
    bool leased = leases_enabled() && s.visibility_ns != Duration::max().count();
    if (leased) {
      job.record_ = &wc.record;
      job.lease_ = make_lease(idx, token);
      // After the plain fields above: the sweep reads them after acquiring this lease word.
      LeaseTracker::grant(wc.record, job.lease_, saturating_add(now, Duration{s.visibility_ns}));
    }

    Outcome out;  // done: a job flagged cancelled after stop ends cancelled without running
    if (!stopping) {
      try {
        out = handler_(job);
      } catch (const std::exception& e) {
        out = Outcome::retry(e.what());
      } catch (...) {
        out = Outcome::retry("handler threw a non-std::exception");
      }
    }
    if (leased) LeaseTracker::release(wc.record);
    finish(idx, token, std::move(out), wc, job.started_at_, job.deliveries_);
    // After finish() returned the slot to the free list (final_end): once counts() shows the
    // attempt ended (drain() returns), the slot is free for the next add.
    count(&wc, kAttemptEnded);
    return true;
  }

  /// finish: the handler of delivery `token` returned. Exactly one of it and a lease lapse wins
  /// the slot (the CAS on ctl); the loser's outcome does not count.
  void finish(std::uint32_t idx, std::uint32_t token, Outcome&& out, WorkerContext& wc,
              TimePoint started, std::uint32_t delivery) {
    JobSlot& s = slots_[idx];
    // Read while our pin still holds the slot: once a stale handler unpins, the slot may be freed
    // and reused under it.
    const JobId id = s.id.load(std::memory_order_relaxed);
    const std::string_view job_name = core_.names().name(s.name);
    const auto f = s.ctl.finish(token);
    if (f.result != SlotControl<>::Finish::live) {
      // Stale: the lease lapsed and the job moved on; our pin is dropped. If the job has ended
      // and we were the last handler on it, its deferred end is ours to complete.
      count(&wc, kLateOutcomes);
      if (core_.observed()) {
        Event e;
        e.kind = EventKind::late_outcome;
        e.at = TimePoint{Duration{core_.now_ns()}};
        e.queue = name_;
        e.job_id = id;
        e.job_name = job_name;
        e.elapsed = e.at - started;
        e.deliveries = delivery;
        e.attempt = delivery;
        e.error = out.reason();
        core_.emit(e);
      }
      if (f.result == SlotControl<>::Finish::stale_last) final_end(idx);
      return;
    }
    const std::uint64_t c = f.word;
    // We hold the slot in `finishing`. A plain completion needs the time only for its event:
    // skip the clock read (~50 ns on a VM) when nobody observes.
    bool plain_done = out.kind() == Outcome::Kind::done &&
                      !(ctl::flags(c) & ctl::kCancelRequested) && !core_.observed();
    std::int64_t now = plain_done ? 0 : core_.now_ns();
    if (ctl::flags(c) & ctl::kCancelRequested) {
      end_job(idx, EndKind::cancelled, DeadLetterReason::none, now, &wc);
      return;
    }
    if (out.kind() == Outcome::Kind::done) {
      end_job(idx, EndKind::completed, DeadLetterReason::none, now, &wc);
      return;
    }
    FailKind kind = out.kind() == Outcome::Kind::fail          ? FailKind::permanent
                    : out.kind() == Outcome::Kind::retry_after ? FailKind::retry_after
                                                               : FailKind::retry;
    fail_attempt(idx, out.take_reason(), kind, out.delay(), wc.rng, now, &wc);
  }

  /// FailKind: why an attempt failed, as far as what happens next is concerned.
  enum class FailKind : std::uint8_t {
    retry,        // backoff decides the delay
    retry_after,  // the handler gave the delay
    permanent,    // dead-letter now
    lapse,        // the lease lapsed: redeliver at once (SQS), lease_expired when exhausted
  };

  /// fail_attempt: the holder (in `finishing`) records a failed attempt and retries or ends it.
  void fail_attempt(std::uint32_t idx, std::string reason, FailKind kind, Duration explicit_delay,
                    SplitMix64& rng, std::int64_t now, WorkerContext* wc) {
    JobSlot& s = slots_[idx];
    const auto attempts = static_cast<std::uint16_t>(s.attempts() + 1);
    s.attempts_made.store(attempts, std::memory_order_relaxed);
    count(wc, kFailedAttempts);
    auto& log = extra(s).errors;
    if (log.capacity() < s.max_attempts) log.reserve(s.max_attempts);  // see SlotExtra
    log.push_back(AttemptRecord{attempts, now, std::move(reason)});
    const std::string& error = log.back().message;

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
      push_delayed(idx);
    } else {
      s.ctl.leave_finishing(SlotState::waiting);
      dispatch_.push_ready(idx);
    }
  }

  /// sweep_inline(now): inline mode's lease check, called whenever timers are processed.
  void sweep_inline(std::int64_t now) override {
    if (!leases_ || core_.mode() != Mode::inlined || !leases_enabled()) return;
    leases_->sweep(now, [&](std::uint64_t lease, std::int64_t) { lapse(lease, now); });
  }

  /// sweep_leases: the wheel owner's lease check (lease_tracker.hpp); re-arms itself.
  void sweep_leases(std::int64_t now, Wheel& wheel) {
    std::int64_t next =
        saturating_add(now, Duration{min_visibility_ns_.load(std::memory_order_relaxed)});
    if (leases_) {
      std::int64_t earliest =
          leases_->sweep(now, [&](std::uint64_t lease, std::int64_t) { lapse(lease, now); });
      next = std::min(next, earliest);
    }
    // A sweep due never is not armed: re-arming at a wrapped "now + max" made the timer thread
    // spin. arm_sweep() (a shorter visibility timeout) arms it again.
    if (!is_never(next)) wheel.schedule(sweep_node_, next);
  }

  /// lapse: a lease ran out. If its delivery is still the live one, take the slot from the
  /// handler (which keeps its pin: it is still reading the payload) and redeliver or end it.
  void lapse(std::uint64_t lease, std::int64_t now) {
    std::uint32_t idx = lease_slot(lease);
    JobSlot& s = slots_[idx];
    const auto l = s.ctl.lapse(lease_token(lease));
    if (!l.won) return;  // the handler's outcome won
    const std::uint64_t c = l.word;
    Duration elapsed{now - s.started()};
    stats_.add(kStalled);  // `active` keeps counting the stale handler until it returns
    if (core_.observed()) {
      Event e = make_event(EventKind::stalled, s, now);
      e.elapsed = elapsed;
      core_.emit(e);
    }
    if (ctl::flags(c) & ctl::kCancelRequested) {
      // cancel() already answered "flagged": the job ends cancelled, not redelivered.
      end_job(idx, EndKind::cancelled, DeadLetterReason::none, now, nullptr);
      return;
    }
    std::string reason = "lease expired after " + std::to_string(elapsed.count() / 1'000'000) +
                         " ms (visibility timeout " + std::to_string(s.visibility_ns / 1'000'000) +
                         " ms)";
    SplitMix64 unused(0);  // a lapse redelivers at once (SQS): no backoff, no randomness
    fail_attempt(idx, std::move(reason), FailKind::lapse, Duration{0}, unused, now, nullptr);
  }

  /// end_job: the holder (in `finishing`) ends the job: record it, then free the slot now, or
  /// leave it `ended` for the last stale handler to free.
  void end_job(std::uint32_t idx, EndKind kind, DeadLetterReason reason, std::int64_t now,
               WorkerContext* wc) {
    JobSlot& s = slots_[idx];
    record_end(s, kind, reason, now, wc);
    s.end_kind = kind;
    s.end_reason = reason;
    if (s.ctl.end()) final_end(idx);  // else the last stale handler to return frees it
  }

  /// record_end: the logical end of a job — counters, events, dedup release, history. Exactly
  /// once per job, by whoever decided the end.
  void record_end(JobSlot& s, EndKind kind, DeadLetterReason reason, std::int64_t now,
                  WorkerContext* wc) {
    JobId id = s.id.load(std::memory_order_relaxed);
    // Observers below may cancel this job: it is ending. (A frame only when someone observes.)
    std::optional<Holding> holding;
    if (core_.observed()) holding.emplace(s, true);
    if (s.has_dedup && !s.dedup_has_ttl)
      (void)dedup_.load(std::memory_order_acquire)->release(s.extra->dedup_key, id);
    switch (kind) {
      case EndKind::completed:
        count(wc, kCompleted);
        stats_.remember(id, JobStatus::completed);
        if (core_.observed()) emit(EventKind::completed, s, now);
        break;
      case EndKind::dead_lettered: {
        count(wc, kDeadLettered);
        stats_.remember(id, JobStatus::dead_lettered);
        if (core_.observed()) {
          Event ev = make_event(EventKind::dead_lettered, s, now);
          ev.reason = reason;
          ev.attempt = s.attempts();
          if (s.extra && !s.extra->errors.empty()) ev.error = s.extra->errors.back().message;
          core_.emit(ev);
        }
        break;
      }
      case EndKind::cancelled:
        count(wc, kCancelled);
        stats_.remember(id, JobStatus::cancelled);
        if (core_.observed()) emit(EventKind::cancelled, s, now);
        break;
      case EndKind::none:
        RAIL_INVARIANT(false, "a job ends as completed, dead-lettered or cancelled");
    }
  }

  /// reclaim_cancelled: the holder of a cancelled slot's index frees it (cancel() recorded the
  /// end already); with stale handlers or the canceller still pinning it, the last of them does.
  void reclaim_cancelled(std::uint32_t idx) {
    slots_[idx].end_kind = EndKind::cancelled;
    if (slots_[idx].ctl.end()) final_end(idx);
  }

  /// Holding: a slot this thread holds in `finishing` while it raises the job's events
  /// (fail_attempt, record_end). An observer on this thread that cancels that job must not wait
  /// for the holder, itself: cancel() records the request in the frame (honoured before the
  /// retry), or answers false once the job is ending. Frames nest (an observer's cancel of
  /// another job raises that job's events in turn), so they form a per-thread stack that
  /// try_cancel walks.
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

  /// try_cancel(idx, id): cancels job `id` if slot idx still holds it; nullopt if it does not,
  /// so that the caller's scan goes on.
  std::optional<bool> try_cancel(std::uint32_t idx, JobId id) {
    JobSlot& s = slots_[idx];
    std::uint64_t c = s.ctl.load();
    for (;;) {
      // The id is re-checked after every read of the word: a CAS against that word fails if
      // the slot was reused in between, so acting on a matching id is safe.
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
          if (ctl::state(r.word) == SlotState::finishing ||
              ctl::state(r.word) == SlotState::updating)
            std::this_thread::yield();  // a transition of a few stores is in progress
          c = r.word;
          continue;
        case SlotControl<>::Cancel::taken:
          end_cancelled(idx, ctl::state(r.word));
          return true;
      }
    }
  }

  /// end_cancelled(idx, from): cancel() took a waiting or delayed job (and holds a pin on its
  /// slot): record its end, then give the slot back. A delayed job's timer is unlinked here, so
  /// its capacity returns at once instead of at its deadline; a waiting job's slot returns when
  /// a worker pops its index.
  void end_cancelled(std::uint32_t idx, SlotState from) {
    JobSlot& s = slots_[idx];
    stats_.add(from == SlotState::waiting ? kFromReady : kFromDelayed);
    record_end(s, EndKind::cancelled, DeadLetterReason::none, core_.now_ns(), nullptr);
    bool held = false;
    if (from == SlotState::delayed) {
      // As the wheel's owner: link what is in transit, then take the node off the wheel; its
      // index is then ours. Re-entered from a timer callback on this thread, the wheel reclaims
      // the slot when the node fires instead.
      held = core_
                 .with_wheel([&](Wheel& wheel) {
                   drain_timer_inbox(wheel);
                   if (take_parked(s)) return true;      // due never: held by the wheel owner
                   if (!s.timer.linked()) return false;  // fired, or still on its way here
                   wheel.cancel(s.timer);
                   return true;
                 })
                 // Re-entered from a callback while this thread owns the wheel: a linked node is
                 // reclaimed when it fires, but a parked one never fires, so take it here (that
                 // touches only the node's deadline, never the wheel's lists).
                 .value_or(core_.owns_wheel() && take_parked(s));
    }
    const bool last = s.ctl.unpin();
    if (last) {
      final_end(idx);  // the index's holder came by while we recorded the end
    } else if (held) {
      reclaim_cancelled(idx);
    }
  }

  /// final_end: nobody pins the slot and its job has ended: file the DLQ entry, destroy the
  /// payload, and return the index to the free list.
  void final_end(std::uint32_t idx) {
    JobSlot& s = slots_[idx];
    std::optional<DeadLetter<T>> entry;
    if (s.end_kind == EndKind::dead_lettered) {
      entry.emplace(DeadLetter<T>{s.id.load(std::memory_order_relaxed),
                                  std::string(core_.names().name(s.name)),
                                  std::move(payload(idx)),
                                  s.end_reason,
                                  s.attempts(),
                                  s.max_attempts,
                                  TimePoint{Duration{s.added_ns}},
                                  TimePoint{Duration{core_.now_ns()}},
                                  {}});
      if (s.extra) {
        entry->errors.reserve(s.extra->errors.size());
        for (auto& r : s.extra->errors)
          entry->errors.push_back(AttemptError{r.attempt, TimePoint{Duration{r.at_ns}}, r.message});
      }
    }
    payload(idx).~T();
    s.ctl.mark_free();
    free_.push(idx);
    if (entry) dlq_.push(std::move(*entry));
  }

  Event make_event(EventKind kind, const JobSlot& s, std::int64_t now) const noexcept {
    Event e;
    e.kind = kind;
    e.at = TimePoint{Duration{now}};
    e.queue = name_;
    e.job_id = s.id.load(std::memory_order_relaxed);
    e.job_name = core_.names().name(s.name);
    e.attempt = s.attempts() + 1u;
    e.max_attempts = s.max_attempts;
    e.deliveries = s.delivered();
    return e;
  }
  void emit(EventKind kind, const JobSlot& s, std::int64_t now) const noexcept {
    core_.emit(make_event(kind, s, now));
  }
  void emit_added(const JobSlot& s, Duration delay) const noexcept {
    Event e = make_event(EventKind::added, s, s.added_ns);
    e.attempt = 0;
    e.delay = delay;
    core_.emit(e);
  }

  EngineCore& core_;
  std::string name_;
  QueueOptions options_;
  std::size_t capacity_;
  std::uint16_t index_ = 0;
  std::unique_ptr<JobSlot[]> slots_;
  // Owning, so that a member constructed after it that throws (the DLQ refusing its journal)
  // does not leak the cells.
  struct FreeCells {
    std::size_t bytes = 0;
    void operator()(Storage* p) const noexcept { free_aligned(p, bytes, alignof(Storage)); }
  };
  std::unique_ptr<Storage[], FreeCells> payload_;
  FreeSlots free_;
  MpmcRing<std::uint32_t> inbox_;
  QueueStats stats_;
  Dispatcher dispatch_;
  std::atomic<std::int64_t> min_visibility_ns_;
  TimerNode sweep_node_{};                    // owned by the wheel owner, like the slots' nodes
  std::atomic<bool> sweep_requested_{false};  // arm_sweep() -> the wheel owner (drain_timer_inbox)
  // The dedup window is built on the first add that carries a dedup id: a queue that never
  // deduplicates should not pay its memory (capacity x max key bytes).
  std::atomic<DedupSet*> dedup_{nullptr};
  std::unique_ptr<DedupSet> dedup_owner_;
  std::mutex dedup_init_mu_;
  mutable DeadLetterQueue<T> dlq_;
  std::mutex handler_mu_;
  Handler handler_;
  std::unique_ptr<LeaseTracker> leases_;
  std::atomic<bool> processing_{false};  // process() ran: check_options may re-arm the sweep
};

}  // namespace rail::detail

namespace rail {

template <class T>
RedriveStatus DeadLetterQueue<T>::redrive(JobId id) {
  std::size_t position = 0;
  auto e = take(id, TombstoneCause::redriven, &position);
  if (!e) return RedriveStatus::not_found;
  RedriveStatus s = queue_.redrive(std::move(*e));
  // Back where it was (its age order decides retention): redrive failed, nothing lost.
  if (s != RedriveStatus::redriven) put_back(std::move(*e), position);
  return s;
}

template <class T>
std::size_t DeadLetterQueue<T>::redrive_all() {
  std::size_t n = 0;
  while (auto e = take_front(TombstoneCause::redriven)) {
    if (queue_.redrive(std::move(*e)) != RedriveStatus::redriven) {
      put_back(std::move(*e));
      break;
    }
    ++n;
  }
  return n;
}

template <class T>
TimePoint DeadLetterQueue<T>::clock_now() const {
  return queue_.core().clock().now();
}

template <class T>
void DeadLetterQueue<T>::report(const std::vector<Evicted>& evicted) {
  for (const auto& e : evicted)
    queue_.emit_dlq(EventKind::dlq_evicted, e.id, e.name, 0);
}

template <class T>
void DeadLetterQueue<T>::fire_alert(std::size_t depth) {
  queue_.emit_dlq(EventKind::dlq_alert, 0, {}, static_cast<std::uint32_t>(depth));
  // Never with the wheel held (a lapse on the timer thread can dead-letter): the callback may
  // call back into the engine.
  if (options_.on_alert) queue_.core().after_wheel([cb = options_.on_alert, depth] { cb(depth); });
}

}  // namespace rail
