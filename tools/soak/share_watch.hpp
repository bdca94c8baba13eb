// ShareWatch: the soak's priorities and fair shares (Config::priorities, Config::tenants): it
// declares them on the queue, gives each job a priority and a tenant from its plan, and checks
// invariant 8 of soak.hpp: the capped tenant never has more handlers running at once than its
// cap (checked with leases off only: a handler whose lease lapsed runs on while its job, retried,
// lends its turn to the next job of the tenant, so with leases the count may pass the cap
// without the engine breaking it). It reports the mean wait of each level (added to first start,
// jobs without a delay), which shows the levels at work when the workers are saturated.
// A redriven job comes back without its priority and tenant (the README says so): its handlers
// are not counted.
// Threading: choose/note_added from producers, enter/leave from handlers, on_event from the
// engine's observers; report once every thread is done. Memory: 24 bytes per job id (with
// priorities), none otherwise.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>

#include "rail/rail.hpp"
#include "soak/soak.hpp"
#include "soak/violations.hpp"

namespace rail::soak {

class ShareWatch {
 public:
  ShareWatch(const Config& c, std::uint64_t max_id);

  /// declare(qo): the queue's levels, aging, tenants' shares and window.
  void declare(QueueOptions& qo) const;
  /// choose(o, plan): a job's priority and tenant, from its plan.
  void choose(JobOptions& o, std::uint64_t plan) const;
  /// note_added(id, plan, delayed): job id was added with this plan; delayed: its wait starts
  /// later than its add, so its wait is not averaged.
  void note_added(JobId id, std::uint64_t plan, bool delayed) noexcept;
  /// enter(plan, first_life) / leave(counted): a handler of a job with this plan starts / returns
  /// (counted: what enter returned).
  bool enter(std::uint64_t plan, bool first_life) noexcept;
  void leave(bool counted) noexcept;
  /// on_event(e): `added` and `started` events (stamps for the waits per level).
  void on_event(const Event& e) noexcept;
  /// report(rep, v): the figures into rep; invariant 8's breach into v.
  void report(Report& rep, Violations& v) const;

 private:
  /// level_of / tenant_of(plan): the job's priority and tenant (0 .. tenants - 1).
  [[nodiscard]] std::uint32_t level_of(std::uint64_t plan) const noexcept;
  [[nodiscard]] std::uint32_t tenant_of(std::uint64_t plan) const noexcept;

  struct Stamps {
    std::atomic<std::int64_t> added{0}, started{0};  // engine clock, ns (0: none yet)
    std::uint8_t level = 0xFF;                       // 0xFF: not averaged
  };
  const Config& cfg_;
  std::uint64_t max_id_;
  std::unique_ptr<Stamps[]> stamps_;                       // with priorities
  std::atomic<std::uint32_t> inside_{0}, most_inside_{0};  // the capped tenant's handlers
};

}  // namespace rail::soak
