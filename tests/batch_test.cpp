// Batch handlers (Queue::process_batch): how a batch forms (up to max, from what is ready, with a
// linger on the queue's own pool), each job's own outcome, retries, DLQ entry, cancel and lease,
// a throwing handler, and shutdown with a batch held. Inline under the manual clock first, then
// on threads (several producers, the queue's own pool and the shared pool).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "rail/detail/dispatcher.hpp"
#include "rail/rail.hpp"
#include "support/inline_engine.hpp"
#include "support/watchdog.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;
using Batches = test::InlineEngine;

TEST_F(Batches, ABatchTakesUpToMaxOfTheReadyJobsInAddOrder) {
  auto q = engine.declare_queue<int>("q", {});
  std::vector<std::vector<int>> seen;
  q.process_batch({}, {.max = 4}, [&](Batch<int>& batch) {
    seen.emplace_back();
    for (const BatchJob<int> job : batch)
      seen.back().push_back(job.data());
  });
  for (int i = 0; i < 10; ++i)
    (void)q.add("j", i);
  engine.run_until_idle();
  EXPECT_EQ(seen, (std::vector<std::vector<int>>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}));
  EXPECT_EQ(q.counts().completed, 10u);
  EXPECT_EQ(q.counts().active, 0u);
  EXPECT_EQ(count(EventKind::completed), 10u);
}

TEST_F(Batches, EachJobGetsItsOwnOutcomeRetryAndDeadLetter) {
  auto q = engine.declare_queue<int>("q", {});
  std::vector<int> runs;
  q.process_batch({}, {.max = 8}, [&](Batch<int>& batch) {
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const BatchJob<int> job = batch[i];
      runs.push_back(job.data());
      if (job.data() == 1 && job.attempt() == 1) batch.set(i, Outcome::retry("once more"));
      if (job.data() == 2) batch.set(i, Outcome::fail("bad input"));
    }
  });
  JobId ids[3];
  for (int i = 0; i < 3; ++i)
    ids[i] = q.add("j", i, JobOptions{.max_attempts = 3}).id;
  engine.run_until_idle();
  EXPECT_EQ(q.state(ids[0]).status, JobStatus::completed);
  EXPECT_EQ(q.state(ids[1]).status, JobStatus::completed) << "retried, then done";
  EXPECT_EQ(q.state(ids[2]).status, JobStatus::dead_lettered);
  ASSERT_TRUE(q.dlq().get(ids[2]));
  EXPECT_EQ(q.dlq().get(ids[2])->last_error(), "bad input");
  EXPECT_EQ(runs, (std::vector<int>{0, 1, 2, 1}));
}

TEST_F(Batches, AThrowFailsTheJobsWithoutAnOutcomeAndKeepsTheOthers) {
  auto q = engine.declare_queue<int>("q", {});
  bool thrown = false;
  q.process_batch({}, {.max = 3}, [&](Batch<int>& batch) {
    if (thrown) return;
    batch.set(0, Outcome::discard("not needed"));
    thrown = true;
    throw std::runtime_error("gateway down");
  });
  JobId ids[3];
  for (int i = 0; i < 3; ++i)
    ids[i] = q.add("j", i, JobOptions{.max_attempts = 1}).id;
  engine.run_until_idle();
  EXPECT_EQ(q.state(ids[0]).status, JobStatus::discarded);
  for (int i = 1; i < 3; ++i) {
    EXPECT_EQ(q.state(ids[i]).status, JobStatus::dead_lettered);
    ASSERT_TRUE(q.dlq().get(ids[i]));
    EXPECT_EQ(q.dlq().get(ids[i])->last_error(), "gateway down");
  }
  auto q2 = engine.declare_queue<int>("q2", {});
  bool refused = false;
  q2.process_batch({}, {.max = 2}, [&](Batch<int>& b) {
    try {
      b.set(b.size(), Outcome::done());
    } catch (const Error& e) {
      refused = e.code() == ErrorCode::invalid_option;
    }
  });
  (void)q2.add("j", 1);
  engine.run_until_idle();
  EXPECT_TRUE(refused) << "an index past the batch is refused";
}

