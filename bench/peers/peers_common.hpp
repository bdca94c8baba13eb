// What bench/peers' C++ drivers share (peers_rail, peers_rail_amqp): the clock, the payload,
// the completion count and the quantiles, with the same meanings as bench/peers/common.mjs.
#pragma once

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace rail::peers {

inline std::int64_t now_ns() noexcept {
  return std::chrono::steady_clock::now().time_since_epoch().count();
}

/// Finish counts completed jobs; the handler that completes the last one takes the time (as the
/// JS drivers do at their last completion) and wakes the main thread. acq_rel on the count chains
/// every handler's writes (late_ms) to that last one, and its release store passes them on.
class Finish {
 public:
  explicit Finish(std::uint64_t target) noexcept : target_(target) {}
  void hit() noexcept {
    if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 != target_) return;
    at_ns_ = now_ns();
    finished_.store(1, std::memory_order_release);
    finished_.notify_one();
  }
  /// wait() blocks until the last job completed and returns when that was.
  std::int64_t wait() const noexcept {
    while (finished_.load(std::memory_order_acquire) == 0)
      finished_.wait(0, std::memory_order_acquire);
    return at_ns_;
  }

 private:
  const std::uint64_t target_;
  alignas(64) std::atomic<std::uint64_t> done_{0};
  alignas(64) std::atomic<std::uint32_t> finished_{0};
  std::int64_t at_ns_ = 0;  // written before finished_'s release store, read after its acquire
};

/// payload(i) is the same bytes the peers carry (JSON.stringify({order: i})). A typed struct would
/// be rail's idiomatic payload and cheaper; the text keeps the comparison like for like.
inline std::string payload(std::uint64_t i) {
  char buf[32] = "{\"order\":";
  char* end = std::to_chars(buf + 9, buf + sizeof(buf) - 1, i).ptr;
  *end++ = '}';
  return {buf, end};
}

/// order_of(body): i of a payload(i) body ({"order":i}).
inline std::uint64_t order_of(const std::string& body) {
  std::uint64_t i = 0;
  const char* digits = body.data() + body.find(':') + 1;
  std::from_chars(digits, body.data() + body.size(), i);
  return i;
}

/// Nearest-rank quantile, the same definition as bench/peers/common.mjs.
inline double quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  auto rank = static_cast<std::size_t>(q * static_cast<double>(sorted.size()) + 0.999999);
  return sorted[std::clamp<std::size_t>(rank, 1, sorted.size()) - 1];
}

inline double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace rail::peers
