// DeadLetterQueue<T>: what enters it, every way out (redrive, redrive_all, remove, purge, bound,
// retention) and its alert, under the manual clock in inline mode.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rail/rail.hpp"
#include "support/eventually.hpp"
#include "support/inline_engine.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;

struct Dlq : test::InlineEngine {
  /// failing(options): a queue whose handler fails every job permanently, so each job added
  /// and run lands in the DLQ after one attempt.
  Queue<int> failing(QueueOptions options = {}) {
    auto q = engine.declare_queue<int>("q", std::move(options));
    q.process({}, [this](Job<int>&) { return healthy ? Outcome::done() : Outcome::fail("down"); });
    return q;
  }
  /// ids(entries): the DLQ entries' job ids, in order.
  static std::vector<JobId> ids(const std::vector<DeadLetter<int>>& entries) {
    std::vector<JobId> out;
    for (const auto& e : entries)
      out.push_back(e.id);
    return out;
  }
  /// alerting_at(depth): failing() with a DLQ alert at `depth` that records into `alerts`.
  Queue<int> alerting_at(std::size_t depth) {
    QueueOptions qo;
    qo.dlq.alert_depth = depth;
    qo.dlq.on_alert = [this](std::size_t d) { alerts.push_back(d); };
    return failing(qo);
  }
  /// run_jobs(q, first, n): adds jobs with payloads first .. first + n - 1 and runs them all.
  void run_jobs(Queue<int>& q, int first, int n) {
    for (int i = first; i < first + n; ++i)
      (void)q.add("a", i);
    engine.run_until_idle();
  }
  bool healthy = false;
  std::vector<std::size_t> alerts;
};

TEST_F(Dlq, RedriveResetsAttemptsAndKeepsTheId) {
  auto q = engine.declare_queue<int>("q", {});
  q.process({}, [&](Job<int>&) { return healthy ? Outcome::done() : Outcome::retry("down"); });
  auto r = q.add("a", 7, JobOptions{.max_attempts = 2});
  engine.run_until_idle();
  ASSERT_EQ(q.dlq().size(), 1u);
  healthy = true;
  EXPECT_EQ(q.dlq().redrive(r.id), RedriveStatus::redriven);
  EXPECT_EQ(q.dlq().size(), 0u);
  auto redriven = of(EventKind::redriven, r.id);
  ASSERT_EQ(redriven.size(), 1u);
  EXPECT_EQ(redriven[0].attempt, 1u);  // the next attempt is a first one again
  EXPECT_EQ(redriven[0].max_attempts, 2u);
  EXPECT_EQ(q.state(r.id).status, JobStatus::waiting);
  engine.run_until_idle();
  auto done = of(EventKind::completed, r.id);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].attempt, 1u);  // attempts reset
  EXPECT_EQ(q.dlq().redrive(r.id), RedriveStatus::not_found);
  EXPECT_EQ(count(EventKind::redriven), 1u);  // a failed redrive emits nothing
}

TEST_F(Dlq, RedriveAllSendsEveryEntryBackOldestFirst) {
  auto q = failing();
  run_jobs(q, 0, 3);
  ASSERT_EQ(q.dlq().size(), 3u);
  healthy = true;
  EXPECT_EQ(q.dlq().redrive_all(), 3u);
  EXPECT_EQ(q.dlq().size(), 0u);
  EXPECT_EQ(ids_of(EventKind::redriven), (std::vector<JobId>{1, 2, 3}));
  engine.run_until_idle();
  EXPECT_EQ(ids_of(EventKind::completed), (std::vector<JobId>{1, 2, 3}));
  for (const auto& e : of(EventKind::completed))
    EXPECT_EQ(e.attempt, 1u);
  EXPECT_EQ(q.dlq().redrive_all(), 0u);  // empty: nothing to do
}

TEST_F(Dlq, RedriveAllStopsAtAFullQueueAndKeepsTheRestInOrder) {
  auto q = failing(QueueOptions{.capacity = 2});
  run_jobs(q, 0, 2);
  run_jobs(q, 2, 1);
  ASSERT_EQ(q.dlq().size(), 3u);
  auto blocker = q.add("a", 3);  // waiting: one slot left for redrives
  ASSERT_EQ(blocker.status, AddStatus::added);
  EXPECT_EQ(q.dlq().redrive_all(), 1u);
  EXPECT_EQ(ids_of(EventKind::redriven), std::vector<JobId>{1});
  // The entry that did not fit went back to the front: the DLQ still lists oldest first.
  EXPECT_EQ(ids(q.dlq().list()), (std::vector<JobId>{2, 3}));
}

