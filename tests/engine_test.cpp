// Engine behaviour under the manual clock in inline mode: deterministic, no threads, no sleeps.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "rail/rail.hpp"
#include "support/inline_engine.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;

using EngineInline = test::InlineEngine;

TEST_F(EngineInline, JobIdsStartAtOneAndIncrease) {
  auto q = engine.declare_queue<int>("q", {});
  EXPECT_EQ(q.add("a", 1).id, 1u);
  EXPECT_EQ(q.add("a", 2).id, 2u);
}

TEST_F(EngineInline, HandlerRunsOnlyInRunUntilIdle) {
  auto q = engine.declare_queue<int>("q", {});
  int sum = 0;
  q.process({}, [&](Job<int>& j) { sum += j.data(); });
  (void)q.add("a", 5);
  EXPECT_EQ(sum, 0);
  EXPECT_EQ(engine.run_until_idle(), 1u);
  EXPECT_EQ(sum, 5);
  EXPECT_EQ(q.counts().completed, 1u);
}

TEST_F(EngineInline, DefaultAttemptsIsOneSoAFailureDeadLettersAtOnce) {
  auto q = engine.declare_queue<int>("q", {});
  q.process({}, [](Job<int>&) { return Outcome::retry("nope"); });
  auto r = q.add("a", 1);
  engine.run_until_idle();
  ASSERT_EQ(q.dlq().size(), 1u);
  auto e = q.dlq().get(r.id);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->reason, DeadLetterReason::attempts_exhausted);
  EXPECT_EQ(e->failed_attempts, 1u);
  EXPECT_EQ(e->last_error(), "nope");
}

TEST_F(EngineInline, ExponentialBackoffDelaysAreExact) {
  auto q = engine.declare_queue<int>("q", {});
  q.process({}, [](Job<int>&) { return Outcome::retry("boom"); });
  JobOptions o{.max_attempts = 4, .backoff = Backoff::exponential(500ms)};
  auto r = q.add("a", 1, o);
  replay();
  auto starts = of(EventKind::started, r.id);
  ASSERT_EQ(starts.size(), 4u);
  EXPECT_EQ(since_start(starts[0]), 0ms);
  EXPECT_EQ(since_start(starts[1]), 500ms);
  EXPECT_EQ(since_start(starts[2]), 1500ms);
  EXPECT_EQ(since_start(starts[3]), 3500ms);
  auto fails = of(EventKind::attempt_failed, r.id);
  ASSERT_EQ(fails.size(), 4u);
  EXPECT_EQ(fails[0].delay, 500ms);
  EXPECT_EQ(fails[1].delay, 1000ms);
  EXPECT_EQ(fails[2].delay, 2000ms);
  EXPECT_LT(fails[3].delay, 0ns);  // no next attempt
  auto dead = of(EventKind::dead_lettered, r.id);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].reason, DeadLetterReason::attempts_exhausted);
  auto e = q.dlq().get(r.id);
  ASSERT_TRUE(e);
  ASSERT_EQ(e->errors.size(), 4u);
  EXPECT_EQ(e->errors[2].attempt, 3u);
  EXPECT_EQ(e->errors[2].at.time_since_epoch(), 1500ms);
}

TEST_F(EngineInline, TimerNeverFiresEarly) {
  auto q = engine.declare_queue<int>("q", {});
  int runs = 0;
  q.process({}, [&](Job<int>&) { ++runs; });
  (void)q.add("a", 1, JobOptions{.delay = 250ms});
  engine.run_until_idle();
  EXPECT_EQ(runs, 0);
  clock.advance(249ms);
  engine.run_until_idle();
  EXPECT_EQ(runs, 0);
  clock.advance(1ms);
  engine.run_until_idle();
  EXPECT_EQ(runs, 1);
}

TEST_F(EngineInline, ThrownExceptionIsARetryableFailureCarryingWhat) {
  auto q = engine.declare_queue<int>("q", {});
  q.process({}, [](Job<int>& j) -> Outcome {
    if (j.attempt() == 1) throw std::runtime_error("gateway timeout");
    EXPECT_EQ(j.last_error(), "gateway timeout");
    return Outcome::done();
  });
  auto r = q.add("a", 1, JobOptions{.max_attempts = 2});
  engine.run_until_idle();  // no backoff: the retry is ready at once
  EXPECT_EQ(q.counts().completed, 1u);
  ASSERT_EQ(of(EventKind::completed, r.id).size(), 1u);
  EXPECT_EQ(of(EventKind::completed, r.id)[0].attempt, 2u);
}

