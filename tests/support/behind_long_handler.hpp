// BehindLongHandler and BacklogBehindLongHandler: the scenarios that pin the watch of sleeping
// workers (Dispatcher::sleep, WorkerPool::sleep). A streak of fast jobs makes the spinning worker
// keep its duty through the next job, so producers skip their wake-ups; that job (kLong) then runs
// until the job added right after it (kAfter) has started, which only another worker can do, once
// its watch finds that no job started. Without the watch, kLong waits out its 30 s bound and the
// round fails.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
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

/// BacklogBehindLongHandler: the duty holder runs a long handler (kLong, after a fast streak)
/// while kBacklog jobs of kBacklogUs each (sleeping, so that they need no core) are added. A
/// sleeper's watch finds them; the other sleepers must join in, woken by the workers that run
/// them, and not leave the whole backlog to the one whose starts count as progress to their
/// watches. Each round checks that at least two threads ran the backlog.
struct BacklogBehindLongHandler {
  enum Kind : int { kFast, kLong, kBacklog };
  static constexpr int kRounds = 10, kStreak = 500, kJobs = 40;
  static constexpr auto kBacklogUs = std::chrono::microseconds(600);

  void handle(int kind) {
    if (kind == kLong) {
      long_started = true;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (!release.load() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    } else if (kind == kBacklog) {
      {
        const std::lock_guard lock(mu);
        threads.insert(std::this_thread::get_id());
      }
      std::this_thread::sleep_for(kBacklogUs);
      backlog_done.fetch_add(1);
    }
    ran.fetch_add(1);
  }

  /// run(add): add(kind) adds one job of that kind (and asserts it was added).
  template <class Add>
  void run(Add add) {
    for (int round = 0; round < kRounds; ++round) {
      const int base = ran.load();
      for (int i = 0; i < kStreak; ++i)
        add(kFast);
      while (ran.load() < base + kStreak)  // bounded by the caller's watchdog
        std::this_thread::yield();
      long_started = false;
      release = false;
      backlog_done = 0;
      {
        const std::lock_guard lock(mu);
        threads.clear();
      }
      add(kLong);
      ASSERT_TRUE(eventually([&] { return long_started.load(); }));
      for (int i = 0; i < kJobs; ++i)
        add(kBacklog);
      ASSERT_TRUE(eventually([&] { return backlog_done.load() == kJobs; }));
      release = true;
      std::size_t ran_on = 0;
      {
        const std::lock_guard lock(mu);
        ran_on = threads.size();
      }
      EXPECT_GE(ran_on, 2u) << "round " << round << ": one worker ran the whole backlog";
      ASSERT_TRUE(eventually([&] { return ran.load() == base + kStreak + 1 + kJobs; }));
    }
  }

  std::atomic<int> ran{0}, backlog_done{0};
  std::atomic<bool> long_started{false}, release{false};
  std::mutex mu;
  std::set<std::thread::id> threads;
};

}  // namespace rail::test
