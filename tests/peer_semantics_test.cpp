// Peer semantics (issue 11): behaviours BullMQ, asynq and SQS users rely on, pinned under the
// manual clock of an inline engine.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "rail/rail.hpp"
#include "support/eventually.hpp"
#include "support/inline_engine.hpp"
#include "support/watchdog.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;
using PeerSemantics = test::InlineEngine;

JobOptions with_dedup(std::string id, std::optional<Duration> ttl,
                      DedupMode mode = DedupMode::merge, Duration delay = Duration{0}) {
  JobOptions o;
  o.dedup = {.id = std::move(id), .ttl = ttl, .mode = mode};
  o.delay = delay;
  return o;
}

// --- dedup ids follow the job ---------------------------------------------------------------

TEST_F(PeerSemantics, CancellingAJobReleasesItsDedupIdEvenWhenTheWindowHasATtl) {
  auto q = engine.declare_queue<int>("emails", QueueOptions{});
  const JobId first = q.add("send", 1, with_dedup("order-4-email", 1h, DedupMode::merge, 1min)).id;
  ASSERT_TRUE(q.cancel(first));
  const AddReceipt again = q.add("send", 2, with_dedup("order-4-email", 1h));
  EXPECT_EQ(again.status, AddStatus::added) << "the cancelled job's id must not merge later adds";
  EXPECT_NE(again.id, first);
  int ran = 0;
  q.process({}, [&](Job<int>& j) { ran += j.data(); });
  engine.run_until_idle();
  EXPECT_EQ(ran, 2) << "the new add's work runs";
}

TEST_F(PeerSemantics, AJobThatRanKeepsMergingItsIdUntilTheTtlEnds) {
  auto q = engine.declare_queue<int>("emails", QueueOptions{});
  q.process({}, [](Job<int>&) {});
  const JobId first = q.add("send", 1, with_dedup("order-4-email", 10min)).id;
  engine.run_until_idle();
  EXPECT_EQ(q.add("send", 2, with_dedup("order-4-email", 10min)).status, AddStatus::duplicate);
  clock.advance(10min);
  const AddReceipt later = q.add("send", 3, with_dedup("order-4-email", 10min));
  EXPECT_EQ(later.status, AddStatus::added);
  EXPECT_NE(later.id, first);
}

TEST_F(PeerSemantics, ADuplicateAddToAFullQueueIsADuplicateNotFull) {
  auto q = engine.declare_queue<int>("charges", QueueOptions{.capacity = 1});
  const JobId kept = q.add("charge", 1, with_dedup("order-1", std::nullopt)).id;
  const AddReceipt dup = q.add("charge", 2, with_dedup("order-1", std::nullopt));
  EXPECT_EQ(dup.status, AddStatus::duplicate);
  EXPECT_EQ(dup.id, kept);
  EXPECT_EQ(count(EventKind::deduplicated), 1u);
  EXPECT_EQ(q.add("charge", 3).status, AddStatus::full) << "a new job still finds no room";
}

TEST_F(PeerSemantics, ADuplicateAddToAFullQueueUnderTheDeadLetterPolicyFilesNoEntry) {
  auto q = engine.declare_queue<int>("charges",
                                     QueueOptions{.capacity = 1, .on_full = OnFull::dead_letter});
  const JobId kept = q.add("charge", 1, with_dedup("order-1", 5min)).id;
  const AddReceipt dup = q.add("charge", 2, with_dedup("order-1", 5min));
  EXPECT_EQ(dup.status, AddStatus::duplicate);
  EXPECT_EQ(dup.id, kept);
  EXPECT_EQ(q.dlq().size(), 0u) << "a duplicate is not an overflow";
  EXPECT_EQ(q.add("charge", 3).status, AddStatus::dead_lettered) << "a new job overflows";
}

TEST_F(PeerSemantics, ADebounceOnAFullQueueStillReplacesTheDelayedJob) {
  auto q = engine.declare_queue<int>("digests", QueueOptions{.capacity = 1});
  const JobId kept = q.add("digest", 1, with_dedup("user-7", 5min, DedupMode::debounce, 1min)).id;
  clock.advance(30s);
  const AddReceipt dup = q.add("digest", 2, with_dedup("user-7", 5min, DedupMode::debounce, 1min));
  EXPECT_EQ(dup.status, AddStatus::debounced);
  EXPECT_EQ(dup.id, kept);
  int seen = 0;
  q.process({}, [&](Job<int>& j) { seen = j.data(); });
  replay();
  EXPECT_EQ(seen, 2) << "the last payload runs";
}

// --- job names ------------------------------------------------------------------------------

