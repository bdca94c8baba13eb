// Peer semantics (issue 11): behaviours BullMQ, asynq and SQS users rely on, pinned under the
// manual clock of an inline engine.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rail/rail.hpp"
#include "support/eventually.hpp"
#include "support/inline_engine.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;
using Peers = test::InlineEngine;

JobOptions with_dedup(std::string id, std::optional<Duration> ttl,
                      DedupMode mode = DedupMode::merge, Duration delay = Duration{0}) {
  JobOptions o;
  o.dedup = {.id = std::move(id), .ttl = ttl, .mode = mode};
  o.delay = delay;
  return o;
}

// --- dedup ids follow the job ---------------------------------------------------------------

TEST_F(Peers, CancellingAJobReleasesItsDedupIdEvenWhenTheWindowHasATtl) {
  auto q = engine.queue<int>("emails", QueueOptions{});
  const JobId first = q.add("send", 1, with_dedup("order-4-email", 1h, DedupMode::merge, 1min)).id;
  ASSERT_TRUE(q.cancel(first));
  const AddResult again = q.add("send", 2, with_dedup("order-4-email", 1h));
  EXPECT_EQ(again.status, AddStatus::added) << "the cancelled job's id must not merge later adds";
  EXPECT_NE(again.id, first);
  int ran = 0;
  q.process({}, [&](Job<int>& j) { ran += j.data(); });
  engine.run_until_idle();
  EXPECT_EQ(ran, 2) << "the new add's work runs";
}

TEST_F(Peers, AJobThatRanKeepsMergingItsIdUntilTheTtlEnds) {
  auto q = engine.queue<int>("emails", QueueOptions{});
  q.process({}, [](Job<int>&) {});
  const JobId first = q.add("send", 1, with_dedup("order-4-email", 10min)).id;
  engine.run_until_idle();
  EXPECT_EQ(q.add("send", 2, with_dedup("order-4-email", 10min)).status, AddStatus::duplicate);
  clock.advance(10min);
  const AddResult later = q.add("send", 3, with_dedup("order-4-email", 10min));
  EXPECT_EQ(later.status, AddStatus::added);
  EXPECT_NE(later.id, first);
}

TEST_F(Peers, ADuplicateAddToAFullQueueIsADuplicateNotFull) {
  auto q = engine.queue<int>("charges", QueueOptions{.capacity = 1});
  const JobId kept = q.add("charge", 1, with_dedup("order-1", std::nullopt)).id;
  const AddResult dup = q.add("charge", 2, with_dedup("order-1", std::nullopt));
  EXPECT_EQ(dup.status, AddStatus::duplicate);
  EXPECT_EQ(dup.id, kept);
  EXPECT_EQ(count(EventKind::deduplicated), 1u);
  EXPECT_EQ(q.add("charge", 3).status, AddStatus::full) << "a new job still finds no room";
}

TEST_F(Peers, ADuplicateAddToAFullQueueUnderTheDeadLetterPolicyFilesNoEntry) {
  auto q = engine.queue<int>("charges",
                             QueueOptions{.capacity = 1, .on_full = OverflowPolicy::dead_letter});
  const JobId kept = q.add("charge", 1, with_dedup("order-1", 5min)).id;
  const AddResult dup = q.add("charge", 2, with_dedup("order-1", 5min));
  EXPECT_EQ(dup.status, AddStatus::duplicate);
  EXPECT_EQ(dup.id, kept);
  EXPECT_EQ(q.dlq().size(), 0u) << "a duplicate is not an overflow";
  EXPECT_EQ(q.add("charge", 3).status, AddStatus::dead_lettered) << "a new job overflows";
}

TEST_F(Peers, ADebounceOnAFullQueueStillReplacesTheDelayedJob) {
  auto q = engine.queue<int>("digests", QueueOptions{.capacity = 1});
  const JobId kept = q.add("digest", 1, with_dedup("user-7", 5min, DedupMode::debounce, 1min)).id;
  clock.advance(30s);
  const AddResult dup = q.add("digest", 2, with_dedup("user-7", 5min, DedupMode::debounce, 1min));
  EXPECT_EQ(dup.status, AddStatus::debounced);
  EXPECT_EQ(dup.id, kept);
  int seen = 0;
  q.process({}, [&](Job<int>& j) { seen = j.data(); });
  replay();
  EXPECT_EQ(seen, 2) << "the last payload runs";
}

