// Tests for rail::detail::MpmcRing: single-threaded behaviour, a real-thread conservation stress
// (oversubscribed on purpose), and the same kernels under the seeded DeterministicSchedule, where a
// failure message carries the seed that replays it.
#include "rail/detail/mpmc_ring.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "rail/error.hpp"
#include "support/deterministic_schedule.hpp"
#include "support/watchdog.hpp"

namespace {

using rail::detail::MpmcRing;
using rail::test::DeterministicAtomic;
using rail::test::DeterministicSchedule;
using rail::test::SchedulePolicy;
using rail::test::Watchdog;

#if defined(__SANITIZE_THREAD__)
#define RAIL_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RAIL_TEST_TSAN 1
#endif
#endif
#if defined(RAIL_TSAN) && !defined(RAIL_TEST_TSAN)
#define RAIL_TEST_TSAN 1
#endif

// Budgets: the whole file in under ~10 s in Release and ~60 s under ThreadSanitizer on 2 shared
// cores. Rings of capacity 1 and 2 hand over on (nearly) every item, so they cost a context switch
// per item and get fewer items; every case still wraps its ring thousands of laps. Context
// switches, not instrumented atomics, dominate both budgets, so TSan only trims the large rings.
#ifdef RAIL_TEST_TSAN
constexpr std::uint64_t kStressItemsLargeRing = 200'000;
constexpr std::uint64_t kStressItemsSmallRing = 25'000;
constexpr int kSeedsPerPolicy = 2'000;
#else
constexpr std::uint64_t kStressItemsLargeRing = 500'000;
constexpr std::uint64_t kStressItemsSmallRing = 25'000;
constexpr int kSeedsPerPolicy = 2'000;
#endif
// Soft deadline: threads give up and the test fails. Hard deadline: the watchdog aborts, for a
// livelock inside a noexcept ring operation, which nothing can interrupt.
constexpr auto kStressDeadline = std::chrono::seconds(60);
constexpr auto kStressWatchdog = std::chrono::seconds(90);

// An item names its producer and its index in that producer's sequence, so every consumer can check
// per-producer FIFO order and the test can check that each item arrived exactly once. Kernels run
// with 8-byte items (16-byte cells: seq beside the value) and 4-byte items (8-byte packed cells:
// seq and value in one word); a 4-byte item keeps the producer in its top 8 bits.
template <class Item>
constexpr unsigned kProducerShift = sizeof(Item) == 4 ? 24 : 32;
template <class Item>
constexpr Item make_item(std::uint64_t producer, std::uint64_t seq) {
  return static_cast<Item>(producer << kProducerShift<Item> | seq);
}
template <class Item>
constexpr std::uint64_t producer_of(Item item) {
  return std::uint64_t{item} >> kProducerShift<Item>;
}
template <class Item>
constexpr std::uint64_t seq_of(Item item) {
  return std::uint64_t{item} & ((std::uint64_t{1} << kProducerShift<Item>)-1);
}

// --- construction --------------------------------------------------------------------------------

TEST(MpmcRing, RoundsCapacityUpToPowerOfTwo) {
  for (const auto& [asked, expected] : std::vector<std::pair<std::size_t, std::size_t>>{
           {1, 1}, {2, 2}, {3, 4}, {4, 4}, {5, 8}, {1000, 1024}, {4096, 4096}, {4097, 8192}}) {
    MpmcRing<std::uint64_t> ring(asked);
    EXPECT_EQ(ring.capacity(), expected) << "min_capacity " << asked;
    EXPECT_EQ(ring.size_approx(), 0u);
  }
}

TEST(MpmcRing, RejectsZeroCapacityWithMessage) {
  try {
    MpmcRing<std::uint64_t> ring(0);
    FAIL() << "constructed a ring of capacity " << ring.capacity();
  } catch (const rail::Error& e) {
    EXPECT_EQ(e.code(), rail::ErrorCode::invalid_option);
    const std::string what = e.what();
    EXPECT_NE(what.find("min_capacity is 0"), std::string::npos) << what;
    EXPECT_NE(what.find("expected 1 to 2147483648"), std::string::npos) << what;
  }
}

TEST(MpmcRing, RejectsCapacityAboveTwoToThe31) {
  const std::size_t too_big = (std::size_t{1} << 31) + 1;
  try {
    MpmcRing<std::uint64_t> ring(too_big);
    FAIL() << "constructed a ring of capacity " << ring.capacity();
  } catch (const rail::Error& e) {
    EXPECT_EQ(e.code(), rail::ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find(std::to_string(too_big)), std::string::npos) << e.what();
  }
}

// --- single-threaded behaviour -------------------------------------------------------------------

TEST(MpmcRing, FifoOrderSingleThread) {
  MpmcRing<std::uint64_t> ring(16);
  for (std::uint64_t i = 0; i < 10; ++i)
    ASSERT_TRUE(ring.try_push(i));
  for (std::uint64_t i = 0; i < 10; ++i) {
    std::uint64_t out = ~0u;
    ASSERT_TRUE(ring.try_pop(out));
    EXPECT_EQ(out, i);
  }
}

// peek(pops()) guesses what the next pop takes (the engine prefetches the slot it names): the
// front value while one is published, nothing when empty, and it takes nothing.
TEST(MpmcRing, PeekAtThePopCountNamesWhatTheNextPopTakesWithoutTakingIt) {
  MpmcRing<std::uint32_t> ring(8);
  std::uint32_t seen = 0, out = 0;
  EXPECT_FALSE(ring.peek(ring.pops(), seen));
  for (std::uint32_t lap = 0; lap < 5; ++lap) {  // across laps: the seq, not the cell, decides
    for (std::uint32_t i = 0; i < 6; ++i)
      ASSERT_TRUE(ring.try_push(lap * 10 + i));
    for (std::uint32_t i = 0; i < 6; ++i) {
      ASSERT_TRUE(ring.peek(ring.pops(), seen));
      ASSERT_TRUE(ring.peek(ring.pops(), seen));  // twice: a peek takes nothing
      ASSERT_TRUE(ring.try_pop(out));
      EXPECT_EQ(seen, out);
    }
    EXPECT_FALSE(ring.peek(ring.pops(), seen)) << "lap " << lap;
    EXPECT_EQ(ring.pops(), (lap + 1) * 6u);
  }
}

TEST(MpmcRing, ReportsFullAndEmpty) {
  MpmcRing<std::uint64_t> ring(4);
  std::uint64_t out = 0;
  EXPECT_FALSE(ring.try_pop(out));
  for (std::uint64_t i = 0; i < 4; ++i)
    ASSERT_TRUE(ring.try_push(i));
  EXPECT_EQ(ring.size_approx(), 4u);
  EXPECT_FALSE(ring.try_push(99));
  EXPECT_EQ(ring.try_push_bulk(&out, 1), 0u);
  for (std::uint64_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(ring.try_pop(out));
    EXPECT_EQ(out, i);
  }
  EXPECT_FALSE(ring.try_pop(out));
  EXPECT_EQ(ring.try_pop_bulk(&out, 1), 0u);
  EXPECT_EQ(ring.size_approx(), 0u);
}

TEST(MpmcRing, BulkPushReturnsPrefixWhenNearlyFull) {
  MpmcRing<std::uint64_t> ring(8);
  for (std::uint64_t i = 0; i < 5; ++i)
    ASSERT_TRUE(ring.try_push(i));
  const std::array<std::uint64_t, 6> more{5, 6, 7, 8, 9, 10};
  EXPECT_EQ(ring.try_push_bulk(more.data(), more.size()), 3u);
  EXPECT_EQ(ring.size_approx(), 8u);
  for (std::uint64_t i = 0; i < 8; ++i) {
    std::uint64_t out = ~0u;
    ASSERT_TRUE(ring.try_pop(out));
    EXPECT_EQ(out, i) << "the accepted values must be the prefix 5, 6, 7";
  }
}

TEST(MpmcRing, BulkOfZeroOrMoreThanCapacity) {
  MpmcRing<std::uint64_t> ring(4);
  std::array<std::uint64_t, 10> values{0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  EXPECT_EQ(ring.try_push_bulk(values.data(), 0), 0u);
  EXPECT_EQ(ring.try_push_bulk(values.data(), values.size()), 4u);
  std::array<std::uint64_t, 10> out{};
  EXPECT_EQ(ring.try_pop_bulk(out.data(), 0), 0u);
  ASSERT_EQ(ring.try_pop_bulk(out.data(), out.size()), 4u);
  EXPECT_EQ((std::vector<std::uint64_t>(out.begin(), out.begin() + 4)),
            (std::vector<std::uint64_t>{0, 1, 2, 3}));
}

TEST(MpmcRing, BulkPopDrainsInOrder) {
  MpmcRing<std::uint64_t> ring(16);
  for (std::uint64_t i = 0; i < 10; ++i)
    ASSERT_TRUE(ring.try_push(i));
  std::array<std::uint64_t, 16> out{};
  ASSERT_EQ(ring.try_pop_bulk(out.data(), 4), 4u);
  for (std::uint64_t i = 0; i < 4; ++i)
    EXPECT_EQ(out[i], i);
  ASSERT_EQ(ring.try_pop_bulk(out.data(), out.size()), 6u);
  for (std::uint64_t i = 0; i < 6; ++i)
    EXPECT_EQ(out[i], 4 + i);
  EXPECT_EQ(ring.try_pop_bulk(out.data(), out.size()), 0u);
}

// push_held / push_held_bulk wait out a cell the consumer has not released yet rather than drop
// the value: a ring of 4 carries 20,000 values pushed in bulks of 1 to 7 past a popping thread,
// every value once and in order.
TEST(MpmcRing, PushHeldBulkWaitsOutBusyCellsAndKeepsOrder) {
  MpmcRing<std::uint32_t> ring(4);
  constexpr std::uint32_t kValues = 20'000;
  std::thread consumer([&] {
    std::uint32_t expected = 0;
    std::uint32_t v;
    while (expected < kValues) {
      if (!ring.try_pop(v)) continue;
      ASSERT_EQ(v, expected);
      ++expected;
    }
  });
  std::mt19937 rng(7);
  std::array<std::uint32_t, 7> batch{};
  for (std::uint32_t next = 0; next < kValues;) {
    const auto n = std::min<std::uint32_t>(1 + rng() % 7, kValues - next);
    if (n == 1) {
      ring.push_held(next++);
      continue;
    }
    for (std::uint32_t i = 0; i < n; ++i)
      batch[i] = next + i;
    ring.push_held_bulk(batch.data(), n);
    next += n;
  }
  consumer.join();
  std::uint32_t v;
  EXPECT_FALSE(ring.try_pop(v));
}

// Capacities 1 and 2 are the edge of the sequence encoding (Vyukov's original breaks at 1); 64
// turns the index remap on for 16-byte cells, and filling it completely proves the remap is a
// bijection (a collision would overwrite a value).
class MpmcRingLaps : public ::testing::TestWithParam<std::size_t> {};

template <class Item>
void wraps_around_many_laps(std::size_t capacity) {
  MpmcRing<Item> ring(capacity);
  ASSERT_EQ(ring.capacity(), capacity);
  std::mt19937_64 rng(capacity);
  std::uint64_t next_in = 0;
  std::uint64_t next_out = 0;
  std::vector<Item> buffer(capacity);
  for (int lap = 0; lap < 2'000; ++lap) {
    // Fill completely, alternating single and bulk pushes.
    while (next_in - next_out < capacity) {
      if (rng() % 2 == 0) {
        ASSERT_TRUE(ring.try_push(static_cast<Item>(next_in)));
        ++next_in;
      } else {
        const std::size_t room = capacity - static_cast<std::size_t>(next_in - next_out);
        const std::size_t n = 1 + rng() % room;
        for (std::size_t i = 0; i < n; ++i)
          buffer[i] = static_cast<Item>(next_in + i);
        ASSERT_EQ(ring.try_push_bulk(buffer.data(), n), n);
        next_in += n;
      }
    }
    ASSERT_FALSE(ring.try_push(static_cast<Item>(next_in))) << "lap " << lap;
    ASSERT_EQ(ring.size_approx(), capacity);
    // Drain a random amount (all of it every fourth lap), alternating single and bulk pops.
    const std::uint64_t keep = lap % 4 == 0 ? 0 : rng() % capacity;
    while (next_in - next_out > keep) {
      if (rng() % 2 == 0) {
        Item out = static_cast<Item>(~0u);
        ASSERT_TRUE(ring.try_pop(out));
        ASSERT_EQ(out, next_out) << "lap " << lap;
        ++next_out;
      } else {
        const std::size_t want = static_cast<std::size_t>(next_in - next_out - keep);
        const std::size_t got = ring.try_pop_bulk(buffer.data(), want);
        ASSERT_EQ(got, want);
        for (std::size_t i = 0; i < got; ++i)
          ASSERT_EQ(buffer[i], next_out + i) << "lap " << lap;
        next_out += got;
      }
    }
    if (keep == 0) {
      Item out = 0;
      ASSERT_FALSE(ring.try_pop(out)) << "lap " << lap;
    }
  }
}

TEST_P(MpmcRingLaps, WrapsAroundManyLaps) {
  wraps_around_many_laps<std::uint64_t>(GetParam());
}
TEST_P(MpmcRingLaps, PackedCellsWrapAroundManyLaps) {
  wraps_around_many_laps<std::uint32_t>(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Capacities, MpmcRingLaps, ::testing::Values(1, 2, 4, 64),
                         [](const auto& info) {
                           std::string name = "Capacity";
                           name += std::to_string(info.param);
                           return name;
                         });

// Cells of other sizes: a 24-byte value gives 32-byte cells (two per line); a 4-byte one is packed
// with its seq into one 8-byte word.
TEST(MpmcRing, CarriesValuesOfOtherSizes) {
  struct Triple {
    std::uint64_t a, b, c;
  };
  MpmcRing<Triple> triples(64);
  MpmcRing<std::uint32_t> words(64);
  for (std::uint64_t i = 0; i < 64; ++i) {
    ASSERT_TRUE(triples.try_push(Triple{i, i * 2, i * 3}));
    ASSERT_TRUE(words.try_push(static_cast<std::uint32_t>(i)));
  }
  for (std::uint64_t i = 0; i < 64; ++i) {
    Triple t{};
    std::uint32_t w = 0;
    ASSERT_TRUE(triples.try_pop(t));
    ASSERT_TRUE(words.try_pop(w));
    EXPECT_EQ(t.a, i);
    EXPECT_EQ(t.b, i * 2);
    EXPECT_EQ(t.c, i * 3);
    EXPECT_EQ(w, i);
  }
}

// --- real threads: conservation under contention ------------------------------------------------

class MpmcRingStress
    : public ::testing::TestWithParam<std::tuple<std::pair<int, int>, std::size_t>> {};

// Every item is pushed once and must be popped exactly once; each consumer must see each
// producer's items in increasing order. Bulk and single operations are mixed at random, and with
// 4x4 there are 8 threads on a 2-core machine, so threads are preempted mid-operation.
template <class Item>
void every_item_popped_exactly_once(int producers, int consumers, std::size_t capacity) {
  const std::uint64_t items = capacity < 64 ? kStressItemsSmallRing : kStressItemsLargeRing;
  const std::uint64_t per_producer = items / static_cast<std::uint64_t>(producers);
  const std::uint64_t total = per_producer * static_cast<std::uint64_t>(producers);
  const auto deadline = std::chrono::steady_clock::now() + kStressDeadline;
  const Watchdog watchdog(kStressWatchdog,
                          ::testing::UnitTest::GetInstance()->current_test_info()->name());
  constexpr std::size_t kMaxBulk = 8;

  MpmcRing<Item> ring(capacity);
  std::atomic<std::uint64_t> popped_total{0};
  std::atomic<bool> timed_out{false};
  // A failed attempt is where a hang would spin, so that is where the deadline is checked.
  auto back_off = [&] {
    if (std::chrono::steady_clock::now() > deadline) timed_out.store(true);
    std::this_thread::yield();
  };

  struct ConsumerLog {
    std::vector<Item> items;
    std::uint64_t order_violations = 0;
    std::uint64_t sum = 0;
    std::uint64_t xor_all = 0;
  };
  std::vector<ConsumerLog> logs(static_cast<std::size_t>(consumers));

  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([&, p] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(p) * 7919 + capacity);
      std::array<Item, kMaxBulk> batch{};
      std::uint64_t next = 0;
      while (next < per_producer && !timed_out.load(std::memory_order_relaxed)) {
        std::size_t accepted = 0;
        if (rng() % 2 == 0) {
          accepted = ring.try_push(make_item<Item>(static_cast<std::uint64_t>(p), next)) ? 1 : 0;
        } else {
          const std::size_t n = static_cast<std::size_t>(
              std::min<std::uint64_t>(1 + rng() % kMaxBulk, per_producer - next));
          for (std::size_t i = 0; i < n; ++i) {
            batch[i] = make_item<Item>(static_cast<std::uint64_t>(p), next + i);
          }
          accepted = ring.try_push_bulk(batch.data(), n);
        }
        if (accepted == 0) back_off();
        next += accepted;
      }
    });
  }
  for (int c = 0; c < consumers; ++c) {
    threads.emplace_back([&, c] {
      ConsumerLog& log = logs[static_cast<std::size_t>(c)];
      log.items.reserve(total / static_cast<std::uint64_t>(consumers) + total / 4);
      std::vector<std::int64_t> last_seq(static_cast<std::size_t>(producers), -1);
      std::mt19937_64 rng(static_cast<std::uint64_t>(c) * 104729 + capacity);
      std::array<Item, kMaxBulk> batch{};
      while (popped_total.load(std::memory_order_relaxed) < total &&
             !timed_out.load(std::memory_order_relaxed)) {
        std::size_t got = 0;
        if (rng() % 2 == 0) {
          got = ring.try_pop(batch[0]) ? 1 : 0;
        } else {
          got = ring.try_pop_bulk(batch.data(), 1 + rng() % kMaxBulk);
        }
        if (got == 0) {
          back_off();
          continue;
        }
        for (std::size_t i = 0; i < got; ++i) {
          const Item item = batch[i];
          const auto seq = static_cast<std::int64_t>(seq_of(item));
          std::int64_t& last = last_seq[producer_of(item) % last_seq.size()];
          if (seq <= last) ++log.order_violations;
          last = seq;
          log.sum += item;
          log.xor_all ^= item;
          log.items.push_back(item);
        }
        popped_total.fetch_add(got, std::memory_order_relaxed);
      }
    });
  }
  for (std::thread& t : threads)
    t.join();