TEST_F(PeerSemantics, AnEmptyOrBlankJobNameIsAnErrorThatNamesTheProblem) {
  auto q = engine.declare_queue<int>("orders", QueueOptions{});
  for (const char* name : {"", " ", "\t\n"}) {
    try {
      (void)q.add(name, 1);
      ADD_FAILURE() << "add('" << name << "') was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_option);
      EXPECT_NE(std::string(e.what()).find("job name"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("orders"), std::string::npos) << e.what();
    }
  }
  std::vector<int> items{1, 2};
  EXPECT_THROW((void)q.add_bulk(" ", std::span<int>(items)), Error);
  EXPECT_EQ(q.counts().added, 0u);
  EXPECT_EQ(q.add(" charge-card", 1).status, AddStatus::added) << "surrounding blanks are allowed";
}

// --- pause ----------------------------------------------------------------------------------

TEST_F(PeerSemantics, APausedQueueStartsNothingEvenWithinTheRunThatPausedIt) {
  // A handler pauses its own queue; the retry it returns and the job behind it are ready at once,
  // yet run_until_idle() starts neither until resume() (BullMQ: a paused queue starts no job).
  auto q = engine.declare_queue<int>("q", QueueOptions{});
  std::vector<int> started;
  q.process({}, [&](Job<int>& j) {
    started.push_back(j.data());
    if (j.data() == 1 && j.attempt() == 1) {
      q.pause();
      return Outcome::retry("paused mid-run");  // no backoff: ready again at once
    }
    return Outcome::done();
  });
  (void)q.add("a", 1, JobOptions{.max_attempts = 2});
  (void)q.add("b", 2);
  engine.run_until_idle();
  EXPECT_EQ(started, std::vector<int>{1});
  EXPECT_EQ(q.counts().waiting, 2u);
  q.resume();
  engine.run_until_idle();
  EXPECT_EQ(started, (std::vector<int>{1, 2, 1}));
  EXPECT_EQ(q.counts().completed, 2u);
}

// --- leases ---------------------------------------------------------------------------------

/// debounced_report(i): options of report i, debounced for an hour (built by append: GCC 12's
/// -Wrestrict misfires on "r" + std::to_string(i)).
JobOptions debounced_report(std::size_t i) {
  std::string id = "r";
  id += std::to_string(i);
  return with_dedup(std::move(id), 1h, DedupMode::debounce, 1h);
}

TEST(PeerDelays, PromoteAndChangeDelayRaceCancelAndDebounceSafely) {
  // Threaded: promote/change_delay take the wheel from the timer thread while other threads
  // cancel and debounce the same delayed jobs. Every job ends exactly once.
  for (int round = 0; round < 20; ++round) {
    ManualClock clock;
    std::atomic<int> ran{0};
    Engine engine{EngineOptions{.clock = &clock, .mode = Mode::threaded}};
    auto q = engine.declare_queue<int>("reports", QueueOptions{});
    q.process({.concurrency = 2}, [&](Job<int>&) { ran.fetch_add(1); });
    std::vector<JobId> ids;
    for (int i = 0; i < 64; ++i)
      ids.push_back(q.add("report", i, debounced_report(i)).id);
    std::atomic<int> cancelled{0};
    std::thread promoter([&] {
      for (std::size_t i = 0; i < ids.size(); ++i)
        (void)(i % 2 ? q.promote(ids[i]) : q.change_delay(ids[i], 1ms));
    });
    std::thread canceller([&] {
      for (std::size_t i = 0; i < ids.size(); i += 3)
        if (q.cancel(ids[i])) cancelled.fetch_add(1);
    });
    std::thread debouncer([&] {
      for (std::size_t i = 0; i < ids.size(); i += 5)
        (void)q.add("report", 100, debounced_report(i));
    });
    promoter.join();
    canceller.join();
    debouncer.join();
    clock.advance(2h);  // whatever a debounce pushed back comes due too
    ASSERT_TRUE(test::eventually([&] {
      const QueueCounts c = q.counts();
      // Adds count too: a debounce of a job cancelled first creates a new job (its id was free).
      return c.completed + c.cancelled == c.added && c.active == 0;
    })) << "round "
        << round << ": completed " << q.counts().completed << ", cancelled " << q.counts().cancelled
        << ", waiting " << q.counts().waiting << ", delayed " << q.counts().delayed << ", active "
        << q.counts().active;
    EXPECT_EQ(q.counts().cancelled, static_cast<std::uint64_t>(cancelled.load()));
    // A cancel that lands on a running job flags it: its handler ran, and it ends cancelled.
    const QueueCounts c = q.counts();
    EXPECT_GE(static_cast<std::uint64_t>(ran.load()), c.completed);
    EXPECT_LE(static_cast<std::uint64_t>(ran.load()), c.completed + c.cancelled);
    engine.shutdown(1s);
  }
}

TEST(PeerLeases, AShortenedLeaseRedeliversAtItsNewDeadlineInThreadedMode) {
  // SQS ChangeMessageVisibility to a shorter timeout: the job is delivered again once the new,
  // earlier deadline passes — not when the queue's hour-long visibility timeout would have.
  ManualClock clock;
  std::atomic<int> deliveries{0};
  std::atomic<bool> shortened{false};
  std::atomic<bool> give_up{false};  // a failing run must still end: the handler stops waiting
  Engine engine{EngineOptions{.clock = &clock, .mode = Mode::threaded}};
  auto q = engine.declare_queue<int>("calls", QueueOptions{.visibility_timeout = 1h});
  q.process({.concurrency = 2}, [&](Job<int>& job) {
    if (deliveries.fetch_add(1) == 0) {
      EXPECT_TRUE(job.extend_lease(10ms));
      shortened = true;
      while (!job.cancelled() && !give_up)  // until the lease lapses: the job goes elsewhere
        std::this_thread::yield();
      return Outcome::retry("overran its shortened lease");
    }
    return Outcome::done();
  });
  (void)q.add("call", 1, JobOptions{.max_attempts = 3});
  if (!test::eventually([&] { return shortened.load(); })) {
    give_up = true;
    FAIL() << "the handler never ran";
  }
  clock.advance(20ms);  // past the new deadline, far before the old one
  const bool lapsed = test::eventually([&] { return q.counts().completed == 1; });
  give_up = true;
  ASSERT_TRUE(lapsed) << "the shortened lease did not lapse: deliveries " << deliveries.load();
  EXPECT_EQ(deliveries.load(), 2);
  EXPECT_EQ(q.counts().stalled, 1u);
  engine.shutdown(1s);
}

// --- stalls have their own budget (BullMQ) or count as receives (SQS) -------------------------

/// overrun(): a handler that outlives its 2 s lease (the clock moves from inside it, as the lease
/// sweep would find it on a timer thread) and then claims success, which comes too late.
Outcome overrun(ManualClock& clock) {
  clock.advance(3s);
  return Outcome::done();
}

/// expect_lapsed(entry, attempts, deliveries, stalls, errors): a DLQ entry of a job whose leases
/// lapsed, with these counts.
template <class T>
void expect_lapsed(const std::optional<DeadLetter<T>>& e, std::uint32_t attempts,
                   std::uint32_t deliveries, std::uint32_t stalls, std::size_t errors) {
  ASSERT_TRUE(e) << "no DLQ entry";
  EXPECT_EQ(e->reason, DeadLetterReason::lease_expired);
  EXPECT_EQ(e->failed_attempts, attempts);
  EXPECT_EQ(e->deliveries, deliveries);
  EXPECT_EQ(e->stalls, stalls);
  EXPECT_EQ(e->errors.size(), errors);
}

TEST_F(PeerSemantics, AStallCostsNoAttemptAndTheOnePastTheBudgetDeadLettersAsAnAttemptMade) {
  // BullMQ: a stalled job goes back to waiting (attemptsMade unchanged) up to maxStalledCount
  // times (default 1); the next stall fails it, and that failure is an attempt made.
  auto q = engine.declare_queue<std::string>("orders", QueueOptions{.visibility_timeout = 2s});
  q.process({}, [&](Job<std::string>&) { return overrun(clock); });
  const JobId id = q.add("charge", "order-3").id;  // attempts 1
  engine.run_until_idle();
  EXPECT_EQ(count(EventKind::started), 2u) << "one stall within the budget, one past it";
  EXPECT_EQ(count(EventKind::stalled), 2u);
  EXPECT_EQ(count(EventKind::attempt_failed), 1u)
      << "a stall within the budget is not a failed attempt; the one past it is";
  EXPECT_EQ(first(EventKind::attempt_failed).attempt, 1u);
  EXPECT_EQ(first(EventKind::attempt_failed).delay, Duration{-1}) << "no retry follows";
  ASSERT_EQ(count(EventKind::dead_lettered), 1u);
  auto e = q.dlq().get(id);
  expect_lapsed(e, 1, 2, 2, 1);
  ASSERT_TRUE(e && e->errors.size() == 1);
  EXPECT_EQ(e->errors[0].attempt, 1u) << "logged under the attempt the stall ended";
  EXPECT_EQ(q.counts().failed_attempts, 1u);
  EXPECT_NE(e->errors[0].message.find("stalled 2 times (max_stalls 1)"), std::string::npos)
      << e->errors[0].message;
}

TEST_F(PeerSemantics, AStalledJobThatSucceedsNextTimeUsedNoAttempt) {
  auto q = engine.declare_queue<int>("orders", QueueOptions{.visibility_timeout = 2s});
  std::vector<std::uint32_t> seen;  // failed_attempts, stalls, deliveries of the second delivery
  q.process({}, [&](Job<int>& j) {
    if (j.deliveries() == 1) return overrun(clock);
    seen = {j.failed_attempts(), j.stalls(), j.deliveries(), j.attempt()};
    return Outcome::done();
  });
  const JobId id = q.add("charge", 1).id;
  engine.run_until_idle();
  EXPECT_EQ(seen, (std::vector<std::uint32_t>{0, 1, 2, 1}));
  EXPECT_EQ(q.state(id).status, JobStatus::completed);
}

TEST_F(PeerSemantics, TheStallBudgetIsConfigurable) {
  auto q =
      engine.declare_queue<int>("orders", QueueOptions{.visibility_timeout = 2s, .max_stalls = 3});
  q.process({}, [&](Job<int>&) { return overrun(clock); });
  const JobId id = q.add("charge", 1).id;
  engine.run_until_idle();
  expect_lapsed(q.dlq().get(id), 1, 4, 4, 1);
}

TEST_F(PeerSemantics, AJobRedrivenAfterItRanOutOfStallsCompletesAsItsSecondAttempt) {
  // BullMQ: attemptsMade is 1 when the stall fails the job, and 2 when it completes after
  // job.retry() (the counters kept).
  auto q =
      engine.declare_queue<int>("orders", QueueOptions{.visibility_timeout = 2s, .max_stalls = 0});
  bool stall = true;
  std::uint32_t attempt_seen = 0;
  q.process({}, [&](Job<int>& j) {
    if (stall) return overrun(clock);
    attempt_seen = j.attempt();
    return Outcome::done();
  });
  const JobId id = q.add("charge", 1).id;
  engine.run_until_idle();
  expect_lapsed(q.dlq().get(id), 1, 1, 1, 1);
  stall = false;
  ASSERT_EQ(q.dlq().redrive(id, RedriveOptions{.reset_counters = false}), RedriveStatus::redriven);
  engine.run_until_idle();
  EXPECT_EQ(attempt_seen, 2u);
  EXPECT_EQ(q.state(id).status, JobStatus::completed);
  ASSERT_EQ(count(EventKind::completed), 1u);
  EXPECT_EQ(first(EventKind::completed).attempt, 2u);
}

TEST_F(PeerSemantics, UnderTheSqsPolicyEveryDeliveryCountsAgainstAttempts) {
  // SQS maxReceiveCount: a message not deleted within its visibility timeout is received again,
  // and the receive that reaches the count moves it to the DLQ.
  auto q = engine.declare_queue<int>(
      "orders",
      QueueOptions{.visibility_timeout = 2s, .stall_policy = StallPolicy::count_as_attempt});
  q.process({}, [&](Job<int>&) { return overrun(clock); });
  const JobId id = q.add("charge", 1, JobOptions{.max_attempts = 2}).id;
  engine.run_until_idle();
  EXPECT_EQ(count(EventKind::attempt_failed), 2u) << "each lapse is a failed attempt";
  expect_lapsed(q.dlq().get(id), 2, 2, 2, 2);
}

TEST_F(PeerSemantics, MaxStallsOutOfRangeIsAnErrorThatNamesIt) {
  try {
    (void)engine.declare_queue<int>("orders", QueueOptions{.max_stalls = 70'000});
    FAIL() << "max_stalls 70000 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find("max_stalls"), std::string::npos) << e.what();
  }
}

// --- redrive keeps the job -------------------------------------------------------------------

TEST_F(PeerSemantics, ARedrivenJobKeepsItsOwnBackoffVisibilityAndDedupId) {
  auto q = engine.declare_queue<std::string>("orders", QueueOptions{});
  bool failing = true;
  q.process({}, [&](Job<std::string>&) {
    return failing ? Outcome::retry("card declined") : Outcome::done();
  });
  JobOptions o{.max_attempts = 2, .backoff = Backoff::fixed(5s)};
  o.visibility_timeout = 1min;
  o.dedup.id = "order-3";
  const JobId id = q.add("charge", "order-3", o).id;
  replay();
  auto e = q.dlq().get(id);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->backoff.kind, BackoffKind::fixed);
  EXPECT_EQ(e->backoff.delay, 5s);
  EXPECT_EQ(e->visibility_timeout, std::optional<Duration>(1min));
  EXPECT_EQ(e->dedup_id, "order-3");

  events.clear();
  ASSERT_EQ(q.dlq().redrive(id), RedriveStatus::redriven);
  const AddReceipt dup = q.add("charge", "order-3 again", with_dedup("order-3", std::nullopt));
  EXPECT_EQ(dup.status, AddStatus::duplicate) << "the redriven job holds its dedup id again";
  EXPECT_EQ(dup.id, id);
  engine.run_until_idle();  // its first attempt fails
  ASSERT_EQ(count(EventKind::attempt_failed), 1u);
  EXPECT_EQ(first(EventKind::attempt_failed).delay, 5s) << "its own backoff, not the queue's";
  EXPECT_EQ(q.state(id).status, JobStatus::delayed);
  EXPECT_TRUE(q.cancel(id)) << "cancel by id reaches the redriven job";
  EXPECT_EQ(q.state(id).status, JobStatus::cancelled);
  EXPECT_EQ(q.add("charge", "order-3", with_dedup("order-3", std::nullopt)).status,
            AddStatus::added)
      << "cancelling the redriven job released its id";
}

TEST_F(PeerSemantics, ARedrivenJobThatKeptItsTtlClaimCanStillBeDebounced) {
  // Review: the kept claim still pointed at the first life's slot, so a debounce of the
  // redriven job merged as a plain duplicate.
  auto q = engine.declare_queue<int>("digests", QueueOptions{});
  std::vector<int> ran;
  q.process({}, [&](Job<int>& j) {
    ran.push_back(j.data());
    return Outcome::retry("mail server down");
  });
  JobOptions o = with_dedup("user-7", 1h);
  o.max_attempts = 2;
  o.backoff = Backoff::fixed(1min);
  const JobId id = q.add("digest", 1, o).id;
  replay();
  ASSERT_EQ(q.dlq().size(), 1u);
  ASSERT_EQ(q.dlq().redrive(id), RedriveStatus::redriven);
  engine.run_until_idle();  // its first attempt fails: delayed by its backoff
  ASSERT_EQ(q.state(id).status, JobStatus::delayed);
  const AddReceipt again = q.add("digest", 2, with_dedup("user-7", 1h, DedupMode::debounce, 10s));
  EXPECT_EQ(again.status, AddStatus::debounced);
  EXPECT_EQ(again.id, id);
}

TEST_F(PeerSemantics, ARedriveResetsTheCountersUnlessAskedToKeepThem) {
  auto q = engine.declare_queue<int>("orders", QueueOptions{});
  std::vector<std::uint32_t> attempt_numbers;
  q.process({}, [&](Job<int>& j) {
    attempt_numbers.push_back(j.attempt());
    return Outcome::retry("card declined " + std::to_string(j.attempt()));
  });
  const JobId id = q.add("charge", 1, JobOptions{.max_attempts = 2}).id;
  replay();
  ASSERT_EQ(q.dlq().redrive(id, RedriveOptions{.reset_counters = false}), RedriveStatus::redriven);
  replay();
  auto kept = q.dlq().get(id);
  ASSERT_TRUE(kept);
  EXPECT_EQ(attempt_numbers, (std::vector<std::uint32_t>{1, 2, 3}))
      << "one more delivery, numbered on from the first life";
  EXPECT_EQ(kept->failed_attempts, 3u);
  EXPECT_EQ(kept->deliveries, 3u);
  ASSERT_EQ(kept->errors.size(), 3u) << "every error of both lives";
  EXPECT_EQ(kept->errors[0].message, "card declined 1");
  EXPECT_EQ(kept->errors[2].message, "card declined 3");

  ASSERT_EQ(q.dlq().redrive(id), RedriveStatus::redriven);  // the default: SQS, counters reset
  replay();
  auto reset = q.dlq().get(id);
  ASSERT_TRUE(reset);
  EXPECT_EQ(attempt_numbers, (std::vector<std::uint32_t>{1, 2, 3, 1, 2}));
  EXPECT_EQ(reset->failed_attempts, 2u);
  EXPECT_EQ(reset->errors.size(), 2u);
}

// --- a handler drops its job, or fails it for good from deep code ---------------------------

TEST_F(PeerSemantics, ADiscardedJobEndsWithoutARetryOrADlqEntry) {
  auto q = engine.declare_queue<std::string>("refunds", QueueOptions{});
  std::string reason;
  engine.on_event([&](const Event& e) {
    if (e.kind == EventKind::discarded) reason = e.error;
  });
  q.process({}, [](Job<std::string>&) { return Outcome::discard("order refunded meanwhile"); });
  const JobId id = q.add("charge", "order-9", JobOptions{.max_attempts = 3}).id;
  replay();
  EXPECT_EQ(q.state(id).status, JobStatus::discarded);
  EXPECT_EQ(count(EventKind::started), 1u) << "no retry";
  EXPECT_EQ(count(EventKind::attempt_failed), 0u);
  ASSERT_EQ(count(EventKind::discarded), 1u);
  EXPECT_EQ(first(EventKind::discarded).attempt, 1u);
  EXPECT_EQ(reason, "order refunded meanwhile");
  EXPECT_EQ(q.dlq().size(), 0u);
  const QueueCounts c = q.counts();
  EXPECT_EQ(c.discarded, 1u);
  EXPECT_EQ(c.completed + c.dead_lettered + c.cancelled, 0u);
  EXPECT_EQ(c.active + c.waiting + c.delayed, 0u);
}

TEST_F(PeerSemantics, ADiscardedJobsDedupIdIsReleasedAsACompletedJobsIs) {
  auto q = engine.declare_queue<int>("refunds", QueueOptions{});
  q.process({}, [](Job<int>&) { return Outcome::discard("stale"); });
  (void)q.add("charge", 1, with_dedup("order-9", std::nullopt));
  replay();
  EXPECT_EQ(q.add("charge", 2, with_dedup("order-9", std::nullopt)).status, AddStatus::added);
}

void charge_card_deep_inside_a_client_library() {
  throw UnrecoverableError("card reported stolen");
}

struct PeerSemanticsFailForGood : PeerSemantics {
  /// expect_failed_for_good(handler, error): a job of 5 attempts whose handler throws as
  /// `handler` does starts once and is dead-lettered as a permanent failure reading `error`.
  template <class Handler>
  void expect_failed_for_good(Handler handler, const std::string& error) {
    auto q = engine.declare_queue<int>("charges", QueueOptions{});
    q.process({}, [&](Job<int>&) -> Outcome {
      handler();
      return Outcome::done();
    });
    const JobId id = q.add("charge", 1, JobOptions{.max_attempts = 5}).id;
    replay();
    EXPECT_EQ(count(EventKind::started), 1u) << "the remaining attempts are skipped";
    auto e = q.dlq().get(id);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->reason, DeadLetterReason::permanent_failure);
    EXPECT_EQ(e->last_error(), error);
  }
};

TEST_F(PeerSemanticsFailForGood, AnUnrecoverableErrorThrownDeepInAHandlerFailsTheJobForGood) {
  expect_failed_for_good(charge_card_deep_inside_a_client_library, "card reported stolen");
}

TEST_F(PeerSemanticsFailForGood,
       AnUnrecoverableErrorWrappedWithThrowWithNestedStillFailsTheJobForGood) {
  // asynq: an error that wraps SkipRetry (errors.Is) is archived at once.
  expect_failed_for_good(
      [] {
        try {
          charge_card_deep_inside_a_client_library();
        } catch (...) {
          try {
            std::throw_with_nested(std::runtime_error("charging order 42"));
          } catch (...) {
            std::throw_with_nested(std::runtime_error("checkout"));
          }
        }
      },
      "checkout: charging order 42: card reported stolen");
}

TEST_F(PeerSemantics, ANestedRetryableErrorIsRetriedAndItsErrorReadsTheWholeChain) {
  auto q = engine.declare_queue<int>("charges", QueueOptions{});
  q.process({}, [](Job<int>& j) -> Outcome {
    if (j.attempt() == 2) return Outcome::done();
    try {
      throw std::runtime_error("gateway timeout");
    } catch (...) {
      std::throw_with_nested(UnrecoverableError("never reached"));  // the wrapper decides too
    }
  });
  const JobId unrecoverable_wrapper = q.add("charge", 1, JobOptions{.max_attempts = 2}).id;
  replay();
  auto e = q.dlq().get(unrecoverable_wrapper);
  ASSERT_TRUE(e) << "an UnrecoverableError wrapping a retryable error fails the job too";
  EXPECT_EQ(e->last_error(), "never reached: gateway timeout");

  auto retried = engine.declare_queue<int>("refunds", QueueOptions{});
  std::vector<std::string> errors;
  engine.on_event([&](const Event& ev) {
    if (ev.kind == EventKind::attempt_failed) errors.emplace_back(ev.error);
  });
  retried.process({}, [](Job<int>& j) -> Outcome {
    if (j.attempt() == 2) return Outcome::done();
    try {
      throw std::invalid_argument("bad currency");
    } catch (...) {
      std::throw_with_nested(std::runtime_error("refund 7"));
    }
  });
  const JobId id = retried.add("refund", 1, JobOptions{.max_attempts = 2}).id;
  replay();
  EXPECT_EQ(retried.state(id).status, JobStatus::completed);
  EXPECT_EQ(errors, std::vector<std::string>{"refund 7: bad currency"});
}

TEST_F(PeerSemantics, RetainedEndsAndTheDlqAgeOutAtTheSameBoundary) {
  // BullMQ removeOnComplete {age: 7}: a finished job is kept while younger than 7 s. One job
  // completes and one dead-letters each second, for 11 s: 7 of each are kept.
  QueueOptions qo;
  qo.keep_ended = {.keep_completed = 100, .keep_failed = 100, .max_age = 7s};
  qo.dlq.retention = 7s;
  auto q = engine.declare_queue<int, int>("ages", qo);
  q.process({}, [](Job<int>& j) -> Result<int> {
    if (j.data() < 0) return Outcome::fail("negative");
    return j.data();
  });
  std::vector<JobId> completed;
  for (int second = 0; second <= 10; ++second) {
    if (second > 0) clock.advance(1s);
    completed.push_back(q.add("ok", second + 1).id);
    (void)q.add("bad", -(second + 1));
    engine.run_until_idle();
  }
  const auto kept = std::count_if(completed.begin(), completed.end(),
                                  [&](JobId id) { return q.end_of(id).has_value(); });
  EXPECT_EQ(kept, 7) << "retained ends: ended at 4..10 s";
  EXPECT_EQ(q.dlq().size(), 7u) << "DLQ entries: dead at 4..10 s";
  EXPECT_TRUE(q.end_of(completed[4]).has_value()) << "6 s old at 10 s";
  EXPECT_FALSE(q.end_of(completed[3]).has_value()) << "7 s old at 10 s";
}

TEST_F(PeerSemantics, AnyOtherExceptionIsStillARetryableFailure) {
  auto q = engine.declare_queue<int>("charges", QueueOptions{});
  q.process({}, [](Job<int>& j) {
    if (j.attempt() == 1) throw std::runtime_error("gateway timeout");
    return Outcome::done();
  });
  const JobId id = q.add("charge", 1, JobOptions{.max_attempts = 2}).id;
  replay();
  EXPECT_EQ(q.state(id).status, JobStatus::completed);
}

// --- more dedup modes ------------------------------------------------------------------------

TEST_F(PeerSemantics, ExtendRestartsTheWindowOnEachDuplicate) {
  // BullMQ deduplication {ttl, extend: true}: a steady stream of duplicates keeps merging.
  auto q = engine.declare_queue<int>("syncs", QueueOptions{});
  q.process({}, [](Job<int>&) {});
  JobOptions o = with_dedup("user-7", 10min);
  o.dedup.extend = true;
  const JobId first = q.add("sync", 1, o).id;
  engine.run_until_idle();
  clock.advance(9min);
  EXPECT_EQ(q.add("sync", 2, o).status, AddStatus::duplicate);  // the window now ends at 19 min
  clock.advance(9min);
  const AddReceipt at_18 = q.add("sync", 3, o);
  EXPECT_EQ(at_18.status, AddStatus::duplicate) << "without extend the window ended at 10 min";
  EXPECT_EQ(at_18.id, first);
  clock.advance(10min);
  EXPECT_EQ(q.add("sync", 4, o).status, AddStatus::added) << "10 min after the last duplicate";
}

TEST_F(PeerSemantics, WithoutExtendTheWindowRunsFromTheFirstAdd) {
  auto q = engine.declare_queue<int>("syncs", QueueOptions{});
  q.process({}, [](Job<int>&) {});
  const JobOptions o = with_dedup("user-7", 10min);
  (void)q.add("sync", 1, o);
  engine.run_until_idle();
  clock.advance(9min);
  EXPECT_EQ(q.add("sync", 2, o).status, AddStatus::duplicate);
  clock.advance(1min);
  EXPECT_EQ(q.add("sync", 3, o).status, AddStatus::added);
}

TEST_F(PeerSemantics, ReplaceSwapsTheDelayedPayloadAndKeepsItsDueTime) {
  auto q = engine.declare_queue<int>("digests", QueueOptions{});
  std::vector<int> ran;
  q.process({}, [&](Job<int>& j) { ran.push_back(j.data()); });
  const JobOptions o = with_dedup("user-7", std::nullopt, DedupMode::replace, 1min);
  const JobId kept = q.add("digest", 1, o).id;
  clock.advance(40s);
  const AddReceipt second = q.add("digest", 2, o);
  EXPECT_EQ(second.status, AddStatus::debounced);
  EXPECT_EQ(second.id, kept);
  EXPECT_EQ(q.state(kept).since, TimePoint{1min}) << "due when the first add said";
  clock.advance(20s);
  engine.run_until_idle();
  EXPECT_EQ(ran, std::vector<int>{2}) << "the newest payload ran once, at the first due time";
}

TEST_F(PeerSemantics, AWindowFromTheDueTimeCoversADelayedJobsDelayAsAsynqsUniqueDoes) {
  // asynq: Unique(1s) with ProcessIn(10s) holds the key until 11 s; rail's default (and
  // BullMQ's) window runs from the add: it has lapsed by 5 s.
  auto q = engine.declare_queue<int>("syncs", QueueOptions{});
  q.process({}, [](Job<int>&) {});
  JobOptions o = with_dedup("user-7", 1s, DedupMode::merge, 10s);
  o.dedup.ttl_from_due = true;
  const JobId first = q.add("sync", 1, o).id;
  JobOptions plain = with_dedup("user-8", 1s, DedupMode::merge, 10s);
  (void)q.add("sync", 1, plain);
  clock.advance(5s);
  engine.run_until_idle();
  EXPECT_EQ(q.add("sync", 2, o).status, AddStatus::duplicate) << "within the delay";
  EXPECT_EQ(q.add("sync", 2, plain).status, AddStatus::added) << "the add's window lapsed";
  clock.advance(5s + 500ms);  // t = 10.5 s: the first job ran at 10 s
  engine.run_until_idle();
  EXPECT_EQ(q.state(first).status, JobStatus::completed);
  const AddReceipt within = q.add("sync", 3, o);
  EXPECT_EQ(within.status, AddStatus::duplicate) << "the window lasts until 11 s";
  EXPECT_EQ(within.id, first);
  clock.advance(500ms);  // t = 11 s
  EXPECT_EQ(q.add("sync", 4, o).status, AddStatus::added);
}

/// expect_refused_without_ttl(engine, set, field): an add whose dedup options `set` turns on
/// without a ttl is refused with Error(invalid_option) naming `field`.
void expect_refused_without_ttl(Engine& engine, void (*set)(DedupOptions&), const char* field) {
  auto q = engine.declare_queue<int>("syncs", QueueOptions{});
  JobOptions o = with_dedup("user-7", std::nullopt);
  set(o.dedup);
  try {
    (void)q.add("sync", 1, o);
    ADD_FAILURE() << field << " without a ttl was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

TEST_F(PeerSemantics, TtlFromDueWithoutATtlIsAnErrorThatNamesIt) {
  expect_refused_without_ttl(
      engine, [](DedupOptions& d) { d.ttl_from_due = true; }, "ttl_from_due");
}

TEST_F(PeerSemantics, ExtendWithoutATtlIsAnErrorThatNamesIt) {
  expect_refused_without_ttl(
      engine, [](DedupOptions& d) { d.extend = true; }, "extend");
}

TEST_F(PeerSemantics, KeepLastIfActiveRunsTheNewestDuplicateOnceMoreAfterTheRunningJob) {
  // BullMQ keepLastIfActive: duplicates while the job runs are not lost; the last one runs next.
  auto q = engine.declare_queue<int>("syncs", QueueOptions{});
  JobOptions o = with_dedup("user-7", std::nullopt);
  o.dedup.keep_last_if_active = true;
  std::vector<int> ran;
  std::vector<AddStatus> while_running;
  JobId first = 0;
  q.process({}, [&](Job<int>& j) {
    ran.push_back(j.data());
    if (j.data() == 1) {
      for (int v : {2, 3}) {
        const AddReceipt r = q.add("sync", v, o);
        while_running.push_back(r.status);
        EXPECT_EQ(r.id, first);
      }
    }
  });
  first = q.add("sync", 1, o).id;
  EXPECT_EQ(q.add("sync", 9, o).status, AddStatus::duplicate) << "waiting: merged as usual";
  replay();
  EXPECT_EQ(while_running, (std::vector<AddStatus>{AddStatus::kept, AddStatus::kept}));
  EXPECT_EQ(ran, (std::vector<int>{1, 3})) << "the newest kept add ran once, after the first";
  EXPECT_EQ(q.counts().added, 2u);
  EXPECT_EQ(q.counts().completed, 2u);
}

TEST_F(PeerSemantics, KeepLastIfActiveHoldsTheIdWhileTheJobRunsPastItsTtl) {
  // BullMQ: keepLastIfActive "prevents parallel execution even when ttl expires while the job
  // is active". A ttl of 200 ms; the job runs 400 ms.
  auto q = engine.declare_queue<int>("syncs", QueueOptions{});
  JobOptions o = with_dedup("user-7", 200ms);
  o.dedup.keep_last_if_active = true;
  std::vector<int> ran;
  AddStatus during = AddStatus::added, extended = AddStatus::added;
  q.process({}, [&](Job<int>& j) {
    ran.push_back(j.data());
    if (j.data() == 1) {
      // An add that extends the window (to 350 ms) while the job runs moves its expiry, not
      // the hold; then, past the extended window, still running:
      JobOptions extend = with_dedup("user-7", 200ms);
      extend.dedup.extend = true;
      clock.advance(150ms);
      extended = q.add("sync", 5, extend).status;
      clock.advance(250ms);
      during = q.add("sync", 2, o).status;
    } else if (j.data() == 10) {
      clock.advance(300ms);  // past the ttl, and nothing kept
    }
  });
  (void)q.add("sync", 1, o);
  replay();
  EXPECT_EQ(extended, AddStatus::duplicate);
  EXPECT_EQ(during, AddStatus::kept) << "kept for after the running job, not a second job";
  EXPECT_EQ(ran, (std::vector<int>{1, 2}));

  clock.advance(1s);
  JobOptions other = with_dedup("user-8", 200ms);
  other.dedup.keep_last_if_active = true;
  (void)q.add("sync", 10, other);
  replay();
  EXPECT_EQ(q.add("sync", 11, other).status, AddStatus::added)
      << "a run that outlived its ttl lets the id go when it ends";
}

TEST_F(PeerSemantics, AnAddKeptForAfterTheJobKeepsItsPlaceWhenALaterDuplicateExtendsTheWindow) {
  // Review: holding the id for the kept add dropped the job's watch, so a duplicate's extend set
  // an expiry again: once it lapsed, a third add made a job beside the running one, and the
  // kept add merged into it instead of running.
  for (const std::optional<Duration> ttl :
       std::vector<std::optional<Duration>>{std::optional<Duration>(200ms), std::nullopt}) {
    auto q = engine.declare_queue<int>(ttl ? "syncs-ttl" : "syncs", QueueOptions{});
    JobOptions keep = with_dedup("user-7", ttl);
    keep.dedup.keep_last_if_active = true;
    JobOptions extend = with_dedup("user-7", 200ms);
    extend.dedup.extend = true;
    std::vector<int> ran;
    std::vector<AddStatus> during;
    q.process({}, [&](Job<int>& j) {
      ran.push_back(j.data());
      if (j.data() != 1) return;
      during.push_back(q.add("sync", 2, keep).status);
      during.push_back(q.add("sync", 5, extend).status);
      clock.advance(300ms);  // past the extended window, with job 1 still running
      during.push_back(q.add("sync", 3, with_dedup("user-7", 200ms)).status);
    });
    ASSERT_EQ(q.add("sync", 1, keep).status, AddStatus::added);
    replay();
    EXPECT_EQ(during,
              (std::vector<AddStatus>{AddStatus::kept, AddStatus::duplicate, AddStatus::duplicate}))
        << (ttl ? "ttl" : "no ttl");
    EXPECT_EQ(ran, (std::vector<int>{1, 2})) << (ttl ? "ttl" : "no ttl");
  }
}

TEST_F(PeerSemantics, AKeptAddTakesOverAnIdTheEndedJobHeldForItsTtl) {
  auto q = engine.declare_queue<int>("syncs", QueueOptions{});
  JobOptions o = with_dedup("user-7", 1h);
  o.dedup.keep_last_if_active = true;
  std::vector<int> ran;
  q.process({}, [&](Job<int>& j) {
    ran.push_back(j.data());
    if (j.data() == 1) {
      EXPECT_EQ(q.add("sync", 2, o).status, AddStatus::kept);
    }
  });
  (void)q.add("sync", 1, o);
  replay();
  EXPECT_EQ(ran, (std::vector<int>{1, 2}));
  EXPECT_EQ(q.add("sync", 3, o).status, AddStatus::duplicate)
      << "the kept add's job holds the id for its own ttl now";
}

TEST_F(PeerSemantics, AKeptAddThatFindsNoRoomGoesToTheDlqNotNowhere) {
  auto q = engine.declare_queue<int>("syncs", QueueOptions{.capacity = 1});
  JobOptions o = with_dedup("user-7", std::nullopt);
  o.dedup.keep_last_if_active = true;
  q.process({}, [&](Job<int>& j) {
    if (j.data() == 1) {
      EXPECT_EQ(q.add("sync", 2, o).status, AddStatus::kept);
      // Fill the slot the running job will free before the kept add is made.
      EXPECT_EQ(q.add("other", 3).status, AddStatus::full);
    }
  });
  (void)q.add("sync", 1, o);
  replay();
  EXPECT_EQ(q.counts().completed + q.dlq().size(), 2u) << "the kept add ran or was filed";
}

// review-gate: the job that held its id for a kept add ends, and the slot it frees is taken
// before the kept add is made (here by an observer of its dead_lettered event, which the DLQ
// raises after the slot was freed; under load, by any producer). Under OnFull::dead_letter
// overflow() files the kept add and returns dead_lettered, which run_deferred takes for success:
// the id the ended job held for it is never let go, and without a ttl every later add of that id
// is a `duplicate` of a dead job, forever.
TEST_F(PeerSemantics, AKeptAddFiledByAFullDeadLetterQueueLetsTheIdGo) {
  auto q = engine.declare_queue<int>("syncs",
                                     QueueOptions{.capacity = 1, .on_full = OnFull::dead_letter});
  JobOptions o = with_dedup("user-7", std::nullopt);
  o.dedup.keep_last_if_active = true;
  JobId first = 0;
  engine.on_event([&](const Event& e) {
    if (e.kind == EventKind::dead_lettered && e.job_id == first) {
      EXPECT_EQ(q.add("other", 100).status, AddStatus::added) << "takes the freed slot";
    }
  });
  q.process({}, [&](Job<int>& j) {
    if (j.data() == 1) {
      EXPECT_EQ(q.add("sync", 2, o).status, AddStatus::kept);
      return Outcome::fail("boom");
    }
    return Outcome::done();
  });
  first = q.add("sync", 1, o).id;
  replay();
  EXPECT_EQ(q.dlq().size(), 2u) << "job 1 and its kept add (overflow)";
  const AddReceipt later = q.add("sync", 3, o);
  EXPECT_EQ(later.status, AddStatus::added) << "the id is still held by ended job " << later.id;
}

// review-gate: a ttl that lapsed while the kept job ran let a newer add make a job (3) that ran
// and ended before the kept job did; the older kept add (2) then ran after it. An add kept for
// a job holds that job's id past its ttl, until the kept add takes it over: 3 replaces 2.
TEST(PeerKeepLast, AKeptAddHoldsItsJobsIdPastTheTtlSoANewerAddReplacesItInsteadOfOvertakingIt) {
  test::Watchdog dog(std::chrono::seconds(60), "AKeptAddHoldsItsJobsIdPastTheTtl");
  ManualClock clock;
  Engine engine{EngineOptions{.clock = &clock, .mode = Mode::threaded}};
  auto q = engine.declare_queue<int>("syncs", QueueOptions{.visibility_timeout = Duration::max()});
  JobOptions o = with_dedup("user-7", std::chrono::duration_cast<Duration>(1min));
  o.dedup.keep_last_if_active = true;
  std::mutex mu;
  std::vector<int> ran;
  std::atomic<bool> one_started{false}, release_one{false};
  q.process({.concurrency = 2}, [&](Job<int>& j) {
    {
      std::lock_guard lock(mu);
      ran.push_back(j.data());
    }
    if (j.data() == 1) {
      one_started = true;
      while (!release_one)
        std::this_thread::yield();
    }
  });
  ASSERT_EQ(q.add("sync", 1, o).status, AddStatus::added);
  while (!one_started)
    std::this_thread::yield();
  ASSERT_EQ(q.add("sync", 2, o).status, AddStatus::kept);
  clock.advance(2min);  // 1's window would have lapsed while it runs
  EXPECT_EQ(q.add("sync", 3, o).status, AddStatus::kept) << "replaces 2: the newest wins";
  release_one = true;
  ASSERT_TRUE(q.wait_idle(10s));
  engine.shutdown(1s);
  std::lock_guard lock(mu);
  EXPECT_EQ(ran, (std::vector<int>{1, 3}));
}

// The jobs of one dedup id run one after another (the next is added only once the last ended),
// so their data must only grow: a kept add that ran after a newer one, or that overwrote a newer
// kept add (CI saw this: 133 accepted, 130 the last to run), breaks "the newest wins".
TEST(PeerKeepLast, TheNewestAddIsNeverLostWhileWorkersRunTheKeptJob) {
  for (int round = 0; round < 30; ++round) {
    std::mutex mu;
    std::vector<int> ran;
    ManualClock clock;
    Engine engine{EngineOptions{.clock = &clock, .mode = Mode::threaded}};
    auto q = engine.declare_queue<int>("syncs", QueueOptions{});
    q.process({.concurrency = 3}, [&](Job<int>& j) {
      std::lock_guard lock(mu);
      ran.push_back(j.data());
    });
    JobOptions o = with_dedup("user-7", std::nullopt);
    o.dedup.keep_last_if_active = true;
    int last_accepted = 0;
    for (int v = 1; v <= 300; ++v) {
      const AddReceipt r = q.add("sync", v, o);
      if (r.status == AddStatus::added || r.status == AddStatus::kept) last_accepted = v;
      if (v % 7 == 0) std::this_thread::yield();
    }
    ASSERT_TRUE(q.wait_idle(30s)) << "round " << round;
    const QueueCounts c = q.counts();
    EXPECT_EQ(c.completed, c.added) << "round " << round;
    engine.shutdown(1s);
    ASSERT_FALSE(ran.empty());
    EXPECT_EQ(ran.back(), last_accepted)
        << "round " << round << ": the newest add that was added or kept never ran last";
    EXPECT_EQ(std::adjacent_find(ran.begin(), ran.end(), std::greater_equal<>{}), ran.end())
        << "round " << round << ": a job ran with data older than a job that ran before it";
  }
}

// keep_last_if_active with a ttl that lapsed while the job waited: once state() reports the job
// active, a duplicate add is kept for after it, never made a second job beside it. The id must be
// held from the moment the job turns active: a hold taken a little later (after activation) left
// a gap in which such an add found the lapsed id and made a job that ran next to the first.
TEST(PeerKeepLast, AnAddMadeOnceItsJobIsActiveIsKeptThoughTheTtlLapsedWhileItWaited) {
#ifdef RAIL_SANITIZED
  constexpr int kRounds = 300;
#else
  constexpr int kRounds = 3'000;
#endif
  const test::Watchdog dog(std::chrono::seconds(240), "AnAddMadeOnceItsJobIsActiveIsKept...");
  ManualClock clock;
  Engine engine{EngineOptions{.clock = &clock, .mode = Mode::threaded}};
  // Few slots: state() scans them all, and the faster it answers, the nearer the add comes to
  // the activation.
  auto q = engine.declare_queue<int>(
      "syncs", QueueOptions{.capacity = 4, .visibility_timeout = Duration::max()});
  std::atomic<int> release{-1};
  q.process({}, [&](Job<int>& j) {
    if (j.data() % 2 == 0) return;  // the duplicates kept for after the first
    while (release.load() != j.data())
      std::this_thread::yield();
  });
  int added_beside = 0;
  for (int round = 0; round < kRounds; ++round) {
    JobOptions o = with_dedup("user-" + std::to_string(round), 1min);
    o.dedup.keep_last_if_active = true;
    const AddReceipt first = q.add("sync", 2 * round + 1, o);
    ASSERT_EQ(first.status, AddStatus::added) << "round " << round;
    clock.advance(2min);  // the window lapses while the job waits, or as it starts
    while (q.state(first.id).status != JobStatus::active) {
    }
    const AddReceipt dup = q.add("sync", 2 * round + 2, o);
    if (dup.status == AddStatus::added) ++added_beside;
    EXPECT_NE(dup.status, AddStatus::duplicate) << "round " << round;
    release.store(2 * round + 1);
    ASSERT_TRUE(q.wait_idle(30s)) << "round " << round;
  }
  EXPECT_EQ(added_beside, 0) << "of " << kRounds << " adds made while their id's job was active";
  engine.shutdown(1s);
}

// review6: a job waiting out a retry's backoff is kept-for and then left over at shutdown.
TEST_F(PeerSemantics, AKeptAddIsNotLostWhenItsJobIsLeftOverAtShutdown) {
  auto q = engine.declare_queue<int>("syncs", QueueOptions{});
  JobOptions o = with_dedup("user-7", std::nullopt);
  o.dedup.keep_last_if_active = true;
  o.max_attempts = 2;
  o.backoff = Backoff::fixed(1h);
  q.process({}, [&](Job<int>& j) {
    if (j.data() == 1) {
      EXPECT_EQ(q.add("sync", 2, o).status, AddStatus::kept);
      return Outcome::retry("later");  // the kept job goes back to delayed: it has not ended
    }
    return Outcome{};
  });
  (void)q.add("sync", 1, o);
  engine.run_until_idle();
  ASSERT_EQ(q.counts().delayed, 1u);
  const ShutdownReport report = engine.shutdown(0s);
  ASSERT_EQ(report.not_started.size(), 2u) << "the delayed job and the kept add";
  EXPECT_EQ(report.not_started[1].id, 0u) << "a kept add has no job id yet";
  // Both adds were accepted (added, deferred): the kept one is handed back with its payload,
  // not dropped with the queue's map of deferred adds.
  const auto left = q.take_leftovers();
  ASSERT_EQ(left.size(), 2u) << "the kept add (data 2) vanished at shutdown";
  EXPECT_EQ(left[0].data, 1);
  EXPECT_EQ(left[1].data, 2);
  EXPECT_EQ(left[1].id, 0u);
  EXPECT_EQ(q.dlq().size(), 0u);
}

// review6: promote() of a job between leave_finishing(delayed) and its timer-inbox push (a
// retry's backoff) found the slot delayed but its index not yet on the wheel:
// RAIL_INVARIANT(held) in TimerPort::retime aborts. Filler jobs at lower slot indexes lengthen
// the retime's scan between its drain() and its read of the target's word.
TEST(PeerRetime, PromoteOfAJobOnItsWayToTheTimerDoesNotAbort) {
  test::Watchdog dog(std::chrono::seconds(120), "PromoteOfAJobOnItsWayToTheTimerDoesNotAbort");
  ManualClock clock;
  Engine engine{EngineOptions{.clock = &clock, .mode = Mode::threaded}};
  auto q = engine.declare_queue<int>("retries", QueueOptions{.capacity = 4096});
  for (int i = 0; i < 3000; ++i)
    (void)q.add("filler", -1, JobOptions{.delay = 1000h});
  std::atomic<int> runs{0};
  q.process({.concurrency = 1}, [&](Job<int>& j) {
    if (j.data() < 0) return Outcome{};
    return runs.fetch_add(1) + 1 < 2000 ? Outcome::retry("again") : Outcome{};
  });
  const JobId id =
      q.add("retry", 1, JobOptions{.max_attempts = 5000, .backoff = Backoff::fixed(1h)}).id;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (q.state(id).status != JobStatus::completed && std::chrono::steady_clock::now() < deadline)
    (void)q.promote(id);
  EXPECT_EQ(q.state(id).status, JobStatus::completed);
  engine.shutdown(1s);
}

// --- delayed-job control and listing ---------------------------------------------------------

TEST_F(PeerSemantics, PromoteRunsADelayedJobNow) {
  auto q = engine.declare_queue<int>("reports", QueueOptions{});
  std::vector<int> ran;
  q.process({}, [&](Job<int>& j) { ran.push_back(j.data()); });
  const JobId id = q.add("report", 1, JobOptions{.delay = 1h}).id;
  (void)q.add("report", 2, JobOptions{.delay = 1h});
  ASSERT_TRUE(q.promote(id));
  EXPECT_EQ(q.state(id).status, JobStatus::waiting);
  engine.run_until_idle();
  EXPECT_EQ(ran, std::vector<int>{1}) << "only the promoted job runs before its hour";
  EXPECT_FALSE(q.promote(id)) << "no longer delayed";
  EXPECT_FALSE(q.promote(9999)) << "unknown";
}

TEST_F(PeerSemantics, PromoteCutsARetrysBackoffShort) {
  auto q = engine.declare_queue<int>("charges", QueueOptions{});
  int runs = 0;
  q.process({}, [&](Job<int>&) { return ++runs == 1 ? Outcome::retry("declined") : Outcome{}; });
  const JobId id =
      q.add("charge", 1, JobOptions{.max_attempts = 2, .backoff = Backoff::fixed(1h)}).id;
  engine.run_until_idle();
  ASSERT_EQ(q.state(id).status, JobStatus::delayed);
  ASSERT_TRUE(q.promote(id));
  engine.run_until_idle();
  EXPECT_EQ(q.state(id).status, JobStatus::completed);
}

TEST_F(PeerSemantics, ChangeDelayMovesTheDueTimeEarlierOrLater) {
  auto q = engine.declare_queue<int>("reports", QueueOptions{});
  std::vector<TimePoint> started;
  q.process({}, [&](Job<int>& j) { started.push_back(j.started_at()); });
  const JobId early = q.add("report", 1, JobOptions{.delay = 1h}).id;
  const JobId late = q.add("report", 2, JobOptions{.delay = 1min}).id;
  clock.advance(10s);
  ASSERT_TRUE(q.change_delay(early, 20s));  // due at 30 s instead of 1 h
  ASSERT_TRUE(q.change_delay(late, 2h));    // due at 2 h 10 s instead of 1 min
  EXPECT_EQ(q.state(early).since, TimePoint{30s});
  EXPECT_EQ(q.state(late).since, TimePoint{2h + 10s});
  replay();
  EXPECT_EQ(started, (std::vector<TimePoint>{TimePoint{30s}, TimePoint{2h + 10s}}));
}

TEST_F(PeerSemantics, ChangeDelayToMaxParksTheJobUntilPromoted) {
  auto q = engine.declare_queue<int>("reports", QueueOptions{});
  int runs = 0;
  q.process({}, [&](Job<int>&) { ++runs; });
  const JobId id = q.add("report", 1, JobOptions{.delay = 1min}).id;
  ASSERT_TRUE(q.change_delay(id, Duration::max()));
  clock.advance(24h);
  engine.run_until_idle();
  EXPECT_EQ(runs, 0);
  EXPECT_EQ(q.state(id).status, JobStatus::delayed);
  ASSERT_TRUE(q.promote(id));
  engine.run_until_idle();
  EXPECT_EQ(runs, 1);
}

TEST_F(PeerSemantics, ANegativeChangeDelayIsAnErrorThatNamesIt) {
  auto q = engine.declare_queue<int>("reports", QueueOptions{});
  const JobId id = q.add("report", 1, JobOptions{.delay = 1min}).id;
  EXPECT_THROW((void)q.change_delay(id, -1s), Error);
}

TEST_F(PeerSemantics, JobsListsAQueuesJobsByStateOldestFirstWithALimit) {
  auto q = engine.declare_queue<int>("reports", QueueOptions{});
  std::vector<JobId> waiting, delayed;
  for (int i = 0; i < 5; ++i)
    waiting.push_back(q.add("report", i).id);
  for (int i = 0; i < 3; ++i)
    delayed.push_back(q.add("report", i, JobOptions{.delay = 1min * (3 - i)}).id);
  auto ids = [](const std::vector<JobInfo>& v) {
    std::vector<JobId> out;
    for (const auto& j : v)
      out.push_back(j.id);
    return out;
  };
  EXPECT_EQ(ids(q.jobs(JobStatus::waiting)), waiting);
  EXPECT_EQ(ids(q.jobs(JobStatus::waiting, 2)), (std::vector<JobId>{waiting[0], waiting[1]}));
  const auto d = q.jobs(JobStatus::delayed);
  EXPECT_EQ(ids(d), delayed);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].state.since, TimePoint{3min}) << "a delayed job's due time";
  EXPECT_TRUE(q.jobs(JobStatus::active).empty());
  EXPECT_TRUE(q.jobs(JobStatus::completed).empty()) << "ended jobs are not listed";
}

TEST_F(PeerSemantics, JobsWithALimitListsTheOldestEvenWhenSlotsAreReusedOutOfOrder) {
  // Cancels free slots that newer jobs then take, so the slots' order is not the ids' order:
  // the listing must still be the `limit` smallest ids, ascending. Delayed jobs: a cancelled
  // one gives its slot back at once.
  auto q = engine.declare_queue<int>("reports", QueueOptions{.capacity = 64});
  std::mt19937_64 rng(11);
  std::set<JobId> live;
  for (int round = 0; round < 400; ++round) {
    if (live.size() < 60 && (live.empty() || rng() % 3 != 0)) {
      const AddReceipt r = q.add("report", round, JobOptions{.delay = 1h});
      ASSERT_EQ(r.status, AddStatus::added) << "round " << round;
      live.insert(r.id);
    } else {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      ASSERT_TRUE(q.cancel(*it));
      live.erase(it);
    }
    for (const std::size_t limit : {std::size_t{1}, std::size_t{3}, std::size_t{10}, SIZE_MAX}) {
      std::vector<JobId> want(live.begin(), live.end());
      if (want.size() > limit) want.resize(limit);
      std::vector<JobId> got;
      for (const auto& j : q.jobs(JobStatus::delayed, limit))
        got.push_back(j.id);
      ASSERT_EQ(got, want) << "round " << round << ", limit " << limit;
    }
  }
}

// --- the DLQ entry exists when the job is dead-lettered --------------------------------------

TEST_F(PeerSemantics, AnObserverOfDeadLetteredFindsTheEntryInTheDlq) {
  auto q = engine.declare_queue<std::string>("orders", QueueOptions{});
  std::vector<std::string> found;
  engine.on_event([&](const Event& e) {
    if (e.kind != EventKind::dead_lettered) return;
    auto entry = q.dlq().get(e.job_id);
    found.push_back(entry ? entry->data : "<not in the DLQ>");
  });
  q.process({}, [](Job<std::string>&) { return Outcome::retry("card declined"); });
  (void)q.add("charge", "order-3", JobOptions{.max_attempts = 2});
  replay();
  EXPECT_EQ(found, (std::vector<std::string>{"order-3"}));
}

/// Overrun: a queue whose first delivery of each job blocks until released (or given up), past
/// its lease, as a hung partner call would; later deliveries complete.
struct Overrun {
  ManualClock clock;
  std::atomic<int> deliveries{0};
  std::atomic<bool> running{false};
  std::atomic<bool> release{false};
  std::atomic<int> dead_lettered_found{-1};  // the observer's dlq().contains(id), as 0/1
  std::atomic<int> observer_calls{0};
  Engine engine{EngineOptions{.clock = &clock, .mode = Mode::threaded}};

  /// process(q): the handler above, and an observer of dead_lettered that looks for the entry.
  /// The observer holds its own copy of the handle: the test's `q` dies before the engine.
  template <class T>
  void process(Queue<T> q) {
    engine.on_event([this, q](const Event& e) {
      if (e.kind != EventKind::dead_lettered) return;
      dead_lettered_found = q.dlq().contains(e.job_id) ? 1 : 0;
      observer_calls.fetch_add(1);
    });
    q.process({.concurrency = 2}, [&](Job<T>&) {
      if (deliveries.fetch_add(1) == 0) {
        running = true;
        while (!release)
          std::this_thread::yield();
        return Outcome::retry("the partner answered after the lease lapsed");
      }
      return Outcome::done();
    });
  }
  /// lapse(): waits for the first delivery, then moves time past its lease.
  bool lapse() {
    if (!test::eventually([&] { return running.load(); })) return false;
    clock.advance(150ms);
    return true;
  }
  ~Overrun() {
    release = true;
    engine.shutdown(5s);
  }
};

TEST(PeerDeadLetters, AJobDeadLetteredByALapseIsInTheDlqWhileItsHandlerStillRuns) {
  // SQS: a message whose receive count is exhausted moves to the DLQ whether or not the consumer
  // that overran its visibility timeout ever comes back. The entry is visible, inspectable and
  // redrivable at once; the stale handler keeps reading its own payload until it returns.
  Overrun t;
  auto q = t.engine.declare_queue<std::string>(
      "orders", QueueOptions{.visibility_timeout = 100ms,
                             .stall_policy = StallPolicy::count_as_attempt});  // SQS
  t.process(q);
  const JobId id = q.add("charge", "order-3", JobOptions{.max_attempts = 1}).id;
  ASSERT_TRUE(t.lapse()) << "the handler never ran";
  ASSERT_TRUE(test::eventually([&] { return t.observer_calls.load() == 1; }));
  EXPECT_EQ(t.dead_lettered_found.load(), 1) << "the observer found no entry";
  auto entry = q.dlq().get(id);
  ASSERT_TRUE(entry) << "the entry is not in the DLQ while the stale handler runs";
  EXPECT_EQ(entry->data, "order-3");
  EXPECT_EQ(entry->reason, DeadLetterReason::lease_expired);
  EXPECT_EQ(q.state(id).status, JobStatus::dead_lettered);
  EXPECT_TRUE(t.running.load() && !t.release.load()) << "the stale handler is still running";

  ASSERT_EQ(q.dlq().redrive(id), RedriveStatus::redriven) << "redrivable at once";
  ASSERT_TRUE(test::eventually([&] { return q.counts().completed == 1; }))
      << "the redriven job did not run while the stale handler still held its old slot";
  t.release = true;
  ASSERT_TRUE(test::eventually([&] { return q.counts().active == 0; }));
  EXPECT_EQ(q.dlq().size(), 0u) << "the stale handler's return files nothing more";
  EXPECT_EQ(q.counts().late_outcomes, 1u);
  EXPECT_EQ(q.state(id).status, JobStatus::completed);
}

TEST(PeerDeadLetters, TheStaleHandlersSlotComesBackWhenItReturns) {
  Overrun t;
  auto q = t.engine.declare_queue<std::string>(
      "orders", QueueOptions{.capacity = 1, .visibility_timeout = 100ms, .max_stalls = 0});
  t.process(q);
  (void)q.add("charge", "order-3");
  ASSERT_TRUE(t.lapse()) << "the handler never ran";
  ASSERT_TRUE(test::eventually([&] { return q.dlq().size() == 1; }));
  EXPECT_EQ(q.add("charge", "order-4").status, AddStatus::full)
      << "the stale handler still pins the only slot";
  t.release = true;
  ASSERT_TRUE(test::eventually([&] { return q.counts().active == 0; }));
  EXPECT_EQ(q.add("charge", "order-4").status, AddStatus::added);
  EXPECT_EQ(q.dlq().size(), 1u);
}

TEST(PeerDeadLetters, AMoveOnlyPayloadsEntryWaitsForItsStaleHandler) {
  // One owner: the entry cannot copy a std::unique_ptr, and moving it out would pull it from
  // under the handler still reading it. The job is dead-lettered (state, event) at once; its
  // entry is filed when that handler returns.
  Overrun t;
  auto q = t.engine.declare_queue<std::unique_ptr<int>>(
      "blobs", QueueOptions{.visibility_timeout = 100ms, .max_stalls = 0});
  t.process(q);
  const JobId id = q.add("upload", std::make_unique<int>(7)).id;
  ASSERT_TRUE(t.lapse()) << "the handler never ran";
  ASSERT_TRUE(test::eventually([&] { return t.observer_calls.load() == 1; }));
  EXPECT_EQ(t.dead_lettered_found.load(), 0);
  EXPECT_EQ(q.state(id).status, JobStatus::dead_lettered);
  t.release = true;
  ASSERT_TRUE(test::eventually([&] { return q.dlq().size() == 1; }));
  int value = 0;
  EXPECT_TRUE(
      q.dlq().inspect(id, [&](const DeadLetter<std::unique_ptr<int>>& e) { value = *e.data; }));
  EXPECT_EQ(value, 7);
}

// --- review5: found by review of 069d3c3 and 84e50e7 ------------------------------------------

TEST_F(PeerSemantics, AKeptCounterRedriveOfAJobThatUsedEveryAttemptDeadLettersOnItsNextFailure) {
  // RedriveOptions{.reset_counters = false}: "a job that had exhausted its attempts gets one more
  // delivery, and its next failure dead-letters it". With attempts = 65535 (kMaxAttempts) the
  // 16-bit failed_attempts wraps from 65535 to 0 on that failure, so the job is retried 65535 more
  // times instead (deliveries and stalls saturate; failed_attempts does not).
  auto q = engine.declare_queue<int>("orders", QueueOptions{});
  std::uint64_t runs = 0;
  q.process({}, [&](Job<int>&) {
    ++runs;
    return Outcome::retry("declined");
  });
  const JobId id = q.add("charge", 1, JobOptions{.max_attempts = 65535}).id;
  engine.run_until_idle();
  ASSERT_EQ(runs, 65535u);
  ASSERT_TRUE(q.dlq().contains(id));
  runs = 0;
  ASSERT_EQ(q.dlq().redrive(id, RedriveOptions{.reset_counters = false}), RedriveStatus::redriven);
  engine.run_until_idle();
  EXPECT_EQ(runs, 1u) << "one more delivery, then the DLQ";
  auto e = q.dlq().get(id);
  ASSERT_TRUE(e);
  EXPECT_GE(e->failed_attempts, 65535u);
}

TEST_F(PeerSemantics, TheLargestStallBudgetStillEnds) {
  // max_stalls accepts 0 .. 65535 ("stalls a job survives before it is dead-lettered"). The stall
  // count saturates at 0xFFFF, so with max_stalls = 65535 `stalls > max_stalls` never holds and
  // the job is redelivered forever. The handler gives up after 70000 deliveries.
  auto q = engine.declare_queue<int>("orders",
                                     QueueOptions{.visibility_timeout = 2s, .max_stalls = 65535});
  std::uint64_t runs = 0;
  q.process({}, [&](Job<int>&) {
    if (++runs > 70000) return Outcome::fail("the stall budget never ran out");
    return overrun(clock);
  });
  const JobId id = q.add("charge", 1).id;
  engine.run_until_idle();
  EXPECT_EQ(runs, 65536u) << "65535 stalls survived, the next one dead-letters";
  auto e = q.dlq().get(id);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->reason, DeadLetterReason::lease_expired);
}

