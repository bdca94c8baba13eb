// Leftovers: a queue's jobs at shutdown — the report of those that never started and of those
// still running, telling the waiters of jobs that will never start, and handing the unstarted
// jobs back (Queue::take_leftovers).
//
// Contract: called after the engine stopped accepting and its workers were stopped. A job
// reported not started here never starts: the slot words are read seq_cst, in one order with
// SlotControl::activate. take() takes each unstarted job that no handler pins exactly once
// (SlotControl::take_unstarted), as the wheel's owner, so no timer fires a slot whose payload
// was handed back; the slot is then freed here.
// Threading: any thread after shutdown; take() not from a callback that runs while timers fire
// (it returns false there).
#pragma once

#include <cstdint>
#include <functional>

#include "rail/detail/end_tracker.hpp"
#include "rail/detail/flow_parts.hpp"
#include "rail/detail/free_slots.hpp"
#include "rail/detail/lines.hpp"
#include "rail/detail/timer_port.hpp"
#include "rail/shutdown_report.hpp"

namespace rail::detail {

class Leftovers {
 public:
  Leftovers(FlowParts& parts, FreeSlots& free, Lines& lines, EndTracker& ends, TimerPort& timers,
            TimerClient& client) noexcept
      : parts_(parts), free_(free), lines_(lines), ends_(ends), timers_(timers), client_(client) {}
  Leftovers(const Leftovers&) = delete;
  Leftovers& operator=(const Leftovers&) = delete;

  /// collect(report): lists the jobs not started and those still running (a handler pins them).
  void collect(ShutdownReport& report) const;
  /// abandon_unstarted(dropped): every waiter of a job that will never start hears so now, and
  /// whether the job can still be taken (shutdown) or is dropped (the engine is destroyed).
  void abandon_unstarted(bool dropped);
  /// take(take): hands every unstarted job that no handler pins to take(idx, delayed), which
  /// moves its payload out and destroys it. False if called while this thread owns the wheel.
  bool take(const std::function<void(std::uint32_t, bool)>& take);

 private:
  FlowParts& parts_;
  FreeSlots& free_;
  Lines& lines_;
  EndTracker& ends_;
  TimerPort& timers_;
  TimerClient& client_;
};

}  // namespace rail::detail
