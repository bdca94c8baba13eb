// Attempt timeouts (QueueOptions::timeout, JobOptions::timeout) and stopping a running handler
// (Job::stop_token, Completion::stop_token): inline under the manual clock, a handler "overruns"
// by advancing the clock from inside itself (the sweep runs on each advance, as the timer thread
// would find the deadline). Then threads: timeouts racing completions on the real clock.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <random>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "rail/rail.hpp"
#include "support/inline_engine.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;
using Timeouts = test::InlineEngine;

QueueOptions timeout_of(Duration timeout, Duration visibility = Duration::max()) {
  QueueOptions o;
  o.timeout = timeout;
  o.visibility_timeout = visibility;
  return o;
}

/// run_until_stopped(clock, job): advances the clock in 10 ms steps until the delivery's stop
/// token is stopped; the time that took.
template <class J>
Duration run_until_stopped(ManualClock& clock, const J& job) {
  const std::stop_token stop = job.stop_token();
  Duration ran{0};
  while (!stop.stop_requested()) {
    clock.advance(10ms);
    ran += 10ms;
  }
  return ran;
}

TEST_F(Timeouts, AnAttemptPastItsTimeoutFailsAndIsRetriedByItsBackoff) {
  auto q = engine.declare_queue<int>("q", timeout_of(1s));  // no leases: the timeout alone
  std::vector<Duration> ran;
  q.process({}, [&](Job<int>& j) {
    if (j.attempt() == 1) {
      ran.push_back(run_until_stopped(clock, j));
      EXPECT_TRUE(j.cancelled());
      return Outcome::done();  // late: ignored
    }
    return Outcome::done();
  });
  JobOptions o;
  o.max_attempts = 2;
  o.backoff = Backoff::fixed(100ms);
  const JobId id = q.add("call", 1, o).id;
  replay();
  EXPECT_EQ(ran, std::vector<Duration>{1s});
  ASSERT_EQ(count(EventKind::timed_out), 1u);
  EXPECT_EQ(first(EventKind::timed_out).elapsed, 1s);
  EXPECT_EQ(first(EventKind::timed_out).attempt, 1u);
  ASSERT_EQ(count(EventKind::attempt_failed), 1u);
  EXPECT_EQ(first(EventKind::attempt_failed).delay, 100ms);
  EXPECT_EQ(count(EventKind::late_outcome), 1u);
  EXPECT_EQ(count(EventKind::stalled), 0u);
  ASSERT_EQ(of(EventKind::started).size(), 2u);
  EXPECT_EQ(since_start(of(EventKind::started)[1]), 1s + 100ms);  // after its backoff
  EXPECT_EQ(q.state(id).status, JobStatus::completed);
  const QueueCounts c = q.counts();
  EXPECT_EQ(c.timed_out, 1u);
  EXPECT_EQ(c.late_outcomes, 1u);
  EXPECT_EQ(c.zombies, 0u);
  EXPECT_EQ(c.completed, 1u);
}

TEST_F(Timeouts, TheLastAttemptPastItsTimeoutIsDeadLetteredWithReasonTimeout) {
  auto q = engine.declare_queue<int>("q", timeout_of(250ms, 10s));
  q.process({}, [&](Job<int>& j) {
    (void)run_until_stopped(clock, j);
    return Outcome::done();
  });
  const JobId id = q.add("call", 1).id;
  replay();
  ASSERT_EQ(count(EventKind::dead_lettered), 1u);
  EXPECT_EQ(first(EventKind::dead_lettered).reason, DeadLetterReason::timeout);
  const auto entry = q.dlq().get(id);
  ASSERT_TRUE(entry);
  EXPECT_EQ(entry->reason, DeadLetterReason::timeout);
  ASSERT_EQ(entry->errors.size(), 1u);
  EXPECT_NE(entry->errors[0].message.find("timed out after 250 ms (timeout 250 ms)"),
            std::string::npos)
      << entry->errors[0].message;
  EXPECT_EQ(to_string(DeadLetterReason::timeout), "timeout");
  EXPECT_EQ(to_string(EventKind::timed_out), "timed_out");
}

