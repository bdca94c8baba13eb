// Resumed jobs on worker threads (QueueFront::resume, what rail::amqp::Consumer adds): a lapse
// or a handler's outcome racing it ends each job exactly once, completed or forwarded, with the
// gauges empty and every fenced handler counted; a lapse forwarded by the timer thread while
// its handler still runs keeps that zombie counted until it returns.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include "rail/rail.hpp"
#include "support/end_counter.hpp"
#include "support/ended_jobs.hpp"
#include "support/eventually.hpp"
#include "support/release_on_exit.hpp"
#include "support/resumed_jobs.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;
using test::after;
using test::eventually;
using test::resume;

// Leases of 2 ms and handlers of 0-4 ms on 4 workers (oversubscribed on 2 cores): about half
// the deliveries lapse while their handler runs on, racing its outcome for the slot.
TEST(ResumedJobThreaded, LapsesRacingOutcomesEndEachResumedJobOnce) {
  constexpr int kJobs = 1500;
  test::EndCounter ends;
  Engine engine;
  engine.on_event(ends.observer());
  QueueOptions qo;
  qo.visibility_timeout = 2ms;
  qo.max_stalls = 1000;
  auto q = engine.declare_queue<int>("q", qo);
  q.process({.concurrency = 4}, [&](Job<int>& j) {
    std::minstd_rand rng(static_cast<unsigned>(j.id() * 7919));
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(rng() % 4000);
    while (std::chrono::steady_clock::now() < until)
      std::this_thread::yield();
    return (rng() % 2) != 0 ? Outcome::done() : Outcome::retry("declined");
  });
  JobOptions o;
  o.max_attempts = 100;
  o.backoff = Backoff::fixed(5ms);
  std::vector<JobId> ids;
  for (int i = 0; i < kJobs; ++i) {
    for (;;) {
      const AddReceipt r = resume(q, i, o, after(3, 1));
      if (r.status == AddStatus::added) {
        ids.push_back(r.id);
        break;
      }
      ASSERT_EQ(r.status, AddStatus::full);
      std::this_thread::sleep_for(1ms);  // the queue is full: a broker's relay parks it
    }
  }
  ASSERT_TRUE(q.wait_idle(120s));
  const QueueCounts c = q.counts();
  EXPECT_EQ(c.added, static_cast<std::uint64_t>(kJobs));
  EXPECT_EQ(test::ended_jobs(c), c.added);
  EXPECT_EQ(c.completed + c.forwarded, c.added);
  EXPECT_EQ(c.waiting + c.delayed + c.active, 0u);
  EXPECT_EQ(c.zombies, 0u);
  EXPECT_EQ(c.late_outcomes, c.stalled + c.timed_out);
  EXPECT_EQ(c.started, static_cast<std::uint64_t>(kJobs)) << "a resumed job ran twice here";
  for (JobId id : ids) {
    EXPECT_EQ(ends.of(id), 1) << "job " << id;
    const JobStatus st = q.state(id).status;
    EXPECT_TRUE(st == JobStatus::completed || st == JobStatus::forwarded) << to_string(st);
  }
  (void)engine.shutdown();
}

// The timer thread forwards a lapsed delivery while its handler still runs: the job is forwarded
// (a cancel from the event's observer finds it ended), its zombie stays counted and keeps the
// queue from idle until it returns, and its late outcome is fenced.
TEST(ResumedJobThreaded, ALapseForwardedOnTheTimerThreadKeepsItsZombieCountedUntilItReturns) {
  ManualClock clock;
  std::atomic<bool> release{false}, started{false};
  std::atomic<int> forwarded{0}, cancelled_by_observer{-1};
  Engine engine({.clock = &clock});
  test::ReleaseOnExit unblock{release};
  Queue<int>* queue = nullptr;
  engine.on_event([&](const Event& e) {
    if (e.kind != EventKind::forwarded) return;
    cancelled_by_observer = queue->cancel(e.job_id) ? 1 : 0;
    forwarded.fetch_add(1);
  });
  QueueOptions qo;
  qo.visibility_timeout = 10s;
  qo.keep_ended.keep_failed = 100;
  auto q = engine.declare_queue<int>("q", qo);
  queue = &q;
  q.process({.concurrency = 1}, [&](Job<int>&) {
    started = true;
    (void)eventually([&] { return release.load(); }, 120s);
    return Outcome::done();
  });
  JobOptions o;
  o.max_attempts = 5;
  const JobId id = resume(q, 1, o, after(1)).id;
  ASSERT_TRUE(eventually([&] { return started.load(); }));
  clock.advance(11s);
  ASSERT_TRUE(eventually([&] { return forwarded.load() == 1; }));
  QueueCounts c = q.counts();
  EXPECT_EQ(c.forwarded, 1u);
  EXPECT_EQ(c.stalled, 1u);
  EXPECT_EQ(c.active, 1u) << "its zombie";
  EXPECT_EQ(c.zombies, 1u);
  EXPECT_EQ(c.waiting + c.delayed, 0u);
  EXPECT_EQ(q.state(id).status, JobStatus::forwarded);
  EXPECT_EQ(cancelled_by_observer.load(), 0);
  EXPECT_FALSE(q.wait_idle(Duration{0})) << "idle with a zombie running";
  release = true;
  ASSERT_TRUE(q.wait_idle(60s));
  c = q.counts();
  EXPECT_EQ(c.active + c.waiting + c.delayed, 0u);
  EXPECT_EQ(c.zombies, 0u);
  EXPECT_EQ(c.late_outcomes, 1u);
  EXPECT_EQ(c.completed, 0u) << "the fenced handler's done does not count";
  const auto end = q.end_of(id);
  ASSERT_TRUE(end.has_value());
  EXPECT_EQ(end->status, JobStatus::forwarded);
  EXPECT_TRUE(engine.shutdown().zombies.empty());
}

}  // namespace
}  // namespace rail
