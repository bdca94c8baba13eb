// Priority levels (QueueOptions::priorities, JobOptions::priority), inline under the manual
// clock: higher first and equal ones in the order they became ready, also with delays and
// retries; aging bounds a low job's wait under a saturating stream of urgent ones; the oldest
// wait per level; explain; bad options. Then threads: many producers, oversubscribed workers.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "rail/rail.hpp"
#include "support/inline_engine.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;
using Priorities = test::InlineEngine;

QueueOptions levels(std::uint32_t n, Duration max_wait = Duration::max()) {
  QueueOptions o;
  o.priorities = n;
  o.priority_max_wait = max_wait;
  return o;
}

JobOptions at(std::uint8_t priority, Duration delay = Duration{0}) {
  JobOptions o;
  o.priority = priority;
  o.delay = delay;
  return o;
}

TEST_F(Priorities, HigherPrioritiesStartFirstAndEqualOnesInAddOrder) {
  auto q = engine.declare_queue<int>("q", levels(4));
  std::vector<int> starts;
  q.process({}, [&](Job<int>& j) { starts.push_back(j.data()); });
  const std::uint8_t p[] = {0, 3, 1, 3, 2, 0, 1, 3};
  for (int i = 0; i < 8; ++i)
    ASSERT_EQ(q.add("j", i, at(p[i])).status, AddStatus::added);
  engine.run_until_idle();
  EXPECT_EQ(starts, (std::vector<int>{1, 3, 7, 4, 2, 6, 0, 5}));
}

TEST_F(Priorities, ADelayedOrRetriedJobTakesItsPlaceByPriorityWhenItIsReady) {
  auto q = engine.declare_queue<int>("q", levels(3));
  std::vector<int> starts;
  q.process({}, [&](Job<int>& j) -> Outcome {
    starts.push_back(j.data());
    if (j.data() == 20 && j.attempt() == 1) return Outcome::retry_in(5ms, "again");
    return Outcome::done();
  });
  q.pause();
  ASSERT_EQ(q.add("j", 10, at(2, 5ms)).status, AddStatus::added);  // high, due at 5 ms
  JobOptions twice = at(1);
  twice.max_attempts = 2;
  ASSERT_EQ(q.add("j", 20, twice).status, AddStatus::added);  // middle, retried in 5 ms
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(q.add("j", i, at(0)).status, AddStatus::added);
  q.resume();
  engine.run_until_idle();
  // 20 failed and waits 5 ms; the lows ran meanwhile.
  EXPECT_EQ(starts, (std::vector<int>{20, 0, 1, 2}));
  for (int i = 3; i < 6; ++i)
    ASSERT_EQ(q.add("j", i, at(0)).status, AddStatus::added);
  q.pause();
  clock.advance(5ms);
  engine.run_until_idle();  // both due: 10 and 20 are ready, behind nothing of theirs
  q.resume();
  engine.run_until_idle();
  EXPECT_EQ(starts, (std::vector<int>{20, 0, 1, 2, 10, 20, 3, 4, 5}));
}

/// low_start_under_stream(q, urgent, level): a low job (level 0) added behind a steady stream of
/// `urgent` jobs at `level`, each adding the next as it runs (1 ms each): when the low one starts.
std::int64_t low_start_under_stream(test::InlineEngine& t, Queue<int>& q, int urgent,
                                    std::uint8_t level) {
  int urgent_left = urgent;
  std::int64_t low_started_ms = -1;
  q.process({}, [&](Job<int>& j) {
    t.clock.advance(1ms);
    if (j.data() == 0) {
      low_started_ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(t.clock.now().time_since_epoch())
              .count();
      return;
    }
    if (--urgent_left > 0) (void)q.add("urgent", 1, at(level));
  });
  EXPECT_EQ(q.add("urgent", 1, at(level)).status, AddStatus::added);
  EXPECT_EQ(q.add("low", 0, at(0)).status, AddStatus::added);
  t.engine.run_until_idle();
  return low_started_ms;
}

TEST_F(Priorities, WithoutAgingASteadyUrgentStreamKeepsALowJobWaiting) {
  auto q = engine.declare_queue<int>("q", levels(2));
  EXPECT_EQ(low_start_under_stream(*this, q, 100, 1), 101);  // after every urgent job
}

