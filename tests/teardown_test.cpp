// Teardown: what the way out of a server does to jobs and to the calls still waiting on them.
// Threaded engines, real time; each wait is bounded by a watchdog, so a hang fails the test.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <latch>
#include <thread>

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

}  // namespace
}  // namespace rail
