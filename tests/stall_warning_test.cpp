// Stalled-handler warnings (QueueOptions::stall_warning): a handler that runs past a fraction of
// its lease (or of its attempt's timeout) raises one `stall_warning` per lease period while it
// can still finish or renew. Pinned under the manual clock inline (the lease sweep runs on each
// advance), for a deferred delivery, on the timer thread with a manual and with the real clock,
// in the log observer's output, and in the lease tracker's own protocol under a deterministic
// schedule (a sweep racing a renewal and a lease handed to the next delivery).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "rail/detail/lease_tracker.hpp"
#include "rail/rail.hpp"
#include "support/deterministic_schedule.hpp"
#include "support/eventually.hpp"
#include "support/inline_engine.hpp"
#include "support/parked_completions.hpp"
#include "support/release_on_exit.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;
using test::eventually;

struct StallWarning : test::InlineEngine {
  Queue<int> queue(double fraction, Duration visibility = 10s, Duration timeout = Duration::max()) {
    QueueOptions o;
    o.visibility_timeout = visibility;
    o.timeout = timeout;
    o.stall_warning = fraction;
    return engine.declare_queue<int>("q", o);
  }
  [[nodiscard]] std::vector<Duration> warned_after() const {
    std::vector<Duration> out;
    for (const Event& e : of(EventKind::stall_warning))
      out.push_back(e.elapsed);
    return out;
  }
};

TEST_F(StallWarning, AHandlerPastItsShareOfTheLeaseIsWarnedOnceWhileItCanStillFinish) {
  auto q = queue(0.5);
  q.process({}, [&](Job<int>&) {
    clock.advance(6s);  // past 5 s of its 10 s lease
    clock.advance(1s);  // another sweep of the same period: no second warning
    return Outcome::done();
  });
  const JobId id = q.add("slow", 1).id;
  engine.run_until_idle();
  ASSERT_EQ(count(EventKind::stall_warning), 1u);
  const Event w = first(EventKind::stall_warning);
  EXPECT_EQ(w.job_id, id);
  EXPECT_EQ(w.elapsed, 6s) << "found by the first sweep past the warning time";
  EXPECT_EQ(w.delay, 4s) << "the time left before the lease lapses";
  EXPECT_EQ(w.attempt, 1u);
  EXPECT_EQ(w.deliveries, 1u);
  EXPECT_EQ(count(EventKind::stalled), 0u);
  EXPECT_EQ(count(EventKind::completed), 1u);
  const QueueCounts c = q.counts();
  EXPECT_EQ(c.stall_warnings, 1u);
  EXPECT_EQ(c.stalled, 0u);
  EXPECT_EQ(c.completed, 1u);
}

TEST_F(StallWarning, NoHandlerIsWarnedWithoutTheOption) {
  auto q = queue(0);
  q.process({}, [&](Job<int>&) {
    clock.advance(9900ms);
    return Outcome::done();
  });
  (void)q.add("slow", 1);
  engine.run_until_idle();
  EXPECT_EQ(count(EventKind::stall_warning), 0u);
  EXPECT_EQ(q.counts().stall_warnings, 0u);
  EXPECT_EQ(q.counts().completed, 1u);
}

TEST_F(StallWarning, AHandlerBeforeItsShareOfTheLeaseIsNotWarned) {
  auto q = queue(0.5);
  q.process({}, [&](Job<int>&) {
    clock.advance(4999ms);
    return Outcome::done();
  });
  (void)q.add("quick enough", 1);
  engine.run_until_idle();
  EXPECT_EQ(count(EventKind::stall_warning), 0u);
}

