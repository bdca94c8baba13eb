// Peer semantics of downstream limits, pinned under the manual clock of an inline engine:
// BullMQ's limiter {max, duration} means at most `max` starts in any window of `duration`, the
// first included, and a job held back by its downstream (waiting for the rate, or pushed back)
// is waiting, not delayed ("should not put a job into the delayed queue when limit is hit").
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "rail/rail.hpp"
#include "support/inline_engine.hpp"
#include "support/starts_in_window.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;
struct PeerDownstream : test::InlineEngine {
  /// expect_completes(q, id): virtual time runs out; job `id` completed and nothing is left.
  void expect_completes(Queue<int>& q, JobId id) {
    replay();
    EXPECT_EQ(q.state(id).status, JobStatus::completed);
    const QueueCounts c = q.counts();
    EXPECT_EQ(c.waiting + c.delayed + c.active, 0u);
  }
};
using test::most_in_a_window;

TEST_F(PeerDownstream, ThreeHundredPerSecondStartsThreeHundredInTheFirstSecondAndNeverMore) {
  // The seed's example: "300 per second". A token bucket that starts full admits 599 from the
  // first add; BullMQ's limiter, 300.
  engine.declare_downstream("gateway", {.rate = RateLimit{.max = 300, .per = 1s}});
  auto q = engine.declare_queue<int>("charges", QueueOptions{.downstream = "gateway"});
  const std::int64_t t0 = clock.now().time_since_epoch().count();
  std::vector<std::int64_t> starts;
  q.process({}, [&](Job<int>&) { starts.push_back(clock.now().time_since_epoch().count() - t0); });
  for (int i = 0; i < 1000; ++i)
    ASSERT_EQ(q.add("charge", i).status, AddStatus::added);
  replay();
  ASSERT_EQ(starts.size(), 1000u);
  std::sort(starts.begin(), starts.end());
  EXPECT_EQ(
      std::count_if(starts.begin(), starts.end(), [](std::int64_t t) { return t < 1'000'000'000; }),
      300)
      << "the first second";
  EXPECT_EQ(most_in_a_window(starts, 1'000'000'000), 300u);
  EXPECT_EQ(starts.back(), 3'000'000'000) << "300 at 0 s, 1 s and 2 s, the last 100 at 3 s";
}

TEST_F(PeerDownstream, AJobWaitingForTheRateIsWaitingNotDelayed) {
  engine.declare_downstream("api", {.rate = RateLimit{.max = 1, .per = 1s}});
  auto q = engine.declare_queue<int>("calls", QueueOptions{.downstream = "api"});
  int ran = 0;
  q.process({}, [&](Job<int>&) { ++ran; });
  const JobId first = q.add("call", 1).id;
  const JobId second = q.add("call", 2).id;  // leads: on the wheel until its token
  const JobId third = q.add("call", 3).id;   // behind it
  engine.run_until_idle();
  ASSERT_EQ(ran, 1);
  EXPECT_EQ(q.state(first).status, JobStatus::completed);
  EXPECT_EQ(q.state(second).status, JobStatus::waiting);
  EXPECT_EQ(q.state(third).status, JobStatus::waiting);
  QueueCounts c = q.counts();
  EXPECT_EQ(c.waiting, 2u);
  EXPECT_EQ(c.delayed, 0u);
  EXPECT_TRUE(q.jobs(JobStatus::delayed, 10).empty());
  EXPECT_EQ(q.jobs(JobStatus::waiting, 10).size(), 2u);
  EXPECT_FALSE(q.promote(second)) << "a waiting job is not delayed: nothing to promote";
  clock.advance(1s);
  engine.run_until_idle();
  EXPECT_EQ(ran, 2);
  EXPECT_EQ(q.state(second).status, JobStatus::completed);
  c = q.counts();
  EXPECT_EQ(c.waiting, 1u);
  EXPECT_EQ(c.delayed, 0u);
  EXPECT_TRUE(q.cancel(third)) << "cancelled while it waits for its token";
  c = q.counts();
  EXPECT_EQ(c.waiting + c.delayed + c.active, 0u);
  EXPECT_EQ(c.cancelled, 1u);
}

TEST_F(PeerDownstream, AJobPushedBackByItsDownstreamIsWaitingUntilThePauseEnds) {
  engine.declare_downstream("api", {.concurrency = 1});
  auto q = engine.declare_queue<int>("calls", QueueOptions{.downstream = "api"});
  q.process({}, [&](Job<int>& j) {
    return j.deliveries() == 1 ? Outcome::pushback(5s, "429") : Outcome::done();
  });
  const JobId id = q.add("call", 1).id;
  engine.run_until_idle();
  EXPECT_EQ(q.state(id).status, JobStatus::waiting);
  EXPECT_EQ(q.counts().waiting, 1u);
  EXPECT_EQ(q.counts().delayed, 0u);
  EXPECT_EQ(q.counts().active, 0u);
  expect_completes(q, id);
}

TEST_F(PeerDownstream, ADebounceOfAJobWaitingForItsTokenMakesItDelayed) {
  engine.declare_downstream("api", {.rate = RateLimit{.max = 1, .per = 1s}});
  auto q = engine.declare_queue<int>("syncs", QueueOptions{.downstream = "api"});
  q.process({}, [](Job<int>&) {});
  (void)q.add("sync", 0);
  JobOptions o;
  o.dedup = {.id = "account-7", .ttl = 1h, .mode = DedupMode::debounce};
  const JobId id = q.add("sync", 1, o).id;
  engine.run_until_idle();
  ASSERT_EQ(q.state(id).status, JobStatus::waiting) << "it waits for the rate";
  o.delay = 10s;
  ASSERT_EQ(q.add("sync", 2, o).status, AddStatus::debounced);
  EXPECT_EQ(q.state(id).status, JobStatus::delayed) << "it now waits for its debounce";
  EXPECT_EQ(q.counts().delayed, 1u);
  EXPECT_EQ(q.counts().waiting, 0u);
  expect_completes(q, id);
}

}  // namespace
}  // namespace rail
