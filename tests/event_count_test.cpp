// EventCount (detail/event_count.hpp): the semaphore idle workers sleep on. These tests pin the
// timed wait that a dispatcher's watching sleepers use: a wait that times out leaves the count
// of sleepers as it found it, a signal is never lost to a timeout nor taken twice, and a
// producer's item is never slept through by the untimed waiters beside the timed ones.
// Threaded tests bound their waits (watchdog); no sleep decides an outcome.
#include "rail/detail/event_count.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "support/watchdog.hpp"

namespace rail::detail {
namespace {

using namespace std::chrono_literals;

TEST(EventCount, AWaitThatTimesOutReturnsFalseAndNoLongerCountsAsASleeper) {
  EventCount ec;
  EXPECT_FALSE(ec.wait_for(1'000'000));
  EXPECT_FALSE(ec.has_sleepers());
  // The signal a notify leaves is then the next waiter's, at once.
  ec.notify();
  EXPECT_TRUE(ec.wait_for(std::int64_t{60} * 1'000'000'000));
}

TEST(EventCount, AWaitTakesAPendingSignalWithoutSleeping) {
  EventCount ec;
  ec.notify();
  EXPECT_TRUE(ec.wait_for(0));
  EXPECT_FALSE(ec.wait_for(0));  // one notify, one signal
}

TEST(EventCount, ANotifyWakesATimedSleeperBeforeItsTimeout) {
  test::Watchdog dog(60s, "EventCount timed sleeper");
  EventCount ec;
  std::atomic<bool> woken{false};
  std::thread sleeper([&] { woken = ec.wait_for(std::int64_t{60} * 1'000'000'000); });
  while (!ec.has_sleepers())
    std::this_thread::yield();
  ec.notify();
  sleeper.join();  // a 60 s timeout: the watchdog fails the test long before if the wake is lost
  EXPECT_TRUE(woken);
  EXPECT_FALSE(ec.has_sleepers());
}

/// Hooks that stop the thread marked `victim` at wait_for's points until the test releases it.
struct StopHooks {
  static inline thread_local bool victim = false;
  static inline std::atomic<int> step{0};
  static void at(EventCountPoint p) noexcept {
    if (!victim) return;
    if (p == EventCountPoint::timed_out) {
      step = 1;
      while (step.load() != 2)
        std::this_thread::yield();
    } else {
      step = 3;
      while (step.load() != 4)
        std::this_thread::yield();
    }
  }
};

// Review (helper-34): V's wait_for times out; a notify counts V among the sleepers (c_ -1 -> 0)
// and posts; V sees c_ >= 0, "a post is mine"; another consumer's wait takes that post. V must
// still return about when its timeout said, not sleep until some later notify.
TEST(EventCount, ATimedOutWaitWhosePostAnotherWaiterTookStillReturns) {
  test::Watchdog dog(60s, "EventCount timed-out wait after a stolen post");
  BasicEventCount<StopHooks> ec;
  std::atomic<bool> returned{false};
  std::atomic<bool> result{true};
  std::thread v([&] {
    StopHooks::victim = true;
    result = ec.wait_for(1'000'000);
    returned = true;
  });
  while (StopHooks::step.load() != 1)
    std::this_thread::yield();
  ec.notify();  // counts V: c_ -1 -> 0, one post
  StopHooks::step = 2;
  while (StopHooks::step.load() != 3)
    std::this_thread::yield();
  std::thread thief([&] { ec.wait(); });  // c_ 0 -> -1: takes the post
  thief.join();
  StopHooks::step = 4;
  // Bounded by the watchdog: before the fix V slept until the next notify, which never came.
  while (!returned.load())
    std::this_thread::yield();
  v.join();
  EXPECT_FALSE(result.load());
  EXPECT_FALSE(ec.has_sleepers());
}

// Consumers sleep without a timeout and take the items a producer publishes (then notifies);
// beside them, watchers wait with timeouts of 0-20 us and pass on any signal they take
// (notify), as a dispatcher's watching sleeper looks and leaves the work to others. Every item
// must be consumed: a signal lost to a watcher's timeout leaves a consumer asleep with an item
// waiting (the watchdog fires). Afterwards, with every thread gone and the pending signal
// drained, nobody is counted as a sleeper: a timeout that left the count wrong, or a post
// without its sleeper, shows there.
TEST(EventCount, SignalsRacingTimeoutsAreNeitherLostNorLeftBehind) {
  test::Watchdog dog(120s, "EventCount signals racing timeouts");
  for (int round = 0; round < 10; ++round) {
    EventCount ec;
    std::atomic<int> items{0};
    std::atomic<int> consumed{0};
    std::atomic<bool> done{false};
    std::atomic<int> consumers_left{2};
    constexpr int kItems = 20'000;
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&] {
        while (!done.load()) {
          int n = items.load();
          if (n > 0 && items.compare_exchange_strong(n, n - 1)) {
            consumed.fetch_add(1);
            continue;
          }
          ec.wait();
        }
        consumers_left.fetch_sub(1);
      });
    }
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937 rng(static_cast<unsigned>(round * 31 + t));
        while (!done.load()) {
          if (ec.wait_for(static_cast<std::int64_t>(rng() % 20'000))) ec.notify();
        }
      });
    }
    for (int i = 0; i < kItems; ++i) {
      items.fetch_add(1);
      ec.notify();
    }
    while (consumed.load() < kItems)  // bounded by the watchdog: a lost wake-up stalls here
      std::this_thread::yield();
    done = true;
    while (consumers_left.load() > 0) {  // each notify wakes a sleeper or leaves one signal
      ec.notify();
      std::this_thread::yield();
    }
    for (auto& t : threads)
      t.join();
    EXPECT_EQ(consumed.load(), kItems);
    while (ec.wait_for(0)) {
    }
    EXPECT_FALSE(ec.has_sleepers()) << "round " << round;
  }
}

}  // namespace
}  // namespace rail::detail