TEST_F(StallWarning, ARenewalStartsANewPeriodThatIsWarnedAgain) {
  auto q = queue(0.5);
  bool renewed = false;
  q.process({}, [&](Job<int>& j) {
    clock.advance(6s);              // warned: 6 s of 10
    renewed = j.extend_lease(10s);  // a new period: lapses at 16 s, warned from 11 s
    clock.advance(4s);              // 10 s: not yet
    clock.advance(2s);              // 12 s: warned again
    return Outcome::done();
  });
  (void)q.add("heartbeat", 1);
  engine.run_until_idle();
  EXPECT_TRUE(renewed);
  EXPECT_EQ(warned_after(), (std::vector<Duration>{6s, 12s}));
  ASSERT_EQ(count(EventKind::stall_warning), 2u);
  EXPECT_EQ(of(EventKind::stall_warning)[1].delay, 4s);
  EXPECT_EQ(q.counts().stall_warnings, 2u);
  EXPECT_EQ(count(EventKind::stalled), 0u);
}

TEST_F(StallWarning, ARenewalBeforeTheWarningPostponesIt) {
  auto q = queue(0.5);
  q.process({}, [&](Job<int>& j) {
    clock.advance(4s);
    EXPECT_TRUE(j.extend_lease(10s));  // warned from 9 s now
    clock.advance(4s);                 // 8 s
    return Outcome::done();
  });
  (void)q.add("heartbeat", 1);
  engine.run_until_idle();
  EXPECT_EQ(count(EventKind::stall_warning), 0u);
}

TEST_F(StallWarning, AShorterRenewalBringsTheWarningForward) {
  auto q = queue(0.5);
  q.process({}, [&](Job<int>& j) {
    EXPECT_TRUE(j.extend_lease(2s));  // lapses at 2 s, warned from 1 s
    clock.advance(1500ms);
    return Outcome::done();
  });
  (void)q.add("short", 1);
  engine.run_until_idle();
  EXPECT_EQ(warned_after(), (std::vector<Duration>{1500ms}));
}

TEST_F(StallWarning, ALeaseFoundLapsedIsNotWarnedFirst) {
  auto q = queue(0.5);
  q.process({}, [&](Job<int>& j) {
    if (j.deliveries() == 1) clock.advance(11s);  // one step past the lapse
    return Outcome::done();
  });
  (void)q.add("stuck", 1, JobOptions{.max_attempts = 2});
  engine.run_until_idle();
  EXPECT_EQ(count(EventKind::stall_warning), 0u) << "the lapse says it: `stalled`";
  EXPECT_EQ(count(EventKind::stalled), 1u);
  EXPECT_EQ(q.counts().completed, 1u);
}

TEST_F(StallWarning, EachDeliveryIsWarnedInItsOwnRight) {
  auto q = queue(0.5);
  q.process({}, [&](Job<int>& j) {
    clock.advance(6s);
    if (j.deliveries() == 1) clock.advance(5s);  // lapses: delivered again, warned again
    return Outcome::done();
  });
  (void)q.add("stuck", 1, JobOptions{.max_attempts = 2});
  engine.run_until_idle();
  ASSERT_EQ(count(EventKind::stall_warning), 2u);
  EXPECT_EQ(of(EventKind::stall_warning)[0].deliveries, 1u);
  EXPECT_EQ(of(EventKind::stall_warning)[1].deliveries, 2u);
  EXPECT_EQ(count(EventKind::stalled), 1u);
}

TEST_F(StallWarning, AnAttemptsTimeoutIsWarnedOnAQueueWithoutLeases) {
  auto q = queue(0.8, Duration::max(), 10s);
  q.process({}, [&](Job<int>&) {
    clock.advance(9s);
    return Outcome::done();
  });
  (void)q.add("bounded", 1);
  engine.run_until_idle();
  ASSERT_EQ(count(EventKind::stall_warning), 1u);
  EXPECT_EQ(first(EventKind::stall_warning).delay, 1s) << "left before the timeout";
  EXPECT_EQ(count(EventKind::timed_out), 0u);
}

