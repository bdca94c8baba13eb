// Downstreams through the public API: a queue's jobs start only as its downstream's concurrency
// and rate allow, a handler's pushback pauses the downstream without using an attempt, limits
// change at run time, and a refused job waits without a worker thread. Timed behaviour runs
// under the manual clock in inline mode (no sleeps); the concurrency budget runs threaded.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "rail/rail.hpp"
#include "support/downstream_options.hpp"
#include "support/eventually.hpp"
#include "support/inline_engine.hpp"
#include "support/release_on_exit.hpp"
#include "support/watchdog.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;

struct DownstreamInline : test::InlineEngine {
  /// limited(o): a downstream "api" with limits o and a queue "q" that calls it.
  Queue<int> limited(const DownstreamOptions& o) {
    engine.declare_downstream("api", o);
    return engine.declare_queue<int>("q", test::calling("api"));
  }
};

TEST_F(DownstreamInline, ARateOf300PerSecondStartsExactly300InEachSimulatedSecond) {
  auto q = limited({.rate = RateLimit::token_bucket(300, 1s, 300)});
  std::size_t started = 0;
  q.process({}, [&](Job<int>& j) {
    EXPECT_EQ(j.attempt(), 1u) << "waiting for a token used no attempt";
    ++started;
  });
  for (int i = 0; i < 1000; ++i)
    (void)q.add("call", i);
  engine.run_until_idle();
  EXPECT_EQ(started, 300u) << "the full bucket: exactly burst starts at once";
  for (std::size_t second = 1; second <= 2; ++second) {
    clock.advance(999ms);
    engine.run_until_idle();
    EXPECT_LE(started, 300u * second + 300u);
    clock.advance(1ms);
    engine.run_until_idle();
    EXPECT_EQ(started, 300u * (second + 1)) << "after " << second << " s";
  }
  clock.advance(1s);
  engine.run_until_idle();
  EXPECT_EQ(started, 1000u);
  EXPECT_EQ(q.counts().completed, 1000u);
  EXPECT_EQ(q.counts().failed_attempts, 0u);
}

TEST_F(DownstreamInline, ATokenAtATimeStartsEachJobAtItsOwnRefill) {
  // 10 per second, burst 1: one start every 100 ms, each job exactly when its token refills.
  auto q = limited({.rate = RateLimit::token_bucket(10, 1s, 1)});
  std::vector<Duration> at;
  q.process({}, [&](Job<int>&) { at.push_back(clock.now().time_since_epoch()); });
  for (int i = 0; i < 5; ++i)
    (void)q.add("call", i);
  replay();
  ASSERT_EQ(at.size(), 5u);
  for (std::size_t i = 1; i < at.size(); ++i)
    EXPECT_EQ(at[i] - at[i - 1], 100ms) << "start " << i;
  EXPECT_EQ(engine.downstream("api").stats().waiting, 0u);
}

TEST_F(DownstreamInline, APushbackPausesTheDownstreamForExactlyItsRetryAfterAndUsesNoAttempt) {
  auto q = limited({.concurrency = std::nullopt, .rate = std::nullopt});
  std::vector<std::pair<int, Duration>> runs;
  bool pushed = false;
  q.process({}, [&](Job<int>& j) {
    runs.emplace_back(j.data(), clock.now().time_since_epoch());
    if (!pushed) {
      pushed = true;
      return Outcome::pushback(2s, "429 from the gateway");
    }
    EXPECT_EQ(j.attempt(), 1u) << "job " << j.data() << ": a pushback uses no attempt";
    return Outcome::done();
  });
  const Duration t0 = clock.now().time_since_epoch();
  (void)q.add("call", 1);
  engine.run_until_idle();
  ASSERT_EQ(runs.size(), 1u);
  (void)q.add("call", 2);
  (void)q.add("call", 3);
  engine.run_until_idle();
  EXPECT_EQ(runs.size(), 1u) << "no job starts while the downstream is paused";
  clock.advance(2s - 1ns);
  engine.run_until_idle();
  EXPECT_EQ(runs.size(), 1u) << "1 ns before the retry-after";
  clock.advance(1ns);
  engine.run_until_idle();
  ASSERT_EQ(runs.size(), 4u);
  for (std::size_t i = 1; i < runs.size(); ++i)
    EXPECT_EQ(runs[i].second - t0, 2s) << "job " << runs[i].first;
  EXPECT_EQ(q.counts().completed, 3u);
  EXPECT_EQ(q.counts().failed_attempts, 0u);
  // The pushing job's event names its own pushback; the others were held by the pause.
  const auto held = of(EventKind::throttled);
  ASSERT_GE(held.size(), 2u);
  EXPECT_EQ(held[0].throttle, Throttle::pushed_back);
  EXPECT_EQ(held[0].delay, 2s);
  for (std::size_t i = 1; i < held.size(); ++i)
    EXPECT_EQ(held[i].throttle, Throttle::paused) << "event " << i;
}

