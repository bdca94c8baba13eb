// FIFO groups (JobOptions::group), inline under the manual clock: the jobs of one group start one
// at a time in the order they became due, across retries; every kind of end hands the turn on;
// cancelled parked jobs give their slots back at once; explain names the turn's holder; 10,000
// groups keep their order under random failures and retries.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "rail/rail.hpp"
#include "support/inline_engine.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;
using FifoGroups = test::InlineEngine;

/// in(group, ...): options that name a group (named, not designated: GCC 12 warns about the
/// other string members of a designated temporary).
JobOptions in(const std::string& group, std::uint32_t max_attempts = 1,
              Duration delay = Duration{0}) {
  JobOptions o;
  o.group = group;
  o.max_attempts = max_attempts;
  o.delay = delay;
  o.backoff = Backoff::fixed(1s);
  return o;
}

struct Step {
  std::string group;
  int n;
};

TEST_F(FifoGroups, JobsOfOneGroupStartInAddOrderAndOneAtATimeAcrossRetries) {
  auto q = engine.declare_queue<Step>("orders", {});
  std::vector<std::string> starts;
  q.process({}, [&](Job<Step>& j) {
    starts.push_back(j.data().group + std::to_string(j.data().n) + "#" +
                     std::to_string(j.attempt()));
    if (j.data().group == "a" && j.data().n == 1 && j.attempt() == 1)
      throw std::runtime_error("first try fails");
  });
  ASSERT_EQ(q.add("j", Step{"a", 1}, in("a", 2)).status, AddStatus::added);
  ASSERT_EQ(q.add("j", Step{"a", 2}, in("a")).status, AddStatus::added);
  ASSERT_EQ(q.add("j", Step{"b", 1}, in("b")).status, AddStatus::added);
  ASSERT_EQ(q.add("j", Step{"a", 3}, in("a")).status, AddStatus::added);
  engine.run_until_idle();
  // a1 failed and waits for its retry, holding the turn: a2 and a3 wait behind it, b runs.
  EXPECT_EQ(starts, (std::vector<std::string>{"a1#1", "b1#1"}));
  EXPECT_EQ(q.counts().waiting, 2u);
  EXPECT_EQ(q.counts().groups, 1u);
  replay();
  EXPECT_EQ(starts, (std::vector<std::string>{"a1#1", "b1#1", "a1#2", "a2#1", "a3#1"}));
  EXPECT_EQ(q.counts().completed, 4u);
  EXPECT_EQ(q.counts().groups, 0u);
}

TEST_F(FifoGroups, AJobAddedWhileTheEndOfTheTurnsHolderIsReportedWaitsItsTurn) {
  // An observer of the holder's end adds to its group: the holder keeps its turn until its end
  // is reported, so the new job waits behind it (no job of a group starts before the end event
  // of the one before), and explain says so.
  auto q = engine.declare_queue<int>("q", {});
  std::vector<int> starts;
  q.process({}, [&](Job<int>& j) -> Outcome {
    starts.push_back(j.data());
    return j.data() == 1 ? Outcome::fail("broken") : Outcome::done();
  });
  std::vector<Explanation> seen;
  const Subscription sub = engine.subscribe([&](const Event& e) {
    if (e.kind != EventKind::dead_lettered && e.kind != EventKind::completed) return;
    if (seen.size() == 2) return;
    const JobId added = q.add("j", 10 + static_cast<int>(seen.size()), in("g")).id;
    seen.push_back(q.explain(added));
    EXPECT_EQ(seen.back().behind, e.job_id);
  });
  const JobId dead = q.add("j", 1, in("g")).id;  // dead-lettered: its observer adds 10
  engine.run_until_idle();                       // 10 completes: its observer adds 11
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].holdup, Holdup::group_turn);
  EXPECT_EQ(seen[0].behind, dead);
  EXPECT_EQ(seen[1].holdup, Holdup::group_turn);
  EXPECT_EQ(starts, (std::vector<int>{1, 10, 11}));
}

