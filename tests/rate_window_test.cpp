// RateWindow (detail/rate_window.hpp) through DownstreamLimits: RateLimit{max, per} means at most
// `max` starts in any window of `per`, the first included; a refused take is told the exact
// time to come back; stale clock readings and threads (real, and the seeded DeterministicSchedule)
// never let more in; a rate change carries the starts of the last window; a change of kind starts
// afresh; bad windows are refused with a message naming the field. Time is an int64 passed in.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "rail/detail/downstream_limits.hpp"
#include "rail/downstream.hpp"
#include "rail/error.hpp"
#include "support/deterministic_schedule.hpp"
#include "support/downstream_options.hpp"
#include "support/starts_in_window.hpp"
#include "support/watchdog.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;
using detail::Admission;
using detail::BasicDownstreamLimits;
using detail::DownstreamLimits;
using test::DeterministicAtomic;
using test::DeterministicSchedule;
using test::most_in_a_window;
using test::SchedulePolicy;

constexpr std::int64_t kSecond = 1'000'000'000;
constexpr std::int64_t kMs = 1'000'000;

/// window(max, per, concurrency): a sliding window; a concurrency of 0 is left unset.
DownstreamOptions window(std::uint64_t max, Duration per, std::uint32_t concurrency = 0) {
  return {.concurrency = test::limit_or_none(concurrency),
          .rate = RateLimit{.max = max, .per = per}};
}

/// take_all(d, t): takes at t until refused; how many, and the refusal's time in *next.
template <class Limits>
std::int64_t take_all(Limits& d, std::int64_t t, std::int64_t* next = nullptr) {
  for (std::int64_t n = 0;; ++n) {
    if (n > (1 << 22)) {
      ADD_FAILURE() << "more than 2^22 starts at t = " << t;
      return n;
    }
    if (const auto at = d.try_take_token(t)) {
      if (next != nullptr) *next = *at;
      return n;
    }
  }
}

TEST(RateWindow, ThreeHundredPerSecondAdmitsExactlyThreeHundredInTheFirstSecondAndEachAfter) {
  DownstreamLimits d(window(300, 1s), 0);
  for (int s = 0; s <= 10; ++s) {
    ASSERT_EQ(d.snapshot(s * kSecond).tokens, 300u) << "second " << s;
    std::int64_t next = 0;
    ASSERT_EQ(take_all(d, s * kSecond, &next), 300) << "second " << s;
    ASSERT_EQ(next, (s + 1) * kSecond) << "second " << s;
    ASSERT_EQ(take_all(d, (s + 1) * kSecond - 1), 0) << "1 ns before the window ends";
  }
}

TEST(RateWindow, MillisecondStepsNeverPutMoreThanMaxInAnyWindowAndUseEveryStartAllowed) {
  DownstreamLimits d(window(300, 1s), 0);
  std::vector<std::int64_t> starts;
  for (int i = 0; i <= 10'000; ++i) {  // 10 s of 1 ms steps
    const std::int64_t t = i * kMs;
    for (std::int64_t n = take_all(d, t); n > 0; --n)
      starts.push_back(t);
  }
  EXPECT_EQ(most_in_a_window(starts, kSecond), 300u);
  // All at t = 0, then each place comes free exactly 1 s after it was taken: 300 per second.
  EXPECT_EQ(starts.size(), 300u * 11);
}

TEST(RateWindow, ARefusalNamesTheExactNanosecondTheOldestStartLeavesTheWindow) {
  DownstreamLimits d(window(3, 1s), 0);
  ASSERT_FALSE(d.try_take_token(10).has_value());
  ASSERT_FALSE(d.try_take_token(20).has_value());
  ASSERT_FALSE(d.try_take_token(30).has_value());
  EXPECT_EQ(d.try_take_token(40), kSecond + 10);
  EXPECT_EQ(d.try_take_token(kSecond + 9), kSecond + 10);
  EXPECT_FALSE(d.try_take_token(kSecond + 10).has_value());
  EXPECT_EQ(d.try_take_token(kSecond + 10), kSecond + 20);
  EXPECT_EQ(d.snapshot(kSecond + 30).tokens, 2u) << "the starts at 20 and 30 ns are 1 s old";
}