TEST_F(DownstreamInline, ARateRaisedAtRunTimeTakesEffectAtOnce) {
  auto q = limited({.rate = RateLimit::token_bucket(1, 1s, 1)});
  std::size_t started = 0;
  q.process({}, [&](Job<int>&) { ++started; });
  for (int i = 0; i < 50; ++i)
    (void)q.add("call", i);
  engine.run_until_idle();
  ASSERT_EQ(started, 1u);
  // The gateway announces a new quota. The bucket keeps what it held (nothing) and refills at
  // the new rate from now: the next token comes in 10 ms, not in the second the old rate said
  // (the job waiting on the wheel for that second is brought forward).
  engine.downstream("api").set_rate(RateLimit::token_bucket(100, 1s, 20));
  engine.run_until_idle();
  EXPECT_EQ(started, 1u) << "the empty bucket stays empty";
  clock.advance(10ms);
  engine.run_until_idle();
  EXPECT_EQ(started, 2u) << "one token 10 ms after the change";
  for (int i = 0; i < 48; ++i) {
    clock.advance(10ms);
    engine.run_until_idle();
  }
  EXPECT_EQ(started, 50u) << "one start per 10 ms";
}

TEST_F(DownstreamInline, AConcurrencyLoweredAtRunTimeTakesEffectAtTheNextStart) {
  auto q = limited({});
  auto api = engine.downstream("api");
  std::size_t started = 0;
  q.process({}, [&](Job<int>&) {
    ++started;
    if (started == 1) api.set_concurrency(1);  // from inside the first handler: it holds 1
    return Outcome::done();
  });
  (void)q.add("call", 1);
  engine.run_until_idle();
  EXPECT_EQ(api.stats().concurrency, 1u);
  EXPECT_EQ(api.stats().in_flight, 0u);
  for (int i = 0; i < 5; ++i)
    (void)q.add("call", i);
  engine.run_until_idle();
  EXPECT_EQ(started, 6u);
}

TEST_F(DownstreamInline, CancellingTheJobThatWaitsForTheNextTokenLetsTheOthersGoOn) {
  // B waits on the wheel for the next token, C waits behind it: with B cancelled, C must still
  // start when the token comes (someone else takes over B's place on the wheel).
  auto q = limited({.rate = RateLimit::token_bucket(1, 1s, 1)});
  std::vector<int> ran;
  q.process({}, [&](Job<int>& j) { ran.push_back(j.data()); });
  (void)q.add("call", 1);
  const JobId b = q.add("call", 2).id;
  (void)q.add("call", 3);
  engine.run_until_idle();
  ASSERT_EQ(ran, std::vector<int>{1});
  EXPECT_EQ(q.state(b).status, JobStatus::waiting)
      << "B leads: it waits on the timing wheel for its downstream, counted waiting";
  ASSERT_TRUE(q.cancel(b));
  clock.advance(1s);
  engine.run_until_idle();
  EXPECT_EQ(ran, (std::vector<int>{1, 3}));
  EXPECT_EQ(q.counts().cancelled, 1u);
  EXPECT_EQ(q.counts().waiting, 0u);
  EXPECT_EQ(q.counts().delayed, 0u);
}

TEST_F(DownstreamInline, TwoQueuesShareOneRate) {
  engine.declare_downstream("api", {.rate = RateLimit::token_bucket(5, 1s, 5)});
  auto a = engine.declare_queue<int>("a", test::calling("api"));
  auto b = engine.declare_queue<int>("b", test::calling("api"));
  std::size_t started = 0;
  a.process({}, [&](Job<int>&) { ++started; });
  b.process({}, [&](Job<int>&) { ++started; });
  for (int i = 0; i < 10; ++i) {
    (void)a.add("call", i);
    (void)b.add("call", i);
  }
  engine.run_until_idle();
  EXPECT_EQ(started, 5u);
  clock.advance(1s);
  engine.run_until_idle();
  EXPECT_EQ(started, 10u);
  clock.advance(1s);
  engine.run_until_idle();
  EXPECT_EQ(started, 15u);
  clock.advance(5s);  // the bucket holds at most its burst: 5 more, not 25
  engine.run_until_idle();
  EXPECT_EQ(started, 20u);
  EXPECT_EQ(a.counts().completed, 10u);
  EXPECT_EQ(b.counts().completed, 10u);
}

