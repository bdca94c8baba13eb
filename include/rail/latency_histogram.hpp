// LatencyHistogram: a snapshot of how long something took, sample by sample, in log-linear
// buckets (HdrHistogram's layout with 16 buckets per power of two): the wait, run and end-to-end
// times and the retry lateness that Queue::metrics() reports, mergeable across workers, queues
// and processes because every histogram has the same buckets.
//
// Guarantee: a sample lands in exactly one bucket, whose width is at most 1/16 of its lower
// bound (6.25%), so percentile(q) is within one bucket of the exact q-quantile of the samples
// recorded: never below it, and above it by less than a bucket's width (it reports the
// bucket's highest value, clamped to the largest sample).
// Buckets: values 0-15 ns have a bucket each; from 16 ns on, each power of two [2^e, 2^(e+1))
// is split into 16 equal buckets; everything from 2^40 ns (about 18 minutes) up shares the last
// bucket. 592 buckets, 4.7 KB.
// Why not a library: Debian has no C++ HDR histogram, and the engine depends only on its design
// card's packages; recording is a few instructions (bucket_of is a bit scan and a shift), which
// the engine's workers do on their own copies (detail/latency_recorder.hpp).
// Threading: a value type; not synchronized.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "rail/clock.hpp"

namespace rail {

namespace detail {
class LatencyRecorder;
}

class LatencyHistogram {
 public:
  static constexpr unsigned kSubBits = 4;  // 16 buckets per octave
  static constexpr std::size_t kSub = std::size_t{1} << kSubBits;
  static constexpr unsigned kTopExponent = 39;  // the last split octave
  static constexpr std::size_t kBuckets = (kTopExponent - kSubBits + 2) * kSub;  // 592

  /// bucket_of(ns): the bucket a sample of ns nanoseconds lands in.
  [[nodiscard]] static constexpr std::size_t bucket_of(std::uint64_t ns) noexcept {
    if (ns < kSub) return static_cast<std::size_t>(ns);
    const unsigned e = static_cast<unsigned>(std::bit_width(ns)) - 1;  // >= kSubBits
    if (e > kTopExponent) return kBuckets - 1;
    return (e - kSubBits + 1) * kSub +
           static_cast<std::size_t>((ns >> (e - kSubBits)) & (kSub - 1));
  }
  /// bucket_floor(i): the smallest value bucket i holds.
  [[nodiscard]] static constexpr std::uint64_t bucket_floor(std::size_t i) noexcept {
    if (i < kSub) return i;
    const auto e = static_cast<unsigned>(i / kSub) + kSubBits - 1;
    return (kSub + i % kSub) << (e - kSubBits);
  }
  /// bucket_ceiling(i): the largest value bucket i holds (the last bucket holds all above).
  [[nodiscard]] static constexpr std::uint64_t bucket_ceiling(std::size_t i) noexcept {
    return i + 1 >= kBuckets ? UINT64_MAX : bucket_floor(i + 1) - 1;
  }

  /// record(d, times): adds `times` samples of d (negative: 0).
  void record(Duration d, std::uint64_t times = 1);
  /// merge(other): adds other's samples to this one's.
  void merge(const LatencyHistogram& other);

  [[nodiscard]] std::uint64_t count() const noexcept { return count_; }
  /// sum(): the samples' total (for a mean, and Prometheus's _sum).
  [[nodiscard]] Duration sum() const noexcept { return Duration{static_cast<std::int64_t>(sum_)}; }
  /// max(): the largest sample (0 when empty).
  [[nodiscard]] Duration max() const noexcept { return Duration{static_cast<std::int64_t>(max_)}; }
  /// mean(): sum() / count() (0 when empty).
  [[nodiscard]] Duration mean() const noexcept;
  /// percentile(q): the q-quantile (q in [0, 1]; 0.99 is p99) as the guarantee above says; 0
  /// when empty. Throws Error(invalid_option) for q outside [0, 1].
  [[nodiscard]] Duration percentile(double q) const;
  /// count_at_most(le): the samples in the buckets whose every value is at most le (exactly the
  /// samples <= le when le is a bucket_ceiling: Prometheus's cumulative `le` buckets).
  [[nodiscard]] std::uint64_t count_at_most(Duration le) const noexcept;
  /// bucket(i): the samples in bucket i (i < kBuckets).
  [[nodiscard]] std::uint64_t bucket(std::size_t i) const noexcept {
    return buckets_.empty() ? 0 : buckets_[i];
  }

 private:
  friend class detail::LatencyRecorder;  // builds snapshots from its workers' counts
  void add_bucket(std::size_t i, std::uint64_t n);
  void note_max(std::uint64_t v) noexcept { max_ = v > max_ ? v : max_; }

  std::vector<std::uint64_t> buckets_;  // kBuckets once anything was recorded
  std::uint64_t count_ = 0;
  std::uint64_t sum_ = 0;  // ns; wraps after 584 years of samples
  std::uint64_t max_ = 0;
};

static_assert(LatencyHistogram::bucket_of(15) == 15 && LatencyHistogram::bucket_of(16) == 16 &&
                  LatencyHistogram::bucket_floor(LatencyHistogram::bucket_of(1000)) <= 1000 &&
                  LatencyHistogram::bucket_ceiling(LatencyHistogram::bucket_of(1000)) >= 1000 &&
                  LatencyHistogram::bucket_of(UINT64_MAX) == LatencyHistogram::kBuckets - 1,
              "the bucket layout the header describes");

}  // namespace rail
