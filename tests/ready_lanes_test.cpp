// Tests for rail::detail::ReadyLanes: single-threaded order and lookup (home lane, bitmap, the
// scan behind it), then pushes racing pops and sweeps under the seeded DeterministicSchedule
// (a failure names the seed that replays it), and a real-thread stress, oversubscribed on purpose.
// Every index pushed must pop exactly once, and one producer's indices in one lane in push order.
#include "rail/detail/ready_lanes.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "support/deterministic_schedule.hpp"
#include "support/watchdog.hpp"

namespace rail::detail {
struct ReadyLanesTestPeer {
  template <class Lanes>
  static void clear_bits(Lanes& l) {
    l.nonempty_.store(0, std::memory_order_relaxed);
  }
};
}  // namespace rail::detail

namespace {

using rail::detail::BasicReadyLanes;
using rail::detail::ReadyLanes;
using rail::detail::ReadyLanesTestPeer;
using rail::test::DeterministicAtomic;
using rail::test::DeterministicSchedule;
using rail::test::SchedulePolicy;
using rail::test::Watchdog;

using DetLanes = BasicReadyLanes<DeterministicAtomic>;

std::vector<std::uint32_t> pop_all(ReadyLanes& lanes, std::uint32_t home) {
  std::vector<std::uint32_t> out;
  std::uint32_t buf[8];
  while (std::size_t n = lanes.pop_bulk(buf, 8, home))
    out.insert(out.end(), buf, buf + n);
  return out;
}

TEST(ReadyLanes, LaneCountIsTheCpuCountRoundedUpToAPowerOfTwoAtMost64) {
  EXPECT_EQ(ReadyLanes::lanes_for(0), 1U);
  EXPECT_EQ(ReadyLanes::lanes_for(1), 1U);
  EXPECT_EQ(ReadyLanes::lanes_for(2), 2U);
  EXPECT_EQ(ReadyLanes::lanes_for(3), 4U);
  EXPECT_EQ(ReadyLanes::lanes_for(16), 16U);
  EXPECT_EQ(ReadyLanes::lanes_for(1000), 64U);
}

TEST(ReadyLanes, OneLanePopsInPushOrderChainsIncluded) {
  ReadyLanes lanes(16, 4);
  EXPECT_FALSE(lanes.any());
  const std::uint32_t chain[] = {5, 6, 7};
  lanes.push_chain_to(2, chain, 0);  // nothing
  EXPECT_FALSE(lanes.any());
  const std::uint32_t one = 9;
  lanes.push_chain_to(2, &one, 1);
  lanes.push_chain_to(2, chain, 3);
  const std::uint32_t last = 0;
  lanes.push_chain_to(2, &last, 1);
  EXPECT_TRUE(lanes.any());
  std::uint32_t buf[2];
  ASSERT_EQ(lanes.pop_bulk(buf, 2, 2), 2U);
  EXPECT_EQ(buf[0], 9U);
  EXPECT_EQ(buf[1], 5U);
  EXPECT_EQ(pop_all(lanes, 2), (std::vector<std::uint32_t>{6, 7, 0}));
  EXPECT_FALSE(lanes.any());
  EXPECT_EQ(lanes.pop_bulk(buf, 2, 2), 0U);
  // Reused indices go round again (the stub went in behind the last one).
  lanes.push_chain_to(2, chain, 3);
  EXPECT_EQ(pop_all(lanes, 2), (std::vector<std::uint32_t>{5, 6, 7}));
}

TEST(ReadyLanes, AWorkerFindsOtherLanesThroughTheBitmapHomeFirst) {
  ReadyLanes lanes(64, 8);
  const std::uint32_t a[] = {1, 2}, b[] = {10, 11}, c[] = {20};
  lanes.push_chain_to(3, a, 2);
  lanes.push_chain_to(6, b, 2);
  lanes.push_chain_to(5, c, 1);
  std::uint32_t buf[8];
  // Home 5 first, then the lanes after it (6), then those before (3); one lane per pop.
  ASSERT_EQ(lanes.pop_bulk(buf, 8, 5), 1U);
  EXPECT_EQ(buf[0], 20U);
  ASSERT_EQ(lanes.pop_bulk(buf, 8, 5), 2U);
  EXPECT_EQ(buf[0], 10U);
  ASSERT_EQ(lanes.pop_bulk(buf, 8, 5), 2U);
  EXPECT_EQ(buf[0], 1U);
  EXPECT_EQ(lanes.pop_bulk(buf, 8, 5), 0U);
}

TEST(ReadyLanes, ALaneWhoseBitWasLostIsStillFoundByTheScan) {
  ReadyLanes lanes(64, 64);
  const std::uint32_t a[] = {7, 8};
  lanes.push_chain_to(63, a, 2);
  ReadyLanesTestPeer::clear_bits(lanes);  // as a push and a worker's clear racing would
  EXPECT_TRUE(lanes.any()) << "any() must not trust the bitmap: sleeping depends on it";
  EXPECT_EQ(pop_all(lanes, 0), (std::vector<std::uint32_t>{7, 8}));
}

TEST(ReadyLanes, SweepKeepsWhatKeepSaysInOrderAndDropsTheRest) {
  ReadyLanes lanes(32, 2);
  const std::uint32_t a[] = {1, 2, 3, 4}, b[] = {10, 11};
  lanes.push_chain_to(0, a, 4);
  lanes.push_chain_to(1, b, 2);
  std::vector<std::uint32_t> visited;
  lanes.sweep(
      [&](std::uint32_t i) {
        visited.push_back(i);
        return i % 2 == 0;
      },
      [](auto&&) {});
  EXPECT_EQ(visited, (std::vector<std::uint32_t>{1, 2, 3, 4, 10, 11}));
  // Home lane 0 first, then lane 1.
  EXPECT_EQ(pop_all(lanes, 0), (std::vector<std::uint32_t>{2, 4, 10}));
  EXPECT_FALSE(lanes.any());
}

// Checks a run's pops: every index pushed exactly once, and each producer's in its push order.
// Producer p pushed indices p * kPer .. p * kPer + kPer - 1 in increasing order, into one lane.
void expect_each_once_in_producer_order(const std::vector<std::vector<std::uint32_t>>& popped,
                                        std::uint32_t producers, std::uint32_t per,
                                        const std::string& where) {
  std::vector<int> seen(static_cast<std::size_t>(producers) * per, 0);
  for (const auto& one : popped) {
    std::vector<std::int64_t> last(producers, -1);
    for (const std::uint32_t i : one) {
      ASSERT_LT(i, seen.size()) << where;
      ++seen[i];
      const std::uint32_t p = i / per;
      // One consumer's pops of one producer's lane come in push order.
      ASSERT_GT(static_cast<std::int64_t>(i), last[p])
          << where << ": " << i << " after " << last[p];
      last[p] = i;
    }
  }
  for (std::size_t i = 0; i < seen.size(); ++i)
    ASSERT_EQ(seen[i], 1) << where << ": index " << i << " popped " << seen[i] << " times";
}

// Two producers (one a chain pusher) into two lanes, two consumers with different homes: the
// push racing the pops of another lane and of its own (Vyukov's stub re-push) on every seed.
TEST(ReadyLanesSchedule, PushesRacingPopsHandEachIndexOverOnceInProducerOrder) {
  constexpr std::uint32_t kPer = 6;
  for (std::uint64_t seed = 0; seed < 3'000; ++seed) {
    const SchedulePolicy policy = seed % 2 ? SchedulePolicy::subset : SchedulePolicy::uniform;
    DetLanes lanes(2 * kPer, 2);
    std::vector<std::vector<std::uint32_t>> popped(2);
    std::atomic<std::uint32_t> taken{0};
    const auto consumer = [&](std::uint32_t home, std::vector<std::uint32_t>& out) {
      return [&, home] {
        std::uint32_t buf[3];
        while (taken.load() < 2 * kPer) {
          const std::size_t n = lanes.pop_bulk(buf, 3, home);
          out.insert(out.end(), buf, buf + n);
          taken.fetch_add(static_cast<std::uint32_t>(n));
          DeterministicSchedule::yield_point();
        }
      };
    };
    DeterministicSchedule sched(seed, policy);
    sched.run({[&] {
                 for (std::uint32_t i = 0; i < kPer; ++i)
                   lanes.push_chain_to(0, &i, 1);
               },
               [&] {
                 const std::uint32_t first[] = {kPer, kPer + 1, kPer + 2};
                 const std::uint32_t rest[] = {kPer + 3, kPer + 4, kPer + 5};
                 lanes.push_chain_to(1, first, 3);
                 lanes.push_chain_to(1, rest, 3);
               },
               consumer(0, popped[0]), consumer(1, popped[1])});
    expect_each_once_in_producer_order(popped, 2, kPer, "seed " + std::to_string(seed));
    if (HasFatalFailure()) return;
  }
}

// A sweep (as a cancel's) racing a producer and a consumer: every index is popped or disposed of
// exactly once, and what the sweep keeps is still popped.
TEST(ReadyLanesSchedule, ASweepRacingPushesAndPopsLosesAndDuplicatesNothing) {
  constexpr std::uint32_t kN = 8;
  for (std::uint64_t seed = 0; seed < 3'000; ++seed) {
    DetLanes lanes(kN, 2);
    std::vector<std::uint32_t> popped, dropped;
    std::atomic<std::uint32_t> done{0};
    DeterministicSchedule sched(seed, SchedulePolicy::uniform);
    sched.run({[&] {
                 for (std::uint32_t i = 0; i < kN; ++i)
                   lanes.push_chain_to(i % 2, &i, 1);
               },
               [&] {
                 std::uint32_t buf[2];
                 while (done.load() < kN) {
                   const std::size_t n = lanes.pop_bulk(buf, 2, 1);
                   popped.insert(popped.end(), buf, buf + n);
                   done.fetch_add(static_cast<std::uint32_t>(n));
                   DeterministicSchedule::yield_point();
                 }
               },
               [&] {
                 lanes.sweep(
                     [&](std::uint32_t i) {
                       if (i % 3 != 0) return true;
                       dropped.push_back(i);
                       done.fetch_add(1);
                       return false;
                     },
                     [](auto&&) {});
               }});
    std::vector<int> seen(kN, 0);
    for (const std::uint32_t i : popped)
      ++seen[i];
    for (const std::uint32_t i : dropped)
      ++seen[i];
    for (std::uint32_t i = 0; i < kN; ++i)
      ASSERT_EQ(seen[i], 1) << "seed " << seed << ": index " << i << " seen " << seen[i];
  }
}

// Real threads, more than the cores: 4 producers (lanes of their own, chains of 1-4) and 4
// consumers over 4 lanes, 20,000 indices, slots reused as soon as they are popped.
TEST(ReadyLanesStress, OversubscribedProducersAndConsumersConserveIndicesAndOrder) {
  const Watchdog watchdog(std::chrono::seconds(120), "ReadyLanesStress");
  constexpr std::uint32_t kProducers = 4, kPer = 5'000;
  ReadyLanes lanes(kProducers * kPer, 4);
  std::vector<std::vector<std::uint32_t>> popped(4);
  std::atomic<std::uint32_t> taken{0};
  std::vector<std::thread> threads;
  for (std::uint32_t p = 0; p < kProducers; ++p) {
    threads.emplace_back([&, p] {
      std::uint32_t chain[4];
      for (std::uint32_t i = 0; i < kPer;) {
        const std::uint32_t n = std::min<std::uint32_t>(1 + (i % 4), kPer - i);
        for (std::uint32_t k = 0; k < n; ++k)
          chain[k] = p * kPer + i + k;
        lanes.push_chain_to(p, chain, n);
        i += n;
        if (i % 64 == 0) std::this_thread::yield();
      }
    });
  }
  for (std::uint32_t c = 0; c < 4; ++c) {
    threads.emplace_back([&, c] {
      std::uint32_t buf[16];
      while (taken.load(std::memory_order_relaxed) < kProducers * kPer) {
        const std::size_t n = lanes.pop_bulk(buf, 1 + c * 5, c);
        popped[c].insert(popped[c].end(), buf, buf + n);
        taken.fetch_add(static_cast<std::uint32_t>(n), std::memory_order_relaxed);
        if (n == 0) std::this_thread::yield();
      }
    });
  }
  for (auto& t : threads)
    t.join();
  expect_each_once_in_producer_order(popped, kProducers, kPer, "stress");
  EXPECT_FALSE(lanes.any());
}

}  // namespace
