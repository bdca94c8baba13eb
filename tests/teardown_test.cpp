// Teardown: what the way out of a server does to jobs and to the calls still waiting on them.
// Threaded engines, real time; each wait is bounded by a watchdog, so a hang fails the test.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <latch>
#include <thread>
#include <vector>

#include "rail/rail.hpp"
#include "support/watchdog.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;

/// One running job held by its handler until release(), four waiting behind it, one delayed
/// for an hour: the situation a server is in when an exception unwinds past its engine.
struct HeldQueue {
  Engine engine;
  Queue<int> q = engine.declare_queue<int>("held", {});
  std::latch started{1};
  std::promise<void> go;
  std::shared_future<void> release_future = go.get_future().share();

  HeldQueue() {
    q.process({.concurrency = 1}, [this](Job<int>& j) {
      if (j.data() == 0) {
        started.count_down();
        release_future.wait();
      }
    });
    for (int i = 0; i < 5; ++i)
      (void)q.add("job", i);
    (void)q.add("later", 9, JobOptions{.delay = 1h});
    started.wait();
  }
  void release() { go.set_value(); }
};

TEST(Teardown, WaitIdleAfterShutdownLeftJobsUnstartedReturnsFalse) {
  test::Watchdog watchdog(60s, "DrainAfterShutdownLeftJobsUnstartedReturnsFalse");
  HeldQueue h;
  h.release();
  const ShutdownReport report = h.engine.shutdown(10s);
  ASSERT_FALSE(report.not_started.empty()) << "the delayed job at least never started";
  EXPECT_FALSE(h.q.wait_idle()) << "nothing will ever run what is left";
  EXPECT_FALSE(h.q.wait_idle(1s));
}

TEST(Teardown, AWaitIdleAlreadyWaitingWhenShutdownBeginsReturnsFalse) {
  test::Watchdog watchdog(60s, "ADrainAlreadyWaitingWhenShutdownBeginsReturnsFalse");
  HeldQueue h;
  std::atomic<int> drained{-1};
  std::thread waiter([&] { drained = h.q.wait_idle() ? 1 : 0; });
  std::this_thread::sleep_for(20ms);  // the waiter is (most likely) inside wait_idle() by now
  std::thread stopper([&] { (void)h.engine.shutdown(10s); });
  std::this_thread::sleep_for(20ms);
  h.release();  // the running job ends; four waiting and one delayed are left unstarted
  stopper.join();
  waiter.join();
  EXPECT_EQ(drained.load(), 0);
}

TEST(Teardown, WaitIdleStillWaitsForARunningHandlerAfterShutdownBegan) {
  // Only what can never start makes wait_idle() give up: a handler that runs on is waited for, and
  // a queue whose last job ends after shutdown began drains.
  test::Watchdog watchdog(60s, "DrainStillWaitsForARunningHandlerAfterShutdownBegan");
  Engine engine;
  auto q = engine.declare_queue<int>("q", {});
  std::latch started{1};
  std::promise<void> go;
  q.process({.concurrency = 1}, [&](Job<int>&) {
    started.count_down();
    go.get_future().wait();
  });
  (void)q.add("only", 1);
  started.wait();
  std::atomic<int> drained{-1};
  std::thread waiter([&] { drained = q.wait_idle() ? 1 : 0; });
  std::thread stopper([&] { (void)engine.shutdown(10s); });
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(drained.load(), -1) << "the handler still runs: wait_idle() waits";
  go.set_value();
  stopper.join();
  waiter.join();
  EXPECT_EQ(drained.load(), 1);
}

