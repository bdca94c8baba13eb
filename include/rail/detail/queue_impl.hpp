// QueueImpl<T>: one named, typed, bounded queue — the part of a queue that touches its payload
// type. Where a job goes and who may change its state is the job flow's (job_flow.hpp, compiled
// once in src/); this layer keeps the payload cells' contents and the typed calls:
//   add / add_bulk   fill a slot's payload (JobFlow::add_with runs the rest of the add)
//   merges           a duplicate of a live job: debounce or replace a delayed job's payload
//                    (SlotControl::begin_update refuses while a stale handler still reads it),
//                    or keep it for after the running job (KeptAdds, kept_adds.hpp)
//   run_with         builds the handler's Job<T> view over a slot's payload and calls it
//   retire           a job's end: move the payload into its DLQ entry (filed by the bridge,
//                    dead_letter_bridge.hpp, which also owns overflow and redrive) or destroy it
//   take_leftovers   the payloads of jobs that never started, handed back after shutdown
// Memory ordering: a payload is written by its slot's holder before the flow publishes the slot
// (a ring push or a ctl release) and read by the next holder after it acquired it; see
// job_flow.hpp. The debounce writes it inside begin_update/end_update (slot_table.hpp).
#pragma once

#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "rail/add_receipt.hpp"
#include "rail/dead_letter_queue.hpp"
#include "rail/detail/dead_letter_bridge.hpp"
#include "rail/detail/job_flow.hpp"
#include "rail/detail/kept_adds.hpp"
#include "rail/detail/payload.hpp"
#include "rail/error.hpp"
#include "rail/job.hpp"
#include "rail/options.hpp"
#include "rail/outcome.hpp"

namespace rail::detail {

template <class T>
class QueueImpl final : public JobFlow {
  static_assert(std::is_nothrow_move_constructible_v<T>,
                "a queue's payload type must be nothrow move constructible: jobs move between "
                "the queue, the DLQ and redrive on paths that must not fail halfway");

 public:
  QueueImpl(EngineCore& core, std::string name, QueueOptions options)
      : JobFlow(core, std::move(name), std::move(options), sizeof(T), alignof(T)),
        bridge_(*this, JobFlow::options().dlq) {
    attach();
  }

  ~QueueImpl() override {
    stop_workers();
    join_workers();
    // Whatever is still unfinished dies with the queue: destroy the payloads it holds.
    for (std::uint32_t i = 0; i < capacity(); ++i)
      if (ctl::state(slot(i).ctl.load()) != SlotState::free) payload(i).~T();
  }

  QueueImpl(const QueueImpl&) = delete;
  QueueImpl& operator=(const QueueImpl&) = delete;

  std::type_index payload_type() const noexcept override { return typeid(T); }
  [[nodiscard]] DeadLetterQueue<T>& dlq() noexcept { return bridge_.dlq(); }

  // --- adding ------------------------------------------------------------------------------------
  AddReceipt add(std::string_view job_name, T&& data, const JobOptions& o) {
    return add_one(job_name, std::move(data), o);
  }

  /// Tracked: an add and the waiter of the job it names (see Queue::add_tracked).
  struct Tracked {
    AddReceipt added;
    std::shared_ptr<EndWaiter> waiter;
    bool sure = false;  // registered before the job was published
  };
  Tracked add_tracked(std::string_view job_name, T&& data, const JobOptions& o) {
    // Also across a duplicate's watch below: the job it merged into is in shutdown's report
    // only if its waiter is registered before the report abandons the job's waiters.
    const AddScope scope(&core());
    std::shared_ptr<EndWaiter> waiter;
    const AddReceipt r = add_one(job_name, std::move(data), o, AddFrom::producer, 0, &waiter);
    if (waiter) return {r, std::move(waiter), true};
    // A duplicate (tracked as the job it merged into), a DLQ entry (overflow), or nothing.
    if (r.id != 0) return {r, end_tracker().watch(r.id, false), false};
    auto none = std::make_shared<EndWaiter>();
    EndRecord end;
    end.error = "nothing was added to queue '" + name() + "': " + std::string(to_string(r.status));
    (void)none->resolve(end);
    return {r, std::move(none), true};
  }

