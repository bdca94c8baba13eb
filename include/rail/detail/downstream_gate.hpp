// DownstreamGate: one downstream's door for the queues whose jobs call it. It owns the limits
// (downstream_limits.hpp: permits, the token bucket, the pushback pause) and decides where a
// job that is refused goes, so that it waits without holding a worker thread and without
// polling, and starts as soon as a permit frees or a token refills.
//
// The workers of a queue whose own downstream this is take a permit before they take a job
// (PermitSource, gate_link.hpp) while it limits concurrency, so its jobs wait for permits in the
// queue's ready ring, in line, and come to admit() holding one: they wait here only for time.
// A release wakes those workers too (wake_hungry). Jobs that name this downstream from another
// queue take their permit here:
// Where a refused job waits (JobFlow::deliver asks admit() right after activating the slot,
// before any lease, attempt or counter):
//   no permit       back to `waiting`, its index in the queue's blocked ring (not the ready
//                   ring): a release_permit() wakes one blocked job (wake_one), which a worker
//                   then admits or blocks again.
//   no token yet /  one job per gate, the leader, goes to the timing wheel as a `delayed` job due
//   paused          when the token comes (or the pause ends); the others wait in the blocked
//                   rings. When the leader is delivered again it steps down; each admission
//                   wakes one blocked job (a chain that admits jobs as fast as tokens allow),
//                   and a job refused again for time becomes the next leader.
// So a gate has at most one timer on the wheel whatever the number of waiting jobs (no herd of
// timers due at the same token), and a job refused costs one ring push and pop, no attempt.
//
// Invariant (no stall): while a job is blocked, some job is on its way to take the next permit
// or token: a leader is armed (its stepping down wakes one), or every permit is held (a release
// wakes one), or a woken job is on its way to admit(). admit() keeps it: admitted, it wakes the
// next job if that one could start now, or, when it was itself woken, if none leads and a permit
// is free (the next job, refused for time, leads: the woken job may have come after a refill and
// taken the token its waker meant it to wait for); refused for time with no leader, it leads;
// refused otherwise, blocked() wakes one if what refused it is gone. A job that was not woken
// (the leader back from the wheel, a new job) carries no wake: the one its stepping down woke
// does, so the leader takes its token ahead of the jobs it woke. Every wake goes through
// wake_if_blocked or wake_if_useful.
//
// Wake-ups are never lost (Dekker, with a seq_cst fence on each side):
//   blocker: push its index, count it in blocked_, fence, then if a permit is free or no leader
//            is armed, wake one (perhaps itself);
//   waker:   release the permit (or step down as leader), fence, then if blocked_ > 0, wake one.
// Either the blocker sees the free permit (or the absent leader), or the waker sees the count.
// A wake may find a job that no longer needs it (woken, refused again: one extra delivery).
// Priorities: a leader that steps down wakes first a blocked job of its queue that outranks it
// (step_down), unmarked, and is itself marked as woken: the job woken is served ahead of it and
// takes the token, and the leader carries the chain (it leads again, or, admitted once time has
// passed, wakes the next job as a woken job does). Were the woken job marked instead, it would
// wake the next one as if none led, the leader would lead, and that one would go to the back of
// its level: equal priorities would lose their order.
// A leader cancelled on the wheel steps down in its cancel (forget_leader) and wakes one; so
// does a leader whose due time moves later (change_delay, a debounce). A wake that reaches a
// cancelled job is handed on (pass_wake); a paused queue takes a wake only when no other queue
// has a job blocked (its job then waits in its ready ring, to start or lead at the resume), and
// hands one on when it pauses and when it resumes.
//
// Memory ordering: the blocked rings are MpmcRings (push release, pop acquire); the requeue into
// the ready ring hands the slot on as any ready push does. leader_ and blocked_ carry no data
// (the fences above order them). Threading: any thread admits, blocks, releases and wakes; attach
// and the run-time changes are cold and serialized by mu_.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "rail/detail/downstream_limits.hpp"
#include "rail/downstream.hpp"
#include "rail/job_state.hpp"