TEST(RateWindow, AStaleClockReadingCountsAsTheLatestStartBeforeIt) {
  // One start per 100 ns. A take at 100, then one whose reading (50) is older: it must not be
  // judged as if the window began at 50, and a record never moves back in time.
  DownstreamLimits d(window(1, 100ns), 0);
  ASSERT_FALSE(d.try_take_token(100).has_value());
  EXPECT_EQ(d.try_take_token(50), 200);
  ASSERT_FALSE(d.try_take_token(200).has_value());
  EXPECT_EQ(d.try_take_token(250), 300);
}

TEST(RateWindow, RandomReadingsNeverPutMoreThanMaxInAnyWindow) {
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    std::mt19937_64 rng(seed);
    const std::uint64_t max = 1 + rng() % 8;
    const std::int64_t per = 1 + static_cast<std::int64_t>(rng() % 1000);
    DownstreamLimits d(window(max, Duration{per}), 0);
    std::vector<std::int64_t> admitted;
    std::int64_t clock = 0;
    for (int i = 0; i < 2000; ++i) {
      clock += static_cast<std::int64_t>(rng() % 40);
      // A third of the readings are stale: taken a while ago, judged now.
      const std::int64_t reading =
          rng() % 3 == 0 ? clock - static_cast<std::int64_t>(rng() % 200) : clock;
      const auto refused = d.try_take_token(reading);
      if (!refused) {
        admitted.push_back(reading);
      } else {
        ASSERT_GT(*refused, reading) << "seed " << seed;
      }
    }
    ASSERT_LE(most_in_a_window(admitted, per), max) << "seed " << seed;
    ASSERT_GE(admitted.size(), max) << "seed " << seed;
  }
}

TEST(RateWindow, WithPermitsTheLookTakesNothingAndARefusalHoldsNoPermit) {
  DownstreamLimits d(window(1, 1s, 5), 0);
  EXPECT_EQ(d.try_admit(0).kind, Admission::Kind::admitted);
  const Admission a = d.try_admit(0);
  EXPECT_EQ(a.kind, Admission::Kind::rate_limited);
  EXPECT_EQ(a.until_ns, kSecond);
  EXPECT_EQ(d.in_flight(), 1u);
  EXPECT_FALSE(d.may_admit(kSecond - 1));
  EXPECT_TRUE(d.may_admit(kSecond));
  EXPECT_EQ(d.try_admit(kSecond).kind, Admission::Kind::admitted);
}

TEST(RateWindow, AChangeOfWindowCarriesTheStartsOfTheLastWindow) {
  DownstreamLimits d(window(2, 1s), 0);
  ASSERT_EQ(take_all(d, 0), 2);
  d.set_rate(RateLimit{.max = 3, .per = 1s}, 500 * kMs);
  std::int64_t next = 0;
  EXPECT_EQ(take_all(d, 500 * kMs, &next), 1) << "two of three places are taken since t = 0";
  EXPECT_EQ(next, kSecond);
  EXPECT_EQ(take_all(d, kSecond), 2) << "the two starts at t = 0 have left the window";
  d.set_rate(RateLimit{.max = 1, .per = 2s}, kSecond);
  EXPECT_EQ(d.try_take_token(2 * kSecond), 3 * kSecond) << "its last start was at 1 s";
  EXPECT_FALSE(d.try_take_token(3 * kSecond).has_value());
}

TEST(RateWindow, AWiderWindowCarriesWhatTheOldRingKeptAndCountsOlderStartsAsItsOldest) {
  DownstreamLimits d(window(1, 1s), 0);
  ASSERT_FALSE(d.try_take_token(0).has_value());
  ASSERT_FALSE(d.try_take_token(kSecond).has_value());
  // Two starts in the last 10 s, both in the old ring (2 slots): one place is free, and the
  // start at 0 s leaves the window at 10 s.
  d.set_rate(RateLimit{.max = 3, .per = 10s}, kSecond);
  std::int64_t next = 0;
  EXPECT_EQ(take_all(d, 2 * kSecond, &next), 1);
  EXPECT_EQ(next, 10 * kSecond);

  DownstreamLimits e(window(1, 1s), 0);
  for (const std::int64_t t : {0 * kSecond, 1 * kSecond, 2 * kSecond})
    ASSERT_FALSE(e.try_take_token(t).has_value());
  // The old ring kept the starts at 1 s and 2 s; the one at 0 s counts as made at 1 s: its
  // place comes free at 11 s, not 10 s (stricter, never looser).
  e.set_rate(RateLimit{.max = 3, .per = 10s}, 2 * kSecond);
  EXPECT_EQ(take_all(e, 3 * kSecond, &next), 0);
  EXPECT_EQ(next, 11 * kSecond);
}

