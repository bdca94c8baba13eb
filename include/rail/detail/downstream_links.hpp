// DownstreamLinks: a queue's links to the downstreams its jobs call (gate_link.hpp) — link 0 for
// QueueOptions::downstream (null without one), the others made on the first add whose
// JobOptions::downstream names another declared downstream — and how a delivery gives its
// permit back.
//
// Guarantee: a link, once published, stays valid and keeps its number while the queue lives, so
// a job's slot may carry its link's number (JobSlot::link) from add to end. At most kMaxLinks.
// Algorithm: an array of atomic pointers and a published count; a link is made under links_mu_
// (cold: a downstream's first add), stored, then the count is raised.
// Memory ordering: the count's store is release and its loads acquire, so a reader that sees the
// count sees every link before it (the pointers themselves are relaxed). A job's link number
// reaches a worker through the slot's publication, which comes after the link's release, so
// link(i) is a relaxed load.
// Threading: link_to from adding threads; link/link_of/for_each from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "rail/detail/dispatcher.hpp"
#include "rail/detail/flow_parts.hpp"
#include "rail/detail/gate_link.hpp"
#include "rail/outcome.hpp"

namespace rail::detail {

/// return_permit(gate, out, now): a delivery that held a permit of `gate` is over. The permit
/// counts calls inside the downstream: it goes back as the call is over, before its outcome is
/// applied (a retry's backoff is not a call). A pushback (HTTP 429) pauses the downstream first:
/// the release may wake a job, and another worker must not admit it into the pause. Before
/// finish(): the downstream refused the call even if the lease lapsed meanwhile. next_taker:
/// as DownstreamGate::release's.
inline void return_permit(DownstreamGate& gate, const Outcome& out, std::int64_t now,
                          const BlockedQueue* next_taker = nullptr) noexcept {
  if (out.kind() == Outcome::Kind::pushback) [[unlikely]]
    gate.limits().pause_for(now, out.delay());
  gate.release(now, next_taker);
}

static_assert(GateLink::kMaxLinks <= (1u << JobSlot::kPriorityShift),
              "a job's link number is the low bits of its JobSlot::link byte");

class DownstreamLinks {
 public:
  /// DownstreamLinks(parts, flow, dispatch): makes link 0 when the queue names a downstream
  /// (Error(unknown_downstream) if it was never declared). Its gate hears of it in attach().
  DownstreamLinks(FlowParts& parts, JobFlow& flow, Dispatcher& dispatch);
  DownstreamLinks(const DownstreamLinks&) = delete;
  DownstreamLinks& operator=(const DownstreamLinks&) = delete;

  /// attach(): link 0's gate may wake this queue's jobs from now on (the queue is built).
  void attach();

  /// link(i): link i, or null (link 0 of a queue without a downstream of its own).
  [[nodiscard]] GateLink* link(std::uint8_t i) const noexcept {
    return links_[i].load(std::memory_order_relaxed);  // see the header
  }
  template <class F>
  void for_each(F&& f) const noexcept {
    // acquire: pairs with link_to's release store of the count (the links before it are in).
    const std::size_t n = count_.load(std::memory_order_acquire);
    for (std::size_t i = 0; i < n; ++i)
      if (GateLink* l = links_[i].load(std::memory_order_relaxed)) f(*l);
  }
  /// link_to(downstream): finds or makes the link to a declared downstream (cold: admit);
  /// Error(unknown_downstream), or Error(capacity) past kMaxLinks.
  void link_to(const std::string& downstream);
  /// link_of(downstream): the number of the link link_to made: 0 for none or the queue's own.
  [[nodiscard]] std::uint8_t link_of(const std::string& downstream) const noexcept;
  /// own_downstream(s): the downstream the job named if it is not the queue's (else empty).
  [[nodiscard]] std::string own_downstream(const JobSlot& s) const {
    return s.downstream_link() == 0 ? std::string() : link(s.downstream_link())->gate().name();
  }
  /// stepped_aside(id): job `id`, delayed, is now due later than its downstream's token or
  /// pause (a debounce, a change_delay): if it led the gate's waiting jobs, another leads.
  void stepped_aside(JobId id) noexcept {
    for_each([id](GateLink& l) { l.gate().forget_leader(id); });
  }
  /// pass_wakes(): a queue that calls a downstream hands on a wake its paused ready ring may
  /// hold (wake_blocked passes a paused queue by while another can take the wake), and takes one
  /// back when it resumes.
  /// waiting_in_line(waiting): of the queue's `waiting` jobs, those not held at a gate (blocked,
  /// or leading on the wheel): in its ready ring, in line (a figure).
  [[nodiscard]] std::uint64_t waiting_in_line(std::uint64_t waiting) const noexcept;
  void pass_wakes() noexcept {
    for_each([](GateLink& l) { l.gate().pass_wake(); });
  }

 private:
  FlowParts& parts_;
  JobFlow& flow_;
  Dispatcher& dispatch_;
  std::array<std::atomic<GateLink*>, GateLink::kMaxLinks> links_{};
  std::atomic<std::size_t> count_{1};
  std::vector<std::unique_ptr<GateLink>> owner_;
  std::mutex mu_;  // link_to's
};

}  // namespace rail::detail
