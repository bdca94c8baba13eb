// The downstream gate's wake-ups: no lost wake-up and no busy loop in the job-state paths that a
// downstream adds (blocked ring, the leader on the wheel), plus stress runs that check every job
// runs exactly once and the counts return to zero. Timed cases run under the manual clock in inline
// mode; threaded ones use bounded waits.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "rail/rail.hpp"
#include "support/downstream_options.hpp"
#include "support/inline_engine.hpp"
#include "support/inline_fuzz.hpp"
#include "support/sanitized.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;

struct DownstreamWakeups : test::InlineEngine {
  /// one_per_second(ran): queue "q" calling downstream "api" (one start per second, burst 1),
  /// whose handler appends each job's payload to `ran`.
  Queue<int> one_per_second(std::vector<int>& ran) {
    engine.declare_downstream("api", {.rate = RateLimit::token_bucket(1, 1s, 1)});
    auto q = engine.declare_queue<int>("q", test::calling("api"));
    q.process({}, [&ran](Job<int>& j) { ran.push_back(j.data()); });
    return q;
  }
};

// The leader and the first job behind it are both cancelled. The leader's cancel steps it down
// and wakes one blocked job: the cancelled one, whose delivery only reclaims its slot. Nobody is
// left to lead, and the last job waits forever though tokens refill.
TEST_F(DownstreamWakeups, CancellingTheLeaderAndTheJobBehindItLeavesNoJobStranded) {
  std::vector<int> ran;
  auto q = one_per_second(ran);
  (void)q.add("call", 1);
  const JobId leader = q.add("call", 2).id;
  const JobId behind = q.add("call", 3).id;
  (void)q.add("call", 4);
  engine.run_until_idle();
  ASSERT_EQ(ran, std::vector<int>{1});
  ASSERT_EQ(q.state(leader).status, JobStatus::waiting);
  ASSERT_TRUE(q.cancel(behind));
  ASSERT_TRUE(q.cancel(leader));
  for (int s = 0; s < 3; ++s) {
    clock.advance(1s);
    engine.run_until_idle();
  }
  EXPECT_EQ(ran, (std::vector<int>{1, 4}));
  EXPECT_EQ(q.counts().waiting, 0u);
  EXPECT_EQ(q.counts().delayed, 0u);
  EXPECT_EQ(engine.downstream("api").stats().waiting, 0u);
}

// Two queues share a rate. Queue a is paused with its leader on the wheel and a job of its own
// blocked; b's jobs are blocked behind a's leader. When the leader's token comes it steps down
// and wakes one blocked job: a's, into a's paused ready ring. b's jobs then wait, with tokens
// there and no leader, for as long as a stays paused.
TEST_F(DownstreamWakeups, APausedQueueDoesNotHoldUpAnotherQueuesJobsAtTheGate) {
  engine.declare_downstream("api", {.rate = RateLimit::token_bucket(1, 1s, 1)});
  auto a = engine.declare_queue<int>("a", test::calling("api"));
  auto b = engine.declare_queue<int>("b", test::calling("api"));
  std::vector<int> ran_b;
  a.process({}, [](Job<int>&) {});
  b.process({}, [&](Job<int>& j) { ran_b.push_back(j.data()); });
  (void)a.add("call", 1);  // takes the token
  (void)a.add("call", 2);  // leads
  (void)a.add("call", 3);  // blocked
  (void)b.add("call", 1);  // blocked
  (void)b.add("call", 2);  // blocked
  engine.run_until_idle();
  a.pause();
  for (int s = 0; s < 4; ++s) {
    clock.advance(1s);
    engine.run_until_idle();
  }
  EXPECT_EQ(ran_b, (std::vector<int>{1, 2})) << "b's jobs waited on paused a";
  a.resume();
  for (int s = 0; s < 4; ++s) {
    clock.advance(1s);
    engine.run_until_idle();
  }
  EXPECT_EQ(a.counts().completed, 3u);
  EXPECT_EQ(b.counts().completed, 2u);
  EXPECT_EQ(a.counts().waiting + a.counts().delayed, 0u);
}