  /// Who adds: a producer; a producer's add tried once more (see merge_duplicate); an add that
  /// was kept until its running job ended (run_deferred); or a schedule's run. A kept add and a
  /// run may not wait for room: they run where another job ended or a timer fired, possibly on
  /// the timer thread.
  enum class AddFrom : std::uint8_t { producer, producer_again, kept, schedule };

  /// add_one(..., from, prior, watch): add(), for the adder `from`; a kept add takes the dedup
  /// id over from its ended job `prior`, which held it for it. `watch`: a new job's waiter is
  /// registered there before the job is published (add_tracked), so its end cannot be missed.
  AddReceipt add_one(std::string_view job_name, T&& data, const JobOptions& o,
                     AddFrom from = AddFrom::producer, JobId prior = 0,
                     std::shared_ptr<EndWaiter>* watch = nullptr) {
    const bool may_block = from != AddFrom::kept && from != AddFrom::schedule;
    const AddScope scope(&core());  // shutdown waits for this add once it is past accepting()
    const Added a = add_with(job_name, o, may_block, prior, watch,
                             [&](void* cell) noexcept { ::new (cell) T(std::move(data)); });
    switch (a.what) {
      case Added::What::added:
      case Added::What::refused:
        return a.result;
      case Added::What::duplicate:
        return merge_duplicate(a.claim, job_name, std::move(data), o, a.now, from, watch);
      case Added::What::no_room:
        break;
    }
    return bridge_.overflow(job_name, std::move(data), o);
  }

  /// schedule(id, when, name, data, o): Queue::schedule. Validates as add() would, then upserts.
  ScheduleInfo schedule(std::string_view id, const Schedule& when, std::string_view job_name,
                        T&& data,
                        const ScheduleOptions& o) requires std::is_copy_constructible_v<T> {
    validate_schedule(id, job_name, o);
    ScheduleTable::Definition def{when, o, std::string(job_name), nullptr};
    def.add = [this, name = def.job_name, data = std::move(data),
               job = o.job](std::shared_ptr<EndWaiter>* watch) {
      return add_one(name, T(data), job, AddFrom::schedule, 0, watch);
    };
    return schedules().upsert(id, std::move(def));
  }

  /// add_bulk: all payloads get one name and one set of options (no dedup: ids differ per job).
  BulkAddReceipt add_bulk(std::string_view job_name, std::span<T> items, const JobOptions& o) {
    const AddScope scope(&core());  // shutdown waits for this add once it is past accepting()
    if (!core().accepting()) [[unlikely]]
      return {AddStatus::shutting_down, 0, 0};
    admit(job_name, o);
    if (!o.dedup.id.empty())
      throw Error(ErrorCode::invalid_option,
                  "add_bulk: JobOptions.dedup.id is '" + o.dedup.id +
                      "'; one dedup id cannot cover several jobs — use add() per job for dedup");
    if (items.empty()) return {AddStatus::added, 0, 0};
    // No room: what the overflow policy says, for the whole batch.
    const auto refuse = [&]() -> BulkAddReceipt {
      if (options().on_full != OnFull::dead_letter) return {AddStatus::full, 0, 0};
      BulkAddReceipt r{AddStatus::dead_lettered, 0, items.size()};
      for (auto& item : items) {
        auto one = bridge_.overflow(job_name, std::move(item), o);
        if (r.first_id == 0) r.first_id = one.id;
      }
      return r;
    };
    // More than the capacity never fits: answered at once, as a full queue that cannot wait.
    if (items.size() > capacity()) return refuse();
    const std::uint16_t name_id = core().names().intern(job_name);
    constexpr std::size_t kChunk = 256;
    std::uint32_t idx[kChunk];
    // All-or-nothing: reserve every slot first, so a full queue creates nothing.
    std::vector<std::uint32_t> big;
    std::uint32_t* held = idx;
    if (items.size() > kChunk) {
      big.resize(items.size());
      held = big.data();
    }
    if (!acquire_slots(held, items.size()))
      return core().accepting() ? refuse() : BulkAddReceipt{AddStatus::shutting_down, 0, 0};
    name_jobs(held, items.size(), name_id, job_name);
    const std::int64_t now = core().now_ns();
    const std::uint64_t first = core().next_ids(items.size());
    const bool observed = core().observed();
    for (std::size_t i = 0; i < items.size(); ++i) {
      init_slot(held[i], first + i, name_id, now, o);
      ::new (cell(held[i])) T(std::move(items[i]));
      if (observed) note_added(slot(held[i]), o.delay);
    }
    stats().add(kAdded, items.size());
    if (o.delay.count() > 0) {
      for (std::size_t i = 0; i < items.size(); ++i)
        publish_new(held[i], now, o.delay);
    } else {
      publish_ready(held, items.size());
    }
    warm_next_slot(items.size());
    return {AddStatus::added, first, items.size()};
  }

