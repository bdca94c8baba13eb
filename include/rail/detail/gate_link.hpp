// GateLink: one queue's door to one downstream its jobs call (downstream_gate.hpp): the gate,
// and the jobs of this queue it refused, room for every slot index (as the ready rings). They
// wait in ReadyLevels, as ready jobs do: a wake takes the best-ranked one (its priority, aged by
// its wait), so a high-priority job refused behind low ones is the next woken; and since the
// leader steps down by going back to the ready levels and waking one, the job it wakes, if of a
// higher priority, is popped ahead of it and takes the token the leader waited for.
//
// A queue has up to kMaxLinks of them: link 0 for the queue's own downstream
// (QueueOptions::downstream; absent when it names none), the others made on the first add whose
// JobOptions::downstream names another one. A job's slot keeps its link's number, so each job
// waits at, and takes permits and tokens from, the gate its add named. Links are never removed
// while the queue lives, so a published link pointer stays valid.
// Link 0 is also the queue's PermitSource (dispatcher.hpp), once serve_permits() made it one:
// while its gate limits concurrency the queue's workers take a permit before each job. A worker
// refused one marks the link hungry: store, seq_cst fence, look at the permits again (the
// waiter's side of a Dekker whose waker's side is DownstreamGate::release: release, fence, read
// the mark). Either the worker sees the permit free, or the releaser sees the mark and wakes one
// of the queue's workers (wake_hungry clears it: each waiter refused after that marks it again).
// A worker that finds the mark set already stores nothing but still fences and looks: the one
// that set it was refused after its own fence, so a releaser either sees the mark or cleared it
// and woke a worker, which looks again after this one.
// A worker's release after its handler returned skips its own queue (DownstreamGate::release's
// `next_taker`): that worker takes the next job itself at once (next_job), so waking a sleeper,
// which would find the permit gone, costs a futex wake per job.
// Threading: the gate wakes a link's jobs from any thread (BlockedQueue): a woken job goes to the
// queue's ready ring (Dispatcher::requeue), a promoted leader is retimed through the queue's
// public JobFlow::retime; the queue's workers block jobs into it.
#pragma once

#include <cstdint>
#include <memory>

#include "rail/detail/dispatcher.hpp"
#include "rail/detail/downstream_gate.hpp"
#include "rail/detail/flow_parts.hpp"
#include "rail/detail/job_slot.hpp"
#include "rail/detail/ready_levels.hpp"

namespace rail::detail {

class JobFlow;

class GateLink final : public BlockedQueue, public PermitSource {
 public:
  /// A queue's links: link 0 (its own downstream) and up to 15 named per job.
  static constexpr std::size_t kMaxLinks = 16;

  GateLink(FlowParts& parts, JobFlow& flow, Dispatcher& dispatch, DownstreamGate& gate)
      : gate_(gate),
        blocked_(parts.core, parts.capacity, parts.options.priorities, parts.slots.get(),
                 ~std::uint32_t{0}, parts.aging_ns()),
        flow_(flow),
        dispatch_(dispatch),
        slots_(parts.slots.get()) {}
  GateLink(const GateLink&) = delete;
  GateLink& operator=(const GateLink&) = delete;
  ~GateLink() = default;

  [[nodiscard]] DownstreamGate& gate() const noexcept { return gate_; }
  /// blocked(): the jobs the gate refused, waiting for a wake (ReadyLevels::push_back: a
  /// refused job's wait goes on from its stamp).
  [[nodiscard]] ReadyLevels& blocked() noexcept { return blocked_; }

  // BlockedQueue (downstream_links.cpp): the queue moves one of this link's jobs to its ready
  // ring (unless it is paused and even_paused is false) / promotes the gate's leader.
  bool wake_blocked(std::atomic<std::int64_t>& blocked, bool even_paused) noexcept override;
  bool wake_above(std::uint32_t leader, std::atomic<std::int64_t>& blocked) noexcept override;
  void promote_leader(JobId id) noexcept override;
  bool wake_hungry() noexcept override;
  [[nodiscard]] std::uint64_t waiting_for_permit() const noexcept override;

  /// serve_permits(): link 0: the queue's workers take their permits here (PermitSource) from
  /// now on. Once, before any worker starts.
  void serve_permits() noexcept;
  // PermitSource (downstream_links.cpp).
  bool limited() noexcept override { return gate_.limits().limited(); }
  Take take() noexcept override;
  void give_back() noexcept override;
  bool may_take() noexcept override;
  bool free_now() noexcept override { return gate_.limits().permit_free(); }

 private:
  /// hungry(): the waiter's side (see the header): mark, fence, look; true if a permit is free
  /// (or the limit gone) after all.
  bool hungry() noexcept;

  DownstreamGate& gate_;
  ReadyLevels blocked_;
  JobFlow& flow_;
  Dispatcher& dispatch_;
  JobSlot* slots_;  // the queue's: a woken job is marked (JobSlot::woken)
  // link 0 of a queue: see serve_permits(). Plain: written before attach() publishes the link
  // to its gate (release store of the gate's count), read only through that publication.
  bool serves_permits_ = false;
  alignas(64) std::atomic<bool> hungry_{false};  // its own line: marked by idle workers
};

}  // namespace rail::detail