TEST_F(EngineInline, PermanentFailureSkipsRemainingAttempts) {
  auto q = engine.declare_queue<int>("q", {});
  q.process({}, [](Job<int>&) { return Outcome::fail("card declined"); });
  auto r = q.add("a", 1, JobOptions{.max_attempts = 5, .backoff = Backoff::fixed(1s)});
  engine.run_until_idle();
  auto e = q.dlq().get(r.id);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->reason, DeadLetterReason::permanent_failure);
  EXPECT_EQ(e->failed_attempts, 1u);
  EXPECT_FALSE(engine.next_timer_in().has_value());
}

TEST_F(EngineInline, RetryAfterOverridesBackoff) {
  auto q = engine.declare_queue<int>("q", {});
  q.process({}, [](Job<int>& j) {
    return j.attempt() == 1 ? Outcome::retry_in(7s, "429") : Outcome::done();
  });
  auto r = q.add("a", 1, JobOptions{.max_attempts = 2, .backoff = Backoff::fixed(1s)});
  replay();
  auto starts = of(EventKind::started, r.id);
  ASSERT_EQ(starts.size(), 2u);
  EXPECT_EQ(since_start(starts[1]), 7s);
}

TEST_F(EngineInline, CustomBackoffNegativeStopsRetrying) {
  QueueOptions qo;
  qo.custom_backoff = [](const RetryContext& c) {
    return c.error == "fatal" ? Duration{-1} : Duration{c.failed_attempts * 100ms};
  };
  auto q = engine.declare_queue<int>("q", qo);
  q.process({},
            [](Job<int>& j) { return Outcome::retry(j.attempt() < 3 ? "transient" : "fatal"); });
  auto r = q.add("a", 1, JobOptions{.max_attempts = 10, .backoff = Backoff::custom()});
  replay();
  auto starts = of(EventKind::started, r.id);
  ASSERT_EQ(starts.size(), 3u);
  EXPECT_EQ(since_start(starts[1]), 100ms);
  EXPECT_EQ(since_start(starts[2]), 300ms);
  auto e = q.dlq().get(r.id);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->reason, DeadLetterReason::backoff_stopped);
}

TEST_F(EngineInline, DuplicateWithinTtlIsMergedAndOneAfterIsNot) {
  auto q = engine.declare_queue<int>("q", {});
  int runs = 0;
  q.process({}, [&](Job<int>&) { ++runs; });
  JobOptions o;
  o.dedup = {.id = "order-4-email", .ttl = 5min};
  auto first = q.add("email", 1, o);
  auto second = q.add("email", 2, o);
  EXPECT_EQ(first.status, AddStatus::added);
  EXPECT_EQ(second.status, AddStatus::duplicate);
  EXPECT_TRUE(second.duplicate());
  EXPECT_EQ(second.id, first.id);
  engine.run_until_idle();
  EXPECT_EQ(runs, 1);
  // With a ttl the id stays tracked after completion (SQS), until the window ends.
  clock.advance(5min - 1ns);
  EXPECT_EQ(q.add("email", 3, o).status, AddStatus::duplicate);
  clock.advance(1ns);
  auto third = q.add("email", 4, o);
  EXPECT_EQ(third.status, AddStatus::added);
  EXPECT_NE(third.id, first.id);
  ASSERT_EQ(of(EventKind::deduplicated).size(), 2u);
  EXPECT_EQ(of(EventKind::deduplicated)[0].job_id, first.id);
}

TEST_F(EngineInline, DedupWithoutTtlHeldUntilJobEnds) {
  auto q = engine.declare_queue<int>("q", {});
  q.process({}, [](Job<int>&) {});
  JobOptions o;
  o.dedup.id = "k";
  auto first = q.add("a", 1, o);
  EXPECT_EQ(q.add("a", 1, o).status, AddStatus::duplicate);
  clock.advance(24h);
  EXPECT_EQ(q.add("a", 1, o).id, first.id);
  engine.run_until_idle();  // completes: the id is released (BullMQ simple mode)
  auto again = q.add("a", 1, o);
  EXPECT_EQ(again.status, AddStatus::added);
  EXPECT_NE(again.id, first.id);
}

