// QueueImpl: the payload-carrying calls of a queue (adds, bulk adds, schedules, the handler's
// binding, a job's end, leftovers); the contract is in include/rail/detail/queue_impl.hpp.
#include "rail/detail/queue_impl.hpp"

#include <exception>
#include <optional>
#include <utility>
#include <vector>

#include "rail/error.hpp"

namespace rail::detail {

QueueImpl::QueueImpl(EngineCore& core, std::string name, QueueOptions options,
                     const PayloadOps& ops)
    : JobFlow(core, std::move(name), std::move(options), ops.size, ops.align),
      ops_(ops),
      bridge_(*this, JobFlow::options().dlq, ops),
      kept_(ops) {
  attach();
}

QueueImpl::~QueueImpl() {
  stop_workers();
  join_workers();
  // Whatever is still unfinished dies with the queue: destroy the payloads it holds.
  if (ops_.destroy == nullptr) return;
  for (std::uint32_t i = 0; i < capacity(); ++i)
    if (ctl::state(slot(i).ctl.load()) != SlotState::free) ops_.destroy(payload(i));
}

AddReceipt QueueImpl::add_one(std::string_view job_name, void* data, const JobOptions& o,
                              AddFrom from, JobId prior, std::shared_ptr<EndWaiter>* watch) {
  const bool may_block = from != AddFrom::kept && from != AddFrom::schedule;
  const AddScope scope(&core());  // shutdown waits for this add once it is past accepting()
  const Added a = add_with(job_name, o, may_block, prior, watch,
                           [&](void* cell) noexcept { ops_.move(cell, data); });
  switch (a.what) {
    case Added::What::added:
    case Added::What::refused:
      return a.result;
    case Added::What::duplicate:
      return merge_duplicate(a.claim, job_name, data, o, a.now, from, watch);
    case Added::What::no_room:
      break;
  }
  const AddReceipt r = bridge_.overflow(job_name, data, o);
  if (r.status == AddStatus::full) stats().add(kRejected);
  return r;
}

QueueFront::TrackedAdd QueueImpl::add_tracked(std::string_view job_name, void* data,
                                              const JobOptions& o) {
  // Also across a duplicate's watch below: the job it merged into is in shutdown's report only
  // if its waiter is registered before the report abandons the job's waiters.
  const AddScope scope(&core());
  std::shared_ptr<EndWaiter> waiter;
  const AddReceipt r = add_one(job_name, data, o, AddFrom::producer, 0, &waiter);
  if (waiter) return {r, std::move(waiter), true};
  // A duplicate (tracked as the job it merged into), a DLQ entry (overflow), or nothing.
  if (r.id != 0) return {r, end_tracker().watch(r.id, false), false};
  auto none = std::make_shared<EndWaiter>();
  EndRecord end;
  end.error = "nothing was added to queue '" + name() + "': " + std::string(to_string(r.status));
  (void)none->resolve(end);
  return {r, std::move(none), true};
}

ScheduleInfo QueueImpl::schedule(std::string_view id, const Schedule& when,
                                 std::string_view job_name, void* data, const ScheduleOptions& o) {
  validate_schedule(id, job_name, o);
  ScheduleTable::Definition def{when, o, std::string(job_name), nullptr};
  // Each run adds a copy of the template (Queue::schedule requires a copyable payload).
  auto kept = std::make_shared<PayloadBox>(ops_, data);
  def.add = [this, name = def.job_name, kept, job = o.job](std::shared_ptr<EndWaiter>* watch) {
    PayloadBox run = kept->copy();
    return add_one(name, run.get(), job, AddFrom::schedule, 0, watch);
  };
  return schedules().upsert(id, std::move(def));
}

BulkAddReceipt QueueImpl::add_bulk(std::string_view job_name, void* items, std::size_t n,
                                   const JobOptions& o) {
  const AddScope scope(&core());  // shutdown waits for this add once it is past accepting()
  if (!core().accepting()) [[unlikely]]
    return {AddStatus::shutting_down, 0, 0};
  admit(job_name, o);
  if (!o.dedup.id.empty())
    throw Error(ErrorCode::invalid_option,
                "add_bulk: JobOptions.dedup.id is '" + o.dedup.id +
                    "'; one dedup id cannot cover several jobs — use add() per job for dedup");
  if (!o.after.empty())
    throw Error(ErrorCode::invalid_option,
                "add_bulk: JobOptions.after names " + std::to_string(o.after.size()) +
                    " children; a bulk add cannot make each of its jobs wait — use add() per "
                    "parent");
  if (n == 0) return {AddStatus::added, 0, 0};
  const auto item = [&](std::size_t i) { return static_cast<char*>(items) + i * ops_.size; };
  // No room: what the overflow policy says, for the whole batch.
  const auto refuse = [&]() -> BulkAddReceipt {
    if (options().on_full != OnFull::dead_letter) {
      stats().add(kRejected, n);
      return {AddStatus::full, 0, 0};
    }
    BulkAddReceipt r{AddStatus::dead_lettered, 0, n};
    for (std::size_t i = 0; i < n; ++i) {
      auto one = bridge_.overflow(job_name, item(i), o);
      if (r.first_id == 0) r.first_id = one.id;
    }
    return r;
  };
  // More than the capacity never fits: answered at once, as a full queue that cannot wait.
  if (n > capacity()) return refuse();
  const std::uint16_t name_id = core().names().intern(job_name);
  constexpr std::size_t kChunk = 256;
  std::uint32_t idx[kChunk];
  // All-or-nothing: reserve every slot first, so a full queue creates nothing.
  std::vector<std::uint32_t> big;
  std::uint32_t* held = idx;
  if (n > kChunk) {
    big.resize(n);
    held = big.data();
  }
  if (!acquire_slots(held, n))
    return core().accepting() ? refuse() : BulkAddReceipt{AddStatus::shutting_down, 0, 0};
  name_jobs(held, n, name_id, job_name);
  const std::int64_t now = core().now_ns();
  const std::uint64_t first = core().next_ids(n);
  const bool observed = core().observed();
  // The slots' lines were last written on workers' cores: fetch them kWarmAhead slots ahead of
  // the fills, so that their misses overlap instead of stalling each fill in turn.
  constexpr std::size_t kWarmAhead = 8;
  for (std::size_t i = 0; i < std::min(n, kWarmAhead); ++i)
    warm_slot(held[i]);
  for (std::size_t i = 0; i < n; ++i) {
    if (i + kWarmAhead < n) warm_slot(held[i + kWarmAhead]);
    init_slot(held[i], first + i, name_id, now, o);
  }
  if (Lines::wanted(o)) enter_lines(held, n, o);  // gives every slot back if it throws
  for (std::size_t i = 0; i < n; ++i) {
    ops_.move(cell(held[i]), item(i));
    if (observed) note_added(slot(held[i]), o.delay);
  }
  stats().add(kAdded, n);
  if (o.delay.count() > 0) {
    for (std::size_t i = 0; i < n; ++i)
      publish_new(held[i], now, o.delay, false);
  } else {
    publish_ready(held, n);
  }
  published(expire_at(o, now));
  warm_next_slot();
  return {AddStatus::added, first, n};
}

void QueueImpl::check_processor(const WorkerOptions& w) const {
  std::lock_guard lock(handler_mu_);
  check_processor_locked(w);
}

void QueueImpl::check_processor_locked(const WorkerOptions& w) const {
  if (handler_)
    throw Error(ErrorCode::invalid_option,
                "queue '" + name() + "' already has a processor; call process() once per queue");
  validate_worker_options(w, name());
}

void QueueImpl::set_handler(RunHandler run, HandlerBox handler, const WorkerOptions& w) {
  std::lock_guard lock(handler_mu_);
  check_processor_locked(w);  // again: another process() may have bound one since the check
  start_bound(run, std::move(handler), w);
}

void QueueImpl::start_bound(RunHandler run, HandlerBox handler, const WorkerOptions& w) {
  handler_ = std::move(handler);
  // A batch queue's RunHandler (refuse_nested) is the queue's own; any other is the handler's.
  bind_handler(run, run == &refuse_nested ? static_cast<void*>(this) : handler_.get());
  try {
    start_processing(w);
  } catch (...) {
    bind_handler(nullptr, nullptr);  // the flow undid its part: process() may be called again
    handler_.reset();
    hold_deliveries(0);
    batch_run_ = nullptr;
    batches_.clear();
    throw;
  }
}

void QueueImpl::take_leftovers(FunctionRef<void(LeftoverJob&&, bool, void*)> take) {
  if (core().accepting())
    throw Error(ErrorCode::wrong_mode,
                "take_leftovers() on queue '" + name() + "' needs Engine::shutdown() first");
  const bool taken = take_unstarted([&](std::uint32_t i, bool delayed) {
    const JobSlot& s = slot(i);
    take(LeftoverJob{name(), s.id.load(std::memory_order_relaxed), std::string(job_name(s)),
                     s.attempts()},
         delayed, payload(i));
    ops_.destroy_at(payload(i));
  });
  if (!taken)
    throw Error(ErrorCode::would_deadlock,
                "take_leftovers() on queue '" + name() +
                    "' was called from a callback that runs while timers fire; call it after "
                    "Engine::shutdown() returned, outside handlers and callbacks");
  // Adds kept for after a running job (keep_last_if_active): their job was taken above or never
  // starts again, or still runs past the grace and would file them to the DLQ when it ends;
  // handed back here instead, all of them, not lost
  // (PeerSemantics.AKeptAddIsNotLostWhenItsJobIsLeftOverAtShutdown pins it).
  kept_.take_all([&](KeptAdds::Kept&& d) {
    take(LeftoverJob{name(), 0, std::move(d.name), 0}, false, d.data.get());
  });
}

EntryPtr QueueImpl::entry_of(std::uint32_t idx, void* data, bool copy) const {
  DeadLetterInfo info = dead_letter_info(idx);
  return EntryPtr(
      copy ? ops_.copy_entry(std::move(info), data) : ops_.new_entry(std::move(info), data),
      EntryDeleter{&ops_});
}

void QueueImpl::retire(std::uint32_t idx, bool dead_letter, const Event* event) {
  if (!dead_letter) [[likely]] {
    ops_.destroy_at(payload(idx));
    release_slot(idx);
    return;
  }
  EntryPtr entry = entry_of(idx, payload(idx), false);
  ops_.destroy_at(payload(idx));
  release_slot(idx);  // the capacity returns before the DLQ's lock and its alert callback
  bridge_.file(std::move(entry), event);
}

bool QueueImpl::file_copy(std::uint32_t idx, const Event* event) {
  // A move-only payload has one owner: the entry takes it when the last handler returns.
  if (!ops_.copyable) return false;
  EntryPtr entry;
  try {
    entry = entry_of(idx, payload(idx), true);
  } catch (...) {
    return false;  // no memory for the copy: filed from the payload when the handler returns
  }
  leave_filed(idx);  // the slot is not ours from here on: the entry is a copy
  bridge_.file(std::move(entry), event);
  return true;
}

void QueueImpl::run_deferred(JobId id) noexcept {
  std::optional<KeptAdds::Kept> d = kept_.take(id);
  if (!d) return;
  const std::string& key = d->options.dedup.id;
  try {
    // The ended job held the id for the kept add (see the keep gate): the new job takes it over
    // in place, so that no newer add can make a job that this one would then follow. An add
    // that comes between taking the entry above and the claim finds the ended job holding the
    // id and no add kept for it: it merges, as it would into the waiting job.
    const AddReceipt r = add_one(d->name, d->data.get(), d->options, AddFrom::kept, id);
    if (r.status == AddStatus::added || r.status == AddStatus::duplicate) return;
    if (r.status == AddStatus::dead_lettered) {  // filed (OnFull::dead_letter)
      // The id goes too (else it is held forever:
      // PeerSemantics.AKeptAddFiledByAFullDeadLetterQueueLetsTheIdGo pins it).
      (void)claims().window().release(key, id);
      return;
    }
  } catch (const std::exception&) {  // no memory, a throwing payload: it must not vanish
  }
  // No room (or no engine to run it): the kept add goes to the DLQ rather than nowhere, and the
  // id held for it is let go.
  (void)claims().window().release(key, id);
  try {
    // Its result names the DLQ entry (or says there was no room there either): this path has
    // nobody to tell.
    (void)bridge_.overflow(d->name, d->data.get(), d->options, true);
  } catch (...) {  // no memory for the entry: nothing more can be done on this path
  }
}

}  // namespace rail::detail
