// LogLinearHistogram: an HDR-style histogram of non-negative integer samples (nanoseconds in the
// latency benchmarks) with a fixed relative error, constant-time record() and no allocation.
//
// Guarantee: percentile(p) returns a value v such that at least p% of the samples are <= v and v
// is at most one bucket width (<= 2^-SubBits of v, 3.1% at the default SubBits = 5) above the true
// p-th percentile sample; max() and min() are exact.
//
// Algorithm: HdrHistogram's bucketing (Gil Tene, HdrHistogram, "log-linear" buckets). Values
// below 2^SubBits get a bucket each; above that, each power-of-two range [2^k, 2^(k+1)) is split
// into 2^SubBits equal sub-buckets. The bucket index is a count-leading-zeros and two shifts:
//
//   v < 2^S:  index = v
//   else:     k = floor(log2 v), shift = k - S, index = 2^S + shift * 2^S + (v >> shift) - 2^S
//
// so the index is continuous at v = 2^S and a bucket [lo, lo + 2^shift) never spans more than
// 1/2^S of lo. 64-bit values need 2^S * (65 - S) buckets: 1920 counters (15 KiB) for S = 5.
//
// Threading: none inside; one histogram per recording thread, merged after the run (see
// PerThreadHistograms in latency/workload.hpp).
#pragma once

#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace bench {

template <unsigned SubBits = 5>
class LogLinearHistogram {
  static_assert(SubBits >= 1 && SubBits <= 16, "2^SubBits sub-buckets per power of two");

 public:
  static constexpr std::uint64_t kSub = std::uint64_t{1} << SubBits;
  static constexpr std::size_t kBuckets = static_cast<std::size_t>(kSub * (65 - SubBits));

  /// index_of(v) is the bucket holding v.
  static constexpr std::size_t index_of(std::uint64_t v) noexcept {
    if (v < kSub) return static_cast<std::size_t>(v);
    const unsigned msb = 63u - static_cast<unsigned>(std::countl_zero(v));
    const unsigned shift = msb - SubBits;
    return static_cast<std::size_t>(kSub + shift * kSub + ((v >> shift) - kSub));
  }
  /// lowest(i) / highest(i): the smallest and largest value bucket i holds.
  static constexpr std::uint64_t lowest(std::size_t i) noexcept {
    if (i < kSub) return i;
    const std::uint64_t shift = (i - kSub) / kSub;
    const std::uint64_t sub = (i - kSub) % kSub;
    return (kSub + sub) << shift;
  }
  static constexpr std::uint64_t highest(std::size_t i) noexcept {
    if (i < kSub) return i;
    const std::uint64_t shift = (i - kSub) / kSub;
    return lowest(i) + ((std::uint64_t{1} << shift) - 1);  // wraps to 2^64 - 1 at the top
  }
  static_assert(index_of(kSub - 1) + 1 == index_of(kSub), "continuous at 2^SubBits");
  static_assert(index_of(std::numeric_limits<std::uint64_t>::max()) == kBuckets - 1);
  static_assert(highest(kBuckets - 1) == std::numeric_limits<std::uint64_t>::max());

  void record(std::uint64_t v) noexcept {
    ++counts_[index_of(v)];
    ++count_;
    sum_ += static_cast<double>(v);
    if (v > max_) max_ = v;
    if (v < min_) min_ = v;
  }

  void merge(const LogLinearHistogram& o) noexcept {
    for (std::size_t i = 0; i < kBuckets; ++i)
      counts_[i] += o.counts_[i];
    count_ += o.count_;
    sum_ += o.sum_;
    if (o.max_ > max_) max_ = o.max_;
    if (o.min_ < min_) min_ = o.min_;
  }

  /// percentile(p), p in [0, 100]: the highest value of the bucket holding the sample of rank
  /// ceil(p / 100 * count) (at least 1), clamped to max(). 0 when empty.
  [[nodiscard]] std::uint64_t percentile(double p) const noexcept {
    if (count_ == 0) return 0;
    auto rank = static_cast<std::uint64_t>(std::ceil(p / 100.0 * static_cast<double>(count_)));
    if (rank == 0) rank = 1;
    if (rank > count_) rank = count_;
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < kBuckets; ++i) {
      seen += counts_[i];
      if (seen >= rank) return highest(i) < max_ ? highest(i) : max_;
    }
    return max_;
  }

  [[nodiscard]] std::uint64_t count() const noexcept { return count_; }
  [[nodiscard]] std::uint64_t max() const noexcept { return count_ ? max_ : 0; }
  [[nodiscard]] std::uint64_t min() const noexcept { return count_ ? min_ : 0; }
  [[nodiscard]] double mean() const noexcept {
    return count_ ? sum_ / static_cast<double>(count_) : 0.0;
  }

 private:
  std::array<std::uint64_t, kBuckets> counts_{};
  std::uint64_t count_ = 0;
  double sum_ = 0;
  std::uint64_t max_ = 0;
  std::uint64_t min_ = std::numeric_limits<std::uint64_t>::max();
};

using Histogram = LogLinearHistogram<>;

}  // namespace bench
