// QueueImpl<T>: one named, typed, bounded queue with its worker pool — the engine's hot path.
//
// Guarantee: every accepted job reaches exactly one end — completed, or dead-lettered — or is
// reported by shutdown; none is lost and none ends twice.
//
// Structure (C = capacity):
//   slots_[C], payload_[C]  preallocated job records (detail/job_slot.hpp)
//   free_      MPMC ring of free slot indices (initially all)
//   ready_     MPMC ring of slot indices whose job may start now
//   inbox_     MPMC ring of slot indices waiting to be linked into the timing wheel
// Each index is in exactly one ring or held by exactly one thread (job_slot.hpp's ownership
// invariant); every ring has capacity C, so pushing an index one holds never fails.
//
// Add:   pop free -> fill slot and payload -> push ready (or inbox when delayed) -> wake.
// Work:  pop ready -> CAS waiting->active -> handler -> one of:
//          done            -> release dedup id, destroy payload, push free
//          retry (+delay)  -> delayed: inbox (timer thread links it) | no delay: ready
//          out of attempts -> DLQ entry (payload moved), push free
// Timer: the wheel owner drains inbox_ into the wheel and, when a slot's time comes, CASes
//        delayed->waiting and pushes it to ready_.
//
// Memory ordering: a slot's plain fields and payload are written by their holder before the
// index is pushed to a ring and read by the next holder after popping it; MpmcRing's
// release-publish/acquire-consume per cell carries that happens-before. See job_slot.hpp for the
// control word used by non-holders.
//
// Threading: add/add_bulk from any thread; `concurrency` worker threads per queue (threaded
// mode) or the run_until_idle() caller (inline mode) run handlers.
// Shutdown: stop_workers() makes workers exit after their current handler; join_workers() waits.
#pragma once

#include <mimalloc.h>

#include <chrono>
#include <exception>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "rail/add_result.hpp"
#include "rail/dead_letter_queue.hpp"
#include "rail/detail/dedup_set.hpp"
#include "rail/detail/engine_core.hpp"
#include "rail/detail/event_count.hpp"
#include "rail/detail/job_slot.hpp"
#include "rail/detail/mpmc_ring.hpp"
#include "rail/detail/striped_counter.hpp"
#include "rail/error.hpp"
#include "rail/event.hpp"
#include "rail/job.hpp"
#include "rail/options.hpp"
#include "rail/outcome.hpp"

namespace rail::detail {

/// validate_job_options(o, where): throws Error(invalid_option) naming the bad field.
void validate_job_options(const JobOptions& o, std::string_view where);
void validate_queue_options(const QueueOptions& o, std::string_view queue);

enum Counter : std::size_t {
  kAdded,
  kStarted,
  kAttemptEnded,
  kCompleted,
  kFailedAttempts,
  kDeadLettered,
  kDeduplicated,
  kToReady,
  kFromReady,
  kToDelayed,
  kFromDelayed,
  kCounterKinds
};

template <class T>
class QueueImpl final : public QueueBase {
  static_assert(std::is_nothrow_move_constructible_v<T>,
                "a queue's payload type must be nothrow move constructible: jobs move between "
                "the queue, the DLQ and redrive on paths that must not fail halfway");
  static_assert(std::is_move_assignable_v<T>, "debounce replaces payloads by move assignment");

 public:
  using Handler = std::function<Outcome(Job<T>&)>;

  QueueImpl(EngineCore& core, std::string name, QueueOptions options)
      : core_(core),
        name_(std::move(name)),
        options_(std::move(options)),
        capacity_(options_.capacity),
        slots_(std::make_unique<JobSlot[]>(capacity_)),
        payload_(static_cast<Storage*>(
            ::operator new[](sizeof(Storage) * capacity_, std::align_val_t{alignof(Storage)}))),
        free_(capacity_),
        ready_(capacity_),
        inbox_(capacity_),
        dlq_(*this, options_.dlq) {
    for (std::uint32_t i = 0; i < capacity_; ++i) {
      if (!free_.try_push(i)) throw Error(ErrorCode::internal, "free ring smaller than capacity");
    }
    index_ = core_.register_queue(this);
    // The wheel hands back only the node; its tag routes the firing to this queue's slot.
    for (std::uint32_t i = 0; i < capacity_; ++i)
      slots_[i].timer.tag = (std::uint64_t{index_} << 32) | i;
  }

