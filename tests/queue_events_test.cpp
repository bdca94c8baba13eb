// Queue-level lifecycle: the paused / resumed / idle events (inline engine, manual clock) and
// Queue::pause_and_wait (threaded: it returns only once no handler of the queue runs, stale ones
// included; its would_deadlock rule). Threaded waits poll for an end state with a deadline; no
// sleep decides an outcome.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "rail/rail.hpp"
#include "support/eventually.hpp"
#include "support/inline_engine.hpp"
#include "support/sanitized.hpp"
#include "support/watchdog.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;
using test::eventually;

// --- events, inline ------------------------------------------------------------------------------

struct QueueEvents : test::InlineEngine {
  Queue<int> q = engine.declare_queue<int>("q", {});
  std::vector<std::string> queue_of;  // the `queue` of every queue-level event, in order
  void SetUp() override {
    InlineEngine::SetUp();
    engine.on_event([this](const Event& e) {
      if (e.job_id == 0 && (e.kind == EventKind::paused || e.kind == EventKind::resumed ||
                            e.kind == EventKind::idle))
        queue_of.push_back(std::string(e.queue));
    });
  }
  std::vector<EventKind> kinds() const {
    std::vector<EventKind> out;
    for (const auto& e : events)
      out.push_back(e.kind);
    return out;
  }
};

TEST_F(QueueEvents, PauseAndResumeEachRaiseOneEventPerChangeOfState) {
  q.pause();
  q.pause();  // already paused: silent
  clock.advance(1s);
  q.resume();
  q.resume();  // already running: silent
  EXPECT_EQ(kinds(), (std::vector<EventKind>{EventKind::paused, EventKind::resumed}));
  EXPECT_EQ(first(EventKind::paused).job_id, 0u);
  EXPECT_EQ(since_start(first(EventKind::resumed)), 1s);
  EXPECT_EQ(queue_of, (std::vector<std::string>{"q", "q"}));
}

TEST_F(QueueEvents, IdleFollowsTheLastJobsEndOncePerTransitionToIdle) {
  q.process({}, [](Job<int>&) {});
  (void)q.add("a", 1);
  (void)q.add("b", 2);
  engine.run_until_idle();
  ASSERT_EQ(count(EventKind::idle), 1u);
  EXPECT_EQ(kinds().back(), EventKind::idle);  // after both completions
  EXPECT_EQ(count(EventKind::completed), 2u);
  engine.run_until_idle();  // still idle: no new transition
  EXPECT_EQ(count(EventKind::idle), 1u);
  (void)q.add("c", 3);
  engine.run_until_idle();
  EXPECT_EQ(count(EventKind::idle), 2u);  // idle again after new work
  EXPECT_EQ(queue_of, (std::vector<std::string>{"q", "q"}));
}

TEST_F(QueueEvents, IdleWaitsForADelayedRetry) {
  int runs = 0;
  q.process({}, [&](Job<int>&) { return ++runs == 1 ? Outcome::retry("once") : Outcome::done(); });
  (void)q.add("a", 1, JobOptions{.max_attempts = 2, .backoff = Backoff::fixed(1s)});
  engine.run_until_idle();
  EXPECT_EQ(count(EventKind::idle), 0u);  // the retry waits on the wheel: not idle
  clock.advance(1s);
  engine.run_until_idle();
  ASSERT_EQ(count(EventKind::idle), 1u);
  EXPECT_EQ(since_start(first(EventKind::idle)), 1s);
}

TEST_F(QueueEvents, CancellingTheLastDelayedJobMakesTheQueueIdle) {
  q.process({}, [](Job<int>&) {});
  const JobId id = q.add("a", 1, JobOptions{.delay = 1h}).id;
  engine.run_until_idle();
  EXPECT_EQ(count(EventKind::idle), 0u);
  ASSERT_TRUE(q.cancel(id));  // no worker will look: cancel itself notices
  EXPECT_EQ(count(EventKind::idle), 1u);
  EXPECT_EQ(kinds().back(), EventKind::idle);
}

TEST_F(QueueEvents, APausedQueueHoldingJobsIsNotIdleUntilItRunsThem) {
  q.process({}, [](Job<int>&) {});
  q.pause();
  (void)q.add("a", 1);
  engine.run_until_idle();
  EXPECT_EQ(count(EventKind::idle), 0u);
  q.resume();
  engine.run_until_idle();
  EXPECT_EQ(kinds(),
            (std::vector<EventKind>{EventKind::paused, EventKind::added, EventKind::resumed,
                                    EventKind::started, EventKind::completed, EventKind::idle}));
}