  // --- workers -----------------------------------------------------------------------------------
  /// set_handler(f, w): f is called as `Outcome f(Job<T>&)` (Queue::process adapts the rest).
  template <class F>
  void set_handler(F&& f, const WorkerOptions& w) {
    using Fn = std::decay_t<F>;
    static_assert(std::is_convertible_v<std::invoke_result_t<Fn&, Job<T>&>, Outcome>,
                  "QueueImpl::set_handler takes `Outcome f(Job<T>&)`: Queue::process adapts "
                  "handlers that return void, Result<R> or a Task before they get here");
    std::lock_guard lock(handler_mu_);
    if (handler_)
      throw Error(ErrorCode::invalid_option,
                  "queue '" + name() + "' already has a processor; call process() once per queue");
    validate_worker_options(w, name());
    handler_ = HandlerBox(new Fn(std::forward<F>(f)), [](void* p) { delete static_cast<Fn*>(p); });
    bind_handler(&run_with<Fn>, handler_.get());
    try {
      start_processing(w);
    } catch (...) {
      bind_handler(nullptr, nullptr);  // the flow undid its part: process() may be called again
      handler_.reset();
      throw;
    }
  }

  /// take_leftovers(): after shutdown, moves out every job that never started and that no
  /// handler still reads (a stale handler of a redelivered job pins it: shutdown reports it as
  /// still running, and a later call takes it once that handler returned).
  std::vector<Leftover<T>> take_leftovers() {
    if (core().accepting())
      throw Error(ErrorCode::wrong_mode,
                  "take_leftovers() on queue '" + name() + "' needs Engine::shutdown() first");
    std::vector<Leftover<T>> out;
    const bool taken = take_unstarted([&](std::uint32_t i, bool delayed) {
      const JobSlot& s = slot(i);
      out.push_back(Leftover<T>{s.id.load(std::memory_order_relaxed), std::string(job_name(s)),
                                std::move(payload(i)), s.attempts(), delayed});
      payload(i).~T();
    });
    if (!taken)
      throw Error(ErrorCode::would_deadlock,
                  "take_leftovers() on queue '" + name() +
                      "' was called from a callback that runs while timers fire; call it after "
                      "Engine::shutdown() returned, outside handlers and callbacks");
    // Adds kept for after a running job (keep_last_if_active): their job was taken above or
    // never starts again, or still runs past the grace and would file them to the DLQ when it
    // ends; handed back here instead, all of them, not lost
    // (PeerSemantics.AKeptAddIsNotLostWhenItsJobIsLeftOverAtShutdown pins it).
    kept_.take_all([&](typename KeptAdds<T>::Kept&& d) {
      out.push_back(Leftover<T>{0, std::move(d.name), std::move(d.data), 0, false});
    });
    return out;
  }

 private:
  T& payload(std::uint32_t idx) const noexcept {
    return *std::launder(reinterpret_cast<T*>(cell(idx)));
  }

  /// run_with<Fn>: the flow's RunHandler for a handler of type Fn.
  template <class Fn>
  static Outcome run_with(void* handler, JobFlow& flow, std::uint32_t idx,
                          const JobFields& fields) {
    Job<T> job(fields, &static_cast<QueueImpl&>(flow).payload(idx));
    return (*static_cast<Fn*>(handler))(job);
  }