TEST_F(Batches, ACancelledJobInABatchEndsCancelledAndTheOthersComplete) {
  auto q = engine.declare_queue<int>("q", {});
  q.process_batch({}, {.max = 2}, [&](Batch<int>& batch) {
    EXPECT_TRUE(q.cancel(batch[0].id()));
    EXPECT_TRUE(batch[0].cancelled());
    EXPECT_FALSE(batch[1].cancelled());
  });
  const JobId a = q.add("j", 1).id;
  const JobId b = q.add("j", 2).id;
  engine.run_until_idle();
  EXPECT_EQ(q.state(a).status, JobStatus::cancelled);
  EXPECT_EQ(q.state(b).status, JobStatus::completed);
}

TEST_F(Batches, EachJobOfABatchHoldsItsOwnLease) {
  auto q = engine.declare_queue<int>("q", {.visibility_timeout = 10s});
  int calls = 0;
  q.process_batch({}, {.max = 2}, [&](Batch<int>& batch) {
    if (++calls > 1) return;
    EXPECT_TRUE(batch[0].extend_lease(1h));
    clock.advance(20s);  // the second job's lease lapses; the first's was extended
    EXPECT_FALSE(batch[0].cancelled());
    EXPECT_TRUE(batch[1].cancelled());
  });
  const JobId a = q.add("j", 1).id;
  const JobId b = q.add("j", 2).id;
  engine.run_until_idle();
  EXPECT_EQ(q.state(a).status, JobStatus::completed);
  EXPECT_EQ(q.state(b).status, JobStatus::completed) << "redelivered after its lapse";
  EXPECT_EQ(count(EventKind::stalled), 1u);
  EXPECT_EQ(calls, 2);
}

TEST_F(Batches, AHeldJobWhoseLeaseLapsesIsRedeliveredIntoTheBatchAndItsStaleOutcomeIsFenced) {
  // The first job's lease lapses while the worker holds it (the clock moves on as the second
  // job starts): its retry is delivered into the same batch, next to its fenced delivery.
  auto q = engine.declare_queue<int>("q", {.visibility_timeout = 10s});
  int starts = 0;
  engine.on_event([&](const Event& e) {
    if (e.kind == EventKind::started && ++starts == 2) clock.advance(20s);
  });
  std::vector<std::pair<int, bool>> seen;  // (payload, fenced) in batch order
  q.process_batch({}, {.max = 4}, [&](Batch<int>& batch) {
    for (const auto job : batch)
      seen.emplace_back(job.data(), job.cancelled());
  });
  const JobId a = q.add("j", 1).id;
  (void)q.add("j", 2);
  engine.run_until_idle();
  EXPECT_EQ(seen, (std::vector<std::pair<int, bool>>{{1, true}, {2, false}, {1, false}}));
  const QueueCounts c = q.counts();
  EXPECT_EQ(c.completed, 2u);
  EXPECT_EQ(c.stalled, 1u);
  EXPECT_EQ(c.late_outcomes, 1u) << "the stale delivery's done does not count";
  EXPECT_EQ(c.active + c.waiting + c.delayed, 0u);
  EXPECT_EQ(count(EventKind::completed), 2u);
  EXPECT_EQ(q.state(a).status, JobStatus::completed);
}

TEST_F(Batches, BadOptionsAndASecondProcessorAreRefused) {
  auto q = engine.declare_queue<int>("q", {});
  const auto noop = [](Batch<int>&) {};
  EXPECT_THROW(q.process_batch({}, {.max = 0}, noop), Error);
  EXPECT_THROW(q.process_batch({}, {.max = BatchOptions::kMaxJobs + 1}, noop), Error);
  EXPECT_THROW(q.process_batch({}, {.max = 4, .linger = -1ms}, noop), Error);
  q.process_batch({}, {.max = 4}, noop);
  EXPECT_THROW(q.process_batch({}, {.max = 4}, noop), Error) << "one processor per queue";
  EXPECT_THROW(q.process({}, [](Job<int>&) {}), Error);
}

