// DownstreamLimits (detail/downstream_limits.hpp) with a token bucket: the bucket is exact (so many
// tokens per simulated second, to the token, over 10^6 s; the "available at" time to the
// nanosecond), the pause and the permits do what their comments say, runtime changes bind the next
// acquisition, bad options are refused with a message naming the field, and under threads (real,
// and the seeded DeterministicSchedule) permits never exceed the limit and tokens never exceed the
// formula. Time is an int64 passed in: no test sleeps.
#include "rail/detail/downstream_limits.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "rail/downstream.hpp"
#include "rail/error.hpp"
#include "support/deterministic_schedule.hpp"
#include "support/downstream_options.hpp"
#include "support/watchdog.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;
using detail::Admission;
using detail::BasicDownstreamLimits;
using detail::DownstreamLimits;
using detail::kNever;
using test::DeterministicAtomic;
using test::DeterministicSchedule;
using test::SchedulePolicy;
using test::Watchdog;

__extension__ typedef unsigned __int128 U128;

constexpr std::int64_t kSecond = 1'000'000'000;
constexpr std::int64_t kMs = 1'000'000;

/// rate(...): a token bucket (RateLimit::token_bucket), the kind this file pins; the sliding
/// window's tests are in rate_window_test.cpp. A burst or concurrency of 0 is left unset (the
/// bucket holds `max`; no concurrency limit).
DownstreamOptions rate(std::uint64_t max, Duration per, std::uint64_t burst = 0,
                       std::uint32_t concurrency = 0) {
  return {.concurrency = test::limit_or_none(concurrency),
          .rate = RateLimit::token_bucket(
              max, per, burst == 0 ? std::nullopt : std::optional<std::uint64_t>(burst))};
}

// The test's own arithmetic, written from the definition rather than from the header's code:
// refills(e) tokens have been added e ns after the base; the k-th refill comes at first_at(k).
std::int64_t refills(std::int64_t elapsed, std::uint64_t max, Duration per) {
  return static_cast<std::int64_t>(U128(static_cast<std::uint64_t>(elapsed)) * max /
                                   static_cast<std::uint64_t>(per.count()));
}
std::int64_t first_at(std::int64_t k, std::uint64_t max, Duration per) {
  // The least e with e * max >= k * per, found by search around the real quotient: it checks
  // the ceiling formula instead of restating it.
  const U128 need = U128(static_cast<std::uint64_t>(k)) * static_cast<std::uint64_t>(per.count());
  auto e = static_cast<std::int64_t>(need / max);
  while (U128(static_cast<std::uint64_t>(e)) * max < need)
    ++e;
  while (e > 0 && U128(static_cast<std::uint64_t>(e - 1)) * max >= need)
    --e;
  return e;
}

/// drain(d, t, next): takes tokens at t until one is refused; returns how many were taken and
/// stores the refusal's "available at" time in *next. No test grants 2^24 tokens at one instant:
/// past that the bucket is broken, and the test fails rather than spin for ever.
template <class Limits>
std::int64_t drain(Limits& d, std::int64_t t, std::int64_t* next = nullptr) {
  constexpr std::int64_t kMost = std::int64_t{1} << 24;
  std::int64_t n = 0;
  for (;;) {
    if (n == kMost) {
      ADD_FAILURE() << "more than " << kMost << " tokens at t = " << t;
      return n;
    }
    const auto at = d.try_take_token(t);
    if (at) {
      if (next != nullptr) *next = *at;
      return n;
    }
    ++n;
  }
}

// --- tokens ------------------------------------------------------------------------------------

TEST(DownstreamTokens, ThreeHundredPerSecondGrantsExactlyThreeHundredEachSimulatedSecond) {
  DownstreamLimits d(rate(300, 1s), 0);
  for (int s = 0; s <= 10; ++s) {
    ASSERT_EQ(d.snapshot(s * kSecond).tokens, 300u) << "second " << s;
    ASSERT_EQ(drain(d, s * kSecond), 300) << "second " << s;
    ASSERT_EQ(d.snapshot(s * kSecond).tokens, 0u);
  }
}