TEST_F(StallWarning, ADeferredDeliveryIsWarnedThroughItsCompletion) {
  auto q = queue(0.5);
  test::ParkedCompletions parked;
  q.process({.max_pending = 2}, [&](Job<int>& job) {
    return job.defer([&](Completion c) { parked.put(std::move(c)); });
  });
  (void)q.add("async", 1);
  engine.run_until_idle();
  ASSERT_EQ(parked.size(), 1u);
  clock.advance(6s);
  EXPECT_EQ(count(EventKind::stall_warning), 1u);
  std::vector<Completion> cs = parked.take();
  EXPECT_TRUE(cs[0].extend_lease(10s));  // a new period from 6 s: warned from 11 s
  clock.advance(4s);
  EXPECT_EQ(count(EventKind::stall_warning), 1u);
  clock.advance(2s);
  EXPECT_EQ(warned_after(), (std::vector<Duration>{6s, 12s}));
  EXPECT_TRUE(cs[0].complete(Outcome::done()));
  EXPECT_EQ(q.counts().completed, 1u);
  EXPECT_EQ(count(EventKind::stalled), 0u);
}

TEST_F(StallWarning, AWarningGivenBeforeDeferIsNotGivenAgainByTheCompletion) {
  auto q = queue(0.5);
  test::ParkedCompletions parked;
  q.process({.max_pending = 2}, [&](Job<int>& job) {
    clock.advance(6s);  // warned while the handler runs
    return job.defer([&](Completion c) { parked.put(std::move(c)); });
  });
  (void)q.add("async", 1);
  engine.run_until_idle();
  ASSERT_EQ(parked.size(), 1u);
  EXPECT_EQ(count(EventKind::stall_warning), 1u);
  clock.advance(1s);  // the same period, now in the Completion's record
  EXPECT_EQ(count(EventKind::stall_warning), 1u);
  std::vector<Completion> cs = parked.take();
  EXPECT_TRUE(cs[0].complete(Outcome::done()));
  EXPECT_EQ(q.counts().stall_warnings, 1u);
}

TEST_F(StallWarning, TheLogObserverWritesItInBothForms) {
  auto q = queue(0.5);
  std::ostringstream text, lines;
  engine.on_event(make_log_observer(text, clock, {}));
  engine.on_event(make_log_observer(lines, clock, {.format = LogFormat::json}));
  q.process({}, [&](Job<int>&) {
    clock.advance(6s);
    return Outcome::done();
  });
  const JobId id = q.add("charge-card", 1).id;
  engine.run_until_idle();
  EXPECT_NE(text.str().find(
                "SLOW job " + std::to_string(id) +
                " (charge-card) delivery #1: 6s in the handler, 4s left of its lease (or timeout)"),
            std::string::npos)
      << text.str();
  bool found = false;
  std::istringstream in(lines.str());
  for (std::string line; std::getline(in, line);) {
    const auto o = nlohmann::json::parse(line);
    if (o.at("event") != "stall_warning") continue;
    found = true;
    EXPECT_EQ(o.at("job_id"), id);
    EXPECT_EQ(o.at("job"), "charge-card");
    EXPECT_EQ(o.at("elapsed_ms"), 6000.0);
    EXPECT_EQ(o.at("delay_ms"), 4000.0);
  }
  EXPECT_TRUE(found) << lines.str();
}

TEST_F(StallWarning, AFractionOutsideZeroToOneIsRefusedByName) {
  for (double f : {-0.1, 1.0, 1.5, std::numeric_limits<double>::quiet_NaN(),
                   std::numeric_limits<double>::infinity()}) {
    QueueOptions o;
    o.stall_warning = f;
    try {
      (void)engine.declare_queue<int>("bad", o);
      ADD_FAILURE() << "stall_warning " << f << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_option);
      EXPECT_NE(std::string(e.what()).find("stall_warning"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("0 <= f < 1"), std::string::npos) << e.what();
    }
  }
}

