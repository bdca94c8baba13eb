// Expiry (QueueOptions / JobOptions::expire_after) and load shedding (QueueOptions::shed): inline
// under the manual clock, where each advance runs the expiry sweep as the timer thread would;
// then threads: expiry racing the workers' pops on the real clock.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "rail/rail.hpp"
#include "support/inline_engine.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;
using Expiry = test::InlineEngine;
using Shedding = test::InlineEngine;

QueueOptions expiring(Duration expire_after) {
  QueueOptions o;
  o.expire_after = expire_after;
  return o;
}

TEST_F(Expiry, AJobNobodyTakesIsDeadLetteredOnTimeWithReasonExpired) {
  auto q = engine.declare_queue<int>("q", expiring(1s));  // no handler: nobody takes it
  const JobId id = q.add("call", 7).id;
  clock.advance(999ms);
  EXPECT_EQ(q.state(id).status, JobStatus::waiting);
  clock.advance(1ms);
  EXPECT_EQ(q.state(id).status, JobStatus::dead_lettered);
  const auto entry = q.dlq().get(id);
  ASSERT_TRUE(entry);
  EXPECT_EQ(entry->reason, DeadLetterReason::expired);
  EXPECT_EQ(entry->data, 7);
  EXPECT_EQ(entry->deliveries, 0u);
  ASSERT_EQ(count(EventKind::dead_lettered), 1u);
  EXPECT_EQ(first(EventKind::dead_lettered).reason, DeadLetterReason::expired);
  EXPECT_EQ(since_start(first(EventKind::dead_lettered)), 1s);
  const QueueCounts c = q.counts();
  EXPECT_EQ(c.expired, 1u);
  EXPECT_EQ(c.dead_lettered, 1u);
  EXPECT_EQ(c.waiting, 0u);
  EXPECT_EQ(q.counts().waiting + q.counts().delayed + q.counts().active, 0u);
}

TEST_F(Expiry, AJobsOwnExpiryOverridesItsQueuesAndOthersWaitForEver) {
  auto q = engine.declare_queue<int>("q", QueueOptions{});
  JobOptions soon;
  soon.expire_after = 50ms;
  const JobId a = q.add("call", 1, soon).id;
  const JobId b = q.add("call", 2).id;
  clock.advance(50ms);
  EXPECT_EQ(q.state(a).status, JobStatus::dead_lettered);
  clock.advance(1h);
  EXPECT_EQ(q.state(b).status, JobStatus::waiting);
  EXPECT_EQ(since_start(first(EventKind::dead_lettered)), 50ms);
}

TEST_F(Expiry, AJobTakenPastItsExpiryIsDeadLetteredUnrun) {
  // 2^17 slots space the sweep's scans 2 ms apart: the scan at 10 ms ends a, and b, due at
  // 10.5 ms, is still waiting at 10.6 ms when the worker takes it.
  QueueOptions o = expiring(Duration::max());
  o.capacity = 1u << 17;
  auto q = engine.declare_queue<int>("q", o);
  std::vector<int> ran;
  q.process({}, [&](Job<int>& j) {
    ran.push_back(j.data());
    return Outcome::done();
  });
  JobOptions a_opts, b_opts;
  a_opts.expire_after = 10ms;
  b_opts.expire_after = 10ms + 500us;
  const JobId a = q.add("call", 1, a_opts).id;
  const JobId b = q.add("call", 2, b_opts).id;
  clock.advance(10ms);
  EXPECT_EQ(q.state(a).status, JobStatus::dead_lettered);
  clock.advance(600us);
  EXPECT_EQ(q.state(b).status, JobStatus::waiting) << "the scan is not due yet";
  engine.run_until_idle();
  EXPECT_TRUE(ran.empty());
  EXPECT_EQ(q.state(b).status, JobStatus::dead_lettered);
  ASSERT_TRUE(q.dlq().get(b));
  EXPECT_EQ(q.dlq().get(b)->reason, DeadLetterReason::expired);
  EXPECT_EQ(count(EventKind::started), 0u);
  EXPECT_EQ(q.counts().expired, 2u);
  EXPECT_EQ(q.counts().active, 0u);
}

TEST_F(Expiry, AJobThatStartedNeverExpiresItsRetryRunsLate) {
  auto q = engine.declare_queue<int>("q", expiring(1s));
  int runs = 0;
  q.process({}, [&](Job<int>&) {
    return ++runs == 1 ? Outcome::retry_in(5s, "later") : Outcome::done();
  });
  const JobId id = q.add("call", 1, JobOptions{.max_attempts = 2}).id;
  replay();
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(q.state(id).status, JobStatus::completed);
  EXPECT_EQ(q.counts().expired, 0u);
}