TEST_F(DownstreamInline, ThrottledEventsSayWhyAndHowLong) {
  std::vector<std::string> why;
  engine.on_event([&](const Event& e) {
    if (e.kind == EventKind::throttled) why.emplace_back(e.error);
  });
  auto q = limited({.rate = RateLimit::token_bucket(1, 1s, 1)});
  q.process({}, [](Job<int>&) {});
  (void)q.add("call", 1);
  (void)q.add("call", 2);
  engine.run_until_idle();
  ASSERT_EQ(count(EventKind::throttled), 1u);
  EXPECT_EQ(first(EventKind::throttled).delay, 1s);
  ASSERT_EQ(why.size(), 1u);
  EXPECT_NE(why[0].find("downstream 'api'"), std::string::npos) << why[0];
  EXPECT_NE(why[0].find("token"), std::string::npos) << why[0];
  EXPECT_EQ(first(EventKind::throttled).throttle, Throttle::rate_limited);
}

TEST(DownstreamThreaded, AJobRefusedAPermitIsThrottledForNoPermitUntilOneFrees) {
  // Jobs that name the downstream (a queue's own takes its permit before the job: no refusal).
  Engine engine;
  engine.declare_downstream("api", {.concurrency = 1});
  JobOptions calls_api;
  calls_api.downstream = "api";
  std::mutex mu;
  std::vector<std::pair<Throttle, Duration>> held;
  engine.on_event([&](const Event& e) {
    if (e.kind != EventKind::throttled) return;
    const std::lock_guard lock(mu);
    held.emplace_back(e.throttle, e.delay);
  });
  auto q = engine.declare_queue<int>("q", {});
  std::atomic<bool> release{false};
  std::atomic<int> in{0};
  q.process({.concurrency = 2}, [&](Job<int>& j) {
    in.fetch_add(1);
    if (j.data() == 1)
      while (!release.load())
        std::this_thread::yield();
  });
  (void)q.add("call", 1, calls_api);
  while (in.load() == 0)
    std::this_thread::yield();
  (void)q.add("call", 2, calls_api);  // the permit is held: refused, it waits for it
  while (engine.downstream("api").stats().waiting == 0)
    std::this_thread::yield();
  release.store(true);
  EXPECT_TRUE(q.wait_idle(30s));
  const std::lock_guard lock(mu);
  ASSERT_GE(held.size(), 1u);
  EXPECT_EQ(held[0].first, Throttle::no_permit);
  EXPECT_LT(held[0].second, Duration{0}) << "until a permit frees: no known wait";
}

// An observer of `throttled` cancels the job while the worker still holds it (between the
// refusal and its return to waiting): the job ends cancelled without running, and the delivery
// the worker then winds up keeps its number (the soak found a `started` numbered 0 here).
// (Jobs that name the downstream: a queue's own takes a permit before it takes a job, so its
// jobs are never refused one: downstream_order_test.cpp.)
TEST_F(DownstreamInline, AJobCancelledAsItIsRefusedEndsCancelledWithItsDeliveryNumbered) {
  engine.declare_downstream("api", {.concurrency = 1});
  auto q = engine.declare_queue<int>("q", {});
  JobOptions calls_api;
  calls_api.downstream = "api";
  JobId victim = 0;
  engine.on_event([&](const Event& e) {
    if (e.kind == EventKind::throttled && e.job_id == victim) (void)q.cancel(victim);
  });
  int ran = 0;
  q.process({}, [&](Job<int>& j) {
    ++ran;
    if (j.data() == 1) {
      victim = q.add("call", 2, calls_api).id;  // refused: the one permit is ours
      engine.run_until_idle();                  // re-entered: runs what is ready (the victim) now
    }
  });
  (void)q.add("call", 1, calls_api);
  engine.run_until_idle();
  EXPECT_EQ(ran, 1) << "the cancelled job must not run";
  EXPECT_EQ(q.state(victim).status, JobStatus::cancelled);
  for (const auto& e : of(EventKind::started, victim))
    EXPECT_EQ(e.deliveries, 1u) << "a start is numbered from 1";
  const auto c = q.counts();
  EXPECT_EQ(c.waiting + c.active + c.delayed, 0u);
  EXPECT_EQ(c.cancelled, 1u);
  EXPECT_EQ(c.completed, 1u);
}

