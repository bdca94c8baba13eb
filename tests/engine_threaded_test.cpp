// Threaded engines: worker pools, the timer thread with a manual clock, blocking overflow,
// shutdown with running handlers. Waits poll for an end state with a deadline; no sleep decides
// an outcome.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <span>
#include <thread>
#include <vector>

#include "rail/rail.hpp"
#include "support/eventually.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;

using test::eventually;

TEST(ThreadedEngine, ManualClockAdvanceFiresDelayedJobsOnTheTimerThread) {
  ManualClock clock;
  std::atomic<int> runs{0};
  Engine engine({.clock = &clock});
  auto q = engine.queue<int>("q", {});
  q.process({.concurrency = 2}, [&](Job<int>&) { runs.fetch_add(1); });
  (void)q.add("a", 1, JobOptions{.delay = 10s});
  (void)q.add("a", 2);
  ASSERT_TRUE(eventually([&] { return runs.load() == 1; }));
  EXPECT_EQ(q.counts().delayed, 1u);  // real time passing does not move a manual clock
  clock.advance(10s);
  ASSERT_TRUE(eventually([&] { return runs.load() == 2; }));
}

TEST(ThreadedEngine, ConcurrencyBoundsHandlersInFlight) {
  std::atomic<int> in_flight{0}, peak{0}, done{0};
  Engine engine;
  auto q = engine.queue<int>("q", {});
  q.process({.concurrency = 3}, [&](Job<int>&) {
    int now = in_flight.fetch_add(1) + 1;
    int p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
    std::this_thread::yield();
    in_flight.fetch_sub(1);
    done.fetch_add(1);
  });
  for (int i = 0; i < 2000; ++i)
    (void)q.add("a", i);
  ASSERT_TRUE(eventually([&] { return done.load() == 2000; }));
  EXPECT_LE(peak.load(), 3);
}

TEST(ThreadedEngine, BlockPolicyWaitsForRoom) {
  std::atomic<bool> release{false};
  std::atomic<int> done{0};
  Engine engine;
  auto q = engine.queue<int>(
      "q", QueueOptions{.capacity = 1, .on_full = OverflowPolicy::block, .block_timeout = 30s});
  q.process({}, [&](Job<int>&) {
    while (!release.load())
      std::this_thread::yield();
    done.fetch_add(1);
  });
  ASSERT_EQ(q.add("a", 1).status, AddStatus::added);
  std::thread unblock([&] {
    std::this_thread::sleep_for(20ms);  // lets the second add start blocking; not an outcome
    release.store(true);
  });
  EXPECT_EQ(q.add("a", 2).status, AddStatus::added);  // waited for the first job to end
  unblock.join();
  ASSERT_TRUE(eventually([&] { return done.load() == 2; }));
}

TEST(ThreadedEngine, BlockPolicyGivesUpAfterTimeoutWithFull) {
  Engine engine;
  auto q = engine.queue<int>(
      "q", QueueOptions{.capacity = 1, .on_full = OverflowPolicy::block, .block_timeout = 5ms});
  ASSERT_EQ(q.add("a", 1).status, AddStatus::added);  // no worker: it stays
  EXPECT_EQ(q.add("a", 2).status, AddStatus::full);
}

TEST(ThreadedEngine, ShutdownReportsStillRunningAfterGrace) {
  // Declared before the engine: its destructor waits for the handler, which reads them.
  std::atomic<bool> started{false}, release{false};
  Engine engine;
  auto q = engine.queue<int>("q", {});
  q.process({}, [&](Job<int>&) {
    started.store(true);
    while (!release.load())
      std::this_thread::yield();
  });
  auto running = q.add("a", 1);
  auto queued = q.add("a", 2);
  ASSERT_TRUE(eventually([&] { return started.load(); }));
  auto report = engine.shutdown(1ms);
  ASSERT_EQ(report.still_running.size(), 1u);
  EXPECT_EQ(report.still_running[0].id, running.id);
  ASSERT_EQ(report.not_started.size(), 1u);
  EXPECT_EQ(report.not_started[0].id, queued.id);
  release.store(true);  // the destructor waits for the handler to return
}

TEST(ThreadedEngine, DestroyingWithQueuedWorkNeitherCrashesNorHangs) {
  for (int round = 0; round < 20; ++round) {
    Engine engine;
    auto q = engine.queue<std::string>("q", QueueOptions{.capacity = 512});
    q.process({.concurrency = 4}, [](Job<std::string>& j) {
      return j.data().size() % 3 == 0 ? Outcome::retry("x") : Outcome::done();
    });
    for (int i = 0; i < 500; ++i)
      (void)q.add("a", std::string(static_cast<std::size_t>(i % 40), 'x'),
                  JobOptions{.attempts = 3, .delay = (i % 2) ? 1ms : 0ms});
  }  // destructors with work in flight: ASan checks the payloads are destroyed exactly once
}

TEST(ThreadedEngine, IdleWorkerRunsJobsBatchedBehindABlockedHandler) {
  // A worker with fast handlers takes ready jobs in batches; when the first job of a batch blocks,
  // the other worker must run the rest (it steals them) instead of leaving them behind the block.
  // The blocked handler waits for its 15 siblings, so without stealing this round never ends
  // (the deadline turns that into a failure).
  for (int round = 0; round < 20; ++round) {
    std::atomic<int> fast_done{0};
    std::atomic<bool> blocker_saw_all{false};
    Engine engine;
    auto q = engine.queue<int>("q", QueueOptions{.capacity = 1024});
    q.process({.concurrency = 2}, [&](Job<int>& j) {
      if (j.data() >= 0) {
        fast_done.fetch_add(1);
        return;
      }
      blocker_saw_all.store(eventually([&] { return fast_done.load() >= 15 + 512; }, 20s));
    });
    std::vector<int> warm(512, 0);  // fast handlers back to back: the workers batch
    ASSERT_EQ(q.add_bulk("warm", std::span<int>(warm)).status, AddStatus::added);
    ASSERT_TRUE(eventually([&] { return fast_done.load() == 512; }));
    std::vector<int> batch(16, 1);
    batch[0] = -1;  // the blocker leads the batch
    ASSERT_EQ(q.add_bulk("batch", std::span<int>(batch)).status, AddStatus::added);
    ASSERT_TRUE(eventually([&] { return q.counts().completed == 512 + 16; }));
    EXPECT_TRUE(blocker_saw_all.load()) << "round " << round;
  }
}

