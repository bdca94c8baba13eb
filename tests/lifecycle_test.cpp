// The cold paths of a job's life against a handler that is still running: shutdown, leftovers,
// debounce, cancel, redrive, state(), and calls made back into the engine from handlers and
// observers. Each test pins one regression of issue 8 (its number in the comment above it).
// Threaded tests wait for an end state with a deadline; no sleep decides an outcome.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "rail/detail/engine_core.hpp"
#include "rail/detail/lease_tracker.hpp"
#include "rail/detail/timing_wheel.hpp"
#include "rail/rail.hpp"
#include "support/eventually.hpp"
#include "support/inline_engine.hpp"
#include "support/sanitized.hpp"
#include "support/watchdog.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;

using test::eventually;

bool contains(const std::vector<LeftoverJob>& jobs, JobId id) {
  for (const auto& j : jobs)
    if (j.id == id) return true;
  return false;
}

// A payload long enough to live on the heap: reading it after it was destroyed is a
// heap-use-after-free that ASan reports, not a silent read of a stale small buffer.
const std::string kPayload(200, 'p');

// 1. A handler hung past its lease on its last allowed delivery: the lapse dead-letters the job,
// and shutdown must still return within its grace and report the handler as running.
TEST(Lifecycle, ShutdownReturnsWithinGraceAndReportsAHandlerHungPastItsLease) {
  test::Watchdog watchdog(60s, "ShutdownReturnsWithinGraceAndReportsAHandlerHungPastItsLease");
  ManualClock clock;
  std::latch release(1);
  std::atomic<bool> started{false};
  Engine engine({.clock = &clock});
  QueueOptions o;
  o.visibility_timeout = 2s;
  o.stall_policy = StallPolicy::count_as_attempt;  // SQS: the only delivery is the last allowed
  auto q = engine.declare_queue<std::string>("q", o);
  q.process({}, [&](Job<std::string>&) {
    started = true;
    release.wait();
  });
  const JobId id = q.add("hang", kPayload).id;
  ASSERT_TRUE(eventually([&] { return started.load(); }));
  clock.advance(3s);  // the timer thread's sweep finds the lapse
  ASSERT_TRUE(eventually([&] { return q.state(id).status == JobStatus::dead_lettered; }));
  auto pending = std::async(std::launch::async, [&] { return engine.shutdown(100ms); });
  const bool returned = pending.wait_for(20s) == std::future_status::ready;
  release.count_down();  // lets the handler go either way, so a failure does not hang
  ASSERT_TRUE(returned) << "shutdown(100ms) waited for a handler hung past its lease";
  ShutdownReport report = pending.get();
  EXPECT_TRUE(contains(report.still_running, id));
  EXPECT_TRUE(report.not_started.empty());
}

struct InlineLifecycle : test::InlineEngine {
  Queue<std::string> queue(std::size_t capacity = 64) {
    QueueOptions o;
    o.capacity = capacity;
    o.visibility_timeout = 2s;
    return engine.declare_queue<std::string>("q", o);
  }
};

// 2. A stale handler (its lease lapsed, the job is waiting again) still reads the payload:
// take_leftovers must not move it out from under it; once the handler returned, it may.
TEST_F(InlineLifecycle, TakeLeftoversLeavesAJobThatAStaleHandlerStillReads) {
  auto q = queue();
  std::vector<Leftover<std::string>> taken_while_pinned;
  std::string read_after_take;
  q.process({}, [&](Job<std::string>& j) {
    clock.advance(3s);  // the lease lapses: the job is waiting again, this handler is stale
    EXPECT_TRUE(j.cancelled());
    (void)engine.shutdown(0s);
    taken_while_pinned = q.take_leftovers();
    read_after_take = j.data();  // must still be the payload
    return Outcome::done();
  });
  const JobId id = q.add("a", kPayload, JobOptions{.max_attempts = 3}).id;
  engine.run_until_idle();
  EXPECT_EQ(q.state(id).status, JobStatus::waiting);
  EXPECT_TRUE(taken_while_pinned.empty());
  EXPECT_EQ(read_after_take, kPayload);
  auto later = q.take_leftovers();
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].id, id);
  EXPECT_EQ(later[0].data, kPayload);
  EXPECT_EQ(later[0].failed_attempts, 0u) << "a stall costs no attempt (StallPolicy::own_budget)";
  EXPECT_FALSE(later[0].was_delayed);
}

