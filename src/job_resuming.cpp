// JobFlow's path for a job resumed from a broker (resumed.hpp): its add, which carries the
// counters and errors the job had; its forwarding, the end that hands its next attempt back;
// and its short retries, which may stay here instead (RetryHere).
// The slot protocol is a plain add's: the adder holds the slot until publish_new publishes it;
// kForward is set before that, so every later holder (a worker, the lease sweep) reads it.
#include <string>

#include "rail/detail/deadline.hpp"
#include "rail/detail/job_flow.hpp"
#include "rail/error.hpp"

namespace rail::detail {

AddReceipt JobFlow::begin_resumed(std::string_view job_name, const JobOptions& o, const Resumed& r,
                                  std::uint32_t& idx) {
  const auto refuse = [&](const char* option, const char* why) {
    throw Error(ErrorCode::invalid_option, std::string("a job resumed into queue '")
                                               .append(parts_.name)
                                               .append("' has JobOptions.")
                                               .append(option)
                                               .append("; expected none (")
                                               .append(why)
                                               .append(")"));
  };
  constexpr const char* kOneCopy =
      "its broker holds the one copy of the job, which no local id, line or parent may keep";
  if (!o.dedup.id.empty()) refuse("dedup", kOneCopy);
  if (!o.group.empty() && r.forward)
    refuse("group", "a group's job retries here, in its place: Resumed::forward false");
  if (!o.tenant.empty()) refuse("tenant", kOneCopy);
  if (!o.after.empty()) refuse("after", kOneCopy);
  if (o.delay.count() != 0) refuse("delay", "its broker waited its delay out before delivering it");
  if (!core().accepting()) return AddReceipt{0, AddStatus::shutting_down};
  admit(job_name, o);
  const std::uint16_t name_id = core().names().intern(job_name);
  if (!try_acquire(&idx, 1)) return AddReceipt{0, AddStatus::full};  // the broker keeps it
  name_jobs(&idx, 1, name_id, job_name);  // gives the slot back itself when it throws
  const std::int64_t now = core().now_ns();
  const JobId id = core().next_ids(1);
  init_slot(idx, id, name_id, now, o);
  try {
    restore_counters(idx, r.failed_attempts, r.deliveries, r.stalls, r.errors);
    parts_.drop_retry_here(slot(idx));  // nothing of the slot's last job carries over
    if (r.forward && r.retry_here) {
      SlotRare& rare = parts_.rare(slot(idx));
      rare.retry_here = r.retry_here;
      rare.holds_retry_place = false;
    }
  } catch (...) {
    give_back(idx);
    throw;
  }
  if (Lines::wanted(o))
    enter_lines(&idx, 1, o);  // its group's line; gives the slot back on a throw
  JobSlot& s = slot(idx);
  // The wait the last failure led to, where decorrelated jitter looks for it (fail_attempt).
  if (!s.extra->errors.empty()) s.extra->errors.back().next_delay_ns = r.previous_delay.count();
  if (r.forward) s.mark(JobSlot::kForward, true);  // published with the slot (publish_new)
  return AddReceipt{id, AddStatus::added};
}

void JobFlow::end_resumed(std::uint32_t idx) noexcept {
  const std::int64_t now = core().now_ns();
  const bool ready = count_new(idx, Duration{0});
  if (core().observed()) note_added(slot(idx), Duration{0});
  const std::int64_t expire = slot(idx).expires_at();  // ours until published
  publish_new(idx, now, Duration{0}, ready);
  published(expire);
}

bool JobFlow::retry_here(JobSlot& s, Duration delay) noexcept {
  // The holder's: rare is written by the adder before the job is published, and read or
  // written after by whoever holds the job in `finishing` (its ctl transitions order them).
  SlotRare* r = s.extra ? s.extra->rare.get() : nullptr;
  if (r == nullptr || !r->retry_here || delay > r->retry_here->within()) return false;
  if (!r->holds_retry_place) r->holds_retry_place = r->retry_here->take();
  return r->holds_retry_place;
}

void JobFlow::forward(std::uint32_t idx, std::string_view why, std::int64_t due, std::int64_t now,
                      WorkerContext* wc) {
  // The holder (the finishing worker, or the sweep that took the lapse) ends the job; the
  // event reads its next attempt's due time from due_ns.
  slot(idx).due_ns.store(due, std::memory_order_relaxed);
  ends_.end(idx, EndKind::forwarded, DeadLetterReason::none, now, wc, why);
}

}  // namespace rail::detail
