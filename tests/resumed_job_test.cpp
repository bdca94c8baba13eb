// Jobs resumed from a broker (QueueFront::resume, what rail::amqp::Consumer adds): the handler
// sees the job's own counters, the local queue decides the next step as for its own jobs, and a
// step that would run the job here again (a retry, a lapse's redelivery) ends it as `forwarded`
// with the next attempt and its delay instead. Pinned under the manual clock, inline.
#include <gtest/gtest.h>

#include <string>
#include <utility>
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

struct Seen {
  std::uint32_t attempt = 0, failed = 0, deliveries = 0, stalls = 0, max = 0;
  std::string last_error;
};

struct ResumedJob : test::InlineEngine {
  std::vector<std::string> errors;  // the error of each forwarded and dead_lettered event
  void SetUp() override {
    InlineEngine::SetUp();
    engine.on_event([this](const Event& e) {
      if (e.kind == EventKind::forwarded || e.kind == EventKind::dead_lettered)
        errors.emplace_back(e.error);
    });
  }
  Queue<int> queue(QueueOptions o = {}) { return engine.declare_queue<int>("q", std::move(o)); }
  static JobOptions attempts(std::uint32_t max, Backoff b = Backoff::fixed(2s)) {
    JobOptions o;
    o.max_attempts = max;
    o.backoff = b;
    return o;
  }
};

TEST_F(ResumedJob, ItsHandlerSeesTheAttemptsItHadElsewhere) {
  auto q = queue();
  Seen seen;
  q.process({}, [&](Job<int>& j) {
    seen = {j.attempt(), j.failed_attempts(), j.deliveries(),
            j.stalls(),  j.max_attempts(),    std::string(j.last_error())};
    return Outcome::done();
  });
  const AddReceipt r = resume(q, 1, attempts(5), after(2, 1));
  ASSERT_EQ(r.status, AddStatus::added);
  engine.run_until_idle();
  EXPECT_EQ(seen.attempt, 3u);
  EXPECT_EQ(seen.failed, 2u);
  EXPECT_EQ(seen.deliveries, 4u) << "three before, this one the fourth";
  EXPECT_EQ(seen.stalls, 1u);
  EXPECT_EQ(seen.max, 5u);
  EXPECT_EQ(seen.last_error, "error 2");
  EXPECT_EQ(count(EventKind::completed), 1u);
  EXPECT_EQ(q.counts().completed, 1u);
  EXPECT_EQ(q.counts().forwarded, 0u);
}

TEST_F(ResumedJob, AFailureWithAttemptsLeftForwardsItsNextAttemptAfterTheLocalBackoff) {
  auto q = queue();
  int runs = 0;
  q.process({}, [&](Job<int>&) {
    ++runs;
    return Outcome::retry("card declined");
  });
  const JobId id = resume(q, 1, attempts(5), after(1)).id;
  replay();  // a local retry would run again once the backoff passed
  EXPECT_EQ(runs, 1) << "its next attempt is the broker's, not this queue's";
  ASSERT_EQ(count(EventKind::attempt_failed), 1u);
  EXPECT_EQ(first(EventKind::attempt_failed).delay, 2s);
  ASSERT_EQ(count(EventKind::forwarded), 1u);
  const Event f = first(EventKind::forwarded);
  EXPECT_EQ(f.job_id, id);
  EXPECT_EQ(f.attempt, 3u) << "the next attempt";
  EXPECT_EQ(f.max_attempts, 5u);
  EXPECT_EQ(f.delay, 2s) << "the backoff the local queue chose";
  EXPECT_EQ(f.deliveries, 2u);
  EXPECT_EQ(f.stalls, 0u);
  EXPECT_EQ(errors, std::vector<std::string>{"card declined"});
  const QueueCounts c = q.counts();
  EXPECT_EQ(c.forwarded, 1u);
  EXPECT_EQ(c.retried, 1u);
  EXPECT_EQ(c.failed_attempts, 1u);
  EXPECT_EQ(c.waiting + c.delayed + c.active, 0u) << "it left the queue";
  EXPECT_EQ(c.dead_lettered, 0u);
  EXPECT_EQ(q.state(id).status, JobStatus::forwarded);
  EXPECT_EQ(q.dlq().size(), 0u);
}

TEST_F(ResumedJob, AHandlersRetryInIsTheForwardedDelay) {
  auto q = queue();
  q.process({}, [&](Job<int>&) { return Outcome::retry_in(45s, "rate limited"); });
  (void)resume(q, 1, attempts(3), after(0));
  replay();
  ASSERT_EQ(count(EventKind::forwarded), 1u);
  EXPECT_EQ(first(EventKind::forwarded).delay, 45s);
  EXPECT_EQ(first(EventKind::forwarded).attempt, 2u);
}

