// Coroutine handlers (issue 14): a handler written as a coroutine returning rail::Task co_awaits
// its async work without holding a worker, and its co_return completes the job. Pinned under the
// manual clock of an inline engine (suspension, resumption from another thread, throws, a lease
// lapsing while suspended, results, bad options), then with 1,000 coroutines in flight on two
// worker threads resumed in random order by two "I/O" threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <coroutine>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "rail/rail.hpp"
#include "support/downstream_options.hpp"
#include "support/ended_jobs.hpp"
#include "support/eventually.hpp"
#include "support/inline_engine.hpp"
#include "support/watchdog.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;
using Tasks = test::InlineEngine;

/// Pending calls of a simulated async client: `co_await calls` parks the coroutine; answer()
/// resumes the parked ones (from whichever thread calls it), as a client's I/O thread would.
class SimulatedCalls {
 public:
  struct Awaiter {
    SimulatedCalls& calls;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) {
      const std::lock_guard lock(calls.mu_);
      calls.parked_.push_back(h);
    }
    void await_resume() const noexcept {}
  };
  Awaiter operator co_await() noexcept { return Awaiter{*this}; }

  [[nodiscard]] std::size_t parked() const {
    const std::lock_guard lock(mu_);
    return parked_.size();
  }
  /// answer(rng): resumes every parked coroutine, in random order if rng is given; returns how
  /// many. A coroutine resumed here may park again (a second call).
  /// drop(): destroys every parked coroutine without resuming it (a client that gave up).
  std::size_t drop() {
    std::vector<std::coroutine_handle<>> batch;
    {
      const std::lock_guard lock(mu_);
      batch.swap(parked_);
    }
    for (auto h : batch)
      h.destroy();
    return batch.size();
  }
  std::size_t answer(std::mt19937* rng = nullptr) {
    std::vector<std::coroutine_handle<>> batch;
    {
      const std::lock_guard lock(mu_);
      batch.swap(parked_);
    }
    if (rng != nullptr) std::shuffle(batch.begin(), batch.end(), *rng);
    for (auto h : batch)
      h.resume();
    return batch.size();
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::coroutine_handle<>> parked_;
};

TEST_F(Tasks, ACoroutineHoldsNoWorkerWhileSuspendedAndItsCoReturnCompletesTheJob) {
  auto q = engine.declare_queue<int>("emails", {});
  SimulatedCalls calls;
  std::vector<int> read_after_resume;
  q.process({.max_pending = 8}, [&](AsyncJob<int> job) -> Task {
    co_await calls;
    read_after_resume.push_back(job.data());  // the payload outlives the handler call
    co_return Outcome::done();
  });
  const JobId a = q.add("send", 7).id;
  const JobId b = q.add("send", 8).id;
  EXPECT_EQ(engine.run_until_idle(), 2u) << "both handlers returned at their first co_await";
  EXPECT_EQ(calls.parked(), 2u);
  EXPECT_EQ(q.counts().active, 2u) << "a suspended coroutine's job counts as active";
  EXPECT_EQ(q.state(a).status, JobStatus::active);
  EXPECT_EQ(count(EventKind::completed), 0u);

  std::thread([&] { calls.answer(); }).join();  // the client's I/O thread resumes them
  EXPECT_EQ(read_after_resume, (std::vector<int>{7, 8}));
  EXPECT_EQ(q.counts().active, 0u);
  EXPECT_EQ(q.counts().completed, 2u);
  EXPECT_EQ(of(EventKind::completed, a).size(), 1u);
  EXPECT_EQ(of(EventKind::completed, b).size(), 1u);
}

TEST_F(Tasks, TheJobEndsOnlyAfterTheCoroutinesLocalsAreDestroyed) {
  auto q = engine.declare_queue<int>("emails", {});
  SimulatedCalls calls;
  std::vector<std::uint64_t> completed_when_locals_died;
  std::vector<int> payload_read_by_a_local;
  q.process({.max_pending = 2}, [&](AsyncJob<int> job) -> Task {
    struct Guard {  // a scope guard that reads the job as it goes
      const AsyncJob<int>& job;
      Queue<int>& q;
      std::vector<std::uint64_t>& completed;
      std::vector<int>& payloads;
      ~Guard() {
        completed.push_back(q.counts().completed);
        payloads.push_back(job.data());
      }
    } guard{job, q, completed_when_locals_died, payload_read_by_a_local};
    co_await calls;
    co_return Outcome::done();
  });
  const JobId id = q.add("send", 5).id;
  engine.run_until_idle();
  calls.answer();
  EXPECT_EQ(completed_when_locals_died, (std::vector<std::uint64_t>{0}))
      << "the job completed while the coroutine's locals still ran";
  EXPECT_EQ(payload_read_by_a_local, (std::vector<int>{5}));
  EXPECT_EQ(q.state(id).status, JobStatus::completed);
}