  ASSERT_FALSE(timed_out.load()) << "no progress within the deadline; popped "
                                 << popped_total.load() << " of " << total;
  std::uint64_t expected_sum = 0;
  std::uint64_t expected_xor = 0;
  for (std::uint64_t p = 0; p < static_cast<std::uint64_t>(producers); ++p) {
    for (std::uint64_t i = 0; i < per_producer; ++i) {
      expected_sum += make_item<Item>(p, i);
      expected_xor ^= make_item<Item>(p, i);
    }
  }
  std::uint64_t sum = 0;
  std::uint64_t xor_all = 0;
  std::vector<std::vector<std::uint8_t>> seen(static_cast<std::size_t>(producers),
                                              std::vector<std::uint8_t>(per_producer, 0));
  std::uint64_t bad_items = 0;
  for (std::size_t c = 0; c < logs.size(); ++c) {
    EXPECT_EQ(logs[c].order_violations, 0u) << "consumer " << c << " saw a producer out of order";
    sum += logs[c].sum;
    xor_all ^= logs[c].xor_all;
    for (const Item item : logs[c].items) {
      const std::uint64_t p = producer_of(item);
      const std::uint64_t s = seq_of(item);
      if (p >= seen.size() || s >= per_producer || seen[p][s]++ != 0) ++bad_items;
    }
  }
  EXPECT_EQ(popped_total.load(), total);
  EXPECT_EQ(bad_items, 0u) << "duplicated or invented items";
  EXPECT_EQ(sum, expected_sum);
  EXPECT_EQ(xor_all, expected_xor);
  Item leftover = 0;
  EXPECT_FALSE(ring.try_pop(leftover)) << "an extra item remained: " << leftover;
  EXPECT_EQ(ring.size_approx(), 0u);
}

