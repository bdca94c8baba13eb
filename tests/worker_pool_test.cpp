// The engine's shared worker pool (WorkerOptions::shared, EngineOptions.workers): queues on it
// run on the pool's threads only, each within its share; a queue whose handlers hang or whose
// downstream is stalled does not take the pool from the others; pause_and_wait, leases and
// shutdown behave as on a dedicated pool; a pool that cannot start its threads fails cleanly.
// Threaded tests wait with eventually() (bounded), never with a sleep that decides the outcome;
// timed behaviour (a lease) uses the manual clock.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "rail/rail.hpp"
#include "support/behind_long_handler.hpp"
#include "support/downstream_options.hpp"
#include "support/eventually.hpp"
#include "support/refuse_thread.hpp"
#include "support/release_on_exit.hpp"
#include "support/watchdog.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;
using test::eventually;
using test::ReleaseOnExit;

/// numbered(prefix, i): "q7" for ("q", 7).
std::string numbered(const char* prefix, int i) {
  std::string name(prefix);
  name += std::to_string(i);
  return name;
}

/// Hang: handlers that stay inside until released (bounded), counting how many came in.
/// Declare it before the engine and a test::ReleaseOnExit on `release` after it, so the handlers
/// return before the engine joins the pool they run on, whatever assertion returns early.
struct Hang {
  void operator()() {
    in.fetch_add(1);
    (void)eventually([&] { return release.load(); }, 60s);
  }
  std::atomic<bool> release{false};
  std::atomic<int> in{0};
};

/// HighWater: the most handlers inside at once (an atomic high-water mark).
struct HighWater {
  std::atomic<int> inside{0}, most{0};
  void enter() {
    const int now = inside.fetch_add(1) + 1;
    int seen = most.load();
    while (now > seen && !most.compare_exchange_weak(seen, now)) {
    }
  }
  void leave() { inside.fetch_sub(1); }
};

TEST(WorkerPool, TwentyQueuesRunOnThePoolsThreadsOnly) {
  Engine engine({.workers = 2});
  std::mutex mu;
  std::set<std::thread::id> threads;
  std::atomic<int> done{0};
  std::vector<Queue<int>> queues;
  for (int i = 0; i < 20; ++i) {
    queues.push_back(engine.declare_queue<int>(numbered("q", i), QueueOptions{.capacity = 1024}));
    queues.back().process(WorkerOptions::shared(), [&](Job<int>&) {
      {
        const std::lock_guard lock(mu);
        threads.insert(std::this_thread::get_id());
      }
      done.fetch_add(1);
    });
  }
  for (int round = 0; round < 50; ++round)
    for (auto& q : queues)
      ASSERT_EQ(q.add("job", round).status, AddStatus::added);
  // The handler's count is bumped before its job completes: wait for the completions themselves
  // (counts() is not a snapshot, but each queue's completed count only grows).
  ASSERT_TRUE(eventually([&] {
    return std::all_of(queues.begin(), queues.end(),
                       [](Queue<int>& q) { return q.counts().completed == 50; });
  })) << done.load();
  EXPECT_EQ(done.load(), 1000);
  const std::lock_guard lock(mu);
  EXPECT_LE(threads.size(), 2u) << "20 queues, 2 pool threads: no queue has threads of its own";
}

TEST(WorkerPool, AJobQueuedBehindALongHandlerOfTheDutyHolderStartsOnAnotherWorker) {
  // As with a dedicated pool (support/behind_long_handler.hpp): the pool's spinner keeps its duty
  // through a job after fast ones (WorkerPool::spin), and the other worker's watch
  // (WorkerPool::sleep) starts the job queued behind it, in the same queue (even rounds) or in
  // another one (odd rounds).
  const test::Watchdog watchdog(240s, "AJobQueuedBehindALongHandlerOfTheDutyHolderStarts");
  test::BehindLongHandler scenario;
  Engine engine({.workers = 2});
  auto a = engine.declare_queue<int>("a", {.capacity = 4096});
  auto b = engine.declare_queue<int>("b", {.capacity = 16});
  a.process(WorkerOptions::shared(), [&](Job<int>& j) { scenario.handle(j.data()); });
  b.process(WorkerOptions::shared(), [&](Job<int>& j) { scenario.handle(j.data()); });
  scenario.run([&](int round, int kind) {
    auto& q = kind == test::BehindLongHandler::kAfter && round % 2 == 1 ? b : a;
    ASSERT_EQ(q.add("job", int{kind}).status, AddStatus::added);
  });
}