TEST_F(Tasks, ACoroutineDestroyedWithoutResumingFailsItsAttemptAndTheJobIsRetried) {
  auto q = engine.declare_queue<int>("emails", {.defaults = {.max_attempts = 2}});
  SimulatedCalls calls;
  q.process({.max_pending = 2}, [&](AsyncJob<int> job) -> Task {
    if (job.attempt() == 1) co_await calls;  // a client that gives up on it
    co_return Outcome::done();
  });
  const JobId id = q.add("send", 1).id;
  engine.run_until_idle();
  EXPECT_EQ(calls.drop(), 1u);
  engine.run_until_idle();  // the dropped Completion failed attempt 1: attempt 2 completes
  ASSERT_EQ(of(EventKind::attempt_failed, id).size(), 1u);
  EXPECT_EQ(q.state(id).status, JobStatus::completed);
  EXPECT_EQ(q.counts().active, 0u);
}

TEST_F(Tasks, GenericSynchronousHandlersStaySynchronous) {
  // A generic lambda could also take an AsyncJob<T>: one that takes a Job<T>& is synchronous,
  // as before coroutine handlers existed.
  auto a = engine.declare_queue<int>("a", {});
  auto b = engine.declare_queue<int>("b", {});
  a.process({},
            [](const auto& job) { return job.data() > 0 ? Outcome::done() : Outcome::fail("0"); });
  b.process({}, [](auto&& job) { job.progress(50); });
  const JobId x = a.add("send", 1).id;
  const JobId y = b.add("send", 1).id;
  engine.run_until_idle();
  EXPECT_EQ(a.state(x).status, JobStatus::completed);
  EXPECT_EQ(b.state(y).status, JobStatus::completed);
}

TEST_F(Tasks, ACoroutineThatNeverSuspendsCompletesBeforeItsHandlerCallReturns) {
  auto q = engine.declare_queue<int>("emails", {});
  q.process({.max_pending = 1}, [](AsyncJob<int> job) -> Task {
    co_return job.data() > 0 ? Outcome::done() : Outcome::discard("nothing to send");
  });
  const JobId sent = q.add("send", 1).id;
  const JobId dropped = q.add("send", 0).id;
  EXPECT_EQ(engine.run_until_idle(), 2u);
  EXPECT_EQ(q.state(sent).status, JobStatus::completed);
  EXPECT_EQ(q.state(dropped).status, JobStatus::discarded);
  EXPECT_EQ(q.counts().active, 0u);
}

TEST_F(Tasks, AThrowAfterResumingIsARetryableFailureAndAnUnrecoverableErrorFailsTheJob) {
  auto q = engine.declare_queue<int>(
      "charges", {.defaults = {.max_attempts = 3, .backoff = Backoff::fixed(1s)}});
  SimulatedCalls calls;
  std::vector<std::string> seen_errors;
  q.process({.max_pending = 4}, [&](AsyncJob<int> job) -> Task {
    seen_errors.emplace_back(job.last_error());
    co_await calls;
    if (job.attempt() == 1) throw std::runtime_error("gateway timeout");
    throw UnrecoverableError("card declined");
  });
  const JobId id = q.add("charge", 1).id;
  engine.run_until_idle();
  calls.answer();  // attempt 1 throws: retried after its backoff
  EXPECT_EQ(q.counts().failed_attempts, 1u);
  EXPECT_EQ(q.state(id).status, JobStatus::delayed);
  clock.advance(1s);
  engine.run_until_idle();
  calls.answer();  // attempt 2 throws UnrecoverableError: dead-lettered, attempt 3 skipped
  auto entry = q.dlq().get(id);
  ASSERT_TRUE(entry);
  EXPECT_EQ(entry->reason, DeadLetterReason::permanent_failure);
  ASSERT_EQ(entry->errors.size(), 2u);
  EXPECT_EQ(entry->errors[0].message, "gateway timeout");
  EXPECT_EQ(entry->errors[1].message, "card declined");
  EXPECT_EQ(seen_errors, (std::vector<std::string>{"", "gateway timeout"}))
      << "the second attempt read the first's error through its AsyncJob";
  EXPECT_EQ(q.counts().active, 0u);
}

