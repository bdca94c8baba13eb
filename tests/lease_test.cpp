// Leases (visibility timeouts), cancellation, pause/resume and job state, under the manual clock
// in inline mode. A handler "overruns" its lease by advancing the clock from inside itself: the
// lease sweep runs on that advance, exactly as a timer thread would find the lapse.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "rail/rail.hpp"
#include "support/inline_engine.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;

struct Lease : test::InlineEngine {
  Queue<int> queue(Duration visibility = 2s, StallPolicy stalls = StallPolicy::count_as_attempt) {
    QueueOptions o;
    o.visibility_timeout = visibility;
    o.stall_policy = stalls;
    return engine.declare_queue<int>("q", o);
  }
};

TEST_F(Lease, LapsedDeliveryIsRedeliveredAndItsLateOutcomeIgnored) {
  auto q = queue();
  std::vector<std::uint32_t> deliveries;
  q.process({}, [&](Job<int>& j) {
    deliveries.push_back(j.deliveries());
    if (j.deliveries() == 1) {
      // Overrun the 2 s lease in 10 ms steps, as a slow handler would, then a little more.
      while (!j.cancelled())
        clock.advance(10ms);
      clock.advance(1s);
      return Outcome::done();  // late: must not complete the job
    }
    return Outcome::done();
  });
  auto r = q.add("a", 1, JobOptions{.max_attempts = 3});
  engine.run_until_idle();
  EXPECT_EQ(deliveries, (std::vector<std::uint32_t>{1, 2}));
  EXPECT_EQ(count(EventKind::stalled), 1u);
  EXPECT_EQ(first(EventKind::stalled).elapsed, 2s);  // found on the first advance at the lapse
  EXPECT_EQ(count(EventKind::late_outcome), 1u);
  EXPECT_EQ(first(EventKind::late_outcome).elapsed, 3s);
  EXPECT_EQ(count(EventKind::completed), 1u);
  auto c = q.counts();
  EXPECT_EQ(c.completed, 1u);
  EXPECT_EQ(c.stalled, 1u);
  EXPECT_EQ(c.late_outcomes, 1u);
  EXPECT_EQ(c.active, 0u);
  EXPECT_EQ(q.state(r.id).status, JobStatus::completed);
}

TEST_F(Lease, LapseOnLastAllowedDeliveryDeadLettersWithLeaseExpired) {
  auto q = queue();
  q.process({}, [&](Job<int>&) {
    clock.advance(3s);
    return Outcome::fail("late failure must not count");
  });
  auto r = q.add("a", 1, JobOptions{.max_attempts = 3});
  engine.run_until_idle();
  EXPECT_EQ(count(EventKind::started), 3u);
  EXPECT_EQ(count(EventKind::stalled), 3u);
  EXPECT_EQ(count(EventKind::late_outcome), 3u);
  ASSERT_EQ(count(EventKind::dead_lettered), 1u);
  EXPECT_EQ(first(EventKind::dead_lettered).reason, DeadLetterReason::lease_expired);
  auto e = q.dlq().get(r.id);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->reason, DeadLetterReason::lease_expired);
  EXPECT_EQ(e->failed_attempts, 3u);
  ASSERT_EQ(e->errors.size(), 3u);
  EXPECT_NE(e->errors[0].message.find("lease expired"), std::string::npos);
  EXPECT_EQ(q.state(r.id).status, JobStatus::dead_lettered);
}

TEST_F(Lease, ExtendLeaseKeepsASlowHandlerAlive) {
  auto q = queue();
  bool renewed = false;
  q.process({}, [&](Job<int>& j) {
    clock.advance(1500ms);
    renewed = j.extend_lease(2s);
    clock.advance(1500ms);  // 3 s in total: past the original lease, within the renewed one
    EXPECT_FALSE(j.cancelled());
    return Outcome::done();
  });
  (void)q.add("a", 1);
  engine.run_until_idle();
  EXPECT_TRUE(renewed);
  EXPECT_EQ(count(EventKind::stalled), 0u);
  EXPECT_EQ(q.counts().completed, 1u);
}

TEST_F(Lease, ExtendLeaseAfterLapseReportsFalse) {
  auto q = queue();
  std::vector<bool> renewals;
  q.process({}, [&](Job<int>& j) {
    if (j.deliveries() == 1) {
      clock.advance(2s);
      renewals.push_back(j.extend_lease(10s));
    }
    return Outcome::done();
  });
  (void)q.add("a", 1, JobOptions{.max_attempts = 2});
  engine.run_until_idle();
  EXPECT_EQ(renewals, std::vector<bool>{false});
}

TEST_F(Lease, PerJobVisibilityOverridesTheQueue) {
  auto q = queue(30s);
  q.process({}, [&](Job<int>& j) {
    if (j.deliveries() == 1) clock.advance(600ms);
    return Outcome::done();
  });
  (void)q.add("a", 1, JobOptions{.max_attempts = 2, .visibility_timeout = 500ms});
  engine.run_until_idle();
  EXPECT_EQ(count(EventKind::stalled), 1u);
  EXPECT_EQ(first(EventKind::stalled).elapsed, 600ms);  // the clock jumped past the 500 ms lease
}