TEST(WorkerPool, ABacklogBehindALongHandlerOfTheDutyHolderRunsOnSeveralWorkers) {
  // The long handler in queue a, the backlog in queue b: the pool's sleepers share it
  // (support/behind_long_handler.hpp).
  const test::Watchdog watchdog(240s, "ABacklogBehindALongHandlerOfTheDutyHolderRuns");
  test::BacklogBehindLongHandler scenario;
  Engine engine({.workers = 3});
  const ReleaseOnExit release_on_exit{scenario.release};
  auto a = engine.declare_queue<int>("a", {.capacity = 4096});
  auto b = engine.declare_queue<int>("b", {.capacity = 4096});
  a.process(WorkerOptions::shared(), [&](Job<int>& j) { scenario.handle(j.data()); });
  b.process(WorkerOptions::shared(), [&](Job<int>& j) { scenario.handle(j.data()); });
  scenario.run([&](int kind) {
    auto& q = kind == test::BacklogBehindLongHandler::kBacklog ? b : a;
    ASSERT_EQ(q.add("job", int{kind}).status, AddStatus::added);
  });
}

TEST(WorkerPool, AQueuesShareCapsHowManyPoolWorkersRunItsJobs) {
  // A pool of 4; queue "one" may use 1 of them, "wide" all. Handlers stay inside until two of
  // "wide" are in at once (bounded), so "one" has every chance to exceed its share.
  const test::Watchdog watchdog(120s, "AQueuesShareCapsHowManyPoolWorkersRunItsJobs");
  Engine engine({.workers = 4});
  HighWater one_hw, wide_hw;
  auto one = engine.declare_queue<int>("one", QueueOptions{});
  auto wide = engine.declare_queue<int>("wide", QueueOptions{});
  one.process(WorkerOptions::shared(1), [&](Job<int>&) {
    one_hw.enter();
    std::this_thread::yield();
    one_hw.leave();
  });
  wide.process(WorkerOptions::shared(), [&](Job<int>&) {
    wide_hw.enter();
    (void)eventually([&] { return wide_hw.most.load() >= 2; }, 5s);
    wide_hw.leave();
  });
  for (int i = 0; i < 2000; ++i) {
    ASSERT_EQ(one.add("a", i).status, AddStatus::added);
    if (i % 20 == 0) {
      ASSERT_EQ(wide.add("b", i).status, AddStatus::added);
    }
  }
  ASSERT_TRUE(
      eventually([&] { return one.counts().completed == 2000 && wide.counts().completed == 100; }));
  EXPECT_EQ(one_hw.most.load(), 1) << "share 1: never two of its handlers at once";
  EXPECT_GE(wide_hw.most.load(), 2) << "no share: several pool workers run it";
}

TEST(WorkerPool, HungHandlersOfOneQueueLeaveThePoolToTheOthers) {
  // Pool of 3; "slow" may use 2 of them and both of its handlers hang. "fast" still runs all of
  // its jobs on the third worker.
  const test::Watchdog watchdog(120s, "HungHandlersOfOneQueueLeaveThePoolToTheOthers");
  Hang hung;
  Engine engine({.workers = 3});
  const ReleaseOnExit release_on_exit{hung.release};
  auto slow = engine.declare_queue<int>("slow", QueueOptions{});
  auto fast = engine.declare_queue<int>("fast", QueueOptions{});
  slow.process(WorkerOptions::shared(2), [&](Job<int>&) { hung(); });
  std::atomic<int> fast_done{0};
  fast.process(WorkerOptions::shared(), [&](Job<int>&) { fast_done.fetch_add(1); });
  for (int i = 0; i < 10; ++i)
    ASSERT_EQ(slow.add("hang", i).status, AddStatus::added);
  ASSERT_TRUE(eventually([&] { return hung.in.load() == 2; }));
  for (int i = 0; i < 5000; ++i)
    ASSERT_EQ(fast.add("quick", i).status, AddStatus::added);
  EXPECT_TRUE(eventually([&] { return fast_done.load() == 5000; })) << fast_done.load();
  EXPECT_EQ(hung.in.load(), 2) << "slow's share stayed at 2 while fast ran";
  hung.release.store(true);
  EXPECT_TRUE(eventually([&] { return slow.counts().completed == 10; }));
}

