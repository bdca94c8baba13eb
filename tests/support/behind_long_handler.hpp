// BehindLongHandler: the scenario that pins the watch of sleeping workers (Dispatcher::sleep,
// WorkerPool::sleep). A streak of fast jobs makes the spinning worker keep its duty through the
// next job, so producers skip their wake-ups; that job (kLong) then runs until the job added
// right after it (kAfter) has started, which only another worker can do, once its watch finds
// that no job started. Without the watch, kLong waits out its 30 s bound and the round fails.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "support/eventually.hpp"

namespace rail::test {

struct BehindLongHandler {
  enum Kind : int { kFast, kLong, kAfter };
  static constexpr int kRounds = 10, kStreak = 500;

  /// handle(kind): the handler's body, for any queue of the scenario.
  void handle(int kind) {
    if (kind == kAfter) after_started = true;
    if (kind == kLong) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (!after_started.load() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::yield();
      if (after_started.load()) long_saw_after.fetch_add(1);
    }
    ran.fetch_add(1);
  }

  /// run(add): kRounds rounds; add(round, kind) adds one job of that kind (and asserts it was
  /// added), to whichever queue the test chooses for the round.
  template <class Add>
  void run(Add add) {
    for (int round = 0; round < kRounds; ++round) {
      after_started = false;
      for (int i = 0; i < kStreak; ++i)
        add(round, kFast);
      // Right after the streak, while its last worker spins for more (kSpinNs) and the other
      // sleeps: that is when the spinner takes kLong and keeps the duty.
      const int streak_done = round * (kStreak + 2) + kStreak;
      while (ran.load() < streak_done)  // bounded by the caller's watchdog
        std::this_thread::yield();
      add(round, kLong);
      add(round, kAfter);
      ASSERT_TRUE(eventually([&] { return ran.load() == (round + 1) * (kStreak + 2); },
                             std::chrono::seconds(120)));
      EXPECT_EQ(long_saw_after.load(), round + 1) << "round " << round;
    }
  }

  std::atomic<int> ran{0}, long_saw_after{0};
  std::atomic<bool> after_started{false};
};

}  // namespace rail::test
