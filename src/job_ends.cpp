// JobEnds: see include/rail/detail/job_ends.hpp.
#include "rail/detail/job_ends.hpp"

#include <utility>

namespace rail::detail {

JobEnds::JobEnds(FlowParts& parts, DedupClaims& claims, Lines& lines, Dispatcher& dispatch,
                 PayloadHooks& payloads)
    : parts_(parts), claims_(claims), lines_(lines), dispatch_(dispatch), payloads_(payloads) {
  tracker_.configure(parts_.options.keep_ended, false);
}

void JobEnds::declare_result(std::type_index type, std::string (*format)(const void*)) {
  result_type_ = type;
  format_result_ = format;
  tracker_.configure(parts_.options.keep_ended, type != typeid(void));
}

void JobEnds::end(std::uint32_t idx, EndKind kind, DeadLetterReason reason, std::int64_t now,
                  WorkerContext* wc, std::string_view why, std::shared_ptr<const void> result) {
  JobSlot& s = parts_.slot(idx);
  s.end_reason = reason;
  if (kind == EndKind::dead_lettered) {
    dead_lettered(idx, now, wc);
    return;
  }
  leave(idx, kind, record(s, kind, now, wc, why, std::move(result)));
}

void JobEnds::hand_turns(Lines::Closing c) noexcept {
  const auto go_on = [this](const Lines::Closing& closing) noexcept {
    const Turns t = lines_.release(closing);
    if (t.group != FifoGroups::kNone && lines_.admit_tenant(t.group)) dispatch_.requeue(t.group);
    if (t.tenant != FifoGroups::kNone) dispatch_.requeue(t.tenant);
  };
  if (parts_.core.observed() && parts_.core.owns_wheel()) {
    try {
      parts_.core.after_wheel([go_on, c] { go_on(c); });  // copies c: on failure it is intact
      return;
    } catch (...) {  // no memory to keep the call: on now, ahead of the deferred events
    }
  }
  go_on(c);
}

void JobEnds::leave(std::uint32_t idx, EndKind kind, Settled&& settled) {
  JobSlot& s = parts_.slot(idx);
  RAIL_INVARIANT(s.ended_as() == kind, "a job leaves its slot as its end noted it");
  const JobId id = s.id.load(std::memory_order_relaxed);
  if (s.ctl.end()) final_end(idx);  // else the last stale handler to return frees it
  ended(id, std::move(settled));
}

void JobEnds::dead_lettered(std::uint32_t idx, std::int64_t now, WorkerContext* wc) {
  // The DLQ entry exists before the dead_lettered event is raised, so an observer of the event
  // finds it with dlq().get(id): the event is built here, while the slot is ours, and raised by
  // the DLQ once the entry is in (before the evictions and the alert it causes). Its strings
  // are copied: the error log and a job's own name live in the slot, which may be reused by
  // then. Not raised in a Holding frame: by then the job has left its slot, so a cancel of it
  // from an observer finds nothing and answers false.
  JobSlot& s = parts_.slot(idx);
  Settled settled = settle(s, EndKind::dead_lettered, wc, now);
  const JobId id = s.id.load(std::memory_order_relaxed);
  std::string error, own_name;
  const std::optional<Event> ev = dead_letter_event(s, now, error, own_name);
  const Event* pending = ev ? &*ev : nullptr;
  // A stale handler still reads the payload (its lease lapsed on the last allowed delivery):
  // the entry cannot take the payload until that handler returns, which may be never. File it
  // now from a copy (both only read it: Job::data() is const), so that it can be inspected and
  // redriven at once. Pins only go down while we hold the slot in `finishing` (nothing activates
  // it), so a copy made for a pin that drops before end() below is merely unneeded.
  // The copy is made while the slot is ours; file_copy leaves the slot before it files the
  // entry and raises the event, so that observers find the job ended (else an observer's
  // cancel() spins on a slot this thread still holds in `finishing`).
  if (ctl::pins(s.ctl.load()) > 0 && payloads_.file_copy(idx, pending)) {
    ended(id, std::move(settled));
    return;
  }
  if (s.ctl.end()) {
    final_end(idx, pending);  // files the entry (unless filed above) and raises the event
  } else if (pending) {
    parts_.core.emit(*pending);  // a move-only payload: the last handler to return files it
  }
  ended(id, std::move(settled));
}

std::optional<Event> JobEnds::dead_letter_event(const JobSlot& s, std::int64_t now,
                                                std::string& error, std::string& own_name) const {
  if (!parts_.core.observed()) return std::nullopt;
  Event ev = parts_.event(EventKind::dead_lettered, s, now);
  ev.reason = s.end_reason;
  ev.attempt = s.attempts();
  if (s.extra && !s.extra->errors.empty()) ev.error = error = s.extra->errors.back().message;
  if (s.name_id() == NameTable::kOwnName) [[unlikely]]
    ev.job_name = own_name = parts_.job_name(s);
  return ev;
}

void JobEnds::end_unstarted(std::uint32_t idx, DeadLetterReason reason) {
  // Ours, in `cancelled` with no pin (nothing runs an unstarted job): every end step happens
  // here, as a worker's dead-letter does, so that its waiters and counts hear of it only once
  // its entry is in the DLQ.
  JobSlot& s = parts_.slot(idx);
  const bool delayed = s.marked(JobSlot::kExpiredDelayed);
  s.end_reason = reason;
  if (reason == DeadLetterReason::expired) parts_.stats.add(kExpired);
  dead_lettered(idx, parts_.core.now_ns(), nullptr);
  parts_.stats.add(delayed ? kFromDelayed : kFromReady);  // out of its gauge once ended
}

JobEnds::Settled JobEnds::settle(JobSlot& s, EndKind kind, WorkerContext* wc, std::int64_t now,
                                 std::string_view why, std::shared_ptr<const void> result) {
  // The id follows the job: released when it ends (see DedupClaims::release_at_end). An add
  // kept for after the job takes the id over instead (run_deferred).
  Settled settled;
  parts_.leave_children_wait(s);  // a parent cancelled, expired or failed while it waited
  parts_.leave_retry_here(s);     // its place for short retries here, if it took one
  if (Lines::lined(s)) settled.closing = lines_.close(parts_.index_of(s));
  settled.kept = claims_.release_at_end(s, kind == EndKind::cancelled);
  if (note(s, kind, wc, now)) [[unlikely]]
    settled.end = record_of(s, kind, now, why, std::move(result));
  return settled;
}

EndRecord JobEnds::record_of(const JobSlot& s, EndKind kind, std::int64_t now, std::string_view why,
                             std::shared_ptr<const void> result) const {
  EndRecord end;
  end.id = s.id.load(std::memory_order_relaxed);
  end.ended_at = TimePoint{Duration{now}};
  end.attempt = s.attempts();
  end.status = status_of(kind);  // note() admits none of the kinds that are no end
  switch (kind) {
    case EndKind::completed:
      end.result = std::move(result);
      end.attempt += 1;  // the one that succeeded
      break;
    case EndKind::dead_lettered:
      end.reason = s.end_reason;
      end.errors = attempt_errors(s);
      if (!end.errors.empty()) end.error = end.errors.back().message;
      break;
    case EndKind::discarded:
      end.error = why;
      end.attempt += 1;  // the one that discarded it
      break;
    case EndKind::forwarded:
      end.error = why;
      break;
    case EndKind::cancelled:
    case EndKind::none:
    case EndKind::filed:
      break;
  }
  return end;
}

JobEnds::Settled JobEnds::record(JobSlot& s, EndKind kind, std::int64_t now, WorkerContext* wc,
                                 std::string_view why, std::shared_ptr<const void> result) {
  // Observers below may cancel this job: it is ending. (A frame only when someone observes.)
  const bool observed = parts_.core.observed();
  std::optional<Holding> holding;
  if (observed) holding.emplace(s, true);
  // The event shows the result; the record (if any) shares it.
  const std::shared_ptr<const void> shown = observed ? result : nullptr;
  Settled settled = settle(s, kind, wc, now, why, std::move(result));
  if (!observed) return settled;
  Event e = parts_.event(kind == EndKind::completed   ? EventKind::completed
                         : kind == EndKind::discarded ? EventKind::discarded
                         : kind == EndKind::forwarded ? EventKind::forwarded
                                                      : EventKind::cancelled,
                         s, now);
  e.error = why;
  if (kind == EndKind::forwarded) {
    // `attempt` is already the next one; it is due at due_ns (JobFlow::forward stores it).
    e.delay = Duration{s.due_ns.load(std::memory_order_relaxed) - now};
    e.stalls = s.stalled();
  }
  std::string text;
  if (shown && format_result_) e.result = text = format_result_(shown.get());
  parts_.core.emit(e);
  return settled;
}

std::vector<AttemptError> JobEnds::attempt_errors(const JobSlot& s) {
  std::vector<AttemptError> out;
  if (!s.extra) return out;
  out.reserve(s.extra->errors.size());
  for (const auto& r : s.extra->errors)
    out.push_back(AttemptError{r.attempt, TimePoint{Duration{r.at_ns}}, r.message});
  return out;
}

}  // namespace rail::detail
