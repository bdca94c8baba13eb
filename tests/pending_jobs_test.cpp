// PendingJobs: the free pending-delivery records of a queue (Job::defer, process_batch). A take
// fails only when every record is taken: the ring of free numbers can look empty while a
// give_back's push is in flight, and a take must not answer `capacity` then; nor may a give_back
// whose push meets a cell that a pop of the ring's previous lap has not released drop its record.
#include "rail/detail/pending_jobs.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "rail/detail/completions.hpp"
#include "support/watchdog.hpp"

namespace rail::detail {
namespace {

/// unused_completions(): the Completions a PendingJobs' hub names; these tests never complete
/// anything, so it is never touched (storage for one, not an object).
Completions& unused_completions() {
  alignas(Completions) static unsigned char storage[sizeof(Completions)];
  return *reinterpret_cast<Completions*>(storage);
}

TEST(PendingJobs, ATakeSucceedsWheneverFewerThanAllRecordsAreTaken) {
  // As many records as threads, each thread holding at most one: every take must succeed, also
  // while another thread's give_back is between its claim and its publication in the ring
  // (oversubscribed threads get preempted there).
  using namespace std::chrono_literals;
  const test::Watchdog watchdog(120s, "ATakeSucceedsWheneverFewerThanAllRecordsAreTaken");
  constexpr std::uint32_t kThreads = 8;
  constexpr int kRounds = 100'000;
  PendingJobs pending(unused_completions(), kThreads, 0);
  std::atomic<int> refused{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (std::uint32_t t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      while (!go.load())
        std::this_thread::yield();
      for (int i = 0; i < kRounds; ++i) {
        std::uint32_t r = 0;
        if (!pending.take(r)) {
          refused.fetch_add(1);
          continue;
        }
        pending.give_back(r);
      }
    });
  go = true;
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(refused.load(), 0);
}

TEST(PendingJobs, ATakeFailsOnceEveryRecordIsTakenAndSucceedsAfterAGiveBack) {
  PendingJobs pending(unused_completions(), 3, 0);
  std::uint32_t r[3];
  for (auto& x : r)
    ASSERT_TRUE(pending.take(x));
  std::uint32_t more = 0;
  EXPECT_FALSE(pending.take(more));
  pending.give_back(r[1]);
  ASSERT_TRUE(pending.take(more));
  EXPECT_EQ(more, r[1]);
}

}  // namespace
}  // namespace rail::detail
