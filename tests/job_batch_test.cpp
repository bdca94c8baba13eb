// Batches (Engine::batch, JobBatch): on_complete and on_success each fire exactly once, never
// before seal() nor before the last member joined, across queues, dead-letters, redrives,
// cancels, duplicates and nesting; open batches in the shutdown report. Inline under the manual
// clock, then threads: seal() racing the last member's end.
#include <gtest/gtest.h>

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
using Batches = test::InlineEngine;

/// Fired: how often each callback ran, and the summaries they saw.
struct Fired {
  int complete = 0, success = 0;
  JobBatchSummary last_complete{}, last_success{};
  JobBatchOptions options(std::string name = "b") {
    JobBatchOptions o;
    o.name = std::move(name);
    o.on_complete = [this](const JobBatchSummary& s) {
      ++complete;
      last_complete = s;
    };
    o.on_success = [this](const JobBatchSummary& s) {
      ++success;
      last_success = s;
    };
    return o;
  }
};

TEST_F(Batches, EachCallbackFiresOnceAfterSealWhenEveryMemberOfAnyQueueCompleted) {
  auto emails = engine.declare_queue<int>("emails", QueueOptions{});
  auto invoices = engine.declare_queue<std::string>("invoices", QueueOptions{});
  emails.process({}, [](Job<int>&) { return Outcome::done(); });
  invoices.process({}, [](Job<std::string>&) { return Outcome::done(); });
  Fired f;
  JobBatch b = engine.batch(f.options("order-42"));
  (void)b.add(emails, "send", 1);
  (void)b.add(emails, "send", 2);
  (void)b.add(invoices, "render", std::string("inv-1"));
  engine.run_until_idle();
  EXPECT_EQ(f.complete, 0) << "not before seal(): another job may still join";
  EXPECT_EQ(b.summary().ended, 3u);
  b.seal();
  EXPECT_EQ(f.complete, 1);
  EXPECT_EQ(f.success, 1);
  EXPECT_EQ(f.last_complete.members, 3u);
  EXPECT_EQ(f.last_complete.completed, 3u);
  EXPECT_EQ(f.last_success.name, "order-42");
  b.seal();  // idempotent
  engine.run_until_idle();
  EXPECT_EQ(f.complete, 1);
  EXPECT_EQ(f.success, 1);
}

TEST_F(Batches, ASealedBatchFiresWhenItsLastMemberEnds) {
  auto q = engine.declare_queue<int>("q", QueueOptions{});
  q.process({}, [](Job<int>&) { return Outcome::done(); });
  Fired f;
  JobBatch b = engine.batch(f.options());
  JobOptions later;
  later.delay = 1s;
  (void)b.add(q, "a", 1);
  (void)b.add(q, "b", 2, later);
  b.seal();
  engine.run_until_idle();
  EXPECT_EQ(f.complete, 0) << "b has not run yet";
  clock.advance(1s);
  engine.run_until_idle();
  EXPECT_EQ(f.complete, 1);
  EXPECT_EQ(f.success, 1);
}

TEST_F(Batches, ADeadLetteredMemberEndsTheBatchAndItsRedriveThenCompletesIt) {
  auto q = engine.declare_queue<int>("q", QueueOptions{});
  bool fail = true;
  q.process({}, [&](Job<int>& j) {
    return j.data() == 2 && fail ? Outcome::fail("card declined") : Outcome::done();
  });
  Fired f;
  JobBatch b = engine.batch(f.options());
  (void)b.add(q, "charge", 1);
  const JobId two = b.add(q, "charge", 2).id();
  b.seal();
  engine.run_until_idle();
  EXPECT_EQ(f.complete, 1);
  EXPECT_EQ(f.success, 0);
  EXPECT_EQ(f.last_complete.dead_lettered, 1u);
  EXPECT_EQ(f.last_complete.completed, 1u);
  fail = false;
  ASSERT_EQ(q.dlq().redrive(two), RedriveStatus::redriven);
  EXPECT_EQ(b.summary().ended, 1u) << "the redriven member is live again";
  engine.run_until_idle();
  EXPECT_EQ(f.complete, 1) << "on_complete fires once";
  EXPECT_EQ(f.success, 1);
  EXPECT_EQ(f.last_success.completed, 2u);
  EXPECT_EQ(f.last_success.dead_lettered, 0u);
}