TEST(DownstreamTokens, MillisecondStepsNeverExceedMaxPlusBurstInAnyOneSecondWindow) {
  DownstreamLimits d(rate(300, 1s), 0);
  constexpr int kSteps = 10'000;  // 10 s of 1 ms steps, t = 0 .. 10 s
  std::vector<std::int64_t> granted(kSteps + 1);
  for (int i = 0; i <= kSteps; ++i)
    granted[i] = drain(d, i * kMs);
  // Any window [t, t + 1 s] holds 1001 steps: at most burst + max.
  std::int64_t in_window = 0;
  for (int i = 0; i <= kSteps; ++i) {
    in_window += granted[i];
    if (i >= 1001) in_window -= granted[i - 1001];
    ASSERT_LE(in_window, 300 + 300) << "window ending at " << i << " ms";
  }
  // The long-run rate is exactly 300/s: the burst at t = 0, then 300 in each (k s, (k+1) s].
  EXPECT_EQ(granted[0], 300);
  for (int s = 0; s < 10; ++s) {
    std::int64_t sum = 0;
    for (int i = s * 1000 + 1; i <= (s + 1) * 1000; ++i)
      sum += granted[i];
    ASSERT_EQ(sum, 300) << "second " << s;
  }
}

TEST(DownstreamTokens, AvailableAtIsExactToTheNanosecond) {
  constexpr std::int64_t kBase = 123'456'789;  // a base other than 0 is honoured too
  DownstreamLimits d(rate(300, 1s), kBase);
  std::int64_t next = 0;
  ASSERT_EQ(drain(d, kBase, &next), 300);
  EXPECT_EQ(next, kBase + 3'333'334);  // ceil(1e9 / 300)
  for (std::int64_t k = 1; k <= 3000; ++k) {
    ASSERT_EQ(next, kBase + first_at(k, 300, 1s)) << "token " << 300 + k;
    const auto early = d.try_take_token(next - 1);
    ASSERT_TRUE(early.has_value()) << "a take 1 ns early succeeded; token " << 300 + k;
    ASSERT_EQ(*early, next) << "a refusal 1 ns early names another time";
    ASSERT_FALSE(d.try_take_token(next).has_value()) << "the named time failed; token " << k;
    const auto after = d.try_take_token(next);
    ASSERT_TRUE(after.has_value());
    ASSERT_GT(*after, next);
    next = *after;
  }
}

TEST(DownstreamTokens, BurstSmallerThanMaxCapsAnIdleBucketButNotTheRate) {
  DownstreamLimits d(rate(100, 1s, 10), 0);
  EXPECT_EQ(drain(d, 0), 10);
  EXPECT_EQ(drain(d, 5 * kSecond), 10);  // idle 5 s: still only the burst
  // Drained every 1 ms, the rate is max: 100 per second, exactly.
  std::int64_t total = 0;
  for (std::int64_t t = 5 * kSecond + kMs; t <= 15 * kSecond; t += kMs)
    total += drain(d, t);
  EXPECT_EQ(total, 1000);
}

TEST(DownstreamTokens, BurstLargerThanMaxLetsAnIdleBucketFillUpToTheBurst) {
  DownstreamLimits d(rate(10, 1s, 50), 0);
  EXPECT_EQ(drain(d, 0), 50);
  EXPECT_EQ(d.snapshot(2 * kSecond).tokens, 20u);
  EXPECT_EQ(drain(d, 2 * kSecond), 20);
  EXPECT_EQ(d.snapshot(100 * kSecond).tokens, 50u);  // capped at the burst
  EXPECT_EQ(drain(d, 100 * kSecond), 50);
  EXPECT_EQ(drain(d, 101 * kSecond), 10);
}

struct UnevenRate {
  const char* name;
  std::uint64_t max;
  Duration per;
  std::uint64_t burst;
};

void PrintTo(const UnevenRate& r, std::ostream* os) {
  *os << r.name;
}

class DownstreamUnevenRates : public ::testing::TestWithParam<UnevenRate> {};