// A downstream paused for good (pause_for(Duration::max()), or a pushback whose retry-after
// saturates) refuses every job until the end of time. No job may lead (the due time is never),
// so each refused job wakes itself as "no leader": refused, blocked, woken, refused... and
// run_until_idle never returns (threaded: the workers spin). The observer stops the loop after
// 1000 refusals by cancelling the job, so that the test ends either way.
TEST_F(DownstreamWakeups, ADownstreamPausedForGoodParksItsJobsInsteadOfSpinning) {
  auto api = engine.declare_downstream("api", {});
  auto q = engine.declare_queue<int>("q", test::calling("api"));
  q.process({}, [](Job<int>&) {});
  std::size_t refused = 0;
  engine.on_event([&](const Event& e) {
    if (e.kind == EventKind::throttled && ++refused >= 1000) (void)q.cancel(e.job_id);
  });
  api.pause_for(Duration::max());
  (void)q.add("call", 1);
  (void)q.add("call", 2);
  engine.run_until_idle();
  EXPECT_LE(refused, 2u) << "the refused jobs went round between the blocked and ready rings";
  EXPECT_EQ(q.counts().completed, 0u);
}

// The leader waits for its downstream, not for a delay: a user's change_delay or promote does
// not apply to it (BullMQ: "not in the delayed state"), so it cannot be parked on the wheel with
// jobs blocked behind it; its gate alone moves it.
TEST_F(DownstreamWakeups, ALeaderIsWaitingSoChangeDelayAndPromoteLeaveItToItsGate) {
  std::vector<int> ran;
  auto q = one_per_second(ran);
  (void)q.add("call", 1);
  const JobId leader = q.add("call", 2).id;
  (void)q.add("call", 3);
  engine.run_until_idle();
  ASSERT_EQ(q.state(leader).status, JobStatus::waiting);
  EXPECT_FALSE(q.change_delay(leader, Duration::max()));
  EXPECT_FALSE(q.promote(leader));
  clock.advance(1s);
  engine.run_until_idle();
  EXPECT_EQ(ran, (std::vector<int>{1, 2}));
  clock.advance(1s);
  engine.run_until_idle();
  EXPECT_EQ(ran, (std::vector<int>{1, 2, 3}));
}

// The same through a debounce: a duplicate add restarts the leader's delay (one hour), and the
// job blocked behind it waits the hour with the bucket full.
TEST_F(DownstreamWakeups, ALeaderDebouncedLaterStepsDown) {
  std::vector<int> ran;
  auto q = one_per_second(ran);
  JobOptions debounced;
  debounced.dedup.id = "k";
  debounced.dedup.mode = DedupMode::debounce;
  debounced.dedup.ttl = 2h;
  (void)q.add("call", 1);
  const JobId leader = q.add("call", 2, debounced).id;
  (void)q.add("call", 3);
  engine.run_until_idle();
  ASSERT_EQ(q.state(leader).status, JobStatus::waiting) << "it waits for its token";
  debounced.delay = 1h;
  const auto merged = q.add("call", 20, debounced);
  ASSERT_EQ(merged.status, AddStatus::debounced);
  ASSERT_EQ(merged.id, leader);
  EXPECT_EQ(q.state(leader).status, JobStatus::delayed) << "now it waits for its debounce";
  clock.advance(1s);
  engine.run_until_idle();
  EXPECT_EQ(ran, (std::vector<int>{1, 3})) << "job 3 waited for the debounced leader";
  clock.advance(1h);
  engine.run_until_idle();
  EXPECT_EQ(ran, (std::vector<int>{1, 3, 20}));
}