TEST_F(Timeouts, AJobsOwnTimeoutWinsOverItsQueuesAndWorksOnAQueueWithoutOne) {
  QueueOptions none;
  none.visibility_timeout = Duration::max();  // no leases and no timeout: the job's alone
  auto plain = engine.declare_queue<int>("plain", none);
  auto timed = engine.declare_queue<int>("timed", timeout_of(5s));
  std::vector<Duration> ran;
  auto handler = [&](Job<int>& j) {
    ran.push_back(run_until_stopped(clock, j));
    return Outcome::done();
  };
  plain.process({}, handler);
  timed.process({}, handler);
  JobOptions own;
  own.timeout = 50ms;
  ASSERT_EQ(plain.add("a", 1, own).status, AddStatus::added);
  ASSERT_EQ(timed.add("b", 2, own).status, AddStatus::added);
  replay();
  EXPECT_EQ(ran, (std::vector<Duration>{50ms, 50ms}));
  EXPECT_EQ(plain.counts().timed_out, 1u);
  EXPECT_EQ(timed.counts().timed_out, 1u);
}

TEST_F(Timeouts, ALeaseLapsesBeforeAndExtendLeaseNeverRenewsPastTheTimeout) {
  // Lease 1 s, timeout 3 s. A handler that renews its lease every 500 ms keeps it until its
  // timeout; one that does not stalls at 1 s (a lapse, not a timeout).
  auto q = engine.declare_queue<int>("q", timeout_of(3s, 1s));
  std::vector<Duration> ran;
  q.process({}, [&](Job<int>& j) {
    const std::stop_token stop = j.stop_token();
    Duration t{0};
    while (!stop.stop_requested()) {
      if (j.data() == 1 && t.count() % Duration{500ms}.count() == 0) (void)j.extend_lease(1h);
      clock.advance(10ms);
      t += 10ms;
    }
    ran.push_back(t);
    return Outcome::done();
  });
  ASSERT_EQ(q.add("renews", 1).status, AddStatus::added);
  replay();
  ASSERT_EQ(ran, std::vector<Duration>{3s});
  EXPECT_EQ(q.counts().timed_out, 1u);
  EXPECT_EQ(q.counts().stalled, 0u);
  ASSERT_EQ(q.add("stalls", 2).status, AddStatus::added);
  replay();
  // Its stall budget (max_stalls 1) redelivers it once; the second lapse dead-letters it.
  ASSERT_EQ(ran, (std::vector<Duration>{3s, 1s, 1s}));
  EXPECT_EQ(q.counts().timed_out, 1u);
  EXPECT_EQ(q.counts().stalled, 2u);
}

TEST_F(Timeouts, ALeaseSweptLateIsAStallNotATimeout) {
  // Lease 1 s, timeout 1.5 s; the handler's clock jumps 2 s at once, so the sweep finds both
  // past: the deadline that lapsed was the lease's.
  auto q = engine.declare_queue<int>("q", timeout_of(1500ms, 1s));
  q.process({}, [&](Job<int>& j) {
    if (j.deliveries() == 1) clock.advance(2s);
    return Outcome::done();
  });
  ASSERT_EQ(q.add("call", 1).status, AddStatus::added);
  replay();
  EXPECT_EQ(q.counts().stalled, 1u);
  EXPECT_EQ(q.counts().timed_out, 0u);
  EXPECT_EQ(q.counts().completed, 1u);
}

TEST_F(Timeouts, OnAQueueWithoutLeasesATimeoutMakesNoLease) {
  // visibility max, timeout 10 s: extend_lease has nothing to renew (it used to arm a 1 s
  // lease), and a job's own visibility_timeout stays ignored, as on any queue without leases.
  auto q = engine.declare_queue<int>("q", timeout_of(10s));
  std::vector<bool> renewed;
  q.process({}, [&](Job<int>& j) {
    renewed.push_back(j.extend_lease(1s));
    for (int i = 0; i < 200; ++i)
      clock.advance(10ms);  // 2 s
    return Outcome::done();
  });
  ASSERT_EQ(q.add("renews", 1).status, AddStatus::added);
  JobOptions own_lease;
  own_lease.visibility_timeout = 1s;
  ASSERT_EQ(q.add("own lease", 2, own_lease).status, AddStatus::added);
  replay();
  EXPECT_EQ(renewed, (std::vector<bool>{true, true}));
  EXPECT_EQ(q.counts().stalled, 0u);
  EXPECT_EQ(q.counts().timed_out, 0u);
  EXPECT_EQ(q.counts().completed, 2u);
}