TEST_F(QueueEvents, AQueueThatNeverHadWorkIsNeverIdle) {
  auto other = engine.declare_queue<int>("other", {});
  other.process({}, [](Job<int>&) {});
  q.process({}, [](Job<int>&) {});
  (void)q.add("a", 1);
  engine.run_until_idle();
  engine.run_until_idle();
  EXPECT_EQ(queue_of, (std::vector<std::string>{"q"}));
}

TEST(LogObserverLines, PausedAndResumedPrintAndIdlePrintsWhenVerbose) {
  ManualClock clock;
  Event e;
  e.queue = "orders";
  e.kind = EventKind::paused;
  EXPECT_EQ(format_event(e, clock, {.emoji = false}),
            "[00:00:00.000] PAUSED queue orders: no new job starts");
  e.kind = EventKind::resumed;
  EXPECT_EQ(format_event(e, clock, {.emoji = false}), "[00:00:00.000] RESUMED queue orders");
  e.kind = EventKind::idle;
  EXPECT_EQ(format_event(e, clock, {.emoji = false}), "");
  EXPECT_EQ(format_event(e, clock, {.emoji = false, .verbose = true}),
            "[00:00:00.000] IDLE queue orders: nothing waiting, delayed or running");
  EXPECT_EQ(to_string(EventKind::idle), "idle");
}

// --- pause_and_wait, inline --------------------------------------------------------------------

TEST_F(QueueEvents, PauseAndWaitOnAnInlineEngineReturnsAtOnceOutsideAHandler) {
  int runs = 0;
  q.process({}, [&](Job<int>&) { ++runs; });
  (void)q.add("a", 1);
  EXPECT_TRUE(q.pause_and_wait(0s));
  EXPECT_TRUE(q.paused());
  engine.run_until_idle();
  EXPECT_EQ(runs, 0);
  EXPECT_EQ(count(EventKind::paused), 1u);
}

TEST_F(QueueEvents, PauseAndWaitFromItsOwnHandlerThrowsWouldDeadlockWithoutPausing) {
  int code = -1;
  q.process({}, [&](Job<int>&) {
    try {
      (void)q.pause_and_wait(1s);
      code = 0;
    } catch (const Error& err) {
      code = static_cast<int>(err.code());
    }
  });
  (void)q.add("a", 1);
  engine.run_until_idle();
  EXPECT_EQ(code, static_cast<int>(ErrorCode::would_deadlock));
  EXPECT_FALSE(q.paused());
  EXPECT_EQ(count(EventKind::paused), 0u);
}

// --- pause_and_wait, threaded --------------------------------------------------------------------

/// Gate: handlers hold on it until it opens. Declare it before the engine, whose destructor
/// waits for the handlers; Open opens it however the test leaves.
struct Gate {
  std::atomic<bool> open{false};
  std::atomic<int> running{0};
  void hold() {
    running.fetch_add(1);
    (void)eventually([&] { return open.load(); }, 120s);
    running.fetch_sub(1);
  }
};
struct Open {
  Gate& gate;
  ~Open() { gate.open.store(true); }
};

TEST(PauseAndWait, ReturnsOnlyOnceTheRunningHandlersHaveReturned) {
  test::Watchdog watchdog(120s, "ReturnsOnlyOnceTheRunningHandlersHaveReturned");
  Gate gate;
  std::atomic<int> returned{0};
  Engine engine;
  Open open{gate};
  auto q = engine.declare_queue<int>("q", {});
  q.process({.concurrency = 4}, [&](Job<int>&) {
    gate.hold();
    returned.fetch_add(1);  // before the handler returns: counted by the time it has
  });
  for (int i = 0; i < 8; ++i)
    (void)q.add("job", i);
  ASSERT_TRUE(eventually([&] { return gate.running.load() == 4; }));
  std::atomic<int> returned_at_return{-1};
  std::atomic<bool> calling{false};
  std::thread pauser([&] {
    calling.store(true);
    const bool drained = q.pause_and_wait();
    returned_at_return.store(drained ? returned.load() : -2);
  });
  ASSERT_TRUE(eventually([&] { return calling.load(); }));
  std::this_thread::sleep_for(20ms);  // lets the pauser wait; decides nothing
  gate.open.store(true);
  pauser.join();
  EXPECT_EQ(returned_at_return.load(), 4) << "returned before the running handlers did";
  EXPECT_TRUE(q.paused());
  EXPECT_EQ(q.counts().waiting, 4u);  // the other four never started
  EXPECT_EQ(q.counts().active, 0u);
  q.resume();
  EXPECT_TRUE(q.wait_idle(60s));
  EXPECT_EQ(returned.load(), 8);
}

