// Queue::explain / Engine::explain: each answer to "why has this job not started?" in a test that
// builds that situation (inline under the manual clock), then explain racing workers that run,
// end and reuse the jobs' slots (threaded).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "rail/rail.hpp"
#include "support/inline_engine.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;
using Explain = test::InlineEngine;

/// calling(downstream) / queue_calling(downstream): options that name a downstream (named, not
/// designated: GCC 12 warns about the other string members of a designated temporary).
JobOptions calling(const std::string& downstream) {
  JobOptions o;
  o.downstream = downstream;
  return o;
}
QueueOptions queue_calling(const std::string& downstream, std::uint32_t capacity = 0) {
  QueueOptions o;
  o.downstream = downstream;
  if (capacity != 0) o.capacity = capacity;
  return o;
}

bool says(const Explanation& e, const std::string& words) {
  return e.text.find(words) != std::string::npos;
}

TEST_F(Explain, ADelayedJobIsDueWhenItsDelayEnds) {
  auto q = engine.declare_queue<int>("q", {});
  q.process({}, [](Job<int>&) {});
  clock.advance(1s);
  const JobId id = q.add("j", 1, {.delay = 5s}).id;
  const Explanation e = q.explain(id);
  EXPECT_EQ(e.holdup, Holdup::delayed);
  EXPECT_EQ(e.state.status, JobStatus::delayed);
  EXPECT_EQ(e.until.time_since_epoch(), 6s);
  EXPECT_TRUE(says(e, "due in 5000 ms")) << e.text;
}

TEST_F(Explain, AQueueWithoutAProcessorHoldsItsJobs) {
  auto q = engine.declare_queue<int>("emails", {});
  const JobId id = q.add("j", 1).id;
  const Explanation e = q.explain(id);
  EXPECT_EQ(e.holdup, Holdup::no_processor);
  EXPECT_TRUE(says(e, "queue 'emails' has no processor")) << e.text;
}

TEST_F(Explain, APausedQueueHoldsItsJobs) {
  auto q = engine.declare_queue<int>("emails", {});
  q.process({}, [](Job<int>&) {});
  q.pause();
  const JobId id = q.add("j", 1).id;
  EXPECT_EQ(q.explain(id).holdup, Holdup::paused);
  q.resume();
  EXPECT_EQ(q.explain(id).holdup, Holdup::queued);
}

TEST_F(Explain, APausedDownstreamHoldsTheJobUntilItsPauseEnds) {
  auto api = engine.declare_downstream("api", {.concurrency = 4});
  auto q = engine.declare_queue<int>("q", queue_calling("api"));
  q.process({}, [](Job<int>&) {});
  api.pause_for(10s);
  const JobId id = q.add("j", 1).id;
  const Explanation e = q.explain(id);
  EXPECT_EQ(e.holdup, Holdup::downstream_paused);
  EXPECT_EQ(e.downstream, "api");
  EXPECT_EQ(e.until.time_since_epoch(), 10s);
  EXPECT_TRUE(says(e, "downstream 'api' admits nothing for 10000 ms")) << e.text;
}

TEST_F(Explain, AFullDownstreamHoldsTheNextJob) {
  (void)engine.declare_downstream("api", {.concurrency = 1});
  auto q = engine.declare_queue<int>("q", {});
  Explanation seen;
  JobId second = 0;
  q.process({}, [&](Job<int>& job) {
    if (job.data() == 1) seen = q.explain(second);  // the first holds the only permit
  });
  (void)q.add("j", 1, calling("api"));
  second = q.add("j", 2, calling("api")).id;
  engine.run_until_idle();
  EXPECT_EQ(seen.holdup, Holdup::downstream_full) << seen.text;
  EXPECT_EQ(seen.downstream, "api");
  EXPECT_EQ(seen.busy, 1u);
  EXPECT_EQ(seen.limit, 1u);
  EXPECT_TRUE(says(seen, "downstream 'api' has 1 of 1 permits in use")) << seen.text;
  EXPECT_EQ(q.state(second).status, JobStatus::completed);
}

TEST_F(Explain, ADownstreamOutOfTokensHoldsTheJob) {
  (void)engine.declare_downstream("api", {.rate = RateLimit::token_bucket(1, 1min, 1)});
  auto q = engine.declare_queue<int>("q", queue_calling("api"));
  q.process({}, [](Job<int>&) {});
  (void)q.add("j", 1);
  engine.run_until_idle();  // takes the only token
  const JobId id = q.add("j", 2).id;
  const Explanation e = q.explain(id);
  EXPECT_EQ(e.holdup, Holdup::downstream_rate) << e.text;
  EXPECT_EQ(e.until.time_since_epoch(), 1min) << "the next token";
  EXPECT_TRUE(says(e, "'api''s rate limit has no token for 60000 ms")) << e.text;
}

TEST_F(Explain, BusyWorkersHoldAJobBehindTheOthers) {
  auto q = engine.declare_queue<int>("q", {});
  Explanation seen;
  JobId third = 0;
  q.process({}, [&](Job<int>& job) {
    if (job.data() == 1) seen = q.explain(third);  // the one worker (inline) runs the first
  });
  (void)q.add("j", 1);
  (void)q.add("j", 2);
  third = q.add("j", 3).id;
  engine.run_until_idle();
  EXPECT_EQ(seen.holdup, Holdup::workers_busy) << seen.text;
  EXPECT_EQ(seen.busy, 1u);
  EXPECT_EQ(seen.limit, 1u);
  EXPECT_EQ(seen.ahead, 1u) << "the second job waits before it";
  EXPECT_TRUE(says(seen, "all 1 workers of queue 'q' run jobs")) << seen.text;
}