TEST_F(Lease, LeasesCanBeDisabled) {
  auto q = queue(Duration::max());
  q.process({}, [&](Job<int>&) {
    clock.advance(24h);
    return Outcome::done();
  });
  (void)q.add("a", 1);
  engine.run_until_idle();
  EXPECT_EQ(count(EventKind::stalled), 0u);
  EXPECT_EQ(q.counts().completed, 1u);
}

TEST_F(Lease, PauseHoldsJobsAndResumeRunsThem) {
  auto q = queue();
  int runs = 0;
  q.process({}, [&](Job<int>&) { ++runs; });
  q.pause();
  EXPECT_TRUE(q.paused());
  (void)q.add("a", 1);  // adds are accepted while paused
  EXPECT_EQ(engine.run_until_idle(), 0u);
  EXPECT_EQ(q.counts().waiting, 1u);
  EXPECT_TRUE(q.counts().paused);
  q.resume();
  engine.run_until_idle();
  EXPECT_EQ(runs, 1);
}

TEST_F(Lease, CancelWaitingJobRemovesItAndReleasesItsDedupId) {
  auto q = queue();
  int runs = 0;
  q.process({}, [&](Job<int>&) { ++runs; });
  JobOptions o;
  o.dedup.id = "k";
  auto r = q.add("a", 1, o);
  EXPECT_TRUE(q.cancel(r.id));
  EXPECT_FALSE(q.cancel(r.id));  // already gone
  EXPECT_EQ(q.state(r.id).status, JobStatus::cancelled);
  auto again = q.add("a", 2, o);  // the dedup id was released
  EXPECT_EQ(again.status, AddStatus::added);
  engine.run_until_idle();
  EXPECT_EQ(runs, 1);
  auto c = q.counts();
  EXPECT_EQ(c.cancelled, 1u);
  EXPECT_EQ(c.waiting, 0u);
  EXPECT_EQ(count(EventKind::cancelled), 1u);
}

TEST_F(Lease, CancelDelayedJobNeverRuns) {
  auto q = queue();
  int runs = 0;
  q.process({}, [&](Job<int>&) { ++runs; });
  auto r = q.add("a", 1, JobOptions{.delay = 5s});
  EXPECT_EQ(q.state(r.id).status, JobStatus::delayed);
  EXPECT_EQ(q.state(r.id).since.time_since_epoch(), 5s);
  EXPECT_TRUE(q.cancel(r.id));
  clock.advance(5s);
  engine.run_until_idle();
  EXPECT_EQ(runs, 0);
  EXPECT_EQ(q.counts().delayed, 0u);
  // The slot came back: a queue of capacity 1 accepts a new job.
  auto small = engine.declare_queue<int>("small", QueueOptions{.capacity = 1});
  auto a = small.add("a", 1, JobOptions{.delay = 1s});
  EXPECT_TRUE(small.cancel(a.id));
  clock.advance(1s);
  engine.run_until_idle();
  EXPECT_EQ(small.add("a", 2).status, AddStatus::added);
}

TEST_F(Lease, CancelledWaitingJobGivesItsCapacityBackAtOnce) {
  // Capacity bounds unfinished jobs, and a cancelled job is finished: on a paused queue its
  // index stays in the ready ring, yet the next add that finds no room reclaims its slot.
  QueueOptions o;
  o.capacity = 2;
  auto q = engine.declare_queue<int>("q", o);
  std::vector<int> ran;
  q.process({}, [&](Job<int>& j) { ran.push_back(j.data()); });
  q.pause();
  auto a = q.add("a", 1);
  (void)q.add("a", 2);
  ASSERT_TRUE(q.cancel(a.id));
  EXPECT_EQ(q.counts().waiting, 1u);
  EXPECT_EQ(q.add("a", 3).status, AddStatus::added);
  EXPECT_EQ(q.add("a", 4).status, AddStatus::full);  // 2 and 3 hold both slots
  q.resume();
  engine.run_until_idle();
  EXPECT_EQ(ran, (std::vector<int>{2, 3}));  // the swept job keeps its place before 3
  EXPECT_EQ(q.state(a.id).status, JobStatus::cancelled);
}

TEST_F(Lease, CancelsWithoutAProcessorNeverLeakCapacity) {
  // Add and cancel, over and over, on a queue of 1 with nobody to pop its ring: every add finds
  // room, one add_bulk included; the one job left runs once a processor comes.
  QueueOptions o;
  o.capacity = 1;
  auto q = engine.declare_queue<int>("q", o);
  for (int i = 0; i < 1000; ++i) {
    const AddReceipt r = q.add("a", i);
    ASSERT_EQ(r.status, AddStatus::added) << "add " << i;
    ASSERT_TRUE(q.cancel(r.id));
  }
  std::vector<int> bulk{7};
  ASSERT_EQ(q.add_bulk("a", std::span<int>(bulk)).status, AddStatus::added);
  EXPECT_EQ(q.add("a", 8).status, AddStatus::full);
  std::vector<int> ran;
  q.process({}, [&](Job<int>& j) { ran.push_back(j.data()); });
  engine.run_until_idle();
  EXPECT_EQ(ran, (std::vector<int>{7}));
  EXPECT_EQ(q.counts().cancelled, 1000u);
}