TEST_P(MpmcRingStress, EveryItemPoppedExactlyOnceInProducerOrder) {
  // Plain variables, not structured bindings: clang 14 cannot capture bindings in lambdas.
  every_item_popped_exactly_once<std::uint64_t>(
      std::get<0>(GetParam()).first, std::get<0>(GetParam()).second, std::get<1>(GetParam()));
}
TEST_P(MpmcRingStress, PackedCellsEveryItemPoppedExactlyOnceInProducerOrder) {
  every_item_popped_exactly_once<std::uint32_t>(
      std::get<0>(GetParam()).first, std::get<0>(GetParam()).second, std::get<1>(GetParam()));
}

// Named functions, not lambdas: a structured binding's comma would split the macro's arguments.
// Appending, not "literal" + std::string: g++ 12 reports a false -Wrestrict on the latter
// (GCC bug 105329).
std::string StressName(
    const ::testing::TestParamInfo<std::tuple<std::pair<int, int>, std::size_t>>& info) {
  const auto& [shape, capacity] = info.param;
  std::string name = "P";
  name += std::to_string(shape.first);
  name += "xC";
  name += std::to_string(shape.second);
  name += "_Capacity";
  name += std::to_string(capacity);
  return name;
}

INSTANTIATE_TEST_SUITE_P(Shapes, MpmcRingStress,
                         ::testing::Combine(::testing::Values(std::pair{1, 1}, std::pair{1, 4},
                                                              std::pair{4, 1}, std::pair{4, 4}),
                                            ::testing::Values(std::size_t{1}, std::size_t{2},
                                                              std::size_t{64}, std::size_t{4096})),
                         StressName);