TEST_F(Timeouts, TheStopTokenIsStoppedByTheJobsCancelAndItsCallbacksRun) {
  auto q = engine.declare_queue<int>("q", QueueOptions{});
  bool stopped_before = true, stopped_after = false, callback_ran = false;
  q.process({}, [&](Job<int>& j) {
    const std::stop_token stop = j.stop_token();
    const std::stop_callback on_stop(stop, [&] { callback_ran = true; });
    stopped_before = stop.stop_requested();
    EXPECT_TRUE(q.cancel(j.id()));
    stopped_after = stop.stop_requested();
    EXPECT_TRUE(j.stop_token().stop_requested()) << "a later call returns the stopped token";
    return Outcome::done();
  });
  const JobId id = q.add("call", 1).id;
  engine.run_until_idle();
  EXPECT_FALSE(stopped_before);
  EXPECT_TRUE(stopped_after);
  EXPECT_TRUE(callback_ran);
  EXPECT_EQ(q.state(id).status, JobStatus::cancelled);
  EXPECT_EQ(q.counts().zombies, 0u) << "a cancelled job's running handler is no zombie: it ends";
}

TEST_F(Timeouts, ATokenTakenAfterTheStopComesStoppedAndTheNextDeliveryGetsAFreshOne) {
  // Delivery 1 times out without ever asking for its token, then asks: stopped. Delivery 2's
  // token is not (the slot's stopped source was replaced).
  auto q = engine.declare_queue<int>("q", timeout_of(100ms));
  std::vector<bool> stopped_at_start;
  q.process({}, [&](Job<int>& j) {
    if (j.attempt() == 1) {
      while (!j.cancelled())
        clock.advance(10ms);
    }
    stopped_at_start.push_back(j.stop_token().stop_requested());
    return Outcome::done();
  });
  ASSERT_EQ(q.add("call", 1, JobOptions{.max_attempts = 2}).status, AddStatus::added);
  replay();
  EXPECT_EQ(stopped_at_start, (std::vector<bool>{true, false}));
}

TEST_F(Timeouts, AHandlerThatIgnoresItsStopIsAZombieUntilItReturns) {
  auto q = engine.declare_queue<int>("q", timeout_of(100ms));
  std::optional<QueueCounts> inside;
  std::uint32_t zombies_of_job = 0;
  q.process({}, [&](Job<int>& j) {
    if (j.attempt() > 1) return Outcome::done();
    clock.advance(200ms);  // past its timeout: it keeps going
    inside = q.counts();
    zombies_of_job = q.state(j.id()).zombies;
    return Outcome::done();
  });
  ASSERT_EQ(q.add("call", 1, JobOptions{.max_attempts = 2}).status, AddStatus::added);
  replay();
  ASSERT_TRUE(inside);
  EXPECT_EQ(inside->zombies, 1u);
  EXPECT_EQ(inside->active, 1u) << "it still holds its worker";
  EXPECT_EQ(zombies_of_job, 1u) << "state() lists it with its job (waiting for its retry)";
  EXPECT_EQ(q.counts().zombies, 0u);
  EXPECT_EQ(q.counts().completed, 1u);
}

