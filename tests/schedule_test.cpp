// Repeatable jobs (schedule.hpp): every rule under the manual clock — due times of every() and of
// UTC cron across month ends, upsert by id, removal, overlap, and what becomes of missed runs.
// Inline engines run a schedule's jobs only inside run_until_idle, so a test decides exactly
// which runs are live (added and not ended) when a due time comes.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "rail/rail.hpp"
#include "support/eventually.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;
using std::chrono::sys_days;
using namespace std::chrono;

/// utc(ymd, time): a civil time, for a ManualClock's start and the expected due times.
WallTime utc(year_month_day ymd, Duration time_of_day = 0s) {
  return WallTime{sys_days{ymd}.time_since_epoch() + time_of_day};
}

/// text(t): "2026-02-01 00:00" (UTC), to compare due times readably.
std::string text(WallTime t) {
  const auto day = floor<days>(t);
  const year_month_day ymd{day};
  const hh_mm_ss hms{floor<minutes>(t - day)};
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04d-%02u-%02u %02d:%02d", static_cast<int>(ymd.year()),
                static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()),
                static_cast<int>(hms.hours().count()), static_cast<int>(hms.minutes().count()));
  return buf;
}

/// Schedules: an inline engine on a manual clock whose civil time starts at `start`, a queue of
/// strings whose handler records each run (its payload and the civil time it started at).
struct Schedules : ::testing::Test {
  static constexpr auto kStart = 2026y / January / 31;
  ManualClock clock{TimePoint{}, utc(kStart, 23h + 50min)};
  Engine engine{EngineOptions{.clock = &clock, .mode = Mode::inlined}};
  Queue<std::string> q = engine.declare_queue<std::string>("jobs", QueueOptions{.capacity = 64});
  std::vector<std::string> ran;     // payloads, in start order
  std::vector<std::string> ran_at;  // civil start times
  void SetUp() override {
    q.process({}, [this](Job<std::string>& j) {
      ran.push_back(j.data());
      ran_at.push_back(text(clock.wall_now()));
    });
  }
  /// step(d): time moves by d, then every ready job runs.
  void step(Duration d) {
    clock.advance(d);
    engine.run_until_idle();
  }
  [[nodiscard]] ScheduleInfo info(std::string_view id) const {
    auto i = q.schedule_info(id);
    if (!i) throw std::runtime_error("no schedule " + std::string(id));
    return *i;
  }
  /// due_in(id): how long after now schedule `id` is due next.
  [[nodiscard]] Duration due_in(std::string_view id) const {
    return *info(id).next_run - clock.now();
  }
};

TEST_F(Schedules, EveryAddsOneJobPerIntervalFromItsDeclaration) {
  const ScheduleInfo declared = q.every("cleanup", 5min, "cleanup", "sweep");
  EXPECT_EQ(declared.id, "cleanup");
  EXPECT_EQ(declared.when, "every 5m");
  EXPECT_EQ(declared.next_run, clock.now() + 5min);
  step(5min - 1ns);
  EXPECT_TRUE(ran.empty()) << "not due before its interval";
  step(1ns);
  EXPECT_EQ(ran, std::vector<std::string>{"sweep"});
  step(5min);
  step(5min);
  EXPECT_EQ(ran.size(), 3u);
  const ScheduleInfo i = info("cleanup");
  EXPECT_EQ(i.runs, 3u);
  EXPECT_EQ(i.skipped, 0u);
  EXPECT_EQ(i.live, 0u);
  EXPECT_EQ(i.next_run, clock.now() + 5min);
  EXPECT_EQ(q.state(i.last_job).status, JobStatus::completed) << "each run is an ordinary job";
}

TEST_F(Schedules, NextTimerInReportsTheScheduleSoAReplayStepsToEachRun) {
  // next_timer_in() is exact: each step by it reaches the next due time, and runs it.
  (void)q.every("tick", 90s, "tick", "t");
  for (std::size_t i = 1; i <= 4; ++i) {
    ASSERT_TRUE(engine.next_timer_in().has_value());
    ASSERT_EQ(*engine.next_timer_in(), due_in("tick"));
    step(*engine.next_timer_in());
    ASSERT_EQ(ran.size(), i) << "one step, one run";
  }
  EXPECT_EQ(clock.now(), TimePoint{} + 4 * 90s) << "the replay reached each due time exactly";
}