// A peek racing pushes and pops returns a value that was pushed, never a released cell's 0 or a
// value of another lap paired with this lap's seq (review: the seq and the value were two loads
// of the cell's word; 1,596 of 14,554 peeks over 2,000 seeds returned 0).
TEST(MpmcRingSchedule, APeekRacingPushesAndPopsOnlyEverSeesPushedValues) {
  for (std::uint64_t seed = 0; seed < 2'000; ++seed) {
    MpmcRing<std::uint32_t, DeterministicAtomic> ring(2);
    std::vector<std::uint32_t> seen;
    DeterministicSchedule sched(seed, SchedulePolicy::uniform);
    sched.run({[&] {
                 for (std::uint32_t v = 100; v < 110; ++v) {
                   while (!ring.try_push(v)) {
                   }
                   std::uint32_t out = 0;
                   while (!ring.try_pop(out)) {
                   }
                 }
               },
               [&] {
                 for (int i = 0; i < 20; ++i) {
                   std::uint32_t out = 0;
                   if (ring.peek(ring.pops(), out)) seen.push_back(out);
                 }
               }});
    for (const std::uint32_t v : seen)
      ASSERT_TRUE(v >= 100 && v < 110) << "seed " << seed << ": peek returned " << v;
  }
}

// --- DeterministicSchedule: the harness itself ---------------------------------------------------