TEST_F(Priorities, WithAgingALowJobStartsWithinItsBoundUnderASteadyUrgentStream) {
  auto q = engine.declare_queue<int>("q", levels(3, 10ms));
  const std::int64_t low_started_ms = low_start_under_stream(*this, q, 1000, 2);
  // Level 0 under level 2: it ranks as level 2 after 2 x 10 ms and, older than any urgent job
  // then, starts next: (3 - 1 - 0) x 10 ms, plus the urgent job running when it got there.
  EXPECT_GE(low_started_ms, 20);
  EXPECT_LE(low_started_ms, 22);
  EXPECT_EQ(q.counts().completed, 1001u);
}

TEST_F(Priorities, WithAgingALowJobWaitingAtItsDownstreamKeepsItsWait) {
  // A low job refused by a rate-limited downstream and woken again is still the job that has
  // waited longest: its wait is not restarted by the wake.
  (void)engine.declare_downstream("api",
                                  DownstreamOptions{.rate = RateLimit{.max = 1, .per = 10ms}});
  QueueOptions qo = levels(2, 5ms);
  qo.downstream = "api";
  auto q = engine.declare_queue<int>("q", qo);
  int urgent_left = 200;
  std::int64_t low_started_ms = -1;
  q.process({}, [&](Job<int>& j) {
    if (j.data() == 0) {
      low_started_ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(clock.now().time_since_epoch())
              .count();
      return;
    }
    if (--urgent_left > 0) (void)q.add("urgent", 1, at(1));
  });
  ASSERT_EQ(q.add("urgent", 1, at(1)).status, AddStatus::added);
  ASSERT_EQ(q.add("low", 0, at(0)).status, AddStatus::added);
  replay();
  ASSERT_GE(low_started_ms, 0);
  EXPECT_LE(low_started_ms, 30);  // not after the 200 urgent jobs (2,000 ms)
}

/// behind_a_token_per_10ms(engine, n): a queue of n levels whose jobs call a downstream that
/// gives a token per 10 ms (burst 1, no concurrency limit).
Queue<int> behind_a_token_per_10ms(Engine& engine, std::uint32_t n) {
  (void)engine.declare_downstream("api",
                                  DownstreamOptions{.rate = RateLimit::token_bucket(1, 10ms, 1)});
  QueueOptions qo = levels(n);
  qo.downstream = "api";
  return engine.declare_queue<int>("q", qo);
}

TEST_F(Priorities, AtARateLimitedDownstreamAHighJobIsTheNextToGetAToken) {
  // A token per 10 ms. Low job 0 takes the first; 1 leads (the wheel, for the next token), 2 and
  // 3 wait behind it. Then a high (9) and a middle (5) job come: each is refused, and each takes
  // the next token before the low jobs, which keep their add order.
  auto q = behind_a_token_per_10ms(engine, 3);
  std::vector<int> starts;
  q.process({}, [&](Job<int>& j) { starts.push_back(j.data()); });
  for (int i = 0; i < 4; ++i)
    ASSERT_EQ(q.add("low", i, at(0)).status, AddStatus::added);
  engine.run_until_idle();
  ASSERT_EQ(starts, std::vector<int>{0});
  const JobId high = q.add("high", 9, at(2)).id;
  ASSERT_EQ(q.add("middle", 5, at(1)).status, AddStatus::added);
  engine.run_until_idle();
  EXPECT_EQ(starts, std::vector<int>{0}) << "no token before 10 ms";
  EXPECT_EQ(q.explain(high).holdup, Holdup::downstream_rate);
  for (std::size_t n = 2; n <= 6; ++n) {
    clock.advance(10ms);
    engine.run_until_idle();
    ASSERT_EQ(starts.size(), n) << "one start per token";
  }
  EXPECT_EQ(starts, (std::vector<int>{0, 9, 5, 1, 2, 3}));
}

