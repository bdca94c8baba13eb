// Review of the downstream gate (issue 14, part 1): reproducers of lost wake-ups and of a busy
// loop in the job-state paths that a downstream adds (blocked ring, the leader on the wheel),
// plus stress runs that check every job runs exactly once and the counts return to zero.
// Timed cases run under the manual clock in inline mode; threaded ones use bounded waits.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "rail/rail.hpp"
#include "support/inline_engine.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;

QueueOptions calling(const std::string& name) {
  QueueOptions o;
  o.downstream = name;
  return o;
}

struct Review : test::InlineEngine {};

// The leader and the first job behind it are both cancelled. The leader's cancel steps it down
// and wakes one blocked job: the cancelled one, whose delivery only reclaims its slot. Nobody is
// left to lead, and the last job waits forever though tokens refill.
TEST_F(Review, CancellingTheLeaderAndTheJobBehindItLeavesNoJobStranded) {
  engine.downstream("api", {.rate = RateLimit{.max = 1, .per = 1s, .burst = 1}});
  auto q = engine.queue<int>("q", calling("api"));
  std::vector<int> ran;
  q.process({}, [&](Job<int>& j) { ran.push_back(j.data()); });
  (void)q.add("call", 1);
  const JobId leader = q.add("call", 2).id;
  const JobId behind = q.add("call", 3).id;
  (void)q.add("call", 4);
  engine.run_until_idle();
  ASSERT_EQ(ran, std::vector<int>{1});
  ASSERT_EQ(q.state(leader).status, JobStatus::delayed);
  ASSERT_TRUE(q.cancel(behind));
  ASSERT_TRUE(q.cancel(leader));
  for (int s = 0; s < 3; ++s) {
    clock.advance(1s);
    engine.run_until_idle();
  }
  EXPECT_EQ(ran, (std::vector<int>{1, 4}));
  EXPECT_EQ(q.counts().waiting, 0u);
  EXPECT_EQ(q.counts().delayed, 0u);
  EXPECT_EQ(engine.downstream("api").stats().waiting, 0u);
}

// Two queues share a rate. Queue a is paused with its leader on the wheel and a job of its own
// blocked; b's jobs are blocked behind a's leader. When the leader's token comes it steps down
// and wakes one blocked job: a's, into a's paused ready ring. b's jobs then wait, with tokens
// there and no leader, for as long as a stays paused.
TEST_F(Review, APausedQueueDoesNotHoldUpAnotherQueuesJobsAtTheGate) {
  engine.downstream("api", {.rate = RateLimit{.max = 1, .per = 1s, .burst = 1}});
  auto a = engine.queue<int>("a", calling("api"));
  auto b = engine.queue<int>("b", calling("api"));
  std::vector<int> ran_b;
  a.process({}, [](Job<int>&) {});
  b.process({}, [&](Job<int>& j) { ran_b.push_back(j.data()); });
  (void)a.add("call", 1);  // takes the token
  (void)a.add("call", 2);  // leads
  (void)a.add("call", 3);  // blocked
  (void)b.add("call", 1);  // blocked
  (void)b.add("call", 2);  // blocked
  engine.run_until_idle();
  a.pause();
  for (int s = 0; s < 4; ++s) {
    clock.advance(1s);
    engine.run_until_idle();
  }
  EXPECT_EQ(ran_b, (std::vector<int>{1, 2})) << "b's jobs waited on paused a";
  a.resume();
  for (int s = 0; s < 4; ++s) {
    clock.advance(1s);
    engine.run_until_idle();
  }
  EXPECT_EQ(a.counts().completed, 3u);
  EXPECT_EQ(b.counts().completed, 2u);
  EXPECT_EQ(a.counts().waiting + a.counts().delayed, 0u);
}

// A downstream paused for good (pause_for(Duration::max()), or a pushback whose retry-after
// saturates) refuses every job until the end of time. No job may lead (the due time is never),
// so each refused job wakes itself as "no leader": refused, blocked, woken, refused... and
// run_until_idle never returns (threaded: the workers spin). The observer stops the loop after
// 1000 refusals by cancelling the job, so that the test ends either way.
TEST_F(Review, ADownstreamPausedForGoodParksItsJobsInsteadOfSpinning) {
  auto api = engine.downstream("api", {});
  auto q = engine.queue<int>("q", calling("api"));
  q.process({}, [](Job<int>&) {});
  std::size_t refused = 0;
  engine.on_event([&](const Event& e) {
    if (e.kind == EventKind::throttled && ++refused >= 1000) (void)q.cancel(e.job_id);
  });
  api.pause_for(Duration::max());
  (void)q.add("call", 1);
  (void)q.add("call", 2);
  engine.run_until_idle();
  EXPECT_LE(refused, 2u) << "the refused jobs went round between the blocked and ready rings";
  EXPECT_EQ(q.counts().completed, 0u);
}

// The leader's due time moved later by change_delay (Duration::max(): parked) keeps it the
// gate's leader: the jobs blocked behind it wait for it, though a token is there for them.
TEST_F(Review, ALeaderParkedByChangeDelayStepsDown) {
  engine.downstream("api", {.rate = RateLimit{.max = 1, .per = 1s, .burst = 1}});
  auto q = engine.queue<int>("q", calling("api"));
  std::vector<int> ran;
  q.process({}, [&](Job<int>& j) { ran.push_back(j.data()); });
  (void)q.add("call", 1);
  const JobId leader = q.add("call", 2).id;
  (void)q.add("call", 3);
  engine.run_until_idle();
  ASSERT_EQ(q.state(leader).status, JobStatus::delayed);
  ASSERT_TRUE(q.change_delay(leader, Duration::max()));
  clock.advance(1s);
  engine.run_until_idle();
  EXPECT_EQ(ran, (std::vector<int>{1, 3})) << "job 3 waited for a leader that no longer waits";
  ASSERT_TRUE(q.promote(leader));
  engine.run_until_idle();
  clock.advance(1s);
  engine.run_until_idle();
  EXPECT_EQ(ran, (std::vector<int>{1, 3, 2}));
}

// The same through a debounce: a duplicate add restarts the leader's delay (one hour), and the
// job blocked behind it waits the hour with the bucket full.
TEST_F(Review, ALeaderDebouncedLaterStepsDown) {
  engine.downstream("api", {.rate = RateLimit{.max = 1, .per = 1s, .burst = 1}});
  auto q = engine.queue<int>("q", calling("api"));
  std::vector<int> ran;
  q.process({}, [&](Job<int>& j) { ran.push_back(j.data()); });
  JobOptions debounced;
  debounced.dedup.id = "k";
  debounced.dedup.mode = DedupMode::debounce;
  debounced.dedup.ttl = 2h;
  (void)q.add("call", 1);
  const JobId leader = q.add("call", 2, debounced).id;
  (void)q.add("call", 3);
  engine.run_until_idle();
  ASSERT_EQ(q.state(leader).status, JobStatus::delayed);
  debounced.delay = 1h;
  const auto merged = q.add("call", 20, debounced);
  ASSERT_EQ(merged.status, AddStatus::debounced);
  ASSERT_EQ(merged.id, leader);
  clock.advance(1s);
  engine.run_until_idle();
  EXPECT_EQ(ran, (std::vector<int>{1, 3})) << "job 3 waited for the debounced leader";
  clock.advance(1h);
  engine.run_until_idle();
  EXPECT_EQ(ran, (std::vector<int>{1, 3, 20}));
}

}  // namespace
}  // namespace rail