/// Refiled: a job whose first delivery hangs past its lease (a stall within the default budget
/// of 1) and whose redelivery, on the other worker, fails for good. That worker dead-letters it
/// while the stale first delivery still pins the slot: the entry is filed from a copy and the
/// dead_lettered event is raised on that worker, by the DLQ's `filed` callback.
struct Refiled {
  ManualClock clock;
  std::atomic<int> deliveries{0};
  std::atomic<bool> running{false};
  std::atomic<bool> release{false};
  Engine engine{EngineOptions{.clock = &clock, .mode = Mode::threaded}};
  Queue<std::string> q =
      engine.declare_queue<std::string>("orders", QueueOptions{.visibility_timeout = 100ms});
  struct Release {
    std::atomic<bool>& flag;
    ~Release() { flag = true; }  // before the engine's shutdown, whatever failed
  } guard{release};

  void process() {
    q.process({.concurrency = 2}, [this](Job<std::string>&) {
      if (deliveries.fetch_add(1) == 0) {
        running = true;
        while (!release)
          std::this_thread::yield();
        return Outcome::retry("the partner answered after the lease lapsed");
      }
      return Outcome::fail("card declined for good");
    });
  }
  bool lapse() {
    if (!test::eventually([&] { return running.load(); })) return false;
    clock.advance(150ms);
    return true;
  }
};

