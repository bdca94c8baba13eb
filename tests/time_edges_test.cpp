// Every Duration a user can hand rail, at its edges: 0, 1 ns, Duration::max() - 1 ns and
// Duration::max() (issue 10, "Time never overflows"). Deadlines are computed by one saturating
// helper (detail/deadline.hpp): a sum past the clock's range means "never", never "now".
//
// Inline tests run on a ManualClock that starts at 1 s, so that `now + max - 1 ns` passes the
// clock's range (it would not from 0); the end of the range itself is pinned separately. The
// threaded tests (shutdown grace, block_timeout, drain, pause_and_wait, wait_for, the lease
// sweep) wait on latches and on the engine's own state, bounded by a watchdog; no sleep decides
// an outcome. UBSan (the asan preset in CI) reports any signed overflow left on these paths.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "rail/detail/deadline.hpp"
#include "rail/rail.hpp"
#include "support/eventually.hpp"
#include "support/watchdog.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;
using test::eventually;

constexpr Duration kMax = Duration::max();
constexpr Duration kMaxMinus1 = Duration::max() - 1ns;
constexpr TimePoint kStart{1s};
// Far enough that every finite deadline computed from kStart has passed, short of the range's end.
constexpr Duration kAges = std::chrono::hours(24 * 365 * 100);

struct Edge {
  const char* name;
  Duration d;
  bool never;  // from kStart, now + d saturates to "never"
};
const Edge kEdges[] = {{"zero", 0ns, false},
                       {"one_ns", 1ns, false},
                       {"max_minus_1ns", kMaxMinus1, true},
                       {"max", kMax, true}};
std::string edge_name(const ::testing::TestParamInfo<Edge>& info) {
  return info.param.name;
}

// --- the helper itself ------------------------------------------------------------------------

TEST(Deadline, SaturatingAddReturnsNeverPastTheRangeAndForMax) {
  using detail::kNever;
  using detail::saturating_add;
  EXPECT_EQ(saturating_add(5, 0ns), 5);
  EXPECT_EQ(saturating_add(5, 1ns), 6);
  EXPECT_EQ(saturating_add(0, kMaxMinus1), kNever - 1);  // reachable: not "never"
  EXPECT_EQ(saturating_add(1, kMaxMinus1), kNever);
  EXPECT_EQ(saturating_add(2, kMaxMinus1), kNever);
  EXPECT_EQ(saturating_add(0, kMax), kNever);
  EXPECT_EQ(saturating_add(-5, kMax), kNever);  // max means never whatever now is
  EXPECT_EQ(saturating_add(kNever - 1, 1ns), kNever);
  EXPECT_EQ(saturating_add(std::numeric_limits<std::int64_t>::min(), -1ns),
            std::numeric_limits<std::int64_t>::min());
}

TEST(Deadline, SteadyDeadlineOfMaxIsTheEndOfTheSteadyClock) {
  using Steady = std::chrono::steady_clock;
  EXPECT_EQ(detail::steady_deadline(kMax), Steady::time_point::max());
  EXPECT_EQ(detail::steady_deadline(kMaxMinus1), Steady::time_point::max());
  const auto before = Steady::now();
  const auto d = detail::steady_deadline(1s);
  EXPECT_GE(d, before + 1s);
  EXPECT_LE(d, Steady::now() + 1s);
}

TEST(Deadline, TimerWaitIsBoundedForDeadlinesAtTheEndOfTheRange) {
  using detail::kMaxTimerSleepNs;
  EXPECT_EQ(detail::timer_wait_ns(100, 40), 60);
  EXPECT_EQ(detail::timer_wait_ns(detail::kNever, 0), kMaxTimerSleepNs);
  EXPECT_EQ(detail::timer_wait_ns(detail::kNever, std::numeric_limits<std::int64_t>::min()),
            kMaxTimerSleepNs);
  EXPECT_LE(detail::timer_wait_ns(0, 10), 0);
}

TEST(Deadline, ManualClockAdvanceStopsAtTheEndOfTheRange) {
  ManualClock clock(kStart);
  clock.advance(kMax);
  EXPECT_EQ(clock.now(), TimePoint::max());
  clock.advance(1ns);
  EXPECT_EQ(clock.now(), TimePoint::max());
}