TEST_F(DownstreamInline, JobsWaitingAtShutdownAreHandedBackAsLeftovers) {
  auto q = limited({.rate = RateLimit::token_bucket(1, 1h, 1)});
  q.process({}, [](Job<int>&) {});
  for (int i = 0; i < 4; ++i)
    (void)q.add("call", i);
  engine.run_until_idle();
  (void)engine.shutdown(0s);
  const auto left = q.take_leftovers();
  EXPECT_EQ(left.size(), 3u) << "one ran; the leader and the two behind it never started";
}

TEST(DownstreamErrors, BadNamesAndOptionsSayWhatIsWrong) {
  ManualClock clock;
  Engine engine{EngineOptions{.clock = &clock, .mode = Mode::inlined}};
  try {
    (void)engine.declare_queue<int>("q", test::calling("nowhere"));
    FAIL() << "a queue naming an undeclared downstream was declared";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find("'nowhere'"), std::string::npos) << e.what();
  }
  try {
    (void)engine.downstream("nowhere");
    FAIL() << "an undeclared downstream was found";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unknown_downstream);
  }
  try {
    (void)engine.declare_downstream("api", {.rate = RateLimit{.max = 0}});
    FAIL() << "a rate of 0 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find("rate.max"), std::string::npos) << e.what();
  }
  auto api = engine.declare_downstream("api", {});
  EXPECT_THROW(api.pause_for(-1s), Error);
  EXPECT_THROW(api.set_rate(RateLimit{.max = 1, .per = 0s}), Error);
}

// --- threaded ------------------------------------------------------------------------------------

// A budget of 3 shared by two queues of 4 workers each: never more than 3 handlers inside,
// whatever the interleaving (8 threads on 2 cores, yielding inside the handler), and every job
// runs exactly once.
TEST(DownstreamThreaded, AConcurrencyOf3SharedByTwoQueuesNeverHasMoreThan3Inside) {
  for (int round = 0; round < 3; ++round) {
    Engine engine;
    engine.declare_downstream("gateway", {.concurrency = 3});
    auto a = engine.declare_queue<int>("a", test::calling("gateway"));
    auto b = engine.declare_queue<int>("b", test::calling("gateway"));
    std::atomic<int> inside{0}, high{0};
    std::atomic<std::uint64_t> ran{0};
    auto handler = [&](Job<int>&) {
      const int now = inside.fetch_add(1) + 1;
      int h = high.load();
      while (now > h && !high.compare_exchange_weak(h, now)) {
      }
      for (int i = 0; i < 3; ++i)
        std::this_thread::yield();
      inside.fetch_sub(1);
      ran.fetch_add(1);
    };
    a.process({.concurrency = 4}, handler);
    b.process({.concurrency = 4}, handler);
    constexpr int kJobs = 3000;
    for (int i = 0; i < kJobs; ++i) {
      ASSERT_EQ(a.add("call", i).status, AddStatus::added);
      ASSERT_EQ(b.add("call", i).status, AddStatus::added);
    }
    ASSERT_TRUE(a.wait_idle(60s));
    ASSERT_TRUE(b.wait_idle(60s));
    EXPECT_LE(high.load(), 3) << "round " << round;
    EXPECT_GE(high.load(), 2) << "round " << round << ": the budget was never used in parallel";
    EXPECT_EQ(ran.load(), 2u * kJobs);
    EXPECT_EQ(engine.downstream("gateway").stats().in_flight, 0u);
    EXPECT_EQ(engine.downstream("gateway").stats().waiting, 0u);
  }
}