TEST_F(Tasks, ALeaseLapsingWhileSuspendedDeliversTheJobAgainAndFencesTheLateCoReturn) {
  auto q = engine.declare_queue<int>("calls", {.visibility_timeout = 30s});
  SimulatedCalls calls;
  std::vector<bool> cancelled_on_resume;
  q.process({.max_pending = 4}, [&](AsyncJob<int> job) -> Task {
    co_await calls;
    cancelled_on_resume.push_back(job.cancelled());
    co_return job.deliveries() == 1 ? Outcome::fail("too late") : Outcome::done();
  });
  const JobId id = q.add("call", 1).id;
  engine.run_until_idle();
  clock.advance(30s);  // the suspended delivery's lease lapses: the job is delivered again
  engine.run_until_idle();
  EXPECT_EQ(count(EventKind::stalled), 1u);
  ASSERT_EQ(calls.parked(), 2u) << "the first coroutine and the redelivery's, both suspended";
  calls.answer();  // the stale one first: its fail is fenced; then the redelivery completes
  EXPECT_EQ(cancelled_on_resume, (std::vector<bool>{true, false}));
  EXPECT_EQ(q.counts().late_outcomes, 1u);
  EXPECT_EQ(q.counts().dead_lettered, 0u) << "the late failure did not count";
  EXPECT_EQ(q.state(id).status, JobStatus::completed);
  EXPECT_EQ(q.counts().active, 0u);
}

TEST_F(Tasks, ACoroutineExtendsItsLeaseAcrossALongCall) {
  auto q = engine.declare_queue<int>("calls", {.visibility_timeout = 30s});
  SimulatedCalls calls;
  q.process({.max_pending = 1}, [&](AsyncJob<int> job) -> Task {
    co_await calls;
    EXPECT_TRUE(job.extend_lease(60s)) << "the heartbeat of a long call";
    co_await calls;
    co_return Outcome::done();
  });
  const JobId id = q.add("call", 1).id;
  engine.run_until_idle();
  clock.advance(20s);
  calls.answer();      // first half done at 20 s: the lease now ends at 80 s
  clock.advance(50s);  // 70 s: past the first lease, inside the renewed one
  engine.run_until_idle();
  EXPECT_EQ(count(EventKind::stalled), 0u);
  calls.answer();
  EXPECT_EQ(q.state(id).status, JobStatus::completed);
}

TEST_F(Tasks, AResultQueuesCoroutineCoReturnsItsResult) {
  auto q = engine.declare_queue<int, std::string>("quotes", {});
  SimulatedCalls calls;
  q.process({.max_pending = 2}, [&](AsyncJob<int> job) -> Task {
    co_await calls;
    if (job.data() < 0) co_return Outcome::fail("no quote for a negative amount");
    co_return Result<std::string>(std::to_string(job.data()) + " EUR");
  });
  const JobId quoted = q.add("quote", 19).id;
  const JobId refused = q.add("quote", -1).id;
  engine.run_until_idle();
  calls.answer();
  auto end = q.end_of(quoted);
  ASSERT_TRUE(end && end->result);
  EXPECT_EQ(*end->result, "19 EUR");
  ASSERT_TRUE(q.dlq().get(refused));
  EXPECT_EQ(q.dlq().get(refused)->reason, DeadLetterReason::permanent_failure);
}

TEST_F(Tasks, ACoroutineHandlerWithoutMaxPendingIsRefusedNamingTheOption) {
  auto q = engine.declare_queue<int>("emails", {});
  try {
    q.process({}, [](AsyncJob<int>) -> Task { co_return Outcome::done(); });
    FAIL() << "process() accepted a coroutine handler with max_pending 0";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find("max_pending"), std::string::npos) << e.what();
  }
  q.process({.max_pending = 1}, [](AsyncJob<int>) -> Task { co_return Outcome::done(); });
  const JobId id = q.add("send", 1).id;
  engine.run_until_idle();
  EXPECT_EQ(q.state(id).status, JobStatus::completed) << "the refused call left no processor";
}