// 3. A taken delayed job's timer is unlinked: its deadline passing fires nothing.
TEST_F(InlineLifecycle, TakeLeftoversUnlinksTheTimersOfDelayedJobs) {
  auto q = queue();
  int runs = 0;
  q.process({}, [&](Job<std::string>&) { ++runs; });
  const JobId id = q.add("a", kPayload, JobOptions{.delay = 10s}).id;
  (void)engine.shutdown(0s);
  auto left = q.take_leftovers();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].id, id);
  EXPECT_TRUE(left[0].was_delayed);
  EXPECT_EQ(engine.next_timer_in(), std::nullopt);
  clock.advance(20s);
  EXPECT_EQ(engine.run_until_idle(), 0u);
  EXPECT_EQ(runs, 0);
  EXPECT_TRUE(q.take_leftovers().empty());
}

TEST(Lifecycle, TakeLeftoversUnlinksTimersOnAThreadedEngine) {
  test::Watchdog watchdog(60s, "TakeLeftoversUnlinksTimersOnAThreadedEngine");
  ManualClock clock;
  std::atomic<int> runs{0};
  Engine engine({.clock = &clock});
  QueueOptions o;
  o.visibility_timeout = Duration::max();  // no lease sweep: the wheel is left empty
  auto q = engine.declare_queue<std::string>("q", o);
  q.process({.concurrency = 2}, [&](Job<std::string>&) { runs.fetch_add(1); });
  for (int i = 0; i < 100; ++i)
    (void)q.add("a", kPayload, JobOptions{.delay = std::chrono::milliseconds(10 + i)});
  (void)engine.shutdown(0s);
  EXPECT_EQ(q.take_leftovers().size(), 100u);
  clock.advance(1s);  // the timer thread wakes and processes the wheel: nothing is left on it
  EXPECT_EQ(engine.next_timer_in(), std::nullopt);
  EXPECT_EQ(runs.load(), 0);
}

// 4. Debounce must not replace a payload that a stale handler still reads: lapse ->
// redelivery -> retry_after puts the job back in delayed while the first handler runs.
TEST(Lifecycle, DebounceDoesNotReplaceThePayloadAStaleHandlerReads) {
  test::Watchdog watchdog(60s, "DebounceDoesNotReplaceThePayloadAStaleHandlerReads");
  ManualClock clock;
  std::latch first_started(1), retried(1), debounced(1);
  std::string first_saw_after;
  Engine engine({.clock = &clock});
  QueueOptions o;
  o.visibility_timeout = 2s;
  auto q = engine.declare_queue<std::string>("q", o);
  q.process({.concurrency = 2}, [&](Job<std::string>& j) {
    if (j.deliveries() == 1) {
      first_started.count_down();
      debounced.wait();
      first_saw_after = j.data();
      return Outcome::done();
    }
    if (j.deliveries() == 2) {
      retried.count_down();
      return Outcome::retry_in(10s, "try later");
    }
    return Outcome::done();
  });
  const JobOptions opts{
      .max_attempts = 5, .delay = 0s, .dedup = {.id = "d", .ttl = 1h, .mode = DedupMode::debounce}};
  const JobId id = q.add("a", kPayload, opts).id;
  first_started.wait();
  clock.advance(3s);  // the lapse redelivers to the second worker, which retries after 10 s
  retried.wait();
  ASSERT_TRUE(eventually([&] { return q.state(id).status == JobStatus::delayed; }));
  JobOptions again = opts;
  again.delay = 5s;
  const AddReceipt r = q.add("a", std::string(200, 'n'), again);
  debounced.count_down();
  EXPECT_EQ(r.id, id);
  EXPECT_EQ(r.status, AddStatus::duplicate);  // merged: the payload is being read
  ASSERT_TRUE(eventually([&] { return q.counts().late_outcomes == 1; }));
  EXPECT_EQ(first_saw_after, kPayload);
  // Once no stale handler reads it, a debounce replaces the payload again.
  EXPECT_EQ(q.add("a", std::string(200, 'm'), again).status, AddStatus::debounced);
}