// Payments' gateway hangs: its 2 permits are held by handlers that do not return. Email has its
// own downstream and keeps going; the payment jobs refused a permit wait without a thread: the
// payments queue's other workers stay free (idle), and every payment job runs once the gateway
// comes back.
TEST(DownstreamThreaded, AStalledDownstreamDoesNotSlowAnotherOne) {
  Engine engine;
  engine.declare_downstream("payments", {.concurrency = 2});
  engine.declare_downstream("email", {.concurrency = 4});
  auto pay = engine.declare_queue<int>("pay", test::calling("payments"));
  auto mail = engine.declare_queue<int>("mail", test::calling("email"));
  std::atomic<bool> gateway_up{false};
  std::atomic<int> paid{0}, mailed{0};
  pay.process({.concurrency = 6}, [&](Job<int>&) {
    while (!gateway_up.load())
      std::this_thread::yield();
    paid.fetch_add(1);
  });
  mail.process({.concurrency = 4}, [&](Job<int>&) { mailed.fetch_add(1); });
  for (int i = 0; i < 200; ++i)
    (void)pay.add("charge", i);
  for (int i = 0; i < 5000; ++i)
    (void)mail.add("send", i);
  ASSERT_TRUE(mail.wait_idle(60s)) << "email stalled behind payments";
  EXPECT_EQ(mailed.load(), 5000);
  EXPECT_EQ(paid.load(), 0);
  // Both permitted handlers are in (or about to be): wait for them, bounded, as wait_idle() does.
  const auto until = std::chrono::steady_clock::now() + 60s;
  while (pay.counts().active < 2 && std::chrono::steady_clock::now() < until)
    std::this_thread::yield();
  const auto c = pay.counts();
  EXPECT_EQ(c.active, 2u) << "only the 2 permitted handlers hold a thread";
  EXPECT_EQ(c.waiting + c.delayed, 198u);
  gateway_up.store(true);
  ASSERT_TRUE(pay.wait_idle(60s));
  EXPECT_EQ(paid.load(), 200);
}

// --- a downstream per job (JobOptions::downstream) -------------------------------------------

JobOptions calling_job(std::string downstream) {
  JobOptions o;
  o.downstream = std::move(downstream);
  return o;
}

TEST_F(DownstreamInline, EachJobTakesThePermitsOfTheDownstreamItNames) {
  auto payments = engine.declare_downstream("payments", {.concurrency = 1});
  auto email = engine.declare_downstream("email", {.concurrency = 2});
  auto q = engine.declare_queue<int>("work", {});  // no downstream of its own
  std::vector<Completion> calls;
  q.process({.max_pending = 16}, [&](Job<int>& job) {
    return job.defer([&](Completion c) {
      calls.push_back(std::move(c));
    });  // in flight until completed: holds its permit
  });
  for (int i = 0; i < 3; ++i) {
    (void)q.add("charge", i, calling_job("payments"));
    (void)q.add("send", i, calling_job("email"));
    (void)q.add("log", i);  // calls nothing: never waits
  }
  engine.run_until_idle();
  EXPECT_EQ(calls.size(), 6u) << "1 charge + 2 sends + 3 logs in flight";
  EXPECT_EQ(payments.stats().in_flight, 1u);
  EXPECT_EQ(email.stats().in_flight, 2u);
  EXPECT_EQ(payments.stats().waiting, 2u);
  EXPECT_EQ(email.stats().waiting, 1u);
  // A charge's pushback pauses payments only.
  std::vector<Completion> first = std::exchange(calls, {});
  for (Completion& c : first) {
    if (c.id() % 3 == 1) {  // the charges were added first of each three
      c.complete(Outcome::pushback(5s));
    } else {
      c.complete(Outcome::done());
    }
  }
  engine.run_until_idle();
  EXPECT_TRUE(payments.stats().paused_until.has_value());
  EXPECT_FALSE(email.stats().paused_until.has_value());
  EXPECT_EQ(calls.size(), 1u) << "the last send started; no charge while payments is paused";
  for (Completion& c : std::exchange(calls, {}))
    c.complete(Outcome::done());
  clock.advance(5s);
  replay();
  for (int round = 0; round < 8 && !calls.empty(); ++round) {
    for (Completion& c : std::exchange(calls, {}))
      c.complete(Outcome::done());
    replay();
  }
  EXPECT_EQ(q.counts().completed, 9u);
  EXPECT_EQ(payments.stats().in_flight + email.stats().in_flight, 0u);
}

TEST_F(DownstreamInline, AJobNamingItsQueuesOwnDownstreamSharesThatGate) {
  auto api = engine.declare_downstream("api", {.concurrency = 1});
  auto q = engine.declare_queue<int>("q", test::calling("api"));
  std::vector<Completion> calls;
  q.process({.max_pending = 4}, [&](Job<int>& job) {
    return job.defer([&](Completion c) { calls.push_back(std::move(c)); });
  });
  (void)q.add("a", 1);
  (void)q.add("b", 2, calling_job("api"));
  engine.run_until_idle();
  EXPECT_EQ(calls.size(), 1u) << "one permit for both";
  EXPECT_EQ(api.stats().waiting, 1u);
  calls[0].complete(Outcome::done());
  engine.run_until_idle();
  EXPECT_EQ(q.counts().completed, 1u);
  ASSERT_EQ(calls.size(), 2u);
  calls[1].complete(Outcome::done());
  EXPECT_EQ(q.counts().completed, 2u);
}