TEST(PauseAndWait, TimesOutWhileAHandlerRunsAndTheQueueStaysPaused) {
  test::Watchdog watchdog(120s, "TimesOutWhileAHandlerRunsAndTheQueueStaysPaused");
  Gate gate;
  Engine engine;
  Open open{gate};
  auto q = engine.declare_queue<int>("q", {});
  q.process({}, [&](Job<int>&) { gate.hold(); });
  (void)q.add("job", 1);
  ASSERT_TRUE(eventually([&] { return gate.running.load() == 1; }));
  EXPECT_FALSE(q.pause_and_wait(20ms));  // the handler cannot return before the gate opens
  EXPECT_TRUE(q.paused());
  gate.open.store(true);
  EXPECT_TRUE(q.pause_and_wait(60s));
  EXPECT_EQ(gate.running.load(), 0);
}

TEST(PauseAndWait, WaitsForAHandlerWhoseLeaseLapsed) {
  test::Watchdog watchdog(120s, "WaitsForAHandlerWhoseLeaseLapsed");
  Gate gate;
  std::atomic<int> stalled{0};
  ManualClock clock;
  Engine engine({.clock = &clock});
  Open open{gate};
  engine.on_event([&](const Event& e) { stalled += e.kind == EventKind::stalled; });
  auto q = engine.declare_queue<int>("q", {.visibility_timeout = 1s});
  std::atomic<int> starts{0};
  q.process({}, [&](Job<int>&) {
    if (starts.fetch_add(1) == 0) gate.hold();  // the first delivery overruns its lease
  });
  (void)q.add("job", 1);
  ASSERT_TRUE(eventually([&] { return gate.running.load() == 1; }));
  clock.advance(2s);
  ASSERT_TRUE(eventually([&] { return stalled.load() == 1; }));  // redelivered: waiting again
  EXPECT_FALSE(q.pause_and_wait(20ms));                          // the stale handler still runs
  gate.open.store(true);
  EXPECT_TRUE(q.pause_and_wait(60s));
  EXPECT_EQ(gate.running.load(), 0);
  EXPECT_EQ(starts.load(), 1);  // the redelivery did not start: paused
  q.resume();
  EXPECT_TRUE(eventually([&] { return starts.load() == 2; }));
}

// Under load (a producer, 6 workers on 2 cores, short handlers), repeated: when pause_and_wait
// returns true no handler is running, and none starts before resume(). A worker that took a job
// just before the pause is the case it must wait for.
TEST(PauseAndWait, NoHandlerRunsOrStartsOnceItReturnedUnderLoad) {
  test::Watchdog watchdog(300s, "NoHandlerRunsOrStartsOnceItReturnedUnderLoad");
#ifdef RAIL_SANITIZED
  constexpr int kRounds = 60;
#else
  constexpr int kRounds = 400;
#endif
  std::atomic<int> in_handler{0};
  std::atomic<std::uint64_t> entries{0};
  std::atomic<bool> stop{false};
  Engine engine;
  auto q = engine.declare_queue<int>("q", {.capacity = 1024});
  q.process({.concurrency = 6}, [&](Job<int>&) {
    entries.fetch_add(1);
    in_handler.fetch_add(1);
    for (int i = 0; i < 50; ++i)
      std::atomic_signal_fence(std::memory_order_seq_cst);  // a little work
    in_handler.fetch_sub(1);
  });
  std::thread producer([&] {
    while (!stop.load()) {
      if (q.add("job", 1).status != AddStatus::added) std::this_thread::yield();
    }
  });
  int violations = 0;
  for (int round = 0; round < kRounds; ++round) {
    ASSERT_TRUE(q.pause_and_wait(60s)) << "round " << round;
    const int running = in_handler.load();
    const std::uint64_t at_return = entries.load();
    for (int i = 0; i < 20; ++i)
      std::this_thread::yield();  // time for a late start to show; it decides nothing alone
    if (running != 0 || entries.load() != at_return) ++violations;
    q.resume();
    const std::uint64_t resumed_at = entries.load();
    (void)eventually([&] { return entries.load() > resumed_at + 8; }, 10s);
  }
  stop.store(true);
  producer.join();
  EXPECT_EQ(violations, 0);
}