TEST(WorkerPool, AStalledDownstreamHoldsNoPoolWorker) {
  // Pool of 2. "payments" (downstream concurrency 1) hangs in its one permitted call; its other
  // jobs wait for the permit without a thread, so the second worker runs every email.
  const test::Watchdog watchdog(120s, "AStalledDownstreamHoldsNoPoolWorker");
  Hang charges;
  std::atomic<int> emails{0};
  Engine engine({.workers = 2});
  const ReleaseOnExit release_on_exit{charges.release};
  engine.declare_downstream("gateway", {.concurrency = 1});
  auto payments = engine.declare_queue<int>("payments", test::calling("gateway"));
  auto email = engine.declare_queue<int>("email", QueueOptions{});
  payments.process(WorkerOptions::shared(), [&](Job<int>&) { charges(); });
  email.process(WorkerOptions::shared(), [&](Job<int>&) { emails.fetch_add(1); });
  for (int i = 0; i < 20; ++i)
    ASSERT_EQ(payments.add("charge", i).status, AddStatus::added);
  ASSERT_TRUE(eventually([&] { return charges.in.load() == 1; }));
  for (int i = 0; i < 2000; ++i)
    ASSERT_EQ(email.add("send", i).status, AddStatus::added);
  EXPECT_TRUE(eventually([&] { return emails.load() == 2000; })) << emails.load();
  EXPECT_EQ(charges.in.load(), 1) << "the downstream let one call in";
  charges.release.store(true);
  EXPECT_TRUE(eventually([&] { return payments.counts().completed == 20; }));
}

TEST(WorkerPool, PauseAndWaitWaitsOnlyForTheQueuesOwnHandlers) {
  // A pool worker hangs in queue b's handler; pausing a (on the same pool) must not wait for it.
  // A pool of 3: b's second job (below) hangs a second worker, and a needs the third.
  const test::Watchdog watchdog(120s, "PauseAndWaitWaitsOnlyForTheQueuesOwnHandlers");
  Hang b_in;
  std::atomic<int> a_runs{0};
  Engine engine({.workers = 3});
  const ReleaseOnExit release_on_exit{b_in.release};
  auto a = engine.declare_queue<int>("a", QueueOptions{});
  auto b = engine.declare_queue<int>("b", QueueOptions{});
  a.process(WorkerOptions::shared(), [&](Job<int>&) { a_runs.fetch_add(1); });
  b.process(WorkerOptions::shared(), [&](Job<int>&) { b_in(); });
  ASSERT_EQ(b.add("hang", 0).status, AddStatus::added);
  ASSERT_TRUE(eventually([&] { return b_in.in.load() == 1; }));
  for (int i = 0; i < 100; ++i)
    ASSERT_EQ(a.add("x", i).status, AddStatus::added);
  EXPECT_TRUE(a.pause_and_wait(30s)) << "a's handlers are done or parked; b's do not count";
  const int runs = a_runs.load();
  for (int i = 0; i < 100; ++i)
    ASSERT_EQ(a.add("y", i).status, AddStatus::added);
  // Nothing of a starts while it is paused: b's second job (below) proves the free worker is
  // making rounds past a.
  ASSERT_EQ(b.add("after", 1).status, AddStatus::added);
  EXPECT_TRUE(eventually([&] { return b_in.in.load() == 2; }));
  EXPECT_EQ(a_runs.load(), runs);
  a.resume();
  EXPECT_TRUE(eventually([&] { return a.counts().completed == 200; }));
  b_in.release.store(true);
}