// If the scheduler did not interleave at atomic operations, a load-then-store increment could
// never lose an update, and every ring test below would be vacuous.
TEST(DeterministicSchedule, InterleavesAtAtomicOperations) {
  int lost = 0;
  int intact = 0;
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    DeterministicAtomic<std::uint64_t> counter{0};
    DeterministicSchedule sched(seed, SchedulePolicy::uniform);
    auto increment_twice = [&] {
      for (int i = 0; i < 2; ++i)
        counter.store(counter.load() + 1);
    };
    sched.run({increment_twice, increment_twice});
    (counter.load() == 4 ? intact : lost) += 1;
  }
  EXPECT_GT(lost, 0) << "no seed interleaved two load/store increments";
  EXPECT_GT(intact, 0) << "no seed ran the increments back to back";
}

TEST(DeterministicSchedule, ReplaysFromSeed) {
  for (const SchedulePolicy policy : {SchedulePolicy::uniform, SchedulePolicy::subset}) {
    auto trace_of = [policy](std::uint64_t seed) {
      DeterministicAtomic<std::uint64_t> tick{0};
      std::vector<int> trace;  // appended by one thread at a time, ordered by the hand-overs
      DeterministicSchedule sched(seed, policy);
      std::vector<std::function<void()>> bodies;
      for (int t = 0; t < 3; ++t) {
        bodies.emplace_back([&, t] {
          for (int i = 0; i < 50; ++i) {
            tick.fetch_add(1);
            trace.push_back(t);
          }
        });
      }
      sched.run(std::move(bodies));
      return trace;
    };
    EXPECT_EQ(trace_of(42), trace_of(42));
    EXPECT_NE(trace_of(42), trace_of(43));
  }
}