// The leader steps down when its token comes and wakes the first blocked job, which reached the
// ready ring before the leader itself: that job took the token, the leader was refused and led
// again. And every handler's return (a permit released, though the downstream has no
// concurrency limit) and every admission woke one more, refused, to the back of the blocked ring.
// So the leader ran only once nobody else waited, and the oldest blocked jobs went round the ring
// behind newer ones: with one new job per token they ran last. One token at a time, the jobs
// start in the order they were added.
TEST_F(DownstreamWakeups, TheLeaderIsNotOvertakenByTheJobsItWakes) {
  engine.declare_downstream("api", {.rate = RateLimit::token_bucket(10, 1s, 1)});
  auto q = engine.declare_queue<int>("q", test::calling("api"));
  std::vector<int> order;
  q.process({}, [&](Job<int>& j) { order.push_back(j.data()); });
  for (int i = 0; i < 5; ++i)
    (void)q.add("call", i);
  engine.run_until_idle();
  for (int i = 5; i < 30; ++i) {  // one more job per token
    clock.advance(100ms);
    (void)q.add("call", i);
    engine.run_until_idle();
  }
  replay();
  ASSERT_EQ(order.size(), 30u);
  for (std::size_t k = 0; k < order.size(); ++k)
    EXPECT_EQ(order[k], static_cast<int>(k)) << "start " << k << ": a job was overtaken";
}

// A lease lapses while the handler holds the only permit: the job is redelivered at once, but
// its redelivery waits (blocked, no thread) until the stale handler returns its permit, and
// starts then, at that moment of the manual clock; never two inside.
TEST_F(DownstreamWakeups, ALapsedDeliveryAndItsRedeliveryNeverHoldTwoPermitsOfOne) {
  engine.declare_downstream("api", {.concurrency = 1});
  QueueOptions o = test::calling("api");
  o.visibility_timeout = 1s;
  auto q = engine.declare_queue<int>("q", o);
  auto api = engine.downstream("api");
  int inside = 0, high = 0;
  std::vector<Duration> started;
  q.process({}, [&](Job<int>& j) {
    high = std::max(high, ++inside);
    started.push_back(clock.now().time_since_epoch());
    if (j.deliveries() == 1) {
      clock.advance(2s);  // the lease lapses under this handler: the job is redelivered
      EXPECT_TRUE(j.cancelled());
      EXPECT_EQ(api.stats().waiting, 1u) << "the redelivery waits in line for the permit";
      clock.advance(1s);
    }
    --inside;
    return Outcome::done();
  });
  const Duration t0 = clock.now().time_since_epoch();
  (void)q.add("call", 1);
  engine.run_until_idle();
  ASSERT_EQ(started.size(), 2u);
  EXPECT_EQ(started[1] - t0, 3s) << "the redelivery starts as the stale handler returns";
  EXPECT_EQ(high, 1);
  EXPECT_EQ(q.counts().completed, 1u);
  EXPECT_EQ(q.counts().waiting + q.counts().active, 0u);
  EXPECT_EQ(api.stats().in_flight, 0u);
}

// A job dead-lettered on a gated queue and redriven runs under the gate again: it waits for the
// token like any other job, without using an attempt.
TEST_F(DownstreamWakeups, ARedrivenJobWaitsAtTheGateLikeAnyOther) {
  engine.declare_downstream("api", {.rate = RateLimit::token_bucket(1, 1s, 1)});
  auto q = engine.declare_queue<int>("q", test::calling("api"));
  bool fail = true;
  std::vector<Duration> runs;
  q.process({}, [&](Job<int>&) {
    runs.push_back(clock.now().time_since_epoch());
    if (fail) return Outcome::fail("bad");
    return Outcome::done();
  });
  const JobId id = q.add("call", 1).id;
  engine.run_until_idle();
  ASSERT_EQ(q.state(id).status, JobStatus::dead_lettered);
  fail = false;
  ASSERT_EQ(q.dlq().redrive(id, {}), RedriveStatus::redriven);
  (void)q.add("call", 2);
  engine.run_until_idle();
  EXPECT_EQ(runs.size(), 1u) << "no token yet";
  clock.advance(1s);
  engine.run_until_idle();
  clock.advance(1s);
  engine.run_until_idle();
  EXPECT_EQ(runs.size(), 3u);
  EXPECT_EQ(q.counts().completed, 2u);
  EXPECT_EQ(q.counts().waiting + q.counts().delayed, 0u);
}