TEST_F(Batches, ARunUntilIdleInsideABatchHandlerDoesNotNestIntoItsBatch) {
  auto q = engine.declare_queue<int>("q", {});
  bool nested = false;
  std::vector<std::size_t> sizes;
  q.process_batch({}, {.max = 4}, [&](Batch<int>& batch) {
    sizes.push_back(batch.size());
    if (nested) return;
    nested = true;
    (void)q.add("late", 9, JobOptions{.max_attempts = 2, .backoff = Backoff::fixed(0ms)});
    (void)engine.run_until_idle();
    EXPECT_EQ(batch.size(), 2u) << "the batch does not change under its handler";
  });
  (void)q.add("j", 1);
  (void)q.add("j", 2);
  engine.run_until_idle();
  EXPECT_EQ(sizes, (std::vector<std::size_t>{2}));
  EXPECT_EQ(q.counts().completed, 2u);
  const auto entries = q.dlq().list();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].data, 9);
  EXPECT_NE(std::string(entries[0].last_error()).find("does not nest"), std::string::npos)
      << entries[0].last_error();
}

TEST_F(Batches, ARunUntilIdleInsideAFullBatchsHandlerDoesNotNestIntoIt) {
  // Full: the batch runs from the delivery that filled it, with every held lease record in use.
  auto q = engine.declare_queue<int>("q", {.visibility_timeout = 10s});
  bool nested = false;
  q.process_batch({}, {.max = 2}, [&](Batch<int>& batch) {
    if (nested) return;
    nested = true;
    (void)q.add("late", 9);
    (void)engine.run_until_idle();
    EXPECT_EQ(batch.size(), 2u);
    EXPECT_FALSE(batch[0].cancelled());
    EXPECT_FALSE(batch[1].cancelled());
  });
  (void)q.add("j", 1);
  (void)q.add("j", 2);
  engine.run_until_idle();
  EXPECT_EQ(q.counts().completed, 2u);
  ASSERT_EQ(q.dlq().size(), 1u);
  EXPECT_EQ(q.dlq().list()[0].data, 9);
}

TEST_F(Batches, AnEndsObserverThatRunsUntilIdleDoesNotJoinTheBatchBeingClosed) {
  // The batch's outcomes close its deliveries one by one; an observer of the first end runs
  // the engine while the rest are still held, full (max 2) and not (max 4).
  for (const std::uint32_t max : {2u, 4u}) {
    auto q = engine.declare_queue<int>("q" + std::to_string(max), {.visibility_timeout = 10s});
    bool nested = false;
    const ObserverId id = engine.on_event([&](const Event& e) {
      if (e.kind != EventKind::completed || e.queue != q.name() || nested) return;
      nested = true;
      (void)q.add("late", 9);
      (void)engine.run_until_idle();
    });
    std::vector<std::size_t> sizes;
    q.process_batch({}, {.max = max}, [&](Batch<int>& batch) { sizes.push_back(batch.size()); });
    (void)q.add("j", 1);
    (void)q.add("j", 2);
    engine.run_until_idle();
    EXPECT_EQ(sizes, (std::vector<std::size_t>{2})) << "max " << max;
    const QueueCounts c = q.counts();
    EXPECT_EQ(c.completed, 2u) << "max " << max;
    EXPECT_EQ(c.dead_lettered, 1u) << "the nested delivery is refused: max " << max;
    EXPECT_EQ(c.active + c.waiting, 0u) << "max " << max;
    engine.remove_observer(id);
  }
}

// A delivery nested in a batch's closes (an end's observer runs the engine) ends at its own
// time, never at the batch's, which came before its start.
TEST_F(Batches, ADeliveryNestedInABatchsClosesEndsAtItsOwnTime) {
  auto q = engine.declare_queue<int>("q", {});
  const TimePoint t0 = clock.now();
  JobId late = 0;
  engine.on_event([&](const Event& e) {
    if (e.kind != EventKind::completed || late != 0) return;
    clock.advance(1h);
    late = q.add("late", 9).id;
    (void)engine.run_until_idle();  // delivers `late`, refused: no nesting into the batch
  });
  q.process_batch({}, {.max = 2}, [](Batch<int>&) {});
  (void)q.add("j", 1);
  (void)q.add("j", 2);
  engine.run_until_idle();
  ASSERT_NE(late, 0u);
  for (const Event& e : of(EventKind::completed))
    EXPECT_EQ(e.at, t0) << "the batch's jobs end when its handler returned: job " << e.job_id;
  const auto started = of(EventKind::started, late);
  const auto ended = of(EventKind::dead_lettered, late);
  ASSERT_EQ(started.size(), 1u);
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(started[0].at, t0 + 1h);
  EXPECT_EQ(ended[0].at, t0 + 1h) << "the nested delivery ended at the batch's time";
}