TEST_F(Expiry, ADelayedJobExpiresCountedFromItsAdd) {
  auto q = engine.declare_queue<int>("q", expiring(1s));
  JobOptions o;
  o.delay = 400ms;
  const JobId id = q.add("call", 1, o).id;
  clock.advance(500ms);
  EXPECT_EQ(q.state(id).status, JobStatus::waiting);
  clock.advance(500ms);
  EXPECT_EQ(q.state(id).status, JobStatus::dead_lettered);
  EXPECT_EQ(since_start(first(EventKind::dead_lettered)), 1s);
}

TEST_F(Expiry, ADebouncedJobPushedPastItsExpiryExpiresOnTheWheel) {
  auto q = engine.declare_queue<int>("q", expiring(1s));
  JobOptions o;
  o.delay = 600ms;
  o.dedup = {.id = "k", .ttl = 10s, .mode = DedupMode::debounce};
  const JobId id = q.add("call", 1, o).id;
  clock.advance(500ms);
  ASSERT_EQ(q.add("call", 2, o).status, AddStatus::debounced);  // due at 1.1 s now
  clock.advance(500ms);
  EXPECT_EQ(q.state(id).status, JobStatus::dead_lettered);
  EXPECT_EQ(q.dlq().get(id)->data, 2);
  EXPECT_EQ(q.counts().delayed, 0u);
  EXPECT_EQ(q.counts().expired, 1u);
  EXPECT_FALSE(engine.next_timer_in()) << "its timer left the wheel with it";
}

TEST_F(Expiry, AnExpiredJobLeavesItsFifoGroupAndTheNextStartsInOrder) {
  auto q = engine.declare_queue<int>("q", QueueOptions{});
  std::vector<int> ran;
  q.process({}, [&](Job<int>& j) {
    ran.push_back(j.data());
    if (j.data() == 0) clock.advance(2s);  // the group's head runs long: 1 expires behind it
    return Outcome::done();
  });
  JobOptions head{.group = "g"}, brief{.group = "g"}, patient{.group = "g"};
  brief.expire_after = 1s;
  patient.expire_after = 1h;
  (void)q.add("call", 0, head);
  const JobId one = q.add("call", 1, brief).id;
  (void)q.add("call", 2, patient);
  replay();
  EXPECT_EQ(ran, (std::vector<int>{0, 2}));
  EXPECT_EQ(q.state(one).status, JobStatus::dead_lettered);
  EXPECT_EQ(q.counts().groups, 0u);
  EXPECT_EQ(q.counts().waiting + q.counts().delayed + q.counts().active, 0u);
}

TEST_F(Expiry, AJobWaitingAtItsDownstreamExpiresThereAndFreesItsSlot) {
  engine.declare_downstream("api", {.rate = RateLimit{.max = 1, .per = 1h}});
  QueueOptions o = expiring(1s);
  o.downstream = "api";
  o.capacity = 2;
  auto q = engine.declare_queue<int>("q", o);
  std::vector<int> ran;
  q.process({}, [&](Job<int>& j) {
    ran.push_back(j.data());
    return Outcome::done();
  });
  (void)q.add("call", 0);
  const JobId held = q.add("call", 1).id;  // no token for an hour
  engine.run_until_idle();
  EXPECT_EQ(ran, std::vector<int>{0});
  clock.advance(1s);
  EXPECT_EQ(q.state(held).status, JobStatus::dead_lettered);
  EXPECT_EQ(q.add("call", 2).status, AddStatus::added) << "its slot came back";
  EXPECT_EQ(q.counts().waiting, 1u);
}

TEST_F(Expiry, AnExpiredJobsDedupIdIsFreeAgainAndItsRedriveRunsAfresh) {
  auto q = engine.declare_queue<int>("q", expiring(1s));
  JobOptions o;
  o.dedup.id = "order-1";
  const JobId id = q.add("call", 1, o).id;
  clock.advance(1s);
  ASSERT_EQ(q.state(id).status, JobStatus::dead_lettered);
  std::vector<int> ran;
  q.process({}, [&](Job<int>& j) {
    ran.push_back(j.data());
    return Outcome::done();
  });
  EXPECT_EQ(q.dlq().redrive(id), RedriveStatus::redriven);  // expires 1 s from now
  const auto again = q.add("call", 2, o);
  EXPECT_EQ(again.status, AddStatus::duplicate) << "the redriven job holds its id again";
  engine.run_until_idle();
  EXPECT_EQ(ran, std::vector<int>{1});
  EXPECT_EQ(q.state(id).status, JobStatus::completed);
}