TEST(PeerDeadLetters, AnObserverOfAJobFiledFromACopySeesItDeadLettered) {
  // The event says dead_lettered and the entry is in the DLQ, but the worker that raised it still
  // holds the old slot in `finishing` (file_copy runs before ctl.end()), so state() answers
  // active from that slot.
  Refiled t;
  std::atomic<int> seen{-1};
  auto q = t.q;
  t.engine.on_event([&seen, q](const Event& e) mutable {
    if (e.kind == EventKind::dead_lettered) seen = static_cast<int>(q.state(e.job_id).status);
  });
  t.process();
  (void)q.add("charge", "order-3");
  ASSERT_TRUE(t.lapse()) << "the handler never ran";
  ASSERT_TRUE(test::eventually([&] { return seen.load() != -1; }));
  EXPECT_EQ(seen.load(), static_cast<int>(JobStatus::dead_lettered))
      << "state() from the dead_lettered observer: "
      << to_string(static_cast<JobStatus>(seen.load()));
}

TEST(PeerDeadLetters, AnObserverThatCancelsAJobFiledFromACopyReturns) {
  // Same job; the observer cancels it (it has ended: false). try_cancel finds the slot busy in
  // `finishing`, held by this very thread with no Holding frame, and yields forever: the worker
  // never returns from the observer. Last in the file: on the hang the watchdog aborts.
  const test::Watchdog watchdog(std::chrono::seconds(60),
                                "AnObserverThatCancelsAJobFiledFromACopyReturns");
  Refiled t;
  std::atomic<int> cancelled{-1};
  auto q = t.q;
  t.engine.on_event([&cancelled, q](const Event& e) mutable {
    if (e.kind == EventKind::dead_lettered) cancelled = q.cancel(e.job_id) ? 1 : 0;
  });
  t.process();
  (void)q.add("charge", "order-3");
  ASSERT_TRUE(t.lapse()) << "the handler never ran";
  const bool returned =
      test::eventually([&] { return cancelled.load() != -1; }, std::chrono::seconds(10));
  if (!returned) {
    ADD_FAILURE()
        << "the observer's cancel() never returned: the worker spins in try_cancel on the "
           "slot it holds itself (the watchdog ends the process)";
    std::fflush(stdout);
  }
  ASSERT_TRUE(returned);
  EXPECT_EQ(cancelled.load(), 0) << "a dead-lettered job cannot be cancelled";
}

}  // namespace
}  // namespace rail