// --- DeterministicSchedule: the ring's kernels ---------------------------------------------------

template <class Item>
using DetRing = MpmcRing<Item, DeterministicAtomic>;

// A one-cell ring has the fewest distinct interleavings (and the costliest ones: every item is a
// hand-over), so a quarter of the seeds covers it as well as the full count covers 2 and 4.
int seeds_for(std::size_t capacity) {
  return capacity == 1 ? kSeedsPerPolicy / 4 : kSeedsPerPolicy;
}

class MpmcRingDeterministic
    : public ::testing::TestWithParam<std::tuple<std::size_t, SchedulePolicy>> {};

// Each of 2-3 threads runs a short seeded script of pushes, pops and bulk variants (so every
// thread is both producer and consumer), recording what succeeded. The ring is then drained on the
// main thread. Because head_ only grows, the items popped during the run must be exactly a prefix
// of each thread's accepted pushes and the drained items the rest, in order.
template <class Item>
void scripted_ops_conserve_items(std::size_t capacity, SchedulePolicy policy) {
  constexpr int kOps = 6;
  constexpr std::size_t kMaxBulk = 3;
  for (int seed = 0; seed < seeds_for(capacity); ++seed) {
    const int threads = 2 + seed % 2;
    DetRing<Item> ring(capacity);
    std::vector<std::vector<Item>> pushed(static_cast<std::size_t>(threads));
    std::vector<std::vector<Item>> popped(static_cast<std::size_t>(threads));
    std::vector<std::function<void()>> bodies;
    for (int t = 0; t < threads; ++t) {
      bodies.emplace_back([&, t] {
        std::mt19937_64 script(static_cast<std::uint64_t>(seed) * 31 +
                               static_cast<std::uint64_t>(t));
        std::array<Item, kMaxBulk> batch{};
        std::uint64_t next = 0;
        auto& my_pushed = pushed[static_cast<std::size_t>(t)];
        auto& my_popped = popped[static_cast<std::size_t>(t)];
        for (int op = 0; op < kOps; ++op) {
          const std::size_t n = 1 + script() % kMaxBulk;
          switch (script() % 4) {
            case 0:
              if (ring.try_push(make_item<Item>(static_cast<std::uint64_t>(t), next))) {
                my_pushed.push_back(make_item<Item>(static_cast<std::uint64_t>(t), next++));
              }
              break;
            case 1: {
              for (std::size_t i = 0; i < n; ++i) {
                batch[i] = make_item<Item>(static_cast<std::uint64_t>(t), next + i);
              }
              const std::size_t k = ring.try_push_bulk(batch.data(), n);
              my_pushed.insert(my_pushed.end(), batch.begin(),
                               batch.begin() + static_cast<std::ptrdiff_t>(k));
              next += k;
              break;
            }
            case 2:
              if (ring.try_pop(batch[0])) my_popped.push_back(batch[0]);
              break;
            default: {
              const std::size_t k = ring.try_pop_bulk(batch.data(), n);
              my_popped.insert(my_popped.end(), batch.begin(),
                               batch.begin() + static_cast<std::ptrdiff_t>(k));
              break;
            }
          }
        }
      });
    }
    DeterministicSchedule sched(static_cast<std::uint64_t>(seed), policy);
    sched.run(std::move(bodies));

    std::uint64_t accepted = 0;
    std::uint64_t taken = 0;
    for (int t = 0; t < threads; ++t) {
      accepted += pushed[static_cast<std::size_t>(t)].size();
      taken += popped[static_cast<std::size_t>(t)].size();
    }
    ASSERT_LE(taken, accepted) << "seed " << seed;
    ASSERT_EQ(ring.size_approx(), accepted - taken) << "seed " << seed;
    std::vector<Item> drained;
    for (Item item = 0; ring.try_pop(item);)
      drained.push_back(item);

    // Per producer: what consumers got (merged in sequence order) followed by what was drained
    // must equal what it pushed, and each consumer and the drain must see it in order.
    std::vector<std::vector<Item>> delivered(static_cast<std::size_t>(threads));
    for (const auto& log : popped) {
      std::vector<std::int64_t> last(static_cast<std::size_t>(threads), -1);
      for (const Item item : log) {
        const auto p = static_cast<std::size_t>(producer_of(item));
        ASSERT_LT(p, delivered.size()) << "seed " << seed;
        ASSERT_GT(static_cast<std::int64_t>(seq_of(item)), last[p]) << "seed " << seed;
        last[p] = static_cast<std::int64_t>(seq_of(item));
        delivered[p].push_back(item);
      }
    }
    for (auto& d : delivered)
      std::sort(d.begin(), d.end());
    for (const Item item : drained) {
      const auto p = static_cast<std::size_t>(producer_of(item));
      ASSERT_LT(p, delivered.size()) << "seed " << seed;
      delivered[p].push_back(item);  // must extend the sorted prefix in order
    }
    for (int t = 0; t < threads; ++t) {
      ASSERT_EQ(delivered[static_cast<std::size_t>(t)], pushed[static_cast<std::size_t>(t)])
          << "seed " << seed << ", producer " << t;
    }
  }
}