namespace rail::detail {

/// BlockedQueue: a queue whose jobs may wait at a gate (JobFlow).
class BlockedQueue {
 public:
  /// wake_blocked(blocked, even_paused): moves one job of this queue's blocked ring to its
  /// ready ring; false when the ring is empty, or the queue is paused and not even_paused (a job
  /// woken into a paused queue holds the wake until its resume: wake_one offers it to the other
  /// queues first).
  /// `blocked` (the gate's count) is decremented between the pop and the requeue, so that a job
  /// that runs and ends at once is never still counted once its queue drained (else stats()
  /// can show 1 waiting after wait_idle() returned:
  /// DownstreamWakeupThreaded.SharedDownstreamUnderFlipsCancelsPushbacksAndLapses pins it).
  virtual bool wake_blocked(std::atomic<std::int64_t>& blocked, bool even_paused) noexcept = 0;
  /// wake_above(leader, blocked): the gate's leader, slot `leader` of this queue, is ready again
  /// and steps down (DownstreamGate::step_down): if a job of this queue blocked here outranks
  /// it (a higher priority, by ReadyLevels' ranks), that one moves to the ready levels, without
  /// the wake's mark, and `blocked` is decremented as wake_blocked does; false if none does, or
  /// the queue is paused.
  virtual bool wake_above(std::uint32_t leader, std::atomic<std::int64_t>& blocked) noexcept = 0;
  /// promote_leader(id): the gate's limits changed: job `id`, delayed as the gate's leader,
  /// runs now (Queue::promote).
  virtual void promote_leader(JobId id) noexcept = 0;
  /// wake_hungry(): a permit came free (after the gate's fence): if this queue's workers were
  /// refused one of this gate's permits before they took a job (PermitSource), they look again;
  /// true if they were.
  virtual bool wake_hungry() noexcept = 0;
  /// waiting_for_permit(): jobs ready in this queue that take this gate's permits before they
  /// pop (its own downstream, limited): they wait for one while every permit is in use.
  [[nodiscard]] virtual std::uint64_t waiting_for_permit() const noexcept = 0;

 protected:
  ~BlockedQueue() = default;
};

class DownstreamGate {
 public:
  static constexpr std::size_t kMaxQueues = 256;  // queue links (gate_link.hpp) calling it

  DownstreamGate(std::string name, const DownstreamOptions& options, std::int64_t now_ns);
  DownstreamGate(const DownstreamGate&) = delete;
  DownstreamGate& operator=(const DownstreamGate&) = delete;

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] DownstreamLimits& limits() noexcept { return limits_; }
  [[nodiscard]] const DownstreamLimits& limits() const noexcept { return limits_; }

  /// attach(q): queue link q's jobs call this downstream (at the queue's declaration, or the
  /// first add naming it); Error(capacity) past kMaxQueues links.
  void attach(BlockedQueue* q);

  /// Verdict: what deliver does with the job it activated.
  enum class Verdict : std::uint8_t {
    admitted,  // run it; release() when its handler returns
    block,     // put it in the queue's blocked ring, then blocked()
    lead,      // it leads: to the wheel until `until_ns`
  };
  struct Decision {
    Verdict verdict;
    std::int64_t until_ns;  // lead: the due time
    Admission::Kind why;    // what refused it (for the event)
  };
  /// admit(id, now, q, woken, holds_permit): job `id` of queue q asks to start at `now` (see
  /// the header); `woken`: a wake of this gate moved it to ready (it carries the chain: see the
  /// invariant); `holds_permit`: its worker took one of this gate's permits before it took the
  /// job (PermitSource): it waits only for the pause and a token, and a refusal gives the
  /// permit back (as release() does).
  [[nodiscard]] Decision admit(JobId id, std::int64_t now, BlockedQueue* q, bool woken = false,
                               bool holds_permit = false) noexcept;
  /// blocked(why): the caller pushed a job refused for `why` into its blocked ring (the
  /// blocker's side).
  void blocked(Admission::Kind why) noexcept;
  /// release(now, next_taker): a handler admitted here returned at `now`, or a permit taken for
  /// a job (PermitSource) goes back unused (the waker's side, for blocked jobs and hungry
  /// queues). next_taker: a queue whose worker is releasing and goes on to take its next job at
  /// once (next_job): its own workers are not woken for this permit (gate_link.hpp).
  void release(std::int64_t now, const BlockedQueue* next_taker = nullptr) noexcept;
  /// forget_leader(id): job `id` left the wheel without being delivered (cancelled, taken).
  void forget_leader(JobId id) noexcept;
  /// StepDown: what step_down did.
  enum class StepDown : std::uint8_t {
    not_leader,  // the job no longer leads (a cancel or a change stepped it down): nothing
    outranked,   // it woke a job of its queue that outranks it: the caller marks the leader
                 // woken (JobSlot::kWoken) before it pushes it, so that it carries the chain
    in_line,     // none outranks it: the caller pushes it, then calls wake_next()
  };
  /// step_down(id, q, idx): the leader, job `id` in slot idx of queue link q, came off the wheel
  /// and is about to go back to q's ready levels to take the token it waited for (the caller
  /// still holds idx). It steps down as forget_leader does, but the job it wakes is first one
  /// of q's that outranks it (q->wake_above, read while idx is the caller's), woken without the
  /// mark: that job is served ahead of the leader and takes the token, and the leader, marked,
  /// carries the chain (admitted, it wakes the next job when none leads; refused, it leads).
  [[nodiscard]] StepDown step_down(JobId id, BlockedQueue* q, std::uint32_t idx) noexcept;
  /// wake_next(): after step_down's in_line and the leader's push: wakes one blocked job (behind
  /// the leader, which takes the token first). step_down's fence orders it.
  void wake_next() noexcept {
    if (blocked_.load(std::memory_order_relaxed) > 0) (void)wake_one();  // relaxed: see above
  }
  /// pass_wake(): a wake this caller received went to a job that cannot use it (cancelled, or in
  /// a queue that was paused meanwhile): hand it on, as a release would (the waker's side).
  void pass_wake() noexcept { wake_if_blocked(); }
  /// swept(removed, now): a sweep of a blocked ring (a cancel's) took `removed` jobs out for
  /// good and put the others back: they were out of the ring for a moment, in which a wake may
  /// have found it empty, so this is the blocker's side again (see blocked()).
  void swept(std::int64_t removed, std::int64_t now) noexcept;
  /// changed(): the limits changed at run time: wake a blocked job and promote the leader, so
  /// that a higher limit takes effect at once.
  void changed() noexcept;

