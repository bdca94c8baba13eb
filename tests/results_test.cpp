// Job results, waiting on a job's end and retained ends (issue: results, progress, waiting).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "rail/rail.hpp"
#include "support/eventually.hpp"
#include "support/inline_engine.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;
using test::InlineEngine;

struct Order {
  std::string id;
  double amount = 0;
};
struct Receipt {
  std::string order_id;
  double charged = 0;
};
std::ostream& operator<<(std::ostream& os, const Receipt& r) {
  return os << "{ charged: " << r.charged << ", orderId: '" << r.order_id << "' }";
}
struct Opaque {  // no operator<<: its results show no text
  int n = 0;
};

struct Results : InlineEngine {
  std::vector<std::string> completed_texts;
  void SetUp() override {
    InlineEngine::SetUp();
    engine.on_event([this](const Event& e) {
      if (e.kind == EventKind::completed) completed_texts.emplace_back(e.result);
    });
  }
};

TEST_F(Results, AHandlersResultReachesItsHandleAndTheCompletedEvent) {
  auto q = engine.declare_queue<Order, Receipt>("charges", QueueOptions{});
  q.process({}, [](Job<Order>& j) -> Result<Receipt> {
    return Receipt{j.data().id, j.data().amount};
  });
  JobHandle<Receipt> h = q.add_tracked("charge-card", Order{"order-2", 19.99});
  EXPECT_EQ(h.added().status, AddStatus::added);
  EXPECT_FALSE(h.ended().has_value()) << "nothing ran yet";
  const JobEnd<Receipt> end = h.wait();  // inline: drives run_until_idle
  ASSERT_TRUE(end.completed());
  ASSERT_TRUE(end.result);
  EXPECT_EQ(end.result->order_id, "order-2");
  EXPECT_EQ(end.result->charged, 19.99);
  EXPECT_EQ(end.attempt, 1u);
  EXPECT_EQ(completed_texts, (std::vector<std::string>{"{ charged: 19.99, orderId: 'order-2' }"}));
}

TEST_F(Results, AResultThatCannotBePrintedLeavesTheEventTextEmpty) {
  auto q = engine.declare_queue<int, Opaque>("opaque", QueueOptions{});
  q.process({}, [](Job<int>& j) -> Result<Opaque> { return Opaque{j.data() * 2}; });
  auto h = q.add_tracked("double", 21);
  EXPECT_EQ(h.wait().result->n, 42);
  EXPECT_EQ(completed_texts, (std::vector<std::string>{""}));
}

