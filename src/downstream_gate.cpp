// DownstreamGate: see include/rail/detail/downstream_gate.hpp.
#include "rail/detail/downstream_gate.hpp"

#include <algorithm>
#include <utility>

#include "rail/detail/engine_core.hpp"
#include "rail/error.hpp"

namespace rail::detail {

DownstreamGate::DownstreamGate(std::string name, const DownstreamOptions& options,
                               std::int64_t now_ns)
    : name_(std::move(name)), limits_(options, now_ns) {}

void DownstreamGate::attach(BlockedQueue* q) {
  std::lock_guard lock(mu_);
  const std::size_t n = queue_count_.load(std::memory_order_relaxed);
  // A queue attaches once for its own downstream and once per other downstream its jobs name
  // (GateLink): an engine's 256 queues may name one gate from more links than that.
  if (n == kMaxQueues)
    throw Error(ErrorCode::capacity, "downstream '" + name_ + "' is called through " +
                                         std::to_string(kMaxQueues) +
                                         " queue links already (a queue's own downstream or one "
                                         "its jobs name); expected fewer queues calling it");
  queues_[n].store(q, std::memory_order_relaxed);
  // release: a waker that reads the new count sees the queue pointer stored before it.
  queue_count_.store(n + 1, std::memory_order_release);
}

DownstreamGate::Decision DownstreamGate::admit(JobId id, std::int64_t now, BlockedQueue* q,
                                               bool woken, bool holds_permit) noexcept {
  const Admission a = holds_permit ? limits_.try_admit_held(now) : limits_.try_admit(now);
  if (a.kind == Admission::Kind::admitted) {
    // The chain: a token and a permit were there for this job; if there is one for the next
    // job too, wake it. A woken job that nobody leads after also wakes the next when only the
    // token is missing: that one will lead (this job may have come after a refill and taken the
    // token its waker expected it to wait for: else nobody leads and the blocked jobs wait for
    // ever, DownstreamGate.ARateOnlyGateNeverStrandsItsBlockedJobs pins it). Not otherwise: it
    // would be refused and go to the back of the blocked ring, behind jobs that came after it
    // (DownstreamWakeups.TheLeaderIsNotOvertakenByTheJobsItWakes pins it); whoever frees the next
    // permit or leads to the next token wakes the next job then.
    wake_if_useful(now, woken);
    return {Verdict::admitted, 0, a.kind};
  }
  // A permit held for a moment and given back (try_admit's returned_permit) may have refused
  // another job, or a queue's workers, meanwhile: wake them as a release would.
  if (a.returned_permit) permit_back();
  const Decision d = refuse(id, q, a);
  // A job refused for time gives back the permit it came with, as a handler's return does; after
  // the leader is chosen, so that the release wakes a blocked job only if it could start or would
  // lead (a wake for each refusal would send the refused jobs round and round).
  if (holds_permit) release(now);
  return d;
}

DownstreamGate::Decision DownstreamGate::refuse(JobId id, BlockedQueue* q,
                                                const Admission& a) noexcept {
  // A refusal due never (paused for good) leads too: it parks on the wheel, and the others wait
  // behind it. Were it blocked instead, each refused job would find no leader and wake itself:
  // refused, blocked, woken, refused, forever, and run_until_idle never returns
  // (DownstreamWakeups.ADownstreamPausedForGoodParksItsJobsInsteadOfSpinning pins it).
  if (a.kind != Admission::Kind::no_permit) {
    // relaxed: leader_ carries no data; blocked()'s fence orders it against the count. The
    // queue is stored after: changed() may pair a new leader with an old queue, whose promote
    // then finds no such job and does nothing (the leader runs at its due time).
    JobId expected = 0;
    if (leader_.compare_exchange_strong(expected, id, std::memory_order_relaxed)) {
      leader_queue_.store(q, std::memory_order_release);
      return {Verdict::lead, a.until_ns, a.kind};
    }
  }
  return {Verdict::block, a.until_ns, a.kind};
}

void DownstreamGate::blocked(Admission::Kind why) noexcept {
  blocked_.fetch_add(1, std::memory_order_relaxed);
  // seq_cst fence: the blocker's side of the hand-off (see the header): our push and count
  // before the reads of the permits and the leader.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // Refused a permit: a release since then would have found us counted, else one is free now.
  // Refused for time: the leader's stepping down would have found us, else one must lead.
  const bool wake = why == Admission::Kind::no_permit
                        ? limits_.permit_free()
                        : leader_.load(std::memory_order_relaxed) == 0;
  if (wake) (void)wake_one();
}

void DownstreamGate::swept(std::int64_t removed, std::int64_t now) noexcept {
  blocked_.fetch_sub(removed, std::memory_order_relaxed);  // relaxed: a figure, as in wake_blocked
  // seq_cst fence: as in blocked(), our pushes before the reads below. A wake missed meanwhile
  // was a release's (a permit is free now) or a leader's stepping down (no leader now). With no
  // permit free, the next release wakes one: waking now would only send a job round the ring,
  // where the next cancel could meet it in transit (on a concurrency-only gate, at every sweep:
  // DownstreamWakeupThreaded.CancelledBlockedJobsGiveTheirSlotsBack pins it).
  // With one free: wake if the job could start now, or would lead (refused for time).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (blocked_.load(std::memory_order_relaxed) > 0 && limits_.permit_free() &&
      (limits_.may_admit(now) || leader_.load(std::memory_order_relaxed) == 0))
    (void)wake_one();
}

