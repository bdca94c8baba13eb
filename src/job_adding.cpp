// JobFlow's add path beyond what add_with inlines: the unusual options an add may carry, waiting
// for room, a job's own name, a redrive's counters, bulk publication and the add's events
// (added, deduplicated, overflow). See include/rail/detail/job_flow.hpp for the job's path.
#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "rail/detail/deadline.hpp"
#include "rail/detail/flow_node.hpp"
#include "rail/detail/job_flow.hpp"
#include "rail/detail/poll_until.hpp"
#include "rail/detail/scoped_value.hpp"
#include "rail/error.hpp"

namespace rail::detail {

void JobFlow::throw_shutting_down() const {
  throw Error(ErrorCode::shutting_down,
              "queue '" + parts_.name + "' does not accept jobs: the engine is shutting down");
}

void JobFlow::admit_unusual(const JobOptions& o) {
  if (o.priority >= parts_.options.priorities)
    throw Error(ErrorCode::invalid_option,
                std::string("JobOptions.priority is ")
                    .append(std::to_string(o.priority))
                    .append("; queue '")
                    .append(parts_.name)
                    .append("' has QueueOptions.priorities = ")
                    .append(std::to_string(parts_.options.priorities))
                    .append(", so expected 0 to ")
                    .append(std::to_string(parts_.options.priorities - 1)));
  if (!o.tenant.empty() && parts_.options.tenant_window == 0)
    throw Error(ErrorCode::invalid_option,
                std::string("JobOptions.tenant is '")
                    .append(o.tenant)
                    .append("' but queue '")
                    .append(parts_.name)
                    .append("' has no fair shares (QueueOptions::tenant_window is 0); expected a "
                            "window, e.g. 64, to share the queue between tenants"));
  if (!o.downstream.empty()) links_.link_to(o.downstream);
  if (!o.after.empty()) admit_children(o);
  // The queue's first add with a trace context makes the array (may throw: nothing taken yet).
  if (o.trace ? o.trace->valid() : thread_trace().valid()) parts_.traces.reserve();
  // A job that could not run before it expires is refused rather than dead-lettered unrun.
  if (const Duration expire = o.expire_after.value_or(parts_.options.expire_after);
      o.delay >= expire)
    throw Error(ErrorCode::invalid_option,
                std::string("JobOptions.delay (")
                    .append(std::to_string(o.delay.count()))
                    .append(" ns) is not shorter than its expire_after (")
                    .append(std::to_string(expire.count()))
                    .append(" ns) on queue '")
                    .append(parts_.name)
                    .append("': the job would expire before it could start; expected a delay "
                            "below expire_after, or a longer expire_after"));
  if (o.backoff.kind == BackoffKind::custom && !parts_.options.custom_backoff)
    throw Error(ErrorCode::invalid_option,
                "JobOptions.backoff is custom but queue '" + parts_.name +
                    "' has no QueueOptions.custom_backoff; expected one to compute delays");
  // A shorter lease than the queue's must pull the lease sweep earlier (lease_tracker.hpp).
  // seq_cst, with start_processing's store then request, in one total order: if this load misses
  // processing_, the sweep start_processing requests comes after it and reads the lower bound.
  if (o.visibility_timeout && timers_.lower_visibility(o.visibility_timeout->count()) &&
      processing_.load(std::memory_order_seq_cst) && parts_.leases_enabled() &&
      parts_.core.mode() == Mode::threaded)
    timers_.request_sweep();
  // A job's own timeout: deadlines from now on (even on a queue with neither leases nor a
  // timeout), swept as often as a lease that long. Before the job is published (which carries
  // the flag to its deliverer).
  if (o.timeout) {
    // seq_cst, both: with start_processing's store of processing_ then load of job_timeouts (a
    // Dekker hand-off, as lower_visibility's): either we see processing_ and request the sweep,
    // or start_processing sees the flag and requests it.
    const bool first = !parts_.job_timeouts.exchange(true, std::memory_order_seq_cst);
    const bool lower = timers_.lower_visibility(o.timeout->count());
    if ((first || lower) && processing_.load(std::memory_order_seq_cst) &&
        parts_.core.mode() == Mode::threaded)
      timers_.request_sweep();
  }
}

void JobFlow::admit_children(const JobOptions& o) const {
  const auto refuse = [&](const std::string& what) {
    throw Error(
        ErrorCode::invalid_option,
        std::string("JobOptions.after on queue '").append(parts_.name).append("': ") + what);
  };
  if (o.after.size() > JobOptions::kMaxChildren)
    refuse("names " + std::to_string(o.after.size()) + " children; expected at most " +
           std::to_string(JobOptions::kMaxChildren));
  if (o.delay.count() > 0)
    refuse(
        "a job with children cannot also have a delay; expected delay 0 (it starts when its "
        "children have ended)");
  if (!o.dedup.id.empty())
    refuse("a job with children cannot have a dedup id ('" + o.dedup.id +
           "'); expected none (a duplicate could not merge into its waiting)");
  std::vector<JobId> ids;
  ids.reserve(o.after.size());
  for (const Dependency& d : o.after) {
    if (d.id == 0) refuse("names job 0; expected the ids of jobs added to this engine");
    ids.push_back(d.id);
  }
  std::sort(ids.begin(), ids.end());
  if (const auto twice = std::adjacent_find(ids.begin(), ids.end()); twice != ids.end())
    refuse("names job " + std::to_string(*twice) + " twice; expected each child once");
}

bool JobFlow::acquire_slots_slow(std::uint32_t* out, std::size_t n) {
  if (parts_.options.on_full != OnFull::block || parts_.core.mode() == Mode::inlined) return false;
  // Cold path: the queue is full. Poll with a growing real-time sleep up to block_timeout;
  // workers freeing slots do not pay for waking blocked producers.
  const auto deadline = steady_deadline(parts_.options.block_timeout);  // max: wait for room
  bool got = false;
  (void)poll_until(
      deadline,
      [&] {
        got = try_acquire(out, n);
        return got || !parts_.core.accepting();  // shutdown ends the wait: no slots then
      },
      std::chrono::microseconds(1), std::chrono::microseconds(1000));
  return got;
}

void JobFlow::name_own(const std::uint32_t* idx, std::size_t n, std::string_view name) {
  try {
    for (std::size_t i = 0; i < n; ++i) {
      parts_.rare(slot(idx[i])).own_name.assign(name);
    }
  } catch (...) {
    for (std::size_t i = 0; i < n; ++i)
      give_back(idx[i]);
    throw;
  }
}

std::shared_ptr<FlowNode> JobFlow::prepare_parent(std::uint32_t idx, JobId id,
                                                  const std::vector<Dependency>& after) {
  std::shared_ptr<FlowNode> node = FlowNode::make(*this, after);
  node->bind(idx, id);
  JobSlot& s = slot(idx);
  parts_.rare(s).parent = node;
  // Counted in before it is published; whoever takes the mark off counts it out.
  s.mark(JobSlot::kWaitingChildren, true);
  parts_.parents_waiting.fetch_add(1, std::memory_order_relaxed);  // relaxed: a gauge
  return node;
}

std::vector<ChildEnd> JobFlow::children(std::uint32_t idx) const {
  // The caller's pin keeps the slot's job, so its record stays (init_slot replaces it).
  const JobSlot& s = slot(idx);
  if (!s.extra || !s.extra->rare || !s.extra->rare->parent) return {};
  return s.extra->rare->parent->children();
}

std::vector<ChildEnd> job_children(JobFlow& flow, std::uint32_t idx) {
  return flow.children(idx);
}

DeadLetterInfo JobFlow::dead_letter_info(std::uint32_t idx) const {
  const JobSlot& s = slot(idx);
  return DeadLetterInfo{.id = s.id.load(std::memory_order_relaxed),
                        .name = std::string(job_name(s)),
                        .reason = s.end_reason,
                        .failed_attempts = s.attempts(),
                        .max_attempts = s.max_attempts,
                        .added_at = TimePoint{Duration{s.added_ns}},
                        .dead_at = TimePoint{Duration{core().now_ns()}},
                        .errors = JobEnds::attempt_errors(s),
                        .deliveries = s.delivered(),
                        .stalls = s.stalled(),
                        .backoff = s.backoff(),
                        .visibility_timeout = own_visibility(s),
                        .dedup_id = s.dedup != DedupHold::none ? s.extra->dedup_key : std::string(),
                        .downstream = links_.own_downstream(s),
                        .trace = parts_.traces.of(idx)};
}

RedriveStatus JobFlow::begin_redrive(const DeadLetterInfo& of, bool reset_counters,
                                     std::uint32_t& idx) {
  if (!core().accepting()) return RedriveStatus::shutting_down;
  if (!of.downstream.empty()) links_.link_to(of.downstream);  // may throw: nothing taken
  if (of.trace.valid()) parts_.traces.reserve();              // likewise
  if (!acquire_slots(&idx, 1))  // a blocked wait ends when shutdown begins
    return core().accepting() ? RedriveStatus::queue_full : RedriveStatus::shutting_down;
  const std::int64_t now = core().now_ns();
  JobOptions o;
  o.max_attempts = std::max<std::uint32_t>(of.max_attempts, 1);
  o.backoff = of.backoff;
  o.visibility_timeout = of.visibility_timeout;
  o.downstream = of.downstream;
  o.trace = of.trace;  // the entry's, never the redriving thread's
  const std::uint16_t name_id = core().names().intern(of.name);
  name_jobs(&idx, 1, name_id, of.name);  // gives the slot back itself when it throws
  init_slot(idx, of.id, name_id, now, o);
  slot(idx).added_ns = of.added_at.time_since_epoch().count();
  try {
    end_tracker().forget(of.id);  // it runs again: an end retained under its id is not its end
    if (!reset_counters)
      restore_counters(idx, of.failed_attempts, of.deliveries, of.stalls, of.errors);
    if (!of.dedup_id.empty()) claims_.reclaim(idx, of.id, of.dedup_id, now);
    // Last, as it cannot be undone: a member of a batch is live in it again, its next end
    // watched.
    if (const auto batches = core().batches_if_any()) batches->redriven(of.id, end_tracker());
  } catch (...) {
    // The slot holds no job: its id goes first, so that no dedup claim of this job is found
    // alive in it (one reclaim() made, or its first life's, which init_slot made look alive
    // again if the job had this slot then: DedupClaims::alive).
    slot(idx).id.store(0, std::memory_order_relaxed);
    give_back(idx);
    throw;
  }
  return RedriveStatus::redriven;
}

void JobFlow::end_redrive(std::uint32_t idx) noexcept {
  const std::int64_t now = core().now_ns();
  const bool ready = count_new(idx, Duration{0});
  parts_.stats.add(kRedriven);
  if (core().observed()) {
    const ScopedValue<const QueueBase*> adding(current_add(), this);  // see current_add()
    parts_.emit(EventKind::redriven, slot(idx), now);
  }
  const std::int64_t expire = slot(idx).expires_at();  // ours until published
  publish_new(idx, now, Duration{0}, ready);
  published(expire);
}

void JobFlow::restore_counters(std::uint32_t idx, std::uint32_t attempts, std::uint32_t deliveries,
                               std::uint32_t stalls, const std::vector<AttemptError>& errors) {
  JobSlot& s = slot(idx);
  // Room for every record the job can still add (its failures and the stall that may end it),
  // so the log never moves under a stale handler's view of its last error (see SlotExtra).
  std::vector<AttemptRecord> log;
  log.reserve(errors.size() + s.max_attempts + 1u);
  for (const auto& e : errors)
    log.push_back(AttemptRecord{e.attempt, e.at.time_since_epoch().count(), e.message});
  parts_.extra(s).errors = std::move(log);
  const auto clamp = [](std::uint32_t n) {
    return static_cast<std::uint16_t>(std::min<std::uint32_t>(n, 0xFFFF));
  };
  s.failed_attempts.store(clamp(attempts), std::memory_order_relaxed);
  s.deliveries.store(clamp(deliveries), std::memory_order_relaxed);
  s.stalls.store(clamp(stalls), std::memory_order_relaxed);
}

void JobFlow::enter_lines(const std::uint32_t* idx, std::size_t n, const JobOptions& o) {
  try {
    for (std::size_t i = 0; i < n; ++i)
      lines_.enter(idx[i], o);
  } catch (...) {
    for (std::size_t i = 0; i < n; ++i)
      give_back(idx[i]);  // the ones that entered leave
    throw;
  }
}

void JobFlow::join_lines(std::uint32_t idx, bool publish) noexcept {
  // Waiting from here, in a line or ready: counted before a cancel can take it out (counts()).
  parts_.stats.add(kToReady);
  dispatch_.stamp_ready(idx);  // its wait starts now, in a line or ready
  if (lines_.join(idx, publish)) dispatch_.requeue(idx);
}

void JobFlow::publish_ready(const std::uint32_t* idx, std::size_t n) noexcept {
  if (n > 0 && Lines::lined(slot(idx[0]))) {  // one add_bulk: the same lines for all
    for (std::size_t i = 0; i < n; ++i)
      join_lines(idx[i], true);
    return;
  }
  for (std::size_t i = 0; i < n; ++i)
    slot(idx[i]).ctl.publish(SlotState::waiting);
  dispatch_.push_ready_bulk(idx, n);
}

void JobFlow::note_added(const JobSlot& s, Duration delay) const noexcept {
  Event e = parts_.event(EventKind::added, s, s.added_ns);
  e.attempt = 0;
  e.delay = delay;
  const ScopedValue<const QueueBase*> adding(current_add(), this);  // see current_add()
  parts_.core.emit(e);
}

void JobFlow::note_overflow(JobId id, std::string_view job_name, std::uint32_t max_attempts,
                            TimePoint now) noexcept {
  parts_.stats.add(kAdded);
  parts_.stats.add(kDeadLettered);
  parts_.stats.remember(id, JobStatus::dead_lettered);
  if (!parts_.core.observed()) return;
  Event ev;
  ev.kind = EventKind::dead_lettered;
  ev.at = now;
  ev.queue = parts_.name;
  ev.job_id = id;
  ev.job_name = job_name;
  ev.max_attempts = max_attempts;
  ev.reason = DeadLetterReason::overflow;
  ev.error = "queue full";
  parts_.core.emit(ev);
}

AddReceipt JobFlow::note_duplicate(JobId owner, std::string_view job_name, const JobOptions& o,
                                   std::int64_t now, bool debounced, AddStatus status) {
  parts_.stats.add(kDeduplicated);
  if (parts_.core.observed()) {
    Event e;
    e.kind = debounced ? EventKind::debounced : EventKind::deduplicated;
    e.at = TimePoint{Duration{now}};
    e.queue = parts_.name;
    e.job_id = owner;
    e.job_name = job_name;
    e.dedup_id = o.dedup.id;
    e.delay = o.delay;
    parts_.core.emit(e);
  }
  return {owner, debounced ? AddStatus::debounced : status};
}

}  // namespace rail::detail