TEST(Deadline, ExponentialBackoffSaturatesAtMaxAndNeverWraps) {
  const Backoff b = Backoff::exponential(1h);
  SplitMix64 rng(1);
  Duration previous{0};
  for (std::uint32_t n = 1; n <= 100; ++n) {
    const Duration d = next_delay(b, RetryContext{1, n, "e", previous}, nullptr, rng);
    EXPECT_GE(d, previous) << "attempt " << n;  // a wrap would make it small or negative
    if (n >= 23) {
      EXPECT_EQ(d, kMax) << "attempt " << n;  // 1 h * 2^22 passes INT64_MAX ns
    }
    previous = d;
  }
}

// Jitter and cap at the edges: every kind of backoff, jittered every way and capped at each edge,
// gives a delay in [0, max] for the first and the 100th attempt (UBSan checks the arithmetic).
TEST(Deadline, JitterAndCapAtTheEdgesStayInRange) {
  SplitMix64 rng(7);
  for (const Edge& delay : kEdges)
    for (const Edge& cap : kEdges)
      for (const Jitter j : {Jitter::none, Jitter::full, Jitter::equal, Jitter::decorrelated}) {
        if (j == Jitter::decorrelated && delay.d == 0ns) continue;  // refused by validation
        for (const Backoff b : {Backoff::fixed(delay.d), Backoff::exponential(delay.d)}) {
          const Backoff jittered = b.with_jitter(j).capped_at(cap.d);
          Duration previous{0};
          for (const std::uint32_t n : {1u, 2u, 100u}) {
            const Duration d =
                next_delay(jittered, RetryContext{1, n, "e", previous}, nullptr, rng);
            EXPECT_GE(d, 0ns) << delay.name << " capped at " << cap.name << ", attempt " << n;
            EXPECT_LE(d, std::max(cap.d, delay.d)) << delay.name << " capped at " << cap.name;
            previous = d;
          }
        }
      }
}

// --- inline mode: the job-level durations --------------------------------------------------------

struct InlineEdge : ::testing::TestWithParam<Edge> {
  ManualClock clock{kStart};
  Engine engine{EngineOptions{.clock = &clock, .mode = Mode::inlined}};
  std::vector<std::uint32_t> starts;  // attempt numbers, in start order

  // advance_past(): moves the clock past every finite deadline computed from kStart.
  void advance_past() {
    clock.advance(1ns);
    engine.run_until_idle();
    clock.advance(kAges);
    engine.run_until_idle();
  }
};

INSTANTIATE_TEST_SUITE_P(Edges, InlineEdge, ::testing::ValuesIn(kEdges), edge_name);

// A delayed job due never stays delayed (counted, visible to state(), cancellable), has no timer
// for next_timer_in() to chase, and never runs.
TEST_P(InlineEdge, JobDelayRunsAtItsDeadlineOrStaysDelayedForever) {
  const Edge e = GetParam();
  auto q = engine.declare_queue<int>("q", {.capacity = 1});
  q.process({}, [&](Job<int>& job) { starts.push_back(job.attempt()); });
  const JobId id = q.add("j", 1, {.delay = e.d}).id;
  engine.run_until_idle();
  EXPECT_EQ(starts.size(), e.d == 0ns ? 1u : 0u);
  advance_past();
  if (!e.never) {
    EXPECT_EQ(starts.size(), 1u);
    EXPECT_EQ(q.state(id).status, JobStatus::completed);
    return;
  }
  EXPECT_TRUE(starts.empty());
  EXPECT_EQ(q.counts().delayed, 1u);
  EXPECT_EQ(q.state(id).status, JobStatus::delayed);
  EXPECT_EQ(q.state(id).since, TimePoint::max());
  EXPECT_EQ(engine.next_timer_in(), std::nullopt);
  EXPECT_TRUE(q.cancel(id));
  EXPECT_EQ(q.state(id).status, JobStatus::cancelled);
  EXPECT_EQ(q.counts().delayed, 0u);
  // The slot came back: a capacity-1 queue would otherwise be full now.
  EXPECT_EQ(q.add("again", 2).status, AddStatus::added);
}

