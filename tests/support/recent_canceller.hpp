// RecentCanceller: a thread that cancels jobs among the most recently added while producers
// run (and a number of tries after), so that cancels land on jobs in every state: waiting in a
// line, ready, running, ended. Producers publish each added id with note(id) and call
// producer_done() when they stop.
#pragma once

#include <atomic>
#include <cstdint>
#include <random>
#include <thread>

#include "rail/rail.hpp"

namespace rail::test {

class RecentCanceller {
 public:
  /// RecentCanceller(cancel, producers, span, seed, tries_after): cancel(id) is called on ids
  /// among the newest `span`, until every producer is done and `tries_after` more tries.
  template <class Cancel>
  RecentCanceller(Cancel cancel, int producers, std::uint64_t span, unsigned seed,
                  int tries_after = 0)
      : adding_(producers), thread_([this, cancel, span, seed, tries_after] {
          std::mt19937 rng(seed);
          for (int after = 0; adding_.load() > 0 || after < tries_after;
               after += adding_.load() == 0) {
            const JobId n = newest_.load(std::memory_order_relaxed);
            if (n > span) (void)cancel(n - rng() % span);
            std::this_thread::yield();
          }
        }) {}
  RecentCanceller(const RecentCanceller&) = delete;
  RecentCanceller& operator=(const RecentCanceller&) = delete;
  ~RecentCanceller() { join(); }

  void note(JobId id) noexcept { newest_.store(id, std::memory_order_relaxed); }
  void producer_done() noexcept { adding_.fetch_sub(1); }
  void join() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::atomic<JobId> newest_{0};
  std::atomic<int> adding_;
  std::thread thread_;
};

}  // namespace rail::test