TEST(WorkerPool, ALapsedLeaseIsDeliveredAgainByAnotherPoolWorker) {
  // Manual clock: the first delivery hangs past its 1 s visibility timeout; the sweep redelivers
  // the job, another worker completes it, and the late outcome of the first is fenced off.
  const test::Watchdog watchdog(120s, "ALapsedLeaseIsDeliveredAgainByAnotherPoolWorker");
  ManualClock clock;
  std::atomic<bool> release{false};
  std::atomic<int> deliveries{0};
  Engine engine({.clock = &clock, .workers = 2});
  const ReleaseOnExit release_on_exit{release};
  auto q = engine.declare_queue<int>("q", QueueOptions{.visibility_timeout = 1s});
  q.process(WorkerOptions::shared(), [&](Job<int>& j) {
    deliveries.fetch_add(1);
    if (j.deliveries() == 1) (void)eventually([&] { return release.load(); }, 60s);
  });
  ASSERT_EQ(q.add("job", 1).status, AddStatus::added);
  ASSERT_TRUE(eventually([&] { return deliveries.load() == 1; }));
  clock.advance(2s);  // the lease lapses: delivered again
  EXPECT_TRUE(eventually([&] { return q.counts().completed == 1; }));
  EXPECT_EQ(deliveries.load(), 2);
  release.store(true);
  EXPECT_TRUE(eventually([&] { return q.counts().late_outcomes == 1; }));
  EXPECT_EQ(q.counts().completed, 1u);
}

TEST(WorkerPool, ShutdownReportsAHungPoolHandlerAndReturnsWithinGrace) {
  const test::Watchdog watchdog(120s, "ShutdownReportsAHungPoolHandlerAndReturnsWithinGrace");
  std::atomic<bool> release{false};
  {
    Engine engine({.workers = 2});
    auto q = engine.declare_queue<int>("q", QueueOptions{});
    std::atomic<int> in{0};
    q.process(WorkerOptions::shared(), [&](Job<int>& j) {
      if (j.data() == 0) {
        in.fetch_add(1);
        (void)eventually([&] { return release.load(); }, 60s);
      }
    });
    ASSERT_EQ(q.add("hang", 0).status, AddStatus::added);
    ASSERT_TRUE(eventually([&] { return in.load() == 1; }));
    const auto before = std::chrono::steady_clock::now();
    const ShutdownReport report = engine.shutdown(50ms);
    EXPECT_LT(std::chrono::steady_clock::now() - before, 20s);
    ASSERT_EQ(report.still_running.size(), 1u);
    release.store(true);  // the engine's destructor joins the pool once the handler returns
  }
}

TEST(WorkerPool, DedicatedAndSharedQueuesRunSideBySide) {
  Engine engine({.workers = 2});
  auto own = engine.declare_queue<int>("own", QueueOptions{});
  auto shared = engine.declare_queue<int>("shared", QueueOptions{});
  std::atomic<int> own_done{0}, shared_done{0};
  own.process({.concurrency = 2}, [&](Job<int>&) { own_done.fetch_add(1); });
  shared.process(WorkerOptions::shared(), [&](Job<int>&) { shared_done.fetch_add(1); });
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(own.add("a", i).status, AddStatus::added);
    ASSERT_EQ(shared.add("b", i).status, AddStatus::added);
  }
  EXPECT_TRUE(eventually([&] { return own_done.load() == 1000 && shared_done.load() == 1000; }));
}

TEST(WorkerPool, JobsAddedBeforeTheQueueJoinsThePoolRun) {
  Engine engine({.workers = 2});
  auto q = engine.declare_queue<int>("q", QueueOptions{});
  for (int i = 0; i < 100; ++i)
    ASSERT_EQ(q.add("early", i).status, AddStatus::added);
  std::atomic<int> done{0};
  q.process(WorkerOptions::shared(), [&](Job<int>&) { done.fetch_add(1); });
  EXPECT_TRUE(eventually([&] { return done.load() == 100; }));
}

