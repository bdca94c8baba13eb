// A threaded queue keeps its ready jobs in one lane per producer thread (ready_lanes.hpp) on a
// machine with several CPUs (this one has two: two lanes). What the engine promises across them:
// each producer thread's jobs start in its add order on one worker; shutdown hands back every job
// still in any lane exactly once; a cancel from another thread takes a job out of a producer's
// lane and gives its slot back at once (a paused queue's capacity returns); and with several
// producers, retries and workers, every job ends exactly once. Ids come from a block per thread
// (EngineCore::kIdBlock): unique across threads, rising within each, and never from another
// engine's block.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <thread>
#include <vector>

#include "rail/rail.hpp"
#include "support/sanitized.hpp"
#include "support/watchdog.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;

struct Item {
  int producer = 0;
  int seq = 0;
};

/// add_from_threads(q, producers, per): each of `producers` threads adds `per` jobs {p, 0..per-1}
/// in order; returns every id, by producer.
std::vector<std::vector<JobId>> add_from_threads(Queue<Item>& q, int producers, int per) {
  std::vector<std::vector<JobId>> ids(static_cast<std::size_t>(producers));
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([&, p] {
      for (int i = 0; i < per; ++i) {
        const AddReceipt r = q.add("item", Item{p, i});
        if (r.status == AddStatus::added) ids[static_cast<std::size_t>(p)].push_back(r.id);
      }
    });
  }
  for (auto& t : threads)
    t.join();
  return ids;
}

#ifdef RAIL_SANITIZED
constexpr int kRounds = 5;
#else
constexpr int kRounds = 30;
#endif

TEST(ProducerLanes, EachProducerThreadsJobsStartInItsAddOrderOnOneWorker) {
  const test::Watchdog watchdog(120s, "EachProducerThreadsJobsStartInItsAddOrderOnOneWorker");
  constexpr int kProducers = 4, kPer = 200;
  for (int round = 0; round < kRounds; ++round) {
    Engine engine;
    auto q = engine.declare_queue<Item>("q", QueueOptions{.capacity = kProducers * kPer});
    std::mutex mu;
    std::vector<Item> started;
    q.pause();  // the jobs wait in the lanes, interleaved as the threads raced
    q.process({.concurrency = 1}, [&](Job<Item>& j) {
      const std::lock_guard lock(mu);
      started.push_back(j.data());
    });
    const auto ids = add_from_threads(q, kProducers, kPer);
    for (const auto& one : ids)
      ASSERT_EQ(one.size(), static_cast<std::size_t>(kPer));
    q.resume();
    ASSERT_TRUE(q.wait_idle(60s));
    ASSERT_EQ(started.size(), static_cast<std::size_t>(kProducers * kPer));
    std::vector<int> next(kProducers, 0);
    for (const Item& it : started) {
      ASSERT_EQ(it.seq, next[static_cast<std::size_t>(it.producer)])
          << "round " << round << ": producer " << it.producer << "'s jobs out of order";
      ++next[static_cast<std::size_t>(it.producer)];
    }
  }
}

TEST(ProducerLanes, ShutdownHandsBackEveryJobInEveryLaneOnce) {
  const test::Watchdog watchdog(120s, "ShutdownHandsBackEveryJobInEveryLaneOnce");
  constexpr int kProducers = 3, kPer = 300;
  for (int round = 0; round < kRounds; ++round) {
    Engine engine;
    auto q = engine.declare_queue<Item>("q", QueueOptions{.capacity = kProducers * kPer});
    std::atomic<int> ran{0};
    q.pause();
    q.process({.concurrency = 2}, [&](Job<Item>&) { ran.fetch_add(1); });
    const auto ids = add_from_threads(q, kProducers, kPer);
    (void)engine.shutdown(1s);
    std::multiset<JobId> back;
    for (auto& l : q.take_leftovers())
      back.insert(l.id);
    EXPECT_EQ(ran.load(), 0) << "round " << round << ": a job of a paused queue ran";
    std::size_t expected = 0;
    for (const auto& one : ids) {
      expected += one.size();
      for (const JobId id : one)
        ASSERT_EQ(back.count(id), 1U) << "round " << round << ": job " << id;
    }
    ASSERT_EQ(back.size(), expected) << "round " << round;
  }
}