// 5. A job redriven from the DLQ lives in a new slot; its old slot still carries the id.
TEST_F(InlineLifecycle, CancelFindsAJobRedrivenFromTheDlq) {
  auto q = queue();
  int runs = 0;
  q.process({}, [&](Job<std::string>&) {
    ++runs;
    return Outcome::fail("no");
  });
  (void)q.add("filler", kPayload, JobOptions{.delay = 1h});  // the free list moves on
  const JobId id = q.add("a", kPayload).id;
  engine.run_until_idle();
  ASSERT_EQ(q.dlq().size(), 1u);
  q.pause();
  ASSERT_EQ(q.dlq().redrive(id), RedriveStatus::redriven);
  EXPECT_TRUE(q.cancel(id));
  EXPECT_TRUE(engine.cancel(id) == false);  // already cancelled: nothing left to cancel
  q.resume();
  engine.run_until_idle();
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(q.state(id).status, JobStatus::cancelled);
}

// 6. Cancelling a delayed job gives its capacity back at once, not at its deadline.
TEST_F(InlineLifecycle, CancellingADelayedJobGivesItsSlotBackAtOnce) {
  auto q = queue(1);
  q.process({}, [&](Job<std::string>&) {});
  const JobId id = q.add("a", kPayload, JobOptions{.delay = 1h}).id;
  EXPECT_EQ(q.add("b", kPayload).status, AddStatus::full);
  ASSERT_TRUE(q.cancel(id));
  const QueueCounts c = q.counts();
  EXPECT_EQ(c.waiting + c.delayed + c.active, 0u);
  EXPECT_EQ(q.add("b", kPayload).status, AddStatus::added);
  EXPECT_EQ(engine.run_until_idle(), 1u);
}

TEST(Lifecycle, CancellingADelayedJobGivesItsSlotBackOnAThreadedEngine) {
  test::Watchdog watchdog(60s, "CancellingADelayedJobGivesItsSlotBackOnAThreadedEngine");
  Engine engine;
  QueueOptions o;
  o.capacity = 1;
  auto q = engine.declare_queue<std::string>("q", o);
  std::atomic<int> runs{0};
  q.process({}, [&](Job<std::string>&) { runs.fetch_add(1); });
  for (int i = 0; i < 200; ++i) {
    const AddReceipt r = q.add("a", kPayload, JobOptions{.delay = 1h});
    ASSERT_EQ(r.status, AddStatus::added) << "round " << i;
    ASSERT_TRUE(q.cancel(r.id));
  }
  EXPECT_EQ(q.counts().cancelled, 200u);
  EXPECT_EQ(runs.load(), 0);
}

// 7. A lease whose token is 0 (a slot's seq wrapped) on slot 0 is still a lease.
TEST(Lifecycle, ALeaseWithTokenZeroOnSlotZeroStillLapses) {
  const std::uint64_t lease = detail::make_lease(0, 0);
  EXPECT_NE(lease, 0u);
  EXPECT_EQ(detail::lease_slot(lease), 0u);
  EXPECT_EQ(detail::lease_token(lease), 0u);
  EXPECT_EQ(detail::lease_slot(detail::make_lease((1u << 29) - 1, 7)), (1u << 29) - 1);
  detail::LeaseTracker tracker(1);
  detail::LeaseTracker::grant(tracker.record(0), lease, 5, 0);
  int lapsed = 0;
  (void)tracker.sweep(
      10,
      [&](std::uint64_t l, std::int64_t deadline) {
        ++lapsed;
        EXPECT_EQ(l, lease);
        EXPECT_EQ(deadline, 5);
      },
      [](std::uint64_t, std::int64_t) { ADD_FAILURE() << "no warnings asked"; });
  EXPECT_EQ(lapsed, 1);
}

