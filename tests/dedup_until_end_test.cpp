// Dedup ids held until their job's end (no ttl: BullMQ's simple mode), through the public API.
// The id goes when the end is decided, before anything reports it, with no release by the
// worker: the next add that meets the id finds the job gone. So an observer of the end, a
// redrive of the job into the slot it had, and producers racing workers all see one live job
// per id.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "rail/rail.hpp"
#include "support/inline_engine.hpp"
#include "support/sanitized.hpp"
#include "support/watchdog.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;
using DedupUntilEnd = test::InlineEngine;

JobOptions held_until_end(std::string id) {
  JobOptions o;
  o.dedup.id = std::move(id);
  return o;
}

TEST_F(DedupUntilEnd, AnObserverOfAJobsEndCanAddItsIdAgainAtOnce) {
  auto q = engine.declare_queue<int>("emails", QueueOptions{});
  q.process({}, [](Job<int>&) {});
  // The observer adds `id` again when a job ends, `budget` times.
  std::string id = "user-7";
  int budget = 2;
  std::vector<AddStatus> readded;
  engine.on_event([&](const Event& e) {
    if (budget == 0 || (e.kind != EventKind::completed && e.kind != EventKind::cancelled)) return;
    --budget;
    readded.push_back(q.add("send", 9, held_until_end(id)).status);
  });
  ASSERT_EQ(q.add("send", 1, held_until_end(id)).status, AddStatus::added);
  engine.run_until_idle();  // completes: the observer's add makes a job, which completes too
  EXPECT_EQ(readded, (std::vector<AddStatus>{AddStatus::added, AddStatus::added}))
      << "the id went before the end was reported";

  id = "user-8";
  const JobId waiting = q.add("send", 2, held_until_end(id)).id;
  EXPECT_EQ(q.add("send", 3, held_until_end(id)).status, AddStatus::duplicate);
  budget = 1;
  EXPECT_TRUE(q.cancel(waiting));
  ASSERT_EQ(readded.size(), 3u);
  EXPECT_EQ(readded[2], AddStatus::added) << "a cancelled job's id goes with it";
  engine.run_until_idle();
}

TEST_F(DedupUntilEnd, ARedriveIntoItsOwnSlotHoldsItsIdUntilItsNewEnd) {
  // One slot: the redriven job lands where its first life ran, with the same job id, so its old
  // claim looks alive again the moment the slot is filled; the redrive makes it the new life's.
  auto q = engine.declare_queue<int>("charges", QueueOptions{.capacity = 1});
  bool failing = true;
  q.process({}, [&](Job<int>&) { return failing ? Outcome::retry("declined") : Outcome::done(); });
  const JobId id = q.add("charge", 1, held_until_end("order-5")).id;
  engine.run_until_idle();
  ASSERT_EQ(q.dlq().size(), 1u);
  EXPECT_EQ(q.state(id).status, JobStatus::dead_lettered);

  ASSERT_EQ(q.dlq().redrive(id), RedriveStatus::redriven);
  const AddReceipt dup = q.add("charge", 2, held_until_end("order-5"));
  EXPECT_EQ(dup.status, AddStatus::duplicate) << "the redriven job holds its id again";
  EXPECT_EQ(dup.id, id);
  failing = false;
  engine.run_until_idle();
  EXPECT_EQ(q.state(id).status, JobStatus::completed);
  const AddReceipt after = q.add("charge", 3, held_until_end("order-5"));
  EXPECT_EQ(after.status, AddStatus::added) << "and lets it go at its new end";
  EXPECT_NE(after.id, id);
  engine.run_until_idle();
}

// Producers add a few ids over and over while workers end their jobs, until kJobs jobs were
// made: an add that finds the id's job ended makes the next job, and one that finds it live
// merges (and yields, so that the workers run). Two jobs of one id never run at once, and every
// job made runs exactly once.
TEST(DedupUntilEndThreaded, AnIdNeverHasTwoLiveJobsWhileProducersRaceTheWorkersEnds) {
#ifdef RAIL_SANITIZED
  constexpr std::uint64_t kJobs = 1'000;
#else
  constexpr std::uint64_t kJobs = 10'000;
#endif
  constexpr int kProducers = 4;
  constexpr int kIds = 3;
  const test::Watchdog dog(std::chrono::seconds(240), "AnIdNeverHasTwoLiveJobs...");
  Engine engine{EngineOptions{.mode = Mode::threaded}};
  auto q = engine.declare_queue<int>("syncs", QueueOptions{.capacity = 64});
  std::array<std::atomic<int>, kIds> running{};
  std::atomic<int> overlaps{0};
  std::atomic<std::uint64_t> ran{0};
  q.process({.concurrency = 3}, [&](Job<int>& j) {
    std::atomic<int>& r = running[static_cast<std::size_t>(j.data())];
    if (r.fetch_add(1) != 0) overlaps.fetch_add(1);
    std::this_thread::yield();  // long enough for a racing add to find the job and its id
    r.fetch_sub(1);
    ran.fetch_add(1);
  });
  std::atomic<std::uint64_t> added{0}, merged{0}, adds{0};
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      std::vector<JobOptions> options;
      for (int k = 0; k < kIds; ++k)
        options.push_back(held_until_end("sync-" + std::to_string(k)));
      for (int i = 0; added.load() < kJobs; ++i) {
        const int k = (i + p) % kIds;
        const AddReceipt r = q.add("sync", k, options[static_cast<std::size_t>(k)]);
        adds.fetch_add(1);
        if (r.status == AddStatus::added) {
          added.fetch_add(1);
        } else if (r.status == AddStatus::duplicate) {
          merged.fetch_add(1);
          std::this_thread::yield();
        } else {
          ADD_FAILURE() << "add " << i << " of producer " << p << ": status "
                        << static_cast<int>(r.status);
          return;
        }
      }
    });
  }
  for (auto& t : producers)
    t.join();
  ASSERT_TRUE(q.wait_idle(60s));
  EXPECT_EQ(overlaps.load(), 0) << "two jobs of one id ran at once";
  EXPECT_EQ(added.load() + merged.load(), adds.load());
  EXPECT_EQ(ran.load(), added.load()) << "every job made ran exactly once";
  EXPECT_EQ(q.counts().completed, added.load());
  ::testing::Test::RecordProperty("merged_adds", std::to_string(merged.load()));
  engine.shutdown(1s);
}

}  // namespace
}  // namespace rail