TEST(RateWindow, BackToBackChangesWithinAWindowKeepItsStarts) {
  // Three starts at t = 0, then two changes before the window ends: the second change carries
  // the records the first one carried, so no more than three start in [0, 1 s).
  DownstreamLimits d(window(3, 1s), 0);
  ASSERT_EQ(take_all(d, 0), 3);
  d.set_rate(RateLimit{.max = 3, .per = 1s}, 100 * kMs);
  EXPECT_EQ(take_all(d, 200 * kMs), 0);
  d.set_rate(RateLimit{.max = 3, .per = 1s}, 300 * kMs);
  std::int64_t next = 0;
  EXPECT_EQ(take_all(d, 400 * kMs, &next), 0);
  EXPECT_EQ(next, kSecond);
  d.set_rate(RateLimit{.max = 2, .per = 1s}, 500 * kMs);
  EXPECT_EQ(take_all(d, 600 * kMs), 0);
  EXPECT_EQ(take_all(d, kSecond), 2);
}

TEST(RateWindow, AChangeOfKindStartsAfresh) {
  DownstreamLimits d(window(2, 1s), 0);
  ASSERT_EQ(take_all(d, 0), 2);
  d.set_rate(RateLimit::token_bucket(2, 1s), 0);
  EXPECT_EQ(take_all(d, 0), 2) << "a bucket starts full";
  d.set_rate(RateLimit{.max = 3, .per = 1s}, 0);
  EXPECT_EQ(take_all(d, 0), 3) << "a window after a bucket starts with no start in it";
  d.set_rate(std::nullopt, 0);
  EXPECT_FALSE(d.try_take_token(0).has_value());
  d.set_rate(RateLimit{.max = 1, .per = 1s}, 0);
  EXPECT_EQ(take_all(d, 0), 1);
}

struct BadWindow {
  const char* name;
  RateLimit rate;
  const char* message;
};

TEST(RateWindow, BadWindowsAreRefusedWithAMessageNamingTheField) {
  const BadWindow bad[] = {
      {"Burst", RateLimit{.max = 5, .per = 1s, .burst = 10},
       "DownstreamOptions('payments').rate.burst is 10 for a window; expected unset: a burst is a "
       "token bucket's (RateLimit::token_bucket(max, per, burst))"},
      {"TooManyStarts", RateLimit{.max = RateLimit::kMaxWindowStarts + 1, .per = 1s},
       "rate.max is 1048577 for a window; expected at most RateLimit::kMaxWindowStarts (1048576)"},
      {"ZeroMax", RateLimit{.max = 0, .per = 1s}, "rate.max is 0; expected 1 or more"},
      {"UnknownKind", RateLimit{5, 1s, 0, static_cast<RateLimit::Kind>(7)},
       "rate.kind is 7; expected RateLimit::Kind::window or RateLimit::Kind::token_bucket"},
  };
  for (const BadWindow& b : bad) {
    try {
      validate(DownstreamOptions{.rate = b.rate}, "payments");
      ADD_FAILURE() << b.name << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_option) << b.name;
      EXPECT_NE(std::string(e.what()).find(b.message), std::string::npos)
          << b.name << ": " << e.what();
    }
  }
  EXPECT_NO_THROW(validate(window(RateLimit::kMaxWindowStarts, 1s), "d"));
  EXPECT_NO_THROW(validate(
      {.rate = RateLimit::token_bucket(RateLimit::kMaxTokens, Duration{std::int64_t{1} << 41})},
      "d"));
}