// 8. state() and check_options() against running workers: ThreadSanitizer reports the races
// these had (plain slot fields; the handler read without synchronisation).
TEST(Lifecycle, StateReadsWhileWorkersRunAreRaceFree) {
  test::Watchdog watchdog(120s, "StateReadsWhileWorkersRunAreRaceFree");
  Engine engine;
  QueueOptions o;
  o.capacity = 256;
  auto q = engine.declare_queue<int>("q", o);
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done.load()) {
      for (JobId id = 1; id < 64; ++id) {
        const JobState s = q.state(id);
        if (s.status == JobStatus::active) {
          EXPECT_GE(s.deliveries, 1u);
        }
      }
    }
  });
  std::thread declarer([&] {
    // Options that make check_options look at the queue's processing state.
    for (int i = 0; i < 200; ++i)
      (void)q.add("v", i, JobOptions{.max_attempts = 2, .visibility_timeout = 1s});
  });
  q.process({.concurrency = 2}, [](Job<int>& j) {
    return j.attempt() == 1 ? Outcome::retry("again") : Outcome::done();
  });
  declarer.join();
  for (int i = 0; i < 2000; ++i)
    while (q.add("a", i, JobOptions{.max_attempts = 2}).status != AddStatus::added)
      std::this_thread::yield();
  ASSERT_TRUE(q.wait_idle(60s));
  done = true;
  reader.join();
  EXPECT_EQ(q.counts().completed, 2200u);
}

// 9. Calls back into the engine from observers and handlers: no engine lock is held while
// events are delivered, and calls that would wait for the caller say so.
TEST_F(InlineLifecycle, AnObserverOfCancelledMayCallStateAndCancel) {
  test::Watchdog watchdog(60s, "AnObserverOfCancelledMayCallStateAndCancel");
  auto q = queue();
  const JobId first = q.add("a", kPayload).id;
  const JobId second = q.add("b", kPayload, JobOptions{.delay = 1h}).id;
  std::vector<JobStatus> seen;
  engine.on_event([&](const Event& e) {
    if (e.kind != EventKind::cancelled) return;
    seen.push_back(engine.state(e.job_id).status);
    if (e.job_id == first) {
      EXPECT_TRUE(engine.cancel(second));
    }
  });
  EXPECT_TRUE(engine.cancel(first));
  EXPECT_EQ(seen, (std::vector<JobStatus>{JobStatus::cancelled, JobStatus::cancelled}));
  EXPECT_EQ(q.counts().cancelled, 2u);
}

TEST(Lifecycle, AnObserverOfRetryDueMayAskForTheNextTimer) {
  test::Watchdog watchdog(60s, "AnObserverOfRetryDueMayAskForTheNextTimer");
  ManualClock clock;
  Engine engine({.clock = &clock});
  std::atomic<int> asked{0}, runs{0};
  engine.on_event([&](const Event& e) {
    if (e.kind != EventKind::retry_due) return;
    (void)engine.next_timer_in();
    asked.fetch_add(1);
  });
  auto q = engine.declare_queue<int>("q", {});
  q.process({}, [&](Job<int>&) { runs.fetch_add(1); });
  (void)q.add("a", 1, JobOptions{.delay = 1s});
  (void)q.add("b", 2, JobOptions{.delay = 2s});
  clock.advance(1s);
  ASSERT_TRUE(eventually([&] { return runs.load() == 1; }));
  clock.advance(1s);  // the timer thread must still be firing
  // retry_due is delivered after the timer releases the wheel: a worker may run the job first.
  ASSERT_TRUE(eventually([&] { return runs.load() == 2 && asked.load() == 2; }));
}

TEST(Lifecycle, WaitIdleFromOwnHandlerThrowsWouldDeadlock) {
  test::Watchdog watchdog(60s, "DrainFromOwnHandlerThrowsWouldDeadlock");
  Engine engine;
  auto q = engine.declare_queue<int>("q", {});
  std::atomic<int> code{-1};
  q.process({}, [&](Job<int>&) {
    try {
      (void)q.wait_idle(1h);
      code = 0;
    } catch (const Error& e) {
      code = static_cast<int>(e.code());
    }
  });
  (void)q.add("a", 1);
  ASSERT_TRUE(eventually([&] { return code.load() != -1; }));
  EXPECT_EQ(code.load(), static_cast<int>(ErrorCode::would_deadlock));
}