TEST_P(InlineEdge, RetryAfterWaitsItsDelayOrForeverWithoutDeadLettering) {
  const Edge e = GetParam();
  auto q = engine.declare_queue<int>("q", {});
  q.process({}, [&](Job<int>& job) {
    starts.push_back(job.attempt());
    return job.attempt() == 1 ? Outcome::retry_in(e.d, "429") : Outcome::done();
  });
  const JobId id = q.add("j", 1, {.max_attempts = 3}).id;
  engine.run_until_idle();
  EXPECT_EQ(starts.size(), e.d == 0ns ? 2u : 1u);
  advance_past();
  EXPECT_EQ(q.counts().dead_lettered, 0u);
  if (!e.never) {
    EXPECT_EQ(starts, (std::vector<std::uint32_t>{1, 2}));
    EXPECT_EQ(q.state(id).status, JobStatus::completed);
    return;
  }
  EXPECT_EQ(starts, std::vector<std::uint32_t>{1});
  EXPECT_EQ(q.state(id).status, JobStatus::delayed);
  EXPECT_EQ(q.state(id).failed_attempts, 1u);
  EXPECT_TRUE(q.cancel(id));
  EXPECT_EQ(q.counts().cancelled, 1u);
}

TEST_P(InlineEdge, FixedBackoffWaitsItsDelayOrForeverWithoutBurningAttempts) {
  const Edge e = GetParam();
  auto q = engine.declare_queue<int>("q", {});
  q.process({}, [&](Job<int>& job) {
    starts.push_back(job.attempt());
    return Outcome::retry("down");
  });
  const JobId id = q.add("j", 1, {.max_attempts = 3, .backoff = Backoff::fixed(e.d)}).id;
  engine.run_until_idle();
  advance_past();
  if (!e.never) {
    EXPECT_EQ(starts, (std::vector<std::uint32_t>{1, 2, 3}));
    EXPECT_EQ(q.state(id).status, JobStatus::dead_lettered);
    return;
  }
  EXPECT_EQ(starts, std::vector<std::uint32_t>{1});
  EXPECT_EQ(q.counts().dead_lettered, 0u);
  EXPECT_EQ(q.state(id).status, JobStatus::delayed);
}

TEST_P(InlineEdge, DedupTtlHoldsTheIdForItsWindowOrForever) {
  const Edge e = GetParam();
  auto q = engine.declare_queue<int>("q", {});
  JobOptions o{.dedup = {.id = "k", .ttl = e.d}};
  if (e.d == 0ns) {  // a zero window is refused with a message, not silently ignored
    EXPECT_THROW((void)q.add("j", 1, o), Error);
    return;
  }
  const JobId first = q.add("j", 1, o).id;
  advance_past();
  const AddReceipt again = q.add("j", 2, o);
  if (e.never) {
    EXPECT_EQ(again.status, AddStatus::duplicate);
    EXPECT_EQ(again.id, first);
  } else {
    EXPECT_EQ(again.status, AddStatus::added);
    EXPECT_NE(again.id, first);
  }
}

TEST_P(InlineEdge, DlqRetentionEvictsAfterItsWindowOrNever) {
  const Edge e = GetParam();
  QueueOptions qo;
  qo.dlq.retention = e.d;
  if (e.d == 0ns) {
    EXPECT_THROW((void)engine.declare_queue<int>("q", qo), Error);
    return;
  }
  auto q = engine.declare_queue<int>("q", qo);
  q.process({}, [](Job<int>&) { return Outcome::fail("bad"); });
  (void)q.add("j", 1);
  engine.run_until_idle();
  advance_past();
  EXPECT_EQ(q.dlq().size(), e.never ? 1u : 0u);
}