TEST_F(DownstreamInline, ACancelledJobWaitingForTheDownstreamItNamedGivesItsSlotBack) {
  engine.declare_downstream("payments", {.concurrency = 1});
  auto q = engine.declare_queue<int>("q", QueueOptions{.capacity = 3});
  std::vector<Completion> calls;
  q.process({.max_pending = 4}, [&](Job<int>& job) {
    return job.defer([&](Completion c) { calls.push_back(std::move(c)); });
  });
  (void)q.add("charge", 1, calling_job("payments"));
  const JobId waiting = q.add("charge", 2, calling_job("payments")).id;
  engine.run_until_idle();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(q.add("charge", 3).status, AddStatus::added);
  EXPECT_EQ(q.add("charge", 4).status, AddStatus::full);
  ASSERT_TRUE(q.cancel(waiting));
  EXPECT_EQ(q.add("charge", 5).status, AddStatus::added) << "its slot came back at once";
}

TEST(DownstreamErrors, AJobNamingAnUnknownDownstreamIsRefusedWithItsName) {
  ManualClock clock;
  Engine engine(EngineOptions{.clock = &clock, .mode = Mode::inlined});
  auto q = engine.declare_queue<int>("q", {});
  try {
    (void)q.add("charge", 1, calling_job("paymnets"));
    FAIL() << "expected Error(unknown_downstream)";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unknown_downstream);
    EXPECT_NE(std::string(e.what()).find("'paymnets'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(q.counts().added, 0u) << "nothing was added";
  // 15 downstreams named per job, besides the queue's own: the 16th is refused.
  for (int i = 0; i < 16; ++i)
    engine.declare_downstream("d" + std::to_string(i), {});
  for (int i = 0; i < 15; ++i)
    EXPECT_EQ(q.add("call", i, calling_job("d" + std::to_string(i))).status, AddStatus::added);
  try {
    (void)q.add("call", 15, calling_job("d15"));
    FAIL() << "expected Error(capacity)";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::capacity);
  }
  EXPECT_EQ(q.add("call", 16, calling_job("d3")).status, AddStatus::added) << "known ones still go";
}

TEST(DownstreamThreaded, AStalledDownstreamNamedPerJobHoldsOnlyItsConcurrencyOfWorkers) {
  const test::Watchdog watchdog(120s,
                                "AStalledDownstreamNamedPerJobHoldsOnlyItsConcurrencyOfWorkers");
  std::atomic<bool> gateway_up{false};
  std::atomic<int> paid{0}, mailed{0};
  Engine engine;
  const test::ReleaseOnExit release{gateway_up};
  engine.declare_downstream("payments", {.concurrency = 1});
  engine.declare_downstream("email", {.concurrency = 4});
  auto q = engine.declare_queue<int>("work", {});
  q.process({.concurrency = 3}, [&](Job<int>& job) {
    if (job.name() == "charge") {
      while (!gateway_up.load())
        std::this_thread::yield();
      paid.fetch_add(1);
    } else {
      mailed.fetch_add(1);
    }
  });
  for (int i = 0; i < 50; ++i)
    (void)q.add("charge", i, calling_job("payments"));
  for (int i = 0; i < 3000; ++i)
    (void)q.add("send", i, calling_job("email"));
  ASSERT_TRUE(test::eventually([&] { return mailed.load() == 3000; }, 60s))
      << "email stalled behind payments: " << mailed.load();
  EXPECT_EQ(paid.load(), 0);
  // Eventually: the last email's handler counted it before its end left the `active` gauge, and a
  // charge refused at the gate is active for the moment between its start and its requeue.
  EXPECT_TRUE(test::eventually([&] { return q.counts().active <= 1u; }, 60s))
      << "one worker in the stalled gateway, the rest free; active " << q.counts().active;
  gateway_up.store(true);
  ASSERT_TRUE(q.wait_idle(60s));
  EXPECT_EQ(paid.load(), 50);
}

}  // namespace
}  // namespace rail
