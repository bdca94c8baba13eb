// Short retries of jobs resumed from a broker (detail::RetryHere, what
// rail::amqp::ConsumerOptions::retry_here_within sets up): a failed attempt whose wait is at most
// `within` retries in the local queue, as a local job's does, while the consumer has a place
// free; a longer wait, no free place, or a lapsed lease forwards the job to its broker. A job
// takes its place at its first retry here and gives it back at its end, whatever the end (the
// short path of a completion nobody observes, take_leftovers, a slot's next job alike).
// Pinned under the manual clock, inline.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "rail/detail/resumed.hpp"
#include "rail/rail.hpp"
#include "support/inline_engine.hpp"
#include "support/resumed_jobs.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;
using test::after;
using test::resume;

struct RetryHere : test::InlineEngine {
  Queue<int> queue(QueueOptions o = {}) { return engine.declare_queue<int>("q", std::move(o)); }
  std::shared_ptr<detail::RetryHere> here = std::make_shared<detail::RetryHere>(1s, 2);
  /// add(value, max, backoff, failed): job `value` resumed after `failed` failed attempts
  /// elsewhere, its short retries here.
  JobId add(Queue<int>& q, int value, std::uint32_t max, Backoff b, std::uint32_t failed = 0) {
    JobOptions o;
    o.max_attempts = max;
    o.backoff = b;
    detail::Resumed r = after(failed);
    r.retry_here = here;
    const AddReceipt added = resume(q, value, o, r);
    EXPECT_EQ(added.status, AddStatus::added);
    return added.id;
  }
};

TEST_F(RetryHere, ARetryDueWithinTheLimitRunsHereAfterItsBackoffWithItsCountersGoingOn) {
  auto q = queue();
  std::vector<std::uint32_t> attempts;
  std::vector<Duration> at;
  q.process({}, [&](Job<int>& j) {
    attempts.push_back(j.attempt());
    at.push_back(clock.now().time_since_epoch());
    return j.attempt() < 4 ? Outcome::retry("partner down") : Outcome::done();
  });
  const JobId id = add(q, 1, 5, Backoff::fixed(500ms), 1);
  engine.run_until_idle();
  EXPECT_EQ(here->free_places(), 1) << "its first retry here took a place";
  replay();
  EXPECT_EQ(attempts, (std::vector<std::uint32_t>{2, 3, 4})) << "attempt 1 failed elsewhere";
  ASSERT_EQ(at.size(), 3u);
  EXPECT_EQ(at[1] - at[0], 500ms) << "the local queue's backoff, on its wheel";
  EXPECT_EQ(at[2] - at[1], 500ms);
  EXPECT_EQ(count(EventKind::forwarded), 0u);
  EXPECT_EQ(count(EventKind::retry_due), 2u);
  const QueueCounts c = q.counts();
  EXPECT_EQ(c.completed, 1u);
  EXPECT_EQ(c.retried, 2u);
  EXPECT_EQ(c.forwarded, 0u);
  EXPECT_EQ(q.state(id).status, JobStatus::completed) << "one job, one id, here to its end";
  EXPECT_EQ(here->free_places(), 2) << "given back at its end";
}

TEST_F(RetryHere, AWaitLongerThanTheLimitIsForwardedWithoutTakingAPlace) {
  auto q = queue();
  int runs = 0;
  q.process({}, [&](Job<int>&) {
    ++runs;
    return Outcome::retry("down");
  });
  (void)add(q, 1, 5, Backoff::fixed(1500ms));
  replay();
  EXPECT_EQ(runs, 1);
  ASSERT_EQ(count(EventKind::forwarded), 1u);
  EXPECT_EQ(first(EventKind::forwarded).delay, 1500ms);
  EXPECT_EQ(here->free_places(), 2);
}

TEST_F(RetryHere, AWaitOfExactlyTheLimitRetriesHere) {
  auto q = queue();
  int runs = 0;
  q.process({}, [&](Job<int>&) { return ++runs == 1 ? Outcome::retry("once") : Outcome::done(); });
  (void)add(q, 1, 3, Backoff::fixed(1s));
  replay();
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(count(EventKind::forwarded), 0u);
}