// The timer thread's sweep must come within the warning's share of the shortest lease: armed at
// a whole lease, it would find this handler only at its lapse.
TEST(StallWarningThreaded, TheTimerThreadWarnsARunningHandlerOnAManualClock) {
  ManualClock clock;
  std::atomic<bool> warned{false}, release{false};
  std::mutex m;
  std::string name;
  Engine engine({.clock = &clock});
  test::ReleaseOnExit release_handler{release};
  engine.on_event([&](const Event& e) {
    if (e.kind != EventKind::stall_warning) return;
    {
      std::lock_guard lock(m);
      name = e.job_name;
    }
    warned.store(true);
  });
  QueueOptions o;
  o.visibility_timeout = 10s;
  o.stall_warning = 0.5;
  auto q = engine.declare_queue<int>("q", o);
  std::atomic<bool> started{false};
  q.process({.concurrency = 1}, [&](Job<int>&) {
    started.store(true);
    (void)eventually([&] { return release.load(); }, 120s);
  });
  (void)q.add("slow", 1);
  ASSERT_TRUE(eventually([&] { return started.load(); }));
  clock.advance(6s);
  ASSERT_TRUE(eventually([&] { return warned.load(); }));
  release.store(true);
  ASSERT_TRUE(q.wait_idle(60s));
  const QueueCounts c = q.counts();
  EXPECT_EQ(c.stall_warnings, 1u);
  EXPECT_EQ(c.stalled, 0u);
  EXPECT_EQ(c.completed, 1u);
  std::lock_guard lock(m);
  EXPECT_EQ(name, "slow");
}

// A renewal that shortens the lease after its warning was given must pull the timer thread's
// sweep in: armed at the old deadline, it would find neither the new period's warning nor the
// lapse on time.
TEST(StallWarningThreaded, AShorterRenewalAfterTheWarningIsSweptOnTime) {
  ManualClock clock;
  std::atomic<int> warnings{0}, stalls{0}, phase{0};
  std::atomic<bool> release{false};
  Engine engine({.clock = &clock});
  test::ReleaseOnExit release_handler{release};
  engine.on_event([&](const Event& e) {
    if (e.kind == EventKind::stall_warning) warnings.fetch_add(1);
    if (e.kind == EventKind::stalled) stalls.fetch_add(1);
  });
  QueueOptions o;
  o.visibility_timeout = 10s;
  o.stall_warning = 0.5;
  auto q = engine.declare_queue<int>("q", o);
  std::atomic<bool> renewed{false};
  q.process({.concurrency = 1}, [&](Job<int>& j) {
    if (j.deliveries() > 1) return;
    phase.store(1);
    (void)eventually([&] { return phase.load() == 2 || release.load(); }, 120s);
    renewed.store(j.extend_lease(1s));  // at 6 s: lapses at 7 s, warned from 6.5 s
    phase.store(3);
    (void)eventually([&] { return release.load(); }, 120s);
  });
  (void)q.add("slow", 1, JobOptions{.max_attempts = 2});
  ASSERT_TRUE(eventually([&] { return phase.load() == 1; }));
  clock.advance(6s);
  ASSERT_TRUE(eventually([&] { return warnings.load() == 1; }));
  phase.store(2);
  ASSERT_TRUE(eventually([&] { return phase.load() == 3; }));
  EXPECT_TRUE(renewed.load());
  clock.advance(600ms);  // 6.6 s
  EXPECT_TRUE(eventually([&] { return warnings.load() == 2; })) << "the new period's warning";
  clock.advance(900ms);  // 7.5 s
  EXPECT_TRUE(eventually([&] { return stalls.load() == 1; })) << "the shortened lease's lapse";
  release.store(true);
  EXPECT_TRUE(q.wait_idle(60s));
}