TEST_F(Timeouts, ADeferredCallsStopTokenStopsAtItsTimeoutAndItsLateCompletionIsIgnored) {
  auto q = engine.declare_queue<int>("q", timeout_of(300ms));
  std::optional<Completion> parked;
  std::stop_token stop;
  q.process({.max_pending = 2}, [&](Job<int>& j) {
    return j.defer([&](Completion c) {
      stop = c.stop_token();
      parked.emplace(std::move(c));
    });
  });
  ASSERT_EQ(q.add("call", 1).status, AddStatus::added);
  engine.run_until_idle();
  ASSERT_TRUE(parked);
  EXPECT_FALSE(stop.stop_requested());
  EXPECT_TRUE(parked->extend_lease(1h)) << "renewed, but not past the timeout";
  clock.advance(299ms);
  engine.run_until_idle();
  EXPECT_FALSE(stop.stop_requested());
  clock.advance(1ms);
  engine.run_until_idle();
  EXPECT_TRUE(stop.stop_requested());
  EXPECT_TRUE(parked->cancelled());
  EXPECT_EQ(q.counts().zombies, 1u);
  EXPECT_FALSE(parked->complete(Outcome::done()));
  EXPECT_EQ(q.counts().zombies, 0u);
  EXPECT_EQ(q.counts().dead_lettered, 1u);
  EXPECT_TRUE(Completion{}.stop_token().stop_requested()) << "an empty Completion's";
}

TEST_F(Timeouts, BadTimeoutsAreRefusedWithWhatIsExpected) {
  try {
    (void)engine.declare_queue<int>("bad", timeout_of(0ms));
    FAIL() << "a zero timeout was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find("timeout"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("a positive run time"), std::string::npos) << e.what();
  }
  auto q = engine.declare_queue<int>("q", QueueOptions{});
  JobOptions o;
  o.timeout = -1ms;
  try {
    (void)q.add("call", 1, o);
    FAIL() << "a negative timeout was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find("timeout"), std::string::npos) << e.what();
  }
}

// --- threads ---------------------------------------------------------------------------------