  void retire(std::uint32_t idx, bool dead_letter, const Event* event) override {
    if (!dead_letter) [[likely]] {
      payload(idx).~T();
      release_slot(idx);
      return;
    }
    DeadLetter<T> entry = dead_letter_of(idx, std::move(payload(idx)));
    payload(idx).~T();
    release_slot(idx);  // the capacity returns before the DLQ's lock and its alert callback
    bridge_.file(std::move(entry), event);
  }

  bool file_copy(std::uint32_t idx, const Event* event) override {
    if constexpr (std::is_copy_constructible_v<T>) {
      std::optional<DeadLetter<T>> entry;
      try {
        entry.emplace(dead_letter_of(idx, T(payload(idx))));
      } catch (...) {
        return false;  // no memory for the copy: filed from the payload when the handler returns
      }
      leave_filed(idx);  // the slot is not ours from here on: the entry is a copy
      bridge_.file(std::move(*entry), event);
      return true;
    } else {
      // A move-only payload has one owner: the entry takes it when the last handler returns.
      (void)idx;
      (void)event;
      return false;
    }
  }

  bool in_dlq(JobId id) const override { return bridge_.contains(id); }
  std::optional<EndRecord> dlq_end(JobId id) const override { return bridge_.end_of(id); }

  /// merge_duplicate(claim, ...): an add whose dedup id a live job holds: debounce or replace it,
  /// keep it for after the running job (keep_last_if_active), or merge; the window restarts
  /// when asked to (extend, debounce).
  AddReceipt merge_duplicate(const DedupSet::Claim& claim, std::string_view job_name, T&& data,
                             const JobOptions& o, std::int64_t now, AddFrom from,
                             std::shared_ptr<EndWaiter>* watch = nullptr) {
    // A kept add finds the id taken by another job only if that job was added after the kept
    // add's own job let the id go (a ttl that lapsed), that is, by a newer add: it merges into
    // that one. Kept again or replacing, it would run after newer data, or overwrite an add kept
    // after it.
    if (from == AddFrom::kept) return note_duplicate(claim.owner, job_name, o, now, false);
    if (o.dedup.keep_last_if_active) {
      if (keep_last(claim, job_name, data, o))
        return note_duplicate(claim.owner, job_name, o, now, false, AddStatus::kept);
      // The kept job ended between the claim and the check (its id released, or held for its
      // ttl): one more try adds this as a new job, or merges it within the ttl, instead of
      // merging it into a job that will not run again.
      if (from == AddFrom::producer && !still_queued(claim))
        return add_one(job_name, std::move(data), o, AddFrom::producer_again, 0, watch);
    }
    const bool replaced =
        o.dedup.mode != DedupMode::merge && try_replace(claim, std::move(data), o, now);
    if (o.dedup.extend && !replaced)  // a replace restarted the window itself
      (void)claims().window().set_expiry(o.dedup.id, claim.owner, DedupClaims::window_end(o, now));
    return note_duplicate(claim.owner, job_name, o, now, replaced);
  }

  /// try_replace: while the kept job is still delayed, replace its payload; debounce also
  /// restarts its delay (the timer re-arms lazily: the timer port sees due_ns moved and
  /// reschedules), replace keeps it.
  bool try_replace(const DedupSet::Claim& claim, T&& data, const JobOptions& o, std::int64_t now) {
    const auto idx = static_cast<std::uint32_t>(claim.value);
    if (idx >= capacity()) return false;
    JobSlot& s = slot(idx);
    const std::uint64_t c = s.ctl.load();
    // The id is read after the word: if begin_update's CAS against that word succeeds, the slot
    // was not reused in between, so the id belongs to the job it takes.
    if (s.id.load(std::memory_order_relaxed) != claim.owner) return false;
    // Fails unless the job is still delayed and no stale handler of it still reads the payload:
    // the add then merges as a plain duplicate instead of writing under a reader.
    if (!s.ctl.begin_update(c)) return false;
    replace_payload(payload(idx), std::move(data));  // any payload: see payload.hpp
    bool later = false;
    if (o.dedup.mode == DedupMode::debounce) {
      const std::int64_t before = s.due_ns.load(std::memory_order_relaxed);
      const std::int64_t due = std::max(before, saturating_add(now, o.delay));
      s.due_ns.store(due, std::memory_order_relaxed);
      later = due > before;
      // Held on the wheel for its downstream, it now waits for its debounce: delayed (into
      // that gauge before out of `waiting`: counts() over-counts, never under).
      if (later && s.take_mark(JobSlot::kHeld)) {
        stats().add(kToDelayed);
        stats().add(kFromReady);
      }
    }
    if (o.dedup.ttl && (o.dedup.mode == DedupMode::debounce || o.dedup.extend))
      (void)claims().window().set_expiry(o.dedup.id, claim.owner, DedupClaims::window_end(o, now));
    s.ctl.end_update();
    // A debounced job no longer waits for its downstream's token: if it led the jobs waiting
    // for it, another leads (else the rest wait out the debounce:
    // DownstreamWakeups.ALeaderDebouncedLaterStepsDown pins it).
    if (later) links().stepped_aside(claim.owner);
    return true;
  }