  /// leads_for(q): a job of queue link q leads now (a figure).
  [[nodiscard]] bool leads_for(const BlockedQueue* q) const noexcept {
    // relaxed, both: a figure; the queue may be stale for a moment after a new leader.
    return leader_.load(std::memory_order_relaxed) != 0 &&
           leader_queue_.load(std::memory_order_relaxed) == q;
  }
  /// waiting_for_permit(): jobs ready in the queues that take a permit before they pop (a
  /// figure: they wait for one while every permit is in use).
  [[nodiscard]] std::uint64_t waiting_for_permit() const noexcept;

  /// blocked_count(): jobs in the blocked rings now (a figure).
  [[nodiscard]] std::int64_t blocked_count() const noexcept {
    return blocked_.load(std::memory_order_relaxed);  // relaxed: a figure
  }

 private:
  /// refuse(id, q, a): admit's verdict for job `id` of queue q, refused as `a` says: it leads
  /// (refused for time, and no job leads) or it blocks.
  Decision refuse(JobId id, BlockedQueue* q, const Admission& a) noexcept;
  /// wake_one(): moves one blocked job to its queue's ready ring, round robin over the queues
  /// that are not paused, else into a paused one's (it starts, or leads, at the resume).
  bool wake_one() noexcept;
  /// wake_if_blocked(): the waker's side: fence, then wake one if any is blocked.
  void wake_if_blocked() noexcept;
  /// permit_back(): a permit came back that a job (blocked) or a queue's workers (hungry) may
  /// have been refused meanwhile: fence, then wake both.
  void permit_back() noexcept;
  /// wake_hungry(skip): after a fence: every queue whose workers were refused a permit looks
  /// again (one permit may serve any of them; a paused one would not pass it on), but `skip`.
  void wake_hungry(const BlockedQueue* skip = nullptr) noexcept;
  /// wake_if_useful(now, or_leaderless): wake_if_blocked, if the job woken could start at `now`
  /// (a permit and a token there, no pause), or, with or_leaderless, if no job leads and a permit
  /// is free (the woken one, refused for time, will lead). All read after the fence. A wake that
  /// no job can use sends the job it wakes to the back of the blocked ring, behind jobs that came
  /// after it.
  void wake_if_useful(std::int64_t now, bool or_leaderless) noexcept;
  /// wake_useful_fenced(now, or_leaderless): wake_if_useful for a caller that has fenced.
  void wake_useful_fenced(std::int64_t now, bool or_leaderless) noexcept;

  const std::string name_;
  DownstreamLimits limits_;
  std::mutex mu_;  // attach, changed
  std::array<std::atomic<BlockedQueue*>, kMaxQueues> queues_{};
  std::atomic<std::size_t> queue_count_{0};
  std::atomic<std::size_t> cursor_{0};  // round robin: where the next wake starts
  std::atomic<std::int64_t> blocked_{0};
  std::atomic<JobId> leader_{0};  // the job on the wheel for this gate (0: none)
  std::atomic<BlockedQueue*> leader_queue_{nullptr};  // its queue, for changed()
};

}  // namespace rail::detail