TEST(TimeoutsThreaded, TheShutdownReportListsAZombieStillRunning) {
  std::atomic<bool> release{false}, timed_out{false};  // outlive the engine's threads
  Engine engine;
  auto q = engine.declare_queue<int>("q", timeout_of(20ms));
  q.process({}, [&](Job<int>& j) {
    while (!j.cancelled())
      std::this_thread::yield();  // ignores its stop token: a zombie from its timeout on
    timed_out.store(true);
    while (!release.load())
      std::this_thread::yield();
    return Outcome::done();
  });
  const JobId id = q.add("call", 1).id;
  // The handler sees its fence as soon as the timeout won it; the timer thread then fails the
  // attempt (its only one: dead-lettered) and counts the timeout.
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while ((!timed_out.load() || q.state(id).status != JobStatus::dead_lettered) &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  ASSERT_TRUE(timed_out.load());
  EXPECT_EQ(q.counts().zombies, 1u);
  EXPECT_EQ(q.state(id).status, JobStatus::dead_lettered);
  EXPECT_EQ(q.state(id).zombies, 1u) << "an ended job's zombie is still listed";
  const ShutdownReport report = engine.shutdown(10ms);
  ASSERT_EQ(report.zombies.size(), 1u);
  EXPECT_EQ(report.zombies[0].id, id);
  ASSERT_EQ(report.still_running.size(), 1u);
  release.store(true);
}

TEST(TimeoutsThreaded, AJobsOwnTimeoutIsSweptAfterAnEarlierJobLoweredTheSweepBound) {
  // No leases, no queue timeout, processing already: job x's own lease lowers the sweep's bound
  // (leases are off: nothing is swept for it); job y's own timeout, longer than that, must still
  // get its deadlines swept.
  std::atomic<bool> y_stopped{false};
  Engine engine;
  QueueOptions none;
  none.visibility_timeout = Duration::max();
  auto q = engine.declare_queue<int>("q", none);
  q.process({}, [&](Job<int>& j) {
    if (j.data() == 0) return Outcome::done();
    const std::stop_token stop = j.stop_token();
    const auto give_up = std::chrono::steady_clock::now() + 30s;
    while (!stop.stop_requested() && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(1ms);
    y_stopped.store(stop.stop_requested());
    return Outcome::done();
  });
  JobOptions x;
  x.visibility_timeout = 50ms;
  ASSERT_EQ(q.add("x", 0, x).status, AddStatus::added);
  ASSERT_TRUE(q.wait_idle(30s));
  JobOptions y;
  y.timeout = 100ms;
  ASSERT_EQ(q.add("y", 1, y).status, AddStatus::added);
  ASSERT_TRUE(q.wait_idle(60s));
  EXPECT_TRUE(y_stopped.load());
  EXPECT_EQ(q.counts().timed_out, 1u);
}

TEST(TimeoutsThreaded, ABatchLingersNoLongerThanHalfItsJobsTimeout) {
  // A batch of up to 8 waits 5 s for more jobs, but its one job may run 100 ms an attempt: the
  // batch runs by 50 ms, so the attempt completes instead of timing out while it waits.
  Engine engine;
  auto q = engine.declare_queue<int>("q", timeout_of(100ms));
  std::atomic<int> runs{0};
  q.process_batch({}, {.max = 8, .linger = 5s}, [&](Batch<int>&) { runs.fetch_add(1); });
  ASSERT_EQ(q.add("call", 1, JobOptions{.max_attempts = 3}).status, AddStatus::added);
  ASSERT_TRUE(q.wait_idle(60s));
  EXPECT_EQ(runs.load(), 1);
  EXPECT_EQ(q.counts().completed, 1u);
  EXPECT_EQ(q.counts().timed_out, 0u);
}

TEST(TimeoutsThreaded, TimeoutsRacingCompletionsEndEveryJobOnceAndLeaveNoZombie) {
  // Real clock, 4 workers on 2 cores, a 2 ms timeout against handlers of 0-4 ms (half of them
  // wait on their stop token, half ignore it): every job completes exactly once in the end, its
  // timed-out attempts fenced, and every zombie returns.
  constexpr int kJobs = 2000;
  std::vector<std::atomic<int>> done(kJobs);  // outlive the engine's threads
  std::atomic<int> lost_stops{0};
  Engine engine;
  auto q = engine.declare_queue<int>("q", timeout_of(2ms));
  q.process({.concurrency = 4}, [&](Job<int>& j) {
    std::minstd_rand rng(static_cast<unsigned>(j.id() * 7919 + j.attempt()));
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(rng() % 4000);
    const std::stop_token stop = j.data() % 2 ? j.stop_token() : std::stop_token{};
    while (std::chrono::steady_clock::now() < until && !stop.stop_requested())
      std::this_thread::yield();
    if (!j.cancelled()) done[j.data()].fetch_add(1);  // a guess: the outcome may still be late
    // A fenced delivery's token is stopped (the fence comes first, the stop once the timer
    // thread lets the wheel go: on a starved machine, seconds later).
    if (j.cancelled() && j.data() % 2) {
      const auto wait = std::chrono::steady_clock::now() + 30s;
      while (!stop.stop_requested() && std::chrono::steady_clock::now() < wait)
        std::this_thread::yield();
      if (!stop.stop_requested()) lost_stops.fetch_add(1);
    }
    return Outcome::done();
  });
  JobOptions o;
  o.max_attempts = 1000;
  for (int i = 0; i < kJobs; ++i)
    ASSERT_EQ(q.add("call", i, o).status, AddStatus::added);
  ASSERT_TRUE(q.wait_idle(120s));
  const QueueCounts c = q.counts();
  EXPECT_EQ(c.completed, static_cast<std::uint64_t>(kJobs));
  EXPECT_EQ(c.dead_lettered, 0u);
  EXPECT_GT(c.timed_out, 0u) << "the race never happened";
  EXPECT_EQ(c.late_outcomes, c.timed_out + c.stalled);
  EXPECT_EQ(c.zombies, 0u);
  EXPECT_EQ(c.active, 0u);
  EXPECT_EQ(c.failed_attempts, c.timed_out);
  for (int i = 0; i < kJobs; ++i)
    EXPECT_GE(done[i].load(), 1) << "job " << i << ": its counted delivery saw itself fenced";
  EXPECT_EQ(lost_stops.load(), 0) << "fenced deliveries whose token never stopped";
}

}  // namespace
}  // namespace rail
