// JobExpiry: the floor and the scan that dead-letter unstarted jobs past their expire_after.
// Contract and ordering: include/rail/detail/job_expiry.hpp.
#include "rail/detail/job_expiry.hpp"

#include <algorithm>

namespace rail::detail {

void JobExpiry::lower(std::int64_t at, std::int64_t floor) noexcept {
  // relaxed: see the header (a failed CAS reloads `floor`).
  while (at < floor) {
    if (floor_.compare_exchange_weak(floor, at, std::memory_order_relaxed)) {
      timers_.request_sweep_by(at);  // the queue's sweep timer, due by then
      return;
    }
  }
}

std::int64_t JobExpiry::sweep(std::int64_t now, Wheel& wheel, bool stopping) noexcept {
  // relaxed: a hint; a floor lowered after this load came with a request for another sweep.
  const std::int64_t floor = floor_.load(std::memory_order_relaxed);
  if (now < floor) return floor;
  // After shutdown began, unstarted jobs are the shutdown's to report and hand back.
  if (stopping) return kNever;
  if (now < next_scan_ns_) return next_scan_ns_;
  next_scan_ns_ =
      saturating_add(now, Duration{kScanNsPerSlot * static_cast<std::int64_t>(parts_.capacity)});
  // Reset, then fence, then scan: an add published before the fence is seen by the scan, and
  // one after it sees the reset floor and lowers it (see the header).
  floor_.store(kNever, std::memory_order_relaxed);
  heavy_fence();
  std::int64_t next = kNever;
  bool expired = false, in_ring = false;
  for (std::uint32_t i = 0; i < parts_.capacity; ++i) {
    JobSlot& s = parts_.slot(i);
    const std::uint64_t c = s.ctl.load();
    const SlotState st = ctl::state(c);
    if (st != SlotState::waiting && st != SlotState::delayed && st != SlotState::updating) continue;
    const std::int64_t at = s.expires_at();  // after the word: expire()'s CAS validates it
    if (is_never(at)) continue;
    if (at <= now && st != SlotState::updating) {
      const JobControl::Expired e = control_.expire(i, c, wheel);
      if (e != JobControl::Expired::moved_on) {
        expired = true;
        in_ring |= e == JobControl::Expired::in_ring;
        continue;
      }
    }
    // Not due yet, or busy (a debounce or a retime holds it), or moved on since the load (it
    // started, or was cancelled): kept in the floor, at the latest in a moment.
    next = std::min(next, std::max(at, now + 1));
  }
  // The ring's sweep runs payload destructors: not while this thread holds the wheel. If the
  // call cannot be kept (no memory), the jobs' next holders end them: a worker's pop, an add's
  // sweep for room, or the next expiry (in_ring jobs are in no floor: see the header).
  if (expired) {
    try {
      parts_.core.after_wheel([this, in_ring] { control_.after_expiries(in_ring); });
    } catch (...) {
    }
  }
  // Merge with what adds lowered it to meanwhile (relaxed: see the header).
  std::int64_t cur = floor_.load(std::memory_order_relaxed);
  while (next < cur && !floor_.compare_exchange_weak(cur, next, std::memory_order_relaxed)) {
  }
  return std::max(std::min(next, cur), next_scan_ns_);
}

}  // namespace rail::detail
