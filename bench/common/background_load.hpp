// BackgroundLoad: the embedding server's own work in issue 14's oversubscription rows, shared
// by engine_bench (throughput) and latency_bench (add -> handler start).
#pragma once

#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace bench {

/// BackgroundLoad: while it lives, one CPU-bound thread per core does the embedding server's own
/// work (a busy loop of arithmetic), so a contender's threads compete with runnable threads for
/// every core (issue 14's oversubscription rows). Both contenders of a row run under it.
class BackgroundLoad {
 public:
  BackgroundLoad() {
    const unsigned n = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned i = 0; i < n; ++i)
      threads_.emplace_back([this, i] {
        std::uint64_t x = i + 1;
        // relaxed: a stop flag, nothing to carry; checked every 4096 steps of xorshift.
        while (!stop_.load(std::memory_order_relaxed))
          for (int k = 0; k < 4096; ++k) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
          }
        sink_.fetch_add(x, std::memory_order_relaxed);  // keeps the loop from being optimised out
      });
  }
  ~BackgroundLoad() {
    stop_.store(true, std::memory_order_relaxed);
    for (auto& t : threads_)
      t.join();
  }
  /// cpu_ns(): the CPU time its threads have used so far, so that a contender's own CPU time is
  /// the process's less this (engine_bench's cpu_ns_per_job). 0 for a thread whose clock cannot
  /// be read (it is not counted out, and the contender's figure reads high, never low).
  [[nodiscard]] std::int64_t cpu_ns() const noexcept {
    std::int64_t total = 0;
    for (const auto& t : threads_) {
      clockid_t id;
      timespec ts{};
      if (pthread_getcpuclockid(const_cast<std::thread&>(t).native_handle(), &id) == 0 &&
          clock_gettime(id, &ts) == 0)
        total += std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
    }
    return total;
  }
  BackgroundLoad(const BackgroundLoad&) = delete;
  BackgroundLoad& operator=(const BackgroundLoad&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> sink_{0};
  std::vector<std::thread> threads_;
};

}  // namespace bench
