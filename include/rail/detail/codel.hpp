// Codel: CoDel-style overload detection for one queue (QueueOptions::shed), as folly's Codel
// runs it in front of a server: each worker that takes a job reports how long the job waited to
// start, and learns whether to shed it.
//
// Algorithm: time is cut into intervals of `interval`. Each interval keeps the shortest wait
// reported in it. When an interval closes (the first report at or past its end), the queue is
// overloaded for the next interval if that shortest wait was above `target`: even the luckiest
// job waited too long, so the backlog is standing, not a burst. While overloaded, a job that
// waited more than twice `target` is shed (folly's "slough" timeout); fresh jobs still run, so
// the queue keeps serving the work that can still be on time. An interval with no report closes
// at the next one.
// Invariant: `overloaded()` answers from the last closed interval only; the first interval closes
// with a shortest wait of 0 (not overloaded).
// Memory ordering: relaxed throughout. The three words are independent hints: a report that
// races an interval's close may fold its wait into either interval, and a reader may see the
// overload flag one report late; no other data is published through them.
// Threading: report() from any worker thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "rail/clock.hpp"
#include "rail/detail/deadline.hpp"

namespace rail::detail {

class Codel {
 public:
  Codel(Duration target, Duration interval) noexcept
      : target_ns_(target.count()),
        slough_ns_(saturating_add(target.count(), target)),
        interval_(interval) {}
  Codel(const Codel&) = delete;
  Codel& operator=(const Codel&) = delete;

  /// report(wait_ns, now): a job taken at `now` waited wait_ns to start; true if it is to be
  /// shed (the queue is overloaded and it waited more than twice the target).
  bool report(std::int64_t wait_ns, std::int64_t now) noexcept {
    std::int64_t end = interval_end_ns_.load(std::memory_order_relaxed);
    if (now >= end && interval_end_ns_.compare_exchange_strong(end, saturating_add(now, interval_),
                                                               std::memory_order_relaxed)) {
      // This report closes the interval and opens the next with its own wait as the shortest.
      const std::int64_t shortest = min_wait_ns_.exchange(wait_ns, std::memory_order_relaxed);
      overloaded_.store(shortest > target_ns_, std::memory_order_relaxed);
    } else {
      std::int64_t m = min_wait_ns_.load(std::memory_order_relaxed);
      while (wait_ns < m &&
             !min_wait_ns_.compare_exchange_weak(m, wait_ns, std::memory_order_relaxed)) {
      }
    }
    return wait_ns > slough_ns_ && overloaded_.load(std::memory_order_relaxed);
  }

  /// overloaded(): what the last closed interval said (a figure for explain and tests).
  [[nodiscard]] bool overloaded() const noexcept {
    return overloaded_.load(std::memory_order_relaxed);
  }

 private:
  const std::int64_t target_ns_;
  const std::int64_t slough_ns_;
  const Duration interval_;
  std::atomic<std::int64_t> interval_end_ns_{0};
  std::atomic<std::int64_t> min_wait_ns_{0};
  std::atomic<bool> overloaded_{false};
};

}  // namespace rail::detail