TEST(ThreadedEngine, CountsAddUpAfterBatchedWork) {
  Engine engine;
  auto q = engine.queue<int>("q", QueueOptions{.capacity = 256});
  std::atomic<int> runs{0};
  q.process({.concurrency = 3}, [&](Job<int>& j) {
    runs.fetch_add(1);
    return j.data() % 7 == 0 && j.attempt() == 1 ? Outcome::retry("again") : Outcome::done();
  });
  constexpr int kJobs = 313 * 64;  // whole chunks
  std::vector<int> chunk(64);
  for (int i = 0; i < kJobs; i += 64) {
    for (int k = 0; k < 64; ++k)
      chunk[static_cast<std::size_t>(k)] = i + k;
    while (q.add_bulk("a", std::span<int>(chunk), JobOptions{.attempts = 2}).status ==
           AddStatus::full)
      std::this_thread::yield();
  }
  ASSERT_TRUE(q.drain(60s));
  QueueCounts c = q.counts();
  EXPECT_EQ(c.added, std::uint64_t{kJobs});
  EXPECT_EQ(c.completed, std::uint64_t{kJobs});
  EXPECT_EQ(c.waiting, 0u);
  EXPECT_EQ(c.active, 0u);
  EXPECT_EQ(c.delayed, 0u);
  const int retried = (kJobs + 6) / 7;
  EXPECT_EQ(c.failed_attempts, std::uint64_t(retried));
  EXPECT_EQ(runs.load(), kJobs + retried);
  // Every slot came back: the queue takes a full capacity again.
  q.pause();
  std::vector<int> all(256, 1);
  EXPECT_EQ(q.add_bulk("a", std::span<int>(all)).status, AddStatus::added);
}

TEST(ThreadedEngine, BurstOfDueJobsReachesEveryWorker) {
  // Timers fire a burst while a worker may be spinning (producers' wake-ups are skipped then);
  // the wake-ups must chain so that every worker joins in. Each handler waits until all four
  // run at once: with a missed wake-up the round would stall (the deadline makes it a failure).
  for (int round = 0; round < 10; ++round) {
    ManualClock clock;
    std::atomic<int> in_flight{0}, met{0}, fast_done{0};
    Engine engine({.clock = &clock});
    auto q = engine.queue<int>("q", QueueOptions{.capacity = 64});
    q.process({.concurrency = 4}, [&](Job<int>& j) {
      if (j.data() < 0) {
        fast_done.fetch_add(1);
        return;
      }
      in_flight.fetch_add(1);
      if (eventually([&] { return in_flight.load() >= 4; }, 10s)) met.fetch_add(1);
    });
    for (int i = 0; i < 8; ++i)
      (void)q.add("due", i, JobOptions{.delay = 5ms});
    (void)q.add("fast", -1);  // leaves a worker spinning when the burst comes due
    ASSERT_TRUE(eventually([&] { return fast_done.load() == 1; }));
    clock.advance(5ms);
    ASSERT_TRUE(eventually([&] { return q.counts().completed == 9; }));
    EXPECT_EQ(met.load(), 8) << "round " << round;
  }
}

TEST(ThreadedEngine, FinishedJobsFreeTheirSlotsWhileTheirBatchRuns) {
  // A worker takes a batch; the jobs it finished must give their slots back at once, not when
  // the batch's last (here blocked) job returns: the queue must take new jobs meanwhile.
  std::atomic<bool> release{false};
  std::atomic<int> done{0};
  Engine engine;
  auto q = engine.queue<int>("q", QueueOptions{.capacity = 16});
  q.process({.concurrency = 1}, [&](Job<int>& j) {
    if (j.data() == 15) {
      while (!release.load())
        std::this_thread::yield();
    }
    done.fetch_add(1);
  });
  // Destroyed before the engine, whatever assertion returns early: the blocked handler must end.
  struct ReleaseOnExit {
    std::atomic<bool>& flag;
    ~ReleaseOnExit() { flag.store(true); }
  } release_on_exit{release};
  std::vector<int> warm(16, 0);  // fast handlers back to back: the worker batches
  ASSERT_EQ(q.add_bulk("warm", std::span<int>(warm)).status, AddStatus::added);
  ASSERT_TRUE(eventually([&] { return done.load() == 16; }));
  std::vector<int> batch(16);
  for (int i = 0; i < 16; ++i)
    batch[static_cast<std::size_t>(i)] = i;
  ASSERT_EQ(q.add_bulk("batch", std::span<int>(batch)).status, AddStatus::added);
  ASSERT_TRUE(eventually([&] { return done.load() == 16 + 15; }));
  // 15 slots are free again although job 15 still runs.
  EXPECT_EQ(q.add("more", 99).status, AddStatus::added);
  release.store(true);
  ASSERT_TRUE(eventually([&] { return done.load() == 16 + 16 + 1; }));
}

}  // namespace
}  // namespace rail
