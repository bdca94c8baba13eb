// The snake_case names of rail's enums, as logs and messages print them.
#include "rail/add_receipt.hpp"
#include "rail/event.hpp"
#include "rail/explanation.hpp"

namespace rail {

std::string_view to_string(EventKind kind) noexcept {
  switch (kind) {
    case EventKind::added:
      return "added";
    case EventKind::deduplicated:
      return "deduplicated";
    case EventKind::debounced:
      return "debounced";
    case EventKind::started:
      return "started";
    case EventKind::attempt_failed:
      return "attempt_failed";
    case EventKind::retry_due:
      return "retry_due";
    case EventKind::completed:
      return "completed";
    case EventKind::dead_lettered:
      return "dead_lettered";
    case EventKind::redriven:
      return "redriven";
    case EventKind::dlq_evicted:
      return "dlq_evicted";
    case EventKind::dlq_alert:
      return "dlq_alert";
    case EventKind::dlq_age_alert:
      return "dlq_age_alert";
    case EventKind::stall_warning:
      return "stall_warning";
    case EventKind::stalled:
      return "stalled";
    case EventKind::late_outcome:
      return "late_outcome";
    case EventKind::timed_out:
      return "timed_out";
    case EventKind::cancelled:
      return "cancelled";
    case EventKind::discarded:
      return "discarded";
    case EventKind::forwarded:
      return "forwarded";
    case EventKind::progress:
      return "progress";
    case EventKind::throttled:
      return "throttled";
    case EventKind::paused:
      return "paused";
    case EventKind::resumed:
      return "resumed";
    case EventKind::idle:
      return "idle";
  }
  return "unknown_event";
}

std::string_view to_string(Throttle throttle) noexcept {
  switch (throttle) {
    case Throttle::none:
      return "none";
    case Throttle::no_permit:
      return "no_permit";
    case Throttle::rate_limited:
      return "rate_limited";
    case Throttle::paused:
      return "paused";
    case Throttle::pushed_back:
      return "pushed_back";
  }
  return "unknown_throttle";
}

std::string_view to_string(DeadLetterReason reason) noexcept {
  switch (reason) {
    case DeadLetterReason::none:
      return "none";
    case DeadLetterReason::attempts_exhausted:
      return "attempts_exhausted";
    case DeadLetterReason::permanent_failure:
      return "permanent_failure";
    case DeadLetterReason::backoff_stopped:
      return "backoff_stopped";
    case DeadLetterReason::overflow:
      return "overflow";
    case DeadLetterReason::lease_expired:
      return "lease_expired";
    case DeadLetterReason::timeout:
      return "timeout";
    case DeadLetterReason::expired:
      return "expired";
    case DeadLetterReason::shed:
      return "shed";
    case DeadLetterReason::dependency_failed:
      return "dependency_failed";
  }
  return "unknown_reason";
}

std::string_view to_string(AddStatus status) noexcept {
  switch (status) {
    case AddStatus::added:
      return "added";
    case AddStatus::duplicate:
      return "duplicate";
    case AddStatus::debounced:
      return "debounced";
    case AddStatus::full:
      return "full";
    case AddStatus::dead_lettered:
      return "dead_lettered";
    case AddStatus::dedup_full:
      return "dedup_full";
    case AddStatus::kept:
      return "kept";
    case AddStatus::shutting_down:
      return "shutting_down";
  }
  return "unknown_status";
}

}  // namespace rail

#include "rail/job_state.hpp"

namespace rail {

std::string_view to_string(JobStatus status) noexcept {
  switch (status) {
    case JobStatus::waiting:
      return "waiting";
    case JobStatus::delayed:
      return "delayed";
    case JobStatus::waiting_children:
      return "waiting_children";
    case JobStatus::active:
      return "active";
    case JobStatus::completed:
      return "completed";
    case JobStatus::dead_lettered:
      return "dead_lettered";
    case JobStatus::cancelled:
      return "cancelled";
    case JobStatus::discarded:
      return "discarded";
    case JobStatus::forwarded:
      return "forwarded";
    case JobStatus::unknown:
      return "unknown";
  }
  return "unknown";
}

std::string_view to_string(Holdup h) noexcept {
  switch (h) {
    case Holdup::none:
      return "none";
    case Holdup::delayed:
      return "delayed";
    case Holdup::children:
      return "children";
    case Holdup::no_processor:
      return "no_processor";
    case Holdup::paused:
      return "paused";
    case Holdup::group_turn:
      return "group_turn";
    case Holdup::tenant_share:
      return "tenant_share";
    case Holdup::downstream_paused:
      return "downstream_paused";
    case Holdup::downstream_full:
      return "downstream_full";
    case Holdup::downstream_rate:
      return "downstream_rate";
    case Holdup::higher_priority:
      return "higher_priority";
    case Holdup::workers_busy:
      return "workers_busy";
    case Holdup::queued:
      return "queued";
  }
  return "unknown";
}

}  // namespace rail