TEST_F(Lease, CancelRunningJobFlagsItAndRecordsCancelled) {
  auto q = queue();
  JobId id = 0;
  bool seen_cancel = false;
  q.process({}, [&](Job<int>& j) {
    EXPECT_EQ(q.state(j.id()).status, JobStatus::active);
    EXPECT_EQ(q.state(j.id()).deliveries, 1u);
    EXPECT_FALSE(j.cancelled());
    EXPECT_TRUE(q.cancel(j.id()));
    seen_cancel = j.cancelled();
    return Outcome::retry("would retry, but it was cancelled");
  });
  id = q.add("a", 1, JobOptions{.max_attempts = 3}).id;
  engine.run_until_idle();
  EXPECT_TRUE(seen_cancel);
  EXPECT_EQ(q.state(id).status, JobStatus::cancelled);
  EXPECT_EQ(count(EventKind::started), 1u);
  EXPECT_EQ(q.counts().cancelled, 1u);
}

TEST_F(Lease, StateOfUnknownIdIsUnknown) {
  auto q = queue();
  EXPECT_EQ(q.state(12345).status, JobStatus::unknown);
}

TEST_F(Lease, TakeLeftoversReturnsUnstartedPayloadsAfterShutdown) {
  auto q = queue();
  auto waiting = q.add("a", 10);
  auto delayed = q.add("b", 20, JobOptions{.delay = 1h});
  EXPECT_THROW((void)q.take_leftovers(), Error);  // not shut down yet
  auto report = engine.shutdown(0s);
  EXPECT_EQ(report.not_started.size(), 2u);
  auto left = q.take_leftovers();
  ASSERT_EQ(left.size(), 2u);
  // The order of leftovers is the slots' order, which the API does not promise: sort by id.
  std::sort(left.begin(), left.end(), [](const auto& x, const auto& y) { return x.id < y.id; });
  EXPECT_EQ(left[0].id, waiting.id);
  EXPECT_EQ(left[0].name, "a");
  EXPECT_EQ(left[0].data, 10);
  EXPECT_FALSE(left[0].was_delayed);
  EXPECT_EQ(left[1].id, delayed.id);
  EXPECT_EQ(left[1].name, "b");
  EXPECT_EQ(left[1].data, 20);
  EXPECT_TRUE(left[1].was_delayed);
  EXPECT_TRUE(q.take_leftovers().empty());  // moved out once
}

TEST_F(Lease, BadVisibilityIsRejected) {
  QueueOptions o;
  o.visibility_timeout = 0s;
  EXPECT_THROW((void)engine.declare_queue<int>("bad", o), Error);
  auto q = queue();
  EXPECT_THROW((void)q.add("a", 1, JobOptions{.visibility_timeout = -1s}), Error);
  EXPECT_THROW((void)q.add("a", 1, JobOptions{.max_attempts = 70000}), Error);
}

// A job with a dedup id ends on complete()'s fast path only where nobody observes (no fixture
// observer here). Its lapsed first delivery returns late: that stale finish must leave the id
// with the job, which is delivered again, and only the redelivery's completion lets it go.
TEST(LeaseDedup, ALapsedDeliverysLateReturnKeepsTheIdAndTheRedeliveryReleasesIt) {
  ManualClock clock;
  Engine engine{EngineOptions{.clock = &clock, .mode = Mode::inlined}};
  QueueOptions qo;
  qo.visibility_timeout = 2s;
  auto q = engine.declare_queue<int>("q", qo);
  JobOptions o;
  o.dedup.id = "k";
  o.max_attempts = 3;
  std::vector<AddStatus> inside;  // the same id added from each delivery's handler
  q.process({}, [&](Job<int>& j) {
    if (j.data() != 1) return Outcome::done();
    if (j.deliveries() == 1) {
      while (!j.cancelled())  // overrun the lease: it lapses, the job goes back to waiting
        clock.advance(10ms);
    }
    inside.push_back(q.add("a", 2, o).status);
    return Outcome::done();  // the first is late and ignored; the second completes the job
  });
  const AddReceipt first = q.add("a", 1, o);
  ASSERT_EQ(first.status, AddStatus::added);
  engine.run_until_idle();
  EXPECT_EQ(inside, (std::vector<AddStatus>{AddStatus::duplicate, AddStatus::duplicate}))
      << "the id left the job while it was still to be delivered again";
  const QueueCounts c = q.counts();
  EXPECT_EQ(c.late_outcomes, 1u);
  EXPECT_EQ(c.completed, 1u);
  EXPECT_EQ(q.add("a", 3, o).status, AddStatus::added) << "the completion kept the id";
  engine.run_until_idle();
  EXPECT_EQ(q.counts().completed, 2u);
}

}  // namespace
}  // namespace rail