TEST(Lifecycle, ShutdownFromAHandlerDoesNotWaitForItself) {
  test::Watchdog watchdog(60s, "ShutdownFromAHandlerDoesNotWaitForItself");
  Engine engine;
  auto q = engine.declare_queue<int>("q", {});
  std::promise<ShutdownReport> report;
  std::atomic<JobId> self{0};
  q.process({}, [&](Job<int>& j) {
    self = j.id();
    report.set_value(engine.shutdown(1h));  // would wait an hour for itself
  });
  (void)q.add("a", 1);
  auto f = report.get_future();
  ASSERT_EQ(f.wait_for(30s), std::future_status::ready);
  ShutdownReport r = f.get();
  EXPECT_TRUE(contains(r.still_running, self.load()));
}

TEST(Lifecycle, AHandlerMayCallStateCancelAndNextTimerIn) {
  test::Watchdog watchdog(60s, "AHandlerMayCallStateCancelAndNextTimerIn");
  ManualClock clock;
  Engine engine({.clock = &clock});
  auto q = engine.declare_queue<int>("q", {});
  const JobId delayed = q.add("later", 2, JobOptions{.delay = 1h}).id;
  std::promise<void> done;
  std::atomic<bool> ok{false};
  q.process({}, [&](Job<int>& j) {
    if (j.data() != 1) return;
    const bool active = engine.state(j.id()).status == JobStatus::active;
    // The earliest timer: the queue's lease sweep (its visibility timeout) or the delayed job's
    // hour; the clock has not moved since the add.
    const std::optional<Duration> next = engine.next_timer_in();
    const bool cancelled = engine.cancel(delayed);
    ok = active && next && *next > 0ns && *next <= 1h && cancelled;
    done.set_value();
  });
  (void)q.add("now", 1);
  ASSERT_EQ(done.get_future().wait_for(30s), std::future_status::ready);
  EXPECT_TRUE(ok.load());
  EXPECT_EQ(q.state(delayed).status, JobStatus::cancelled);
}

TEST(Lifecycle, ShutdownFromAnObserverDoesNotWaitForItsOwnDelivery) {
  // The observer of `started` runs on the worker delivering that job, before its handler: a
  // shutdown from there must not wait its grace for the delivery it is part of.
  test::Watchdog watchdog(60s, "ShutdownFromAnObserverDoesNotWaitForItsOwnDelivery");
  Engine engine;
  auto q = engine.declare_queue<int>("q", {});
  std::promise<ShutdownReport> report;
  std::atomic<bool> asked{false};
  engine.on_event([&](const Event& e) {
    if (e.kind != EventKind::started || asked.exchange(true)) return;
    report.set_value(engine.shutdown(1h));  // would wait an hour for this very delivery
  });
  q.process({}, [](Job<int>&) {});
  const JobId id = q.add("a", 1).id;
  auto f = report.get_future();
  ASSERT_EQ(f.wait_for(30s), std::future_status::ready);
  EXPECT_TRUE(contains(f.get().still_running, id));
}

TEST(Lifecycle, WaitIdleFromAnObserverOnAWorkerThrowsWouldDeadlock) {
  test::Watchdog watchdog(60s, "DrainFromAnObserverOnAWorkerThrowsWouldDeadlock");
  Engine engine;
  auto q = engine.declare_queue<int>("q", {});
  std::atomic<int> code{-1};
  engine.on_event([&](const Event& e) {
    if (e.kind != EventKind::completed) return;
    try {
      (void)q.wait_idle(1h);
      code = 0;
    } catch (const Error& err) {
      code = static_cast<int>(err.code());
    }
  });
  q.process({}, [](Job<int>&) {});
  (void)q.add("a", 1);
  ASSERT_TRUE(eventually([&] { return code.load() != -1; }));
  EXPECT_EQ(code.load(), static_cast<int>(ErrorCode::would_deadlock));
}