TEST_F(ResumedJob, TheLastAttemptDeadLettersWithEveryErrorAsALocalJobDoes) {
  auto q = queue();
  q.process({}, [&](Job<int>&) { return Outcome::retry("still down"); });
  const JobId id = resume(q, 7, attempts(3), after(2)).id;
  replay();
  EXPECT_EQ(count(EventKind::forwarded), 0u);
  ASSERT_EQ(count(EventKind::dead_lettered), 1u);
  EXPECT_EQ(first(EventKind::dead_lettered).reason, DeadLetterReason::attempts_exhausted);
  const auto entry = q.dlq().get(id);
  ASSERT_TRUE(entry.has_value());
  EXPECT_EQ(entry->data, 7);
  EXPECT_EQ(entry->failed_attempts, 3u);
  ASSERT_EQ(entry->errors.size(), 3u);
  EXPECT_EQ(entry->errors[0].message, "error 1");
  EXPECT_EQ(entry->errors[1].message, "error 2");
  EXPECT_EQ(entry->errors[2].message, "still down");
  EXPECT_EQ(entry->errors[2].attempt, 3u);
}

TEST_F(ResumedJob, APermanentFailureOrADiscardEndsItAsForALocalJob) {
  auto q = queue();
  q.process({}, [&](Job<int>& j) {
    return j.data() == 1 ? Outcome::fail("bad card") : Outcome::discard("stale");
  });
  const JobId failed = resume(q, 1, attempts(5), after(1)).id;
  const JobId discarded = resume(q, 2, attempts(5), after(1)).id;
  replay();
  EXPECT_EQ(count(EventKind::forwarded), 0u);
  EXPECT_EQ(q.state(failed).status, JobStatus::dead_lettered);
  EXPECT_EQ(first(EventKind::dead_lettered).reason, DeadLetterReason::permanent_failure);
  EXPECT_EQ(q.state(discarded).status, JobStatus::discarded);
}

TEST_F(ResumedJob, ALapsedLeaseForwardsItAtOnceWithTheStallCountedAndNoAttemptSpent) {
  QueueOptions o;
  o.visibility_timeout = 10s;
  o.max_stalls = 2;
  auto q = queue(o);
  int runs = 0;
  q.process({}, [&](Job<int>&) {
    ++runs;
    clock.advance(11s);  // the sweep on this advance lapses the lease
    return Outcome::done();
  });
  const JobId id = resume(q, 1, attempts(5), after(1, 1)).id;
  replay();
  EXPECT_EQ(runs, 1) << "the broker redelivers it, not this queue";
  ASSERT_EQ(count(EventKind::forwarded), 1u);
  const Event f = first(EventKind::forwarded);
  EXPECT_EQ(f.job_id, id);
  EXPECT_EQ(f.attempt, 2u) << "a stall under the own budget costs no attempt";
  EXPECT_EQ(f.delay, 0s);
  EXPECT_EQ(f.stalls, 2u);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("lease expired"), std::string::npos) << errors[0];
  EXPECT_EQ(count(EventKind::late_outcome), 1u) << "the fenced handler's done is ignored";
  EXPECT_EQ(q.counts().completed, 0u);
  EXPECT_EQ(q.counts().forwarded, 1u);
}

TEST_F(ResumedJob, AStallPastItsBudgetDeadLettersAsLeaseExpired) {
  QueueOptions o;
  o.visibility_timeout = 10s;
  o.max_stalls = 1;
  auto q = queue(o);
  q.process({}, [&](Job<int>&) {
    clock.advance(11s);
    return Outcome::done();
  });
  (void)resume(q, 1, attempts(5), after(0, 1));  // one stall already, elsewhere
  replay();
  EXPECT_EQ(count(EventKind::forwarded), 0u);
  ASSERT_EQ(count(EventKind::dead_lettered), 1u);
  EXPECT_EQ(first(EventKind::dead_lettered).reason, DeadLetterReason::lease_expired);
}

TEST_F(ResumedJob, UnderCountAsAttemptALapseForwardsTheNextAttempt) {
  QueueOptions o;
  o.visibility_timeout = 10s;
  o.stall_policy = StallPolicy::count_as_attempt;
  auto q = queue(o);
  q.process({}, [&](Job<int>&) {
    clock.advance(11s);
    return Outcome::done();
  });
  (void)resume(q, 1, attempts(5), after(1));
  replay();
  ASSERT_EQ(count(EventKind::forwarded), 1u);
  EXPECT_EQ(first(EventKind::forwarded).attempt, 3u) << "the lapse was attempt 2's failure";
  EXPECT_EQ(first(EventKind::forwarded).delay, 0s) << "a lapse redelivers at once (SQS)";
}