/// CountingClock: steady time that counts its readings.
struct CountingClock final : Clock {
  mutable std::atomic<int> reads{0};
  [[nodiscard]] TimePoint now() const noexcept override {
    reads.fetch_add(1, std::memory_order_relaxed);
    return SteadyClock{}.now();
  }
};

// A batch's jobs all ended when its handler returned: one clock reading ends them all (each of
// its own would cost a reading per job, a tenth of a batch job's time on a VM's TSC).
TEST(BatchesClock, ABatchsJobsEndAtOneReadingTakenWhenItsHandlerReturned) {
  CountingClock clock;
  Engine engine{EngineOptions{.clock = &clock, .mode = Mode::inlined}};
  auto q = engine.declare_queue<int>("q", {});
  std::vector<TimePoint> ends;
  engine.on_event([&](const Event& e) {
    if (e.kind == EventKind::completed) ends.push_back(e.at);
  });
  int reads_at_return = 0;
  TimePoint returned{};
  q.process_batch({}, {.max = 16}, [&](Batch<int>& batch) {
    EXPECT_EQ(batch.size(), 16u);
    returned = clock.now();
    reads_at_return = clock.reads.load();
  });
  for (int i = 0; i < 16; ++i)
    (void)q.add("j", i);
  engine.run_until_idle();
  ASSERT_EQ(ends.size(), 16u);
  for (const TimePoint end : ends) {
    EXPECT_EQ(end, ends[0]) << "the jobs of one batch end at one time";
    EXPECT_GE(end, returned) << "and not before the handler returned";
  }
  EXPECT_LT(clock.reads.load() - reads_at_return, 16) << "a reading per job to close the batch";
}

/// ThreadCountingClock: steady time that counts its readings on each thread.
struct ThreadCountingClock final : Clock {
  mutable std::mutex mu;
  mutable std::map<std::thread::id, int> reads;
  [[nodiscard]] TimePoint now() const noexcept override {
    {
      std::lock_guard lock(mu);
      ++reads[std::this_thread::get_id()];
    }
    return SteadyClock{}.now();
  }
  int reads_here() const {
    std::lock_guard lock(mu);
    return reads[std::this_thread::get_id()];
  }
};

// The jobs a worker pops together start at one clock reading while they go into its batch: no
// handler or observer runs between their starts, so a reading per job (a tenth of a batch job's
// time on a VM's TSC) would tell nothing new.
TEST(BatchesClock, TheJobsOfOnePopStartAtOneReadingWhileTheBatchFills) {
  const test::Watchdog watchdog(120s, "TheJobsOfOnePopStartAtOneReadingWhileTheBatchFills");
  // Every handler fast: the worker pops whole stashes from its second look on.
  const std::int64_t threshold = detail::set_fast_handler_threshold(INT64_MAX);
  ThreadCountingClock clock;
  {
    Engine engine{EngineOptions{.clock = &clock}};
    auto q = engine.declare_queue<int>("q", {});
    constexpr int kJobs = 64;
    for (int i = 0; i < kJobs; ++i)
      (void)q.add("j", i);
    std::atomic<int> worker_reads{-1};
    std::atomic<std::size_t> size{0};
    q.process_batch({.concurrency = 1}, {.max = kJobs, .linger = 1h}, [&](Batch<int>& batch) {
      if (worker_reads.load() >= 0) return;
      size = batch.size();
      worker_reads = clock.reads_here();  // the worker's readings while it filled the batch
    });
    ASSERT_TRUE(q.wait_idle());
    ASSERT_EQ(size.load(), std::size_t{kJobs}) << "one batch of every job";
    // A reading per pop (the stash holds 16: pops of 1, then of 16, five in all); a reading per
    // start makes 64 and more.
    EXPECT_LE(worker_reads.load(), 16) << "a reading per job while filling";
    EXPECT_EQ(q.counts().completed, std::uint64_t{kJobs});
  }
  (void)detail::set_fast_handler_threshold(threshold);
}