// --- job names ------------------------------------------------------------------------------

TEST_F(Peers, AnEmptyOrBlankJobNameIsAnErrorThatNamesTheProblem) {
  auto q = engine.queue<int>("orders", QueueOptions{});
  for (const char* name : {"", " ", "\t\n"}) {
    try {
      q.add(name, 1);
      ADD_FAILURE() << "add('" << name << "') was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_option);
      EXPECT_NE(std::string(e.what()).find("job name"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("orders"), std::string::npos) << e.what();
    }
  }
  std::vector<int> items{1, 2};
  EXPECT_THROW(q.add_bulk(" ", std::span<int>(items)), Error);
  EXPECT_EQ(q.counts().added, 0u);
  EXPECT_EQ(q.add(" charge-card", 1).status, AddStatus::added) << "surrounding blanks are allowed";
}

// --- pause ----------------------------------------------------------------------------------

TEST_F(Peers, APausedQueueStartsNothingEvenWithinTheRunThatPausedIt) {
  // A handler pauses its own queue; the retry it returns and the job behind it are ready at once,
  // yet run_until_idle() starts neither until resume() (BullMQ: a paused queue starts no job).
  auto q = engine.queue<int>("q", QueueOptions{});
  std::vector<int> started;
  q.process({}, [&](Job<int>& j) {
    started.push_back(j.data());
    if (j.data() == 1 && j.attempt() == 1) {
      q.pause();
      return Outcome::retry("paused mid-run");  // no backoff: ready again at once
    }
    return Outcome::done();
  });
  q.add("a", 1, JobOptions{.attempts = 2});
  q.add("b", 2);
  engine.run_until_idle();
  EXPECT_EQ(started, std::vector<int>{1});
  EXPECT_EQ(q.counts().waiting, 2u);
  q.resume();
  engine.run_until_idle();
  EXPECT_EQ(started, (std::vector<int>{1, 2, 1}));
  EXPECT_EQ(q.counts().completed, 2u);
}

// --- leases ---------------------------------------------------------------------------------

TEST(PeerLeases, AShortenedLeaseRedeliversAtItsNewDeadlineInThreadedMode) {
  // SQS ChangeMessageVisibility to a shorter timeout: the job is delivered again once the new,
  // earlier deadline passes — not when the queue's hour-long visibility timeout would have.
  ManualClock clock;
  std::atomic<int> deliveries{0};
  std::atomic<bool> shortened{false};
  std::atomic<bool> give_up{false};  // a failing run must still end: the handler stops waiting
  Engine engine{EngineOptions{.clock = &clock, .mode = Mode::threaded}};
  auto q = engine.queue<int>("calls", QueueOptions{.visibility_timeout = 1h});
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
  q.add("call", 1, JobOptions{.attempts = 3});
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

// --- the DLQ entry exists when the job is dead-lettered --------------------------------------

TEST_F(Peers, AnObserverOfDeadLetteredFindsTheEntryInTheDlq) {
  auto q = engine.queue<std::string>("orders", QueueOptions{});
  std::vector<std::string> found;
  engine.on_event([&](const Event& e) {
    if (e.kind != EventKind::dead_lettered) return;
    auto entry = q.dlq().get(e.job_id);
    found.push_back(entry ? entry->data : "<not in the DLQ>");
  });
  q.process({}, [](Job<std::string>&) { return Outcome::retry("card declined"); });
  q.add("charge", "order-3", JobOptions{.attempts = 2});
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
  auto q = t.engine.queue<std::string>("orders", QueueOptions{.visibility_timeout = 100ms});
  t.process(q);
  const JobId id = q.add("charge", "order-3", JobOptions{.attempts = 1}).id;
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
  auto q = t.engine.queue<std::string>("orders",
                                       QueueOptions{.capacity = 1, .visibility_timeout = 100ms});
  t.process(q);
  q.add("charge", "order-3");
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
  auto q = t.engine.queue<std::unique_ptr<int>>("blobs", QueueOptions{.visibility_timeout = 100ms});
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

}  // namespace
}  // namespace rail