TEST_F(FifoGroups, EveryKindOfEndHandsTheTurnOn) {
  auto q = engine.declare_queue<int>("q", {});
  std::vector<int> starts;
  q.process({}, [&](Job<int>& j) -> Outcome {
    starts.push_back(j.data());
    if (j.data() == 1) return Outcome::fail("permanent");  // dead-lettered
    if (j.data() == 2) return Outcome::discard("stale");   // discarded
    return Outcome::done();
  });
  for (int i = 1; i <= 4; ++i)
    ASSERT_EQ(q.add("j", i, in("g")).status, AddStatus::added);
  const JobId fourth = q.add("j", 5, in("g")).id;
  const JobId holder = q.add("j", 6, in("h")).id;
  ASSERT_EQ(q.add("j", 7, in("h")).status, AddStatus::added);
  EXPECT_TRUE(q.cancel(holder));  // the turn's holder, waiting: its group goes on
  EXPECT_TRUE(q.cancel(fourth));  // parked: it leaves the line
  engine.run_until_idle();
  // 7 took its group's turn when 6 was cancelled, before 1 ran: it was ready first.
  EXPECT_EQ(starts, (std::vector<int>{1, 7, 2, 3, 4}));
  EXPECT_EQ(q.counts().dead_lettered, 1u);
  EXPECT_EQ(q.counts().discarded, 1u);
  EXPECT_EQ(q.counts().cancelled, 2u);
  EXPECT_EQ(q.counts().groups, 0u);
  EXPECT_EQ(q.counts().waiting + q.counts().delayed + q.counts().active, 0u);
}

TEST_F(FifoGroups, ACancelledParkedJobGivesItsSlotBackAtOnce) {
  QueueOptions opts;
  opts.capacity = 4;
  auto q = engine.declare_queue<int>("q", opts);
  std::vector<int> ids;
  for (int i = 0; i < 4; ++i)
    ids.push_back(static_cast<int>(q.add("j", i, in("g")).id));
  EXPECT_EQ(q.add("j", 9, in("g")).status, AddStatus::full);
  EXPECT_TRUE(q.cancel(static_cast<JobId>(ids[2])));
  EXPECT_EQ(q.state(static_cast<JobId>(ids[2])).status, JobStatus::cancelled);
  EXPECT_EQ(q.counts().waiting, 3u);
  EXPECT_EQ(q.add("j", 4, in("g")).status, AddStatus::added);
  std::vector<int> starts;
  q.process({}, [&](Job<int>& j) { starts.push_back(j.data()); });
  engine.run_until_idle();
  EXPECT_EQ(starts, (std::vector<int>{0, 1, 3, 4}));
}

TEST_F(FifoGroups, ADelayedJobJoinsItsLineWhenItIsDue) {
  auto q = engine.declare_queue<int>("q", {});
  std::vector<int> starts;
  q.process({}, [&](Job<int>& j) { starts.push_back(j.data()); });
  const JobId late = q.add("j", 1, in("g", 1, 5s)).id;
  ASSERT_EQ(q.add("j", 2, in("g")).status, AddStatus::added);
  EXPECT_EQ(q.explain(late).holdup, Holdup::delayed);
  engine.run_until_idle();
  EXPECT_EQ(starts, (std::vector<int>{2}));
  clock.advance(5s);
  ASSERT_EQ(q.add("j", 3, in("g", 1, 1s)).status,
            AddStatus::added);  // due after the first: it joins behind it
  replay();
  EXPECT_EQ(starts, (std::vector<int>{2, 1, 3}));
}

TEST_F(FifoGroups, ACancelledDelayedJobThatNeverJoinedLeavesNoGroupBehind) {
  auto q = engine.declare_queue<int>("q", {});
  const JobId id = q.add("j", 1, in("g", 1, 5s)).id;
  EXPECT_EQ(q.counts().groups, 1u);
  EXPECT_TRUE(q.cancel(id));
  EXPECT_EQ(q.counts().groups, 0u);
  EXPECT_EQ(q.counts().waiting + q.counts().delayed + q.counts().active, 0u);
}