TEST_F(Schedules, CronRunsAtTheMinutesItNamesInUtcAcrossTheMonthEnd) {
  // 2026-01-31 23:50 UTC; at 00:00 every day.
  const ScheduleInfo i = q.cron("nightly", "0 0 * * *", "report", "r");
  EXPECT_EQ(i.when, "cron '0 0 * * *' UTC");
  EXPECT_EQ(due_in("nightly"), 10min);
  for (int d = 0; d < 3; ++d)
    step(due_in("nightly"));
  EXPECT_EQ(ran_at,
            (std::vector<std::string>{"2026-02-01 00:00", "2026-02-02 00:00", "2026-02-03 00:00"}));
}

TEST_F(Schedules, CronOnTheThirtyFirstSkipsMonthsWithoutOne) {
  (void)q.cron("month-end", "30 6 31 * *", "close-books", "c");
  for (int n = 0; n < 5; ++n)
    step(due_in("month-end"));
  EXPECT_EQ(ran_at,
            (std::vector<std::string>{"2026-03-31 06:30", "2026-05-31 06:30", "2026-07-31 06:30",
                                      "2026-08-31 06:30", "2026-10-31 06:30"}));
}

TEST_F(Schedules, CronOnFebruaryTheTwentyNinthWaitsForALeapYear) {
  (void)q.cron("leap", "0 12 29 2 *", "leap-day", "l");
  EXPECT_EQ(text(clock.wall_now() + due_in("leap")), "2028-02-29 12:00");
  step(due_in("leap"));
  step(due_in("leap"));
  EXPECT_EQ(ran_at, (std::vector<std::string>{"2028-02-29 12:00", "2032-02-29 12:00"}));
}

TEST_F(Schedules, CronMonthlyRunsOnTheFirstOfEachMonthThroughTheYearEnd) {
  (void)q.cron("monthly", "@monthly", "invoice", "i");
  for (int n = 0; n < 13; ++n)
    step(due_in("monthly"));
  ASSERT_EQ(ran_at.size(), 13u);
  EXPECT_EQ(ran_at.front(), "2026-02-01 00:00");
  EXPECT_EQ(ran_at[10], "2026-12-01 00:00");
  EXPECT_EQ(ran_at[11], "2027-01-01 00:00");
  EXPECT_EQ(ran_at[12], "2027-02-01 00:00");
}

TEST_F(Schedules, UpsertByIdReplacesTheDefinitionAndNeverDoublesIt) {
  (void)q.every("s", 1min, "job", "old");
  step(30s);
  (void)q.every("s", 1min, "job", "new");  // same `when`: the due time stays
  EXPECT_EQ(q.schedules().size(), 1u);
  EXPECT_EQ(due_in("s"), 30s);
  step(30s);
  EXPECT_EQ(ran, std::vector<std::string>{"new"}) << "one run, with the new payload";
  // A new `when` restarts the due times from now.
  (void)q.every("s", 3min, "job", "new");
  EXPECT_EQ(due_in("s"), 3min);
  step(1min);
  step(1min);
  EXPECT_EQ(ran.size(), 1u) << "the old 1-minute due times are gone";
  step(1min);
  EXPECT_EQ(ran.size(), 2u);
  EXPECT_EQ(info("s").when, "every 3m");
}

TEST_F(Schedules, UnscheduleStopsTheDueTimesAndLeavesNoTimer) {
  (void)q.every("s", 1min, "job", "x");
  step(1min);
  ASSERT_EQ(ran.size(), 1u);
  EXPECT_TRUE(q.unschedule("s"));
  EXPECT_FALSE(q.unschedule("s")) << "already gone";
  EXPECT_FALSE(q.schedule_info("s").has_value());
  EXPECT_FALSE(engine.next_timer_in().has_value()) << "its timer left the wheel";
  step(10min);
  EXPECT_EQ(ran.size(), 1u);
  // Declared again under the same id, it starts afresh.
  (void)q.every("s", 1min, "job", "y");
  step(1min);
  EXPECT_EQ(ran, (std::vector<std::string>{"x", "y"}));
}

