// GateLink: one queue's door to one downstream its jobs call (downstream_gate.hpp): the gate,
// and the ring of this queue's jobs it refused, room for every slot index (as the ready ring).
//
// A queue has up to kMaxLinks of them: link 0 for the queue's own downstream
// (QueueOptions::downstream; absent when it names none), the others made on the first add whose
// JobOptions::downstream names another one. A job's slot keeps its link's number, so each job
// waits at, and takes permits and tokens from, the gate its add named. Links are never removed
// while the queue lives, so a published link pointer stays valid.
// Threading: the gate wakes a link's jobs from any thread (BlockedQueue): a woken job goes to the
// queue's ready ring (Dispatcher::requeue), a promoted leader is retimed through the queue's
// public JobFlow::retime; the queue's workers block jobs into it.
#pragma once

#include <cstdint>
#include <memory>

#include "rail/detail/downstream_gate.hpp"
#include "rail/detail/job_slot.hpp"
#include "rail/detail/mpmc_ring.hpp"

namespace rail::detail {

class JobFlow;
class Dispatcher;

class GateLink final : public BlockedQueue {
 public:
  /// A queue's links: link 0 (its own downstream) and up to 15 named per job.
  static constexpr std::size_t kMaxLinks = 16;

  GateLink(JobFlow& flow, Dispatcher& dispatch, DownstreamGate& gate, std::size_t capacity,
           JobSlot* slots)
      : gate_(gate), blocked_(capacity), flow_(flow), dispatch_(dispatch), slots_(slots) {}
  GateLink(const GateLink&) = delete;
  GateLink& operator=(const GateLink&) = delete;
  ~GateLink() = default;

  [[nodiscard]] DownstreamGate& gate() const noexcept { return gate_; }
  [[nodiscard]] MpmcRing<std::uint32_t>& blocked() noexcept { return blocked_; }

  // BlockedQueue (downstream_links.cpp): the queue moves one of this link's jobs to its ready
  // ring (unless it is paused and even_paused is false) / promotes the gate's leader.
  bool wake_blocked(std::atomic<std::int64_t>& blocked, bool even_paused) noexcept override;
  void promote_leader(JobId id) noexcept override;

 private:
  DownstreamGate& gate_;
  MpmcRing<std::uint32_t> blocked_;
  JobFlow& flow_;
  Dispatcher& dispatch_;
  JobSlot* slots_;  // the queue's: a woken job is marked (JobSlot::woken)
};

}  // namespace rail::detail