TEST_F(Batches, AMemberRedrivenByAnObserverOfItsDeadLetterStillCompletesTheBatch) {
  // The DLQ entry is filed, and its event raised, before the job's end reaches its waiters: the
  // redrive comes first, and the batch must watch the new life rather than count the old end.
  auto q = engine.declare_queue<int>("q", QueueOptions{});
  int runs = 0;
  q.process({},
            [&](Job<int>&) { return ++runs == 1 ? Outcome::fail("first try") : Outcome::done(); });
  engine.on_event([&](const Event& e) {
    if (e.kind == EventKind::dead_lettered) (void)q.dlq().redrive(e.job_id);
  });
  Fired f;
  JobBatch b = engine.batch(f.options());
  (void)b.add(q, "charge", 1);
  b.seal();
  engine.run_until_idle();
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(f.success, 1);
  EXPECT_EQ(f.complete, 1);
  EXPECT_EQ(f.last_complete.completed, 1u);
  EXPECT_EQ(f.last_complete.dead_lettered, 0u);
}

TEST_F(Batches, CancelledAndDiscardedMembersEndItWithoutSuccess) {
  auto q = engine.declare_queue<int>("q", QueueOptions{});
  q.process({}, [](Job<int>& j) {
    return j.data() == 1 ? Outcome::discard("refunded") : Outcome::done();
  });
  Fired f;
  JobBatch b = engine.batch(f.options());
  JobOptions later;
  later.delay = 1h;
  (void)b.add(q, "a", 1);
  const JobId waiting = b.add(q, "b", 2, later).id();
  b.seal();
  engine.run_until_idle();
  EXPECT_EQ(f.complete, 0);
  ASSERT_TRUE(q.cancel(waiting));
  EXPECT_EQ(f.complete, 1);
  EXPECT_EQ(f.success, 0);
  EXPECT_EQ(f.last_complete.cancelled, 1u);
  EXPECT_EQ(f.last_complete.discarded, 1u);
}

TEST_F(Batches, ADuplicateJoinsTheJobItMergedIntoAndAFullQueueJoinsNothing) {
  QueueOptions o;
  o.capacity = 1;
  auto q = engine.declare_queue<int>("q", o);
  q.process({}, [](Job<int>&) { return Outcome::done(); });
  Fired f;
  JobBatch b = engine.batch(f.options());
  JobOptions keyed;
  keyed.dedup.id = "k";
  const auto first = b.add(q, "a", 1, keyed);
  const auto dup = b.add(q, "a", 2, keyed);
  EXPECT_EQ(dup.added().status, AddStatus::duplicate);
  EXPECT_EQ(dup.id(), first.id());
  EXPECT_EQ(b.add(q, "c", 3).added().status, AddStatus::full);
  EXPECT_EQ(b.summary().members, 1u);
  b.seal();
  engine.run_until_idle();
  EXPECT_EQ(f.complete, 1);
  EXPECT_EQ(f.last_complete.members, 1u);
}

TEST_F(Batches, AnOverflowFiledToTheDlqEndsItsMemberAndADroppedHandleStillHearsSuccess) {
  QueueOptions o;
  o.capacity = 1;
  o.on_full = OnFull::dead_letter;
  auto q = engine.declare_queue<int>("q", o);
  Fired f;
  JobId filed = 0;
  {
    JobBatch b = engine.batch(f.options());
    (void)b.add(q, "a", 1);
    const auto over = b.add(q, "b", 2);
    ASSERT_EQ(over.added().status, AddStatus::dead_lettered);
    filed = over.id();
    EXPECT_EQ(b.summary().dead_lettered, 1u) << "filed at once: it ended";
    b.seal();
  }  // the handle goes: the engine keeps the batch while a redrive may complete it
  q.process({}, [](Job<int>&) { return Outcome::done(); });
  engine.run_until_idle();
  EXPECT_EQ(f.complete, 1);
  EXPECT_EQ(f.success, 0);
  ASSERT_EQ(q.dlq().redrive(filed), RedriveStatus::redriven);
  engine.run_until_idle();
  EXPECT_EQ(f.success, 1);
  EXPECT_EQ(f.complete, 1);
}

