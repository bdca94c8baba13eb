// JobFlow at shutdown: which jobs are left (the report), telling the waiters of jobs that will
// never start, and handing unstarted jobs back (Queue::take_leftovers). Runs after the engine
// stopped accepting and its workers were stopped; reads the slot words seq_cst, in one order
// with SlotControl::activate, so a job reported waiting here never starts.
#include <string>

#include "rail/detail/job_flow.hpp"

namespace rail::detail {

void JobFlow::collect_leftovers(ShutdownReport& report) const {
  for (std::size_t i = 0; i < parts_.capacity; ++i) {
    const JobSlot& s = slot(i);
    // seq_cst: see SlotControl::activate (a job reported waiting here never starts).
    const std::uint64_t c = s.ctl.load(std::memory_order_seq_cst);
    const SlotState st = ctl::state(c);
    // A handler is still running on the slot while it holds a pin: the live delivery, or a stale
    // one whose lease lapsed, whatever became of the job since (waiting again, ended).
    const bool running = ctl::pins(c) > 0 || st == SlotState::active || st == SlotState::finishing;
    const bool unstarted =
        st == SlotState::waiting || st == SlotState::delayed || st == SlotState::updating;
    if (!running && !unstarted) continue;
    LeftoverJob j{parts_.name, s.id.load(std::memory_order_relaxed), std::string(job_name(s)),
                  s.attempts()};
    if (unstarted) report.not_started.push_back(j);
    if (running) report.still_running.push_back(std::move(j));
  }
  collect_deferred(report);
}

void JobFlow::abandon_unstarted() {
  if (!ends_.tracker().wanted()) return;
  for (std::size_t i = 0; i < parts_.capacity; ++i) {
    const JobSlot& s = slot(i);
    const SlotState st = ctl::state(s.ctl.load(std::memory_order_seq_cst));  // as collect_leftovers
    if (st != SlotState::waiting && st != SlotState::delayed && st != SlotState::updating) continue;
    const JobId id = s.id.load(std::memory_order_relaxed);
    ends_.tracker().abandon(id, "the engine shut down before job " + std::to_string(id) +
                                    " of queue '" + parts_.name +
                                    "' started; Queue::take_leftovers() hands it back");
  }
}

bool JobFlow::take_unstarted(const std::function<void(std::uint32_t, bool)>& take) {
  // As the wheel's owner: a delayed job's timer is unlinked with the job, so nothing fires a
  // slot whose payload was handed back.
  return parts_.core
      .with_wheel([&](Wheel& wheel) {
        timers_.drain(wheel, *this);  // slots in transit to the wheel are linked now
        for (std::uint32_t i = 0; i < parts_.capacity; ++i) {
          JobSlot& s = slot(i);
          const std::optional<SlotState> from = s.ctl.take_unstarted();
          if (!from) continue;
          const bool delayed = *from == SlotState::delayed;
          parts_.stats.add(delayed ? kFromDelayed : kFromReady);  // out of its gauge: it left
          take(i, delayed);
          s.ctl.mark_free();
          // A delayed job's index was on the wheel: back to the free list. A waiting one's stays
          // in the ready ring, which nothing pops after stop (next_job, run_ready).
          if (delayed && timers_.unlink(s, wheel)) free_.push(i);
        }
        return true;
      })
      .has_value();
}

}  // namespace rail::detail