// Producers push a fixed number of items, spinning until each is accepted; consumers pop until all
// have arrived. Spinning on a cell that a preempted producer has claimed but not published is the
// case Vyukov's protocol reports as "empty", and the schedule must let that producer run again.
template <class Item>
void spinning_threads_deliver_everything(std::size_t capacity, SchedulePolicy policy) {
  constexpr std::uint64_t kPerProducer = 3;
  for (int seed = 0; seed < seeds_for(capacity); ++seed) {
    // Alternate 1 producer + 2 consumers and 2 producers + 1 consumer.
    const int producers = 1 + seed % 2;
    const int consumers = 3 - producers;
    const std::uint64_t total = kPerProducer * static_cast<std::uint64_t>(producers);
    DetRing<Item> ring(capacity);
    DeterministicAtomic<std::uint64_t> delivered{0};
    std::vector<std::vector<Item>> popped(static_cast<std::size_t>(consumers));
    std::vector<std::function<void()>> bodies;
    for (int p = 0; p < producers; ++p) {
      bodies.emplace_back([&, p] {
        std::uint64_t next = 0;
        std::array<Item, 2> batch{};
        while (next < kPerProducer) {
          if ((next + static_cast<std::uint64_t>(seed)) % 3 == 0 && next + 1 < kPerProducer) {
            batch = {make_item<Item>(static_cast<std::uint64_t>(p), next),
                     make_item<Item>(static_cast<std::uint64_t>(p), next + 1)};
            next += ring.try_push_bulk(batch.data(), batch.size());
          } else if (ring.try_push(make_item<Item>(static_cast<std::uint64_t>(p), next))) {
            ++next;
          }
        }
      });
    }
    for (int c = 0; c < consumers; ++c) {
      bodies.emplace_back([&, c] {
        auto& log = popped[static_cast<std::size_t>(c)];
        std::array<Item, 2> batch{};
        while (delivered.load() < total) {
          const std::size_t k = (log.size() + static_cast<std::size_t>(c)) % 2 == 0
                                    ? ring.try_pop_bulk(batch.data(), batch.size())
                                    : (ring.try_pop(batch[0]) ? 1 : 0);
          log.insert(log.end(), batch.begin(), batch.begin() + static_cast<std::ptrdiff_t>(k));
          if (k != 0) delivered.fetch_add(k);
        }
      });
    }
    DeterministicSchedule sched(static_cast<std::uint64_t>(seed), policy);
    sched.run(std::move(bodies));

    std::vector<std::vector<std::uint64_t>> per_producer(static_cast<std::size_t>(producers));
    for (const auto& log : popped) {
      std::vector<std::int64_t> last(static_cast<std::size_t>(producers), -1);
      for (const Item item : log) {
        const auto p = static_cast<std::size_t>(producer_of(item));
        ASSERT_LT(p, per_producer.size()) << "seed " << seed;
        ASSERT_GT(static_cast<std::int64_t>(seq_of(item)), last[p]) << "seed " << seed;
        last[p] = static_cast<std::int64_t>(seq_of(item));
        per_producer[p].push_back(seq_of(item));
      }
    }
    for (int p = 0; p < producers; ++p) {
      auto& got = per_producer[static_cast<std::size_t>(p)];
      std::sort(got.begin(), got.end());
      std::vector<std::uint64_t> want(kPerProducer);
      for (std::uint64_t i = 0; i < kPerProducer; ++i)
        want[i] = i;
      ASSERT_EQ(got, want) << "seed " << seed << ", producer " << p;
    }
    Item extra = 0;
    ASSERT_FALSE(ring.try_pop(extra)) << "seed " << seed;
  }
}

