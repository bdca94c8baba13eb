// Destroying an engine: every job it drops is accounted for (its waiters,
// EngineOptions::on_destroy, a line on stderr when nobody asked), and the handles a server keeps
// past its engine (JobHandle, Subscription) stay safe to use and to destroy.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <latch>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "rail/rail.hpp"
#include "support/watchdog.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;

/// Dropped: what on_destroy and the observers were told.
struct Dropped {
  std::mutex mu;
  std::optional<ShutdownReport> report;
  int completed = 0;
  Observer observer() {
    return [this](const Event& e) {
      std::lock_guard lock(mu);
      if (e.kind == EventKind::completed) ++completed;
    };
  }
  std::function<void(const ShutdownReport&)> callback() {
    return [this](const ShutdownReport& r) {
      std::lock_guard lock(mu);
      report = r;
    };
  }
};

std::set<JobId> ids_of(const std::vector<LeftoverJob>& jobs) {
  std::set<JobId> out;
  for (const auto& j : jobs)
    out.insert(j.id);
  return out;
}

TEST(Destroy, AnEngineDestroyedWithoutShutdownReportsEveryJobItDrops) {
  test::Watchdog watchdog(60s, "AnEngineDestroyedWithoutShutdownReportsEveryJobItDrops");
  Dropped seen;
  std::set<JobId> unstarted;
  std::vector<JobHandle<>> handles;
  {
    Engine engine(EngineOptions{.on_destroy = seen.callback()});
    engine.on_event(seen.observer());
    Queue<int> q = engine.declare_queue<int>("held", {});
    std::latch started{1};
    q.process({.concurrency = 1}, [&](Job<int>& j) {
      if (j.data() == 0) {
        started.count_down();
        std::this_thread::sleep_for(50ms);  // still running when the destructor begins
      }
    });
    (void)q.add("first", 0);
    started.wait();
    for (int i = 1; i < 5; ++i)
      handles.push_back(q.add_tracked("job", i));
    handles.push_back(q.add_tracked("later", 9, JobOptions{.delay = 1h}));
    for (const auto& h : handles)
      unstarted.insert(h.id());
  }
  std::lock_guard lock(seen.mu);
  EXPECT_EQ(seen.completed, 1) << "the running job is waited for and completes";
  ASSERT_TRUE(seen.report.has_value()) << "on_destroy is called";
  EXPECT_EQ(ids_of(seen.report->not_started), unstarted);
  EXPECT_TRUE(seen.report->still_running.empty());
  for (const auto& h : handles) {  // each dropped job's waiters were told why
    const std::optional<JobEnd<>> end = h.ended();
    ASSERT_TRUE(end.has_value());
    EXPECT_EQ(end->status, JobStatus::unknown);
    EXPECT_NE(end->error.find("destroyed"), std::string::npos) << end->error;
    EXPECT_NE(end->error.find("dropped"), std::string::npos) << end->error;
  }
}

TEST(Destroy, OnDestroyIsCalledWithACleanReportWhenNothingWasDropped) {
  Dropped seen;
  {
    Engine engine(
        EngineOptions{.clock = nullptr, .mode = Mode::inlined, .on_destroy = seen.callback()});
    Queue<int> q = engine.declare_queue<int>("q", {});
    q.process({}, [](Job<int>&) {});
    (void)q.add("job", 1);
    engine.run_until_idle();
  }
  ASSERT_TRUE(seen.report.has_value());
  EXPECT_TRUE(seen.report->clean());
}