TEST_F(Schedules, ARunThatIsStillLiveIsNotOverlappedByTheNextDueTime) {
  (void)q.every("s", 1min, "job", "x");
  clock.advance(1min);  // the first run is added; nothing runs it yet: it stays live
  EXPECT_EQ(q.counts().waiting, 1u);
  clock.advance(1min);
  clock.advance(1min);
  EXPECT_EQ(q.counts().waiting, 1u) << "no second run while the first is live";
  ScheduleInfo i = info("s");
  EXPECT_EQ(i.live, 1u);
  EXPECT_EQ(i.skipped, 2u);
  EXPECT_EQ(i.runs, 1u);
  engine.run_until_idle();
  EXPECT_EQ(ran.size(), 1u) << "skip: the missed due times are dropped";
  step(1min);
  EXPECT_EQ(ran.size(), 2u) << "the next due time after the run ended starts one";
}

TEST_F(Schedules, OverlapLetsRunsPileUp) {
  (void)q.every("s", 1min, "job", "x", ScheduleOptions{.overlap = true});
  for (int n = 0; n < 3; ++n)
    clock.advance(1min);
  EXPECT_EQ(q.counts().waiting, 3u);
  EXPECT_EQ(info("s").live, 3u);
  engine.run_until_idle();
  EXPECT_EQ(ran.size(), 3u);
  EXPECT_EQ(info("s").live, 0u);
}

TEST_F(Schedules, SkipRunsOnceForALateTimerAndCountsTheRest) {
  (void)q.every("s", 1min, "job", "x");
  step(10min + 30s);  // ten due times passed at once
  EXPECT_EQ(ran.size(), 1u);
  const ScheduleInfo i = info("s");
  EXPECT_EQ(i.skipped, 9u);
  EXPECT_EQ(due_in("s"), 30s) << "the grid stays: due at 11 min";
}

TEST_F(Schedules, CatchUpRunsEveryMissedDueTimeOneAfterAnother) {
  (void)q.every("s", 1min, "job", "x", ScheduleOptions{.missed = MissedRuns::catch_up});
  clock.advance(10min);
  EXPECT_EQ(q.counts().waiting, 1u) << "no overlap: one at a time";
  EXPECT_EQ(info("s").owed, 9u);
  engine.run_until_idle();  // each run's end starts the next owed one
  EXPECT_EQ(ran.size(), 10u);
  const ScheduleInfo i = info("s");
  EXPECT_EQ(i.owed, 0u);
  EXPECT_EQ(i.skipped, 0u);
  EXPECT_EQ(i.runs, 10u);
}

TEST_F(Schedules, CatchUpWithOverlapAddsEveryMissedRunAtOnce) {
  (void)q.every("s", 1min, "job", "x",
                ScheduleOptions{.missed = MissedRuns::catch_up, .overlap = true});
  clock.advance(10min);
  EXPECT_EQ(q.counts().waiting, 10u);
  engine.run_until_idle();
  EXPECT_EQ(ran.size(), 10u);
}

TEST_F(Schedules, CatchUpOwesAtMostMaxCatchUpAndSkipsTheOlderOnes) {
  (void)q.every("s", 1min, "job", "x",
                ScheduleOptions{.missed = MissedRuns::catch_up, .max_catch_up = 3});
  clock.advance(10min);
  ScheduleInfo i = info("s");
  EXPECT_EQ(i.owed, 3u);
  EXPECT_EQ(i.skipped, 6u);
  engine.run_until_idle();
  EXPECT_EQ(ran.size(), 4u);
}

TEST_F(Schedules, RunOnceMakesUpForAllMissedDueTimesWithOneRun) {
  (void)q.every("s", 1min, "job", "x", ScheduleOptions{.missed = MissedRuns::run_once});
  clock.advance(1min);  // run 1 added, kept live
  for (int n = 0; n < 4; ++n)
    clock.advance(1min);
  ScheduleInfo i = info("s");
  EXPECT_EQ(i.owed, 1u);
  EXPECT_EQ(i.skipped, 3u);
  engine.run_until_idle();  // run 1, then the owed one
  EXPECT_EQ(ran.size(), 2u);
  // A late timer with nothing live: one run for all of them.
  step(10min);
  EXPECT_EQ(ran.size(), 3u);
  EXPECT_EQ(info("s").skipped, 3u + 9u);
}