TEST_P(MpmcRingDeterministic, ScriptedOpsConserveItemsInOrder) {
  scripted_ops_conserve_items<std::uint64_t>(std::get<0>(GetParam()), std::get<1>(GetParam()));
}
TEST_P(MpmcRingDeterministic, PackedCellsScriptedOpsConserveItemsInOrder) {
  scripted_ops_conserve_items<std::uint32_t>(std::get<0>(GetParam()), std::get<1>(GetParam()));
}
TEST_P(MpmcRingDeterministic, SpinningProducersAndConsumersDeliverEverything) {
  spinning_threads_deliver_everything<std::uint64_t>(std::get<0>(GetParam()),
                                                     std::get<1>(GetParam()));
}
TEST_P(MpmcRingDeterministic, PackedCellsSpinningProducersAndConsumersDeliverEverything) {
  spinning_threads_deliver_everything<std::uint32_t>(std::get<0>(GetParam()),
                                                     std::get<1>(GetParam()));
}

std::string DeterministicName(
    const ::testing::TestParamInfo<std::tuple<std::size_t, SchedulePolicy>>& info) {
  const auto& [capacity, policy] = info.param;
  std::string name = "Capacity";
  name += std::to_string(capacity);
  name += policy == SchedulePolicy::uniform ? "_Uniform" : "_Subset";
  return name;
}

INSTANTIATE_TEST_SUITE_P(
    Capacities, MpmcRingDeterministic,
    ::testing::Combine(::testing::Values(std::size_t{1}, std::size_t{2}, std::size_t{4}),
                       ::testing::Values(SchedulePolicy::uniform, SchedulePolicy::subset)),
    DeterministicName);

}  // namespace