// A randomized run under the manual clock: three queues on one downstream, adds (delayed,
// debounced, merged), cancels, pauses and resumes, promotes and change_delays, pushbacks, retries,
// rate changes and downstream pauses, time advancing in random steps. Then everything resumes and
// time runs until no timer is left: every job must have ended (none stranded in a blocked ring),
// each completed one ran to `done` once, the gauges read 0 and the downstream holds nothing.
// With a fixed rate (fixed = true: no set_rate), no window of `per` saw more than max starts (a
// window, half-open) or burst + max (a bucket, closed).
#ifdef RAIL_SANITIZED
constexpr std::uint64_t kSeeds = 12;  // inline: single-threaded, the sanitizers see little here
#else
constexpr std::uint64_t kSeeds = 150;
#endif

void fuzz_inline(std::uint64_t seed, bool fixed) {
  SCOPED_TRACE("seed " + std::to_string(seed) + (fixed ? " fixed rate" : " rate changes"));
  std::mt19937_64 rng(seed);
  ManualClock clock;
  Engine engine{EngineOptions{.clock = &clock, .mode = Mode::inlined}};
  const RateLimit rate = test::fuzz_rate(rng);
  auto gw = engine.declare_downstream(
      "gw",
      {.concurrency = test::limit_or_none(static_cast<std::uint32_t>(rng() % 3)), .rate = rate});
  // a: one level; b: three levels, aging past 50 ms; c: four levels without aging.
  std::vector<Queue<int>> queues;
  const std::uint32_t levels[] = {1, 3, 4};
  for (const char* name : {"a", "b", "c"}) {
    QueueOptions o = test::calling("gw");
    o.priorities = levels[queues.size()];
    if (o.priorities == 3) o.priority_max_wait = 50ms;
    queues.push_back(engine.declare_queue<int>(name, o));
  }
  test::FuzzJobs jobs;
  std::map<JobId, int> done;
  std::vector<std::int64_t> starts;
  for (auto& q : queues) {
    q.process({}, [&](Job<int>& j) -> Outcome {
      starts.push_back(clock.now().time_since_epoch().count());
      const std::uint64_t r = rng() % 100;
      if (r < 6) return Outcome::pushback(std::chrono::milliseconds(rng() % 300));
      if (r < 12) return Outcome::retry_in(std::chrono::milliseconds(rng() % 200), "again");
      ++done[j.id()];
      return Outcome::done();
    });
  }
  for (int step = 0; step < 400; ++step) {
    const std::size_t qi = rng() % queues.size();
    auto& q = queues[qi];
    switch (rng() % 12) {
      case 0:
      case 1:
      case 2: {
        JobOptions o;
        o.priority = static_cast<std::uint8_t>(rng() % levels[qi]);
        const auto added = q.add("call", 0, test::fuzz_job(rng, o));
        if (added.status == AddStatus::added) jobs.emplace_back(static_cast<int>(qi), added.id);
        break;
      }
      case 3:
        test::fuzz_cancel(rng, queues, jobs);
        break;
      case 4:
        q.pause();
        break;
      case 5:
        q.resume();
        break;
      case 6:
        test::fuzz_retime(rng, queues, jobs);
        break;
      case 7:
        if (!fixed) test::fuzz_set_rate(rng, gw);
        break;
      case 8:
        gw.pause_for(std::chrono::milliseconds(rng() % 200));
        break;
      case 9:
        if (!fixed) gw.set_concurrency(test::limit_or_none(static_cast<std::uint32_t>(rng() % 3)));
        break;
      default:
        clock.advance(std::chrono::milliseconds(rng() % 60));
        break;
    }
    engine.run_until_idle();
  }
  for (auto& q : queues)
    q.resume();
  engine.run_until_idle();
  while (auto next = engine.next_timer_in()) {
    clock.advance(std::max<Duration>(*next, 1ns));
    engine.run_until_idle();
  }
  test::expect_all_ended(queues, jobs.size());
  EXPECT_EQ(gw.stats().waiting, 0u);
  EXPECT_EQ(gw.stats().in_flight, 0u);
  for (const auto& [jq, id] : jobs) {
    const auto st = queues[jq].state(id).status;
    if (st == JobStatus::completed) {
      EXPECT_EQ(done[id], 1) << "job " << id;
    }
  }
  if (fixed) {
    const std::int64_t per = Duration{100ms}.count();
    const bool window = rate.kind == RateLimit::Kind::window;
    const std::size_t bound = window ? rate.max : rate.burst.value_or(rate.max) + rate.max;
    for (std::size_t i = 0, j = 0; i < starts.size(); ++i) {
      while (j < starts.size() &&
             (window ? starts[j] < starts[i] + per : starts[j] <= starts[i] + per))
        ++j;
      ASSERT_LE(j - i, bound) << "starts in [" << starts[i] << ", +" << per << "]";
    }
  }
}

