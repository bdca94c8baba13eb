// FIFO groups under threads: producers add to their own groups while oversubscribed workers run
// them with random retries, dead-letters and discards and a canceller cancels at random, on a
// queue's own workers and on the shared pool. At most one job of a group runs at any time (an
// atomic check in the handler), each group starts its jobs in add order, every job ends exactly
// once, and the queue's capacity is whole again afterwards (no slot left in a line).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "rail/rail.hpp"
#include "support/recent_canceller.hpp"
#include "support/watchdog.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;

struct Item {
  int group;
  int seq;
};

#ifdef RAIL_SANITIZED
constexpr int kRounds = 2;
#else
constexpr int kRounds = 6;
#endif
constexpr int kProducers = 4, kGroupsEach = 24, kPerGroup = 30;
constexpr int kGroups = kProducers * kGroupsEach;
constexpr std::uint32_t kCapacity = 2048;  // under the jobs added: producers also wait for room

struct GroupCheck {
  std::atomic<int> running{0};
  std::atomic<int> last{-1};
};

void run_rounds(bool shared) {
  const test::Watchdog watchdog(120s, "FifoGroupsThreaded");
  EngineOptions eo;
  if (shared) eo.workers = 5;
  Engine engine(eo);
  QueueOptions qo;
  qo.capacity = kCapacity;
  qo.on_full = OnFull::block;
  qo.block_timeout = 60s;
  auto q = engine.declare_queue<Item>("q", qo);
  auto checks = std::make_unique<GroupCheck[]>(kGroups);
  std::atomic<std::uint64_t> overlaps{0}, out_of_order{0};
  const auto handler = [&](Job<Item>& j) -> Outcome {
    GroupCheck& g = checks[j.data().group];
    if (g.running.fetch_add(1) != 0) overlaps.fetch_add(1);
    // A retry of the turn's holder starts the same seq again; a cancelled job is skipped.
    if (j.data().seq < g.last.load()) out_of_order.fetch_add(1);
    g.last.store(j.data().seq);
    thread_local std::mt19937 rng(std::random_device{}());
    const unsigned r = rng() % 100;
    if (r < 3) std::this_thread::yield();
    g.running.fetch_sub(1);
    if (r < 20) return Outcome::retry("flaky");
    if (r < 24) return Outcome::fail("broken");
    if (r < 26) return Outcome::discard("stale");
    return Outcome::done();
  };
  if (shared) {
    q.process(WorkerOptions::shared(), handler);
  } else {
    q.process({.concurrency = 5}, handler);
  }
  for (int round = 0; round < kRounds; ++round) {
    for (int g = 0; g < kGroups; ++g)
      checks[g].last.store(-1);
    // While jobs are added, and a while after: most targets wait in their group's line.
    test::RecentCanceller canceller([&](JobId id) { return q.cancel(id); }, kProducers, 64,
                                    static_cast<unsigned>(round), 200);
    std::vector<std::thread> producers;
    for (int p = 0; p < kProducers; ++p)
      producers.emplace_back([&, p] {
        JobOptions o;
        o.max_attempts = 3;
        for (int seq = 0; seq < kPerGroup; ++seq)
          for (int k = 0; k < kGroupsEach; ++k) {
            const int g = p * kGroupsEach + k;
            o.group = std::string("customer-").append(std::to_string(g));
            const AddReceipt a = q.add("j", Item{g, seq}, o);
            ASSERT_EQ(a.status, AddStatus::added);
            canceller.note(a.id);
          }
        canceller.producer_done();
      });
    for (auto& t : producers)
      t.join();
    canceller.join();
    ASSERT_TRUE(q.wait_idle(60s));
    const QueueCounts c = q.counts();
    EXPECT_EQ(c.completed + c.dead_lettered + c.cancelled + c.discarded,
              std::uint64_t{kGroups} * kPerGroup * (round + 1));
    EXPECT_EQ(c.groups, 0u);
    EXPECT_EQ(overlaps.load(), 0u) << "round " << round;
    EXPECT_EQ(out_of_order.load(), 0u) << "round " << round;
  }
  // Every slot is free again: the queue takes `capacity` jobs (paused, so none runs; a slot
  // left in a line would make the last add wait out block_timeout and answer full).
  q.pause();
  std::uint32_t took = 0;
  JobOptions o;
  o.group = "last";
  for (std::uint32_t i = 0; i < kCapacity; ++i)
    if (q.add("probe", Item{0, 0}, o).status == AddStatus::added) ++took;
  EXPECT_EQ(took, kCapacity);
  q.resume();
  ASSERT_TRUE(q.wait_idle(60s));
  EXPECT_EQ(q.counts().groups, 0u);
  (void)engine.shutdown(10s);
}

TEST(FifoGroupsThreaded, TheNextJobOfAGroupStartsAfterThePreviousOnesEndWasReported) {
  const test::Watchdog watchdog(120s, "TheNextJobOfAGroupStartsAfterThePreviousOnesEnd");
  Engine engine;
  std::mutex mu;
  std::vector<std::pair<EventKind, JobId>> seen;  // in the order the observer saw them
  engine.on_event([&](const Event& e) {
    if (e.kind != EventKind::started && e.kind != EventKind::completed &&
        e.kind != EventKind::dead_lettered)
      return;
    const std::lock_guard lock(mu);
    seen.emplace_back(e.kind, e.job_id);
  });
  auto q = engine.declare_queue<Item>("q", {});
  q.process({.concurrency = 4}, [](Job<Item>& j) -> Outcome {
    if (j.data().seq % 2 == 0) return Outcome::fail("broken");
    return Outcome::done();
  });
  constexpr int kLines = 64, kJobs = 40;
  std::vector<std::vector<JobId>> ids(kLines);
  JobOptions o;
  for (int seq = 0; seq < kJobs; ++seq)
    for (int g = 0; g < kLines; ++g) {
      o.group = std::string("g").append(std::to_string(g));
      const AddReceipt a = q.add("j", Item{g, seq}, o);
      ASSERT_EQ(a.status, AddStatus::added);
      ids[g].push_back(a.id);
    }
  ASSERT_TRUE(q.wait_idle(60s));
  (void)engine.shutdown(10s);
  std::map<JobId, std::size_t> started, ended;
  for (std::size_t i = 0; i < seen.size(); ++i)
    (seen[i].first == EventKind::started ? started : ended)[seen[i].second] = i;
  std::size_t early = 0;
  for (const auto& line : ids)
    for (std::size_t k = 1; k < line.size(); ++k)
      if (started.at(line[k]) < ended.at(line[k - 1])) ++early;
  EXPECT_EQ(early, 0u);
}

TEST(FifoGroupsThreaded, OneJobOfAGroupAtATimeInAddOrderOnDedicatedWorkers) {
  run_rounds(false);
}

TEST(FifoGroupsThreaded, OneJobOfAGroupAtATimeInAddOrderOnTheSharedPool) {
  run_rounds(true);
}

}  // namespace
}  // namespace rail
