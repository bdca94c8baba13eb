// StartLine: two threads leave at once (each arrives, then waits for the other), so that a race
// test lands its two operations as close together as the scheduler allows. Each side yields while
// it waits: on an oversubscribed machine a spinning side would hold the core the other needs.
#pragma once

#include <atomic>
#include <thread>

namespace rail::test {

class StartLine {
 public:
  /// arrive(): this side is ready; returns once the other side is too.
  void arrive() noexcept {
    arrived_.fetch_add(1);
    while (arrived_.load() < 2)
      std::this_thread::yield();
  }

 private:
  std::atomic<int> arrived_{0};
};

}  // namespace rail::test