// At ten checkpoints spread over 10^6 simulated seconds (odd nanosecond offsets), an idle bucket
// holds exactly the burst, and drained as soon as each token comes, a window of m whole units
// (unit = per / gcd(max, per), in which exactly max / gcd tokens refill) grants exactly
// m * max / gcd, about 10^5 tokens: a rate kept as a rounded interval would be off by then.
TEST_P(DownstreamUnevenRates, AreExactAtCheckpointsOverAMillionSimulatedSeconds) {
  const UnevenRate p = GetParam();
  const std::int64_t burst = static_cast<std::int64_t>(p.burst != 0 ? p.burst : p.max);
  DownstreamLimits d(rate(p.max, p.per, p.burst), 0);
  const auto g =
      static_cast<std::int64_t>(std::gcd(p.max, static_cast<std::uint64_t>(p.per.count())));
  const std::int64_t unit_ns = p.per.count() / g, per_unit = static_cast<std::int64_t>(p.max) / g;
  const std::int64_t units = std::max<std::int64_t>(1, 100'000 / per_unit);
  for (std::int64_t c = 1; c <= 10; ++c) {
    const std::int64_t t = c * 100'000 * kSecond + c * 7919;
    ASSERT_EQ(d.snapshot(t).tokens, static_cast<std::uint64_t>(burst)) << p.name << " at " << t;
    std::int64_t next = 0;
    ASSERT_EQ(drain(d, t, &next), burst) << p.name << " at " << t;
    // Issued now: R(t) + burst, so the next token is the (R(t) + 1)-th refill.
    ASSERT_EQ(next, first_at(refills(t, p.max, p.per) + 1, p.max, p.per)) << p.name;
    const std::int64_t end = t + units * unit_ns;
    std::int64_t granted = 0;
    for (int checked = 0; next <= end; ++checked) {
      if (checked < 100) {
        ASSERT_TRUE(d.try_take_token(next - 1).has_value()) << p.name;
      }
      granted += drain(d, next, &next);
    }
    ASSERT_EQ(granted, units * per_unit) << p.name << " from " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(Rates, DownstreamUnevenRates,
                         ::testing::Values(UnevenRate{"SevenPerSecond", 7, 1s, 0},
                                           UnevenRate{"ThreePer10ms", 3, 10ms, 0},
                                           UnevenRate{"ThreePer10msBurst1", 3, 10ms, 1},
                                           UnevenRate{"MillionPerSecond", 1'000'000, 1s, 0},
                                           UnevenRate{"MillionPerSecondBurst17", 1'000'000, 1s, 17},
                                           UnevenRate{"SevenPer3msBurst1000", 7, 3ms, 1000}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(DownstreamTokens, SevenPerSecondDrainedAsTokensComeNeverDriftsOverAMillionSeconds) {
  constexpr std::int64_t kHorizon = 1'000'000 * kSecond;
  DownstreamLimits d(rate(7, 1s), 0);
  std::int64_t next = 0;
  std::int64_t granted = drain(d, 0, &next);
  while (next <= kHorizon)
    granted += drain(d, next, &next);
  // The burst, then one token per refill: R(10^6 s) = 7 * 10^6, not one more or less.
  EXPECT_EQ(granted, 7 + 7'000'000);
  EXPECT_EQ(next, first_at(7'000'001, 7, 1s));
}

TEST(DownstreamTokens, ExtremeBoundsNeitherOverflowNorRefillPastTheClock) {
  const std::uint64_t k = RateLimit::kMaxTokens;
  // One token per ns with the largest burst, read near the end of the clock's range.
  DownstreamLimits fast(rate(k, Duration{static_cast<std::int64_t>(k)}, k), 0);
  EXPECT_EQ(fast.snapshot(kNever).tokens, k);
  EXPECT_FALSE(fast.try_take_token(kNever).has_value());
  // One token per (almost) INT64_MAX ns: the second comes just inside the clock's range from a
  // base of -5, and past it (kNever) from a base of 10.
  DownstreamLimits slow(rate(1, Duration{kNever - 1}, 1), -5);
  EXPECT_FALSE(slow.try_take_token(-5).has_value());
  EXPECT_EQ(slow.try_take_token(kNever - 10), std::optional<std::int64_t>(kNever - 6));
  DownstreamLimits slower(rate(1, Duration{kNever - 1}, 1), 10);
  EXPECT_FALSE(slower.try_take_token(10).has_value());
  EXPECT_EQ(slower.try_take_token(kNever - 1), std::optional<std::int64_t>(kNever));
  // A base at the far negative end and a read at the far positive end: elapsed is 2^64 - 1.
  DownstreamLimits wide(rate(1, 1s, 1), std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(wide.snapshot(kNever).tokens, 1u);
}

// --- pushback ----------------------------------------------------------------------------------

TEST(DownstreamPause, RefusesAdmissionsUntilExactlyItsEndAndCostsNoTokenOrPermit) {
  DownstreamLimits d(rate(10, 1s, 10, 2), 0);
  d.pause_until(5 * kSecond);
  for (std::int64_t t : {std::int64_t{0}, kSecond, 5 * kSecond - 1}) {
    const Admission a = d.try_admit(t);
    ASSERT_EQ(a.kind, Admission::Kind::paused) << t;
    ASSERT_EQ(a.until_ns, 5 * kSecond);
  }
  const auto s = d.snapshot(5 * kSecond);
  EXPECT_EQ(s.tokens, 10u);
  EXPECT_EQ(s.in_flight, 0u);
  EXPECT_EQ(s.paused_until_ns, 5 * kSecond);
  EXPECT_EQ(d.try_admit(5 * kSecond).kind, Admission::Kind::admitted);
}

TEST(DownstreamPause, OnlyExtendsAndDurationMaxPausesForGood) {
  DownstreamLimits d({}, 0);
  EXPECT_EQ(d.snapshot(0).paused_until_ns, DownstreamLimits::kNotPaused);
  d.pause_until(10);
  d.pause_until(5);
  EXPECT_EQ(d.snapshot(0).paused_until_ns, 10);
  d.pause_for(15, 5ns);
  EXPECT_EQ(d.snapshot(0).paused_until_ns, 20);
  d.pause_for(100, Duration::max());
  EXPECT_EQ(d.snapshot(0).paused_until_ns, kNever);
  EXPECT_EQ(d.try_admit(kNever - 1).kind, Admission::Kind::paused);
}

// --- admission order ---------------------------------------------------------------------------

TEST(DownstreamAdmission, NoFreePermitSpendsNoToken) {
  DownstreamLimits d(rate(5, 1s, 5, 1), 0);
  EXPECT_EQ(d.try_admit(0).kind, Admission::Kind::admitted);
  for (int i = 0; i < 10; ++i)
    ASSERT_EQ(d.try_admit(0).kind, Admission::Kind::no_permit);
  EXPECT_EQ(d.snapshot(0).tokens, 4u);
  d.release_permit();
  EXPECT_EQ(d.try_admit(0).kind, Admission::Kind::admitted);
  EXPECT_EQ(d.snapshot(0).tokens, 3u);
}

TEST(DownstreamAdmission, RateLimitedNamesTheNextTokenAndHoldsNoPermit) {
  DownstreamLimits d(rate(2, 1s, 1, 4), 0);
  EXPECT_EQ(d.try_admit(0).kind, Admission::Kind::admitted);
  const Admission a = d.try_admit(0);
  EXPECT_EQ(a.kind, Admission::Kind::rate_limited);
  EXPECT_EQ(a.until_ns, 500 * kMs);
  EXPECT_FALSE(a.returned_permit);  // refused by the look, before any permit
  EXPECT_EQ(d.in_flight(), 1u);
  EXPECT_EQ(d.try_admit(a.until_ns - 1).kind, Admission::Kind::rate_limited);
  EXPECT_EQ(d.try_admit(a.until_ns).kind, Admission::Kind::admitted);
  EXPECT_EQ(d.in_flight(), 2u);
}

TEST(DownstreamAdmission, NoLimitsAdmitsEverything) {
  DownstreamLimits d({}, 0);
  for (int i = 0; i < 1000; ++i)
    ASSERT_EQ(d.try_admit(0).kind, Admission::Kind::admitted);
  const auto s = d.snapshot(0);
  EXPECT_EQ(s.in_flight, 1000u);
  EXPECT_EQ(s.concurrency, 0u);
  EXPECT_FALSE(s.tokens.has_value());
}

// --- runtime changes ---------------------------------------------------------------------------

TEST(DownstreamPermits, SetConcurrencyBindsTheNextAcquisition) {
  DownstreamLimits d({.concurrency = 2}, 0);
  ASSERT_TRUE(d.try_acquire_permit());
  ASSERT_TRUE(d.try_acquire_permit());
  ASSERT_FALSE(d.try_acquire_permit());
  d.set_concurrency(3);
  EXPECT_TRUE(d.try_acquire_permit());
  EXPECT_FALSE(d.try_acquire_permit());
  d.set_concurrency(0);  // the limits' own 0: unlimited (Downstream maps unset to it)
  for (int i = 0; i < 100; ++i)
    ASSERT_TRUE(d.try_acquire_permit());
  EXPECT_EQ(d.in_flight(), 103u);
}

TEST(DownstreamPermits, LoweringBelowInFlightBlocksUntilEnoughAreReleased) {
  DownstreamLimits d({.concurrency = 4}, 0);
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(d.try_acquire_permit());
  d.set_concurrency(2);
  EXPECT_EQ(d.snapshot(0).concurrency, 2u);
  EXPECT_EQ(d.in_flight(), 4u);  // held permits stay held
  EXPECT_FALSE(d.try_acquire_permit());
  d.release_permit();  // 3 held
  EXPECT_FALSE(d.try_acquire_permit());
  d.release_permit();  // 2 held
  EXPECT_FALSE(d.try_acquire_permit());
  d.release_permit();  // 1 held
  EXPECT_TRUE(d.try_acquire_permit());
  EXPECT_FALSE(d.try_acquire_permit());
}

TEST(DownstreamRateChange, NewRateBindsTheNextTakeAndCarriesTheTokensLeft) {
  DownstreamLimits d(rate(10, 1s, 10), 0);
  for (int i = 0; i < 4; ++i)
    ASSERT_FALSE(d.try_take_token(0).has_value());
  d.set_rate(RateLimit::token_bucket(100, 1s, 50), 0);
  EXPECT_EQ(d.snapshot(0).tokens, 6u);                // carried: 10 - 4
  EXPECT_EQ(d.snapshot(100 * kMs).tokens, 6u + 10u);  // refilling at the new rate
  d.set_rate(RateLimit::token_bucket(100, 1s, 3), 100 * kMs);
  EXPECT_EQ(d.snapshot(100 * kMs).tokens, 3u);  // capped at the new burst
  EXPECT_EQ(drain(d, 100 * kMs), 3);
}

TEST(DownstreamRateChange, CarryCountsTheOldRefillsUpToTheChange) {
  DownstreamLimits d(rate(10, 1s, 10), 0);
  ASSERT_EQ(drain(d, 0), 10);
  d.set_rate(RateLimit::token_bucket(1, 1s, 10), 500 * kMs);  // old refilled 5 by then
  EXPECT_EQ(d.snapshot(500 * kMs).tokens, 5u);
  EXPECT_EQ(d.snapshot(1500 * kMs).tokens, 6u);  // then 1 per second from the change
  std::int64_t next = 0;
  EXPECT_EQ(drain(d, 1500 * kMs, &next), 6);
  EXPECT_EQ(next, 2500 * kMs);
}

TEST(DownstreamRateChange, RemovingTheRateAdmitsAllAndSettingOneAgainStartsFull) {
  DownstreamLimits d(rate(1, 1s, 1), 0);
  ASSERT_FALSE(d.try_take_token(0).has_value());
  ASSERT_TRUE(d.try_take_token(0).has_value());
  d.set_rate(std::nullopt, 0);
  for (int i = 0; i < 1000; ++i)
    ASSERT_FALSE(d.try_take_token(0).has_value());
  EXPECT_FALSE(d.snapshot(0).tokens.has_value());
  d.set_rate(RateLimit::token_bucket(5, 1s), kSecond);
  EXPECT_EQ(drain(d, kSecond), 5);
}

TEST(DownstreamRateChange, ATakeWithAClockReadingBeforeTheChangeIsJudgedAtTheChange) {
  DownstreamLimits d(rate(1, 1s, 2), 0);
  d.set_rate(RateLimit::token_bucket(1, 1s, 2), 10 * kSecond);
  // A reading from before the new base counts no refills of the new configuration.
  EXPECT_EQ(drain(d, 5 * kSecond), 2);
  std::int64_t next = 0;
  EXPECT_EQ(drain(d, 10 * kSecond, &next), 0);
  EXPECT_EQ(next, 11 * kSecond);
}

// --- validation --------------------------------------------------------------------------------

struct BadDownstream {
  const char* name;
  DownstreamOptions options;
  const char* message;  // a part of what(): the downstream, the field, the value, what is expected
};

const BadDownstream kBadDownstreams[] = {
    {"ZeroMax", rate(0, 1s),
     "DownstreamOptions('payments').rate.max is 0; expected 1 or more starts per rate.per"},
    {"ZeroPer", rate(5, 0s), "DownstreamOptions('payments').rate.per is 0 ns; expected a positive"},
    {"NegativePer", rate(5, -1s), "rate.per is -1000000000 ns; expected a positive period"},
    {"NeverPer", rate(5, Duration::max()), "rate.per is Duration::max(); expected a finite period"},
    {"MaxAboveTheBound", rate(RateLimit::kMaxTokens + 1, Duration{kNever - 1}),
     "rate.max is 1099511627777; expected at most RateLimit::kMaxTokens (1099511627776)"},
    {"MoreThanOnePerNanosecond", rate(2000, 1us),
     "rate.max is 2000 per 1000 ns; expected at most one start per nanosecond"},
    {"BurstAboveTheBound", rate(5, 1s, RateLimit::kMaxTokens + 1),
     "rate.burst is 1099511627777; expected 1 .. RateLimit::kMaxTokens"},
};

TEST(DownstreamOptionsValidation, EachBadFieldIsRefusedWithAMessageNamingIt) {
  for (const BadDownstream& bad : kBadDownstreams) {
    try {
      validate(bad.options, "payments");
      ADD_FAILURE() << bad.name << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_option) << bad.name;
      EXPECT_NE(std::string(e.what()).find(bad.message), std::string::npos)
          << bad.name << ": " << e.what();
    }
  }
}

TEST(DownstreamOptionsValidation, TheBoundsThemselvesAndEveryNonZeroConcurrencyAreAccepted) {
  const std::uint64_t k = RateLimit::kMaxTokens;
  EXPECT_NO_THROW(validate(DownstreamOptions{}, "d"));
  EXPECT_NO_THROW(validate(DownstreamOptions{.concurrency = 0xFFFF'FFFFu}, "d"));
  EXPECT_NO_THROW(validate(rate(1, 1ns), "d"));
  EXPECT_NO_THROW(validate(rate(k, Duration{static_cast<std::int64_t>(k)}, k), "d"));
  EXPECT_NO_THROW(validate(rate(1, Duration{kNever - 1}, 1), "d"));
}

// --- threads -----------------------------------------------------------------------------------

/// hold(rng): a random pause inside a permit: mostly a short spin, sometimes a yield so that the
/// 8 threads on 2 cores are preempted while holding one.
void hold(std::mt19937& rng) {
  const unsigned r = rng() % 64;
  if (r == 0) {
    std::this_thread::yield();
    return;
  }
  static thread_local volatile unsigned spin = 0;
  for (unsigned i = 0; i < r; ++i)
    spin = spin + 1;
}

/// high_water(d, threads, rounds, changer): the most permits ever held at once while `threads`
/// threads acquire, hold and release `rounds` times each; changer (if any) runs alongside.
template <class Changer>
int high_water(DownstreamLimits& d, int threads, int rounds, std::uint32_t seed, Changer changer) {
  std::atomic<int> inside{0}, most{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::mt19937 rng(seed * 31 + static_cast<std::uint32_t>(t));
      while (!go.load(std::memory_order_acquire)) {
      }
      for (int i = 0; i < rounds; ++i) {
        if (!d.try_acquire_permit()) {
          hold(rng);
          continue;
        }
        const int now = inside.fetch_add(1, std::memory_order_relaxed) + 1;
        int m = most.load(std::memory_order_relaxed);
        while (now > m && !most.compare_exchange_weak(m, now, std::memory_order_relaxed)) {
        }
        hold(rng);
        inside.fetch_sub(1, std::memory_order_relaxed);
        d.release_permit();
      }
    });
  }
  go.store(true, std::memory_order_release);
  changer();
  for (auto& t : pool)
    t.join();
  return most.load();
}

TEST(DownstreamThreads, EightThreadsOnTwoCoresNeverHoldMorePermitsThanTheLimit) {
  Watchdog watchdog(300s, "EightThreadsOnTwoCoresNeverHoldMorePermitsThanTheLimit");
  std::mt19937 pick(14);
  std::vector<std::uint32_t> limits = {1, 2, 3, 7};
  for (int i = 0; i < 4; ++i)
    limits.push_back(1 + pick() % 8);
  for (std::uint32_t limit : limits) {
    DownstreamLimits d({.concurrency = limit}, 0);
    const int most = high_water(d, 8, 20'000, limit, [] {});
    ASSERT_LE(most, static_cast<int>(limit)) << "limit " << limit;
    ASSERT_EQ(d.in_flight(), 0u) << "limit " << limit;
    RecordProperty("high_water_limit_" + std::to_string(limit), std::to_string(most));
  }
}

TEST(DownstreamThreads, ConcurrencyChangedUnderLoadNeverLetsMoreThanTheLargestLimitIn) {
  Watchdog watchdog(300s, "ConcurrencyChangedUnderLoadNeverLetsMoreThanTheLargestLimitIn");
  DownstreamLimits d({.concurrency = 2}, 0);
  const int most = high_water(d, 8, 20'000, 7, [&] {
    for (int i = 0; i < 2000; ++i) {
      d.set_concurrency(i % 2 == 0 ? 5 : 2);
      std::this_thread::yield();
    }
  });
  EXPECT_LE(most, 5);
  EXPECT_EQ(d.in_flight(), 0u);
}

// Eight threads walk the same simulated clock (steps of 100 ms over 3 s), each taking at every
// step until refused. A thread at step s has drained step s - 1, and one step refills fewer
// tokens than the burst, so no refill is ever lost to the cap: the total is exactly burst + R(end)
// whatever the interleaving, and any more would break the bound.
TEST(DownstreamThreads, EightThreadsOnASimulatedClockAreGrantedExactlyBurstPlusRefills) {
  Watchdog watchdog(300s, "EightThreadsOnASimulatedClockAreGrantedExactlyBurstPlusRefills");
  struct Case {
    std::uint64_t max;
    Duration per;
    std::uint64_t burst;
  };
  for (const Case c : {Case{300, 1s, 300}, Case{7, 1s, 7}, Case{3, 10ms, 30}}) {
    DownstreamLimits d(rate(c.max, c.per, c.burst), 0);
    constexpr int kSteps = 30;
    constexpr std::int64_t kStep = 100 * kMs;
    std::atomic<std::int64_t> total{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < 8; ++t) {
      pool.emplace_back([&] {
        std::int64_t mine = 0;
        for (int s = 0; s <= kSteps; ++s)
          mine += drain(d, s * kStep);
        total.fetch_add(mine, std::memory_order_relaxed);
      });
    }
    for (auto& t : pool)
      t.join();
    EXPECT_EQ(total.load(),
              static_cast<std::int64_t>(c.burst) + refills(kSteps * kStep, c.max, c.per))
        << c.max << " per " << c.per.count() << " ns";
  }
}

// --- deterministic schedules -------------------------------------------------------------------

using ScheduledLimits = BasicDownstreamLimits<DeterministicAtomic>;

SchedulePolicy policy_for(std::uint64_t seed) {
  return seed % 2 != 0 ? SchedulePolicy::subset : SchedulePolicy::uniform;
}

TEST(DownstreamSchedule, ThreadsRacingAtTheLimitNeverHoldMoreThanIt) {
  for (std::uint64_t seed = 0; seed < 10'000; ++seed) {
    const std::uint32_t limit = seed % 3 == 0 ? 2 : 1;  // 1: two threads; 2: three threads
    ScheduledLimits d({.concurrency = limit}, 0);
    DeterministicAtomic<int> inside{0}, over{0};
    auto body = [&] {
      for (int round = 0; round < 3; ++round) {
        if (!d.try_acquire_permit()) continue;
        if (inside.fetch_add(1) + 1 > static_cast<int>(limit)) over.fetch_add(1);
        inside.fetch_sub(1);
        d.release_permit();
      }
    };
    DeterministicSchedule sched(seed, policy_for(seed));
    if (limit == 1) {
      sched.run({body, body});
    } else {
      sched.run({body, body, body});
    }
    ASSERT_EQ(over.load(), 0) << "more than " << limit << " permits held; seed " << seed;
    ASSERT_EQ(d.in_flight(), 0u) << "a permit was lost; seed " << seed;
  }
}

// An acquisition that starts after set_concurrency(1) returned must see the new limit: if it
// succeeds, it is the only holder, even though the other thread acquired under the old limit 2.
TEST(DownstreamSchedule, AnAcquisitionAfterAConcurrencyChangeNeverPassesOnTheOldLimit) {
  for (std::uint64_t seed = 0; seed < 10'000; ++seed) {
    ScheduledLimits d({.concurrency = 2}, 0);
    DeterministicAtomic<int> inside{0}, over{0};
    DeterministicAtomic<bool> changed{false};
    auto body = [&] {
      for (int round = 0; round < 3; ++round) {
        const bool after = changed.load();
        if (!d.try_acquire_permit()) continue;
        const int now = inside.fetch_add(1) + 1;
        if (after && now > 1) over.fetch_add(1);
        inside.fetch_sub(1);
        d.release_permit();
      }
    };
    DeterministicSchedule sched(seed, policy_for(seed));
    sched.run({body, body, [&] {
                 d.set_concurrency(1);
                 changed.store(true);
               }});
    ASSERT_EQ(over.load(), 0) << "an acquisition passed on the old limit; seed " << seed;
    ASSERT_EQ(d.in_flight(), 0u) << "seed " << seed;
  }
}

/// granted_during_change(seed, burst): two threads take at t = 0 from a full bucket of 3 (one
/// per second) while a third changes the burst to `burst` at t = 0; the tokens granted, with the
/// bucket checked empty afterwards.
int granted_during_change(std::uint64_t seed, std::uint64_t burst) {
  ScheduledLimits d(rate(1, 1s, 3), 0);
  DeterministicAtomic<int> granted{0};
  auto taker = [&] {
    for (int i = 0; i < 3; ++i)
      if (!d.try_take_token(0)) granted.fetch_add(1);
  };
  DeterministicSchedule sched(seed, policy_for(seed));
  sched.run({taker, taker, [&] { d.set_rate(RateLimit::token_bucket(1, 1s, burst), 0); }});
  EXPECT_EQ(d.snapshot(0).tokens, 0u) << "seed " << seed;
  return granted.load();
}

// Raising the burst from 3 to 5 at t = 0: the change carries exactly the tokens left, so
// together they get exactly the 3 tokens there were, no more (a take on the old configuration
// after the carry was counted) and no fewer.
TEST(DownstreamSchedule, ARateChangeRacingTakesNeitherLosesNorDuplicatesAToken) {
  for (std::uint64_t seed = 0; seed < 10'000; ++seed)
    ASSERT_EQ(granted_during_change(seed, 5), 3) << "seed " << seed;
}

// As above, lowering the burst to 2: the change may drop a token the old bucket held (the new
// one holds at most 2), never add one: 2 or 3 granted, and none left.
TEST(DownstreamSchedule, ARateChangeThatLowersTheBurstNeverGrantsMoreThanTheOldBucketHeld) {
  for (std::uint64_t seed = 0; seed < 10'000; ++seed) {
    const int granted = granted_during_change(seed, 2);
    ASSERT_GE(granted, 2) << "seed " << seed;
    ASSERT_LE(granted, 3) << "seed " << seed;
  }
}

// The bucket holds no token at t = 0 (drained); a taker at t = 1 s (one refill later) races a
// change to the same rate made at t = 0. If its take on the old configuration beats the close,
// the old bucket is one token in debt at the change's base, and the debt is carried: either way
// exactly one token is granted at 1 s, as with no change at all.
TEST(DownstreamSchedule, ATakeWithALaterClockThatBeatsTheChangeIsCarriedAsADebt) {
  for (std::uint64_t seed = 0; seed < 10'000; ++seed) {
    ScheduledLimits d(rate(1, 1s, 1), 0);
    ASSERT_FALSE(d.try_take_token(0).has_value());
    DeterministicAtomic<int> granted{0};
    DeterministicSchedule sched(seed, policy_for(seed));
    sched.run({[&] {
                 for (int i = 0; i < 2; ++i)
                   if (!d.try_take_token(kSecond)) granted.fetch_add(1);
               },
               [&] { d.set_rate(RateLimit::token_bucket(1, 1s, 1), 0); }});
    ASSERT_EQ(granted.load(), 1) << "seed " << seed;
    ASSERT_EQ(d.snapshot(kSecond).tokens, 0u) << "seed " << seed;
  }
}

// Two admissions race for the last token with two permits free: one is admitted; the other is
// refused for the rate, and if it held a permit meanwhile it gave it back and says so.
TEST(DownstreamSchedule, AdmissionsRacingForTheLastTokenAdmitOneAndReturnTheOtherPermit) {
  int returned = 0;
  for (std::uint64_t seed = 0; seed < 10'000; ++seed) {
    ScheduledLimits d(rate(1, 1s, 1, 2), 0);
    Admission a[2];
    DeterministicSchedule sched(seed, policy_for(seed));
    sched.run({[&] { a[0] = d.try_admit(0); }, [&] { a[1] = d.try_admit(0); }});
    const int admitted =
        (a[0].kind == Admission::Kind::admitted) + (a[1].kind == Admission::Kind::admitted);
    ASSERT_EQ(admitted, 1) << "seed " << seed;
    for (const Admission& x : a) {
      if (x.kind == Admission::Kind::admitted) continue;
      ASSERT_EQ(x.kind, Admission::Kind::rate_limited) << "seed " << seed;
      ASSERT_EQ(x.until_ns, kSecond) << "seed " << seed;
      returned += x.returned_permit;
    }
    ASSERT_EQ(d.in_flight(), 1u) << "seed " << seed;
  }
  // Not a property of any one schedule: that the seeds reach the give-back path at all.
  EXPECT_GT(returned, 0);
}

}  // namespace
}  // namespace rail