// --- threads -----------------------------------------------------------------------------------

TEST(RateWindowThreads, EightThreadsOnTwoCoresNeverPutMoreThanMaxInAnyWindow) {
  test::Watchdog watchdog(300s, "EightThreadsOnTwoCoresNeverPutMoreThanMaxInAnyWindow");
  for (const std::uint64_t max : {1u, 3u, 50u}) {
    DownstreamLimits d(window(max, 10ms), 0);
    std::atomic<std::int64_t> clock{0};
    std::mutex mu;
    std::vector<std::int64_t> admitted;
    std::vector<std::thread> pool;
    for (int t = 0; t < 8; ++t) {
      pool.emplace_back([&, t] {
        std::mt19937 rng(static_cast<unsigned>(t) * 7919u + static_cast<unsigned>(max));
        std::vector<std::int64_t> mine;
        for (int i = 0; i < 20'000; ++i) {
          // The shared clock moves on by 0-2 us per step; a reading is taken, then used.
          const std::int64_t reading =
              clock.fetch_add(static_cast<std::int64_t>(rng() % 3) * 1000) + 0;
          if (rng() % 16 == 0) std::this_thread::yield();
          if (!d.try_take_token(reading)) mine.push_back(reading);
        }
        const std::lock_guard lock(mu);
        admitted.insert(admitted.end(), mine.begin(), mine.end());
      });
    }
    for (auto& t : pool)
      t.join();
    EXPECT_LE(most_in_a_window(admitted, 10 * kMs), max) << "max " << max;
    EXPECT_GE(most_in_a_window(admitted, 10 * kMs), max) << "max " << max << ": never full";
  }
}

using ScheduledLimits = BasicDownstreamLimits<DeterministicAtomic>;

SchedulePolicy policy_for(std::uint64_t seed) {
  return seed % 2 != 0 ? SchedulePolicy::subset : SchedulePolicy::uniform;
}

// Three threads take at t = 0 from a window of 2, or of 1 (W = 1: a start's slot is the one
// the next start reads): exactly the window's size is granted, never more.
TEST(RateWindowSchedule, ThreadsRacingForTheLastPlaceAreGrantedExactlyTheWindow) {
  for (std::uint64_t seed = 0; seed < 10'000; ++seed) {
    const std::uint64_t max = seed % 3 == 0 ? 1 : 2;
    ScheduledLimits d(window(max, 1s), 0);
    DeterministicAtomic<int> granted{0};
    auto taker = [&] {
      for (int i = 0; i < 2; ++i)
        if (!d.try_take_token(static_cast<std::int64_t>(i))) granted.fetch_add(1);
    };
    DeterministicSchedule sched(seed, policy_for(seed));
    sched.run({taker, taker, taker});
    ASSERT_EQ(granted.load(), static_cast<int>(max)) << "seed " << seed;
    ASSERT_EQ(d.snapshot(1).tokens, 0u) << "seed " << seed;
  }
}

// A change from a window of 2 to a window of 3 at t = 0 races two takers at t = 0: the new window
// counts the starts made on the old one, so at most 3 are granted in all, at least 2, and what
// is left of the new window makes exactly 3.
TEST(RateWindowSchedule, AChangeRacingTakesNeverLetsMoreThanTheNewWindowIn) {
  for (std::uint64_t seed = 0; seed < 10'000; ++seed) {
    ScheduledLimits d(window(2, 1s), 0);
    DeterministicAtomic<int> granted{0};
    auto taker = [&] {
      for (int i = 0; i < 2; ++i)
        if (!d.try_take_token(0)) granted.fetch_add(1);
    };
    DeterministicSchedule sched(seed, policy_for(seed));
    sched.run({taker, taker, [&] { d.set_rate(RateLimit{.max = 3, .per = 1s}, 0); }});
    ASSERT_GE(granted.load(), 2) << "seed " << seed;
    ASSERT_LE(granted.load(), 3) << "seed " << seed;
    ASSERT_EQ(granted.load() + take_all(d, 0), 3)
        << "every start on the old window is carried; seed " << seed;
  }
}

}  // namespace
}  // namespace rail