// Real time, several workers on two cores: each handler waits for its own warning, so the
// counts must agree with the events exactly, one warning per delivery.
TEST(StallWarningThreaded, EveryBlockedHandlerIsWarnedExactlyOnceOnTheRealClock) {
  constexpr int kJobs = 12;
  std::mutex m;
  std::multiset<JobId> warned;
  std::atomic<bool> give_up{false};
  Engine engine;
  test::ReleaseOnExit release_handlers{give_up};
  engine.on_event([&](const Event& e) {
    if (e.kind != EventKind::stall_warning) return;
    std::lock_guard lock(m);
    warned.insert(e.job_id);
  });
  QueueOptions o;
  o.visibility_timeout = 120s;
  o.stall_warning = 0.0005;  // 60 ms of a 120 s lease: warned long before any lapse
  auto q = engine.declare_queue<int>("q", o);
  q.process({.concurrency = 4}, [&](Job<int>& job) {
    (void)eventually(
        [&] {
          std::lock_guard lock(m);
          return warned.count(job.id()) > 0 || give_up.load();
        },
        120s);
  });
  for (int i = 0; i < kJobs; ++i)
    (void)q.add("slow", i);
  ASSERT_TRUE(q.wait_idle(120s));
  const QueueCounts c = q.counts();
  EXPECT_EQ(c.completed, static_cast<std::uint64_t>(kJobs));
  EXPECT_EQ(c.stalled, 0u);
  EXPECT_EQ(c.stall_warnings, static_cast<std::uint64_t>(kJobs));
  std::lock_guard lock(m);
  EXPECT_EQ(warned.size(), static_cast<std::size_t>(kJobs));
  for (JobId id : warned)
    EXPECT_EQ(warned.count(id), 1u) << "job " << id;
}

// The tracker's protocol under every interleaving a seed gives: a sweep racing a renewal warns at
// most once per period and never before the period's time, and a lease handed to the next
// delivery on the same record is warned for that delivery alone.
#ifdef RAIL_LONG_TESTS
constexpr std::uint64_t kSeeds = 100'000;
#else
constexpr std::uint64_t kSeeds = 5'000;
#endif

TEST(StallWarningTracker, ASweepRacingARenewalWarnsAtMostOncePerPeriodAndNeverEarly) {
  using Tracker = detail::BasicLeaseTracker<test::DeterministicAtomic>;
  const std::uint32_t half = detail::warn_fraction(0.5);
  for (std::uint64_t seed = 0; seed < kSeeds; ++seed) {
    Tracker tracker(1, half);
    const std::uint64_t a = detail::make_lease(3, 1);
    Tracker::grant(tracker.record(0), a, 100, 0);  // warned from 50
    int warnings = 0;
    bool renewed = false;
    test::DeterministicSchedule sched(seed, test::SchedulePolicy::uniform);
    sched.run({[&] { renewed = Tracker::renew(tracker.record(0), a, 140, 60); },  // from 100
               [&] {
                 for (std::int64_t now : {70, 80}) {
                   (void)tracker.sweep(
                       now, [&](std::uint64_t, std::int64_t) { ADD_FAILURE() << "no lapse due"; },
                       [&](std::uint64_t l, std::int64_t) {
                         EXPECT_EQ(l, a);
                         ++warnings;
                       });
                 }
               }});
    ASSERT_TRUE(renewed);
    // The first period (warned from 50) may be found before the renewal; the second is not due.
    ASSERT_LE(warnings, 1) << "seed " << seed;
  }
}

TEST(StallWarningTracker, ALeaseGrantedToTheNextDeliveryIsWarnedForItselfOnly) {
  using Tracker = detail::BasicLeaseTracker<test::DeterministicAtomic>;
  const std::uint32_t half = detail::warn_fraction(0.5);
  for (std::uint64_t seed = 0; seed < kSeeds; ++seed) {
    Tracker tracker(1, half);
    const std::uint64_t first = detail::make_lease(3, 1), next = detail::make_lease(4, 1);
    Tracker::grant(tracker.record(0), first, 100, 0);            // warned from 50
    std::vector<std::pair<std::uint64_t, std::int64_t>> warned;  // (lease, its deadline)
    auto sweep = [&](std::int64_t now) {
      (void)tracker.sweep(
          now, [&](std::uint64_t, std::int64_t) { ADD_FAILURE() << "no lapse due"; },
          [&](std::uint64_t l, std::int64_t deadline) { warned.emplace_back(l, deadline); });
    };
    test::DeterministicSchedule sched(seed, test::SchedulePolicy::uniform);
    sched.run({[&] {
                 Tracker::release(tracker.record(0));
                 Tracker::grant(tracker.record(0), next, 66, 54);  // warned from 60
               },
               [&] {
                 sweep(60);
                 sweep(60);
               }});
    sweep(61);  // after both: the next lease's period has come, whether found above or not
    sweep(62);
    int firsts = 0, nexts = 0;
    for (const auto& [lease, deadline] : warned) {
      // A warning names its own lease's period: never the first lease with the next one's
      // deadline (a sweep that read the record half-way through the hand-over).
      ASSERT_EQ(deadline, lease == first ? 100 : 66) << "seed " << seed;
      (lease == first ? firsts : nexts)++;
    }
    ASSERT_LE(firsts, 1) << "seed " << seed;
    ASSERT_EQ(nexts, 1) << "seed " << seed;
  }
}

