// Review of the shared worker pool (beb42a1): reproducers of what the review found, each kept as
// a regression test. Threaded tests wait with eventually() (bounded) or a bounded poll, never with
// a sleep that decides the outcome, and run under a Watchdog.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <span>
#include <vector>

#include "rail/rail.hpp"
#include "support/eventually.hpp"
#include "support/sanitized.hpp"
#include "support/watchdog.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;
using test::eventually;

// A pool worker's turn ends after Dispatcher::kTurn (16) jobs. When the queue's last job is the
// turn's 16th, the turn ended with its last next_job successful, so it never saw the queue run
// dry, and the next turn found nothing visible and returned before looking: `drained` was never
// raised (a dedicated worker raises it as soon as next_job fails).
TEST(WorkerPoolReview, DrainedIsRaisedWhenTheQueueRunsDryOnTheLastJobOfATurn) {
  const test::Watchdog watchdog(60s, "DrainedIsRaisedWhenTheQueueRunsDryOnTheLastJobOfATurn");
  std::atomic<int> drained{0};
  Engine engine({.workers = 1});  // one worker: its turns take the jobs 16 at a time
  engine.on_event([&](const Event& e) { drained += e.kind == EventKind::drained; });
  auto q = engine.queue<int>("q", QueueOptions{.capacity = 64});
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

}  // namespace
}  // namespace rail