TEST_F(Tasks, MoreCoroutinesThanMaxPendingFailTheExtraAttemptsWithACapacityError) {
  auto q = engine.declare_queue<int>("emails", {.defaults = {.max_attempts = 1}});
  SimulatedCalls calls;
  q.process({.max_pending = 1}, [&](AsyncJob<int>) -> Task {
    co_await calls;
    co_return Outcome::done();
  });
  const JobId first = q.add("send", 1).id;
  const JobId second = q.add("send", 2).id;
  engine.run_until_idle();
  auto entry = q.dlq().get(second);
  ASSERT_TRUE(entry) << "the second job found no pending record";
  EXPECT_NE(entry->last_error().find("max_pending"), std::string::npos) << entry->last_error();
  calls.answer();
  EXPECT_EQ(q.state(first).status, JobStatus::completed);
}

// An engine destroyed while a coroutine is parked: resumed later, the coroutine finds its
// delivery cancelled, its captures and its copied facts alive (ASan is the judge of the latter),
// and its co_return does nothing.
TEST(TaskLifetime, ACoroutineResumedAfterItsEngineIsGoneIsCancelledAndKeepsItsCaptures) {
  SimulatedCalls calls;
  std::vector<std::string> seen;
  {
    ManualClock clock;
    Engine engine{EngineOptions{.clock = &clock, .mode = Mode::inlined}};
    auto q = engine.declare_queue<int>("a-queue-with-a-name-longer-than-sso", {});
    q.process({.max_pending = 1},
              [&seen, &calls, greeting = std::string(64, 'g')](AsyncJob<int> job) -> Task {
                co_await calls;
                seen.push_back(job.cancelled() ? "cancelled" : "live");
                seen.push_back(greeting.substr(0, 3));
                seen.emplace_back(job.queue());
                co_return Outcome::done();
              });
    (void)q.add("send", 1);
    engine.run_until_idle();
    ASSERT_EQ(calls.parked(), 1u);
  }  // the engine (and the queue's handler) are destroyed here
  calls.answer();
  EXPECT_EQ(seen,
            (std::vector<std::string>{"cancelled", "ggg", "a-queue-with-a-name-longer-than-sso"}));
}

// Two worker threads start 1,000 coroutines that each make two calls; two "I/O" threads resume
// them in random order. Every job completes once, the pending ones count as active, and the
// downstream's concurrency (750) counts coroutines in flight, not threads.
TEST(TaskThreads, AThousandCoroutinesInFlightOnTwoWorkerThreads) {
  const test::Watchdog watchdog(120s, "AThousandCoroutinesInFlightOnTwoWorkerThreads");
  constexpr int kJobs = 1000;
  Engine engine;
  auto partner = engine.declare_downstream("partner", {.concurrency = 3 * kJobs / 4});
  auto q = engine.declare_queue<int>("calls", test::calling("partner"));
  SimulatedCalls calls;
  std::atomic<int> started{0};
  std::atomic<int> second_calls{0};
  q.process({.concurrency = 2, .max_pending = kJobs}, [&](AsyncJob<int> job) -> Task {
    started.fetch_add(1);
    co_await calls;
    if (job.data() % 2 == 0) {
      second_calls.fetch_add(1);
      co_await calls;
    }
    co_return Outcome::done();
  });
  for (int i = 0; i < kJobs; ++i)
    ASSERT_EQ(q.add("call", i).status, AddStatus::added);
  // Two threads hold 750 calls in flight, the downstream's limit; the rest wait for permits.
  constexpr int kLimit = 3 * kJobs / 4;
  ASSERT_TRUE(test::eventually([&] { return calls.parked() == kLimit; }));
  EXPECT_EQ(q.counts().active, static_cast<std::uint64_t>(kLimit));
  EXPECT_EQ(partner.stats().in_flight, static_cast<std::uint32_t>(kLimit));
  auto answer = [&](unsigned seed) {
    std::mt19937 rng(seed);
    // Until every job ended: one dead-lettered fails the expectations below, not the watchdog.
    while (test::ended_jobs(q.counts()) < kJobs) {
      calls.answer(&rng);
      std::this_thread::yield();
    }
  };
  std::thread a(answer, 1u), b(answer, 2u);
  a.join();
  b.join();
  EXPECT_EQ(started.load(), kJobs);
  EXPECT_EQ(second_calls.load(), kJobs / 2);
  const QueueCounts c = q.counts();
  EXPECT_EQ(c.completed, static_cast<std::uint64_t>(kJobs));
  EXPECT_EQ(c.active, 0u);
  EXPECT_EQ(c.failed_attempts, 0u);
  EXPECT_EQ(partner.stats().in_flight, 0u);
}

}  // namespace
}  // namespace rail
