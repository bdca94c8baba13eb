// Leftovers: the shutdown report, abandoned waiters and take_leftovers. Contract: leftovers.hpp.
#include "rail/detail/leftovers.hpp"

#include <string>

namespace rail::detail {

void Leftovers::collect(ShutdownReport& report) const {
  for (std::size_t i = 0; i < parts_.capacity; ++i) {
    const JobSlot& s = parts_.slot(i);
    // seq_cst: see SlotControl::activate (a job reported waiting here never starts).
    const std::uint64_t c = s.ctl.load(std::memory_order_seq_cst);
    const SlotState st = ctl::state(c);
    // A handler is still running on the slot while it holds a pin: the live delivery, or a stale
    // one whose lease lapsed, whatever became of the job since (waiting again, ended).
    const bool running = ctl::pins(c) > 0 || st == SlotState::active || st == SlotState::finishing;
    const bool unstarted =
        st == SlotState::waiting || st == SlotState::delayed || st == SlotState::updating;
    if (!running && !unstarted) continue;
    LeftoverJob j{parts_.name, s.id.load(std::memory_order_relaxed),
                  std::string(parts_.job_name(s)), s.attempts()};
    if (unstarted && s.marked(JobSlot::kWaitingChildren)) report.waiting_children.push_back(j);
    if (unstarted) report.not_started.push_back(j);
    if (ctl::zombies(c) > 0) report.zombies.push_back(j);
    if (running) report.still_running.push_back(std::move(j));
  }
}

void Leftovers::abandon_unstarted(bool dropped) {
  if (!ends_.wanted()) return;
  for (std::size_t i = 0; i < parts_.capacity; ++i) {
    const JobSlot& s = parts_.slot(i);
    const SlotState st = ctl::state(s.ctl.load(std::memory_order_seq_cst));  // as collect
    if (st != SlotState::waiting && st != SlotState::delayed && st != SlotState::updating) continue;
    const JobId id = s.id.load(std::memory_order_relaxed);
    std::string why = "the engine " + std::string(dropped ? "was destroyed" : "shut down") +
                      " before job " + std::to_string(id) + " of queue '" + parts_.name +
                      "' started; ";
    why += dropped ? "it was dropped with its payload (Engine::shutdown() then "
                     "Queue::take_leftovers() keeps it)"
                   : "Queue::take_leftovers() hands it back";
    ends_.abandon(id, std::move(why));
  }
}

bool Leftovers::take(const std::function<void(std::uint32_t, bool)>& take) {
  // As the wheel's owner: a delayed job's timer is unlinked with the job, so nothing fires a
  // slot whose payload was handed back.
  return parts_.core
      .with_wheel([&](Wheel& wheel) {
        timers_.drain(wheel, client_);  // slots in transit to the wheel are linked now
        for (std::uint32_t i = 0; i < parts_.capacity; ++i) {
          JobSlot& s = parts_.slot(i);
          const std::optional<SlotState> from = s.ctl.take_unstarted();
          if (!from) continue;
          const bool delayed = *from == SlotState::delayed;
          // A job held for its downstream is on the wheel but counted (and reported) waiting.
          const bool held = delayed && s.marked(JobSlot::kHeld);
          parts_.stats.add(delayed && !held ? kFromDelayed : kFromReady);  // out of its gauge
          parts_.leave_children_wait(s);
          parts_.leave_retry_here(s);  // its place for short retries here, if it took one
          take(i, delayed && !held);
          // Out of its group's line, if it was in one (the turn a holder hands on goes to a job
          // this pass takes too: every waiting job is taken).
          if (Lines::lined(s)) (void)lines_.leave(i);
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