// An `added` event's observers run before the job is published: a wait from one of them
// would wait for itself (plain), or answer idle with the job in flight (delayed).
TEST(Lifecycle, WaitIdleFromAnObserverOfTheQueuesOwnAddThrowsWouldDeadlock) {
  test::Watchdog watchdog(60s, "WaitIdleFromAnObserverOfTheQueuesOwnAddThrowsWouldDeadlock");
  Engine engine;
  auto q = engine.declare_queue<int>("q", {});
  std::vector<int> codes;  // the observer runs on this thread (the producer's)
  engine.on_event([&](const Event& e) {
    if (e.kind != EventKind::added) return;
    try {
      (void)q.wait_idle(1h);
      codes.push_back(0);
    } catch (const Error& err) {
      codes.push_back(static_cast<int>(err.code()));
    }
  });
  q.process({}, [](Job<int>&) {});
  (void)q.add("a", 1);
  JobOptions later;
  later.delay = 1h;
  (void)q.add("b", 2, later);
  const int deadlock = static_cast<int>(ErrorCode::would_deadlock);
  EXPECT_EQ(codes, (std::vector<int>{deadlock, deadlock}));
  EXPECT_FALSE(q.wait_idle(0s)) << "the delayed job is still in flight";
}

// Shutdown against workers between popping a ready job and starting it: every job is either
// run or handed back by take_leftovers, never both, and none that shutdown reported as not
// started runs.
TEST(Lifecycle, TakeLeftoversNeverHandsBackAJobThatRuns) {
  test::Watchdog watchdog(120s, "TakeLeftoversNeverHandsBackAJobThatRuns");
  for (int round = 0; round < 40; ++round) {
    constexpr int kJobs = 2000;
    std::vector<std::atomic<int>> ran(kJobs + 1);
    Engine engine;
    auto q = engine.declare_queue<int>("q", QueueOptions{.capacity = 4096});
    q.process({.concurrency = 3}, [&](Job<int>& j) { ran[j.data()].fetch_add(1); });
    std::vector<JobId> ids(kJobs + 1);
    for (int i = 1; i <= kJobs; ++i)
      ids[i] = q.add("a", i).id;
    const ShutdownReport report = engine.shutdown(0s);
    std::vector<Leftover<int>> taken = q.take_leftovers();
    // The handlers that had started finish (drain would wait for the jobs put back as well).
    ASSERT_TRUE(eventually([&] { return q.counts().active == 0; }));
    std::vector<int> handed(kJobs + 1, 0);
    for (const auto& l : taken)
      ++handed[l.data];
    for (int i = 1; i <= kJobs; ++i) {
      ASSERT_LE(ran[i].load() + handed[i], 1) << "job " << i << " ran and was handed back";
      if (contains(report.not_started, ids[i])) {
        ASSERT_EQ(ran[i].load(), 0) << "job " << i << " was reported not started, then ran";
      }
    }
    // Whatever neither ran nor came back is waiting again (a worker that activated it after
    // the stop puts it back) and comes back on a later call. Such a worker counts nothing as
    // started, so `active == 0` above does not wait for it: its put-back may still be a few
    // instructions away, hence the repeated calls (the CI saw one land after a second call).
    const auto all_accounted = [&] {
      for (const auto& l : q.take_leftovers())
        ++handed[l.data];
      for (int i = 1; i <= kJobs; ++i)
        if (ran[i].load() + handed[i] != 1) return false;
      return true;
    };
    (void)eventually(all_accounted, std::chrono::seconds(10));
    for (int i = 1; i <= kJobs; ++i)
      ASSERT_EQ(ran[i].load() + handed[i], 1) << "job " << i << " was lost, round " << round;
  }
}

// An observer on the worker that raises a job's events may cancel that very job: from its
// failed attempt (no retry follows) or from its end (nothing left to cancel), without waiting
// for itself.
TEST(Lifecycle, AnObserverCancelsTheJobWhoseEventItIsHandling) {
  test::Watchdog watchdog(60s, "AnObserverCancelsTheJobWhoseEventItIsHandling");
  Engine engine;
  std::atomic<int> on_failure{-1}, on_end{-1}, on_cancelled{-1};
  engine.on_event([&](const Event& e) {
    if (e.kind == EventKind::attempt_failed) on_failure = engine.cancel(e.job_id);
    if (e.kind == EventKind::completed) on_end = engine.cancel(e.job_id);
    if (e.kind == EventKind::cancelled) on_cancelled = engine.cancel(e.job_id);
  });
  auto q = engine.declare_queue<int>("q", {});
  std::atomic<int> runs{0};
  q.process({}, [&](Job<int>& j) {
    runs.fetch_add(1);
    return j.data() == 1 ? Outcome::retry("fails once") : Outcome::done();
  });
  const JobId failing = q.add("a", 1, JobOptions{.max_attempts = 5}).id;
  ASSERT_TRUE(q.wait_idle(30s));
  EXPECT_EQ(on_failure.load(), 1);
  EXPECT_EQ(q.state(failing).status, JobStatus::cancelled);
  EXPECT_EQ(on_cancelled.load(), 0);  // already cancelled: nothing left to cancel
  const JobId fine = q.add("b", 2).id;
  ASSERT_TRUE(q.wait_idle(30s));
  EXPECT_EQ(on_end.load(), 0);
  EXPECT_EQ(q.state(fine).status, JobStatus::completed);
  EXPECT_EQ(runs.load(), 2);  // the cancelled job never ran again
}

