// Lines: a job's FIFO group and tenant lines, composed. Contract: lines.hpp.
#include "rail/detail/lines.hpp"

#include <algorithm>

namespace rail::detail {

void Lines::enter(std::uint32_t idx, const JobOptions& o) {
  JobSlot& s = slots_[idx];
  if (!o.group.empty()) {
    groups_.enter(idx, o.group);  // may throw: nothing entered
    s.mark(JobSlot::kGrouped, true);
  }
  if (!o.tenant.empty()) {
    tenants_.enter(idx, o.tenant);  // may throw: the group entered, and leave() undoes it
    s.mark(JobSlot::kTenant, true);
  }
}

bool Lines::join(std::uint32_t idx, bool publish) noexcept {
  const JobSlot& s = slots_[idx];
  if (s.marked(JobSlot::kGrouped)) {
    if (!groups_.join(idx, publish)) return false;  // parked behind its group's turn
    publish = false;                                // published under the group's lock
  }
  return !s.marked(JobSlot::kTenant) || tenants_.join(idx, publish);
}

Turns Lines::leave(std::uint32_t idx) noexcept {
  JobSlot& s = slots_[idx];
  Turns t;
  if (s.take_mark(JobSlot::kTenant)) t.tenant = tenants_.leave(idx);
  if (s.take_mark(JobSlot::kGrouped)) t.group = groups_.leave(idx);
  return t;
}

Lines::Closing Lines::close(std::uint32_t idx) noexcept {
  JobSlot& s = slots_[idx];
  Closing c;
  if (s.take_mark(JobSlot::kTenant)) {
    try {
      c.tenant = tenants_.close(idx);
    } catch (...) {  // no memory for the key's copy: the turn goes on now
      c.now.tenant = tenants_.leave(idx);
    }
  }
  if (s.take_mark(JobSlot::kGrouped)) {
    try {
      c.group = groups_.close(idx);
    } catch (...) {
      c.now.group = groups_.leave(idx);
    }
  }
  return c;
}

Turns Lines::release(const Closing& c) noexcept {
  Turns t = c.now;
  if (c.tenant.pending()) t.tenant = tenants_.release(c.tenant);
  if (c.group.pending()) t.group = groups_.release(c.group);
  return t;
}

bool Lines::unpark(std::uint32_t idx) noexcept {
  const JobSlot& s = slots_[idx];
  // A job waits in one line at a time: its group's, or (holding its group's turn) its tenant's.
  return (s.marked(JobSlot::kGrouped) && groups_.unpark(idx)) ||
         (s.marked(JobSlot::kTenant) && tenants_.unpark(idx));
}

std::uint32_t Lines::tenant_turns_for(std::string_view tenant) const noexcept {
  const std::uint64_t window = options_.tenant_window;
  for (const TenantShare& t : options_.tenants)
    if (t.tenant == tenant) {
      const std::uint64_t share = std::min<std::uint64_t>(t.weight * window, UINT32_MAX);
      return static_cast<std::uint32_t>(t.max_active ? std::min<std::uint64_t>(*t.max_active, share)
                                                     : share);
    }
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(window, UINT32_MAX));
}

}  // namespace rail::detail