TEST(Destroy, WithNobodyAskingTheDroppedJobsAreNamedOnStderrOnce) {
  testing::internal::CaptureStderr();
  JobId id = 0;
  {
    Engine engine(EngineOptions{.mode = Mode::inlined});
    Queue<int> q = engine.declare_queue<int>("mail", {});
    id = q.add("send", 1).id;
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("without shutdown()"), std::string::npos) << err;
  EXPECT_NE(err.find("job " + std::to_string(id) + " 'send' of queue 'mail'"), std::string::npos)
      << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

TEST(Destroy, AfterShutdownOrWithNothingLeftTheDestructorIsSilent) {
  testing::internal::CaptureStderr();
  {
    Engine engine(EngineOptions{.mode = Mode::inlined});
    Queue<int> q = engine.declare_queue<int>("mail", {});
    (void)q.add("send", 1);
    const ShutdownReport report = engine.shutdown(0s);
    EXPECT_EQ(report.not_started.size(), 1u) << "the caller was told here";
  }
  {
    Engine engine(EngineOptions{.mode = Mode::inlined});
    Queue<int> q = engine.declare_queue<int>("mail", {});
    q.process({}, [](Job<int>&) {});
    (void)q.add("send", 1);
    engine.run_until_idle();
  }
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

TEST(Destroy, AJobTakenWithTakeLeftoversIsNotReportedAsDropped) {
  Dropped seen;
  {
    Engine engine(EngineOptions{.mode = Mode::inlined, .on_destroy = seen.callback()});
    Queue<int> q = engine.declare_queue<int>("q", {});
    (void)q.add("kept", 1);
    (void)engine.shutdown(0s);
    EXPECT_EQ(q.take_leftovers().size(), 1u);
  }
  ASSERT_TRUE(seen.report.has_value());
  EXPECT_TRUE(seen.report->clean());
}

TEST(Destroy, AJobHandleOutlivesItsEngineAndReportsTheDrop) {
  std::optional<JobHandle<>> tracked;
  std::optional<JobHandle<>> by_id;
  std::optional<JobHandle<>> done;
  JobId id = 0;
  {
    Engine engine(EngineOptions{.mode = Mode::inlined, .on_destroy = [](const auto&) {}});
    Queue<int> q = engine.declare_queue<int>("q", {});
    q.process({}, [](Job<int>&) {});
    done = q.add_tracked("done", 0);
    engine.run_until_idle();
    tracked = q.add_tracked("never", 1, JobOptions{.delay = 1h});
    id = tracked->id();
    by_id = q.track(id);
  }
  for (auto* h : {&tracked, &by_id}) {
    const std::optional<JobEnd<>> end = (*h)->ended();
    ASSERT_TRUE(end.has_value());
    EXPECT_EQ(end->id, id);
    EXPECT_EQ(end->status, JobStatus::unknown);
    EXPECT_NE(end->error.find("destroyed"), std::string::npos) << end->error;
    EXPECT_EQ((*h)->wait().status, JobStatus::unknown);
    EXPECT_TRUE((*h)->wait_for(1s).has_value());
    bool called = false;
    (*h)->on_end([&](const JobEnd<>& e) { called = e.status == JobStatus::unknown; });
    EXPECT_TRUE(called) << "at once: the end is known";
  }
  EXPECT_EQ(done->wait().status, JobStatus::completed) << "an end known before stays";
  tracked.reset();  // the last handles go after the engine: nothing of it is touched
  by_id.reset();
  done.reset();
}

TEST(Destroy, AWaitBlockedInAnotherThreadReturnsWhenTheEngineIsDestroyed) {
  test::Watchdog watchdog(60s, "AWaitBlockedInAnotherThreadReturnsWhenTheEngineIsDestroyed");
  for (int round = 0; round < 20; ++round) {
    std::promise<JobEnd<>> tracked_end, by_id_end;
    std::thread a, b;
    {
      Engine engine(EngineOptions{.on_destroy = [](const auto&) {}});
      Queue<int> q = engine.declare_queue<int>("q", {});
      q.pause();  // nothing starts: the waits can only end with the engine
      q.process({.concurrency = 1}, [](Job<int>&) {});
      JobHandle<> h = q.add_tracked("never", round);
      JobHandle<> by_id = q.track(h.id());
      a = std::thread([h, &tracked_end] { tracked_end.set_value(h.wait()); });
      b = std::thread([by_id, &by_id_end] { by_id_end.set_value(by_id.wait()); });
      std::this_thread::sleep_for(std::chrono::milliseconds(round % 3));  // before, in, after
    }
    a.join();
    b.join();
    EXPECT_EQ(tracked_end.get_future().get().status, JobStatus::unknown);
    EXPECT_EQ(by_id_end.get_future().get().status, JobStatus::unknown);
  }
}

TEST(Destroy, AHandlerWaitingOnAJobThatRetriesDuringTeardownLetsItsWorkerGo) {
  test::Watchdog watchdog(60s, "AHandlerWaitingOnAJobThatRetriesDuringTeardownLetsItsWorkerGo");
  for (const Backoff backoff : {Backoff::none(), Backoff::fixed(1h)}) {  // waiting, delayed
    std::atomic<int> status{-1};
    {
      Engine engine(EngineOptions{.on_destroy = [](const auto&) {}});
      Queue<int> a = engine.declare_queue<int>("a", {});
      Queue<int> b = engine.declare_queue<int>("b", {});
      std::atomic<bool> running{false}, waiting{false};
      a.process({.concurrency = 1}, [&](Job<int>&) {
        running = true;
        std::this_thread::sleep_for(20ms);  // most likely running when the destructor begins
        throw std::runtime_error("flaky");  // back to waiting (or delayed) after its scan
      });
      // Attempts enough that the job never ends during the test: whenever the destructor
      // begins, it is running, waiting or delayed, and never starts again.
      const JobHandle<> flaky =
          a.add_tracked("flaky", 1, JobOptions{.max_attempts = 1000, .backoff = backoff});
      b.process({.concurrency = 1}, [flaky, &status, &waiting](Job<int>&) {
        waiting = true;
        status = static_cast<int>(flaky.wait().status);
      });
      (void)b.add("waiter", 0);
      while (!running || !waiting)  // b's handler has started: its wait must end
        std::this_thread::yield();
    }
    EXPECT_EQ(status.load(), static_cast<int>(JobStatus::unknown));
  }
}

TEST(Destroy, ASubscriptionOutlivesItsEngine) {
  Subscription kept, reset_later;
  std::atomic<int> calls{0};
  {
    Engine engine(EngineOptions{.mode = Mode::inlined});
    kept = engine.subscribe([&](const Event&) { ++calls; });
    reset_later = engine.subscribe([&](const Event&) { ++calls; });
    Queue<int> q = engine.declare_queue<int>("q", {});
    q.process({}, [](Job<int>&) {});
    (void)q.add("job", 1);
    engine.run_until_idle();
  }
  EXPECT_GT(calls.load(), 0);
  EXPECT_TRUE(kept);
  reset_later.reset();  // its engine is gone: nothing to remove, nothing touched
  EXPECT_FALSE(reset_later);
  Subscription moved = std::move(kept);
  moved = Subscription();  // move-assigning resets the old one: also after the engine
}

TEST(Destroy, ASubscriptionResetWhileTheEngineIsDestroyedIsSafe) {
  test::Watchdog watchdog(60s, "ASubscriptionResetWhileTheEngineIsDestroyedIsSafe");
  for (int round = 0; round < 50; ++round) {
    std::optional<Engine> engine(std::in_place, EngineOptions{});
    Subscription s = engine->subscribe([](const Event&) {});
    std::thread resetter([&s, round] {
      std::this_thread::sleep_for(std::chrono::microseconds(round * 20));
      s.reset();
    });
    engine.reset();
    resetter.join();
    EXPECT_FALSE(s);
  }
}

}  // namespace
}  // namespace rail