TEST_F(RetryHere, ExponentialBackoffRetriesHereUntilItsWaitOutgrowsTheLimitThenForwards) {
  auto q = queue();
  q.process({}, [&](Job<int>&) { return Outcome::retry("down"); });
  (void)add(q, 1, 10, Backoff::exponential(300ms));  // 300, 600, 1200 ms
  replay();
  EXPECT_EQ(count(EventKind::attempt_failed), 3u);
  ASSERT_EQ(count(EventKind::forwarded), 1u);
  EXPECT_EQ(first(EventKind::forwarded).attempt, 4u);
  EXPECT_EQ(first(EventKind::forwarded).delay, 1200ms);
  EXPECT_EQ(here->free_places(), 2) << "a forwarded job gives its place back";
}

TEST_F(RetryHere, WithEveryPlaceTakenTheNextShortRetryIsForwarded) {
  auto q = queue();
  q.process({}, [&](Job<int>& j) {
    return j.attempt() == 1 ? Outcome::retry("first fails") : Outcome::done();
  });
  const JobId a = add(q, 1, 3, Backoff::fixed(100ms));
  const JobId b = add(q, 2, 3, Backoff::fixed(100ms));
  const JobId c = add(q, 3, 3, Backoff::fixed(100ms));
  engine.run_until_idle();
  EXPECT_EQ(here->free_places(), 0);
  ASSERT_EQ(count(EventKind::forwarded), 1u);
  EXPECT_EQ(first(EventKind::forwarded).job_id, c) << "the third found no place";
  replay();
  EXPECT_EQ(q.state(a).status, JobStatus::completed);
  EXPECT_EQ(q.state(b).status, JobStatus::completed);
  EXPECT_EQ(here->free_places(), 2);
  // The places are free again: the next short retry stays.
  (void)add(q, 4, 3, Backoff::fixed(100ms));
  replay();
  EXPECT_EQ(count(EventKind::forwarded), 1u);
  EXPECT_EQ(q.counts().completed, 3u);
}

TEST_F(RetryHere, TheLastAttemptDeadLettersAndGivesItsPlaceBack) {
  auto q = queue();
  q.process({}, [&](Job<int>&) { return Outcome::retry("still down"); });
  const JobId id = add(q, 7, 3, Backoff::fixed(10ms));
  replay();
  EXPECT_EQ(count(EventKind::forwarded), 0u);
  ASSERT_EQ(count(EventKind::dead_lettered), 1u);
  const auto entry = q.dlq().get(id);
  ASSERT_TRUE(entry.has_value());
  EXPECT_EQ(entry->failed_attempts, 3u);
  EXPECT_EQ(entry->errors.size(), 3u);
  EXPECT_EQ(here->free_places(), 2);
}

TEST_F(RetryHere, ACancelOfAJobWaitingOutItsRetryHereGivesItsPlaceBack) {
  auto q = queue();
  q.process({}, [&](Job<int>&) { return Outcome::retry("down"); });
  const JobId id = add(q, 1, 5, Backoff::fixed(800ms));
  engine.run_until_idle();
  ASSERT_EQ(q.state(id).status, JobStatus::delayed);
  EXPECT_EQ(here->free_places(), 1);
  EXPECT_TRUE(q.cancel(id));
  EXPECT_EQ(q.state(id).status, JobStatus::cancelled);
  EXPECT_EQ(here->free_places(), 2);
}

TEST_F(RetryHere, ALapsedLeaseGoesBackToTheBrokerEvenWithinTheLimit) {
  QueueOptions o;
  o.visibility_timeout = 10s;
  auto q = queue(o);
  int runs = 0;
  q.process({}, [&](Job<int>&) {
    if (++runs == 1) return Outcome::retry("first fails");
    clock.advance(11s);  // the retry here overruns its lease
    return Outcome::done();
  });
  (void)add(q, 1, 5, Backoff::fixed(200ms));
  replay();
  EXPECT_EQ(runs, 2);
  ASSERT_EQ(count(EventKind::forwarded), 1u);
  EXPECT_EQ(first(EventKind::forwarded).delay, 0s) << "a lapse redelivers at once";
  EXPECT_EQ(first(EventKind::forwarded).stalls, 1u);
  EXPECT_EQ(here->free_places(), 2);
}