TEST(DownstreamWakeupFuzz, InlineWithAFixedRate) {
  for (std::uint64_t seed = 1; seed <= kSeeds; ++seed) {
    fuzz_inline(seed, true);
    if (HasFailure()) return;
  }
}

TEST(DownstreamWakeupFuzz, InlineWithRateChanges) {
  for (std::uint64_t seed = 1; seed <= kSeeds; ++seed) {
    fuzz_inline(seed, false);
    if (HasFailure()) return;
  }
}

// --- threaded ------------------------------------------------------------------------------------

/// until(pred, limit): polls pred (yielding) until it holds or `limit` of real time passed.
template <class Pred>
bool until(Pred pred, Duration limit = 60s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

// A budget of 1: job 0 holds the permit; jobs 1 and 2 wait in the blocked ring, in that order.
// Job 1 is cancelled. Job 0's release wakes the first blocked job, job 1, whose delivery only
// reclaims its slot: the wake ended there, and job 2 waited forever with the permit free.
TEST(DownstreamWakeupThreaded, AWakeThatReachesACancelledJobIsHandedOn) {
  Engine engine;
  auto api = engine.declare_downstream("api", {.concurrency = 1});
  auto q = engine.declare_queue<int>("q", test::calling("api"));
  std::atomic<bool> hold{true}, holding{false};
  std::atomic<int> ran{0};
  q.process({.concurrency = 3}, [&](Job<int>& j) {
    if (j.data() == 0) {
      holding.store(true);
      while (hold.load())
        std::this_thread::yield();
    }
    ran.fetch_add(1);
  });
  (void)q.add("call", 0);
  ASSERT_TRUE(until([&] { return holding.load(); }));
  const JobId first = q.add("call", 1).id;
  ASSERT_TRUE(until([&] { return api.stats().waiting == 1; }));
  (void)q.add("call", 2);
  ASSERT_TRUE(until([&] { return api.stats().waiting == 2; }));
  ASSERT_TRUE(q.cancel(first));
  hold.store(false);
  EXPECT_TRUE(q.wait_idle(20s)) << "job 2 was left in the blocked ring with the permit free";
  EXPECT_EQ(ran.load(), 2);
  EXPECT_EQ(api.stats().waiting, 0u);
  EXPECT_EQ(api.stats().in_flight, 0u);
}

// Three queues share one downstream (concurrency and rate) under 2 producers, a canceller and a
// thread that flips the limits, pauses and resumes a queue and pauses the downstream, with 9
// workers (12+ threads on 2 cores). Handlers push back now and then; queue c's leases lapse now
// and then (a stale handler and the redelivery both hold permits). Every job must end exactly
// once (completed jobs ran their handler to `done` exactly once, except c's, whose stale
// handlers may also have returned), the gauges must return to 0 and the permits be all back.
TEST(DownstreamWakeupThreaded, SharedDownstreamUnderFlipsCancelsPushbacksAndLapses) {
  const int rounds = 3;
  for (int round = 0; round < rounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    std::mt19937_64 seed_rng(0x5eed0000 + round);
    Engine engine;
    auto gw = engine.declare_downstream(
        "gw", {.concurrency = 3, .rate = RateLimit::token_bucket(20'000, 1s, 40)});
    QueueOptions leased = test::calling("gw");
    leased.visibility_timeout = 3ms;
    leased.max_stalls = 10'000;
    // b ranks its jobs at the gate by priority (aging past 200 us): its blocked jobs wait in
    // levels, and a leader steps down to one that outranks it.
    QueueOptions ranked = test::calling("gw");
    ranked.priorities = 4;
    ranked.priority_max_wait = 200us;
    auto a = engine.declare_queue<int>("a", test::calling("gw"));
    auto b = engine.declare_queue<int>("b", ranked);
    auto c = engine.declare_queue<int>("c", leased);
    constexpr int kPerProducer = 2500;
    constexpr int kJobs = 2 * kPerProducer;
    std::vector<std::atomic<int>> done(kJobs);
    std::atomic<int> inside{0}, high{0};
    auto handler = [&](Job<int>& j) -> Outcome {
      const int now = inside.fetch_add(1) + 1;
      int h = high.load();
      while (now > h && !high.compare_exchange_weak(h, now)) {
      }
      const std::uint64_t r = static_cast<std::uint64_t>(j.id()) * 0x9E3779B97F4A7C15ull;
      Outcome out = Outcome::done();
      if (j.deliveries() == 1 && r % 50 == 0)
        out = Outcome::pushback(std::chrono::microseconds(300));
      if (j.queue() == "c" && j.deliveries() == 1 && r % 40 == 1) {
        // Outlive the lease: the job is redelivered while this handler holds its permit.
        const auto until = std::chrono::steady_clock::now() + 6ms;
        while (std::chrono::steady_clock::now() < until)
          std::this_thread::yield();
      }
      for (int i = 0; i < 2; ++i)
        std::this_thread::yield();
      inside.fetch_sub(1);
      if (out.kind() == Outcome::Kind::done) done[j.data()].fetch_add(1);
      return out;
    };
    a.process({.concurrency = 3}, handler);
    b.process({.concurrency = 3}, handler);
    c.process({.concurrency = 3}, handler);
    Queue<int>* queues[3] = {&a, &b, &c};
    std::vector<std::atomic<JobId>> ids(kJobs);
    std::vector<std::atomic<int>> where(kJobs);
    std::atomic<int> producers_left{2};
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (int p = 0; p < 2; ++p) {
      threads.emplace_back([&, p, s = seed_rng()] {
        std::mt19937_64 rng(s);
        for (int i = 0; i < kPerProducer; ++i) {
          const int data = p * kPerProducer + i;
          const int qi = static_cast<int>(rng() % 3);
          JobOptions o;
          if (rng() % 8 == 0) o.delay = std::chrono::microseconds(rng() % 2000);
          if (qi == 1) o.priority = static_cast<std::uint8_t>(rng() % 4);
          const auto added = queues[qi]->add("call", data, o);
          ASSERT_EQ(added.status, AddStatus::added);
          where[data].store(qi);
          ids[data].store(added.id);
          if (rng() % 64 == 0) std::this_thread::yield();
        }
        producers_left.fetch_sub(1);
      });
    }
    std::atomic<int> cancels{0};
    threads.emplace_back([&, s = seed_rng()] {
      std::mt19937_64 rng(s);
      while (producers_left.load() > 0) {
        const int data = static_cast<int>(rng() % kJobs);
        const JobId id = ids[data].load();
        if (id != 0 && queues[where[data].load()]->cancel(id)) cancels.fetch_add(1);
        std::this_thread::yield();
      }
    });
    threads.emplace_back([&, s = seed_rng()] {
      std::mt19937_64 rng(s);
      while (producers_left.load() > 0 && !stop.load()) {
        switch (rng() % 6) {
          case 0: {
            const auto limit = static_cast<std::uint32_t>(1 + rng() % 4);
            gw.set_concurrency(limit);
            break;
          }
          case 1:
            if (rng() % 3 == 0) {
              gw.set_rate(std::nullopt);
            } else {
              gw.set_rate(RateLimit::token_bucket(5'000 + rng() % 20'000, 1s, 1 + rng() % 50));
            }
            break;
          case 2:
            queues[rng() % 3]->pause();
            break;
          case 3:
            for (auto* q : queues)
              q->resume();
            break;
          case 4:
            gw.pause_for(std::chrono::microseconds(rng() % 500));
            break;
          default:
            break;
        }
        std::this_thread::yield();
      }
    });
    for (auto& t : threads)
      t.join();
    for (auto* q : queues)
      q->resume();
    gw.set_concurrency(4);
    gw.set_rate(std::nullopt);
    for (auto* q : queues)
      ASSERT_TRUE(q->wait_idle(60s))
          << q->name() << ": " << q->counts().waiting << " waiting, " << q->counts().delayed
          << " delayed, " << q->counts().active << " active; gate waiting " << gw.stats().waiting;
    EXPECT_LE(high.load(), 4) << "the highest limit set was 4";
    std::uint64_t ended = 0;
    for (auto* q : queues) {
      const auto n = q->counts();
      EXPECT_EQ(n.waiting + n.delayed + n.active, 0u) << q->name();
      ended += n.completed + n.cancelled + n.dead_lettered;
      EXPECT_EQ(n.dead_lettered, 0u) << q->name();
    }
    EXPECT_EQ(ended, static_cast<std::uint64_t>(kJobs));
    EXPECT_EQ(gw.stats().waiting, 0u);
    EXPECT_EQ(gw.stats().in_flight, 0u);
    for (int d = 0; d < kJobs; ++d) {
      const auto st = queues[where[d].load()]->state(ids[d].load()).status;
      if (st == JobStatus::completed) {
        if (where[d].load() == 2) {
          EXPECT_GE(done[d].load(), 1) << "job " << d;
        } else {
          EXPECT_EQ(done[d].load(), 1) << "job " << d;
        }
      } else {
        EXPECT_EQ(st, JobStatus::cancelled) << "job " << d;
        EXPECT_LE(done[d].load(), where[d].load() == 2 ? 2 : 1) << "job " << d;
      }
    }
  }
}

// Shutdown with jobs blocked at the gate and one holding the permit: every job is either run or
// handed back by take_leftovers, exactly once, and the permit comes back.
TEST(DownstreamWakeupThreaded, ShutdownHandsBackTheJobsWaitingAtTheGate) {
  for (int round = 0; round < 5; ++round) {
    Engine engine;
    auto api = engine.declare_downstream(
        "api", {.concurrency = 1, .rate = RateLimit::token_bucket(1000, 1s, 5)});
    auto a = engine.declare_queue<int>("a", test::calling("api"));
    auto b = engine.declare_queue<int>("b", test::calling("api"));
    std::atomic<bool> hold{true};
    std::vector<std::atomic<int>> ran(400);
    auto handler = [&](Job<int>& j) {
      if (j.data() == 0)
        while (hold.load())
          std::this_thread::yield();
      ran[j.data()].fetch_add(1);
    };
    a.process({.concurrency = 3}, handler);
    b.process({.concurrency = 3}, handler);
    (void)a.add("call", 0);
    ASSERT_TRUE(until([&] { return api.stats().in_flight == 1; }));
    for (int i = 1; i < 400; ++i)
      (void)(i % 2 ? a : b).add("call", i);
    ASSERT_TRUE(until([&] { return api.stats().waiting >= 300; }));
    std::thread releaser([&] {
      std::this_thread::yield();
      hold.store(false);
    });
    const auto report = engine.shutdown(10s);
    releaser.join();
    std::vector<int> left(400, 0);
    for (auto* q : {&a, &b})
      for (auto& l : q->take_leftovers())
        ++left[l.data];
    for (int i = 0; i < 400; ++i)
      EXPECT_EQ(ran[i].load() + left[i], 1) << "job " << i << ", round " << round;
    EXPECT_TRUE(until([&] { return api.stats().in_flight == 0; }));
  }
}

TEST(DownstreamWakeupThreaded, CancelledBlockedJobsGiveTheirSlotsBack) {
  // A job cancelled while it waits in the blocked ring gives its slot back at the cancel, not
  // when a wake happens to pop its index: with the downstream stalled, the queue would stay full
  // of cancelled jobs (the review's open finding).
  Engine engine;
  auto api = engine.declare_downstream("api", {.concurrency = 1});
  QueueOptions o = test::calling("api");
  o.capacity = 8;
  auto q = engine.declare_queue<int>("q", o);
  std::atomic<bool> hold{true};
  q.process({.concurrency = 2}, [&](Job<int>& j) {
    if (j.data() == 0)
      while (hold.load())
        std::this_thread::yield();
  });
  (void)q.add("call", 0);
  ASSERT_TRUE(until([&] { return api.stats().in_flight == 1; }));
  std::vector<JobId> ids;
  for (int i = 1; i < 8; ++i)
    ids.push_back(q.add("call", i).id);
  ASSERT_TRUE(until([&] { return api.stats().waiting == 7; }));
  for (JobId id : ids)
    ASSERT_TRUE(q.cancel(id));
  EXPECT_EQ(api.stats().waiting, 0u);
  std::size_t added = 0;
  while (q.add("call", 8).status == AddStatus::added)
    ++added;
  EXPECT_EQ(added, 7u) << "every cancelled job's slot is free again";
  hold.store(false);
  EXPECT_TRUE(q.wait_idle(20s));
  EXPECT_EQ(q.counts().completed, 8u);
  EXPECT_EQ(q.counts().cancelled, 7u);
}

TEST(DownstreamWakeupThreaded, CancelsSweepingTheBlockedRingLoseNoWake) {
  // Cancels sweep the blocked ring while permits are released: the live jobs the sweeps put
  // back must all run (a wake that found the ring empty mid-sweep is made up for).
  for (int round = 0; round < 20; ++round) {
    Engine engine;
    auto api = engine.declare_downstream("api", {.concurrency = 1});
    auto q = engine.declare_queue<int>("q", test::calling("api"));
    q.process({.concurrency = 3}, [](Job<int>&) { std::this_thread::yield(); });
    std::vector<JobId> ids;
    for (int i = 0; i < 400; ++i)
      ids.push_back(q.add("call", i).id);
    std::size_t cancelled = 0;
    for (std::size_t i = 0; i < ids.size(); i += 3)
      cancelled += q.cancel(ids[i]) ? 1 : 0;
    ASSERT_TRUE(q.wait_idle(30s)) << "round " << round << ": a live job was stranded";
    const QueueCounts c = q.counts();
    EXPECT_EQ(c.completed + c.cancelled, 400u) << "round " << round;
    EXPECT_EQ(c.cancelled, cancelled) << "round " << round;
    EXPECT_EQ(api.stats().waiting, 0u) << "round " << round;
  }
}

}  // namespace
}  // namespace rail