TEST_F(Schedules, RunNowAddsARunAtDeclarationThenFollowsTheSchedule) {
  (void)q.every("s", 1min, "job", "x", ScheduleOptions{.run_now = true});
  EXPECT_EQ(q.counts().waiting, 1u);
  engine.run_until_idle();
  EXPECT_EQ(ran.size(), 1u);
  EXPECT_EQ(due_in("s"), 1min);
  (void)q.every("s", 1min, "job", "x", ScheduleOptions{.run_now = true});
  EXPECT_EQ(q.counts().waiting, 0u) << "an unchanged re-declaration does not run again";
}

TEST_F(Schedules, RunsUseTheJobOptionsOfTheSchedule) {
  Queue<int> retrying = engine.declare_queue<int>("retrying", QueueOptions{});
  int calls = 0;
  retrying.process({}, [&](Job<int>& j) {
    ++calls;
    return j.attempt() == 1 ? Outcome::retry("first try fails") : Outcome::done();
  });
  (void)retrying.every("s", 1min, "flaky", 7,
                       ScheduleOptions{.job = {.max_attempts = 2, .backoff = Backoff::fixed(5s)}});
  step(1min);
  EXPECT_EQ(retrying.schedule_info("s")->live, 1u) << "backing off: still live";
  step(5s);
  EXPECT_EQ(calls, 2);
  const ScheduleInfo i = *retrying.schedule_info("s");
  EXPECT_EQ(i.live, 0u);
  EXPECT_EQ(retrying.state(i.last_job).status, JobStatus::completed);
}

TEST_F(Schedules, AFullQueueRefusesARunAndTheScheduleCountsIt) {
  Queue<int> small = engine.declare_queue<int>("small", QueueOptions{.capacity = 1});
  (void)small.every("s", 1min, "job", 1, ScheduleOptions{.overlap = true});
  clock.advance(1min);
  clock.advance(1min);  // the only slot is held by the first run
  const ScheduleInfo i = *small.schedule_info("s");
  EXPECT_EQ(i.runs, 1u);
  EXPECT_EQ(i.refused, 1u);
  EXPECT_EQ(i.live, 1u);
  EXPECT_EQ(small.counts().waiting, 1u);
}

TEST_F(Schedules, UnderTheDeadLetterPolicyARefusedRunIsFiledToTheDlq) {
  Queue<int> small = engine.declare_queue<int>(
      "small", QueueOptions{.capacity = 1, .on_full = OnFull::dead_letter});
  (void)small.every("s", 1min, "job", 1, ScheduleOptions{.overlap = true});
  clock.advance(1min);
  clock.advance(1min);
  const ScheduleInfo i = *small.schedule_info("s");
  EXPECT_EQ(i.refused, 1u);
  ASSERT_EQ(small.dlq().size(), 1u);
  EXPECT_EQ(small.dlq().get(i.last_job)->reason, DeadLetterReason::overflow);
}