TEST_F(RetryHere, AJobResumedWithoutItForwardsEveryRetryAsBefore) {
  auto q = queue();
  q.process({}, [&](Job<int>&) { return Outcome::retry("down"); });
  JobOptions o;
  o.max_attempts = 3;
  o.backoff = Backoff::fixed(10ms);
  (void)resume(q, 1, o, after(0));
  replay();
  EXPECT_EQ(count(EventKind::forwarded), 1u);
}

TEST_F(RetryHere, UnderCountAsAttemptALapseGoesBackToTheBrokerToo) {
  QueueOptions o;
  o.visibility_timeout = 10s;
  o.stall_policy = StallPolicy::count_as_attempt;
  auto q = queue(o);
  int runs = 0;
  q.process({}, [&](Job<int>&) {
    ++runs;
    clock.advance(11s);  // its lease lapses: a failed attempt with no wait, its handler running
    return Outcome::done();
  });
  (void)add(q, 1, 5, Backoff::fixed(200ms));
  replay();
  EXPECT_EQ(runs, 1) << "the lapse's next attempt ran here";
  ASSERT_EQ(count(EventKind::forwarded), 1u);
  EXPECT_EQ(first(EventKind::forwarded).attempt, 2u);
  EXPECT_EQ(here->free_places(), 2);
}

TEST_F(RetryHere, TakeLeftoversGivesThePlaceOfAJobWaitingOutItsRetryBack) {
  auto q = queue();
  q.process({}, [&](Job<int>&) { return Outcome::retry("down"); });
  (void)add(q, 1, 5, Backoff::fixed(800ms));
  engine.run_until_idle();
  ASSERT_EQ(here->free_places(), 1);
  (void)engine.shutdown(Duration{0});
  EXPECT_EQ(q.take_leftovers().size(), 1u);
  EXPECT_EQ(here->free_places(), 2);
}

TEST_F(RetryHere, AJobResumedWithoutItIntoTheSlotOfOneThatHadItForwardsItsRetries) {
  auto q = queue(QueueOptions{.capacity = 1});
  q.process({}, [&](Job<int>& j) {
    return j.attempt() < 2 ? Outcome::retry("first fails") : Outcome::done();
  });
  (void)add(q, 1, 3, Backoff::fixed(100ms));  // retries here in the only slot
  replay();
  ASSERT_EQ(q.counts().completed, 1u);
  JobOptions o;
  o.max_attempts = 3;
  o.backoff = Backoff::fixed(100ms);
  (void)resume(q, 2, o, after(0));  // the same slot, no RetryHere
  replay();
  EXPECT_EQ(count(EventKind::forwarded), 1u) << "it inherited the last job's RetryHere";
  EXPECT_EQ(here->free_places(), 2);
}

// Without an observer or a waiter, a handler's success takes the short completion path
// (JobEnds::complete), a single handler's and a batch's alike: it gives the place back too.
class RetryHereUnobserved : public ::testing::TestWithParam<bool> {};

TEST_P(RetryHereUnobserved, ACompletionNobodyObservesGivesThePlaceBack) {
  ManualClock clock;
  Engine engine{EngineOptions{.clock = &clock, .mode = Mode::inlined}};
  auto q = engine.declare_queue<int>("q", {});
  const auto here = std::make_shared<detail::RetryHere>(1s, 2);
  int runs = 0;
  const auto outcome = [&]() { return ++runs == 1 ? Outcome::retry("once") : Outcome::done(); };
  if (GetParam()) {
    q.process_batch({}, {.max = 4}, [&](Batch<int>& batch) { batch.set(0, outcome()); });
  } else {
    q.process({}, [&](Job<int>&) { return outcome(); });
  }
  JobOptions o;
  o.max_attempts = 3;
  o.backoff = Backoff::fixed(100ms);
  detail::Resumed r = after(0);
  r.retry_here = here;
  ASSERT_EQ(resume(q, 1, o, r).status, AddStatus::added);
  engine.run_until_idle();
  EXPECT_EQ(here->free_places(), 1);
  clock.advance(100ms);
  engine.run_until_idle();
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(q.counts().completed, 1u);
  EXPECT_EQ(here->free_places(), 2);
}

INSTANTIATE_TEST_SUITE_P(HandlerAndBatch, RetryHereUnobserved, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "batch" : "handler"; });

}  // namespace
}  // namespace rail
