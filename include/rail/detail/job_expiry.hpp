// JobExpiry: dead-letters, on time, the jobs that were not started within their expire_after
// (JobOptions / QueueOptions::expire_after, reason `expired`), also when no worker takes them.
// A worker that takes an expired job ends it instead of running it (JobFlow::deliver); this
// room finds the ones nobody takes: waiting in the ready ring, a stash, a line or a blocked
// ring, or delayed on the wheel.
//
// Algorithm: a floor, the earliest expiry time of any job that may still be unstarted. An add
// that expires lowers it when it is earlier (with a steady expire_after each add is later than
// the floor: one load, no write) and pulls the queue's sweep in to that time. The sweep, when the
// floor has come, resets it, scans every slot, takes each unstarted job past its time from its
// index's holder, who ends it (JobControl::expire; the rings' holders right after the wheel is
// released), and lowers the floor to the earliest time it left. A scan costs
// O(capacity), so scans are spaced at least capacity x kScanNsPerSlot apart: a job expires within
// that (and the wheel's tick) of its time, and the scan takes a bounded share of the timer.
// Invariant: every unstarted expiring job either has its time at or above the floor, or is being
// looked at by a scan that will lower the floor to it.
// Memory ordering: the Dekker hand-off between an add (publish the job, then read the floor) and
// the sweep (reset the floor, then read the slots) uses the asymmetric fence: the add's
// light_fence() pairs with the sweep's heavy_fence(), so either the add sees the reset floor and
// lowers it, or the scan sees the job published. Lowering is a CAS loop (relaxed: the floor
// publishes nothing; the sweep re-reads each slot's word with acquire). A slot's time is read as
// JobSlot::expires_at() says, and acted on only through a CAS against the word read before it.
// Threading: added() from any thread; sweep() by the wheel's owner only.
#pragma once

#include <atomic>
#include <cstdint>

#include "rail/detail/asymmetric_fence.hpp"
#include "rail/detail/deadline.hpp"
#include "rail/detail/engine_core.hpp"
#include "rail/detail/flow_parts.hpp"
#include "rail/detail/job_control.hpp"
#include "rail/detail/timer_port.hpp"

namespace rail::detail {

class JobExpiry {
 public:
  /// The spacing between two scans, per slot of capacity: 65,536 slots allow one scan every
  /// 1 ms, so a scan (a few hundred microseconds there) takes at most that share of the timer.
  static constexpr std::int64_t kScanNsPerSlot = 16;

  JobExpiry(FlowParts& parts, JobControl& control, TimerPort& timers) noexcept
      : parts_(parts), control_(control), timers_(timers) {
    init_asymmetric_fence();
  }
  JobExpiry(const JobExpiry&) = delete;
  JobExpiry& operator=(const JobExpiry&) = delete;

  /// added(at): a job that expires at `at` (kNever: it does not) was just published, or went
  /// back to waiting unstarted (a downstream refused it): the sweep will find it by then.
  void added(std::int64_t at) noexcept {
    if (is_never(at)) return;
    light_fence();  // after the publish: see the header
    // relaxed: see the header.
    std::int64_t floor = floor_.load(std::memory_order_relaxed);
    if (at >= floor) [[likely]]
      return;
    lower(at, floor);
  }

  /// sweep(now, wheel, stopping): as the wheel's owner: takes every unstarted job past its time
  /// by now (when the floor has come and a scan is allowed; none once the queue is `stopping`:
  /// shutdown reports and hands back unstarted jobs) and has it ended; returns when to sweep
  /// next (kNever: no job expires).
  std::int64_t sweep(std::int64_t now, Wheel& wheel, bool stopping) noexcept;

 private:
  void lower(std::int64_t at, std::int64_t floor) noexcept;

  FlowParts& parts_;
  JobControl& control_;
  TimerPort& timers_;
  std::atomic<std::int64_t> floor_{kNever};
  std::int64_t next_scan_ns_ = 0;  // the wheel owner's: the earliest the next scan may start
};

}  // namespace rail::detail