// Nested: the observer of X's failed attempt cancels a sibling Z, and the observer of Z's
// `cancelled` cancels X again (a "cancel the whole group" observer): no wait on itself.
TEST(Lifecycle, AnObserverCancelsAGroupFromInsideNestedEvents) {
  test::Watchdog watchdog(60s, "AnObserverCancelsAGroupFromInsideNestedEvents");
  Engine engine;
  auto q = engine.declare_queue<int>("q", {});
  std::atomic<JobId> x{0}, z{0};
  std::atomic<int> x_cancel{-1};
  engine.on_event([&](const Event& e) {
    if (e.kind == EventKind::attempt_failed && e.job_id == x.load()) (void)engine.cancel(z.load());
    if (e.kind == EventKind::cancelled && e.job_id == z.load()) x_cancel = engine.cancel(x.load());
  });
  std::atomic<int> runs{0};
  q.pause();
  q.process({}, [&](Job<int>& j) {
    runs.fetch_add(1);
    return j.data() == 1 ? Outcome::retry("fails") : Outcome::done();
  });
  x = q.add("x", 1, JobOptions{.max_attempts = 5}).id;
  z = q.add("z", 2, JobOptions{.delay = 1h}).id;
  q.resume();
  // Ended is counted before the worker lets go of X's slot (state() says active until then).
  ASSERT_TRUE(eventually([&] {
    const QueueCounts c = q.counts();
    return c.cancelled == 2 && c.active == 0;
  }));
  EXPECT_EQ(x_cancel.load(), 1);  // X's failure was being raised: the cancel is honoured
  EXPECT_EQ(q.state(x.load()).status, JobStatus::cancelled);
  EXPECT_EQ(q.state(z.load()).status, JobStatus::cancelled);
  EXPECT_EQ(runs.load(), 1);  // X never ran again
}

// User callbacks raised while the wheel is held (a DLQ alert filed by the lease sweep) run once
// it is released, after the events raised before them: they may call back into the engine.
TEST(Lifecycle, CallbacksRaisedWhileTimersFireRunAfterTheWheelIsReleased) {
  ManualClock clock;
  detail::EngineCore core(EngineOptions{.clock = &clock, .mode = Mode::inlined});
  std::vector<std::string> order;
  core.events().add([&](const Event& e) {
    EXPECT_FALSE(core.owns_wheel());
    order.push_back("event " + std::string(e.error));
  });
  const auto ran = core.with_wheel([&](detail::Wheel&) {
    EXPECT_TRUE(core.owns_wheel());
    Event e;
    e.error = "first";
    core.emit(e);
    core.after_wheel([&] {
      EXPECT_FALSE(core.owns_wheel());
      EXPECT_TRUE(core.earliest_timer_ns() == std::nullopt);  // takes the wheel: released by now
      order.push_back("callback");
    });
    EXPECT_TRUE(order.empty());  // nothing user-supplied ran with the wheel held
    return 1;
  });
  EXPECT_EQ(ran, 1);
  EXPECT_EQ(order, (std::vector<std::string>{"event first", "callback"}));
  core.after_wheel([&] { order.push_back("at once"); });  // not owning: runs now
  EXPECT_EQ(order.back(), "at once");
}

