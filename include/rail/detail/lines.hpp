// Lines: the lines a job may wait in between becoming due and being ready, and how they compose:
// its FIFO group's (JobOptions::group: one turn per group) and then its tenant's
// (JobOptions::tenant: a share of turns, QueueOptions::tenants and tenant_window). Each is a
// FifoGroups (fifo_groups.hpp); a job in both takes its group's turn first, then a turn of its
// tenant, and is ready once it holds every turn it needs. A group's line keeps add order
// (the point of a group); a tenant's hands its turns out by priority, with the queue's aging.
//
// Contract: enter(idx, o) before the job is published (may throw: then the slot's marks say
// what it entered, and leave() undoes exactly that); join(idx, publish) when it is due (true:
// make it ready; false: a line holds its index); admit_tenant(idx) for a job a group's turn was
// handed to (true: make it ready); leave(idx) once per job, at its end (or an undone add, or
// take_leftovers): the jobs the freed turns went to (Turns: a group's next goes on through
// admit_tenant, a tenant's next is ready); unpark(idx) by a cancel of a waiting job (true: it
// was parked, and its index is the canceller's now). The marks kGrouped and kTenant
// (job_slot.hpp) say which lines a job entered; leave() clears them.
// Threading and ordering: FifoGroups's; the marks are the slot holder's (changed by one RMW
// each).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "rail/detail/fifo_groups.hpp"
#include "rail/detail/flow_parts.hpp"
#include "rail/detail/job_slot.hpp"
#include "rail/options.hpp"

namespace rail::detail {

/// Turns: the jobs that took the turns a job's end freed (FifoGroups::kNone: none).
struct Turns {
  std::uint32_t group = FifoGroups::kNone;   // its FIFO group's next: on to its tenant's line
  std::uint32_t tenant = FifoGroups::kNone;  // its tenant's next: ready
  [[nodiscard]] bool any() const noexcept {
    return group != FifoGroups::kNone || tenant != FifoGroups::kNone;
  }
};

class Lines {
 public:
  /// Lines(parts): a tenant's line is ranked by priority, aged on the engine's clock
  /// (FifoGroups::Ranking); a group's keeps add order.
  explicit Lines(const FlowParts& parts) noexcept
      : slots_(parts.slots.get()),
        options_(parts.options),
        core_(parts.core),
        groups_(slots_, parts.capacity),
        tenants_(slots_, parts.capacity, &Lines::tenant_turns, this,
                 FifoGroups::Ranking{options_.priorities, parts.aging_ns(), &Lines::now_of}) {}
  Lines(const Lines&) = delete;
  Lines& operator=(const Lines&) = delete;

  /// wanted(o): the add's options name a line.
  [[nodiscard]] static bool wanted(const JobOptions& o) noexcept {
    return !o.group.empty() || !o.tenant.empty();
  }
  /// lined(s): the job in s entered a line.
  [[nodiscard]] static bool lined(const JobSlot& s) noexcept {
    return s.marked(JobSlot::kGrouped | JobSlot::kTenant);
  }

  void enter(std::uint32_t idx, const JobOptions& o);
  bool join(std::uint32_t idx, bool publish) noexcept;
  bool admit_tenant(std::uint32_t idx) noexcept {
    return !slots_[idx].marked(JobSlot::kTenant) || tenants_.join(idx, false);
  }
  Turns leave(std::uint32_t idx) noexcept;
  /// Closing: the turns a job's end keeps until it is reported (FifoGroups::close), and the
  /// turns already handed on (when a key could not be copied: released at once, nothing lost).
  struct Closing {
    FifoGroups::Closing group, tenant;
    Turns now;
    [[nodiscard]] bool any() const noexcept {
      return group.pending() || tenant.pending() || now.any();
    }
  };
  /// close(idx): leave() for an end reported after its job left its slot: release(c) once it
  /// is reported.
  Closing close(std::uint32_t idx) noexcept;
  /// release(c): the turns close() kept go on: the jobs that took them (with c.now's).
  Turns release(const Closing& c) noexcept;
  bool unpark(std::uint32_t idx) noexcept;
  /// step_aside(idx): a job waiting out a retry's backoff gives its tenant's turn up (its
  /// group's it keeps) and takes one again when due (join). The tenant's job that takes the
  /// turn (ready), or kNone.
  std::uint32_t step_aside(std::uint32_t idx) noexcept { return tenants_.step_aside(idx); }

  [[nodiscard]] const FifoGroups& groups() const noexcept { return groups_; }
  [[nodiscard]] const FifoGroups& tenants() const noexcept { return tenants_; }
  /// tenant_turns_for(tenant): the turns of a tenant's line: its cap, or its weight times
  /// tenant_window, whichever is fewer (a tenant not listed: weight 1, no cap).
  [[nodiscard]] std::uint32_t tenant_turns_for(std::string_view tenant) const noexcept;

 private:
  static std::uint32_t tenant_turns(const void* self, std::string_view tenant) {
    return static_cast<const Lines*>(self)->tenant_turns_for(tenant);
  }
  static std::int64_t now_of(const void* self) {
    return static_cast<const Lines*>(self)->core_.now_ns();
  }

  JobSlot* const slots_;
  const QueueOptions& options_;
  const EngineCore& core_;
  FifoGroups groups_;
  FifoGroups tenants_;
};

}  // namespace rail::detail