TEST_F(Dlq, FailedRedriveLeavesTheEntryWhereItWas) {
  QueueOptions qo{.capacity = 2};
  qo.dlq.retention = 10s;
  auto q = failing(qo);
  run_jobs(q, 0, 2);  // dead at 0 s
  clock.advance(1s);
  run_jobs(q, 2, 2);  // dead at 1 s
  ASSERT_EQ(ids(q.dlq().list()), (std::vector<JobId>{1, 2, 3, 4}));
  (void)q.add("a", 4);
  (void)q.add("a", 5);  // the queue is full: redrives fail
  EXPECT_EQ(q.dlq().redrive(3), RedriveStatus::queue_full);
  EXPECT_TRUE(q.dlq().contains(3));
  EXPECT_EQ(ids(q.dlq().list()), (std::vector<JobId>{1, 2, 3, 4}));  // still oldest first
  clock.advance(9s);  // t = 10 s: the entries dead at 0 s have reached their retention
  EXPECT_EQ(ids(q.dlq().list()), (std::vector<JobId>{3, 4}));
}

TEST_F(Dlq, RedriveAfterShutdownKeepsTheEntry) {
  auto q = failing();
  auto r = q.add("a", 1);
  engine.run_until_idle();
  (void)engine.shutdown(0s);
  EXPECT_EQ(q.dlq().redrive(r.id), RedriveStatus::shutting_down);
  EXPECT_EQ(q.dlq().redrive_all(), 0u);
  EXPECT_TRUE(q.dlq().contains(r.id));
  EXPECT_EQ(count(EventKind::redriven), 0u);
}

TEST_F(Dlq, RemoveHandsTheEntryToTheCallerWithoutAnEvent) {
  auto q = failing();
  run_jobs(q, 10, 3);
  const std::size_t events_before = events.size();
  auto e = q.dlq().remove(2);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->id, 2u);
  EXPECT_EQ(e->name, "a");
  EXPECT_EQ(e->data, 11);
  EXPECT_EQ(e->reason, DeadLetterReason::permanent_failure);
  EXPECT_EQ(e->failed_attempts, 1u);
  EXPECT_EQ(e->last_error(), "down");
  EXPECT_EQ(events.size(), events_before);  // the caller owns the job now: no event
  EXPECT_FALSE(q.dlq().contains(2));
  EXPECT_EQ(q.dlq().size(), 2u);
  EXPECT_FALSE(q.dlq().remove(2));  // gone
  EXPECT_EQ(q.dlq().redrive(2), RedriveStatus::not_found);
  EXPECT_EQ(ids(q.dlq().list()), (std::vector<JobId>{1, 3}));
}

TEST_F(Dlq, RemoveRearmsTheAlert) {
  auto q = alerting_at(2);
  run_jobs(q, 0, 2);
  EXPECT_EQ(alerts, std::vector<std::size_t>{2});
  ASSERT_TRUE(q.dlq().remove(1));  // depth 1: below the threshold, the alert re-arms
  (void)q.add("a", 2);
  engine.run_until_idle();
  EXPECT_EQ(alerts, (std::vector<std::size_t>{2, 2}));
}

TEST_F(Dlq, AFiredAlertRearmsOnlyAtItsLowerMark) {
  // Alert at 3, re-armed at 1: a DLQ hovering between 2 and 3 alerts once.
  QueueOptions qo;
  qo.dlq.alert_depth = 3;
  qo.dlq.alert_rearm_depth = 1;
  qo.dlq.on_alert = [this](std::size_t d) { alerts.push_back(d); };
  auto q = failing(qo);
  run_jobs(q, 0, 3);
  EXPECT_EQ(alerts, std::vector<std::size_t>{3});
  ASSERT_TRUE(q.dlq().remove(q.dlq().list().front().id));  // 2: above the lower mark
  run_jobs(q, 3, 1);                                       // 3 again
  EXPECT_EQ(alerts, std::vector<std::size_t>{3}) << "not re-armed at 2";
  ASSERT_TRUE(q.dlq().remove(q.dlq().list().front().id));
  ASSERT_TRUE(q.dlq().remove(q.dlq().list().front().id));  // 1: re-armed
  run_jobs(q, 4, 2);                                       // 3 again
  EXPECT_EQ(alerts, (std::vector<std::size_t>{3, 3}));
  EXPECT_EQ(count(EventKind::dlq_alert), 2u);
}

