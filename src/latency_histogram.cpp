// LatencyHistogram (include/rail/latency_histogram.hpp): recording, merging and reading a
// snapshot.
#include "rail/latency_histogram.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "rail/error.hpp"

namespace rail {

void LatencyHistogram::add_bucket(std::size_t i, std::uint64_t n) {
  if (n == 0) return;
  if (buckets_.empty()) buckets_.assign(kBuckets, 0);
  buckets_[i] += n;
  count_ += n;
}

void LatencyHistogram::record(Duration d, std::uint64_t times) {
  const auto ns = static_cast<std::uint64_t>(std::max<std::int64_t>(d.count(), 0));
  add_bucket(bucket_of(ns), times);
  sum_ += ns * times;
  if (times != 0) note_max(ns);
}

void LatencyHistogram::merge(const LatencyHistogram& other) {
  for (std::size_t i = 0; i < other.buckets_.size(); ++i)
    add_bucket(i, other.buckets_[i]);
  sum_ += other.sum_;
  note_max(other.max_);
}

Duration LatencyHistogram::mean() const noexcept {
  return count_ == 0 ? Duration{0} : Duration{static_cast<std::int64_t>(sum_ / count_)};
}

Duration LatencyHistogram::percentile(double q) const {
  if (!(q >= 0.0 && q <= 1.0))
    throw Error(ErrorCode::invalid_option,
                std::string("LatencyHistogram::percentile(")
                    .append(std::to_string(q))
                    .append("): expected a quantile from 0 to 1 (0.99 for p99)"));
  if (count_ == 0) return Duration{0};
  // The rank of the q-quantile among the sorted samples, 1-based (nearest-rank definition).
  const auto rank = std::max<std::uint64_t>(
      1, static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(count_))));
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < kBuckets; ++i) {
    seen += buckets_[i];
    if (seen >= rank) return Duration{static_cast<std::int64_t>(std::min(bucket_ceiling(i), max_))};
  }
  return max();  // not reached: the buckets hold count_ samples
}

std::uint64_t LatencyHistogram::count_at_most(Duration le) const noexcept {
  if (le.count() < 0 || buckets_.empty()) return 0;
  const auto v = static_cast<std::uint64_t>(le.count());
  std::uint64_t n = 0;
  for (std::size_t i = 0; i < kBuckets && bucket_ceiling(i) <= v; ++i)
    n += buckets_[i];
  return n;
}

}  // namespace rail