void DownstreamGate::release(std::int64_t now, const BlockedQueue* next_taker) noexcept {
  // With no limit at the release, no job waits for a permit: jobs wait only for time, and their
  // leader's stepping down wakes them (else each return wakes one, refused again:
  // DownstreamWakeups.TheLeaderIsNotOvertakenByTheJobsItWakes pins it).
  // With one, the freed permit is of use only with a token there; without, a leader brings the
  // token and wakes then, and with no leader the woken job will lead.
  // Hungry queues (PermitSource) wait for this permit alone, whatever the token: the job they
  // then take waits for its token as any other.
  if (!limits_.release_permit()) return;
  // seq_cst fence: the waker's side of both hand-offs: our release before the reads of the
  // hungry marks and of the blocked count.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  wake_hungry(next_taker);
  wake_useful_fenced(now, true);
}

void DownstreamGate::permit_back() noexcept {
  // seq_cst fence: as in release().
  std::atomic_thread_fence(std::memory_order_seq_cst);
  wake_hungry();
  if (blocked_.load(std::memory_order_relaxed) > 0) (void)wake_one();
}

void DownstreamGate::wake_hungry(const BlockedQueue* skip) noexcept {
  // acquire: pairs with attach's release store of the count.
  const std::size_t n = queue_count_.load(std::memory_order_acquire);
  for (std::size_t k = 0; k < n; ++k)
    if (BlockedQueue* q = queues_[k].load(std::memory_order_relaxed); q != skip)
      (void)q->wake_hungry();
}

void DownstreamGate::forget_leader(JobId id) noexcept {
  JobId expected = id;
  // relaxed: see admit.
  if (leader_.compare_exchange_strong(expected, 0, std::memory_order_relaxed)) wake_if_blocked();
}

DownstreamGate::StepDown DownstreamGate::step_down(JobId id, BlockedQueue* q,
                                                   std::uint32_t idx) noexcept {
  JobId expected = id;
  // relaxed: see admit.
  if (!leader_.compare_exchange_strong(expected, 0, std::memory_order_relaxed))
    return StepDown::not_leader;
  // seq_cst fence: the waker's side, as wake_if_blocked (its read of the count is here, or in
  // wake_next after the leader's push).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (blocked_.load(std::memory_order_relaxed) > 0 && q->wake_above(idx, blocked_))
    return StepDown::outranked;
  return StepDown::in_line;
}

void DownstreamGate::changed() noexcept {
  // A new permit or rate: the first blocked job tries it, and hungry queues look again. Through
  // the fence (permit_back): the change is the waker's side of the hand-off with a job or a
  // worker refused under the old limits.
  permit_back();
  const JobId leader = leader_.load(std::memory_order_relaxed);
  BlockedQueue* q = leader_queue_.load(std::memory_order_acquire);
  if (leader != 0 && q) q->promote_leader(leader);
}