TEST_F(Expiry, ADelayNotShorterThanTheExpiryAndBadExpiriesAreRefused) {
  auto q = engine.declare_queue<int>("q", expiring(1s));
  JobOptions late;
  late.delay = 1s;
  try {
    (void)q.add("call", 1, late);
    FAIL() << "a job that would expire before it is due was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find("expire_after"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("delay below"), std::string::npos) << e.what();
  }
  JobOptions own;
  own.expire_after = 2s;
  own.delay = 1500ms;
  EXPECT_EQ(q.add("call", 1, own).status, AddStatus::added) << "its own expiry is later";
  own.expire_after = 0ms;
  EXPECT_THROW((void)q.add("call", 1, own), Error);
  EXPECT_THROW((void)engine.declare_queue<int>("bad", expiring(-1ms)), Error);
  QueueOptions shed;
  shed.shed.target = 0ms;
  EXPECT_THROW((void)engine.declare_queue<int>("bad2", shed), Error);
  shed.shed.target = 5ms;
  shed.shed.interval = 0ms;
  try {
    (void)engine.declare_queue<int>("bad3", shed);
    FAIL() << "a zero shed interval was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shed.interval"), std::string::npos) << e.what();
  }
}

TEST_F(Expiry, NextTimerInShowsAPendingExpirySoAReplayReachesIt) {
  auto q = engine.declare_queue<int>("q", expiring(1s));
  q.process({}, [](Job<int>&) { return Outcome::done(); });
  q.pause();
  const JobId id = q.add("call", 1).id;
  ASSERT_TRUE(engine.next_timer_in());
  EXPECT_EQ(*engine.next_timer_in(), 1s);
  replay();
  EXPECT_EQ(q.state(id).status, JobStatus::dead_lettered);
  EXPECT_FALSE(engine.next_timer_in()) << "nothing is left to wait for";
}

TEST_F(Expiry, AShutdownHandsBackUnstartedJobsInsteadOfExpiringThem) {
  auto q = engine.declare_queue<int>("q", expiring(50ms));  // no handler
  for (int i = 0; i < 100; ++i)
    ASSERT_EQ(q.add("call", i).status, AddStatus::added);
  const ShutdownReport report = engine.shutdown(0ms);
  EXPECT_EQ(report.not_started.size(), 100u);
  clock.advance(100ms);  // past every job's expiry: the sweep runs, and takes none
  EXPECT_EQ(q.take_leftovers().size(), 100u);
  EXPECT_EQ(q.dlq().size(), 0u);
  EXPECT_EQ(q.counts().expired, 0u);
}

TEST_F(Shedding, AStandingBacklogIsShedAndFreshJobsStillRun) {
  // 100 jobs at once, each run takes 5 ms: job k waits 5k ms. The interval [0, 100 ms) saw a
  // wait of 0: fine. [100, 200 ms) saw at least 100 ms, above the 10 ms target: from 200 ms the
  // queue is overloaded, and every job that waited over 20 ms is shed. A fresh job still runs.
  QueueOptions o;
  o.shed = {.target = 10ms, .interval = 100ms};
  auto q = engine.declare_queue<int>("q", o);
  std::vector<int> ran;
  q.process({}, [&](Job<int>& j) {
    ran.push_back(j.data());
    clock.advance(5ms);
    return Outcome::done();
  });
  for (int i = 0; i < 100; ++i)
    ASSERT_EQ(q.add("call", i).status, AddStatus::added);
  engine.run_until_idle();
  ASSERT_EQ(ran.size(), 40u);
  EXPECT_EQ(ran.back(), 39);
  QueueCounts c = q.counts();
  EXPECT_EQ(c.shed, 60u);
  EXPECT_EQ(c.dead_lettered, 60u);
  EXPECT_EQ(q.dlq().size(), 60u);
  EXPECT_EQ(first(EventKind::dead_lettered).reason, DeadLetterReason::shed);
  (void)q.add("call", 100);  // waits 0: runs though the queue is overloaded
  engine.run_until_idle();
  EXPECT_EQ(ran.back(), 100);
  // The next interval's shortest wait was 0: no longer overloaded, so a job that waited 50 ms
  // (held back by a pause) runs.
  clock.advance(100ms);
  (void)q.add("call", 101);
  engine.run_until_idle();  // closes the interval
  q.pause();
  (void)q.add("call", 102);
  clock.advance(50ms);
  q.resume();
  engine.run_until_idle();
  EXPECT_EQ(ran.back(), 102);
  EXPECT_EQ(q.counts().shed, 60u);
}