TEST(WorkerPool, WaitIdleFromTheOnlyPoolWorkerOfAQueueOnThatPoolThrowsWouldDeadlock) {
  // Pool of 1: a's handler draining b (on the same pool) while b has a job would wait for its
  // own thread. With a second worker, b's jobs run there and the drain returns.
  const test::Watchdog watchdog(120s, "DrainFromTheOnlyPoolWorkerOfAQueueOnThatPoolThrows...");
  for (std::uint32_t workers : {1u, 2u}) {
    Engine engine({.workers = workers});
    auto a = engine.declare_queue<int>("a", QueueOptions{});
    auto b = engine.declare_queue<int>("b", QueueOptions{});
    b.process(WorkerOptions::shared(), [](Job<int>&) {});
    std::atomic<int> outcome{0};  // 1: drained, 2: would_deadlock, 3: anything else
    a.process(WorkerOptions::shared(), [&](Job<int>&) {
      // b's job, added here: on a pool of 1 it cannot run before the drain (the caller is the
      // only worker).
      if (b.add("x", 1).status != AddStatus::added) outcome.store(3);
      try {
        outcome.store(b.wait_idle(30s) ? 1 : 3);
      } catch (const Error& e) {
        outcome.store(e.code() == ErrorCode::would_deadlock ? 2 : 3);
      }
    });
    ASSERT_EQ(a.add("drain b", 1).status, AddStatus::added);
    ASSERT_TRUE(eventually([&] { return outcome.load() != 0; }));
    EXPECT_EQ(outcome.load(), workers == 1 ? 2 : 1) << workers << " pool workers";
    EXPECT_TRUE(eventually([&] { return b.counts().completed == 1; }));
  }
}

/// every_worker_waits(workers, wait): `workers` jobs of queue a each wait without a timeout (by
/// `wait`) for queue b, whose one job is delayed 1 s on a manual clock, from every worker of a
/// shared pool of `workers`. Returns how many waits threw Error(would_deadlock) before the clock
/// moved; checks that the rest returned once b's job ran, and the error's message.
int every_worker_waits(std::uint32_t workers, const std::function<void(Queue<int>&, JobId)>& wait) {
  ManualClock clock;
  // Before the engine, whose destructor joins the handlers that use them.
  std::atomic<std::uint32_t> in{0}, refused{0}, returned{0}, other{0};
  std::atomic<JobId> b_job{0};
  Engine engine({.clock = &clock, .workers = workers});
  auto a = engine.declare_queue<int>("a", QueueOptions{});
  auto b = engine.declare_queue<int>("b", QueueOptions{});
  b.process(WorkerOptions::shared(), [](Job<int>&) {});
  a.process(WorkerOptions::shared(), [&](Job<int>&) {
    in.fetch_add(1);
    (void)eventually([&] { return in.load() == workers; });  // every worker is here
    try {
      wait(b, b_job.load());
      returned.fetch_add(1);
    } catch (const Error& e) {
      const std::string what = e.what();
      const bool named = what.find("shared pool") != std::string::npos &&
                         what.find("queue 'b'") != std::string::npos &&
                         what.find(std::to_string(workers - 1) + " worker(s)") != std::string::npos;
      (e.code() == ErrorCode::would_deadlock && named ? refused : other).fetch_add(1);
      if (!named) ADD_FAILURE() << what;
    }
  });
  const AddReceipt later = b.add("later", 1, JobOptions{.delay = 1s});
  EXPECT_EQ(later.status, AddStatus::added);
  b_job.store(later.id);
  for (std::uint32_t i = 0; i < workers; ++i)
    EXPECT_EQ(a.add("wait for b", 1).status, AddStatus::added);
  // Every wait has failed, timed out or is blocked on b's delayed job: an unbounded one that
  // would take the last free worker failed.
  EXPECT_TRUE(
      eventually([&] { return refused.load() + other.load() >= 1 || returned.load() == workers; }));
  clock.advance(1s);  // b's job runs on the worker the failed wait freed; the others return
  EXPECT_TRUE(
      eventually([&] { return returned.load() + refused.load() + other.load() == workers; }));
  EXPECT_EQ(other.load(), 0u);
  EXPECT_TRUE(a.wait_idle(30s));
  return static_cast<int>(refused.load());
}