// A lease reaching past the clock's range never lapses, however far the clock moves inside the
// handler; a 1 ns lease lapses at the first move. Duration::max() disables leases outright.
TEST_P(InlineEdge, VisibilityTimeoutLapsesAfterItsLengthOrNever) {
  const Edge e = GetParam();
  QueueOptions qo;
  qo.visibility_timeout = e.d;
  if (e.d == 0ns) {
    EXPECT_THROW((void)engine.declare_queue<int>("q", qo), Error);
    return;
  }
  auto q = engine.declare_queue<int>("q", qo);
  q.process({}, [&](Job<int>& job) {
    starts.push_back(job.attempt());
    if (job.deliveries() == 1) clock.advance(kAges);  // the sweep runs on this advance
    return Outcome::done();
  });
  const JobId id = q.add("j", 1, {.max_attempts = 2}).id;
  engine.run_until_idle();
  if (e.never) {
    EXPECT_EQ(q.counts().stalled, 0u);
    EXPECT_EQ(starts.size(), 1u);
    EXPECT_EQ(q.state(id).status, JobStatus::completed);
  } else {
    EXPECT_EQ(q.counts().stalled, 1u);
    EXPECT_EQ(q.counts().late_outcomes, 1u);
    EXPECT_EQ(starts.size(), 2u);  // redelivered, and completed by the second delivery
  }
}

TEST_P(InlineEdge, ExtendLeaseByAnyDurationSaturates) {
  const Edge e = GetParam();
  QueueOptions qo;
  qo.visibility_timeout = 1s;
  auto q = engine.declare_queue<int>("q", qo);
  bool extended = false;
  q.process({}, [&](Job<int>& job) {
    starts.push_back(job.attempt());
    if (job.deliveries() == 1) {
      extended = job.extend_lease(e.d);
      clock.advance(kAges);
    }
    return Outcome::done();
  });
  (void)q.add("j", 1, {.max_attempts = 2});
  engine.run_until_idle();
  EXPECT_TRUE(extended);
  EXPECT_EQ(q.counts().stalled, e.never ? 0u : 1u);
}

// --- the end of the clock's range ----------------------------------------------------------------

// From time 0, max - 1 ns is a real deadline (INT64_MAX - 1 ns): it fires exactly there.
// A schedule's interval: 0 is refused; 1 ns is due at every nanosecond (a late timer runs once
// and counts the rest as skipped); an interval past the clock's range is never due: no timer, no
// run, next_run empty.
TEST_P(InlineEdge, ScheduleIntervalIsDueEachIntervalOrNever) {
  const Edge e = GetParam();
  auto q = engine.declare_queue<int>("q", {});
  q.process({}, [&](Job<int>& job) { starts.push_back(job.attempt()); });
  if (e.d == 0ns) {
    EXPECT_THROW((void)q.every("s", e.d, "tick", 1), Error);
    return;
  }
  const ScheduleInfo declared = q.every("s", e.d, "tick", 1);
  EXPECT_EQ(declared.next_run.has_value(), !e.never);
  advance_past();
  const ScheduleInfo i = *q.schedule_info("s");
  if (e.never) {
    EXPECT_TRUE(starts.empty());
    EXPECT_EQ(engine.next_timer_in(), std::nullopt);
    EXPECT_EQ(i.runs, 0u);
    return;
  }
  EXPECT_EQ(starts.size(), 2u) << "one run per timer pass: at 1 ns, then once for the ages";
  EXPECT_EQ(i.skipped, static_cast<std::uint64_t>(kAges.count()) - 1);
  EXPECT_EQ(i.next_run, clock.now() + 1ns);
}

// keep_ended.max_age: 0 is refused; 1 ns drops a retained end once the next end is recorded after
// it; past the range, ends stay until the counts push them out.
TEST_P(InlineEdge, ResultsMaxAgeDropsRetainedEndsAfterItOrNever) {
  const Edge e = GetParam();
  QueueOptions qo;
  qo.keep_ended.keep_completed = 10;
  qo.keep_ended.max_age = e.d;
  if (e.d == 0ns) {
    EXPECT_THROW((void)engine.declare_queue<int>("q", qo), Error);
    return;
  }
  auto q = engine.declare_queue<int>("q", qo);
  q.process({}, [](Job<int>&) {});
  const JobId first = q.add("j", 1).id;
  engine.run_until_idle();
  ASSERT_TRUE(q.end_of(first).has_value());
  advance_past();
  (void)q.add("j", 2);  // an end recorded after the first one aged
  engine.run_until_idle();
  EXPECT_EQ(q.end_of(first).has_value(), e.never);
}

