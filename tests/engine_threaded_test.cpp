// Threaded engines: worker pools, the timer thread with a manual clock, blocking overflow,
// shutdown with running handlers. Waits poll for an end state with a deadline; no sleep decides
// an outcome.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "rail/rail.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;

template <class Pred>
bool eventually(Pred pred, std::chrono::seconds limit = 30s) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

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

}  // namespace
}  // namespace rail