TEST(WorkerPool, AnUnboundedWaitIdleThatWouldLeaveThePoolNoFreeWorkerThrowsWouldDeadlock) {
  // Every pool worker in a handler draining b, whose job only the pool runs: without the guard
  // all of them wait forever. Exactly the wait that would take the last free worker fails.
  const test::Watchdog watchdog(120s, "AnUnboundedDrainThatWouldLeaveThePoolNoFreeWorker...");
  for (std::uint32_t workers : {2u, 3u})
    EXPECT_EQ(every_worker_waits(workers, [](Queue<int>& b, JobId) { EXPECT_TRUE(b.wait_idle()); }),
              1)
        << workers << " pool workers";
}

TEST(WorkerPool, AJobHandleWaitThatWouldLeaveThePoolNoFreeWorkerThrowsWouldDeadlock) {
  const test::Watchdog watchdog(120s, "AJobHandleWaitThatWouldLeaveThePoolNoFreeWorker...");
  for (std::uint32_t workers : {2u, 3u})
    EXPECT_EQ(every_worker_waits(workers,
                                 [](Queue<int>& b, JobId job) {
                                   EXPECT_EQ(b.track(job).wait().status, JobStatus::completed);
                                 }),
              1)
        << workers << " pool workers";
}

TEST(WorkerPool, WaitsThatNeedNotBlockAreNeverRefused) {
  // On a pool of one worker, its handler waits on a job of b that has ended and drains b when
  // it is idle: neither blocks, so neither is refused (only a wait about to block is counted).
  const test::Watchdog watchdog(120s, "WaitsThatNeedNotBlockAreNeverRefused");
  std::atomic<int> outcome{0};  // 1: both returned, 2: refused, 3: anything else
  Engine engine({.workers = 1});
  auto a = engine.declare_queue<int>("a", QueueOptions{});
  auto b = engine.declare_queue<int>("b", QueueOptions{});
  b.process(WorkerOptions::shared(), [](Job<int>&) {});
  const JobId done = b.add("x", 1).id;
  ASSERT_TRUE(b.wait_idle(30s));
  a.process(WorkerOptions::shared(), [&](Job<int>&) {
    try {
      const bool ok = b.track(done).wait().status == JobStatus::completed && b.wait_idle();
      outcome.store(ok ? 1 : 3);
    } catch (const Error& e) {
      outcome.store(e.code() == ErrorCode::would_deadlock ? 2 : 3);
    }
  });
  ASSERT_EQ(a.add("wait", 1).status, AddStatus::added);
  ASSERT_TRUE(eventually([&] { return outcome.load() != 0; }));
  EXPECT_EQ(outcome.load(), 1);
}

TEST(WorkerPool, BoundedWaitsFromEveryPoolWorkerAreNotRefused) {
  // A wait with a timeout frees its worker by itself: none is refused (drain(timeout) returns
  // false if b's job has not run by then).
  const test::Watchdog watchdog(120s, "BoundedWaitsFromEveryPoolWorkerAreNotRefused");
  EXPECT_EQ(every_worker_waits(2, [](Queue<int>& b, JobId) { EXPECT_FALSE(b.wait_idle(50ms)); }),
            0);
}

TEST(WorkerPool, InvalidPoolOptionsAreRejectedWithTheirName) {
  try {
    Engine engine({.workers = WorkerOptions::kMaxConcurrency + 1});
    FAIL() << "accepted EngineOptions.workers past kMaxConcurrency";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find("EngineOptions.workers"), std::string::npos) << e.what();
  }
  Engine engine({.workers = 1});
  auto q = engine.declare_queue<int>("q", QueueOptions{});
  try {
    q.process({.concurrency = 0}, [](Job<int>&) {});
    FAIL() << "a dedicated pool of 0 threads";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find("leave it unset for one thread"), std::string::npos)
        << e.what();
  }
  try {
    q.process({.concurrency = 1, .pool = static_cast<Pool>(7)}, [](Job<int>&) {});
    FAIL() << "an unknown pool";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find("pool"), std::string::npos) << e.what();
  }
  std::atomic<int> done{0};
  q.process(WorkerOptions::shared(), [&](Job<int>&) { done.fetch_add(1); });  // still possible
  ASSERT_EQ(q.add("x", 1).status, AddStatus::added);
  EXPECT_TRUE(eventually([&] { return done.load() == 1; }));
}

