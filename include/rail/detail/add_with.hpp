// JobFlow::init_slot, count_new, publish_new and add_with's body: the add sequence that every
// single add inlines (admit, take a slot, claim the dedup id, fill, count, publish), and the two
// adds of a job that lived before: a redrive's (redrive_with) and one resumed from a broker
// (add_resumed). Their contracts are at their declarations in job_flow.hpp, which includes this
// file at its end; nothing else includes it.
#pragma once

#include "rail/detail/flow_node.hpp"
#include "rail/detail/job_flow.hpp"

namespace rail::detail {

inline void JobFlow::init_slot(std::uint32_t idx, std::uint64_t id, std::uint16_t name_id,
                               std::int64_t now, const JobOptions& o) noexcept {
  JobSlot& s = slot(idx);
  s.id.store(id, std::memory_order_relaxed);         // published by the ring push (or ctl release)
  s.name.store(name_id, std::memory_order_relaxed);  // published with the id
  s.added_ns = now;
  s.due_ns.store(now, std::memory_order_relaxed);  // due at once (publish_new: unless delayed)
  s.started_ns.store(expire_at(o, now), std::memory_order_relaxed);  // see expires_at()
  s.timeout_ns = o.timeout.value_or(parts_.options.timeout).count();
  s.failed_attempts.store(0, std::memory_order_relaxed);
  s.deliveries.store(0, std::memory_order_relaxed);
  s.stalls.store(0, std::memory_order_relaxed);
  s.max_attempts = static_cast<std::uint16_t>(o.max_attempts);
  s.visibility_ns = o.visibility_timeout.value_or(parts_.options.visibility_timeout).count();
  s.end_as(EndKind::none);  // after the id: see JobSlot::end_kind
  s.end_reason = DeadLetterReason::none;
  s.dedup = DedupHold::none;
  s.marks.store(0, std::memory_order_relaxed);
  s.link.store(static_cast<std::uint8_t>(  // published with the job, as the fields above
                   o.priority << JobSlot::kPriorityShift |
                   (o.downstream.empty() ? 0 : links_.link_of(o.downstream))),  // admit made it
               std::memory_order_relaxed);
  s.set_backoff(o.backoff);
  // Its trace (JobOptions::trace, else the adder's TraceScope): the array exists (admit).
  if (const TraceContext& t = o.trace ? *o.trace : thread_trace(); t.valid() || parts_.traces.any())
    parts_.traces.set(idx, t);
  if (s.extra) {
    s.extra->errors.clear();
    if (s.extra->rare) s.extra->rare->parent.reset();  // the slot's last parent's children
  }
}

inline bool JobFlow::count_new(std::uint32_t idx, Duration delay) noexcept {
  const bool ready = delay.count() <= 0 && !Lines::lined(slot(idx));
  parts_.stats.add(ready ? kAddedReady : kAdded);
  return ready;
}

inline void JobFlow::publish_new(std::uint32_t idx, std::int64_t now, Duration delay,
                                 bool ready) noexcept {
  JobSlot& s = slot(idx);
  if (ready) {
    s.ctl.publish(SlotState::waiting);
    dispatch_.push_ready(idx, true);
  } else if (delay.count() > 0) {
    s.due_ns.store(saturating_add(now, delay), std::memory_order_relaxed);  // see publish()
    parts_.stats.add(kToDelayed);  // before a cancel can take it out: see counts()
    s.ctl.publish(SlotState::delayed);
    timers_.submit(idx);
  } else {
    RAIL_INVARIANT(Lines::lined(s),
                   "publish_new: a job due now outside any line was not "
                   "counted into waiting (count_new)");
    join_lines(idx, true);
  }
}

template <class Fill>
JobFlow::Added JobFlow::add_with(std::string_view job_name, const JobOptions& o, bool may_block,
                                 JobId prior, std::shared_ptr<EndWaiter>* watch, Fill&& fill) {
  using What = Added::What;
  if (!core().accepting()) [[unlikely]]
    return Added{What::refused, {0, AddStatus::shutting_down}, {}, 0};
  admit(job_name, o);
  const std::uint16_t name_id = core().names().intern(job_name);
  std::uint32_t idx;
  if (!(may_block ? acquire_slots(&idx, 1) : try_acquire(&idx, 1))) [[unlikely]] {
    // Shutdown began while the add waited for room (OnFull::block).
    if (!core().accepting()) return Added{What::refused, {0, AddStatus::shutting_down}, {}, 0};
    // A duplicate of a live job merges even when there is no room for a new one (the job
    // that held the id for a kept add is no such job: it ended).
    if (!o.dedup.id.empty()) {
      const std::int64_t now = core().now_ns();
      if (auto claim = claims_.live_claim(o, now); claim && claim->owner != prior)
        return Added{What::duplicate, {}, *claim, now};
    }
    return Added{What::no_room, {}, {}, 0};
  }
  name_jobs(&idx, 1, name_id, job_name);
  const std::int64_t now = core().now_ns();
  std::uint64_t id;
  if (o.dedup.id.empty()) [[likely]] {
    id = core().next_ids(1);
    init_slot(idx, id, name_id, now, o);
  } else {
    DedupSet::Claim claim{};
    try {
      claim = claims_.claim(idx, o, now, prior);  // may build the window: bad_alloc
    } catch (...) {
      give_back(idx);
      throw;
    }
    if (claim.result != DedupSet::Claim::Result::inserted) {
      give_back(idx);
      if (auto refused = DedupClaims::refusal(claim, o)) return Added{What::refused, *refused};
      return Added{What::duplicate, {}, claim, now};
    }
    id = claim.owner;
    init_slot(idx, id, name_id, now, o);
    claims_.hold(idx, o);
  }
  std::shared_ptr<FlowNode> parent;  // a job with children (JobOptions::after): its record
  if (Lines::wanted(o) || watch || !o.after.empty()) [[unlikely]] {
    try {
      if (Lines::wanted(o)) lines_.enter(idx, o);
      if (watch) *watch = ends_.tracker().watch(id, true);
      if (!o.after.empty()) parent = prepare_parent(idx, id, o.after);  // last: counts it
    } catch (...) {  // no memory, or a child no queue knows: nothing was added
      // The id first: once the slot is free, an add of the same id may take it.
      if (!o.dedup.id.empty()) (void)claims_.window().release(o.dedup.id, id);
      give_back(idx);  // out of the lines it entered
      throw;
    }
  }
  fill(cell(idx));
  // A parent is parked (due never) until its node releases it.
  const Duration delay = parent ? Duration::max() : o.delay;
  const bool ready = count_new(idx, delay);
  if (core().observed()) note_added(slot(idx), o.delay);
  publish_new(idx, now, delay, ready);
  published(expire_at(o, now));
  if (parent) [[unlikely]]
    parent->watch();
  warm_next_slot();
  return Added{What::added, {id, AddStatus::added}};
}

template <class Fill>
RedriveStatus JobFlow::redrive_with(const DeadLetterInfo& e, bool reset_counters, Fill&& fill) {
  std::uint32_t idx;
  const AddScope scope(&core());  // shutdown waits for this redrive once past accepting()
  const RedriveStatus status = begin_redrive(e, reset_counters, idx);
  if (status != RedriveStatus::redriven) return status;
  fill(cell(idx));
  end_redrive(idx);
  return status;
}

template <class Fill>
AddReceipt JobFlow::add_resumed(std::string_view job_name, const JobOptions& o, const Resumed& r,
                                Fill&& fill) {
  const AddScope scope(&core());  // shutdown waits for this add once past accepting()
  std::uint32_t idx;
  const AddReceipt got = begin_resumed(job_name, o, r, idx);
  if (got.status != AddStatus::added) return got;
  fill(cell(idx));
  end_resumed(idx);
  return got;
}

}  // namespace rail::detail