TEST_F(EngineInline, DebounceReplacesPayloadAndRestartsDelay) {
  auto q = engine.declare_queue<int>("q", {});
  std::vector<int> seen;
  q.process({}, [&](Job<int>& j) { seen.push_back(j.data()); });
  JobOptions o;
  o.delay = 1s;
  o.dedup = {.id = "search", .ttl = 1s, .mode = DedupMode::debounce};
  auto first = q.add("a", 1, o);
  clock.advance(600ms);
  auto second = q.add("a", 2, o);
  EXPECT_EQ(second.status, AddStatus::debounced);
  EXPECT_EQ(second.id, first.id);
  clock.advance(500ms);  // t = 1.1 s: the original delay has passed, the restarted one not
  engine.run_until_idle();
  EXPECT_TRUE(seen.empty());
  clock.advance(500ms);  // t = 1.6 s
  engine.run_until_idle();
  EXPECT_EQ(seen, std::vector<int>{2});
  // The merge is reported as a debounce of the kept job, at the time of the second add.
  auto debounced = of(EventKind::debounced);
  ASSERT_EQ(debounced.size(), 1u);
  EXPECT_EQ(debounced[0].job_id, first.id);
  EXPECT_EQ(since_start(debounced[0]), 600ms);
  EXPECT_EQ(debounced[0].delay, 1s);
  EXPECT_EQ(count(EventKind::deduplicated), 0u);
  EXPECT_EQ(count(EventKind::added), 1u);
  EXPECT_EQ(q.counts().deduplicated, 1u);
}

TEST_F(EngineInline, FullQueueRejectsWithStatusAndCreatesNothing) {
  auto q = engine.declare_queue<int>("q", QueueOptions{.capacity = 2});
  EXPECT_EQ(q.add("a", 1).status, AddStatus::added);
  EXPECT_EQ(q.add("a", 2).status, AddStatus::added);
  auto r = q.add("a", 3);
  EXPECT_EQ(r.status, AddStatus::full);
  EXPECT_EQ(r.id, 0u);
  EXPECT_EQ(q.counts().added, 2u);
}

TEST_F(EngineInline, FullQueueCanSendTheNewJobToTheDlq) {
  auto q =
      engine.declare_queue<int>("q", QueueOptions{.capacity = 1, .on_full = OnFull::dead_letter});
  (void)q.add("a", 1);
  auto r = q.add("a", 2);
  EXPECT_EQ(r.status, AddStatus::dead_lettered);
  auto e = q.dlq().get(r.id);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->reason, DeadLetterReason::overflow);
  EXPECT_EQ(e->data, 2);
}

TEST_F(EngineInline, AddBulkIsAllOrNothingWithConsecutiveIds) {
  auto q = engine.declare_queue<int>("q", QueueOptions{.capacity = 4});
  EXPECT_EQ(q.add("a", 0).id, 1u);
  std::vector<int> three{1, 2, 3};
  auto r = q.add_bulk("a", std::span<int>(three));
  EXPECT_EQ(r.status, AddStatus::added);
  EXPECT_EQ(r.first_id, 2u);
  EXPECT_EQ(r.count, 3u);
  std::vector<int> two{4, 5};
  auto full = q.add_bulk("a", std::span<int>(two));
  EXPECT_EQ(full.status, AddStatus::full);
  EXPECT_EQ(full.first_id, 0u);
  EXPECT_EQ(full.count, 0u);
  EXPECT_EQ(q.counts().added, 4u);
  EXPECT_EQ(two, (std::vector<int>{4, 5}));  // a refused bulk add moves nothing out
  std::vector<std::pair<JobId, int>> ran;
  q.process({}, [&](Job<int>& j) { ran.emplace_back(j.id(), j.data()); });
  engine.run_until_idle();
  // Item i of the batch is job first_id + i.
  EXPECT_EQ(ran, (std::vector<std::pair<JobId, int>>{{1, 0}, {2, 1}, {3, 2}, {4, 3}}));
  std::vector<int> none;
  auto empty = q.add_bulk("a", std::span<int>(none));
  EXPECT_EQ(empty.status, AddStatus::added);
  EXPECT_EQ(empty.count, 0u);
  EXPECT_EQ(q.add("a", 9).id, 5u);  // an empty bulk add uses no id
}