TEST_F(Priorities, ALeaderAdmittedAfterTheHigherJobItWokeStrandsNoBlockedJob) {
  // A token per 10 ms, no concurrency limit. 0 runs, 1 leads, 2 waits; then 9 (high) waits. At
  // 10 ms the leader wakes 9, which takes the token and runs past the next one, so the leader is
  // admitted at 20 ms with it: the leader carries the wake-up chain, so 2 still starts (else no
  // job leads and nothing wakes 2: no timer is left to run).
  auto q = behind_a_token_per_10ms(engine, 2);
  std::vector<int> starts;
  q.process({}, [&](Job<int>& j) {
    starts.push_back(j.data());
    if (j.data() == 9) clock.advance(10ms);
  });
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(q.add("low", i, at(0)).status, AddStatus::added);
  engine.run_until_idle();
  ASSERT_EQ(q.add("high", 9, at(1)).status, AddStatus::added);
  replay();
  EXPECT_EQ(starts, (std::vector<int>{0, 9, 1, 2}));
  EXPECT_EQ(q.counts().waiting, 0u);
}

TEST_F(Priorities, OldestWaitPerLevelIsReported) {
  auto q = engine.declare_queue<int>("q", levels(3));
  q.process({}, [](Job<int>&) {});
  q.pause();
  ASSERT_EQ(q.add("j", 0, at(0)).status, AddStatus::added);
  clock.advance(30ms);
  ASSERT_EQ(q.add("j", 1, at(2)).status, AddStatus::added);
  clock.advance(10ms);
  const std::vector<Duration> waits = q.oldest_waits();
  ASSERT_EQ(waits.size(), 3u);
  EXPECT_EQ(waits[0], 40ms);
  EXPECT_EQ(waits[1], 0ms);
  EXPECT_EQ(waits[2], 10ms);
  q.resume();
  engine.run_until_idle();
  EXPECT_EQ(q.oldest_waits(), (std::vector<Duration>{0ms, 0ms, 0ms}));
  auto plain = engine.declare_queue<int>("plain", {});
  EXPECT_EQ(plain.oldest_waits(), (std::vector<Duration>{0ms}));
}

TEST_F(Priorities, ExplainCountsTheJobsOfHigherPriorityAhead) {
  auto q = engine.declare_queue<int>("q", levels(3));
  q.process({}, [](Job<int>&) {});
  const JobId low = q.add("j", 0, at(0)).id;
  const JobId older_low = low;
  ASSERT_EQ(q.add("j", 1, at(2)).status, AddStatus::added);
  ASSERT_EQ(q.add("j", 2, at(1)).status, AddStatus::added);
  const JobId newer_low = q.add("j", 3, at(0)).id;
  const Explanation e = q.explain(newer_low);
  EXPECT_EQ(e.holdup, Holdup::higher_priority);
  EXPECT_EQ(e.priority, 0u);
  EXPECT_EQ(e.ahead, 3u);  // two of higher priority, one of its own added before it
  EXPECT_NE(e.text.find("2 jobs of higher priority start first"), std::string::npos) << e.text;
  engine.run_until_idle();
  EXPECT_EQ(q.explain(older_low).holdup, Holdup::none);
}

TEST_F(Priorities, PrioritiesOutOfRangeAreRefusedWithWhatIsExpected) {
  auto q = engine.declare_queue<int>("q", levels(3));
  try {
    (void)q.add("j", 1, at(3));
    FAIL() << "expected Error(invalid_option)";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find("JobOptions.priority is 3"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("expected 0 to 2"), std::string::npos) << e.what();
  }
  auto plain = engine.declare_queue<int>("plain", {});
  EXPECT_THROW((void)plain.add("j", 1, at(1)), Error);
  EXPECT_THROW((void)engine.declare_queue<int>("none", levels(0)), Error);
  EXPECT_THROW((void)engine.declare_queue<int>("many", levels(9)), Error);
  EXPECT_THROW((void)engine.declare_queue<int>("zero_wait", levels(2, 0ms)), Error);
  QueueOptions bad_default = levels(2);
  bad_default.defaults.priority = 2;
  EXPECT_THROW((void)engine.declare_queue<int>("bad_default", bad_default), Error);
  EXPECT_EQ(q.counts().added, 0u);
}