TEST(Lifecycle, WaitIdleFromATimerObserverThrowsWouldDeadlock) {
  test::Watchdog watchdog(60s, "DrainFromATimerObserverThrowsWouldDeadlock");
  ManualClock clock;
  Engine engine({.clock = &clock});
  auto q = engine.declare_queue<int>("q", {});
  std::atomic<int> code{-1};
  std::atomic<int> observed{0};
  engine.on_event([&](const Event& e) {
    if (e.kind != EventKind::retry_due) return;
    try {
      (void)q.wait_idle(1h);
      code = 0;
    } catch (const Error& err) {
      code = static_cast<int>(err.code());
    }
    observed.fetch_add(1);  // last: the observer touches nothing of this frame after it
  });
  std::atomic<int> runs{0};
  q.process({}, [&](Job<int>&) { runs.fetch_add(1); });
  (void)q.add("a", 1, JobOptions{.delay = 1s});
  (void)q.add("b", 2, JobOptions{.delay = 1s});
  clock.advance(1s);
  // retry_due is delivered after the timer releases the wheel: a worker may run the jobs first.
  // Wait for both events, not the first: the second observer call still reads `q`, which is
  // destroyed before the engine at the end of this scope.
  ASSERT_TRUE(eventually([&] { return runs.load() == 2 && observed.load() == 2; }));
  EXPECT_EQ(code.load(), static_cast<int>(ErrorCode::would_deadlock));
}

// 10. Resident memory follows the jobs in flight, not the capacity: the free list hands out
// recycled slots before never-used ones, so a queue that never holds more than 4 jobs keeps reusing
// a few payload cells of the 1 GB it reserved (a FIFO touched every cell in turn).
std::int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

TEST_F(InlineLifecycle, ResidentMemoryFollowsTheJobsInFlightNotTheCapacity) {
#ifdef RAIL_SANITIZED
  GTEST_SKIP() << "sanitizer runtimes map shadow memory: RSS measures them, not rail";
#endif
  using Payload = std::array<char, 16384>;
  auto q = engine.declare_queue<Payload>("big", QueueOptions{.capacity = 65'536});
  std::uint64_t ran = 0;
  q.process({}, [&](Job<Payload>& j) { ran += static_cast<unsigned char>(j.data()[0]) + 1u; });
  const std::int64_t before = resident_bytes();
  Payload p{};
  for (int i = 0; i < 5'000; ++i) {
    for (int k = 0; k < 4; ++k)
      ASSERT_EQ(q.add("job", p).status, AddStatus::added);
    ASSERT_EQ(engine.run_until_idle(), 4u);
  }
  const std::int64_t growth = resident_bytes() - before;
  EXPECT_EQ(ran, 20'000u);
  // 20,000 jobs through distinct cells would be 320 MB; the few reused cells are 64 KB.
  EXPECT_LT(growth, 32 << 20) << "resident memory grew by " << growth << " bytes";
}

// Review of the queue split: process() on an inline engine while another thread advances its
// ManualClock. The advance fires timers and runs every queue's lease check (sweep_inline), which
// read the lease tracker pointer that process() is writing: a data race that ThreadSanitizer
// reports (run this test under the tsan preset). The check must go through processing(), which
// start_processing() publishes (release) after the tracker is built.
TEST(Lifecycle, ProcessWhileAnotherThreadAdvancesTheManualClock) {
  test::Watchdog watchdog(60s, "ProcessWhileAnotherThreadAdvancesTheManualClock");
  for (int round = 0; round < 50; ++round) {
    ManualClock clock;
    Engine engine({.clock = &clock, .mode = Mode::inlined});
    QueueOptions o;
    o.capacity = 8;
    o.visibility_timeout = 1ms;
    auto q = engine.declare_queue<std::string>("q", o);
    const JobId id = q.add("job", kPayload).id;
    std::atomic<bool> advancing{false};
    std::thread advancer([&] {
      for (int i = 0; i < 200; ++i) {
        clock.advance(1ms);
        advancing.store(true);
      }
    });
    while (!advancing.load())
      std::this_thread::yield();
    q.process({}, [](Job<std::string>& job) { EXPECT_EQ(job.data(), kPayload); });
    advancer.join();
    engine.run_until_idle();
    EXPECT_EQ(q.state(id).status, JobStatus::completed);
  }
}

}  // namespace
}  // namespace rail