// Producers add flat out while shutdown begins. An add either answers shutting_down or its job
// is in the report (never started: the queue has no processor) and its waiter hears the end: an
// add that had passed the accepting check when shutdown collected the report used to publish
// its job after it, answering `added` for a job nobody reported and whose handle never ended.
TEST(Teardown, AnAddRacingShutdownIsReportedOrAnsweredShuttingDown) {
  const test::Watchdog watchdog(240s, "AnAddRacingShutdownIsReportedOrAnsweredShuttingDown");
  constexpr int kProducers = 3;
  for (int round = 0; round < 300; ++round) {
    Engine engine;
    auto q = engine.declare_queue<int>("q", QueueOptions{.capacity = 1 << 16});
    std::atomic<int> running{0};
    std::vector<std::vector<JobHandle<>>> handles(kProducers);
    std::vector<std::thread> producers;
    for (int p = 0; p < kProducers; ++p)
      producers.emplace_back([&, p] {
        running.fetch_add(1);
        for (int i = 0;; ++i) {
          JobHandle<> h = q.add_tracked("job", i);
          if (h.added().status == AddStatus::shutting_down) return;
          if (h.added().status == AddStatus::full) {  // a slow machine: wait for shutdown
            std::this_thread::yield();
            continue;
          }
          ASSERT_EQ(h.added().status, AddStatus::added);
          handles[p].push_back(std::move(h));
        }
      });
    while (running.load() < kProducers)
      std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::microseconds(round % 50));
    const ShutdownReport report = engine.shutdown(0s);
    for (auto& t : producers)
      t.join();
    std::vector<JobId> reported;
    for (const auto& j : report.not_started)
      reported.push_back(j.id);
    std::sort(reported.begin(), reported.end());
    std::size_t added = 0;
    for (auto& hs : handles)
      for (auto& h : hs) {
        ++added;
        ASSERT_TRUE(std::binary_search(reported.begin(), reported.end(), h.id()))
            << "round " << round << ": job " << h.id() << " was added but not reported";
        const auto end = h.wait_for(10s);
        ASSERT_TRUE(end.has_value())
            << "round " << round << ": job " << h.id() << "'s waiter never heard of the shutdown";
        EXPECT_EQ(end->status, JobStatus::unknown);
      }
    ASSERT_EQ(reported.size(), added) << "round " << round;
  }
}

// Shutdown from an observer of an add, on the adding thread: shutdown does not wait for the add
// it is called from (that would deadlock), and both return.
TEST(Teardown, ShutdownFromAnObserverOfAnAddOnThatThreadReturns) {
  const test::Watchdog watchdog(60s, "ShutdownFromAnObserverOfAnAddOnThatThreadReturns");
  Engine engine;
  auto q = engine.declare_queue<int>("q", {});
  std::atomic<bool> shut{false};
  engine.on_event([&](const Event& e) {
    if (e.kind == EventKind::added && !shut.exchange(true)) (void)engine.shutdown(0s);
  });
  (void)q.add("job", 1);  // added (it was past the check) or shutting_down: either returns
  EXPECT_TRUE(shut.load());
  EXPECT_EQ(q.add("job", 2).status, AddStatus::shutting_down);
}

// An observer of an add that blocks holds that add inside the gate: shutdown waits for it only
// up to its bound (max(grace, 1 s)), then reports without it.
TEST(Teardown, AnAddHeldByABlockingObserverDelaysShutdownOnlyUpToItsBound) {
  const test::Watchdog watchdog(60s, "AnAddHeldByABlockingObserverDelaysShutdownOnlyUpToItsBound");
  Engine engine;
  auto q = engine.declare_queue<int>("q", {});
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> inside{false};
  engine.on_event([&](const Event& e) {
    if (e.kind != EventKind::added) return;
    inside.store(true);
    released.wait();
  });
  std::thread adder([&] { (void)q.add("job", 1); });
  while (!inside.load())
    std::this_thread::yield();
  const auto t0 = std::chrono::steady_clock::now();
  (void)engine.shutdown(0s);
  const auto took = std::chrono::steady_clock::now() - t0;
  release.set_value();
  adder.join();
  EXPECT_GE(took, 900ms) << "shutdown did not wait for the add in progress";
  EXPECT_LT(took, 30s);
}

}  // namespace
}  // namespace rail