TEST_F(Dlq, NoAlertDepthMeansNoAlertAtAnyDepth) {
  QueueOptions qo;
  qo.dlq.on_alert = [this](std::size_t d) { alerts.push_back(d); };  // set, but no depth
  auto q = failing(qo);
  run_jobs(q, 0, 5);
  ASSERT_EQ(q.dlq().size(), 5u);
  EXPECT_TRUE(alerts.empty()) << "alerted at depth " << alerts.front();
  EXPECT_EQ(count(EventKind::dlq_alert), 0u);
}

TEST_F(Dlq, AlertFiresAtThresholdWithAnEventAndRearms) {
  auto q = alerting_at(2);
  run_jobs(q, 0, 3);
  EXPECT_EQ(alerts, std::vector<std::size_t>{2});
  auto alert_events = of(EventKind::dlq_alert);
  ASSERT_EQ(alert_events.size(), 1u);
  EXPECT_EQ(alert_events[0].depth, 2u);
  EXPECT_EQ(alert_events[0].job_id, 0u);  // about the DLQ, not one job
  // The event follows the dead-lettering that reached the threshold, the second one.
  auto dead = of(EventKind::dead_lettered);
  ASSERT_EQ(dead.size(), 3u);
  std::vector<EventKind> order;
  for (const auto& e : events)
    if (e.kind == EventKind::dead_lettered || e.kind == EventKind::dlq_alert)
      order.push_back(e.kind);
  EXPECT_EQ(order, (std::vector<EventKind>{EventKind::dead_lettered, EventKind::dead_lettered,
                                           EventKind::dlq_alert, EventKind::dead_lettered}));
  EXPECT_EQ(q.dlq().purge(), 3u);
  run_jobs(q, 0, 2);
  EXPECT_EQ(alerts, (std::vector<std::size_t>{2, 2}));
  EXPECT_EQ(count(EventKind::dlq_alert), 2u);
}

TEST_F(Dlq, BoundAndRetentionEvictWithEvents) {
  QueueOptions qo;
  qo.dlq.max_entries = 2;
  qo.dlq.retention = 1h;
  auto q = failing(qo);
  run_jobs(q, 0, 3);
  EXPECT_EQ(q.dlq().size(), 2u);
  EXPECT_EQ(ids_of(EventKind::dlq_evicted), std::vector<JobId>{1});  // the oldest goes first
  clock.advance(1h);
  EXPECT_EQ(q.dlq().size(), 0u);
  EXPECT_EQ(ids_of(EventKind::dlq_evicted), (std::vector<JobId>{1, 2, 3}));
}

TEST_F(Dlq, MoveOnlyPayloadIsVisitedAndInspectedInPlaceThenRedriven) {
  auto q = engine.declare_queue<std::unique_ptr<int>>("q", {});
  std::vector<int> ran;
  q.process({}, [&](Job<std::unique_ptr<int>>& j) {
    ran.push_back(*j.data());
    return healthy ? Outcome::done() : Outcome::fail("down");
  });
  auto first = q.add("a", std::make_unique<int>(41));
  auto second = q.add("a", std::make_unique<int>(42));
  engine.run_until_idle();
  ASSERT_EQ(q.dlq().size(), 2u);

  std::vector<std::pair<JobId, int>> visited;
  q.dlq().visit([&](const DeadLetter<std::unique_ptr<int>>& e) {
    visited.emplace_back(e.id, *e.data);
    EXPECT_EQ(e.last_error(), "down");
  });
  EXPECT_EQ(visited, (std::vector<std::pair<JobId, int>>{{first.id, 41}, {second.id, 42}}));
  visited.clear();
  q.dlq().visit([&](const auto& e) { visited.emplace_back(e.id, *e.data); }, 1, 5);
  EXPECT_EQ(visited, (std::vector<std::pair<JobId, int>>{{second.id, 42}}));  // offset, limit

  int seen = 0;
  EXPECT_TRUE(q.dlq().inspect(second.id, [&](const auto& e) { seen = *e.data; }));
  EXPECT_EQ(seen, 42);
  EXPECT_FALSE(q.dlq().inspect(999, [&](const auto&) { ADD_FAILURE() << "no such entry"; }));

  healthy = true;
  EXPECT_EQ(q.dlq().redrive(second.id), RedriveStatus::redriven);
  engine.run_until_idle();
  EXPECT_EQ(ran, (std::vector<int>{41, 42, 42}));  // the same payload ran again
  EXPECT_EQ(q.counts().completed, 1u);
  EXPECT_EQ(q.dlq().size(), 1u);
}

