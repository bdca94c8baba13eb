// JobControl's parents: the decisions a FlowNode takes for a parent waiting for its children
// (JobOptions::after). Contract: job_control.hpp; the node: flow_node.hpp.
#include <thread>
#include <utility>

#include "rail/detail/job_control.hpp"

namespace rail::detail {

namespace {
/// waiting_children(s, c, id): slot s (whose word is c) holds parent `id`, still waiting.
bool waiting_children(const JobSlot& s, std::uint64_t c, JobId id) noexcept {
  // The id and the mark after the word: a CAS against c fails if the slot moved on since.
  return ctl::state(c) == SlotState::delayed && s.id.load(std::memory_order_relaxed) == id &&
         s.marked(JobSlot::kWaitingChildren);
}
}  // namespace

bool JobControl::release_parent(std::uint32_t idx, JobId id) {
  JobSlot& s = parts_.slot(idx);
  const auto done = parts_.core.with_wheel([&](Wheel& wheel) {
    timers_.drain(wheel, client_);  // a parent still on its way to the wheel is parked now
    if (!waiting_children(s, s.ctl.load(), id)) return false;
    // Out of waiting_children before it can run (and end, and its slot take a new parent):
    // the mark's RMW counts it out once, also against a cancel ending it meanwhile.
    parts_.leave_children_wait(s);
    const std::int64_t now = parts_.core.now_ns();
    for (;;) {
      const std::uint64_t c = s.ctl.load();
      if (ctl::state(c) != SlotState::delayed || s.id.load(std::memory_order_relaxed) != id)
        return false;  // a cancel or an expiry took it: it ends unstarted
      // Due now: it fires here, into its lines or the ready ring, as a promoted job does.
      if (timers_.retime(idx, c, now, now, wheel, client_)) return true;
    }
  });
  return done.value_or(false);
}

bool JobControl::fail_parent(std::uint32_t idx, JobId id, std::string why) {
  JobSlot& s = parts_.slot(idx);
  // Taken under the wheel (its index is the wheel's: parked), ended after it is released: the
  // end runs payload destructors and observers.
  const auto taken = parts_.core.with_wheel([&](Wheel& wheel) {
    for (;;) {
      timers_.drain(wheel, client_);
      const std::uint64_t c = s.ctl.load();
      if (!waiting_children(s, c, id)) return false;
      // Published delayed just before its index went into the inbox, it may still be on its way
      // (behind another submitter's push the drain stopped at): a few instructions away. Taken
      // there, the drain would end it as an expired job's holder does.
      if (!TimerPort::parked(s)) {
        std::this_thread::yield();
        continue;
      }
      if (!s.ctl.expire(c)) continue;  // a cancel moved the word: the loop sees it gone
      const bool parked = timers_.unlink(s, wheel);
      RAIL_INVARIANT(parked, "a parent waiting for its children is parked on the wheel");
      return true;
    }
  });
  if (!taken.value_or(false)) return false;
  s.mark(JobSlot::kExpiredDelayed, true);  // it leaves the delayed gauge when it ends
  try {
    parts_.extra(s).errors.push_back(
        AttemptRecord{s.attempts(), parts_.core.now_ns(), std::move(why)});
  } catch (...) {  // no memory for the message: it ends with its reason alone
  }
  ends_.end_unstarted(idx, DeadLetterReason::dependency_failed);
  return true;
}

bool JobControl::cancel_parent(std::uint32_t idx, JobId id) {
  JobSlot& s = parts_.slot(idx);
  if (!waiting_children(s, s.ctl.load(), id)) return false;  // released: its children all ended
  const std::optional<bool> done = try_cancel(idx, id);
  if (done.value_or(false)) dispatch_.note_if_idle(false);
  return done.value_or(false);
}

}  // namespace rail::detail