TEST(ProducerLanes, ACancelFromAnotherThreadTakesAJobOutOfAProducersLaneAndFreesItsSlot) {
  const test::Watchdog watchdog(120s, "ACancelFromAnotherThreadTakesAJobOutOfAProducersLane");
  constexpr int kPer = 60;
  for (int round = 0; round < kRounds; ++round) {
    Engine engine;
    // Exactly full once both producers added: only the cancelled jobs' slots make room.
    auto q = engine.declare_queue<Item>(
        "q", QueueOptions{.capacity = 2 * kPer, .on_full = OnFull::reject});
    std::mutex mu;
    std::set<JobId> ran;
    q.pause();
    q.process({.concurrency = 2}, [&](Job<Item>& j) {
      const std::lock_guard lock(mu);
      ran.insert(j.id());
    });
    const auto ids = add_from_threads(q, 2, kPer);
    ASSERT_EQ(q.add("item", Item{9, 0}).status, AddStatus::full);
    // Another thread cancels every third job of each producer.
    std::set<JobId> cancelled;
    std::thread canceller([&] {
      for (const auto& one : ids)
        for (std::size_t i = 0; i < one.size(); i += 3)
          if (q.cancel(one[i])) cancelled.insert(one[i]);
    });
    canceller.join();
    ASSERT_EQ(cancelled.size(), 2U * ((kPer + 2) / 3)) << "round " << round;
    for (const JobId id : cancelled)
      ASSERT_EQ(q.state(id).status, JobStatus::cancelled) << "round " << round << ": job " << id;
    // Their slots are free now, while the queue is still paused.
    for (std::size_t i = 0; i < cancelled.size(); ++i)
      ASSERT_EQ(q.add("item", Item{8, static_cast<int>(i)}).status, AddStatus::added)
          << "round " << round << ": add " << i << " after the cancels";
    q.resume();
    ASSERT_TRUE(q.wait_idle(60s));
    for (const auto& one : ids)
      for (const JobId id : one)
        ASSERT_EQ(ran.count(id), cancelled.count(id) ? 0U : 1U) << "round " << round;
    EXPECT_EQ(ran.size(), 2U * kPer) << "round " << round;
  }
}

TEST(ProducerLanes, ManyProducersRetriesAndWorkersEndEveryJobExactlyOnce) {
  const test::Watchdog watchdog(180s, "ManyProducersRetriesAndWorkersEndEveryJobExactlyOnce");
  constexpr int kProducers = 6, kPer = 2'000;
  for (const bool shared : {false, true}) {
    Engine engine({.workers = 3});
    auto q = engine.declare_queue<Item>(
        "q",
        QueueOptions{.capacity = 256, .on_full = OnFull::block, .block_timeout = Duration::max()});
    std::mutex mu;
    std::vector<int> completed(kProducers * kPer, 0);
    const WorkerOptions wo = shared ? WorkerOptions::shared() : WorkerOptions{.concurrency = 3};
    q.process(wo, [&](Job<Item>& j) {
      const Item it = j.data();
      // One job in seven fails its first attempt: the retry goes back through a worker's lane.
      if (j.attempt() == 1 && (it.producer * kPer + it.seq) % 7 == 0) return Outcome::retry("x");
      const std::lock_guard lock(mu);
      ++completed[static_cast<std::size_t>(it.producer * kPer + it.seq)];
      return Outcome::done();
    });
    JobOptions o;
    o.max_attempts = 2;
    std::vector<std::thread> threads;
    for (int p = 0; p < kProducers; ++p)
      threads.emplace_back([&, p] {
        for (int i = 0; i < kPer; ++i)
          ASSERT_EQ(q.add("item", Item{p, i}, o).status, AddStatus::added);
      });
    for (auto& t : threads)
      t.join();
    ASSERT_TRUE(q.wait_idle(120s));
    for (std::size_t i = 0; i < completed.size(); ++i)
      ASSERT_EQ(completed[i], 1) << (shared ? "shared pool" : "own pool") << ": job " << i;
    const QueueCounts c = q.counts();
    EXPECT_EQ(c.completed, static_cast<std::uint64_t>(kProducers * kPer));
    EXPECT_EQ(c.waiting + c.active + c.delayed, 0U);
  }
}