TEST_F(EngineInline, AddBulkOfMoreJobsThanTheCapacityIsAnsweredAsAFullQueueIs) {
  // One answer for "no room": more items than the capacity can never fit, so the batch gets the
  // overflow policy's answer at once (no throw, and no wait under the block policy).
  std::vector<int> five{1, 2, 3, 4, 5};
  for (OnFull p : {OnFull::reject, OnFull::block}) {
    auto q = engine.declare_queue<int>(p == OnFull::reject ? "reject" : "block",
                                       QueueOptions{.capacity = 4, .on_full = p});
    const BulkAddReceipt r = q.add_bulk("a", std::span<int>(five));
    EXPECT_EQ(r.status, AddStatus::full);
    EXPECT_EQ(r.count, 0u);
    EXPECT_EQ(q.counts().added, 0u);
    EXPECT_EQ(five, (std::vector<int>{1, 2, 3, 4, 5})) << "a refused bulk add moves nothing out";
  }
  auto dl =
      engine.declare_queue<int>("dl", QueueOptions{.capacity = 4, .on_full = OnFull::dead_letter});
  const BulkAddReceipt r = dl.add_bulk("a", std::span<int>(five));
  EXPECT_EQ(r.status, AddStatus::dead_lettered);
  EXPECT_EQ(r.count, 5u);
  EXPECT_EQ(dl.dlq().size(), 5u);
}

TEST_F(EngineInline, AddBulkThatDoesNotFitDeadLettersEveryItemUnderTheDeadLetterPolicy) {
  auto q =
      engine.declare_queue<int>("q", QueueOptions{.capacity = 3, .on_full = OnFull::dead_letter});
  (void)q.add("a", 0);
  auto kept = q.add("a", 0);
  std::vector<int> three{1, 2, 3};
  auto r = q.add_bulk("b", std::span<int>(three), JobOptions{.max_attempts = 4});
  // All or nothing still: one slot is free, but the batch needs three, so all three overflow.
  EXPECT_EQ(r.status, AddStatus::dead_lettered);
  EXPECT_EQ(r.first_id, kept.id + 1);
  EXPECT_EQ(r.count, 3u);
  auto dlq = q.dlq().list();
  ASSERT_EQ(dlq.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(dlq[i].id, r.first_id + i);
    EXPECT_EQ(dlq[i].name, "b");
    EXPECT_EQ(dlq[i].data, static_cast<int>(i) + 1);
    EXPECT_EQ(dlq[i].reason, DeadLetterReason::overflow);
    EXPECT_EQ(dlq[i].failed_attempts, 0u);
    EXPECT_EQ(dlq[i].max_attempts, 4u);
    EXPECT_EQ(q.state(r.first_id + i).status, JobStatus::dead_lettered);
  }
  auto dead = of(EventKind::dead_lettered);
  ASSERT_EQ(dead.size(), 3u);
  for (const auto& e : dead)
    EXPECT_EQ(e.reason, DeadLetterReason::overflow);
  auto c = q.counts();
  EXPECT_EQ(c.added, 5u);
  EXPECT_EQ(c.dead_lettered, 3u);
  EXPECT_EQ(c.waiting, 2u);
}

TEST_F(EngineInline, JobIdsAreUniqueAcrossQueuesInAddOrder) {
  auto a = engine.declare_queue<int>("a", {});
  auto b = engine.declare_queue<std::string>("b", {});
  EXPECT_EQ(a.add("x", 1).id, 1u);
  EXPECT_EQ(b.add("x", "one").id, 2u);
  std::vector<int> three{1, 2, 3};
  EXPECT_EQ(a.add_bulk("x", std::span<int>(three)).first_id, 3u);
  EXPECT_EQ(b.add("x", "two", JobOptions{.delay = 1s}).id, 6u);
  EXPECT_EQ(a.add("x", 4).id, 7u);
}

