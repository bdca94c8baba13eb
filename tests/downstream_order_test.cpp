// A queue's own downstream with a concurrency limit: its workers take a permit before they take
// a job (PermitSource), so a job that finds no permit free stays in the ready ring, ahead of every
// later job. BullMQ with a concurrency of 1 runs jobs strictly one at a time in id order; so
// does rail, whatever the number of workers, on dedicated workers and on the shared pool, with
// handlers that return and with completions from another thread. The other cases pin what the
// permit taken early must not break: limits above 1 still fill, two queues sharing a downstream
// both progress, a job naming another downstream hands the permit back (and needs none at the
// head of the line), a raised limit wakes the waiting workers, and the inline runner stops at a
// permit in use.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "rail/rail.hpp"
#include "support/downstream_options.hpp"
#include "support/inline_engine.hpp"
#include "support/parked_completions.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;

/// Starts: the order in which handlers started and how many ran at once.
struct Starts {
  std::mutex mu;
  std::vector<int> order;
  std::atomic<int> inside{0};
  std::atomic<int> most{0};

  void enter(int data) {
    const int now = inside.fetch_add(1) + 1;
    int seen = most.load();
    while (now > seen && !most.compare_exchange_weak(seen, now)) {
    }
    const std::lock_guard lock(mu);
    order.push_back(data);
  }
  void leave() { inside.fetch_sub(1); }
  /// in_add_order(n): every one of 0 .. n-1 started once, in that order.
  [[nodiscard]] ::testing::AssertionResult in_add_order(int n) {
    const std::lock_guard lock(mu);
    if (static_cast<int>(order.size()) != n)
      return ::testing::AssertionFailure() << order.size() << " starts, expected " << n;
    for (int i = 0; i < n; ++i)
      if (order[static_cast<std::size_t>(i)] != i) {
        std::string seq;
        for (int k = std::max(0, i - 3); k < std::min(n, i + 6); ++k)
          seq += std::to_string(order[static_cast<std::size_t>(k)]) + " ";
        return ::testing::AssertionFailure()
               << "start " << i << " ran job " << order[i] << "; around it: " << seq;
      }
    return ::testing::AssertionSuccess();
  }
};

/// permits_come_back(d): every permit of d is back within a few seconds (none leaked).
bool permits_come_back(const Downstream& d) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (d.stats().in_flight != 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(100us);
  return d.stats().in_flight == 0;
}

/// one_at_a_time_round(seed, pooled, jobs): ten workers (dedicated, or a shared pool of ten) on
/// a queue whose downstream allows one call at a time; one producer adds `jobs` while they run,
/// with random pauses so that adds meet a free permit, a held one and one on its way back.
void one_at_a_time_round(std::uint64_t seed, bool pooled, int jobs) {
  SCOPED_TRACE("seed " + std::to_string(seed) + (pooled ? " (shared pool)" : " (dedicated)"));
  std::mt19937_64 rng(seed);
  Engine engine(EngineOptions{.workers = pooled ? 10u : 1u});
  engine.declare_downstream("partner", {.concurrency = 1});
  auto q = engine.declare_queue<int>("calls", test::calling("partner"));
  Starts starts;
  q.process(pooled ? WorkerOptions::shared() : WorkerOptions{.concurrency = 10}, [&](Job<int>& j) {
    starts.enter(j.data());
    if (j.data() % 7 == 0) std::this_thread::yield();
    starts.leave();
  });
  for (int i = 0; i < jobs; ++i) {
    ASSERT_EQ(q.add("call", i).status, AddStatus::added);
    if (rng() % 4 == 0) std::this_thread::yield();
  }
  ASSERT_TRUE(q.wait_idle(30s)) << "the queue did not drain";
  EXPECT_TRUE(starts.in_add_order(jobs));
  EXPECT_EQ(starts.most.load(), 1);
  // A worker between taking a permit and finding the ring empty holds it for a moment.
  EXPECT_TRUE(permits_come_back(engine.downstream("partner")));
}

TEST(DownstreamOrder, ConcurrencyOneStartsJobsInAddOrderOnTenDedicatedWorkers) {
  const std::uint64_t base = std::random_device{}();
  for (std::uint64_t run = 0; run < 500 && !HasFailure(); ++run)
    one_at_a_time_round(base + run, false, 30);
}

TEST(DownstreamOrder, ConcurrencyOneStartsJobsInAddOrderOnASharedPoolOfTen) {
  const std::uint64_t base = std::random_device{}();
  for (std::uint64_t run = 0; run < 500 && !HasFailure(); ++run)
    one_at_a_time_round(base + run, true, 30);
}