TEST(WorkerPool, APoolThatCannotStartThrowsResourcesAndALaterProcessStartsIt) {
  Engine engine({.workers = 2});
  auto q = engine.declare_queue<int>("q", QueueOptions{});
  std::atomic<int> done{0};
  auto handler = [&](Job<int>&) { done.fetch_add(1); };
  {
    const test::RefuseNthThread refuse(2);
    try {
      q.process(WorkerOptions::shared(), handler);
      FAIL() << "the pool started without its second thread";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::resources);
      EXPECT_NE(std::string(e.what()).find("shared worker pool"), std::string::npos) << e.what();
    }
  }
  ASSERT_EQ(q.add("x", 1).status, AddStatus::added);
  q.process(WorkerOptions::shared(), handler);
  EXPECT_TRUE(eventually([&] { return done.load() == 1; }));
}

TEST(WorkerPool, OversubscribedStressAccountsForEveryJob) {
  // 6 queues (shares 1, 2 and none) on a pool of 3, 4 producers, pauses, resumes and cancels at
  // random, on 2 cores: every job added ends completed or cancelled, exactly once.
  const test::Watchdog watchdog(300s, "OversubscribedStressAccountsForEveryJob");
  for (int round = 0; round < 3; ++round) {
    Engine engine({.seed = static_cast<std::uint64_t>(round), .workers = 3});
    std::vector<Queue<int>> queues;
    std::atomic<int> ran{0};
    HighWater hw[6];
    for (int i = 0; i < 6; ++i) {
      queues.push_back(engine.declare_queue<int>(numbered("q", i), QueueOptions{.capacity = 4096}));
      const std::optional<std::uint32_t> share =
          i % 3 == 2 ? std::nullopt : std::optional<std::uint32_t>(i % 3 + 1);
      queues.back().process(WorkerOptions::shared(share), [&, i](Job<int>&) {
        hw[i].enter();
        ran.fetch_add(1);
        hw[i].leave();
      });
    }
    std::atomic<int> added{0}, cancelled{0};
    std::vector<std::thread> producers;
    for (int p = 0; p < 4; ++p)
      producers.emplace_back([&, p] {
        std::mt19937 rng(static_cast<unsigned>(round * 10 + p));
        for (int k = 0; k < 3000; ++k) {
          auto& q = queues[rng() % queues.size()];
          const AddReceipt r = q.add("job", k);
          if (r.status != AddStatus::added) continue;
          added.fetch_add(1);
          switch (rng() % 64) {
            case 0:
              if (engine.cancel(r.id)) cancelled.fetch_add(1);
              break;
            case 1:
              q.pause();
              std::this_thread::yield();
              q.resume();
              break;
            default:
              break;
          }
        }
      });
    for (auto& t : producers)
      t.join();
    // A job cancelled while it runs ends cancelled after its handler returns: count ends, not
    // handler calls.
    auto ends = [&] {
      std::uint64_t completed = 0, cancels = 0;
      for (auto& q : queues) {
        const QueueCounts c = q.counts();
        completed += c.completed;
        cancels += c.cancelled;
      }
      return std::pair{completed, cancels};
    };
    ASSERT_TRUE(eventually([&] {
      const auto [completed, cancels] = ends();
      return completed + cancels == static_cast<std::uint64_t>(added.load());
    })) << "round "
        << round << ": " << ends().first << " completed + " << ends().second << " cancelled of "
        << added.load();
    const auto [completed, cancels] = ends();
    EXPECT_EQ(cancels, static_cast<std::uint64_t>(cancelled.load()));
    EXPECT_GE(static_cast<std::uint64_t>(ran.load()), completed);
    for (int i = 0; i < 6; ++i) {
      const int share = i % 3 == 2 ? 3 : i % 3 + 1;
      EXPECT_LE(hw[i].most.load(), share) << "queue " << i;
    }
  }
}

}  // namespace
}  // namespace rail
