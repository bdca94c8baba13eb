// StripedCounters (detail/striped_counter.hpp): totals stay exact with more threads than owned
// stripes (some add with plain stores to a stripe of their own, the rest with locked adds to
// shared ones) while threads exit and their indices, with their stripes, pass to new threads;
// and a reader that sees a thread's increment sees that thread's earlier ones.
#include "rail/detail/striped_counter.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "support/sanitized.hpp"

namespace rail {
namespace {

using Counters = detail::StripedCounters<2, 4>;  // 4 owned stripes, 4 shared

#ifdef RAIL_SANITIZED
constexpr int kAdds = 2'000;
#else
constexpr int kAdds = 20'000;
#endif

TEST(StripedCounters, TotalsAreExactWithMoreThreadsThanStripesWhileThreadsComeAndGo) {
  Counters c;
  constexpr int kWaves = 4, kThreads = 12;  // 12 threads a wave: most share a stripe
  for (int wave = 0; wave < kWaves; ++wave) {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&c, t] {
        for (int i = 0; i < kAdds; ++i) {
          c.add(0);
          c.add(1, static_cast<std::uint64_t>(t));
        }
      });
    for (auto& t : threads)
      t.join();
    // Exited threads' stripes kept their counts, and the next wave's threads (given the same
    // indices) added to them.
    const auto waves = static_cast<std::uint64_t>(wave + 1);
    EXPECT_EQ(c.read(0), waves * kThreads * kAdds);
    EXPECT_EQ(c.read(1), waves * kAdds * (kThreads * (kThreads - 1) / 2));
  }
}

TEST(StripedCounters, AReaderThatSeesAnIncrementSeesTheSameThreadsEarlierOnes) {
  Counters c;
  std::atomic<bool> stop{false};
  std::atomic<int> violations{0};
  std::vector<std::thread> writers;
  for (int t = 0; t < 10; ++t)  // owned and shared stripes both
    writers.emplace_back([&] {
      for (int i = 0; i < kAdds; ++i) {
        c.add(0);  // each thread counts kind 0 before kind 1
        c.add(1);
      }
    });
  std::thread reader([&] {
    while (!stop.load()) {
      const std::uint64_t second = c.read(1);  // first: what it sees of kind 1 ...
      const std::uint64_t first = c.read(0);   // ... kind 0 shows at least as much of
      if (first < second) violations.fetch_add(1);
    }
  });
  for (auto& t : writers)
    t.join();
  stop.store(true);
  reader.join();
  EXPECT_EQ(violations.load(), 0);
  EXPECT_EQ(c.read(0), 10u * kAdds);
  EXPECT_EQ(c.read(1), 10u * kAdds);
}

}  // namespace
}  // namespace rail
