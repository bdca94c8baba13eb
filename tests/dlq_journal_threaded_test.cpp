// The DLQ journal under concurrent dead-lettering: worker threads of a threaded engine append
// and sync at once (group commit), the interval thread syncs beside them. Every entry must be
// reported durable exactly once and come back in the next engine. Labelled `concurrency`, so the
// ThreadSanitizer preset runs it.
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <set>
#include <string>

#include "rail/rail.hpp"
#include "support/temp_dir.hpp"
#include "support/watchdog.hpp"

namespace rail {
namespace {

struct Policy {
  const char* name;
  JournalSync sync;
};

class ThreadedJournal : public ::testing::TestWithParam<Policy> {};

TEST_P(ThreadedJournal, ConcurrentDeadLetteringsAreEachDurableOnceAndAllRestored) {
  constexpr std::size_t kJobs = 400;
  test::Watchdog watchdog(std::chrono::seconds(120), "ThreadedJournal");
  test::TempDir dir;
  const std::string path = dir.file("orders.dlq");
  std::mutex mu;
  std::map<JobId, int> durable;
  std::set<JobId> added;
  {
    QueueOptions o;
    o.dlq.journal = {.path = path,
                     .sync = GetParam().sync,
                     .sync_every_n = 16,
                     .sync_interval = std::chrono::milliseconds(1),
                     .on_durable = [&](JobId id) {
                       std::lock_guard lock(mu);
                       ++durable[id];
                     }};
    Engine engine;
    auto q = engine.declare_queue<std::string>("orders", o);
    q.process({.concurrency = 4},
              [](Job<std::string>& j) { return Outcome::fail("declined " + j.data()); });
    for (std::size_t i = 0; i < kJobs; ++i)
      added.insert(q.add("charge-card", "order-" + std::to_string(i)).id);
    ASSERT_TRUE(q.wait_idle(std::chrono::seconds(60)));
    EXPECT_EQ(q.dlq().size(), kJobs);
    q.dlq().sync_journal();  // every_n and interval: the remainder, reported here
    engine.shutdown();
  }
  if (GetParam().sync != JournalSync::none) {
    std::lock_guard lock(mu);
    EXPECT_EQ(durable.size(), kJobs);
    for (const auto& [id, times] : durable) {
      EXPECT_TRUE(added.count(id)) << id;
      EXPECT_EQ(times, 1) << "entry " << id << " reported durable " << times << " times";
    }
  }
  ManualClock clock;
  Engine engine{EngineOptions{.clock = &clock, .mode = Mode::inlined}};
  QueueOptions reopen;
  reopen.dlq.journal.path = path;
  auto q = engine.declare_queue<std::string>("orders", reopen);
  std::set<JobId> back;
  for (const auto& e : q.dlq().list()) {
    back.insert(e.id);
    EXPECT_EQ(e.last_error(), "declined " + e.data);
  }
  EXPECT_EQ(back, added);
}

INSTANTIATE_TEST_SUITE_P(Journal, ThreadedJournal,
                         ::testing::Values(Policy{"every_entry", JournalSync::every_entry},
                                           Policy{"every_n", JournalSync::every_n},
                                           Policy{"interval", JournalSync::interval},
                                           Policy{"none", JournalSync::none}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace rail
