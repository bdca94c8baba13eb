// rail::amqp::Schedules against a real broker (one per test): two processes (engines) that
// declare the same schedule publish each due time once, from the leader only; when the leader
// goes (its Schedules destroyed, or its process killed with -9) the other takes the lead and
// the runs go on from there.
#include "rail/amqp_schedules.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include "rail/rail.hpp"
#include "support/broker_test.hpp"
#include "support/child_process.hpp"
#include "support/eventually.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;
using test::eventually;

using AmqpSchedules = test::BrokerTest;

TEST_F(AmqpSchedules, TwoProcessesPublishEachDueTimeOnceFromTheLeader) {
  Engine a, b;
  amqp::Schedules<std::string> first(options(), a, "ticks");
  ASSERT_TRUE(eventually([&] { return first.leader(); }, 30s)) << "the first never led";
  amqp::Schedules<std::string> second(options(), b, "ticks");
  (void)first.schedule("tick", Schedule::every(100ms), "tick", "t");
  (void)second.schedule("tick", Schedule::every(100ms), "tick", "t");
  // Both fire every due time; a publish slower than the interval (a loaded machine) skips the
  // due times it overlaps (MissedRuns::skip), so the counts are not the interval's.
  ASSERT_TRUE(eventually(
      [&] { return second.counts().discarded >= 10 && first.counts().completed >= 3; }, 60s));
  EXPECT_FALSE(second.leader());
  EXPECT_EQ(second.counts().completed, 0u) << "a follower published a run";
  (void)first.unschedule("tick");
  ASSERT_TRUE(eventually([&] {
    const QueueCounts c = first.counts();
    return c.waiting + c.active + c.delayed == 0;
  }));
  const std::uint64_t published = first.counts().completed;
  EXPECT_GE(published, 3u);
  EXPECT_EQ(raw("reader").queue_depth("rail.q.ticks"), published) << "each run once";
}

TEST_F(AmqpSchedules, WhenTheLeaderGoesTheOtherLeadsAndTheRunsGoOn) {
  Engine a, b;
  std::optional<amqp::Schedules<std::string>> first;
  first.emplace(options(), a, "reports");
  ASSERT_TRUE(eventually([&] { return first->leader(); }, 30s));
  amqp::Schedules<std::string> second(options(), b, "reports");
  (void)first->schedule("daily", Schedule::every(100ms), "report", "r");
  (void)second.schedule("daily", Schedule::every(100ms), "report", "r");
  ASSERT_TRUE(eventually([&] { return first->counts().completed >= 3; }, 60s));
  first.reset();  // its token goes back to the broker
  ASSERT_TRUE(eventually([&] { return second.leader(); }, 30s)) << "no one took the lead";
  ASSERT_TRUE(eventually([&] { return second.counts().completed >= 3; }, 60s))
      << "the runs did not go on from the new leader";
}

// The leader's process is killed with -9: the broker sees its connection close and hands the
// lead to this process, whose runs then reach the broker queue.
TEST_F(AmqpSchedules, AKilledLeadersProcessHandsTheLeadToTheNext) {
  // No thread runs yet in this process: safe to fork.
  test::ChildProcess child([&](test::ChildProcess::Signal led) {
    Engine engine;
    amqp::Schedules<std::string> mine(options(), engine, "cron");
    (void)mine.schedule("sweep", Schedule::every(100ms), "sweep", "s");
    while (!mine.leader())
      std::this_thread::sleep_for(10ms);
    led();
    for (;;)
      std::this_thread::sleep_for(1s);
  });
  ASSERT_TRUE(child.wait_signals(1)) << "the child never led";
  Engine engine;
  amqp::Schedules<std::string> next(options(), engine, "cron");
  (void)next.schedule("sweep", Schedule::every(100ms), "sweep", "s");
  ASSERT_TRUE(eventually([&] { return next.counts().discarded >= 3; }, 60s));
  EXPECT_FALSE(next.leader()) << "two leaders while the first lives";
  child.kill();
  ASSERT_TRUE(eventually([&] { return next.leader(); }, 30s)) << "the lead was not handed on";
  ASSERT_TRUE(eventually([&] { return next.counts().completed >= 3; }, 60s));
  EXPECT_GE(raw("reader").queue_depth("rail.q.cron"), next.counts().completed);
}

}  // namespace
}  // namespace rail