TEST(PauseAndWait, FromATimerObserverThrowsWouldDeadlock) {
  test::Watchdog watchdog(60s, "FromATimerObserverThrowsWouldDeadlock");
  ManualClock clock;
  std::atomic<int> code{-1};
  std::atomic<int> observed{0};
  Engine engine({.clock = &clock});
  auto q = engine.declare_queue<int>("q", {});
  engine.on_event([&](const Event& e) {
    if (e.kind != EventKind::retry_due) return;
    try {
      (void)q.pause_and_wait(1h);
      code = 0;
    } catch (const Error& err) {
      code = static_cast<int>(err.code());
    }
    observed.fetch_add(1);  // last: nothing of this frame is touched after it
  });
  q.process({}, [](Job<int>&) {});
  (void)q.add("a", 1, JobOptions{.delay = 1s});
  clock.advance(1s);
  ASSERT_TRUE(eventually([&] { return observed.load() == 1 && q.counts().completed == 1; }));
  EXPECT_EQ(code.load(), static_cast<int>(ErrorCode::would_deadlock));
  EXPECT_FALSE(q.paused());
}

// `idle` is raised by the worker that ran out of jobs, as part of its queue's work: an
// observer there waiting for the queue's handlers would wait for that very worker.
TEST(PauseAndWait, AnIdleObserverOnTheQueuesWorkerGetsWouldDeadlock) {
  test::Watchdog watchdog(60s, "ADrainedObserverOnTheQueuesWorkerGetsWouldDeadlock");
  std::atomic<int> code{-1};
  std::atomic<int> observed{0};
  Engine engine;
  auto q = engine.declare_queue<int>("q", {});
  engine.on_event([&](const Event& e) {
    if (e.kind != EventKind::idle || observed.load() != 0) return;
    try {
      (void)q.pause_and_wait(1h);
      code = 0;
    } catch (const Error& err) {
      code = static_cast<int>(err.code());
    }
    observed.fetch_add(1);
  });
  q.process({}, [](Job<int>&) {});
  (void)q.add("a", 1);
  ASSERT_TRUE(eventually([&] { return observed.load() == 1; }));
  EXPECT_EQ(code.load(), static_cast<int>(ErrorCode::would_deadlock));
}

// Threaded idle: oversubscribed workers end each batch's last jobs at about the same moment;
// every batch is followed by exactly one `idle` (one missed would stall the wait below, one
// too many shows in the final count).
TEST(IdleThreaded, FiresOnceAfterEachBatchWhileOversubscribedWorkersEndItsLastJobs) {
  test::Watchdog watchdog(300s, "FiresOnceAfterEachBatchWhileOversubscribedWorkersEndItsLastJobs");
#ifdef RAIL_SANITIZED
  constexpr int kRounds = 40;
#else
  constexpr int kRounds = 300;
#endif
  std::atomic<int> drained{0};
  Engine engine;
  engine.on_event([&](const Event& e) { drained += e.kind == EventKind::idle; });
  auto q = engine.declare_queue<int>("q", {});
  q.process({.concurrency = 6}, [](Job<int>&) {});
  std::vector<int> batch(24, 1);
  for (int round = 0; round < kRounds; ++round) {
    q.pause();  // the batch becomes ready at once on resume: one transition to idle per round
    ASSERT_EQ(q.add_bulk("job", std::span<int>(batch)).count, batch.size());
    q.resume();
    ASSERT_TRUE(eventually([&] { return drained.load() >= round + 1; }))
        << "round " << round << ": no drained after the batch ended";
  }
  ASSERT_TRUE(q.wait_idle(60s));
  EXPECT_EQ(q.counts().completed, static_cast<std::uint64_t>(kRounds) * batch.size());
  (void)engine.shutdown(60s);  // every worker has exited: nothing more can be raised
  EXPECT_EQ(drained.load(), kRounds);
}

}  // namespace
}  // namespace rail