TEST_F(EngineInline, EngineStateFindsAJobInWhicheverQueueHoldsIt) {
  auto a = engine.declare_queue<int>("a", {});
  auto b = engine.declare_queue<std::string>("b", {});
  std::vector<JobState> inside;
  a.process({}, [&](Job<int>& j) {
    inside.push_back(engine.state(j.id()));
    return j.data() == 0 ? Outcome::done() : Outcome::fail("no");
  });
  b.process({}, [](Job<std::string>&) {});
  auto waiting = b.add("x", "w");
  b.pause();  // keeps it waiting through run_until_idle
  auto delayed = b.add("x", "d", JobOptions{.delay = 5s});
  clock.advance(1s);
  auto done = a.add("x", 0);
  auto dead = a.add("x", 1);
  EXPECT_EQ(engine.state(waiting.id).status, JobStatus::waiting);
  JobState d = engine.state(delayed.id);
  EXPECT_EQ(d.status, JobStatus::delayed);
  EXPECT_EQ(d.since.time_since_epoch(), 5s);  // due time
  engine.run_until_idle();
  ASSERT_EQ(inside.size(), 2u);
  EXPECT_EQ(inside[0].status, JobStatus::active);
  EXPECT_EQ(inside[0].since.time_since_epoch(), 1s);  // start of this delivery
  EXPECT_EQ(inside[0].deliveries, 1u);
  EXPECT_EQ(engine.state(done.id).status, JobStatus::completed);
  EXPECT_EQ(engine.state(dead.id).status, JobStatus::dead_lettered);
  EXPECT_EQ(engine.state(waiting.id).status, JobStatus::waiting);  // b's, after a's ran
  EXPECT_EQ(engine.state(12345).status, JobStatus::unknown);
}

TEST_F(EngineInline, EngineCancelCancelsAJobInWhicheverQueueHoldsIt) {
  auto a = engine.declare_queue<int>("a", {});
  auto b = engine.declare_queue<int>("b", {});
  int runs = 0;
  a.process({}, [&](Job<int>&) { ++runs; });
  b.process({}, [&](Job<int>&) { ++runs; });
  auto in_a = a.add("x", 1);
  auto in_b = b.add("x", 2, JobOptions{.delay = 1s});
  auto kept = b.add("x", 3);
  EXPECT_TRUE(engine.cancel(in_b.id));
  EXPECT_TRUE(engine.cancel(in_a.id));
  EXPECT_FALSE(engine.cancel(in_b.id));  // already ended
  EXPECT_FALSE(engine.cancel(12345));    // in no queue
  EXPECT_EQ(engine.state(in_a.id).status, JobStatus::cancelled);
  EXPECT_EQ(engine.state(in_b.id).status, JobStatus::cancelled);
  EXPECT_EQ(a.counts().cancelled, 1u);
  EXPECT_EQ(b.counts().cancelled, 1u);
  clock.advance(1s);
  engine.run_until_idle();
  EXPECT_EQ(runs, 1);  // only `kept`
  EXPECT_EQ(engine.state(kept.id).status, JobStatus::completed);
  EXPECT_FALSE(engine.cancel(kept.id));
  EXPECT_EQ(ids_of(EventKind::cancelled), (std::vector<JobId>{in_b.id, in_a.id}));
}

TEST_F(EngineInline, DedupWindowAtItsLimitRefusesNewIdsWithDedupFull) {
  // A window of one id: the second live id is refused.
  auto q = engine.declare_queue<int>("q", QueueOptions{.capacity = 80, .dedup_capacity = 1});
  JobOptions o;
  o.dedup.ttl = 1min;
  std::string refused;
  std::uint64_t added = 0;
  for (int i = 0; i <= 64 && refused.empty(); ++i) {
    o.dedup.id = "id-" + std::to_string(i);
    auto r = q.add("a", i, o);
    if (r.status == AddStatus::dedup_full) {
      EXPECT_EQ(r.id, 0u);
      EXPECT_FALSE(r.accepted());
      refused = o.dedup.id;
    } else {
      EXPECT_EQ(r.status, AddStatus::added);
      ++added;
    }
  }
  ASSERT_FALSE(refused.empty()) << "65 ids fit a window of one id";
  EXPECT_EQ(added, 1u);
  // Nothing was created: no job, no event, no id, and the slot it took went back.
  EXPECT_EQ(q.counts().added, added);
  EXPECT_EQ(count(EventKind::added), added);
  EXPECT_EQ(q.add("plain", 0).id, added + 1);
  std::uint64_t more = 1;
  while (q.add("plain", 0).status == AddStatus::added)
    ++more;
  EXPECT_EQ(added + more, q.capacity());
  // Once the window ends (the jobs ran meanwhile), the id is accepted.
  q.process({}, [](Job<int>&) {});
  engine.run_until_idle();
  clock.advance(1min);
  o.dedup.id = refused;
  EXPECT_EQ(q.add("a", 0, o).status, AddStatus::added);
}