TEST_F(Schedules, BadDeclarationsAreRefusedWithAnErrorNamingTheProblem) {
  struct Case {
    const char* what;
    std::function<void()> call;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"zero interval", [&] { (void)q.every("s", 0s, "job", "x"); }, "expected a duration > 0"},
      {"negative interval", [&] { (void)q.every("s", -1s, "job", "x"); }, "interval is"},
      {"blank id", [&] { (void)q.every(" ", 1s, "job", "x"); }, "the id is blank"},
      {"delay", [&] { (void)q.every("s", 1s, "job", "x", {.job = {.delay = 1s}}); },
       "ScheduleOptions.job.delay is set"},
      {"dedup", [&] { (void)q.every("s", 1s, "job", "x", {.job = {.dedup = {.id = "d"}}}); },
       "ScheduleOptions.job.dedup.id is 'd'"},
      {"max_catch_up 0", [&] { (void)q.every("s", 1s, "job", "x", {.max_catch_up = 0}); },
       "max_catch_up is 0"},
      {"attempts 0", [&] { (void)q.every("s", 1s, "job", "x", {.job = {.max_attempts = 0}}); },
       "attempts"},
      {"blank job name", [&] { (void)q.every("s", 1s, "", "x"); }, "name"},
      {"bad cron", [&] { (void)q.cron("s", "61 * * * *", "job", "x"); }, "61"},
      {"cron never due", [&] { (void)q.cron("s", "0 0 30 2 *", "job", "x"); }, "0 0 30 2 *"},
  };
  for (const auto& c : cases) {
    try {
      c.call();
      ADD_FAILURE() << c.what << ": accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_option) << c.what << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos)
          << c.what << ": " << e.what();
    }
  }
  EXPECT_TRUE(q.schedules().empty()) << "nothing refused was declared";
}

TEST_F(Schedules, AfterShutdownNoRunIsAddedAndDeclaringThrows) {
  (void)q.every("s", 1min, "job", "x");
  (void)engine.shutdown(0s);
  clock.advance(5min);
  engine.run_until_idle();
  EXPECT_TRUE(ran.empty());
  EXPECT_EQ(info("s").runs, 0u);
  try {
    (void)q.every("t", 1min, "job", "x");
    ADD_FAILURE() << "declared after shutdown";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::shutting_down) << e.what();
  }
}

TEST_F(Schedules, ListsEverySchedule) {
  (void)q.every("b", 1min, "job", "x");
  (void)q.cron("a", "*/5 * * * *", "job", "x");
  const auto all = q.schedules();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].id, "a");
  EXPECT_EQ(all[0].when, "cron '*/5 * * * *' UTC");
  EXPECT_EQ(all[1].id, "b");
  EXPECT_EQ(all[0].next_run, clock.now() + 5min) << "23:50 -> 23:55";
}

// --- threaded: the timer thread fires schedules, workers run them
// ---------------------------------

TEST(ThreadedSchedules, ARunningRunIsNeverOverlappedUnlessAsked) {
  for (const bool overlap : {false, true}) {
    ManualClock clock;
    std::atomic<int> running{0}, peak{0}, started{0};
    std::atomic<bool> release{false};
    Engine engine({.clock = &clock});
    // No lease: the clock moves minutes while the handlers run, and a lapsed lease would deliver
    // the run again (a second start of the same job, not an overlap).
    auto q = engine.declare_queue<int>("q", QueueOptions{.visibility_timeout = Duration::max()});
    q.process({.concurrency = 3}, [&](Job<int>&) {
      const int now = running.fetch_add(1) + 1;
      int p = peak.load();
      while (now > p && !peak.compare_exchange_weak(p, now)) {
      }
      started.fetch_add(1);
      (void)test::eventually([&] { return release.load(); }, 60s);
      running.fetch_sub(1);
    });
    struct ReleaseOnExit {  // an assertion that returns early must not leave handlers held
      std::atomic<bool>& flag;
      ~ReleaseOnExit() { flag.store(true); }
    } release_on_exit{release};
    (void)q.every("s", 1min, "job", 0, ScheduleOptions{.overlap = overlap});
    // One due time at a time: the test waits until the timer thread handled each (two advances
    // it sees at once are one late firing, which runs once under MissedRuns::skip).
    for (int due = 1; due <= 3; ++due) {
      clock.advance(1min);
      ASSERT_TRUE(test::eventually([&] {
        const ScheduleInfo i = *q.schedule_info("s");
        return i.runs + i.skipped == static_cast<std::uint64_t>(due);
      })) << "due time "
          << due;
    }
    ASSERT_TRUE(test::eventually([&] { return started.load() == (overlap ? 3 : 1); }));
    EXPECT_EQ(q.schedule_info("s")->skipped, overlap ? 0u : 2u);
    release.store(true);
    ASSERT_TRUE(q.wait_idle(60s));
    EXPECT_EQ(peak.load(), overlap ? 3 : 1) << "overlap " << overlap;
    EXPECT_EQ(q.schedule_info("s")->runs, overlap ? 3u : 1u);
    EXPECT_EQ(q.schedule_info("s")->live, 0u);
  }
}