TEST(PrioritiesThreaded, AJobNeedingNoPermitStartsWhileTheQueuesOnlyPermitIsHeld) {
  // The queue's own downstream has one permit, held by a running top-level job; a level-0 job
  // that calls another downstream needs none of it and must start (on the shared pool too,
  // whose workers look only when a queue shows work they may take).
  for (const bool shared : {false, true}) {
    EngineOptions eo;
    if (shared) eo.workers = 2;
    Engine engine(eo);
    (void)engine.declare_downstream("ds", DownstreamOptions{.concurrency = 1});
    (void)engine.declare_downstream("other", DownstreamOptions{.concurrency = 4});
    QueueOptions qo = levels(8);
    qo.capacity = 64;
    qo.downstream = "ds";
    auto q = engine.declare_queue<int>("q", qo);
    std::atomic<bool> holding{false}, release{false}, other_ran{false};
    q.process(shared ? WorkerOptions::shared() : WorkerOptions{.concurrency = 2}, [&](Job<int>& j) {
      if (j.data() == 1) {
        holding = true;
        while (!release.load())
          std::this_thread::sleep_for(1ms);
      } else {
        other_ran = true;
      }
    });
    ASSERT_EQ(q.add("long", 1, at(7)).status, AddStatus::added);
    while (!holding.load())
      std::this_thread::sleep_for(1ms);
    std::this_thread::sleep_for(20ms);  // the other workers asleep
    JobOptions other = at(0);
    other.downstream = "other";
    ASSERT_EQ(q.add("other", 2, other).status, AddStatus::added);
    for (int i = 0; i < 10'000 && !other_ran.load(); ++i)
      std::this_thread::sleep_for(1ms);
    EXPECT_TRUE(other_ran.load()) << (shared ? "shared pool" : "own workers");
    release = true;
    ASSERT_TRUE(q.wait_idle(60s));
    (void)engine.shutdown(10s);
  }
}

TEST(PrioritiesThreaded, ReadyJobsStartByPriorityAndEveryJobEndsOnce) {
  // 4 producers add to a paused queue with random priorities; one worker then starts them:
  // never a lower priority before a higher one that was ready. Then 5 workers on a running queue
  // with producers adding meanwhile: every job ends once.
  for (int round = 0; round < 5; ++round) {
    Engine engine;
    QueueOptions qo = levels(8);
    qo.capacity = 8192;
    auto q = engine.declare_queue<int>("q", qo);
    std::mutex mu;
    std::vector<int> starts;
    q.process({.concurrency = 1}, [&](Job<int>& j) {
      const std::lock_guard lock(mu);
      starts.push_back(j.data());
    });
    q.pause();
    std::vector<std::thread> producers;
    for (int p = 0; p < 4; ++p)
      producers.emplace_back([&, p] {
        std::mt19937 rng(static_cast<unsigned>(round * 10 + p));
        for (int i = 0; i < 500; ++i) {
          const auto prio = static_cast<std::uint8_t>(rng() % 8);
          ASSERT_EQ(q.add("j", prio, at(prio)).status, AddStatus::added);
        }
      });
    for (auto& t : producers)
      t.join();
    q.resume();
    ASSERT_TRUE(q.wait_idle(60s));
    ASSERT_EQ(starts.size(), 2000u);
    std::size_t inversions = 0;
    for (std::size_t i = 1; i < starts.size(); ++i)
      if (starts[i] > starts[i - 1]) ++inversions;
    // The worker may have taken one job before it saw the pause's end... none: all were ready
    // before resume(), so the order is the levels' alone.
    EXPECT_EQ(inversions, 0u) << "round " << round;
    (void)engine.shutdown(10s);
  }
  Engine engine;
  QueueOptions qo = levels(4, 1ms);
  qo.capacity = 1024;
  qo.on_full = OnFull::block;
  qo.block_timeout = 60s;
  auto q = engine.declare_queue<int>("q", qo);
  std::atomic<std::uint64_t> ran{0};
  q.process({.concurrency = 5}, [&](Job<int>&) { ran.fetch_add(1); });
  std::vector<std::thread> producers;
  for (int p = 0; p < 4; ++p)
    producers.emplace_back([&, p] {
      std::mt19937 rng(static_cast<unsigned>(p));
      for (int i = 0; i < 5000; ++i) {
        const auto prio = static_cast<std::uint8_t>(rng() % 4);
        ASSERT_EQ(q.add("j", i, at(prio)).status, AddStatus::added);
      }
    });
  for (auto& t : producers)
    t.join();
  ASSERT_TRUE(q.wait_idle(60s));
  EXPECT_EQ(ran.load(), 20000u);
  EXPECT_EQ(q.counts().completed, 20000u);
  (void)engine.shutdown(10s);
}

}  // namespace
}  // namespace rail