TEST(ProducerLanes, ShortBurstsNeverLeaveAReadyJobWhileEveryWorkerSleeps) {
  // 4 workers on 2 cores, 300 bursts of 1-16 tracked adds from a fresh thread each, each burst
  // waited for. A worker's last look before it sleeps may be turned away from a lane another
  // worker is popping (ReadyLanes::take); it then announces the work it saw
  // (Dispatcher::spin_for_job), so no burst strands a job while all four sleep (before, about
  // 1 run in 300 under ThreadSanitizer and load).
  Engine engine;
  auto q = engine.declare_queue<int>("q", QueueOptions{});
  q.process({.concurrency = 4}, [](Job<int>& j) {
    if (j.data() % 5 == 0) std::this_thread::yield();
    return Outcome::done();
  });
  std::uint64_t seed = 11;
  for (int burst = 0; burst < 300; ++burst) {
    seed = seed * 6364136223846793005u + 1442695040888963407u;
    const int n = 1 + static_cast<int>((seed >> 33) % 16);
    std::thread producer([&] {
      for (int i = 0; i < n; ++i)
        (void)q.add_tracked("job", i);
    });
    producer.join();
    ASSERT_TRUE(q.wait_idle(30s)) << "burst " << burst << ": " << q.counts().waiting
                                  << " waiting while every worker sleeps";
  }
  EXPECT_TRUE(engine.shutdown(10s).clean());
}

TEST(ProducerIds, AreUniqueAcrossThreadsAndRiseWithinEachBulksConsecutive) {
  const test::Watchdog watchdog(120s, "ProducerIdsAreUniqueAcrossThreads");
  constexpr int kThreads = 8, kSingles = 600;
  Engine engine;
  auto a = engine.declare_queue<Item>("a", QueueOptions{.capacity = 1 << 16});
  auto b = engine.declare_queue<Item>("b", QueueOptions{.capacity = 1 << 16});
  std::vector<std::vector<JobId>> ids(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      auto& mine = ids[static_cast<std::size_t>(t)];
      for (int i = 0; i < kSingles; ++i) {
        mine.push_back((i % 2 ? a : b).add("x", Item{t, i}).id);
        if (i % 20 != 0) continue;
        std::vector<Item> items(static_cast<std::size_t>(1 + (i * 7 + t) % 300));
        const BulkAddReceipt r = a.add_bulk("x", std::span<Item>(items));
        ASSERT_EQ(r.count, items.size());
        for (std::size_t k = 0; k < items.size(); ++k)
          mine.push_back(r.first_id + k);  // a bulk's ids are consecutive
      }
    });
  for (auto& t : threads)
    t.join();
  std::set<JobId> all;
  for (const auto& mine : ids) {
    for (std::size_t i = 1; i < mine.size(); ++i)
      ASSERT_LT(mine[i - 1], mine[i]) << "a thread's ids must rise";
    for (const JobId id : mine)
      ASSERT_TRUE(all.insert(id).second) << "id " << id << " handed out twice";
  }
  EXPECT_EQ(*all.begin(), 1U);
  (void)engine.shutdown(1s);
  (void)a.take_leftovers();
  (void)b.take_leftovers();
}

TEST(ProducerIds, ANewEngineStartsAtOneWhateverBlockThisThreadHeldForTheLast) {
  for (int round = 0; round < 20; ++round) {
    auto engine = std::make_unique<Engine>();  // often at the address the last one had
    auto q = engine->declare_queue<Item>("q", QueueOptions{});
    EXPECT_EQ(q.add("x", Item{}).id, 1U) << "round " << round;
    EXPECT_EQ(q.add("x", Item{}).id, 2U) << "round " << round;
  }
}

}  // namespace
}  // namespace rail