TEST_F(Batches, AnAddAfterSealIsRefusedAndAnEmptyBatchFiresAtSeal) {
  auto q = engine.declare_queue<int>("q", QueueOptions{});
  Fired f;
  JobBatch b = engine.batch(f.options("empty"));
  b.seal();
  EXPECT_EQ(f.complete, 1);
  EXPECT_EQ(f.success, 1);
  try {
    (void)b.add(q, "late", 1);
    FAIL() << "an add after seal() was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::sealed);
    EXPECT_NE(std::string(e.what()).find("'empty'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("sealed"), std::string::npos) << e.what();
  }
  EXPECT_EQ(q.counts().added, 0u);
  EXPECT_THROW((void)b.batch(), Error);
}

TEST_F(Batches, ANestedBatchIsOneMemberOfItsParentAndEndsFirst) {
  auto q = engine.declare_queue<int>("q", QueueOptions{});
  q.process({}, [](Job<int>&) { return Outcome::done(); });
  std::vector<std::string> order;
  JobBatchOptions po;
  po.on_complete = [&](const JobBatchSummary& s) {
    order.push_back("parent " + std::to_string(s.members));
  };
  JobBatch parent = engine.batch(po);
  JobBatchOptions co;
  co.on_success = [&](const JobBatchSummary& s) {
    order.push_back("child " + std::to_string(s.members));
  };
  JobBatch child = parent.batch(co);
  (void)parent.add(q, "a", 1);
  (void)child.add(q, "b", 2);
  (void)child.add(q, "c", 3);
  parent.seal();
  engine.run_until_idle();
  EXPECT_TRUE(order.empty()) << "the child is not sealed: the parent waits for it";
  child.seal();
  EXPECT_EQ(order, (std::vector<std::string>{"child 2", "parent 2"}));
  EXPECT_EQ(parent.summary().completed, 2u);
}

TEST_F(Batches, TheShutdownReportListsOpenBatchesAndADestroyedEngineFiresNone) {
  auto q = engine.declare_queue<int>("q", QueueOptions{});
  Fired f;
  JobBatch unsealed = engine.batch(f.options("unsealed"));
  JobBatch waiting = engine.batch(f.options("waiting"));
  (void)waiting.add(q, "a", 1);  // no handler: never runs
  waiting.seal();
  JobBatch done = engine.batch(f.options("done"));
  done.seal();
  EXPECT_EQ(f.complete, 1);  // the empty one
  const ShutdownReport report = engine.shutdown(0ms);
  ASSERT_EQ(report.open_batches.size(), 2u);
  EXPECT_EQ(report.open_batches[0].name, "unsealed");
  EXPECT_EQ(report.open_batches[1].name, "waiting");
  EXPECT_EQ(report.open_batches[1].members, 1u);
  EXPECT_TRUE(report.open_batches[1].sealed);
  EXPECT_EQ(q.take_leftovers().size(), 1u);  // its member, handed back: never ends
  EXPECT_EQ(f.complete, 1) << "a member handed back never ended";
  EXPECT_THROW((void)engine.batch(), Error);
}

// --- threads ---------------------------------------------------------------------------------

TEST(BatchesThreaded, SealRacingTheLastMembersEndFiresEachCallbackExactlyOnce) {
  // 4 workers on 2 cores against a seal() from another thread at a random moment, 200 batches
  // back to back: each batch's callbacks fire once, after its seal and after every member
  // joined and ended.
  struct Round {
    std::atomic<int> complete{0}, success{0};
    std::atomic<bool> sealed{false}, early{false};
    std::atomic<std::uint64_t> seen_members{0};
    int n = 0;
  };
  constexpr int kRounds = 200;
  std::vector<Round> rounds(kRounds);
  std::mt19937 rng(7);
  Engine engine;
  auto q = engine.declare_queue<int>("q", QueueOptions{});
  q.process({.concurrency = 4}, [](Job<int>& j) {
    if (j.data() % 5 == 0) std::this_thread::yield();
    return Outcome::done();
  });
  for (Round& r : rounds) {
    JobBatchOptions o;
    o.on_complete = [&r](const JobBatchSummary& s) {
      if (!r.sealed.load()) r.early.store(true);
      r.seen_members.store(s.members);
      r.complete.fetch_add(1);
    };
    o.on_success = [&r](const JobBatchSummary&) { r.success.fetch_add(1); };
    JobBatch b = engine.batch(o);
    r.n = 1 + static_cast<int>(rng() % 16);
    const int seal_after = static_cast<int>(rng() % static_cast<unsigned>(r.n + 1));
    std::atomic<bool> added{false};
    std::thread sealer([&] {
      while (b.summary().members < static_cast<std::uint64_t>(seal_after))
        std::this_thread::yield();
      while (!added.load())
        std::this_thread::yield();  // seal after the last add returned
      r.sealed.store(true);
      b.seal();
    });
    for (int i = 0; i < r.n; ++i)
      (void)b.add(q, "job", i);
    added.store(true);
    sealer.join();
  }
  ASSERT_TRUE(q.wait_idle(60s)) << q.counts().waiting << " jobs still waiting";
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  for (Round& r : rounds)
    while ((r.complete.load() == 0 || r.success.load() == 0) &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
  for (int i = 0; i < kRounds; ++i) {
    const Round& r = rounds[static_cast<std::size_t>(i)];
    ASSERT_EQ(r.complete.load(), 1) << "round " << i;
    ASSERT_EQ(r.success.load(), 1) << "round " << i;
    EXPECT_FALSE(r.early.load()) << "round " << i;
    EXPECT_EQ(r.seen_members.load(), static_cast<std::uint64_t>(r.n)) << "round " << i;
  }
  EXPECT_TRUE(engine.shutdown(10s).clean());
}

}  // namespace
}  // namespace rail