// The window is sharded: sized exactly, its busiest shard would fill while the queue still had
// room, and adds would answer dedup_full with fewer live ids than promised.
TEST_F(EngineInline, AQueueFullOfJobsWithDedupIdsIsFullBeforeItsWindowIs) {
  for (const std::uint32_t capacity : {100u, 4096u, 20000u}) {
    auto q = engine.declare_queue<int>("ids-" + std::to_string(capacity),
                                       QueueOptions{.capacity = capacity});
    JobOptions o;
    for (std::uint32_t i = 0; i < capacity; ++i) {
      o.dedup.id = "order-" + std::to_string(i);
      ASSERT_EQ(q.add("a", 0, o).status, AddStatus::added)
          << "add " << i << " of " << capacity << " refused while the queue has room";
    }
    o.dedup.id = "one-more";
    EXPECT_EQ(q.add("a", 0, o).status, AddStatus::full);
  }
  // An explicit window: its ids fit too, and one more finds it full (the jobs live on).
  auto q =
      engine.declare_queue<int>("window", QueueOptions{.capacity = 9000, .dedup_capacity = 3000});
  JobOptions o;
  for (std::uint32_t i = 0; i < 3000; ++i) {
    o.dedup.id = "invoice-" + std::to_string(i);
    ASSERT_EQ(q.add("a", 0, o).status, AddStatus::added) << "id " << i << " of 3000 refused";
  }
  std::uint32_t more = 0;
  for (std::uint32_t i = 0; i < 6000; ++i) {
    o.dedup.id = "extra-" + std::to_string(i);
    if (q.add("a", 0, o).status != AddStatus::added) break;
    ++more;
  }
  EXPECT_LT(more, 6000u) << "the window never filled";
  EXPECT_LE(3000 + more, 3000u * 3 / 2) << "the headroom stays a fraction of the window";
}

TEST_F(EngineInline, WaitIdleOnAnInlineEngineIsWrongMode) {
  auto q = engine.declare_queue<int>("q", {});
  try {
    (void)q.wait_idle(1s);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::wrong_mode);
  }
}

TEST_F(EngineInline, UnknownQueueAndTypeMismatchAreClearErrors) {
  (void)engine.declare_queue<int>("q", {});
  try {
    (void)engine.queue<int>("nope");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unknown_queue);
    EXPECT_NE(std::string(e.what()).find("nope"), std::string::npos);
  }
  EXPECT_THROW((void)engine.queue<double>("q"), Error);
  EXPECT_THROW((void)engine.declare_queue<int>("q", {}), Error);
}

TEST_F(EngineInline, RunUntilIdleOnThreadedEngineIsWrongMode) {
  Engine threaded;
  try {
    threaded.run_until_idle();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::wrong_mode);
  }
}

TEST_F(EngineInline, ShutdownRejectsAddsAndReportsUnstartedJobs) {
  auto q = engine.declare_queue<int>("q", {});
  auto a = q.add("a", 1);
  auto b = q.add("a", 2, JobOptions{.delay = 1s});
  auto report = engine.shutdown(0s);
  ASSERT_EQ(report.not_started.size(), 2u);
  EXPECT_TRUE(report.still_running.empty());
  std::vector<JobId> ids{report.not_started[0].id, report.not_started[1].id};
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<JobId>{a.id, b.id}));
  // A status, not an Error: a request thread racing the shutdown is not misuse.
  const AddReceipt late = q.add("a", 3);
  EXPECT_EQ(late.status, AddStatus::shutting_down);
  EXPECT_FALSE(late.accepted());
  EXPECT_EQ(late.id, 0u);
  std::vector<int> items{4, 5};
  EXPECT_EQ(q.add_bulk("a", std::span<int>(items)).status, AddStatus::shutting_down);
  const auto handle = q.add_tracked("a", 6);
  EXPECT_EQ(handle.wait().status, JobStatus::unknown);
  EXPECT_EQ(q.counts().added, 2u);
}

