// Bad options are rejected with a message that names the field and what is expected.
#include <gtest/gtest.h>

#include "rail/rail.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no rail::Error thrown";
  return {};
}

struct Options : ::testing::Test {
  ManualClock clock;
  Engine engine{EngineOptions{.clock = &clock, .mode = Mode::inlined}};
  Queue<int> q = engine.queue<int>("q", {});
};

TEST_F(Options, ZeroAttemptsIsRejected) {
  auto msg = error_of([&] { (void)q.add("a", 1, JobOptions{.attempts = 0}); });
  EXPECT_NE(msg.find("JobOptions.attempts is 0; expected 1 or more"), std::string::npos) << msg;
}

TEST_F(Options, NegativeAttemptsIsRejected) {
  auto msg = error_of([&] { (void)q.add("a", 1, JobOptions{.attempts = -3}); });
  EXPECT_NE(msg.find("attempts is -3"), std::string::npos) << msg;
}

TEST_F(Options, NegativeDelayIsRejected) {
  auto msg = error_of([&] { (void)q.add("a", 1, JobOptions{.delay = -1ms}); });
  EXPECT_NE(msg.find("JobOptions.delay"), std::string::npos) << msg;
}

TEST_F(Options, DedupTtlWithoutIdIsRejected) {
  JobOptions o;
  o.dedup.ttl = 1s;
  auto msg = error_of([&] { (void)q.add("a", 1, o); });
  EXPECT_NE(msg.find("dedup.id"), std::string::npos) << msg;
}

TEST_F(Options, DebounceWithoutTtlIsRejected) {
  JobOptions o;
  o.dedup = {.id = "x", .mode = DedupMode::debounce};
  auto msg = error_of([&] { (void)q.add("a", 1, o); });
  EXPECT_NE(msg.find("dedup.ttl"), std::string::npos) << msg;
}

TEST_F(Options, CustomBackoffWithoutFunctionIsRejected) {
  auto msg = error_of([&] { (void)q.add("a", 1, JobOptions{.backoff = Backoff::custom()}); });
  EXPECT_NE(msg.find("custom_backoff"), std::string::npos) << msg;
}

TEST_F(Options, ZeroCapacityIsRejected) {
  auto msg = error_of([&] { (void)engine.queue<int>("z", QueueOptions{.capacity = 0}); });
  EXPECT_NE(msg.find("capacity is 0"), std::string::npos) << msg;
}

TEST_F(Options, BadQueueDefaultsAreRejectedAtDeclaration) {
  QueueOptions qo;
  qo.defaults.attempts = 0;
  auto msg = error_of([&] { (void)engine.queue<int>("d", qo); });
  EXPECT_NE(msg.find("defaults.attempts"), std::string::npos) << msg;
}

TEST_F(Options, ZeroConcurrencyIsRejected) {
  auto msg = error_of([&] { q.process(WorkerOptions{.concurrency = 0}, [](Job<int>&) {}); });
  EXPECT_NE(msg.find("concurrency is 0"), std::string::npos) << msg;
}

TEST_F(Options, ConcurrencyAboveTheBoundIsRejected) {
  auto msg = error_of([&] {
    q.process(WorkerOptions{.concurrency = WorkerOptions::kMaxConcurrency + 1}, [](Job<int>&) {});
  });
  EXPECT_NE(msg.find("WorkerOptions('q').concurrency is 4097; expected at most "
                     "WorkerOptions::kMaxConcurrency (4096)"),
            std::string::npos)
      << msg;
  q.process(WorkerOptions{.concurrency = WorkerOptions::kMaxConcurrency}, [](Job<int>&) {});
}

TEST_F(Options, NonPositiveTimerTickIsRejected) {
  auto msg = error_of([] { Engine e(EngineOptions{.timer_tick = 0ns}); });
  EXPECT_NE(msg.find("timer_tick"), std::string::npos) << msg;
}

TEST_F(Options, TooLongDedupIdIsRejected) {
  JobOptions o;
  o.dedup.id = std::string(300, 'x');
  auto msg = error_of([&] { (void)q.add("a", 1, o); });
  EXPECT_NE(msg.find("dedup.id is 300 bytes"), std::string::npos) << msg;
}

}  // namespace
}  // namespace rail