TEST_F(FifoGroups, ExplainNamesTheJobHoldingTheGroupsTurn) {
  auto q = engine.declare_queue<int>("q", {});
  q.process({}, [](Job<int>&) {});
  const JobId first = q.add("j", 1, in("customer-42")).id;
  const JobId second = q.add("j", 2, in("customer-42")).id;
  const JobId third = q.add("j", 3, in("customer-42")).id;
  EXPECT_EQ(q.explain(first).holdup, Holdup::queued);
  const Explanation e2 = q.explain(second);
  EXPECT_EQ(e2.holdup, Holdup::group_turn);
  EXPECT_EQ(e2.group, "customer-42");
  EXPECT_EQ(e2.behind, first);
  EXPECT_EQ(e2.ahead, 0u);
  const std::string says = std::string("behind job ")
                               .append(std::to_string(first))
                               .append(", which holds the turn of group 'customer-42'");
  EXPECT_NE(e2.text.find(says), std::string::npos) << e2.text;
  const Explanation e3 = engine.explain(third);
  EXPECT_EQ(e3.holdup, Holdup::group_turn);
  EXPECT_EQ(e3.ahead, 1u);
  EXPECT_NE(e3.text.find("1 more job of the group waits before it"), std::string::npos) << e3.text;
  q.pause();  // a paused queue holds every job: that is said first
  EXPECT_EQ(q.explain(third).holdup, Holdup::paused);
  q.resume();
  engine.run_until_idle();
  EXPECT_EQ(q.counts().completed, 3u);
}

TEST_F(FifoGroups, AddBulkPutsTheWholeBatchInItsGroupsLineInOrder) {
  auto q = engine.declare_queue<int>("q", {});
  std::vector<int> starts;
  q.process({}, [&](Job<int>& j) { starts.push_back(j.data()); });
  ASSERT_EQ(q.add("j", 0, in("g")).status, AddStatus::added);
  std::vector<int> items{1, 2, 3};
  EXPECT_EQ(q.add_bulk("j", std::span<int>(items), in("g")).count, 3u);
  EXPECT_EQ(q.counts().waiting, 4u);
  engine.run_until_idle();
  EXPECT_EQ(starts, (std::vector<int>{0, 1, 2, 3}));
}

TEST_F(FifoGroups, AGroupNameLongerThan256BytesIsRefused) {
  auto q = engine.declare_queue<int>("q", {});
  try {
    ASSERT_EQ(q.add("j", 1, in(std::string(257, 'x'))).status, AddStatus::added);
    FAIL() << "expected Error(invalid_option)";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find("group"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("at most 256 bytes"), std::string::npos) << e.what();
  }
  EXPECT_EQ(q.counts().added, 0u);
}

TEST_F(FifoGroups, ShutdownReportsParkedJobsAsNotStartedAndTakeLeftoversHandsThemBack) {
  auto q = engine.declare_queue<int>("q", {});
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(q.add("j", i, in("g")).status, AddStatus::added);
  const ShutdownReport report = engine.shutdown(0s);
  EXPECT_EQ(report.not_started.size(), 3u);
  std::vector<int> back;
  for (auto& left : q.take_leftovers())
    back.push_back(left.data);
  std::sort(back.begin(), back.end());
  EXPECT_EQ(back, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(q.counts().groups, 0u);
}

TEST_F(FifoGroups, TenThousandGroupsKeepTheirOrderUnderRandomFailuresAndRetries) {
  constexpr int kGroups = 10'000, kPerGroup = 4;
  QueueOptions opts;
  opts.capacity = kGroups * kPerGroup;
  auto q = engine.declare_queue<Step>("q", opts);
  std::mt19937_64 rng(20261205);
  std::vector<int> next(kGroups, 0);  // the job of each group expected to start next
  std::vector<int> running(kGroups, -1);
  std::uint64_t out_of_order = 0;
  q.process({}, [&](Job<Step>& j) {
    const int g = std::stoi(j.data().group.substr(1));
    const int n = j.data().n;
    // A retry of the job holding the turn, or the next one of the group (the one before it
    // ended: completed or dead-lettered).
    if (n != next[g] && n != running[g]) ++out_of_order;
    running[g] = n;
    next[g] = n + 1;
    if (rng() % 4 == 0) throw std::runtime_error("flaky");
  });
  for (int n = 0; n < kPerGroup; ++n)
    for (int g = 0; g < kGroups; ++g) {
      const std::string group = std::string("g").append(std::to_string(g));
      ASSERT_EQ(q.add("j", Step{group, n}, in(group, 3)).status, AddStatus::added);
    }
  replay();
  EXPECT_EQ(out_of_order, 0u);
  const QueueCounts c = q.counts();
  EXPECT_EQ(c.completed + c.dead_lettered, std::uint64_t{kGroups} * kPerGroup);
  EXPECT_GT(c.dead_lettered, 0u);
  EXPECT_GT(c.failed_attempts, c.dead_lettered);
  EXPECT_EQ(c.groups, 0u);
}

}  // namespace
}  // namespace rail
