// FreeStack (detail/free_stack.hpp): LIFO order, all-or-nothing bulk pops, and, under the seeded
// DeterministicSchedule, that concurrent pops and pushes never hand one index to two holders
// (the ABA case: a popper's stale `next` must never be installed).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "rail/detail/free_stack.hpp"
#include "support/deterministic_schedule.hpp"

namespace rail {
namespace {

using detail::BasicFreeStack;
using detail::FreeStack;
using test::DeterministicAtomic;
using test::DeterministicSchedule;
using test::SchedulePolicy;

TEST(FreeStack, HandsOutTheMostRecentlyFreedIndexFirst) {
  FreeStack s(8);
  std::uint32_t a = 99, b = 99, c = 99;
  ASSERT_TRUE(s.try_pop(a));
  ASSERT_TRUE(s.try_pop(b));
  EXPECT_EQ(a, 0u);  // a fresh stack starts at slot 0, in order
  EXPECT_EQ(b, 1u);
  s.push(a);
  ASSERT_TRUE(s.try_pop(c));
  EXPECT_EQ(c, a);  // reused at once: the same slot and its warm lines
}

TEST(FreeStack, BulkPopIsAllOrNothing) {
  FreeStack s(4);
  std::uint32_t out[5] = {};
  EXPECT_EQ(s.try_pop_bulk(out, 5), 0u);  // only 4 free: none taken
  EXPECT_EQ(s.try_pop_bulk(out, 4), 4u);
  EXPECT_TRUE(s.empty());
  std::uint32_t one;
  EXPECT_FALSE(s.try_pop(one));
  s.push_bulk(out, 4);
  std::uint32_t again[4] = {};
  ASSERT_EQ(s.try_pop_bulk(again, 4), 4u);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(again[i], out[i]);  // a pushed chain comes back in its own order
}

// Three threads pop one or two indices, hold them, and push them back (singly or as a chain),
// each several times; every index must be held by at most one of them at any moment.
TEST(FreeStackSchedule, ConcurrentPopsAndPushesNeverShareAnIndex) {
  for (std::uint64_t seed = 0; seed < 10'000; ++seed) {
    constexpr std::uint32_t kSlots = 3;
    BasicFreeStack<DeterministicAtomic> stack(kSlots);
    DeterministicAtomic<int> holders[kSlots] = {};
    DeterministicAtomic<int> shared{0};
    auto worker = [&](bool bulk) {
      for (int round = 0; round < 3; ++round) {
        std::uint32_t got[2];
        const std::size_t n = stack.try_pop_bulk(got, bulk ? 2 : 1);
        for (std::size_t i = 0; i < n; ++i)
          if (holders[got[i]].fetch_add(1) != 0) shared.fetch_add(1);
        for (std::size_t i = 0; i < n; ++i)
          holders[got[i]].fetch_sub(1);
        if (n == 2) {
          stack.push_bulk(got, 2);
        } else if (n == 1) {
          stack.push(got[0]);
        }
      }
    };
    DeterministicSchedule sched(seed, seed % 2 ? SchedulePolicy::subset : SchedulePolicy::uniform);
    sched.run({[&] { worker(false); }, [&] { worker(true); }, [&] { worker(false); }});
    ASSERT_EQ(shared.load(), 0) << "an index was held twice; seed " << seed;
    std::uint32_t all[kSlots];
    ASSERT_EQ(stack.try_pop_bulk(all, kSlots), kSlots) << "an index was lost; seed " << seed;
    std::vector<int> seen(kSlots, 0);
    for (auto i : all)
      ASSERT_EQ(++seen[i], 1) << "seed " << seed;
  }
}

}  // namespace
}  // namespace rail
