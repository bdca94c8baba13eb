// DownstreamGate's wake-up chain, step by step: a fake queue records the jobs each wake moves
// from its blocked ring to its ready ring, and the test plays one worker's interleaving at a
// time, checking after every step the gate's invariant: while a job is blocked, a leader is
// armed, every permit is held, or a woken job is on its way to admit(). The last test plays the
// same interleaving through a real inline queue, so the wiring (GateLink marks a woken job,
// deliver tells the gate) is pinned as well.
#include "rail/detail/downstream_gate.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <set>
#include <vector>

#include "rail/rail.hpp"

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
  bool wake_above(std::uint32_t, std::atomic<std::int64_t>&) noexcept override {
    return false;  // one priority: the leader's wake goes to the oldest blocked job
  }
  void promote_leader(JobId) noexcept override {}
  bool wake_hungry() noexcept override { return false; }  // its jobs take no permit before admit
  std::uint64_t waiting_for_permit() const noexcept override { return 0; }
};

/// World: a gate, one queue, and what deliver does with a job (admit; block or lead).
struct World {
  DownstreamGate gate;
  FakeQueue q;
  std::optional<JobId> leader;  // on the wheel
  std::int64_t leader_due = 0;
  int admitted = 0;
  std::vector<JobId> order;  // admissions, in order

  explicit World(const DownstreamOptions& o) : gate("partner", o, 0) { gate.attach(&q); }

  /// deliver(id, now): what JobFlow::deliver does with a job it activated at `now`.
  void deliver(JobId id, std::int64_t now) {
    const auto d = gate.admit(id, now, &q, q.woken.erase(id) > 0);
    switch (d.verdict) {
      case DownstreamGate::Verdict::admitted:
        ++admitted;
        order.push_back(id);
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
  /// fire(): the leader's timer, as JobFlow::timer_fired: the leader is ready again, then steps
  /// down (and wakes one, behind it in the ready ring).
  void fire() {
    const JobId id = *leader;
    leader.reset();
    q.ready.push_back(id);
    gate.forget_leader(id);
  }
  /// on_its_way(): the invariant's witness.
  [[nodiscard]] bool someone_on_its_way() const {
    return gate.blocked_count() == 0 || leader.has_value() || !q.ready.empty();
  }
  JobId pop_ready() {
    EXPECT_FALSE(q.ready.empty());
    if (q.ready.empty()) return 0;
    const JobId id = q.ready.front();
    q.ready.pop_front();
    return id;
  }
};

TEST(DownstreamGate, ARateOnlyGateNeverStrandsItsBlockedJobs) {
  // BullMQ's plain limiter: a rate, no concurrency limit, burst 1 (a token per 100 ms).
  World w(DownstreamOptions{.rate = RateLimit::token_bucket(10, 1s, 1)});
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
  EXPECT_EQ(w.order, (std::vector<JobId>{1, 2, 3, 4, 5})) << "in add order, the leader first";
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
  // The woken job is admitted and holds the only permit: with no leader, its admission still
  // wakes nobody (the next would only be refused a permit and go behind the others).
  const auto woken = w.gate.admit(w.pop_ready(), 0, &w.q, w.q.woken.erase(2) > 0);
  ASSERT_EQ(woken.verdict, DownstreamGate::Verdict::admitted);
  EXPECT_TRUE(w.q.ready.empty());
  EXPECT_EQ(w.q.blocked_ring, (std::deque<JobId>{3, 4}));
}

// The same interleaving through a real queue (GateLink marks the woken job, deliver tells the
// gate): the leader's handler moves the clock past the next refill, so the job the leader woke
// is delivered after it and admitted; its admission must wake the next job, which leads.
TEST(DownstreamGate, AWokenJobAdmittedAfterARefillWakesTheNextThroughARealQueue) {
  ManualClock clock;
  Engine engine(EngineOptions{.clock = &clock, .mode = Mode::inlined});
  engine.declare_downstream("api", {.rate = RateLimit::token_bucket(10, 1s, 1)});
  QueueOptions o;
  o.downstream = "api";
  auto q = engine.declare_queue<int>("q", o);
  std::vector<int> ran;
  q.process({}, [&](Job<int>& j) {
    ran.push_back(j.data());
    if (j.data() == 1) clock.advance(100ms);  // the leader's call takes a token's time
  });
  for (int i = 0; i < 5; ++i)
    (void)q.add("call", i);
  engine.run_until_idle();  // 0 runs, 1 leads, 2..4 wait at the gate
  while (auto next = engine.next_timer_in()) {
    clock.advance(*next);
    engine.run_until_idle();
  }
  EXPECT_EQ(ran, (std::vector<int>{0, 1, 2, 3, 4})) << "no job stranded at the gate";
}

}  // namespace
}  // namespace rail::detail