TEST_F(EngineInline, SecondShutdownReportsTheSameLeftovers) {
  auto q = engine.declare_queue<int>("q", {});
  (void)q.add("a", 1);
  (void)q.add("b", 2, JobOptions{.delay = 1s});
  auto first = engine.shutdown(0s);
  auto second = engine.shutdown(0s);
  auto key = [](const ShutdownReport& r) {
    std::vector<std::pair<JobId, std::string>> out;
    for (const auto& j : r.not_started)
      out.emplace_back(j.id, j.queue + "/" + j.name);
    std::sort(out.begin(), out.end());
    return out;
  };
  EXPECT_EQ(key(first), (std::vector<std::pair<JobId, std::string>>{{1, "q/a"}, {2, "q/b"}}));
  EXPECT_EQ(key(second), key(first));
  EXPECT_TRUE(second.still_running.empty());
}

TEST_F(EngineInline, EventsTraceEveryStageByJobId) {
  auto q = engine.declare_queue<int>("q", {});
  q.process({},
            [](Job<int>& j) { return j.attempt() < 2 ? Outcome::retry("x") : Outcome::done(); });
  auto r = q.add("a", 1, JobOptions{.max_attempts = 2, .backoff = Backoff::fixed(10ms)});
  replay();
  std::vector<EventKind> kinds;
  for (const auto& e : events)
    if (e.job_id == r.id) kinds.push_back(e.kind);
  EXPECT_EQ(kinds, (std::vector<EventKind>{EventKind::added, EventKind::started,
                                           EventKind::attempt_failed, EventKind::retry_due,
                                           EventKind::started, EventKind::completed}));
}

TEST_F(EngineInline, ThrowingObserverIsCountedAndReportedOnceWhileJobsComplete) {
  auto q = engine.declare_queue<int>("q", {});
  q.process({}, [](Job<int>&) {});
  engine.on_event([](const Event& e) {
    if (e.kind == EventKind::completed) throw std::runtime_error("observer broke");
  });
  int seen_after = 0;  // an observer registered after the throwing one still gets every event
  engine.on_event([&](const Event& e) { seen_after += e.kind == EventKind::completed; });
  constexpr int kJobs = 500;
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < kJobs; ++i)
    (void)q.add("job", i);
  engine.run_until_idle();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(q.counts().completed, static_cast<std::uint64_t>(kJobs));
  EXPECT_EQ(seen_after, kJobs);
  EXPECT_EQ(engine.observer_errors(), static_cast<std::uint64_t>(kJobs));
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("rail: an observer threw on event completed of job 1 (queue 'q'): observer "
                     "broke; rail ignores what observers throw and counts it in "
                     "Engine::observer_errors()"),
            std::string::npos)
      << err;
}

/// Fixed: a payload with a const member: copyable and nothrow movable, but not assignable.
struct Fixed {
  const int key;
  std::string note;
};

TEST_F(EngineInline, PayloadWithAConstMemberRunsDebouncesDeadLettersAndRedrives) {
  auto q = engine.declare_queue<Fixed>("q", {});
  std::vector<std::pair<int, std::string>> seen;
  bool fail = true;
  q.process({}, [&](Job<Fixed>& j) {
    seen.emplace_back(j.data().key, j.data().note);
    return fail ? Outcome::fail("refused") : Outcome::done();
  });
  JobOptions o;
  o.delay = 1s;
  o.dedup = {.id = "d", .ttl = 10s, .mode = DedupMode::debounce};
  auto first = q.add("a", Fixed{1, "first"}, o);
  auto second = q.add("a", Fixed{2, "second"}, o);
  EXPECT_EQ(second.status, AddStatus::debounced);  // the payload was replaced in place
  EXPECT_EQ(second.id, first.id);
  replay();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], (std::pair<int, std::string>{2, "second"}));

  auto listed = q.dlq().list();  // copies: Fixed is copy constructible
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].data.key, 2);
  ASSERT_TRUE(q.dlq().get(first.id).has_value());
  fail = false;
  EXPECT_EQ(q.dlq().redrive(first.id), RedriveStatus::redriven);
  engine.run_until_idle();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1], (std::pair<int, std::string>{2, "second"}));
  EXPECT_EQ(q.dlq().size(), 0u);
  EXPECT_EQ(q.counts().completed, 1u);
}

}  // namespace
}  // namespace rail
