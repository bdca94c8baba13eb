// Backoff formulas: exact without jitter, inside their bounds with it.
#include "rail/backoff.hpp"

#include <gtest/gtest.h>

#include "rail/error.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;

Duration delay_for(const Backoff& b, std::uint32_t failed_attempts, Duration prev = 0ns,
                   std::uint64_t seed = 1) {
  SplitMix64 rng(seed);
  return next_delay(b, RetryContext{1, failed_attempts, "e", prev}, nullptr, rng);
}

TEST(Backoff, NoneRetriesImmediately) {
  EXPECT_EQ(delay_for(Backoff::none(), 3), 0ns);
}

TEST(Backoff, FixedIsConstant) {
  for (std::uint32_t n = 1; n < 10; ++n)
    EXPECT_EQ(delay_for(Backoff::fixed(2s), n), 2s);
}

TEST(Backoff, ExponentialDoublesFromDelay) {
  auto b = Backoff::exponential(500ms);
  EXPECT_EQ(delay_for(b, 1), 500ms);
  EXPECT_EQ(delay_for(b, 2), 1000ms);
  EXPECT_EQ(delay_for(b, 3), 2000ms);
  EXPECT_EQ(delay_for(Backoff::exponential(3000ms), 7), 192000ms);  // BullMQ docs' example
}

TEST(Backoff, ExponentialSaturatesAtTheLongestDurationInsteadOfOverflowing) {
  // 1 s * 2^199 overflows int64 nanoseconds: the delay saturates at Duration::max() ("never"),
  // exactly, whether the shift itself is too wide (>= 63) or only the product overflows.
  EXPECT_EQ(delay_for(Backoff::exponential(1s), 200), Duration::max());
  EXPECT_EQ(delay_for(Backoff::exponential(1s), 40), Duration::max());  // 2^39 s > 2^63 ns
  EXPECT_EQ(delay_for(Backoff::exponential(1s), 34), 1s * (std::int64_t{1} << 33));  // still fits
  EXPECT_EQ(delay_for(Backoff::exponential(1s).capped_at(1min), 200), 1min);
}

TEST(Backoff, CapBoundsTheDelay) {
  EXPECT_EQ(delay_for(Backoff::exponential(1s).capped_at(5s), 10), 5s);
}

TEST(Backoff, FullJitterStaysInZeroToDelay) {
  auto b = Backoff::exponential(100ms).with_jitter(Jitter::full);
  SplitMix64 rng(42);
  Duration lo = Duration::max(), hi = Duration::min();
  for (int i = 0; i < 100'000; ++i) {
    Duration d = next_delay(b, RetryContext{1, 3, "e", 0ns}, nullptr, rng);
    ASSERT_GE(d, 0ns);
    ASSERT_LE(d, 400ms);
    lo = std::min(lo, d);
    hi = std::max(hi, d);
  }
  EXPECT_LT(lo, 10ms);  // actually spread, not constant
  EXPECT_GT(hi, 390ms);
}

TEST(Backoff, EqualJitterStaysInUpperHalf) {
  auto b = Backoff::fixed(1s).with_jitter(Jitter::equal);
  SplitMix64 rng(7);
  for (int i = 0; i < 100'000; ++i) {
    Duration d = next_delay(b, RetryContext{1, 1, "e", 0ns}, nullptr, rng);
    ASSERT_GE(d, 500ms);
    ASSERT_LE(d, 1s);
  }
}

TEST(Backoff, DecorrelatedJitterStaysBetweenBaseAndThreePreviousCapped) {
  auto b = Backoff::exponential(100ms).with_jitter(Jitter::decorrelated).capped_at(2s);
  SplitMix64 rng(9);
  Duration prev = 0ns;
  for (int i = 0; i < 100'000; ++i) {
    Duration d = next_delay(b, RetryContext{1, 1, "e", prev}, nullptr, rng);
    Duration upper = std::min<Duration>(2s, 3 * (prev > 0ns ? prev : 100ms));
    ASSERT_GE(d, 100ms);
    ASSERT_LE(d, upper);
    prev = d;
  }
}

TEST(Backoff, CustomFunctionDecidesAndNegativeMeansStop) {
  CustomBackoff f = [](const RetryContext& c) {
    return c.failed_attempts > 2 ? Duration{-1} : Duration{c.failed_attempts * 1s};
  };
  SplitMix64 rng(1);
  EXPECT_EQ(next_delay(Backoff::custom(), RetryContext{1, 2, "e", 0ns}, &f, rng), 2s);
  EXPECT_LT(next_delay(Backoff::custom(), RetryContext{1, 3, "e", 0ns}, &f, rng), 0ns);
}

TEST(Backoff, ValidationNamesTheField) {
  try {
    validate(Backoff::fixed(-1s), "JobOptions");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find("JobOptions.backoff.delay"), std::string::npos);
  }
  EXPECT_THROW(validate(Backoff::none().with_jitter(Jitter::full), "J"), Error);
}

}  // namespace
}  // namespace rail