/// wait_until_held(q): every job added to q so far has left `waiting`: a lingering worker holds
/// it in its batch (the tests that call this linger for an hour, so nothing has run yet).
void wait_until_held(Queue<int>& q) {
  while (q.counts().waiting != 0)
    std::this_thread::sleep_for(1ms);
}

TEST(BatchesThreaded, MaxTimesWorkersBeyondThePendingBoundIsRefused) {
  Engine engine;
  auto q = engine.declare_queue<int>("q", {});
  try {
    q.process_batch({.concurrency = 64}, {.max = BatchOptions::kMaxJobs}, [](Batch<int>&) {});
    FAIL() << "expected Error(invalid_option)";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find("kMaxPending"), std::string::npos) << e.what();
  }
}

TEST(BatchesThreaded, AWorkerLingersForAFullBatchUntilItsLingerEnds) {
  const test::Watchdog watchdog(120s, "AWorkerLingersForAFullBatchUntilItsLingerEnds");
  Engine engine;
  auto q = engine.declare_queue<int>("q", {});
  std::mutex mu;
  std::vector<std::size_t> sizes;
  q.process_batch({}, {.max = 4, .linger = 1h}, [&](Batch<int>& batch) {
    std::lock_guard lock(mu);
    sizes.push_back(batch.size());
  });
  (void)q.add("j", 1);
  (void)q.add("j", 2);
  wait_until_held(q);  // the worker holds both and lingers (an hour)
  {
    std::lock_guard lock(mu);
    EXPECT_TRUE(sizes.empty()) << "a partial batch waits out its linger";
  }
  (void)q.add("j", 3);
  (void)q.add("j", 4);
  EXPECT_TRUE(q.wait_idle(60s));
  std::lock_guard lock(mu);
  EXPECT_EQ(sizes, (std::vector<std::size_t>{4}));
}

TEST(BatchesThreaded, PauseAndWaitReturnsOnlyAfterAHeldBatchRan) {
  const test::Watchdog watchdog(120s, "PauseAndWaitReturnsOnlyAfterAHeldBatchRan");
  Engine engine;
  auto q = engine.declare_queue<int>("q", {});
  std::atomic<int> ran{0};
  std::atomic<bool> running{false};
  q.process_batch({}, {.max = 8, .linger = 1h}, [&](Batch<int>& batch) {
    running = true;
    std::this_thread::sleep_for(50ms);  // a slow batch: pause_and_wait must wait for it
    ran += static_cast<int>(batch.size());
    running = false;
  });
  (void)q.add("j", 1);
  (void)q.add("j", 2);
  wait_until_held(q);
  ASSERT_TRUE(q.pause_and_wait(60s));
  EXPECT_FALSE(running.load()) << "returned while the batch handler ran";
  EXPECT_EQ(ran.load(), 2) << "a pause runs the held batch";
}

TEST(BatchesThreaded, ALingerEndsAtHalfTheShortestLeaseItHolds) {
  const test::Watchdog watchdog(120s, "ALingerEndsAtHalfTheShortestLeaseItHolds");
  Engine engine;
  auto q = engine.declare_queue<int>("q", {.visibility_timeout = 4s});
  std::atomic<int> live{0};
  q.process_batch({}, {.max = 8, .linger = 1h}, [&](Batch<int>& batch) {
    for (const BatchJob<int> job : batch)
      if (!job.cancelled()) ++live;
  });
  (void)q.add("j", 1);
  (void)q.add("j", 2);
  EXPECT_TRUE(q.wait_idle(60s)) << "the batch ran about 2 s in, not an hour";
  EXPECT_EQ(live.load(), 2) << "before either lease lapsed";
  EXPECT_EQ(q.counts().stalled, 0u);
  EXPECT_EQ(q.counts().completed, 2u);
}