// progress_interval: 0 lets every report through as an event; any other interval lets the first
// through and holds the rest back while the clock stands still.
TEST_P(InlineEdge, ProgressIntervalRaisesAnEventPerReportOrOnlyTheFirst) {
  const Edge e = GetParam();
  int events = 0;
  engine.on_event([&](const Event& ev) { events += ev.kind == EventKind::progress; });
  auto q = engine.declare_queue<int>("q", QueueOptions{.progress_interval = e.d});
  q.process({}, [](Job<int>& job) {
    for (int i = 1; i <= 3; ++i)
      (void)job.progress(i);
  });
  (void)q.add("j", 1);
  engine.run_until_idle();
  EXPECT_EQ(events, e.d == 0ns ? 3 : 1);
}

// change_delay(d): 0 promotes; 1 ns makes it due a nanosecond on; past the range parks the job
// (delayed, no timer) until it is promoted.
TEST_P(InlineEdge, ChangeDelayMovesTheDueTimeOrParksTheJob) {
  const Edge e = GetParam();
  auto q = engine.declare_queue<int>("q", {});
  q.process({}, [&](Job<int>& job) { starts.push_back(job.attempt()); });
  const JobId id = q.add("j", 1, {.delay = 1h}).id;
  ASSERT_TRUE(q.change_delay(id, e.d));
  engine.run_until_idle();
  EXPECT_EQ(starts.size(), e.d == 0ns ? 1u : 0u);
  advance_past();
  if (!e.never) {
    EXPECT_EQ(starts.size(), 1u);
    return;
  }
  EXPECT_TRUE(starts.empty());
  EXPECT_EQ(q.state(id).status, JobStatus::delayed);
  EXPECT_EQ(engine.next_timer_in(), std::nullopt);
  EXPECT_TRUE(q.promote(id));
  engine.run_until_idle();
  EXPECT_EQ(starts.size(), 1u);
}

// EngineOptions.timer_tick: every edge (0, 1 ns, max - 1 ns, max) is outside 10 us .. 1 s and
// refused, naming the range.
TEST_P(InlineEdge, TimerTickAtTheEdgesIsRefusedNamingTheRange) {
  const Edge e = GetParam();
  try {
    Engine refused(EngineOptions{.clock = &clock, .mode = Mode::inlined, .timer_tick = e.d});
    ADD_FAILURE() << "a timer_tick of " << e.d.count() << " ns was accepted";
  } catch (const Error& x) {
    EXPECT_EQ(x.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(x.what()).find("expected 10 us .. 1 s"), std::string::npos) << x.what();
  }
}

