// CompletionLatch: how every benchmark in bench/engine, bench/latency and bench/memory knows its
// batch is done. The no-op task's whole body is hit(): one relaxed fetch_add on a shared counter,
// plus a futex wake by whichever task completes the batch. Every contender runs the same body, so
// its cost (one contended RMW per task, ~30 ns across cores) is common to all and the ratios
// compare the schedulers.
// Threading: hit() from any number of threads; reset() and wait() from the one coordinating
// thread, reset() only while no task is in flight (the queue hand-off that carries the next
// batch's first task publishes the new target to the workers).
#pragma once

#include <atomic>
#include <cstdint>

namespace bench {

/// CompletionLatch counts finished tasks and wakes the waiter when a batch's last one is done.
/// reset() runs between batches, while no task is in flight; the queue hand-off that carries the
/// next batch's first task publishes the new target to the workers.
class CompletionLatch {
 public:
  void reset(std::uint64_t target) noexcept {
    done_.store(0, std::memory_order_relaxed);
    finished_.store(0, std::memory_order_relaxed);
    target_.store(target, std::memory_order_relaxed);
  }
  /// hit() is the no-op task's whole body.
  void hit() noexcept {
    if (done_.fetch_add(1, std::memory_order_relaxed) + 1 ==
        target_.load(std::memory_order_relaxed)) {
      finished_.store(1, std::memory_order_release);  // wait()'s acquire load sees it
      finished_.notify_one();
    }
  }
  /// wait() blocks (futex) until the target is reached.
  void wait() const noexcept {
    while (finished_.load(std::memory_order_acquire) == 0)
      finished_.wait(0, std::memory_order_acquire);
  }
  [[nodiscard]] std::uint64_t count() const noexcept {
    return done_.load(std::memory_order_relaxed);
  }

 private:
  alignas(64) std::atomic<std::uint64_t> done_{0};
  alignas(64) std::atomic<std::uint32_t> finished_{0};
  std::atomic<std::uint64_t> target_{0};  // read-mostly: shares no line with done_
};

}  // namespace bench
