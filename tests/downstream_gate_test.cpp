// DownstreamGate's wake-up chain, step by step: a fake queue records the jobs each wake moves
// from its blocked ring to its ready ring, and the test plays one worker's interleaving at a
// time, checking after every step the gate's invariant: while a job is blocked, a leader is
// armed, every permit is held, or a woken job is on its way to admit().
#include "rail/detail/downstream_gate.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <set>

namespace rail::detail {
namespace {

using namespace std::chrono_literals;

constexpr std::int64_t ms(std::int64_t n) {
  return n * 1'000'000;
}

struct FakeQueue final : BlockedQueue {
  std::deque<JobId> blocked_ring, ready;
  std::set<JobId> woken;  // moved to ready by a wake (JobSlot::woken)
  bool wake_blocked(std::atomic<std::int64_t>& blocked, bool) noexcept override {
    if (blocked_ring.empty()) return false;
    const JobId id = blocked_ring.front();
    blocked_ring.pop_front();
    blocked.fetch_sub(1);
    woken.insert(id);
    ready.push_back(id);
    return true;
  }
  void promote_leader(JobId) noexcept override {}
};

/// World: a gate, one queue, and what deliver does with a job (admit; block or lead).
struct World {
  DownstreamGate gate;
  FakeQueue q;
  std::optional<JobId> leader;  // on the wheel
  std::int64_t leader_due = 0;
  int admitted = 0;

  explicit World(const DownstreamOptions& o) : gate("partner", o, 0) { gate.attach(&q); }

  /// deliver(id, now): what JobFlow::deliver does with a job it activated at `now`.
  void deliver(JobId id, std::int64_t now) {
    const auto d = gate.admit(id, now, &q, q.woken.erase(id) > 0);
    switch (d.verdict) {
      case DownstreamGate::Verdict::admitted:
        ++admitted;
        gate.release(now);  // the handler returns at once
        break;
      case DownstreamGate::Verdict::block:
        q.blocked_ring.push_back(id);
        gate.blocked(d.why);
        break;
      case DownstreamGate::Verdict::lead:
        leader = id;
        leader_due = d.until_ns;
        break;
    }
  }
  /// fire(now): the leader's timer: it steps down and is ready again (JobFlow::timer_fired).
  void fire() {
    const JobId id = *leader;
    leader.reset();
    gate.forget_leader(id);
    q.ready.push_back(id);
  }
  /// on_its_way(): the invariant's witness.
  [[nodiscard]] bool someone_on_its_way() const {
    return gate.blocked_count() == 0 || leader.has_value() || !q.ready.empty();
  }
  JobId pop_ready() {
    const JobId id = q.ready.front();
    q.ready.pop_front();
    return id;
  }
};

TEST(DownstreamGate, ARateOnlyGateNeverStrandsItsBlockedJobs) {
  // BullMQ's plain limiter: a rate, no concurrency limit, burst 1 (a token per 100 ms).
  World w(DownstreamOptions{.rate = RateLimit{.max = 10, .per = 1s, .burst = 1}});
  // Five jobs at t=0: the first takes the token, the second leads, the others block.
  for (JobId id = 1; id <= 5; ++id) {
    w.deliver(id, 0);
    ASSERT_TRUE(w.someone_on_its_way()) << "after job " << id;
  }
  ASSERT_EQ(w.admitted, 1);
  ASSERT_TRUE(w.leader.has_value());
  // The interleaving that stranded them: the leader's timer fires at its token and wakes one
  // blocked job; the leader takes that token; the woken job comes only after the next refill and
  // is admitted too. Repeat until every job ran.
  std::int64_t now = 0;
  for (int round = 0; round < 10 && w.admitted < 5; ++round) {
    if (w.leader) {
      now = w.leader_due;
      w.fire();  // the leader steps down and wakes one
      ASSERT_TRUE(w.someone_on_its_way());
    }
    const JobId first = w.pop_ready();
    w.deliver(first, now);  // takes the token
    ASSERT_TRUE(w.someone_on_its_way()) << "round " << round;
    now += ms(100);  // a refill before the woken job arrives
    while (!w.q.ready.empty()) {
      w.deliver(w.pop_ready(), now);
      ASSERT_TRUE(w.someone_on_its_way()) << "round " << round;
    }
  }
  EXPECT_EQ(w.admitted, 5) << "blocked: " << w.gate.blocked_count();
}

TEST(DownstreamGate, AConcurrencyLimitedGateWakesNoJobThatWouldOnlyBeRefusedAPermit) {
  // One permit, a generous rate: an admission with the permit taken wakes nobody (the release
  // will), so the blocked jobs keep their order.
  World w(DownstreamOptions{.concurrency = 1, .rate = RateLimit{.max = 1000, .per = 1s}});
  const auto hold = w.gate.admit(1, 0, &w.q);  // held: its handler runs
  ASSERT_EQ(hold.verdict, DownstreamGate::Verdict::admitted);
  for (JobId id = 2; id <= 4; ++id)
    w.deliver(id, 0);
  EXPECT_EQ(w.gate.blocked_count(), 3);
  EXPECT_TRUE(w.q.ready.empty()) << "nobody woken while the permit is held";
  w.gate.release(0);
  ASSERT_EQ(w.q.ready.size(), 1u);
  EXPECT_EQ(w.q.ready.front(), 2u) << "the oldest first";
}

}  // namespace
}  // namespace rail::detail