// Within the range, the tick only sizes the wheel's buckets: a delayed job fires exactly at its
// due time whatever the tick.
TEST(TimeEdges, TimerTickOfAnyWidthInItsRangeFiresExactlyAtTheDueTime) {
  for (const Duration tick : {Duration{std::chrono::microseconds(10)}, Duration{1ms},
                              Duration{std::chrono::microseconds(12'345)}, Duration{1s}}) {
    ManualClock clock;
    Engine ticked(EngineOptions{.clock = &clock, .mode = Mode::inlined, .timer_tick = tick});
    auto q = ticked.declare_queue<int>("q", {});
    int starts = 0;
    q.process({}, [&](Job<int>&) { ++starts; });
    (void)q.add("j", 1, {.delay = 5s + 7ns});
    clock.advance(5s + 6ns);
    ticked.run_until_idle();
    EXPECT_EQ(starts, 0) << "tick " << tick.count() << " ns";
    clock.advance(1ns);
    ticked.run_until_idle();
    EXPECT_EQ(starts, 1) << "tick " << tick.count() << " ns";
  }
}

TEST(TimeEdges, DelayReachingTheLastNanosecondOfTheRangeFiresExactlyThere) {
  ManualClock clock;
  Engine engine({.clock = &clock, .mode = Mode::inlined});
  auto q = engine.declare_queue<int>("q", {});
  std::vector<TimePoint> starts;
  q.process({}, [&](Job<int>& job) { starts.push_back(job.started_at()); });
  (void)q.add("j", 1, {.delay = kMaxMinus1});
  clock.set(TimePoint::max() - 2ns);
  engine.run_until_idle();
  EXPECT_TRUE(starts.empty());
  clock.advance(1ns);
  engine.run_until_idle();
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[0], TimePoint::max() - 1ns);
}

// Exponential backoff from 1 h with 100 attempts: each retry waits its full delay until the
// sum passes the clock's range; from then on the job waits forever instead of retrying at once.
TEST(TimeEdges, ExponentialBackoffRetriesOnScheduleThenWaitsForeverInsteadOfAtOnce) {
  ManualClock clock(kStart);
  Engine engine({.clock = &clock, .mode = Mode::inlined});
  auto q = engine.declare_queue<int>("q", {});
  std::vector<TimePoint> starts;
  q.process({}, [&](Job<int>& job) {
    starts.push_back(job.started_at());
    return Outcome::retry("down");
  });
  const JobId id = q.add("j", 1, {.max_attempts = 100, .backoff = Backoff::exponential(1h)}).id;
  engine.run_until_idle();
  while (auto next = engine.next_timer_in()) {
    clock.advance(*next);
    engine.run_until_idle();
  }
  // Attempt n+1 starts 1 h * 2^(n-1) after attempt n while that stays inside the range.
  ASSERT_GE(starts.size(), 2u);
  for (std::size_t n = 1; n < starts.size(); ++n)
    EXPECT_EQ(starts[n] - starts[n - 1], Duration{1h} * (std::int64_t{1} << (n - 1))) << n;
  EXPECT_EQ(starts.size(), 22u);  // start + 1 h * (2^21 - 1), then a 2^21 h wait passes the range
  EXPECT_EQ(q.state(id).status, JobStatus::delayed);
  EXPECT_EQ(q.state(id).since, TimePoint::max());
  EXPECT_EQ(q.counts().dead_lettered, 0u);
}

// A debounce whose new delay is "never" moves a linked timer to never: it parks when it fires.
TEST(TimeEdges, DebounceToANeverDelayParksTheKeptJob) {
  ManualClock clock(kStart);
  Engine engine({.clock = &clock, .mode = Mode::inlined});
  auto q = engine.declare_queue<int>("q", {});
  int ran = 0;
  q.process({}, [&](Job<int>&) { ++ran; });
  JobOptions o{.delay = 1s, .dedup = {.id = "k", .ttl = 1h, .mode = DedupMode::debounce}};
  const JobId id = q.add("j", 1, o).id;
  o.delay = kMax;
  EXPECT_EQ(q.add("j", 2, o).status, AddStatus::debounced);
  clock.advance(2s);  // the original timer fires, sees the new due time and parks
  engine.run_until_idle();
  clock.advance(kAges);
  engine.run_until_idle();
  EXPECT_EQ(ran, 0);
  EXPECT_EQ(q.state(id).status, JobStatus::delayed);
  EXPECT_EQ(engine.next_timer_in(), std::nullopt);
  EXPECT_TRUE(q.cancel(id));
}

TEST(TimeEdges, TakeLeftoversHandsBackAJobDelayedForever) {
  ManualClock clock(kStart);
  Engine engine({.clock = &clock, .mode = Mode::inlined});
  auto q = engine.declare_queue<int>("q", {.capacity = 1});
  const JobId id = q.add("j", 7, {.delay = kMax}).id;
  engine.run_until_idle();  // links (parks) it
  const ShutdownReport report = engine.shutdown(0ns);
  ASSERT_EQ(report.not_started.size(), 1u);
  EXPECT_EQ(report.not_started[0].id, id);
  auto left = q.take_leftovers();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].data, 7);
  EXPECT_TRUE(left[0].was_delayed);
}

// --- threaded mode
// ---------------------------------------------------------------------------------

struct ThreadedEdge : ::testing::TestWithParam<Edge> {};
INSTANTIATE_TEST_SUITE_P(Edges, ThreadedEdge, ::testing::ValuesIn(kEdges), edge_name);

