// Resumed jobs on worker threads (QueueFront::resume, what rail::amqp::Consumer adds): a lapse
// or a handler's outcome racing it ends each job exactly once, completed or forwarded, with the
// gauges empty and every fenced handler counted; a lapse forwarded by the timer thread while
// its handler still runs keeps that zombie counted until it returns; short retries kept here
// (RetryHere) racing lapses, cancels and one another never take more places than there are, and
// every place comes back.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include "rail/detail/resumed.hpp"
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

// spin(rng, max_us): a handler's work, 0 to max_us of busy time (yielding: oversubscribed).
void spin(std::minstd_rand& rng, unsigned max_us) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(rng() % max_us);
  while (std::chrono::steady_clock::now() < until)
    std::this_thread::yield();
}

// resume_when_room(q, i, o, r): resumes job i, waiting while the queue is full (as a broker's
// relay parks a delivery); its id.
JobId resume_when_room(Queue<int>& q, int i, const JobOptions& o, const detail::Resumed& r) {
  for (;;) {
    const AddReceipt added = resume(q, i, o, r);
    if (added.status == AddStatus::added) return added.id;
    EXPECT_EQ(added.status, AddStatus::full);
    std::this_thread::sleep_for(1ms);
  }
}

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
    spin(rng, 4000);
    return (rng() % 2) != 0 ? Outcome::done() : Outcome::retry("declined");
  });
  JobOptions o;
  o.max_attempts = 100;
  o.backoff = Backoff::fixed(5ms);
  std::vector<JobId> ids;
  for (int i = 0; i < kJobs; ++i)
    ids.push_back(resume_when_room(q, i, o, after(3, 1)));
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

// Six workers (oversubscribed on 2 cores) fail attempts with short and long backoffs while
// leases lapse (every other job's lease is 5 ms, the others' 2 s) and a canceller cancels recent
// jobs: 3 places are taken and given back concurrently. A watcher checks that the free places
// never leave [0, 3]; at the end each job ended once and every place is back.
TEST(ResumedJobThreaded, ShortRetriesHereNeverTakeMorePlacesThanThereAreAndGiveThemAllBack) {
  constexpr int kJobs = 1200, kPlaces = 3;
  test::EndCounter ends;
  std::atomic<int> retries_here{0};  // a retry's backoff ended here (a forwarded job has none)
  Engine engine;
  engine.on_event(ends.observer());
  engine.on_event([&](const Event& e) {
    if (e.kind == EventKind::retry_due) retries_here.fetch_add(1);
  });
  QueueOptions qo;
  qo.max_stalls = 1000;
  auto q = engine.declare_queue<int>("q", qo);
  q.process({.concurrency = 6}, [&](Job<int>& j) {
    std::minstd_rand rng(static_cast<unsigned>(j.id() * 7919 + j.attempt()));
    spin(rng, 2000);
    switch (rng() % 4) {
      case 0:
        return Outcome::done();
      case 1:
        return Outcome::retry_in(std::chrono::milliseconds(1 + rng() % 3), "short");
      case 2:
        return Outcome::retry_in(50ms, "long: forwarded");
      default:
        return Outcome::retry("backoff: short");
    }
  });
  const auto here = std::make_shared<detail::RetryHere>(10ms, kPlaces);
  std::atomic<bool> done{false};
  std::atomic<int> out_of_range{0};
  std::thread watcher([&] {
    while (!done.load()) {
      const int free = here->free_places();
      if (free < 0 || free > kPlaces) out_of_range.fetch_add(1);
      std::this_thread::yield();
    }
  });
  std::atomic<JobId> latest{0};
  std::thread canceller([&] {
    std::minstd_rand rng(7);
    while (!done.load()) {
      if (const JobId id = latest.load(); id > 0) (void)q.cancel(id - rng() % 8);
      std::this_thread::sleep_for(std::chrono::microseconds(200 + rng() % 300));
    }
  });
  JobOptions o;
  o.max_attempts = 6;
  o.backoff = Backoff::fixed(2ms);
  std::vector<JobId> ids;
  for (int i = 0; i < kJobs; ++i) {
    o.visibility_timeout = i % 2 == 0 ? Duration{5ms} : Duration{2s};
    detail::Resumed r = after(1);
    r.retry_here = here;
    ids.push_back(resume_when_room(q, i, o, r));
    latest = ids.back();
  }
  const bool idle = q.wait_idle(120s);
  done = true;
  watcher.join();
  canceller.join();
  ASSERT_TRUE(idle);
  EXPECT_EQ(out_of_range.load(), 0);
  EXPECT_EQ(here->free_places(), kPlaces) << "a place was not given back";
  const QueueCounts c = q.counts();
  EXPECT_EQ(c.added, static_cast<std::uint64_t>(kJobs));
  EXPECT_EQ(test::ended_jobs(c), c.added);
  EXPECT_EQ(c.waiting + c.delayed + c.active, 0u);
  EXPECT_GT(retries_here.load(), 0) << "no retry ran here";
  EXPECT_GT(c.forwarded, 0u);
  for (JobId id : ids)
    EXPECT_EQ(ends.of(id), 1) << "job " << id;
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
