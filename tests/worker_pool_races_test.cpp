// The shared worker pool's races: a queue running dry on a turn's last job, a pool started
// while shutdown waits, each pinned as a regression test. Threaded tests wait with eventually()
// (bounded) or a bounded poll, never with a sleep that decides the outcome, and run under a
// Watchdog.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "rail/rail.hpp"
#include "support/eventually.hpp"
#include "support/sanitized.hpp"
#include "support/watchdog.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;
using test::eventually;

/// spin_until(pred, limit): eventually() without its 1 ms sleeps, for a test whose next step must
/// follow the awaited one within microseconds (while a pool worker still spins). Bounded.
template <class Pred>
bool spin_until(Pred pred, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

/// numbered(prefix, i): "q7" for ("q", 7).
std::string numbered(const char* prefix, int i) {
  std::string name(prefix);
  name += std::to_string(i);
  return name;
}

// A pool worker's turn ends after Dispatcher::kTurn (16) jobs. When the queue's last job is the
// turn's 16th, the turn ended with its last next_job successful, so it never saw the queue run
// dry, and the next turn found nothing visible and returned before looking: `idle` was never
// raised (a dedicated worker raises it as soon as next_job fails).
TEST(WorkerPoolRaces, IdleIsRaisedWhenTheQueueRunsDryOnTheLastJobOfATurn) {
  const test::Watchdog watchdog(60s, "DrainedIsRaisedWhenTheQueueRunsDryOnTheLastJobOfATurn");
  std::atomic<int> drained{0};
  Engine engine({.workers = 1});  // one worker: its turns take the jobs 16 at a time
  engine.on_event([&](const Event& e) { drained += e.kind == EventKind::idle; });
  auto q = engine.declare_queue<int>("q", QueueOptions{.capacity = 64});
  q.process(WorkerOptions::shared(), [](Job<int>&) {});
  std::vector<int> batch(16, 1);  // one turn's worth
  for (int round = 0; round < 3; ++round) {
    q.pause();  // the batch is ready at once on resume: a turn takes all 16
    ASSERT_EQ(q.add_bulk("job", std::span<int>(batch)).count, batch.size());
    q.resume();
    ASSERT_TRUE(eventually([&] { return drained.load() >= round + 1; }, 10s))
        << "round " << round << ": " << q.counts().completed << " completed, no drained";
  }
  EXPECT_EQ(q.counts().completed, 48u);
  EXPECT_EQ(drained.load(), 3) << "one per batch";
}

// Producers skip the wake-up while a pool worker spins on duty; the spinner, once it sees work,
// gives the duty up and makes a round. Jobs pushed to two queues during its duty were announced
// to nobody: if the spinner's round reached a's first and a's handler waited for b's job, that
// job waited for it too, with the pool's other worker asleep. Many idle members make the
// spinner's sweep slow enough for both pushes to land within one; b comes after a in member
// order, so the round (almost always) serves a first. A race: at beb42a1 about half the runs
// stalled a round (2 s in a's handler); none did in 30 runs with the fix.
TEST(WorkerPoolRaces, JobsPushedToTwoQueuesDuringTheSpinnersDutyWakeASleeper) {
  const test::Watchdog watchdog(120s, "JobsPushedToTwoQueuesDuringTheSpinnersDutyWakeASleeper");
#ifdef RAIL_SANITIZED
  constexpr int kRounds = 300;
#else
  constexpr int kRounds = 3000;
#endif
  Engine engine({.workers = 2});
  std::vector<Queue<int>> idle;
  for (int i = 0; i < 200; ++i) {
    idle.push_back(engine.declare_queue<int>(numbered("idle", i), QueueOptions{.capacity = 4}));
    idle.back().process(WorkerOptions::shared(), [](Job<int>&) {});
  }
  auto a = engine.declare_queue<int>("a", QueueOptions{.capacity = 4});
  auto b = engine.declare_queue<int>("b", QueueOptions{.capacity = 4});
  std::atomic<bool> b_ran{false};
  std::atomic<int> a_done{0}, stalled{0};
  a.process(WorkerOptions::shared(), [&](Job<int>&) {
    // Bounded: b's job needs the other worker, which a producer or the spinner must have woken.
    const auto until = std::chrono::steady_clock::now() + 2s;
    while (!b_ran.load() && std::chrono::steady_clock::now() < until)
      std::this_thread::yield();
    if (!b_ran.load()) stalled.fetch_add(1);
    a_done.fetch_add(1);
  });
  b.process(WorkerOptions::shared(), [&](Job<int>&) { b_ran.store(true); });
  for (int round = 0; round < kRounds && stalled.load() == 0; ++round) {
    b_ran.store(false);
    for (int k = round % 3; k > 0; --k)  // vary the moment of the pushes within the duty
      std::this_thread::yield();
    ASSERT_EQ(a.add("waits-for-b", round).status, AddStatus::added);
    ASSERT_EQ(b.add("b", round).status, AddStatus::added);
    // Not eventually(): its 1 ms sleep would let the spinner's duty (50 us) lapse every round.
    ASSERT_TRUE(spin_until([&] { return a_done.load() == round + 1; }, 10s)) << "round " << round;
  }
  EXPECT_EQ(stalled.load(), 0) << "b's job waited for a's handler while a pool worker slept";
}

// shutdown() stops the shared pool, waits for handlers, then joins the pool. A queue that
// started the pool meanwhile (its process() ran while shutdown waited for a handler: here that
// handler itself) got a pool that nobody stopped, and shutdown's join waited for its threads
// forever; the engine's destructor did the same between its stop and its join.
TEST(WorkerPoolRaces, APoolStartedWhileShutdownWaitsIsStoppedWithTheEngine) {
  const test::Watchdog watchdog(30s, "APoolStartedWhileShutdownWaitsIsStoppedWithTheEngine");
  Engine engine({.workers = 2});
  auto probe =
      engine.declare_queue<int>("probe", QueueOptions{.capacity = 4096});  // never processed
  auto own = engine.declare_queue<int>("own", QueueOptions{});
  auto pooled = engine.declare_queue<int>("pooled", QueueOptions{});
  std::atomic<bool> started{false}, joined{false};
  own.process({.concurrency = 1}, [&](Job<int>&) {
    started.store(true);
    // Shutdown has begun once adds are refused; it waits for this handler meanwhile.
    (void)eventually([&] { return probe.add("probe", 0).status == AddStatus::shutting_down; }, 20s);
    pooled.process(WorkerOptions::shared(), [](Job<int>&) {});  // the engine's first pool user
    joined.store(true);
  });
  ASSERT_EQ(own.add("starts-the-pool", 0).status, AddStatus::added);
  ASSERT_TRUE(eventually([&] { return started.load(); }));
  std::atomic<bool> returned{false};
  std::thread stopper([&] {
    const ShutdownReport report = engine.shutdown(30s);
    EXPECT_TRUE(report.still_running.empty());
    returned.store(true);
  });
  // A hang here ends in the watchdog: the stopper cannot be abandoned with the engine in use.
  EXPECT_TRUE(eventually([&] { return returned.load(); }, 20s)) << "shutdown joined a live pool";
  stopper.join();
  EXPECT_TRUE(joined.load());
}

}  // namespace
}  // namespace rail
