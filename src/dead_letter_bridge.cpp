// DeadLetterBridge: the paths between a queue's slots and its DLQ; the contract is in
// include/rail/detail/dead_letter_bridge.hpp.
#include "rail/detail/dead_letter_bridge.hpp"

#include <utility>

#include "rail/detail/job_flow.hpp"
#include "rail/detail/payload_ops.hpp"

namespace rail::detail {

DeadLetterBridge::DeadLetterBridge(JobFlow& flow, DlqOptions options, const PayloadOps& ops)
    : flow_(flow), ops_(ops), store_(*this, std::move(options), ops) {}

void DeadLetterBridge::file(EntryPtr entry, const Event* event) {
  store_.push(std::move(entry), [&] {
    if (event) flow_.core().emit(*event);
  });
}

AddReceipt DeadLetterBridge::overflow(std::string_view job_name, void* data, const JobOptions& o,
                                      bool forced) {
  if (flow_.options().on_full != OnFull::dead_letter && !forced) return {0, AddStatus::full};
  const std::uint64_t id = flow_.core().next_ids(1);
  const TimePoint now{Duration{flow_.core().now_ns()}};
  DeadLetterInfo info{.id = id,
                      .name = std::string(job_name),
                      .reason = DeadLetterReason::overflow,
                      .failed_attempts = 0,
                      .max_attempts = o.max_attempts,
                      .added_at = now,
                      .dead_at = now,
                      .errors = {},
                      .deliveries = 0,
                      .stalls = 0,
                      .backoff = o.backoff,
                      .visibility_timeout = o.visibility_timeout,
                      .dedup_id = o.dedup.id,
                      .downstream = o.downstream,
                      .trace = o.trace.value_or(current_trace())};
  const std::uint32_t max_attempts = info.max_attempts;
  EntryPtr e(ops_.new_entry(std::move(info), data), EntryDeleter{&ops_});
  store_.push(std::move(e), [&] { flow_.note_overflow(id, job_name, max_attempts, now); });
  return {id, AddStatus::dead_lettered};
}

RedriveStatus DeadLetterBridge::redrive(DeadLetterInfo& e, const RedriveOptions& r) {
  void* payload = ops_.entry_payload(e);
  return flow_.redrive_with(e, r.reset_counters,
                            [&](void* cell) noexcept { ops_.move(cell, payload); });
}

std::optional<EndRecord> DeadLetterBridge::end_of(JobId id) const {
  std::optional<EndRecord> end;
  (void)store_.find(id, [&](const DeadLetterInfo& e) {
    end.emplace();
    end->id = e.id;
    end->status = JobStatus::dead_lettered;
    end->reason = e.reason;
    end->errors = e.errors;
    if (!e.errors.empty()) end->error = e.errors.back().message;
    end->attempt = e.failed_attempts;
    end->ended_at = e.dead_at;
  });
  return end;
}

const std::string& DeadLetterBridge::name() const noexcept {
  return flow_.name();
}

std::int64_t DeadLetterBridge::now_ns() const {
  return flow_.core().clock().now().time_since_epoch().count();
}

void DeadLetterBridge::skip_ids_past(JobId id) {
  flow_.core().skip_ids_past(id);
}

void DeadLetterBridge::emit(EventKind kind, JobId id, std::string_view job_name, std::size_t depth,
                            Duration elapsed) {
  flow_.emit_dlq(kind, id, job_name, depth, elapsed);
}

void DeadLetterBridge::check_by(std::int64_t due) noexcept {
  flow_.sweep_by(due);
}

void DeadLetterBridge::after_wheel(std::function<void()> f) {
  flow_.core().after_wheel(std::move(f));
}

}  // namespace rail::detail