TEST_F(Dlq, CallingTheDlqFromItsOwnVisitorIsWouldDeadlockNotAHang) {
  auto q = failing();
  run_jobs(q, 1, 2);
  std::optional<ErrorCode> code;
  q.dlq().visit([&](const DeadLetter<int>& e) {
    try {
      (void)q.dlq().redrive(e.id);
    } catch (const Error& err) {
      code = err.code();
    }
  });
  EXPECT_EQ(code, ErrorCode::would_deadlock);
  // Another DLQ may be called from the callback, and this one is usable once visit() returned.
  auto other = engine.declare_queue<int>("other", {});
  q.dlq().visit([&](const DeadLetter<int>&) { EXPECT_EQ(other.dlq().size(), 0u); });
  healthy = true;
  EXPECT_EQ(q.dlq().redrive_all(), 2u);
}

TEST_F(Dlq, AnAgeAlertFiresOnceWhenTheOldestEntryReachesTheAgeAndAgainAfterItRearms) {
  QueueOptions qo;
  qo.dlq.alert_age = 10s;
  std::vector<Duration> ages;
  qo.dlq.on_age_alert = [&](Duration age) { ages.push_back(age); };
  auto q = failing(qo);
  run_jobs(q, 1, 1);  // job 1 dead-lettered at 0 s; nobody reads the DLQ from here on
  clock.advance(9s);
  engine.run_until_idle();
  EXPECT_TRUE(ages.empty()) << "fired at 9 s";
  clock.advance(1s);
  engine.run_until_idle();
  ASSERT_EQ(ages, std::vector<Duration>{10s});
  const Event alert = first(EventKind::dlq_age_alert);
  EXPECT_EQ(alert.job_id, 1u) << "names the oldest entry";
  EXPECT_EQ(alert.elapsed, 10s);
  EXPECT_EQ(alert.depth, 1u);
  run_jobs(q, 2, 1);  // a second entry at 10 s; the oldest stays old
  clock.advance(25s);
  engine.run_until_idle();
  EXPECT_EQ(ages.size(), 1u) << "fired again while the DLQ stayed old";
  healthy = true;
  EXPECT_EQ(q.dlq().redrive_all(), 2u);  // empty: the alert re-arms
  engine.run_until_idle();
  healthy = false;
  run_jobs(q, 3, 1);  // a new entry at 35 s
  clock.advance(9s);
  engine.run_until_idle();
  EXPECT_EQ(ages.size(), 1u);
  clock.advance(1s);
  engine.run_until_idle();
  EXPECT_EQ(ages, (std::vector<Duration>{10s, 10s}));
  EXPECT_EQ(count(EventKind::dlq_age_alert), 2u);
}

TEST_F(Dlq, AnAgeAlertRearmsWhenTheOldEntriesLeaveAndAYoungerOneRemains) {
  QueueOptions qo;
  qo.dlq.alert_age = 10s;
  auto q = failing(qo);
  run_jobs(q, 1, 1);  // at 0 s
  clock.advance(8s);
  run_jobs(q, 2, 1);  // at 8 s
  clock.advance(2s);
  engine.run_until_idle();
  ASSERT_EQ(count(EventKind::dlq_age_alert), 1u);  // job 1 at 10 s
  ASSERT_TRUE(q.dlq().remove(1));                  // job 2, 2 s old, is the oldest: re-armed
  clock.advance(7s);
  engine.run_until_idle();
  EXPECT_EQ(count(EventKind::dlq_age_alert), 1u) << "job 2 is 9 s old";
  clock.advance(1s);
  engine.run_until_idle();
  ASSERT_EQ(count(EventKind::dlq_age_alert), 2u);
  EXPECT_EQ(of(EventKind::dlq_age_alert).back().job_id, 2u);
}

TEST_F(Dlq, AnAgeAlertOfZeroOrLessIsRefusedNamingTheField) {
  QueueOptions qo;
  qo.dlq.alert_age = 0s;
  try {
    (void)engine.declare_queue<int>("q", qo);
    FAIL() << "an alert_age of 0 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find("dlq.alert_age"), std::string::npos) << e.what();
  }
}

TEST(DlqThreaded, AnAgeAlertFiresOnTheRealClockWithNobodyReadingTheDlq) {
  Engine engine;
  QueueOptions qo;
  qo.dlq.alert_age = 50ms;
  std::atomic<int> alerts{0};
  qo.dlq.on_age_alert = [&](Duration age) {
    if (age >= 50ms) alerts.fetch_add(1);
  };
  auto q = engine.declare_queue<int>("q", qo);
  q.process({}, [](Job<int>&) { return Outcome::fail("down"); });
  (void)q.add("a", 1);
  EXPECT_TRUE(test::eventually([&] { return alerts.load() == 1; }));
  EXPECT_EQ(q.dlq().size(), 1u);
}

}  // namespace
}  // namespace rail