TEST_F(Results, RetriesThenAResultAndWaitSaysWhenOnlyTheClockCanEndTheJob) {
  auto q = engine.declare_queue<Order, Receipt>("charges", QueueOptions{});
  int calls = 0;
  q.process({}, [&](Job<Order>& j) -> Result<Receipt> {
    if (++calls < 3) return Outcome::retry("gateway timeout");
    return Receipt{j.data().id, j.data().amount};
  });
  JobOptions o;
  o.max_attempts = 3;
  o.backoff = Backoff::fixed(1s);
  auto h = q.add_tracked("charge-card", Order{"order-2", 5}, o);
  try {
    (void)h.wait();
    FAIL() << "wait() returned while the retry waited for the clock";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::would_deadlock);
    EXPECT_NE(std::string(e.what()).find("advance"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(h.wait_for(1h).has_value()) << "inline: only what can run now";
  clock.advance(1s);
  EXPECT_FALSE(h.wait_for(0s).has_value()) << "the second attempt failed too";
  clock.advance(1s);
  const auto end = h.wait_for(0s);
  ASSERT_TRUE(end && end->completed());
  EXPECT_EQ(end->attempt, 3u);
  EXPECT_EQ(end->result->order_id, "order-2");
}

TEST_F(Results, ADeadLetteredJobsHandleCarriesTheReasonAndEveryError) {
  auto q = engine.declare_queue<Order, Receipt>("charges", QueueOptions{});
  q.process({}, [](Job<Order>& j) -> Result<Receipt> {
    return Outcome::retry("declined #" + std::to_string(j.attempt()));
  });
  JobOptions o;
  o.max_attempts = 2;
  auto h = q.add_tracked("charge-card", Order{"order-3", 1}, o);
  const auto end = h.wait();
  EXPECT_EQ(end.status, JobStatus::dead_lettered);
  EXPECT_EQ(end.reason, DeadLetterReason::attempts_exhausted);
  EXPECT_FALSE(end.result);
  ASSERT_EQ(end.errors.size(), 2u);
  EXPECT_EQ(end.errors[0].message, "declined #1");
  EXPECT_EQ(end.error, "declined #2");
  EXPECT_TRUE(q.dlq().get(h.id()).has_value()) << "the entry is filed when the waiter hears";
}

TEST_F(Results, CancelledAndDiscardedJobsEndTheirHandlesSo) {
  auto q = engine.declare_queue<int, int>("q", QueueOptions{});
  q.process({}, [](Job<int>& j) -> Result<int> {
    if (j.data() == 2) return Outcome::discard("refunded meanwhile");
    return j.data();
  });
  JobOptions later;
  later.delay = 1h;
  auto cancelled = q.add_tracked("later", 1, later);
  auto discarded = q.add_tracked("now", 2);
  ASSERT_TRUE(q.cancel(cancelled.id()));
  EXPECT_EQ(cancelled.ended()->status, JobStatus::cancelled) << "at once, no run needed";
  const auto d = discarded.wait();
  EXPECT_EQ(d.status, JobStatus::discarded);
  EXPECT_EQ(d.error, "refunded meanwhile");
}

TEST_F(Results, DoneWithoutAResultDeadLettersAtOnceSayingSo) {
  auto q = engine.declare_queue<int, int>("q", QueueOptions{});
  q.process({}, [](Job<int>&) -> Result<int> { return Outcome::done(); });
  JobOptions o;
  o.max_attempts = 3;
  auto h = q.add_tracked("x", 1, o);
  const auto end = h.wait();
  EXPECT_EQ(end.status, JobStatus::dead_lettered);
  EXPECT_EQ(end.reason, DeadLetterReason::permanent_failure) << "a bug: not retried";
  EXPECT_EQ(end.attempt, 1u);
  EXPECT_NE(end.error.find("without a result"), std::string::npos) << end.error;
}

TEST_F(Results, OnEndRunsOnceWhenTheJobEndsOrAtOnceIfItHas) {
  auto q = engine.declare_queue<int, int>("q", QueueOptions{});
  q.process({}, [](Job<int>& j) -> Result<int> { return j.data() + 1; });
  auto h = q.add_tracked("x", 1);
  std::vector<int> seen;
  h.on_end([&](const JobEnd<int>& e) { seen.push_back(*e.result); });
  EXPECT_TRUE(seen.empty());
  engine.run_until_idle();
  EXPECT_EQ(seen, (std::vector<int>{2}));
  h.on_end([&](const JobEnd<int>& e) { seen.push_back(*e.result * 10); });
  EXPECT_EQ(seen, (std::vector<int>{2, 20}));
}

TEST_F(Results, RetentionKeepsTheLastNAndDropsThoseOlderThanMaxAge) {
  QueueOptions qo;
  qo.keep_ended = {.keep_completed = 2, .keep_failed = 1, .max_age = 10min};
  auto q = engine.declare_queue<int, int>("q", qo);
  q.process({}, [](Job<int>& j) -> Result<int> {
    if (j.data() < 0) return Outcome::fail("negative");
    return j.data() * 10;
  });
  std::vector<JobId> ids;
  for (int v : {1, 2, 3, -1, -2})
    ids.push_back(q.add("x", v).id);
  engine.run_until_idle();
  EXPECT_FALSE(q.end_of(ids[0])) << "pushed out by the count";
  ASSERT_TRUE(q.end_of(ids[1]));
  EXPECT_EQ(*q.end_of(ids[1])->result, 20);
  EXPECT_EQ(*q.end_of(ids[2])->result, 30);
  EXPECT_FALSE(q.end_of(ids[3])) << "failed ones have their own count";
  EXPECT_EQ(q.end_of(ids[4])->status, JobStatus::dead_lettered);

  clock.advance(11min);
  const JobId fresh = q.add("x", 4).id;
  engine.run_until_idle();
  EXPECT_FALSE(q.end_of(ids[2])) << "older than max_age once the next end is recorded";
  EXPECT_FALSE(q.end_of(ids[4]));
  EXPECT_EQ(*q.end_of(fresh)->result, 40);
}

TEST_F(Results, AQueueWithAResultTypeRetainsByDefaultAndAPlainOneDoesNot) {
  auto with = engine.declare_queue<int, int>("with", QueueOptions{});
  auto plain = engine.declare_queue<int>("plain", QueueOptions{});
  with.process({}, [](Job<int>& j) -> Result<int> { return j.data(); });
  plain.process({}, [](Job<int>&) {});
  const JobId a = with.add("x", 7).id;
  const JobId b = plain.add("x", 7).id;
  engine.run_until_idle();
  EXPECT_EQ(*with.end_of(a)->result, 7);
  EXPECT_FALSE(plain.end_of(b)) << "nothing retained, nothing paid per job";
  // By id, the queue's history still tells how it ended (without a result).
  const auto end = plain.track(b).ended();
  ASSERT_TRUE(end);
  EXPECT_EQ(end->status, JobStatus::completed);
}

TEST_F(Results, TrackingAnUnknownIdEndsAtOnceWithStatusUnknown) {
  auto q = engine.declare_queue<int>("q", QueueOptions{});
  const auto end = q.track(12345).wait_for(0s);
  ASSERT_TRUE(end);
  EXPECT_EQ(end->status, JobStatus::unknown);
  EXPECT_NE(end->error.find("12345"), std::string::npos) << end->error;
}

TEST_F(Results, ADuplicatesHandleReportsTheJobItMergedInto) {
  auto q = engine.declare_queue<int, int>("q", QueueOptions{});
  q.process({}, [](Job<int>& j) -> Result<int> { return j.data(); });
  JobOptions o;
  o.dedup.id = "user-7";
  auto first = q.add_tracked("sync", 1, o);
  auto second = q.add_tracked("sync", 2, o);
  EXPECT_EQ(second.added().status, AddStatus::duplicate);
  EXPECT_EQ(second.id(), first.id());
  EXPECT_EQ(*second.wait().result, 1) << "the kept job's result";
}

TEST_F(Results, LookingAQueueUpWithAnotherResultTypeIsATypeMismatch) {
  (void)engine.declare_queue<int, int>("q", QueueOptions{});
  EXPECT_EQ((engine.queue<int, int>("q").name()), "q");
  try {
    (void)engine.queue<int>("q");
    FAIL() << "looked up without its result type";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::type_mismatch);
  }
}

TEST_F(Results, WaitingFromAHandlerOfAnInlineEngineThrowsWouldDeadlock) {
  auto q = engine.declare_queue<int, int>("q", QueueOptions{});
  std::optional<JobHandle<int>> other;
  ErrorCode code = ErrorCode::internal;
  q.process({}, [&](Job<int>& j) -> Result<int> {
    if (j.data() == 1) {
      try {
        (void)other->wait_for(0s);
      } catch (const Error& e) {
        code = e.code();
      }
    }
    return j.data();
  });
  other = q.add_tracked("b", 2, JobOptions{.delay = 1h});
  (void)q.add("a", 1);
  engine.run_until_idle();
  EXPECT_EQ(code, ErrorCode::would_deadlock);
}

TEST_F(Results, TheLogObserverPrintsTheResult) {
  std::ostringstream out;
  engine.on_event(make_log_observer(out, clock, LogOptions{}));
  auto q = engine.declare_queue<Order, Receipt>("charges", QueueOptions{});
  q.process({}, [](Job<Order>& j) -> Result<Receipt> {
    return Receipt{j.data().id, j.data().amount};
  });
  (void)q.add("charge-card", Order{"order-1", 42.5});
  engine.run_until_idle();
  EXPECT_NE(out.str().find("after 1 attempt(s): { charged: 42.5, orderId: 'order-1' }"),
            std::string::npos)
      << out.str();
}

TEST_F(Results, AHandleOnAJobLeftUnstartedAtShutdownEndsUnknownWithWhy) {
  auto q = engine.declare_queue<int, int>("q", QueueOptions{});
  q.process({}, [](Job<int>& j) -> Result<int> { return j.data(); });
  auto h = q.add_tracked("later", 1, JobOptions{.delay = 1h});
  const ShutdownReport report = engine.shutdown();
  ASSERT_EQ(report.not_started.size(), 1u);
  const auto end = h.wait_for(0s);
  ASSERT_TRUE(end) << "wait must not hang on a job that will never start";
  EXPECT_EQ(end->status, JobStatus::unknown);
  EXPECT_NE(end->error.find("take_leftovers"), std::string::npos) << end->error;
  EXPECT_EQ(q.take_leftovers().size(), 1u) << "and the job is still handed back";
}

TEST_F(Results, ProgressShowsInStateAndRaisesEventsAtMostOncePerInterval) {
  QueueOptions qo;
  qo.progress_interval = 100ms;
  auto q = engine.declare_queue<int>("q", qo);
  std::vector<std::optional<double>> seen;
  q.process({}, [&](Job<int>& j) {
    EXPECT_TRUE(j.progress(10));
    EXPECT_TRUE(j.progress(20));  // same instant: state() only
    seen.push_back(q.state(j.id()).progress);
    clock.advance(99ms);
    EXPECT_TRUE(j.progress(30));  // still inside the interval
    clock.advance(1ms);
    EXPECT_TRUE(j.progress(40));  // 100 ms after the last event
    seen.push_back(q.state(j.id()).progress);
    EXPECT_FALSE(j.progress(std::nan(""))) << "NaN is refused";
  });
  const JobId id = q.add("x", 1).id;
  EXPECT_FALSE(q.state(id).progress) << "nothing reported yet";
  engine.run_until_idle();
  EXPECT_EQ(seen, (std::vector<std::optional<double>>{20.0, 40.0}));
  std::vector<double> values;
  for (const auto& e : of(EventKind::progress, id))
    values.push_back(e.progress);
  EXPECT_EQ(values, (std::vector<double>{10, 40})) << "rate-limited: the first, then 100 ms on";
  EXPECT_FALSE(q.state(id).progress) << "an ended job shows none";
}

TEST_F(Results, ProgressOfADeliveryThatNoLongerCountsIsDropped) {
  auto q = engine.declare_queue<int>("q", QueueOptions{});
  std::vector<bool> accepted;
  q.process({}, [&](Job<int>& j) {
    accepted.push_back(j.progress(1));
    EXPECT_TRUE(q.cancel(j.id()));  // flags the running job: its work no longer counts
    accepted.push_back(j.progress(2));
  });
  (void)q.add("x", 1);
  engine.run_until_idle();
  EXPECT_EQ(accepted, (std::vector<bool>{true, false}));
  EXPECT_EQ(count(EventKind::progress), 1u);
}

// Threaded: every handle hears its own job's end exactly once, with its own result, while
// workers race the producers that register the handles (oversubscribed: 4 workers, 2 cores).
TEST(ResultsThreaded, EveryHandleHearsItsJobsEndOnceWithItsResult) {
  for (int round = 0; round < 5; ++round) {
    Engine engine;
    auto q = engine.declare_queue<int, int>("q", QueueOptions{.capacity = 4096});
    q.process({.concurrency = 4}, [](Job<int>& j) -> Result<int> {
      if (j.data() % 7 == 0 && j.attempt() == 1) return Outcome::retry("first try fails");
      return j.data() * 3;
    });
    constexpr int kJobs = 2000;
    JobOptions o;
    o.max_attempts = 2;
    std::vector<JobHandle<int>> handles;
    std::atomic<int> callbacks{0};
    std::mutex mu;
    std::vector<int> results;
    for (int i = 0; i < kJobs; ++i) {
      handles.push_back(q.add_tracked("x", i, o));
      handles.back().on_end([&](const JobEnd<int>& e) {
        callbacks.fetch_add(1);
        std::lock_guard lock(mu);
        results.push_back(*e.result);
      });
    }
    for (int i = 0; i < kJobs; ++i) {
      const auto end = handles[i].wait_for(30s);
      ASSERT_TRUE(end) << "round " << round << " job " << i;
      ASSERT_TRUE(end->completed());
      EXPECT_EQ(*end->result, i * 3);
    }
    EXPECT_EQ(callbacks.load(), kJobs);
    std::sort(results.begin(), results.end());
    for (int i = 0; i < kJobs; ++i)
      ASSERT_EQ(results[i], i * 3);
    engine.shutdown(1s);
  }
}

// wait_for returns after the job's on_end callbacks ran (job_handle.hpp), not as soon as the end
// is recorded: EveryHandleHearsItsJobsEndOnceWithItsResult read the callbacks' results while the
// last one still ran (ThreadSanitizer, in CI).
TEST(ResultsThreaded, WaitForReturnsOnlyAfterTheJobsCallbacksRan) {
  Engine engine;
  auto q = engine.declare_queue<int, int>("q", QueueOptions{.capacity = 16});
  std::atomic<bool> entered{false}, release{false}, finished{false};
  const auto h = q.add_tracked("x", 21);
  h.on_end([&](const JobEnd<int>&) {
    entered.store(true);
    (void)test::eventually([&] { return release.load(); });  // a slow callback
    finished.store(true);
  });
  // Only now may the job run: a job that ended before on_end() ran its callback on this
  // thread, inside on_end(), which then waited out its whole limit (CI saw it under ASan).
  q.process({}, [](Job<int>& j) -> Result<int> { return j.data() * 2; });
  ASSERT_TRUE(test::eventually([&] { return entered.load(); }));
  EXPECT_TRUE(h.ended()) << "ended() does not wait: the end is recorded";
  EXPECT_FALSE(h.wait_for(0s)) << "a callback is still running";
  release.store(true);
  const auto end = h.wait_for(30s);
  ASSERT_TRUE(end);
  EXPECT_TRUE(finished.load());
  EXPECT_EQ(*end->result, 42);
}

TEST(ResultsThreaded, WaitFromAHandlerOfTheSameQueueThrowsButWaitForIsAllowed) {
  Engine engine;
  auto q = engine.declare_queue<int, int>("q", QueueOptions{});
  std::atomic<int> wait_code{-1};
  std::atomic<bool> wait_for_ok{false};
  std::optional<JobHandle<int>> other;
  std::atomic<bool> ready{false};
  q.process({.concurrency = 2}, [&](Job<int>& j) -> Result<int> {
    if (j.data() == 1) {
      while (!ready.load())
        std::this_thread::yield();
      try {
        (void)other->wait();
      } catch (const Error& e) {
        wait_code = static_cast<int>(e.code());
      }
      wait_for_ok = other->wait_for(30s).has_value();
    }
    return j.data();
  });
  (void)q.add("a", 1);
  other = q.add_tracked("b", 2);
  ready = true;
  ASSERT_TRUE(q.wait_idle(30s));
  EXPECT_EQ(wait_code.load(), static_cast<int>(ErrorCode::would_deadlock));
  EXPECT_TRUE(wait_for_ok.load()) << "the other worker ran job 2";
}

// A wait by id registered while the job may be ending never hangs: it finds the end in the
// queue's history (or the retained end) even when the end was recorded before the waiter.
TEST(ResultsThreaded, AWaitByIdNeverHangsOnAJobThatEndedAroundIt) {
  Engine engine;
  auto q = engine.declare_queue<int>("q", QueueOptions{.capacity = 4096});
  q.process({.concurrency = 3}, [](Job<int>&) {});
  for (int i = 0; i < 3000; ++i) {
    const JobId id = q.add("x", i).id;
    const auto end = q.wait(id, 30s);
    ASSERT_TRUE(end) << "job " << i;
    ASSERT_EQ(end->status, JobStatus::completed);
  }
}

// A handle by id that registers while its job ends is the rare side of a Dekker handshake
// whose per-job side is only a compiler barrier (asymmetric_fence.hpp: the waiter's membarrier
// fences both). Either the end sees the waiter, or the waiter finds the end in the history: no
// on_end is ever lost, and none runs twice. Three workers end jobs while this thread tracks
// each right after adding it, so many registrations land inside an end.
TEST(ResultsThreaded, AnOnEndByIdRacingItsJobsEndRunsExactlyOnce) {
  Engine engine;
  auto q = engine.declare_queue<int>("q", QueueOptions{.capacity = 1 << 15});
  q.process({.concurrency = 3}, [](Job<int>&) {});
  constexpr int kJobs = 20000;
  std::vector<JobHandle<>> handles;
  handles.reserve(kJobs);
  std::vector<std::atomic<int>> heard(kJobs);
  for (int i = 0; i < kJobs; ++i) {
    const JobId id = q.add("x", i).id;
    handles.push_back(q.track(id));
    handles.back().on_end([&heard, i](const JobEnd<>&) { heard[i].fetch_add(1); });
  }
  ASSERT_TRUE(q.wait_idle(60s));
  for (int i = 0; i < kJobs; ++i) {
    // on_end runs on the ending thread before wait_idle() can see the queue empty, or on this
    // thread inside on_end() when the job had already ended.
    ASSERT_EQ(heard[i].load(), 1) << "job " << i << " of " << kJobs;
  }
}

// Review of 1555230 (helper-33): a job with a dedup id that finishes `done` while nobody waits
// skipped its clock read, and a waiter that registered during its end got a record stamped at
// the clock's epoch. The handler holds each job until this thread has seen it start, then a
// handle by id registers as the job returns, so many registrations land inside its end.
TEST(ResultsThreaded, AWaiterThatCameDuringADedupJobsEndGetsItsEndTime) {
  Engine engine;
  QueueOptions qo;
  qo.capacity = 4096;
  qo.keep_ended.keep_completed = 0;  // no retention: a record is built only for a waiter
  auto q = engine.declare_queue<int, int>("q", qo);
  std::atomic<JobId> running{0};
  std::atomic<JobId> seen{0};
  q.process({.concurrency = 1}, [&](Job<int>& j) -> Result<int> {
    running.store(j.id());
    const auto until = std::chrono::steady_clock::now() + 2ms;  // a cap, not what decides
    while (seen.load() != j.id() && std::chrono::steady_clock::now() < until) {
    }
    return j.data();
  });
  constexpr int kJobs = 3000;
  std::atomic<bool> stop{false};
  std::atomic<int> records{0};
  std::atomic<int> unstamped{0};
  std::vector<JobHandle<int>> handles;
  std::thread watcher([&] {
    JobId last = 0;
    while (!stop.load()) {
      const JobId id = running.load();
      if (id == 0 || id == last) continue;
      last = id;
      seen.store(id);
      handles.push_back(q.track(id));
      handles.back().on_end([&](const JobEnd<int>& e) {
        // Without a result the record came from the history (the job ended before the handle
        // registered), which keeps no time; with one, the end built it for this handle.
        if (!e.completed() || !e.result) return;
        records.fetch_add(1);
        if (e.ended_at.time_since_epoch().count() == 0) unstamped.fetch_add(1);
      });
    }
  });
  for (int i = 0; i < kJobs; ++i) {
    JobOptions o;
    o.dedup.id = "order-" + std::to_string(i);
    ASSERT_EQ(q.add("x", i, o).status, AddStatus::added);
  }
  ASSERT_TRUE(q.wait_idle(60s));
  stop.store(true);
  watcher.join();
  EXPECT_GT(records.load(), 0) << "no handle registered in time to get a record";
  EXPECT_EQ(unstamped.load(), 0) << "of " << records.load() << " records";
}

// Review of 1555230 (helper-32): complete() left a completed job's result in deliver()'s
// Outcome, destroyed after the attempt counted as ended, so wait_idle() could return while the
// result (which may hold a file or a lock) was still alive. The result's destructor waits for
// wait_idle() to return, up to a bound: on a correct engine wait_idle() cannot return first, so the
// bound only ends the wait; it does not decide the verdict.
struct DrainWitness {
  static inline std::atomic<bool> drained{false};
  static inline std::atomic<int> destroyed{0};
  static inline std::atomic<int> after_drain{0};
  bool live = true;
  DrainWitness() = default;
  DrainWitness(DrainWitness&& o) noexcept { o.live = false; }
  DrainWitness& operator=(DrainWitness&&) = delete;
  ~DrainWitness() {
    if (!live) return;
    const auto until = std::chrono::steady_clock::now() + 200ms;
    while (!drained.load() && std::chrono::steady_clock::now() < until)
      std::this_thread::yield();
    if (drained.load()) after_drain.fetch_add(1);
    destroyed.fetch_add(1);
  }
};

TEST(ResultsThreaded, ACompletedJobsResultIsDestroyedBeforeWaitIdleReturns) {
  Engine engine;
  QueueOptions qo;
  qo.keep_ended.keep_completed = 0;  // nobody keeps the result: it dies with the job's end
  auto q = engine.declare_queue<int, DrainWitness>("q", qo);
  q.process({.concurrency = 1}, [](Job<int>&) -> Result<DrainWitness> { return DrainWitness{}; });
  ASSERT_EQ(q.add("x", 1).status, AddStatus::added);
  ASSERT_TRUE(q.wait_idle(10s));
  DrainWitness::drained.store(true);
  EXPECT_TRUE(test::eventually([] { return DrainWitness::destroyed.load() == 1; }, 10s));
  EXPECT_EQ(DrainWitness::after_drain.load(), 0) << "wait_idle() returned before the result died";
}

// Review of 651fbbb (helper-36): complete() took the general leave() for a job with an add kept
// for after it, and left its result in deliver()'s Outcome, alive while the kept add ran (and,
// threaded, while another worker ran that add's job and wait_idle() returned). The result dies
// before the job's end goes on to its kept add, as end() has it.
struct KeptAddWitness {
  static inline const Queue<int, KeptAddWitness>* queue = nullptr;
  static inline std::vector<std::uint64_t> added_when_destroyed;
  bool live = true;
  KeptAddWitness() = default;
  KeptAddWitness(KeptAddWitness&& o) noexcept { o.live = false; }
  KeptAddWitness& operator=(KeptAddWitness&&) = delete;
  ~KeptAddWitness() {
    if (live) added_when_destroyed.push_back(queue->counts().added);
  }
};

TEST(ResultsKeptAdd, ACompletedJobsResultDiesBeforeTheAddKeptForAfterItIsMade) {
  Engine engine{EngineOptions{.mode = Mode::inlined}};
  QueueOptions qo;
  qo.keep_ended.keep_completed = 0;  // nobody wants a record: complete()'s own path
  auto q = engine.declare_queue<int, KeptAddWitness>("q", qo);
  KeptAddWitness::queue = &q;
  KeptAddWitness::added_when_destroyed.clear();
  JobOptions o;
  o.dedup.id = "user-7";
  o.dedup.keep_last_if_active = true;
  q.process({}, [&](Job<int>& j) -> Result<KeptAddWitness> {
    if (j.data() == 1) {
      EXPECT_EQ(q.add("sync", 2, o).status, AddStatus::kept);
    }
    return KeptAddWitness{};
  });
  ASSERT_EQ(q.add("sync", 1, o).status, AddStatus::added);
  engine.run_until_idle();
  EXPECT_EQ(q.counts().completed, 2u);
  EXPECT_EQ(KeptAddWitness::added_when_destroyed, (std::vector<std::uint64_t>{1, 2}))
      << "job 1's result outlived the start of its kept add (added 2 when it died)";
  KeptAddWitness::queue = nullptr;
}

// --- Review of 172ca6d (results and waiting): cases that fail on it -------------------------

// A handle from add_tracked on a job that shutdown left unstarted and take_leftovers() took:
// EndTracker::abandon exists for this ("its waiter hears `unknown`") but nothing calls it, so
// the job never ends for its handle: wait() blocks forever, wait_for() always times out.
TEST(ResultsReview, AHandleOnAJobTakenAtShutdownHearsThatItWillNotEnd) {
  Engine engine;
  auto q = engine.declare_queue<int, int>("q", QueueOptions{});
  q.process({}, [](Job<int>& j) -> Result<int> { return j.data(); });
  q.pause();
  auto h = q.add_tracked("x", 1);
  (void)engine.shutdown(0s);
  const auto left = q.take_leftovers();
  ASSERT_EQ(left.size(), 1u);
  const auto end = h.wait_for(300ms);
  ASSERT_TRUE(end) << "wait() would hang forever: the job was handed back and will never end";
  EXPECT_EQ(end->status, JobStatus::unknown);
}

// Redrive keeps the job's id, and end_of() answers from the retained end first: a handle by
// id on the redriven job, while it waits or runs again, is settled at once with the old
// dead-lettered end and never hears the new run's result.
TEST_F(Results, TrackingARedrivenJobWaitsForItsNewRun) {
  auto q = engine.declare_queue<int, int>("q", QueueOptions{});
  int calls = 0;
  q.process({}, [&](Job<int>& j) -> Result<int> {
    if (++calls == 1) return Outcome::fail("first run fails");
    return j.data() * 10;
  });
  auto h = q.add_tracked("x", 4);
  ASSERT_EQ(h.wait().status, JobStatus::dead_lettered);
  ASSERT_EQ(q.dlq().redrive(h.id()), RedriveStatus::redriven);
  auto again = q.track(h.id());
  const auto early = again.ended();
  EXPECT_FALSE(early) << "the job is waiting again, yet its handle says "
                      << (early ? std::string(to_string(early->status)) : "");
  EXPECT_FALSE(q.end_of(h.id())) << "Queue::end_of: the job runs again; the old end is stale";
  engine.run_until_idle();
  const auto end = again.ended();
  ASSERT_TRUE(end);
  EXPECT_EQ(end->status, JobStatus::completed);
  ASSERT_TRUE(end->result) << "the new run's result";
  EXPECT_EQ(*end->result, 40);
}

// The retained end of a redriven job that then completed keeps its place in the failed order
// (insert_or_assign keeps the key, not its deque): the next failures push the completed
// result out although completed ends have room.
TEST_F(Results, ARedrivenJobsCompletedEndIsRetainedAsCompleted) {
  QueueOptions qo;
  qo.keep_ended = {.keep_completed = 100, .keep_failed = 1};
  auto q = engine.declare_queue<int, int>("q", qo);
  bool fail_first = true;
  q.process({}, [&](Job<int>& j) -> Result<int> {
    if (j.data() < 0) return Outcome::fail("negative");
    if (fail_first) {
      fail_first = false;
      return Outcome::fail("first run fails");
    }
    return j.data();
  });
  const JobId a = q.add("a", 7).id;
  engine.run_until_idle();
  ASSERT_EQ(q.dlq().redrive(a), RedriveStatus::redriven);
  engine.run_until_idle();
  ASSERT_TRUE(q.end_of(a));
  ASSERT_EQ(q.end_of(a)->status, JobStatus::completed);
  (void)q.add("b", -1);  // one failure: keep_failed = 1 pushes the oldest failed id out
  engine.run_until_idle();
  ASSERT_TRUE(q.end_of(a)) << "a completed end, pushed out by a failure";
  EXPECT_EQ(*q.end_of(a)->result, 7);
}

// A handle by id registered after the ending thread read wanted() (0: no waiter, no
// retention) but while the job still held its slot: on_end() asks the history (the job is
// still `active`), registers its callback, and the end is never recorded: the callback never
// runs, and the waiter stays registered forever (wanted_ leaks). Deterministic here through
// an observer of `completed` (the window is the event); threaded, a tracker racing the
// workers hits the same window (review/race_on_end2.cpp).
TEST_F(Results, OnEndOfAHandleByIdNeverMissesTheEnd) {
  auto q = engine.declare_queue<int>("plain", QueueOptions{});
  q.process({}, [](Job<int>&) {});
  int heard = 0;
  bool tracked = false;
  engine.on_event([&](const Event& e) {
    if (e.kind != EventKind::completed || tracked) return;
    tracked = true;
    q.track(e.job_id).on_end([&](const JobEnd<>&) { ++heard; });
  });
  (void)q.add("x", 1);
  engine.run_until_idle();
  ASSERT_TRUE(tracked);
  EXPECT_EQ(heard, 1) << "the job ended; its on_end callback never ran";
}

// An add to a full queue made no job (reject: a handle already ended, unknown, saying why) or a
// DLQ entry (dead_letter: the handle reports it, reason overflow; review-results).
TEST_F(Results, AnAddToAFullQueueHasAHandleThatSaysWhatBecameOfIt) {
  for (const OnFull policy : {OnFull::reject, OnFull::dead_letter}) {
    Engine e{EngineOptions{.clock = &clock, .mode = Mode::inlined}};
    auto q = e.declare_queue<int, int>("q", QueueOptions{.capacity = 1, .on_full = policy});
    q.process({}, [](Job<int>& j) -> Result<int> { return j.data(); });
    (void)q.add("x", 1);
    auto h = q.add_tracked("x", 2);
    const auto end = h.ended();
    ASSERT_TRUE(end);
    if (policy == OnFull::reject) {
      EXPECT_EQ(h.added().status, AddStatus::full);
      EXPECT_EQ(end->status, JobStatus::unknown);
      EXPECT_NE(end->error.find("full"), std::string::npos) << end->error;
    } else {
      EXPECT_EQ(h.added().status, AddStatus::dead_lettered);
      EXPECT_EQ(end->status, JobStatus::dead_lettered);
      EXPECT_EQ(end->reason, DeadLetterReason::overflow);
    }
  }
}

// A handle from add_tracked shares its waiter with every handle by id on the job. Between the
// job leaving its slot and ended() recording its end (run_deferred runs there: a kept add and
// its `added` event), a lookup by id finds the job `completed` in the history and settles the
// shared waiter with that status-only end (record(..., false)): the add_tracked handle, sure
// to hear its job's end, gets it without its result. Threaded, any q.wait(id)/track(id) from
// another thread racing the end does the same (the window is then shorter).
TEST_F(Results, AnAddTrackedHandleGetsItsResultWhateverIsTrackedById) {
  auto q = engine.declare_queue<int, int>("q", QueueOptions{});
  JobOptions o;
  o.dedup.id = "user-7";
  o.dedup.keep_last_if_active = true;
  JobId first = 0;
  q.process({}, [&](Job<int>& j) -> Result<int> {
    if (j.data() == 1) {
      EXPECT_EQ(q.add("sync", 2, o).status, AddStatus::kept);
    }
    return j.data() * 10;
  });
  bool looked = false;
  engine.on_event([&](const Event& e) {
    if (e.kind == EventKind::added && first != 0 && e.job_id != first && !looked) {
      looked = true;
      (void)q.track(first).ended();  // e.g. a status endpoint polling job `first`
    }
  });
  auto h = q.add_tracked("sync", 1, o);
  first = h.id();
  engine.run_until_idle();
  ASSERT_TRUE(looked);
  const auto end = h.wait();
  EXPECT_EQ(end.status, JobStatus::completed);
  ASSERT_TRUE(end.result) << "add_tracked's handle heard its job completed without its result";
  EXPECT_EQ(*end.result, 10);
}

}  // namespace
}  // namespace rail