TEST_F(Explain, AReadyJobIsQueuedBehindTheJobsAddedBeforeIt) {
  auto q = engine.declare_queue<int>("q", {});
  q.process({}, [](Job<int>&) {});
  const JobId a = q.add("j", 1).id;
  (void)q.add("j", 2);
  const JobId c = q.add("j", 3).id;
  const Explanation first = q.explain(a);
  EXPECT_EQ(first.holdup, Holdup::queued);
  EXPECT_EQ(first.ahead, 0u);
  EXPECT_EQ(first.text, "waiting: next to start");
  const Explanation last = q.explain(c);
  EXPECT_EQ(last.holdup, Holdup::queued);
  EXPECT_EQ(last.ahead, 2u);
  EXPECT_TRUE(says(last, "after the 2 waiting jobs added before it")) << last.text;
}

TEST_F(Explain, ARunningEndedOrUnknownJobIsNotHeldBack) {
  auto q = engine.declare_queue<int>("q", {});
  Explanation running;
  q.process({}, [&](Job<int>& job) { running = q.explain(job.id()); });
  const JobId id = q.add("j", 1).id;
  engine.run_until_idle();
  EXPECT_EQ(running.holdup, Holdup::none);
  EXPECT_EQ(running.state.status, JobStatus::active);
  const Explanation done = engine.explain(id);
  EXPECT_EQ(done.holdup, Holdup::none);
  EXPECT_EQ(done.state.status, JobStatus::completed);
  EXPECT_TRUE(says(done, "not waiting to start: completed")) << done.text;
  const Explanation unknown = engine.explain(id + 1000);
  EXPECT_EQ(unknown.state.status, JobStatus::unknown);
  EXPECT_TRUE(says(unknown, "no queue holds job")) << unknown.text;
}

TEST_F(Explain, EngineExplainFindsTheQueueThatHoldsTheJob) {
  auto a = engine.declare_queue<int>("a", {});
  auto b = engine.declare_queue<int>("b", {});
  a.process({}, [](Job<int>&) {});
  b.pause();
  b.process({}, [](Job<int>&) {});
  const JobId id = b.add("j", 1).id;
  const Explanation e = engine.explain(id);
  EXPECT_EQ(e.holdup, Holdup::paused);
  EXPECT_TRUE(says(e, "queue 'b' is paused")) << e.text;
}

TEST(ExplainNames, EachHoldupHasItsSnakeCaseName) {
  EXPECT_EQ(to_string(Holdup::none), "none");
  EXPECT_EQ(to_string(Holdup::delayed), "delayed");
  EXPECT_EQ(to_string(Holdup::no_processor), "no_processor");
  EXPECT_EQ(to_string(Holdup::paused), "paused");
  EXPECT_EQ(to_string(Holdup::group_turn), "group_turn");
  EXPECT_EQ(to_string(Holdup::tenant_share), "tenant_share");
  EXPECT_EQ(to_string(Holdup::downstream_paused), "downstream_paused");
  EXPECT_EQ(to_string(Holdup::downstream_full), "downstream_full");
  EXPECT_EQ(to_string(Holdup::downstream_rate), "downstream_rate");
  EXPECT_EQ(to_string(Holdup::higher_priority), "higher_priority");
  EXPECT_EQ(to_string(Holdup::workers_busy), "workers_busy");
  EXPECT_EQ(to_string(Holdup::queued), "queued");
}

TEST(ExplainThreaded, ExplainRacesWorkersThatEndJobsAndReuseTheirSlots) {
  // A small queue whose slots are reused all the time, jobs that call a downstream (explain
  // reads the slot's link to it): every answer is one of the listed ones, nothing races.
  Engine engine;
  (void)engine.declare_downstream("api", {.concurrency = 2});
  QueueOptions small = queue_calling("api", 8);
  small.on_full = OnFull::block;  // the producer waits for the workers to free a slot
  small.block_timeout = 30s;
  auto q = engine.declare_queue<int>("q", small);
  q.process({.concurrency = 2}, [](Job<int>&) {});
  std::atomic<bool> done{false};
  std::atomic<JobId> last{0};
  std::atomic<std::uint64_t> answers{0};
  std::thread reader([&] {
    while (!done.load()) {
      const JobId id = last.load();
      for (JobId k = id > 8 ? id - 8 : 1; k <= id; ++k) {
        const Explanation e = q.explain(k);
        EXPECT_FALSE(e.text.empty());
        if (e.holdup != Holdup::none) {
          EXPECT_TRUE(e.state.status == JobStatus::waiting || e.state.status == JobStatus::delayed);
        }
        answers.fetch_add(1);
      }
    }
  });
  for (int i = 0; i < 4000; ++i) {
    const AddReceipt r = q.add("j", i);
    ASSERT_EQ(r.status, AddStatus::added);
    last.store(r.id);
  }
  ASSERT_TRUE(q.wait_idle(30s));
  done.store(true);
  reader.join();
  EXPECT_GT(answers.load(), 0u);
  EXPECT_EQ(q.counts().completed, 4000u);
}

}  // namespace
}  // namespace rail
