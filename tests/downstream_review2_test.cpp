// Review of a downstream per job (JobOptions::downstream, issue 14): several queues whose jobs
// name several downstreams, the queue's own among them, under the gate's wake protocol (blocked
// rings per link, the leader on the wheel), cancels, debounces, pauses, run-time limit changes,
// pushbacks and async completions. Timed cases run inline under a ManualClock.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "rail/rail.hpp"
#include "support/downstream_options.hpp"
#include "support/eventually.hpp"
#include "support/sanitized.hpp"
#include "support/watchdog.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;

JobOptions calling_job(std::string downstream) {
  JobOptions o;
  o.downstream = std::move(downstream);
  return o;
}

// --- inline, manual clock -------------------------------------------------------------------

// Queue b's jobs wait at a rate-limited gate (no permit limit) behind a's leader, and b is
// paused. The leader's token comes with a second one: its stepping down wakes one job and its
// admission another (a token is left), both refused by paused b. b's resume hands on one wake:
// that job takes the last token, and with nothing left its admission wakes nobody. No job
// leads, no permit is released to wake one, and b's other jobs wait forever.
void paused_queue_takes_two_wakes(bool per_job) {
  ManualClock clock;
  Engine engine{EngineOptions{.clock = &clock, .mode = Mode::inlined}};
  auto api = engine.downstream("api", {.rate = RateLimit{.max = 2, .per = 1s, .burst = 2}});
  auto a = engine.queue<int>("a", per_job ? QueueOptions{} : test::calling("api"));
  auto b = engine.queue<int>("b", per_job ? QueueOptions{} : test::calling("api"));
  const JobOptions o = per_job ? calling_job("api") : JobOptions{};
  std::vector<std::string> ran;
  a.process({}, [&](Job<int>& j) { ran.push_back("a" + std::to_string(j.data())); });
  b.process({}, [&](Job<int>& j) { ran.push_back("b" + std::to_string(j.data())); });
  (void)a.add("call", 1, o);
  (void)a.add("call", 2, o);
  engine.run_until_idle();  // both tokens taken
  (void)a.add("call", 3, o);
  engine.run_until_idle();  // leads
  for (int i = 1; i <= 3; ++i)
    (void)b.add("call", i, o);
  engine.run_until_idle();  // blocked behind a3
  ASSERT_EQ(api.stats().waiting, 3u);
  b.pause();
  clock.advance(1s);  // two tokens: a3 takes one, and wakes for the other go to paused b
  engine.run_until_idle();
  b.resume();
  engine.run_until_idle();
  for (int s = 0; s < 5; ++s) {
    clock.advance(1s);
    engine.run_until_idle();
  }
  EXPECT_EQ(ran.size(), 6u);
  EXPECT_EQ(b.counts().completed, 3u) << "b's jobs stranded at the gate";
  EXPECT_EQ(api.stats().waiting, 0u);
}

TEST(JobDownstreamInline, APausedQueueThatRefusedTwoWakesStrandsNoJobOnResume) {
  paused_queue_takes_two_wakes(false);
}

TEST(JobDownstreamInline, APausedQueueThatRefusedTwoWakesStrandsNoJobNamingTheGate) {
  paused_queue_takes_two_wakes(true);
}

}  // namespace
}  // namespace rail