void DownstreamGate::wake_if_blocked() noexcept {
  // seq_cst fence: the waker's side of the hand-off: our release (or stepping down) before the
  // read of the blocked count.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (blocked_.load(std::memory_order_relaxed) > 0) (void)wake_one();
}

void DownstreamGate::wake_if_useful(std::int64_t now, bool or_leaderless) noexcept {
  // seq_cst fence: as wake_if_blocked. The conditions are read after it: a waker that skips the
  // wake because a leader is armed read that leader after the fence, so the leader's stepping
  // down (CAS, fence, count) comes later in the fence order and sees every job counted before
  // ours (a job refused a permit before our release included).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  wake_useful_fenced(now, or_leaderless);
}

void DownstreamGate::wake_useful_fenced(std::int64_t now, bool or_leaderless) noexcept {
  if (blocked_.load(std::memory_order_relaxed) <= 0) return;
  // Leaderless: the woken job, refused for time, will lead; refused a permit, it would only go to
  // the back of the ring (the release of a permit wakes one then).
  if (limits_.may_admit(now) ||
      (or_leaderless && leader_.load(std::memory_order_relaxed) == 0 && limits_.permit_free()))
    (void)wake_one();
}

std::uint64_t DownstreamGate::waiting_for_permit() const noexcept {
  const std::size_t n = queue_count_.load(std::memory_order_acquire);  // as in wake_one
  std::uint64_t sum = 0;
  for (std::size_t k = 0; k < n; ++k)
    sum += queues_[k].load(std::memory_order_relaxed)->waiting_for_permit();
  return sum;
}

bool DownstreamGate::wake_one() noexcept {
  // acquire: pairs with attach's release store of the count.
  const std::size_t n = queue_count_.load(std::memory_order_acquire);
  if (n == 0) return false;
  // relaxed: the cursor only spreads wakes over the queues; any value is correct.
  const std::size_t start = cursor_.fetch_add(1, std::memory_order_relaxed);
  // A queue that is not paused first. Else a paused one takes the wake (its job waits in its
  // ready ring, and starts or leads at the resume): were it refused, the wake would be lost, and
  // the one a resume hands on does not make up for several: a leader's stepping down and its
  // admission, both waking into a paused queue, would leave no job to lead the others at its
  // resume (JobDownstreamInline.APausedQueueThatRefusedTwoWakesStrandsNoJobOnResume pins it).
  for (const bool even_paused : {false, true}) {
    for (std::size_t k = 0; k < n; ++k) {
      BlockedQueue* q = queues_[(start + k) % n].load(std::memory_order_relaxed);
      if (q->wake_blocked(blocked_, even_paused)) return true;
    }
  }
  return false;
}

}  // namespace rail::detail

namespace rail {

const std::string& Downstream::name() const noexcept {
  return gate_->name();
}

void Downstream::set_concurrency(std::optional<std::uint32_t> limit) {
  validate(DownstreamOptions{.concurrency = limit}, gate_->name());
  gate_->limits().set_concurrency(limit.value_or(0));
  gate_->changed();
}

void Downstream::set_rate(const std::optional<RateLimit>& rate) {
  validate(DownstreamOptions{.rate = rate}, gate_->name());
  gate_->limits().set_rate(rate, core_->now_ns());
  gate_->changed();
}

void Downstream::pause_for(Duration d) {
  if (d.count() < 0)
    throw Error(ErrorCode::invalid_option,
                "Downstream('" + gate_->name() + "').pause_for: the duration is negative (" +
                    std::to_string(d.count()) + " ns); expected 0 or more");
  gate_->limits().pause_for(core_->now_ns(), d);
}

DownstreamStats Downstream::stats() const {
  const std::int64_t now = core_->now_ns();
  const auto s = gate_->limits().snapshot(now);
  DownstreamStats out;
  out.in_flight = s.in_flight;
  if (s.concurrency != 0) out.concurrency = s.concurrency;
  out.tokens = s.tokens;
  if (s.paused_until_ns > now) out.paused_until = TimePoint{Duration{s.paused_until_ns}};
  out.waiting =
      static_cast<std::uint64_t>(std::max<std::int64_t>(0, gate_->blocked_count())) +
      (s.concurrency != 0 && s.in_flight >= s.concurrency ? gate_->waiting_for_permit() : 0);
  return out;
}

}  // namespace rail