TEST_F(ResumedJob, AnAttemptPastItsTimeoutForwardsAfterTheBackoff) {
  QueueOptions o;
  o.timeout = 5s;
  auto q = queue(o);
  q.process({}, [&](Job<int>&) {
    clock.advance(6s);
    return Outcome::done();
  });
  (void)resume(q, 1, attempts(5, Backoff::fixed(3s)), after(0));
  replay();
  EXPECT_EQ(count(EventKind::timed_out), 1u);
  ASSERT_EQ(count(EventKind::forwarded), 1u);
  EXPECT_EQ(first(EventKind::forwarded).attempt, 2u);
  EXPECT_EQ(first(EventKind::forwarded).delay, 3s);
}

TEST_F(ResumedJob, DecorrelatedJitterGoesOnFromTheWaitTheLastFailureLedTo) {
  auto q = queue();
  q.process({}, [&](Job<int>&) { return Outcome::retry("down"); });
  Backoff b = Backoff::fixed(1s);
  b.jitter = Jitter::decorrelated;
  b.cap = 1h;
  for (int i = 0; i < 20; ++i) {
    detail::Resumed r = after(1);
    r.previous_delay = i < 10 ? Duration{0} : Duration{100s};
    (void)resume(q, i, attempts(5, b), r);
    engine.run_until_idle();
  }
  const std::vector<Event> f = of(EventKind::forwarded);
  ASSERT_EQ(f.size(), 20u);
  Duration longest_fresh{0}, longest_carried{0};
  for (std::size_t i = 0; i < f.size(); ++i) {
    EXPECT_GE(f[i].delay, 1s);
    Duration& longest = i < 10 ? longest_fresh : longest_carried;
    longest = std::max(longest, f[i].delay);
  }
  EXPECT_LE(longest_fresh, 3s) << "from the base: random in [1 s, 3 s]";
  EXPECT_GT(longest_carried, 3s) << "from 100 s: random in [1 s, 300 s], ten tries";
  EXPECT_LE(longest_carried, 300s);
}

TEST_F(ResumedJob, AFullQueueAnswersFullWithoutWaitingOrDeadLettering) {
  QueueOptions o;
  o.capacity = 1;
  o.on_full = OnFull::dead_letter;
  auto q = queue(o);
  ASSERT_EQ(resume(q, 1, attempts(3), after(0)).status, AddStatus::added);
  EXPECT_EQ(resume(q, 2, attempts(3), after(0)).status, AddStatus::full);
  EXPECT_EQ(q.dlq().size(), 0u) << "the broker keeps a job the queue has no room for";
  EXPECT_EQ(q.counts().added, 1u);
}

TEST_F(ResumedJob, AGroupsJobRetriesHereHoldingItsGroupsTurn) {
  auto q = queue();
  std::vector<int> starts;
  q.process({}, [&](Job<int>& j) {
    starts.push_back(j.data());
    return j.data() == 1 && j.attempt() == 2 ? Outcome::retry("once more") : Outcome::done();
  });
  JobOptions o = attempts(5);
  o.group = "customer-42";
  detail::Resumed r = after(1);
  r.forward = false;  // a group's job: its retry stays here, in its place
  ASSERT_EQ(resume(q, 1, o, r).status, AddStatus::added);
  r = after(0);
  r.forward = false;
  ASSERT_EQ(resume(q, 2, o, r).status, AddStatus::added);
  replay();
  EXPECT_EQ(starts, (std::vector<int>{1, 1, 2})) << "the retry came before the group's next job";
  EXPECT_EQ(count(EventKind::forwarded), 0u);
  EXPECT_EQ(q.counts().completed, 2u);
}

TEST_F(ResumedJob, OptionsAResumedJobCannotHaveAreRefusedByName) {
  auto q = queue();
  const auto refused = [&](const char* option, auto set) {
    JobOptions o = attempts(3);
    set(o);
    try {
      (void)resume(q, 1, o, after(0));
      ADD_FAILURE() << option << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_option);
      EXPECT_NE(std::string(e.what()).find(std::string("JobOptions.") + option), std::string::npos)
          << e.what();
    }
  };
  refused("dedup", [](JobOptions& o) { o.dedup.id = "order-7"; });
  refused("group", [](JobOptions& o) { o.group = "customer-42"; });  // while it forwards
  refused("delay", [](JobOptions& o) { o.delay = 5s; });
  EXPECT_EQ(q.counts().added, 0u);
}

TEST_F(ResumedJob, AfterShutdownItAnswersShuttingDown) {
  auto q = queue();
  (void)engine.shutdown();
  EXPECT_EQ(resume(q, 1, attempts(3), after(0)).status, AddStatus::shutting_down);
}

}  // namespace
}  // namespace rail