TEST(DownstreamOrder, ConcurrencyOneKeepsAddOrderWhenCompletionsComeFromAnotherThread) {
  // The permit comes back on the completer's thread, not a worker's: the release wakes the
  // workers that were refused it.
  Engine engine(EngineOptions{.workers = 1});
  engine.declare_downstream("partner", {.concurrency = 1});
  auto q = engine.declare_queue<int>("calls", test::calling("partner"));
  Starts starts;
  test::ParkedCompletions parked;
  q.process({.concurrency = 8, .max_pending = 4}, [&](Job<int>& j) {
    starts.enter(j.data());
    return j.defer([&](Completion c) { parked.put(std::move(c)); });
  });
  constexpr int kJobs = 200;
  std::atomic<bool> stop{false};
  std::thread completer([&] {
    while (!stop.load()) {
      for (Completion& c : parked.take()) {
        starts.leave();
        c.complete(Outcome::done());
      }
      std::this_thread::yield();
    }
  });
  for (int i = 0; i < kJobs; ++i)
    ASSERT_EQ(q.add("call", i).status, AddStatus::added);
  const bool drained = q.wait_idle(30s);
  stop.store(true);
  completer.join();
  ASSERT_TRUE(drained);
  EXPECT_TRUE(starts.in_add_order(kJobs));
  EXPECT_EQ(starts.most.load(), 1);
}