// defer's hand-over racing a sweep: the sweep may warn through the worker's record after the
// hand-over read its warned pair; the Completion's record must not warn the period again, even
// after the worker's record warned its next lease in between.
TEST(StallWarningTracker, AHandOverRacingTheSweepWarnsItsPeriodOnce) {
  using Tracker = detail::BasicLeaseTracker<test::DeterministicAtomic>;
  const std::uint32_t half = detail::warn_fraction(0.5);
  for (std::uint64_t seed = 0; seed < kSeeds; ++seed) {
    Tracker tracker(2, half);  // record 0: the worker's; record 1: the Completion's
    const std::uint64_t deferred = detail::make_lease(3, 7), next = detail::make_lease(4, 1);
    Tracker::grant(tracker.record(0), deferred, 100, 0);  // warned from 50
    int deferred_warnings = 0, next_warnings = 0;
    auto sweep = [&](std::int64_t now) {
      (void)tracker.sweep(
          now, [&](std::uint64_t, std::int64_t) { ADD_FAILURE() << "no lapse due"; },
          [&](std::uint64_t l, std::int64_t) {
            (l == deferred ? deferred_warnings : next_warnings)++;
          });
    };
    test::DeterministicSchedule sched(seed, test::SchedulePolicy::uniform);
    sched.run({[&] {
                 // Completions::defer: place it in the Completion's record, then take it off the
                 // worker's (or give it up if a lapse took it), then the worker's next job.
                 Tracker::hand_over(tracker.record(1), tracker.record(0), deferred);
                 std::uint64_t held = deferred;
                 if (!tracker.record(0).lease.compare_exchange_strong(held, 0))
                   Tracker::release(tracker.record(1));
                 Tracker::grant(tracker.record(0), next, 66, 54);  // warned from 60
               },
               [&] {
                 sweep(60);
                 sweep(60);
               }});
    sweep(61);
    sweep(62);
    ASSERT_EQ(deferred_warnings, 1) << "seed " << seed;
    ASSERT_EQ(next_warnings, 1) << "seed " << seed;
  }
}

__extension__ typedef __int128 Wide;  // the exact product, to compare with

TEST(StallWarningTracker, TheWarningTimeIsTheFractionOfTheSpanWithoutOverflow) {
  EXPECT_EQ(detail::warn_fraction(0), 0u);
  EXPECT_EQ(detail::warn_fraction(0.5), detail::kWarnOne / 2);
  EXPECT_EQ(detail::warn_fraction(1e-12), 1u) << "a positive fraction never rounds to none";
  EXPECT_EQ(detail::warn_fraction(0.9999999), detail::kWarnOne - 1) << "never the whole lease";
  for (std::int64_t span : {std::int64_t{0}, std::int64_t{1}, std::int64_t{65'537},
                            std::int64_t{10'000'000'000}, std::numeric_limits<std::int64_t>::max()})
    for (std::uint32_t parts : {1u, detail::warn_fraction(0.8), detail::kWarnOne - 1}) {
      const auto exact =
          static_cast<std::int64_t>(static_cast<Wide>(span) * parts / detail::kWarnOne);
      EXPECT_EQ(detail::fraction_of(span, parts), exact) << span << " x " << parts;
    }
}

}  // namespace
}  // namespace rail