  ~QueueImpl() override {
    stop_workers();
    join_workers();
    // Whatever is still unfinished dies with the queue: destroy the payloads it holds.
    for (std::size_t i = 0; i < capacity_; ++i) {
      if (ctl_state(slots_[i].ctl.load(std::memory_order_acquire)) != SlotState::free)
        payload(static_cast<std::uint32_t>(i)).~T();
      if (slots_[i].extra) {
        slots_[i].extra->~SlotExtra();
        mi_free(slots_[i].extra);
      }
    }
    ::operator delete[](payload_, std::align_val_t{alignof(Storage)});
  }

  QueueImpl(const QueueImpl&) = delete;
  QueueImpl& operator=(const QueueImpl&) = delete;

  // --- QueueBase ---------------------------------------------------------------------------------
  const std::string& name() const noexcept override { return name_; }
  std::type_index payload_type() const noexcept override { return typeid(T); }
  [[nodiscard]] const QueueOptions& options() const noexcept { return options_; }
  [[nodiscard]] DeadLetterQueue<T>& dlq() noexcept { return dlq_; }
  [[nodiscard]] EngineCore& core() noexcept { return core_; }

  QueueCounts counts() const noexcept override {
    auto r = [&](Counter c) { return counters_.read(c); };
    auto gauge = [](std::uint64_t in, std::uint64_t out) { return in > out ? in - out : 0; };
    QueueCounts c;
    c.added = r(kAdded);
    c.completed = r(kCompleted);
    c.failed_attempts = r(kFailedAttempts);
    c.dead_lettered = r(kDeadLettered);
    c.deduplicated = r(kDeduplicated);
    c.waiting = gauge(r(kToReady), r(kFromReady));
    c.delayed = gauge(r(kToDelayed), r(kFromDelayed));
    c.active = gauge(r(kStarted), r(kAttemptEnded));
    return c;
  }

  void collect_leftovers(ShutdownReport& report) const override {
    for (std::size_t i = 0; i < capacity_; ++i) {
      const JobSlot& s = slots_[i];
      SlotState st = ctl_state(s.ctl.load(std::memory_order_acquire));
      if (st == SlotState::free) continue;
      LeftoverJob j{name_, s.id.load(std::memory_order_relaxed),
                    std::string(core_.names().name(s.name)), s.attempts_made};
      (st == SlotState::active ? report.still_running : report.not_started).push_back(std::move(j));
    }
  }