TEST(BatchesThreaded, AJobHoldingADownstreamPermitEndsTheLinger) {
  const test::Watchdog watchdog(120s, "AJobHoldingADownstreamPermitEndsTheLinger");
  Engine engine;
  engine.declare_downstream("api", {.concurrency = 2});
  QueueOptions calling;  // named: GCC 12 warns about a designated temporary's other strings
  calling.downstream = "api";
  auto q = engine.declare_queue<int>("q", calling);
  std::atomic<int> ran{0};
  q.process_batch({}, {.max = 8, .linger = 1h},
                  [&](Batch<int>& batch) { ran += static_cast<int>(batch.size()); });
  for (int i = 0; i < 6; ++i)
    (void)q.add("j", i);
  EXPECT_TRUE(q.wait_idle(60s)) << "held permits would keep the rest out for the linger's hour";
  EXPECT_EQ(ran.load(), 6);
}

TEST(BatchesThreaded, ShutdownRunsAHeldBatch) {
  const test::Watchdog watchdog(120s, "ShutdownRunsAHeldBatch");
  Engine engine;
  auto q = engine.declare_queue<int>("q", {});
  std::atomic<int> ran{0};
  q.process_batch({}, {.max = 8, .linger = 1h},
                  [&](Batch<int>& batch) { ran += static_cast<int>(batch.size()); });
  JobId ids[3];
  for (int i = 0; i < 3; ++i)
    ids[i] = q.add("j", i).id;
  wait_until_held(q);
  const ShutdownReport report = engine.shutdown(10s);
  EXPECT_TRUE(report.clean());
  EXPECT_EQ(ran.load(), 3);
  for (const JobId id : ids)
    EXPECT_EQ(q.state(id).status, JobStatus::completed);
}

/// run_many(pool, workers): 4 producers add 2,000 jobs each to a batch queue with retries; every
/// job ends exactly once and no batch exceeds max.
void run_many(Pool pool) {
  Engine engine(EngineOptions{.workers = 3});
  auto q = engine.declare_queue<int>("q", {.capacity = 4096});
  constexpr int kProducers = 4, kPerProducer = 2000, kMax = 16;
  std::vector<std::atomic<int>> done(kProducers * kPerProducer);
  std::vector<JobId> ids(kProducers * kPerProducer);
  std::atomic<bool> too_big{false};
  q.process_batch({.concurrency = 3, .pool = pool}, {.max = kMax, .linger = 200us},
                  [&](Batch<int>& batch) {
                    if (batch.size() > kMax) too_big = true;
                    for (std::size_t i = 0; i < batch.size(); ++i) {
                      const BatchJob<int> job = batch[i];
                      if (job.data() % 7 == 0 && job.attempt() == 1) {
                        batch.set(i, Outcome::retry("again"));
                        continue;
                      }
                      done[static_cast<std::size_t>(job.data())].fetch_add(1);
                    }
                  });
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p)
    producers.emplace_back([&, p] {
      for (int i = 0; i < kPerProducer; ++i) {
        const int v = p * kPerProducer + i;
        while (
            q.add("j", v, JobOptions{.max_attempts = 3, .backoff = Backoff::fixed(0ms)}).status !=
            AddStatus::added)
          std::this_thread::yield();
      }
    });
  for (auto& t : producers)
    t.join();
  ASSERT_TRUE(q.wait_idle(10s)) << "c=" << q.counts().completed << " a=" << q.counts().active
                                << " w=" << q.counts().waiting << " d=" << q.counts().delayed
                                << " added=" << q.counts().added
                                << " f=" << q.counts().failed_attempts;
  EXPECT_FALSE(too_big.load());
  for (std::size_t v = 0; v < done.size(); ++v)
    ASSERT_EQ(done[v].load(), 1) << "job " << v << " (id " << ids[v] << ")";
  EXPECT_EQ(q.counts().completed, done.size());
  EXPECT_EQ(q.dlq().size(), 0u);
}

TEST(BatchesThreaded, ManyProducersOnTheQueuesOwnPoolEndEachJobOnce) {
  const test::Watchdog watchdog(180s, "ManyProducersOnTheQueuesOwnPoolEndEachJobOnce");
  run_many(Pool::dedicated);
}

TEST(BatchesThreaded, ManyProducersOnTheSharedPoolEndEachJobOnce) {
  const test::Watchdog watchdog(180s, "ManyProducersOnTheSharedPoolEndEachJobOnce");
  run_many(Pool::shared);
}

}  // namespace
}  // namespace rail