  /// still_queued(claim): the claim's job is waiting or delayed (not running, not ended).
  bool still_queued(const DedupSet::Claim& claim) const noexcept {
    const auto idx = static_cast<std::uint32_t>(claim.value);
    if (idx >= capacity()) return false;
    const SlotState st = ctl::state(slot(idx).ctl.load());
    return (st == SlotState::waiting || st == SlotState::delayed || st == SlotState::updating) &&
           slot(idx).id.load(std::memory_order_relaxed) == claim.owner;
  }

  /// keep_last(claim, ...): the kept job runs: keep this add (the newest wins) to add after it.
  bool keep_last(const DedupSet::Claim& claim, std::string_view job_name, T& data,
                 const JobOptions& o) {
    const auto idx = static_cast<std::uint32_t>(claim.value);
    if (idx >= capacity()) return false;
    return kept_.keep(claim.owner, job_name, data, o, [&](auto&& keep, auto&& undo) {
      return claims().keep_while_active(idx, claim.owner, o.dedup.id, keep, undo);
    });
  }

  void collect_deferred(ShutdownReport& report) const override { kept_.list(report, name()); }

  void run_deferred(JobId id) noexcept override {
    std::optional<typename KeptAdds<T>::Kept> d = kept_.take(id);
    if (!d) return;
    const std::string& key = d->options.dedup.id;
    try {
      // The ended job held the id for the kept add (see the keep gate): the new job takes it
      // over in place, so that no newer add can make a job that this one would then follow.
      // An add that comes between taking the entry above and the claim finds the ended job
      // holding the id and no add kept for it: it merges, as it would into the waiting job.
      const AddReceipt r = add_one(d->name, std::move(d->data), d->options, AddFrom::kept, id);
      if (r.status == AddStatus::added || r.status == AddStatus::duplicate) return;
      if (r.status == AddStatus::dead_lettered) {  // filed (OnFull::dead_letter)
        // The id goes too (else it is held forever:
        // PeerSemantics.AKeptAddFiledByAFullDeadLetterQueueLetsTheIdGo pins it).
        (void)claims().window().release(key, id);
        return;
      }
    } catch (const std::exception&) {  // no memory, a throwing payload: it must not vanish
    }
    // No room (or no engine to run it): the kept add goes to the DLQ rather than nowhere, and
    // the id held for it is let go.
    (void)claims().window().release(key, id);
    try {
      // Its result names the DLQ entry (or says there was no room there either): this path
      // has nobody to tell.
      (void)bridge_.overflow(d->name, std::move(d->data), d->options, true);
    } catch (...) {  // no memory for the entry: nothing more can be done on this path
    }
  }

  DeadLetterBridge<T> bridge_;  // the DLQ, and the paths between it and the slots
  std::mutex handler_mu_;
  using HandlerBox = std::unique_ptr<void, void (*)(void*)>;
  HandlerBox handler_{nullptr, nullptr};  // the handler run_with calls (set_handler)
  KeptAdds<T> kept_;                      // adds kept for after a running job (keep_last_if_active)
};

}  // namespace rail::detail