TEST(ThreadedSchedules, UpsertAndRemoveRaceTheTimerWithoutDoublingOrLosingTheSchedule) {
  // Threads re-declare and remove one id while the clock moves: at the end exactly one schedule
  // with that id exists or none, and every run it added ended.
  ManualClock clock;
  Engine engine({.clock = &clock});
  auto q = engine.declare_queue<int>("q", QueueOptions{.capacity = 4096});
  std::atomic<int> ran{0};
  q.process({.concurrency = 2}, [&](Job<int>&) { ran.fetch_add(1); });
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) {
        if ((i + t) % 5 == 0) {
          (void)q.unschedule("s");
        } else {
          (void)q.every("s", std::chrono::milliseconds(1 + (i % 3)), "job", i,
                        ScheduleOptions{.overlap = (i % 2) == 0});
        }
      }
    });
  std::thread ticker([&] {
    while (!stop.load()) {
      clock.advance(1ms);
      std::this_thread::yield();
    }
  });
  for (auto& t : threads)
    t.join();
  (void)q.every("s", 1ms, "job", -1);  // the last word: it exists
  // Time moves until the timer thread has added a run of it: on a loaded machine every advance
  // may come before the timer thread runs at all, and the unschedule below then rightly leaves
  // nothing to run (review: a fixed 20 advances made `ran > 0` depend on thread timing).
  ASSERT_TRUE(test::eventually([&] {
    clock.advance(1ms);
    return q.schedule_info("s")->runs > 0;
  }));
  stop.store(true);
  ticker.join();
  ASSERT_EQ(q.schedules().size(), 1u);
  ASSERT_TRUE(q.unschedule("s"));
  ASSERT_TRUE(q.wait_idle(60s));
  EXPECT_GT(ran.load(), 0);
  EXPECT_EQ(q.counts().added, q.counts().completed);
}

/// Brittle: a payload whose copy throws while `fail` is set (a schedule copies it for each run).
struct Brittle {
  static inline std::atomic<bool> fail{false};
  int v = 0;
  explicit Brittle(int x) : v(x) {}
  Brittle(const Brittle& o) : v(o.v) {
    if (fail) throw std::runtime_error("copy refused");
  }
  Brittle(Brittle&&) noexcept = default;
  Brittle& operator=(const Brittle&) = default;
  Brittle& operator=(Brittle&&) noexcept = default;
};

TEST(ScheduleFailures, ARunWhosePayloadCopyThrowsCountsAsFailedWithItsErrorAndSaysSoOnce) {
  ManualClock clock;
  Engine engine({.clock = &clock, .mode = Mode::inlined});
  auto q = engine.declare_queue<Brittle>("q", {});
  int ran = 0;
  q.process({}, [&](Job<Brittle>&) { ++ran; });
  (void)q.every("tick", 1min, "tick", Brittle(1));
  Brittle::fail = true;
  testing::internal::CaptureStderr();
  for (int i = 0; i < 2; ++i) {
    clock.advance(1min);
    engine.run_until_idle();
  }
  const std::string err = testing::internal::GetCapturedStderr();
  Brittle::fail = false;
  ScheduleInfo info = *q.schedule_info("tick");
  EXPECT_EQ(info.failed, 2u);
  EXPECT_EQ(info.refused, 0u) << "the queue did not refuse it: the add threw";
  EXPECT_EQ(info.runs, 0u);
  EXPECT_EQ(info.last_error, "a run of schedule 'tick' on queue 'q' was not added: copy refused");
  EXPECT_NE(err.find("rail: a run of schedule 'tick' on queue 'q' was not added: copy refused"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("copy refused"), err.rfind("copy refused")) << "once per schedule: " << err;
  clock.advance(1min);
  engine.run_until_idle();
  EXPECT_EQ(ran, 1) << "the next run is added once the copy works again";
  info = *q.schedule_info("tick");
  EXPECT_EQ(info.runs, 1u);
  EXPECT_EQ(info.failed, 2u);
}

}  // namespace
}  // namespace rail