TEST_F(Shedding, ARetryIsNeverShed) {
  QueueOptions o;
  o.shed = {.target = 1ms, .interval = 10ms};
  auto q = engine.declare_queue<int>("q", o);
  int runs = 0;
  q.process({}, [&](Job<int>& j) {
    ++runs;
    if (j.data() == 0 && j.attempt() == 1) {
      clock.advance(50ms);  // a standing wait for the fillers behind it
      return Outcome::retry_in(0ms, "again");
    }
    clock.advance(5ms);
    return Outcome::done();
  });
  (void)q.add("call", 0, JobOptions{.max_attempts = 2});
  for (int i = 1; i < 20; ++i)
    (void)q.add("call", i);
  replay();
  const QueueCounts c = q.counts();
  EXPECT_GT(c.shed, 0u);
  EXPECT_EQ(c.completed + c.shed, 20u);
  EXPECT_EQ(c.failed_attempts, 1u);
  std::size_t retried = 0;
  for (const Event& e : of(EventKind::completed))
    retried += e.attempt == 2 ? 1 : 0;
  EXPECT_EQ(retried, 1u) << "job 0's retry ran, though it waited behind the backlog";
}

// --- threads ---------------------------------------------------------------------------------

TEST(ExpiryThreaded, AWaiterToldItsJobExpiredFindsItsDlqEntry) {
  // Nobody takes the jobs: each ends on the timer thread, through its index's holder, which
  // files the entry before it tells the waiter.
  Engine engine;
  auto q = engine.declare_queue<int>("q", expiring(5ms));
  for (int round = 0; round < 20; ++round) {
    const JobHandle<void> h = q.add_tracked("call", round);
    const auto end = h.wait();
    ASSERT_EQ(end.status, JobStatus::dead_lettered);
    EXPECT_EQ(end.reason, DeadLetterReason::expired);
    EXPECT_TRUE(q.dlq().contains(end.id)) << "round " << round;
  }
  EXPECT_TRUE(engine.shutdown(10s).clean());
}

TEST(ExpiryThreaded, ExpiryRacingPopsEndsEveryJobOnceAndNeverStartsAnExpiredJob) {
  // Real clock, 4 workers on 2 cores, jobs expiring 1 us to 3 ms after their add against
  // handlers of up to 1 ms, and pauses: each job either runs once, started before its expiry, or
  // is dead-lettered expired, unrun, exactly once.
  constexpr int kJobs = 3000;
  std::vector<std::atomic<int>> runs(kJobs);
  std::vector<Duration> expiry(kJobs);
  std::atomic<int> late_starts{0};
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> expire_us(1, 3000);
  for (auto& e : expiry)
    e = std::chrono::microseconds(expire_us(rng));
  Engine engine;
  QueueOptions o;
  o.capacity = 512;
  o.on_full = OnFull::block;
  o.block_timeout = 60s;
  auto q = engine.declare_queue<int>("q", o);
  q.process({.concurrency = 4}, [&](Job<int>& j) {
    const auto i = static_cast<std::size_t>(j.data());
    runs[i].fetch_add(1);
    if (j.started_at() >= j.added_at() + expiry[i]) late_starts.fetch_add(1);
    if (i % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(i % 1000));
    return Outcome::done();
  });
  std::vector<JobId> ids(kJobs);
  for (int i = 0; i < kJobs; ++i) {
    JobOptions jo;
    jo.expire_after = expiry[static_cast<std::size_t>(i)];
    const auto r = q.add("call", i, jo);
    ASSERT_EQ(r.status, AddStatus::added);
    ids[static_cast<std::size_t>(i)] = r.id;
    if (i % 500 == 250) q.pause();
    if (i % 500 == 260) q.resume();
  }
  q.resume();
  ASSERT_TRUE(q.wait_idle(60s));
  const QueueCounts c = q.counts();
  EXPECT_EQ(c.completed + c.dead_lettered, static_cast<std::uint64_t>(kJobs));
  EXPECT_EQ(c.expired, c.dead_lettered);
  EXPECT_GT(c.expired, 0u) << "jobs expiring within microseconds of their add expired";
  EXPECT_GT(c.completed, 0u);
  EXPECT_EQ(q.dlq().size(), c.expired);
  for (std::size_t i = 0; i < kJobs; ++i) {
    const auto entry = q.dlq().get(ids[i]);
    ASSERT_EQ(runs[i].load() + (entry ? 1 : 0), 1) << "job " << i << " ended once";
    if (entry) {
      EXPECT_EQ(entry->reason, DeadLetterReason::expired);
    }
  }
  EXPECT_EQ(late_starts.load(), 0);
  EXPECT_TRUE(engine.shutdown(10s).clean());
}

}  // namespace
}  // namespace rail