// shutdown(grace) with grace 0 or 1 ns reports the running handler; with max - 1 ns or max it
// waits for it. The handler returns only after shutdown began (its own add is refused).
TEST_P(ThreadedEdge, ShutdownGraceReportsOrWaitsForTheRunningHandler) {
  const Edge e = GetParam();
  test::Watchdog watchdog(60s, "ShutdownGraceReportsOrWaitsForTheRunningHandler");
  std::latch started(1);
  std::latch release(1);
  std::atomic<bool> returned{false};
  Engine engine;
  auto q = engine.declare_queue<int>("q", {});
  q.process({}, [&](Job<int>& job) {
    if (job.data() != 1) return;
    started.count_down();
    if (e.never) {
      // Wait for shutdown to begin: from then on adds answer shutting_down.
      while (q.add("probe", 2).status != AddStatus::shutting_down)
        std::this_thread::sleep_for(1ms);
    } else {
      release.wait();
    }
    returned = true;
  });
  const JobId id = q.add("j", 1).id;
  started.wait();
  const ShutdownReport report = engine.shutdown(e.d);
  if (e.never) {
    EXPECT_TRUE(returned.load());
    EXPECT_TRUE(report.still_running.empty());
  } else {
    ASSERT_EQ(report.still_running.size(), 1u);
    EXPECT_EQ(report.still_running[0].id, id);
    release.count_down();
  }
}

// drain(timeout), pause_and_wait(timeout) and a handle's wait_for(timeout): 0 and 1 ns give up
// while a handler runs; max - 1 ns and max wait until it returned.
TEST_P(ThreadedEdge, WaitsGiveUpOrWaitForTheRunningHandler) {
  const Edge e = GetParam();
  test::Watchdog watchdog(60s, "WaitsGiveUpOrWaitForTheRunningHandler");
  for (const std::string wait : {"drain", "pause_and_wait", "wait_for"}) {
    std::latch started(1);
    std::latch release(1);
    Engine engine;
    auto q = engine.declare_queue<int>("q", {});
    q.process({}, [&](Job<int>&) {
      started.count_down();
      release.wait();
    });
    JobHandle<void> h = q.add_tracked("j", 1);
    started.wait();
    auto waiting = std::async(std::launch::async, [&] {
      if (wait == "drain") return q.wait_idle(e.d);
      if (wait == "pause_and_wait") return q.pause_and_wait(e.d);
      return h.wait_for(e.d).has_value();
    });
    if (!e.never) {
      EXPECT_FALSE(waiting.get()) << wait;
      release.count_down();
      continue;
    }
    EXPECT_EQ(waiting.wait_for(0s), std::future_status::timeout) << wait;
    release.count_down();
    EXPECT_TRUE(waiting.get()) << wait;
  }
}

// block_timeout 0 or 1 ns: a full queue answers full; max - 1 ns or max: the add waits until the
// running job frees its slot.
TEST_P(ThreadedEdge, BlockTimeoutAnswersFullOrWaitsForRoom) {
  const Edge e = GetParam();
  test::Watchdog watchdog(60s, "BlockTimeoutAnswersFullOrWaitsForRoom");
  std::latch started(1);
  std::latch release(1);
  Engine engine;
  auto q = engine.declare_queue<int>(
      "q", {.capacity = 1, .on_full = OnFull::block, .block_timeout = e.d});
  q.process({}, [&](Job<int>& job) {
    if (job.data() == 1) {
      started.count_down();
      release.wait();
    }
  });
  (void)q.add("j", 1);
  started.wait();
  if (!e.never) {
    EXPECT_EQ(q.add("j", 2).status, AddStatus::full);
    release.count_down();
    return;
  }
  auto blocked = std::async(std::launch::async, [&] { return q.add("j", 2).status; });
  // The add cannot succeed before the release: the one slot is held by the running job.
  EXPECT_EQ(blocked.wait_for(0s), std::future_status::timeout);
  release.count_down();
  EXPECT_EQ(blocked.get(), AddStatus::added);
  EXPECT_TRUE(q.wait_idle());
}