TEST(DownstreamOrder, ALimitAboveOneStillRunsThatManyAtOnce) {
  Engine engine(EngineOptions{.workers = 1});
  engine.declare_downstream("partner", {.concurrency = 3});
  auto q = engine.declare_queue<int>("calls", test::calling("partner"));
  Starts starts;
  std::atomic<bool> open{false};
  q.process({.concurrency = 10}, [&](Job<int>& j) {
    starts.enter(j.data());
    // The first three wait for each other: they run at once, or the test times out.
    while (j.data() < 3 && starts.most.load() < 3 && !open.load())
      std::this_thread::yield();
    starts.leave();
  });
  for (int i = 0; i < 300; ++i)
    ASSERT_EQ(q.add("call", i).status, AddStatus::added);
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (starts.most.load() < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  open.store(true);
  ASSERT_TRUE(q.wait_idle(30s));
  EXPECT_EQ(starts.most.load(), 3);
  EXPECT_EQ(starts.order.size(), 300u);
}

TEST(DownstreamOrder, TwoQueuesSharingADownstreamOfOneEachKeepTheirOrderAndBothFinish) {
  Engine engine(EngineOptions{.workers = 4});
  engine.declare_downstream("partner", {.concurrency = 1});
  auto a = engine.declare_queue<int>("a", test::calling("partner"));
  auto b = engine.declare_queue<int>("b", test::calling("partner"));
  Starts sa, sb;
  std::atomic<int> inside{0}, over{0};
  auto handler = [&](Starts& s) {
    return [&](Job<int>& j) {
      if (inside.fetch_add(1) != 0) over.fetch_add(1);
      s.enter(j.data());
      s.leave();
      inside.fetch_sub(1);
    };
  };
  a.process({.concurrency = 5}, handler(sa));
  b.process(WorkerOptions::shared(), handler(sb));
  for (int i = 0; i < 500; ++i) {
    ASSERT_EQ(a.add("call", i).status, AddStatus::added);
    ASSERT_EQ(b.add("call", i).status, AddStatus::added);
  }
  ASSERT_TRUE(a.wait_idle(30s));
  ASSERT_TRUE(b.wait_idle(30s));
  EXPECT_TRUE(sa.in_add_order(500));
  EXPECT_TRUE(sb.in_add_order(500));
  EXPECT_EQ(over.load(), 0) << "more than one call inside the downstream at once";
}

/// waits_for_job_one(ran, met): a handler whose job 1 sets `ran`, and whose other jobs run until
/// `ran` is set (10 s at most) and record in `met` whether it was: they run while job 1 does.
auto waits_for_job_one(std::atomic<bool>& ran, std::atomic<bool>& met) {
  return [&ran, &met](Job<int>& j) {
    if (j.data() == 1) {
      ran.store(true);
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!ran.load() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
    met.store(ran.load());
  };
}

TEST(DownstreamOrder, AJobNamingAnotherDownstreamGivesThePermitOfItsQueuesBack) {
  // Job 0 calls "other" and runs until job 1, which calls the queue's own downstream (one
  // permit), has started: it can only if job 0's worker gave back the permit it took first.
  Engine engine(EngineOptions{.workers = 1});
  auto own = engine.declare_downstream("own", {.concurrency = 1});
  auto other = engine.declare_downstream("other", {.concurrency = 2});
  auto q = engine.declare_queue<int>("calls", test::calling("own"));
  std::atomic<bool> second_started{false}, met{false};
  q.process({.concurrency = 4}, waits_for_job_one(second_started, met));
  JobOptions other_call;
  other_call.downstream = "other";
  ASSERT_EQ(q.add("call", 0, other_call).status, AddStatus::added);
  ASSERT_EQ(q.add("call", 1).status, AddStatus::added);
  ASSERT_TRUE(q.wait_idle(30s));
  EXPECT_TRUE(met.load()) << "job 1 waited for a permit that job 0 kept";
  EXPECT_TRUE(permits_come_back(own));
  EXPECT_TRUE(permits_come_back(other));
}

TEST(DownstreamOrder, AJobNamingAnotherDownstreamDoesNotWaitForThePermitOfItsQueues) {
  // Job 0 holds the queue's one permit until job 1, which calls another downstream, has run:
  // job 1 needs none of the queue's permits, so it starts from the head of the line.
  Engine engine(EngineOptions{.workers = 1});
  auto own = engine.declare_downstream("own", {.concurrency = 1});
  engine.declare_downstream("other", {.concurrency = 1});
  auto q = engine.declare_queue<int>("calls", test::calling("own"));
  std::atomic<bool> other_ran{false}, met{false};
  q.process({.concurrency = 3}, waits_for_job_one(other_ran, met));
  ASSERT_EQ(q.add("call", 0).status, AddStatus::added);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (own.stats().in_flight == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(100us);
  JobOptions other;
  other.downstream = "other";
  ASSERT_EQ(q.add("call", 1, other).status, AddStatus::added);
  ASSERT_TRUE(q.wait_idle(30s));
  EXPECT_TRUE(met.load()) << "job 1 waited for the permit job 0 held, which it does not use";
}

TEST(DownstreamOrder, RaisingTheLimitWakesTheWorkersThatFoundNoPermit) {
  Engine engine(EngineOptions{.workers = 1});
  auto partner = engine.declare_downstream("partner", {.concurrency = 1});
  auto q = engine.declare_queue<int>("calls", test::calling("partner"));
  std::atomic<int> inside{0};
  std::atomic<bool> release{false};
  q.process({.concurrency = 4}, [&](Job<int>&) {
    inside.fetch_add(1);
    while (!release.load())
      std::this_thread::yield();
  });
  for (int i = 0; i < 4; ++i)
    ASSERT_EQ(q.add("call", i).status, AddStatus::added);
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (inside.load() < 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(20ms);  // the other workers find no permit and sleep
  EXPECT_EQ(inside.load(), 1);
  EXPECT_EQ(partner.stats().waiting, 3u) << "ready jobs wait for the permit";
  partner.set_concurrency(4);
  while (inside.load() < 4 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  EXPECT_EQ(inside.load(), 4) << "the raised limit let the waiting jobs in at once";
  release.store(true);
  ASSERT_TRUE(q.wait_idle(30s));
}

struct DownstreamOrderInline : test::InlineEngine {};

TEST_F(DownstreamOrderInline, TheRunnerStopsAtAPermitInUseAndGoesOnInOrderOnceItReturns) {
  engine.declare_downstream("partner", {.concurrency = 1});
  auto q = engine.declare_queue<int>("calls", test::calling("partner"));
  test::ParkedCompletions parked;
  std::vector<int> order;
  q.process({.max_pending = 1}, [&](Job<int>& j) {
    order.push_back(j.data());
    if (j.data() == 0) {
      return j.defer([&](Completion c) { parked.put(std::move(c)); });
    }
    return Outcome::done();
  });
  for (int i = 0; i < 5; ++i)
    ASSERT_EQ(q.add("call", i).status, AddStatus::added);
  EXPECT_EQ(engine.run_until_idle(), 1u) << "job 0 holds the one permit";
  EXPECT_EQ(q.counts().waiting, 4u);
  EXPECT_EQ(engine.downstream("partner").stats().waiting, 4u);
  EXPECT_EQ(count(EventKind::throttled), 0u) << "a job waiting for the permit never left the line";
  for (Completion& c : parked.take())
    c.complete(Outcome::done());
  EXPECT_EQ(engine.run_until_idle(), 4u);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST_F(DownstreamOrderInline, AJobRefusedForItsTokenGivesItsPermitBack) {
  engine.declare_downstream("partner", {.concurrency = 1, .rate = RateLimit{.max = 1, .per = 1s}});
  auto q = engine.declare_queue<int>("calls", test::calling("partner"));
  std::vector<int> order;
  q.process({}, [&](Job<int>& j) { order.push_back(j.data()); });
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(q.add("call", i).status, AddStatus::added);
  engine.run_until_idle();
  EXPECT_EQ(order, std::vector<int>{0});
  EXPECT_EQ(engine.downstream("partner").stats().in_flight, 0u)
      << "the jobs waiting for the rate hold no permit";
  replay();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(engine.downstream("partner").stats().in_flight, 0u);
}

}  // namespace
}  // namespace rail