  // --- adding
  // --------------------------------------------------------------------------------------
  AddResult add(std::string_view job_name, T&& data, const JobOptions& o) {
    if (!core_.accepting()) throw_shutting_down();
    validate_job_options(o, "JobOptions");
    if (o.backoff.kind == BackoffKind::custom && !options_.custom_backoff) [[unlikely]]
      throw Error(ErrorCode::invalid_option,
                  "JobOptions.backoff is custom but queue '" + name_ +
                      "' has no QueueOptions.custom_backoff; expected one to compute delays");
    std::uint16_t name_id = core_.names().intern(job_name);
    std::uint32_t idx;
    if (!acquire_slots(&idx, 1)) return overflow(name_id, std::move(data), o);
    std::int64_t now = core_.now_ns();
    JobSlot& s = slots_[idx];
    std::uint64_t id;
    if (!o.dedup.id.empty()) {
      std::int64_t expires = o.dedup.ttl ? now + o.dedup.ttl->count() : DedupSet::kNoExpiry;
      auto claim = dedup().try_claim(o.dedup.id, now, expires, [&]() noexcept {
        return std::pair<std::uint64_t, std::uint64_t>{core_.next_ids(1), idx};
      });
      if (claim.result != DedupSet::Claim::Result::inserted) {
        release_unused_slot(idx);
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
    counters_.add(kAdded);
    if (core_.observed()) emit_added(s, o.delay);
    publish_new(idx, now, o.delay);
    return {id, AddStatus::added};
  }

  /// add_bulk: all payloads get one name and one set of options (no dedup: ids differ per job).
  BulkAddResult add_bulk(std::string_view job_name, std::span<T> items, const JobOptions& o) {
    if (!core_.accepting()) throw_shutting_down();
    validate_job_options(o, "JobOptions");
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
    counters_.add(kAdded, items.size());
    if (o.delay.count() > 0) {
      for (std::size_t i = 0; i < items.size(); ++i)
        publish_new(held[i], now, o.delay);
    } else {
      for (std::size_t i = 0; i < items.size(); ++i)
        slots_[held[i]].ctl.store(
            next_ctl(slots_[held[i]].ctl.load(std::memory_order_relaxed), SlotState::waiting),
            std::memory_order_relaxed);  // published by the ring push
      push_ready_bulk(held, items.size());
    }
    return {AddStatus::added, first, items.size()};
  }

  // --- workers
  // -------------------------------------------------------------------------------------
  void set_handler(Handler h, const WorkerOptions& w) {
    if (handler_)
      throw Error(ErrorCode::invalid_option,
                  "queue '" + name_ + "' already has a processor; call process() once per queue");
    if (w.concurrency == 0)
      throw Error(ErrorCode::invalid_option,
                  "WorkerOptions.concurrency is 0 for queue '" + name_ + "'; expected 1 or more");
    handler_ = std::move(h);
    if (core_.mode() == Mode::threaded) {
      for (std::uint32_t i = 0; i < w.concurrency; ++i)
        workers_.emplace_back([this, i] { worker_loop(i); });
    }
  }

  std::size_t run_ready(std::size_t max) override {
    if (!handler_) return 0;
    Worker w{SplitMix64(core_.seed() ^ index_)};
    std::size_t ran = 0;
    std::uint32_t idx;
    while (ran < max && ready_.try_pop(idx)) {
      counters_.add(kFromReady);
      run(idx, w);
      ++ran;
    }
    return ran;
  }

  void stop_workers() noexcept override {
    stop_.store(true, std::memory_order_release);  // workers' acquire load sees it
    ready_ec_.notify_all();
  }
  void join_workers() noexcept override {
    for (auto& t : workers_)
      if (t.joinable()) t.join();
  }

  // --- timers
  // --------------------------------------------------------------------------------------
  void drain_timer_inbox(Wheel& wheel) noexcept override {
    std::uint32_t idx;
    while (inbox_.try_pop(idx)) {
      JobSlot& s = slots_[idx];
      // relaxed: due_ns was written by the pusher before the inbox push (ring acquire).
      wheel.schedule(s.timer, s.due_ns.load(std::memory_order_relaxed));
    }
  }

  void fire(std::uint32_t idx, std::int64_t now, Wheel& wheel) noexcept override {
    JobSlot& s = slots_[idx];
    for (;;) {
      std::uint64_t c = s.ctl.load(std::memory_order_acquire);  // sees a debounce's writes
      if (ctl_state(c) == SlotState::updating) {
        std::this_thread::yield();  // a debounce is replacing the payload: a few stores
        continue;
      }
      std::int64_t due = s.due_ns.load(std::memory_order_relaxed);  // ordered by ctl acquire
      if (due > now) {  // a debounce moved the deadline later
        wheel.schedule(s.timer, due);
        return;
      }
      // acq_rel: wins the slot against a concurrent debounce.
      if (s.ctl.compare_exchange_strong(c, next_ctl(c, SlotState::waiting),
                                        std::memory_order_acq_rel)) {
        counters_.add(kFromDelayed);
        if (core_.observed()) emit(EventKind::retry_due, s, now);
        push_ready(idx);
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
    counters_.add(kAdded);
    if (core_.observed()) emit(EventKind::redriven, slots_[idx], now);
    publish_new(idx, now, Duration{0});
    return RedriveStatus::redriven;
  }

  void emit_dlq(EventKind kind, JobId id, std::string_view job_name, std::uint32_t depth) {
    if (!core_.observed()) return;
    Event e;
    e.kind = kind;
    e.at = TimePoint{Duration{core_.now_ns()}};
    e.queue = name_;
    e.job_id = id;
    e.job_name = job_name;
    e.attempt = depth;
    core_.emit(e);
  }

 private:
  using Storage = std::aligned_storage_t<sizeof(T), alignof(T)>;

  struct Worker {
    SplitMix64 rng;
  };

  T& payload(std::uint32_t idx) noexcept {
    return *std::launder(reinterpret_cast<T*>(&payload_[idx]));
  }

  SlotExtra& extra(JobSlot& s) {
    if (!s.extra)
      s.extra = ::new (mi_malloc_aligned(sizeof(SlotExtra), alignof(SlotExtra))) SlotExtra();
    return *s.extra;
  }

  DedupSet& dedup() {
    // acquire: pairs with the release below, so a reader sees a fully built set.
    if (DedupSet* d = dedup_.load(std::memory_order_acquire)) [[likely]]
      return *d;
    std::lock_guard lock(dedup_init_mu_);  // cold: once per queue
    if (!dedup_owner_) {
      dedup_owner_ =
          std::make_unique<DedupSet>(options_.dedup_capacity ? options_.dedup_capacity : capacity_);
      dedup_.store(dedup_owner_.get(), std::memory_order_release);
    }
    return *dedup_owner_;
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
    auto deadline = std::chrono::steady_clock::now() + options_.block_timeout;
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
    std::size_t got = 0;
    while (got < n) {
      std::size_t k = free_.try_pop_bulk(out + got, n - got);
      if (k == 0) break;
      got += k;
    }
    if (got == n) return true;
    for (std::size_t i = 0; i < got; ++i)
      push_held(free_, out[i]);
    return false;
  }

  void release_unused_slot(std::uint32_t idx) noexcept { push_held(free_, idx); }

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
    s.started_ns = 0;
    s.prev_delay_ns = 0;
    s.attempts_made = 0;
    s.max_attempts = static_cast<std::uint32_t>(o.attempts);
    s.set_backoff(o.backoff);
    if (s.extra) s.extra->errors.clear();
  }

  /// publish_new: a filled slot enters the waiting or delayed state.
  void publish_new(std::uint32_t idx, std::int64_t now, Duration delay) noexcept {
    JobSlot& s = slots_[idx];
    std::uint64_t c = s.ctl.load(std::memory_order_relaxed);  // we hold the slot
    if (delay.count() > 0) {
      s.due_ns.store(now + delay.count(), std::memory_order_relaxed);
      // release: a debounce that finds this slot through the dedup set sees a complete job.
      s.ctl.store(next_ctl(c, SlotState::delayed), std::memory_order_release);
      push_delayed(idx);
    } else {
      s.ctl.store(next_ctl(c, SlotState::waiting), std::memory_order_release);
      push_ready(idx);
    }
  }

  void push_ready(std::uint32_t idx) noexcept {
    counters_.add(kToReady);
    push_held(ready_, idx);
    ready_ec_.notify();
  }
  void push_ready_bulk(const std::uint32_t* idx, std::size_t n) noexcept {
    counters_.add(kToReady, n);
    std::size_t done = 0;
    while (done < n) {
      std::size_t k = ready_.try_push_bulk(idx + done, n - done);
      if (k == 0) std::this_thread::yield();  // transient, as in push_held
      done += k;
    }
    for (std::size_t i = 0; i < n && i < workers_.size(); ++i)
      ready_ec_.notify();
    if (workers_.empty()) ready_ec_.notify();
  }
  void push_delayed(std::uint32_t idx) noexcept {
    counters_.add(kToDelayed);
    push_held(inbox_, idx);
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
    counters_.add(kAdded);
    counters_.add(kDeadLettered);
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
    counters_.add(kDeduplicated);
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
    std::uint64_t c = s.ctl.load(std::memory_order_acquire);
    if (ctl_state(c) != SlotState::delayed) return false;
    if (s.id.load(std::memory_order_relaxed) != claim.owner) return false;
    // acq_rel: takes the slot from the timer (which CASes delayed->waiting) and acquires the
    // job's fields; if the slot was reused since `c`, its seq moved and this fails.
    if (!s.ctl.compare_exchange_strong(c, next_ctl(c, SlotState::updating),
                                       std::memory_order_acq_rel))
      return false;
    payload(idx) = std::move(data);
    std::int64_t due = std::max(s.due_ns.load(std::memory_order_relaxed), now + o.delay.count());
    s.due_ns.store(due, std::memory_order_relaxed);
    if (o.dedup.ttl) (void)dedup().set_expiry(o.dedup.id, claim.owner, now + o.dedup.ttl->count());
    // release: the timer's acquire load of ctl sees the new payload and due time.
    s.ctl.store(next_ctl(next_ctl(c, SlotState::updating), SlotState::delayed),
                std::memory_order_release);
    return true;
  }

  void worker_loop(std::uint32_t worker_index) {
    Worker w{SplitMix64(core_.seed() ^ (std::uint64_t{index_} << 32) ^ worker_index)};
    std::uint32_t idx;
    while (!stop_.load(std::memory_order_acquire)) {
      if (ready_.try_pop(idx)) {
        counters_.add(kFromReady);
        run(idx, w);
        continue;
      }
      // Spin briefly: at high rates the next job arrives within a hand-off (~100 ns), far
      // cheaper than a futex sleep and wake (1-5 us).
      bool got = false;
      for (int spin = 0; spin < 64 && !got; ++spin) {
        std::this_thread::yield();
        got = ready_.try_pop(idx);
      }
      if (got) {
        counters_.add(kFromReady);
        run(idx, w);
        continue;
      }
      std::uint32_t key = ready_ec_.prepare_wait();
      if (ready_.try_pop(idx)) {
        ready_ec_.cancel_wait();
        counters_.add(kFromReady);
        run(idx, w);
        continue;
      }
      if (stop_.load(std::memory_order_acquire)) {
        ready_ec_.cancel_wait();
        break;
      }
      ready_ec_.wait(key);
    }
  }

  void run(std::uint32_t idx, Worker& w) {
    JobSlot& s = slots_[idx];
    std::uint64_t c = s.ctl.load(std::memory_order_acquire);
    std::uint64_t active = next_ctl(c, SlotState::active);
    s.ctl.store(active, std::memory_order_release);  // holder transition (state() readers)
    std::int64_t now = core_.now_ns();
    s.started_ns = now;
    counters_.add(kStarted);
    Job<T> job;
    job.id_ = s.id.load(std::memory_order_relaxed);
    job.name_ = core_.names().name(s.name);
    job.queue_ = name_;
    job.data_ = &payload(idx);
    job.attempts_made_ = s.attempts_made;
    job.max_attempts_ = s.max_attempts;
    job.added_at_ = TimePoint{Duration{s.added_ns}};
    job.started_at_ = TimePoint{Duration{now}};
    if (s.extra && !s.extra->errors.empty()) job.last_error_ = s.extra->errors.back().message;
    if (core_.observed()) emit(EventKind::started, s, now);

    Outcome out;
    try {
      out = handler_(job);
    } catch (const std::exception& e) {
      out = Outcome::retry(e.what());
    } catch (...) {
      out = Outcome::retry("handler threw a non-std::exception");
    }
    counters_.add(kAttemptEnded);
    finish(idx, active, std::move(out), w);
  }

  void finish(std::uint32_t idx, std::uint64_t active, Outcome&& out, Worker& w) {
    JobSlot& s = slots_[idx];
    std::int64_t now = core_.now_ns();
    if (out.kind() == Outcome::Kind::done) {
      counters_.add(kCompleted);
      if (core_.observed()) emit(EventKind::completed, s, now);
      end_job(idx, active);
      return;
    }
    ++s.attempts_made;
    counters_.add(kFailedAttempts);
    auto& log = extra(s).errors;
    log.push_back(AttemptRecord{s.attempts_made, now, out.take_reason()});
    const std::string& error = log.back().message;

    DeadLetterReason reason = DeadLetterReason::none;
    Duration delay{0};
    if (out.kind() == Outcome::Kind::fail) {
      reason = DeadLetterReason::permanent_failure;
    } else if (s.attempts_made >= s.max_attempts) {
      reason = DeadLetterReason::attempts_exhausted;
    } else if (out.kind() == Outcome::Kind::retry_after) {
      delay = out.delay();
    } else {
      RetryContext ctx{s.id.load(std::memory_order_relaxed), s.attempts_made, error,
                       Duration{s.prev_delay_ns}};
      delay = next_delay(s.backoff(), ctx, &options_.custom_backoff, w.rng);
      if (delay.count() < 0) reason = DeadLetterReason::backoff_stopped;
    }
    if (core_.observed()) {
      Event e = make_event(EventKind::attempt_failed, s, now);
      e.attempt = s.attempts_made;  // the attempt that just failed
      e.error = error;
      e.delay = reason == DeadLetterReason::none ? delay : Duration{-1};
      core_.emit(e);
    }
    if (reason != DeadLetterReason::none) {
      dead_letter(idx, active, reason, now);
      return;
    }
    s.prev_delay_ns = delay.count();
    if (delay.count() > 0) {
      s.due_ns.store(now + delay.count(), std::memory_order_relaxed);
      s.ctl.store(next_ctl(active, SlotState::delayed), std::memory_order_release);
      push_delayed(idx);
    } else {
      s.ctl.store(next_ctl(active, SlotState::waiting), std::memory_order_release);
      push_ready(idx);
    }
  }

  void dead_letter(std::uint32_t idx, std::uint64_t active, DeadLetterReason reason,
                   std::int64_t now) {
    JobSlot& s = slots_[idx];
    DeadLetter<T> e{s.id.load(std::memory_order_relaxed),
                    std::string(core_.names().name(s.name)),
                    std::move(payload(idx)),
                    reason,
                    s.attempts_made,
                    s.max_attempts,
                    TimePoint{Duration{s.added_ns}},
                    TimePoint{Duration{now}},
                    {}};
    if (s.extra) {
      e.errors.reserve(s.extra->errors.size());
      for (auto& r : s.extra->errors)
        e.errors.push_back(AttemptError{r.attempt, TimePoint{Duration{r.at_ns}}, r.message});
    }
    counters_.add(kDeadLettered);
    if (core_.observed()) {
      Event ev = make_event(EventKind::dead_lettered, s, now);
      ev.reason = reason;
      ev.error = e.last_error();
      ev.attempt = s.attempts_made;
      core_.emit(ev);
    }
    end_job(idx, active);
    dlq_.push(std::move(e));
  }

  /// end_job: the job is finished (completed or dead-lettered): free everything it held.
  void end_job(std::uint32_t idx, std::uint64_t active) noexcept {
    JobSlot& s = slots_[idx];
    if (s.has_dedup && !s.dedup_has_ttl)
      (void)dedup_.load(std::memory_order_acquire)
          ->release(s.extra->dedup_key, s.id.load(std::memory_order_relaxed));
    payload(idx).~T();
    s.ctl.store(next_ctl(active, SlotState::free), std::memory_order_release);
    push_held(free_, idx);
  }

  Event make_event(EventKind kind, const JobSlot& s, std::int64_t now) const noexcept {
    Event e;
    e.kind = kind;
    e.at = TimePoint{Duration{now}};
    e.queue = name_;
    e.job_id = s.id.load(std::memory_order_relaxed);
    e.job_name = core_.names().name(s.name);
    e.attempt = s.attempts_made + 1;
    e.max_attempts = s.max_attempts;
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
  Storage* payload_;
  MpmcRing<std::uint32_t> free_;
  MpmcRing<std::uint32_t> ready_;
  MpmcRing<std::uint32_t> inbox_;
  EventCount ready_ec_;
  // The dedup window is built on the first add that carries a dedup id: a queue that never
  // deduplicates should not pay its memory (capacity x max key bytes).
  std::atomic<DedupSet*> dedup_{nullptr};
  std::unique_ptr<DedupSet> dedup_owner_;
  std::mutex dedup_init_mu_;
  DeadLetterQueue<T> dlq_;
  StripedCounters<kCounterKinds> counters_;
  Handler handler_;
  std::vector<std::thread> workers_;
  std::atomic<bool> stop_{false};
};

}  // namespace rail::detail

namespace rail {

template <class T>
RedriveStatus DeadLetterQueue<T>::redrive(JobId id) {
  auto e = remove(id);
  if (!e) return RedriveStatus::not_found;
  RedriveStatus s = queue_.redrive(std::move(*e));
  if (s != RedriveStatus::redriven) {
    std::lock_guard lock(mu_);
    entries_.push_front(std::move(*e));  // back where it was: redrive failed, nothing lost
  }
  return s;
}

template <class T>
std::size_t DeadLetterQueue<T>::redrive_all() {
  std::size_t n = 0;
  for (;;) {
    std::optional<DeadLetter<T>> e;
    {
      std::lock_guard lock(mu_);
      if (entries_.empty()) break;
      e = std::move(entries_.front());
      entries_.pop_front();
      rearm_alert_locked();
    }
    if (queue_.redrive(std::move(*e)) != RedriveStatus::redriven) {
      std::lock_guard lock(mu_);
      entries_.push_front(std::move(*e));
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
  if (options_.on_alert) options_.on_alert(depth);
}

}  // namespace rail