// A visibility timeout past the clock's range: the lease sweep is not armed at a wrapped time
// (which made the timer thread spin and the destructor hang); the handler's outcome counts.
TEST_P(ThreadedEdge, VisibilityTimeoutNeverSpinsTheTimerThread) {
  const Edge e = GetParam();
  if (e.d == 0ns) GTEST_SKIP() << "a zero lease is refused (InlineEdge pins the error)";
  test::Watchdog watchdog(60s, "VisibilityTimeoutNeverSpinsTheTimerThread");
  std::atomic<int> done{0};
  {
    Engine engine;
    QueueOptions qo;
    qo.visibility_timeout = e.d;
    auto q = engine.declare_queue<int>("q", qo);
    q.process({.concurrency = 2}, [&](Job<int>& job) {
      if (!job.cancelled()) done.fetch_add(1);
      return Outcome::done();
    });
    for (int i = 0; i < 100; ++i)
      (void)q.add("j", i, {.max_attempts = 1000});
    // A 1 ns lease may lapse before its handler returns: such a job is redelivered, or after
    // 1,000 lapses dead-lettered; either way each job ends.
    ASSERT_TRUE(eventually([&] { return q.counts().completed + q.counts().dead_lettered == 100; }));
    if (e.never) {
      EXPECT_EQ(q.counts().stalled, 0u);
      EXPECT_EQ(done.load(), 100);
    }
  }  // the destructor returns (a spinning timer thread never let it)
}

TEST_P(ThreadedEdge, DelayedJobDueNeverLeavesTheTimerThreadAsleepAndIsCancellable) {
  const Edge e = GetParam();
  test::Watchdog watchdog(60s, "DelayedJobDueNeverLeavesTheTimerThreadAsleepAndIsCancellable");
  ManualClock clock(kStart);
  Engine engine({.clock = &clock});
  QueueOptions qo;
  qo.visibility_timeout = kMax;  // no lease sweep on the wheel: next_timer_in() sees the job only
  auto q = engine.declare_queue<int>("q", qo);
  std::atomic<int> ran{0};
  q.process({}, [&](Job<int>&) { ran.fetch_add(1); });
  const JobId id = q.add("j", 1, {.delay = e.d}).id;
  clock.advance(kAges);
  if (!e.never) {
    ASSERT_TRUE(eventually([&] { return q.state(id).status == JobStatus::completed; }));
    return;
  }
  ASSERT_TRUE(eventually([&] { return !engine.next_timer_in().has_value(); }));
  EXPECT_EQ(q.state(id).status, JobStatus::delayed);
  EXPECT_TRUE(q.cancel(id));
  EXPECT_TRUE(q.wait_idle(kMax));
  EXPECT_EQ(ran.load(), 0);
}

TEST(NextTimerIn, IsTheExactTimeToTheEarliestTimerSoOneAdvanceRunsEachDelayedJob) {
  // Delays on every level of the wheel and past it: each answer is the time to the next due job
  // (not a cascade step), so one advance by it and run_until_idle() run exactly that job.
  ManualClock clock;
  Engine engine({.clock = &clock, .mode = Mode::inlined});
  auto q = engine.declare_queue<int>("q", {});
  std::vector<int> ran;
  q.process({}, [&](Job<int>& j) { ran.push_back(j.data()); });
  const std::vector<Duration> delays = {7ns, 300ms, 1h + 3ms, 58 * 24h, 400 * 24h};
  for (std::size_t i = 0; i < delays.size(); ++i)
    (void)q.add("later", static_cast<int>(i), JobOptions{.delay = delays[i]});
  const TimePoint start = clock.now();
  for (std::size_t i = 0; i < delays.size(); ++i) {
    const std::optional<Duration> next = engine.next_timer_in();
    ASSERT_TRUE(next.has_value());
    EXPECT_EQ(start + delays[i] - clock.now(), *next) << "job " << i;
    clock.advance(*next);
    engine.run_until_idle();
    ASSERT_EQ(ran.size(), i + 1) << "one advance by next_timer_in() runs job " << i;
    EXPECT_EQ(ran.back(), static_cast<int>(i));
  }
  EXPECT_FALSE(engine.next_timer_in().has_value());
}

}  // namespace
}  // namespace rail
