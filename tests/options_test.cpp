// Bad input is refused with a rail::Error whose code a program can branch on and whose message
// names the field (or the figure) and what is expected: one table, run under ASan + UBSan in CI
// like every test, so that a bad input that crashed instead of throwing would show there.
#include <gtest/gtest.h>

#include <array>
#include <functional>
#include <string>

#include "rail/rail.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;

/// Big: a 64 KB payload, for a queue whose footprint no machine holds at the largest capacity.
struct Big {
  std::array<char, 65536> bytes;
};

/// BadInput: one call with a bad input, made on a fresh inline engine with a queue<int> "q".
struct BadInput {
  const char* name;
  std::function<void(Engine&, Queue<int>&)> call;
  ErrorCode code;
  const char* message;  // a part of what() that names the field and what is expected
};

JobOptions dedup(DedupOptions d) {
  JobOptions o;
  o.dedup = std::move(d);
  return o;
}

const BadInput kBadInputs[] = {
    {"ZeroAttempts", [](Engine&, Queue<int>& q) { (void)q.add("a", 1, {.max_attempts = 0}); },
     ErrorCode::invalid_option, "JobOptions.max_attempts is 0; expected 1 or more"},
    {"TooManyAttempts",
     [](Engine&, Queue<int>& q) { (void)q.add("a", 1, {.max_attempts = 70'000}); },
     ErrorCode::invalid_option, "max_attempts is 70000; expected at most"},
    {"NegativeDelay", [](Engine&, Queue<int>& q) { (void)q.add("a", 1, {.delay = -1ms}); },
     ErrorCode::invalid_option, "JobOptions.delay"},
    {"DedupTtlWithoutId", [](Engine&, Queue<int>& q) { (void)q.add("a", 1, dedup({.ttl = 1s})); },
     ErrorCode::invalid_option, "dedup.id"},
    {"DebounceWithoutTtl",
     [](Engine&, Queue<int>& q) {
       (void)q.add("a", 1, dedup({.id = "x", .mode = DedupMode::debounce}));
     },
     ErrorCode::invalid_option, "dedup.ttl"},
    {"TooLongDedupId",
     [](Engine&, Queue<int>& q) { (void)q.add("a", 1, dedup({.id = std::string(300, 'x')})); },
     ErrorCode::invalid_option, "dedup.id is 300 bytes"},
    {"CustomBackoffWithoutFunction",
     [](Engine&, Queue<int>& q) { (void)q.add("a", 1, {.backoff = Backoff::custom()}); },
     ErrorCode::invalid_option, "custom_backoff"},
    {"ZeroCapacity",
     [](Engine& e, Queue<int>&) { (void)e.declare_queue<int>("z", QueueOptions{.capacity = 0}); },
     ErrorCode::invalid_option, "capacity is 0"},
    {"BadQueueDefaults",
     [](Engine& e, Queue<int>&) {
       QueueOptions qo;
       qo.defaults.max_attempts = 0;
       (void)e.declare_queue<int>("d", qo);
     },
     ErrorCode::invalid_option, "defaults.max_attempts"},
    {"FootprintAbovePhysicalMemory",
     [](Engine& e, Queue<int>&) {
       (void)e.declare_queue<Big>("big", QueueOptions{.capacity = std::size_t{1} << 29});
     },
     ErrorCode::capacity,
     "queue 'big' with capacity 536870912 and a 65536-byte payload needs 35268123951104 bytes"},
    {"ZeroConcurrency",
     [](Engine&, Queue<int>& q) { q.process({.concurrency = 0}, [](Job<int>&) {}); },
     ErrorCode::invalid_option, "WorkerOptions('q').concurrency is 0; expected 1 or more"},
    {"ConcurrencyAboveTheBound",
     [](Engine&, Queue<int>& q) {
       q.process({.concurrency = WorkerOptions::kMaxConcurrency + 1}, [](Job<int>&) {});
     },
     ErrorCode::invalid_option,
     "WorkerOptions('q').concurrency is 4097; expected at most WorkerOptions::kMaxConcurrency "
     "(4096)"},
    {"NegativeProgressInterval",
     [](Engine& e, Queue<int>&) {
       (void)e.declare_queue<int>("p", QueueOptions{.progress_interval = -1ns});
     },
     ErrorCode::invalid_option, "progress_interval is -1 ns"},
    {"ZeroResultsMaxAge",
     [](Engine& e, Queue<int>&) {
       QueueOptions qo;
       qo.keep_ended.max_age = 0ns;
       (void)e.declare_queue<int>("r", qo);
     },
     ErrorCode::invalid_option, "keep_ended.max_age is 0 ns"},
    {"NegativeResultsMaxAge",
     [](Engine& e, Queue<int>&) {
       QueueOptions qo;
       qo.keep_ended.max_age = -5s;
       (void)e.declare_queue<int>("r", qo);
     },
     ErrorCode::invalid_option, "keep_ended.max_age"},
    {"TooManyMaxStalls",
     [](Engine& e, Queue<int>&) {
       (void)e.declare_queue<int>("s", QueueOptions{.max_stalls = 70'000});
     },
     ErrorCode::invalid_option, "max_stalls is 70000; expected 0 .. 65535"},
    {"ZeroConcurrencyOnTheSharedPool",
     [](Engine&, Queue<int>& q) { q.process(WorkerOptions::shared(0), [](Job<int>&) {}); },
     ErrorCode::invalid_option,
     "concurrency is 0; expected 1 or more handler calls at once (leave it unset for the whole "
     "pool)"},
    {"ZeroAlertDepth",
     [](Engine& e, Queue<int>&) {
       QueueOptions qo;
       qo.dlq.alert_depth = 0;
       (void)e.declare_queue<int>("a", qo);
     },
     ErrorCode::invalid_option, "dlq.alert_depth is 0; expected 1 or more (unset: no alert)"},
    {"RearmDepthNotBelowTheAlert",
     [](Engine& e, Queue<int>&) {
       QueueOptions qo;
       qo.dlq.alert_depth = 5;
       qo.dlq.alert_rearm_depth = 5;
       (void)e.declare_queue<int>("a", qo);
     },
     ErrorCode::invalid_option, "dlq.alert_rearm_depth is 5; expected below dlq.alert_depth (5)"},
    {"ZeroDedupCapacity",
     [](Engine& e, Queue<int>&) {
       (void)e.declare_queue<int>("d", QueueOptions{.dedup_capacity = 0});
     },
     ErrorCode::invalid_option, "dedup_capacity is 0; expected 1 or more live dedup ids"},
    {"ZeroDownstreamConcurrency",
     [](Engine& e, Queue<int>&) { (void)e.declare_downstream("api", {.concurrency = 0}); },
     ErrorCode::invalid_option, "DownstreamOptions('api').concurrency is 0"},
    {"ZeroBurst",
     [](Engine& e, Queue<int>&) {
       (void)e.declare_downstream("api", {.rate = RateLimit::token_bucket(10, 1s, 0)});
     },
     ErrorCode::invalid_option, "rate.burst is 0; expected 1 .."},
    {"NegativeRetryIn", [](Engine&, Queue<int>&) { (void)Outcome::retry_in(-1ms, "late"); },
     ErrorCode::invalid_option, "Outcome::retry_in: the duration is negative"},
    {"NegativePushback", [](Engine&, Queue<int>&) { (void)Outcome::pushback(-1s); },
     ErrorCode::invalid_option, "Outcome::pushback: the duration is negative"},
    {"ZeroDlqMaxEntries",
     [](Engine& e, Queue<int>&) {
       QueueOptions qo;
       qo.dlq.max_entries = 0;
       (void)e.declare_queue<int>("m", qo);
     },
     ErrorCode::invalid_option, "dlq.max_entries"},
    {"JournalWritableByOthers",
     [](Engine& e, Queue<int>&) {
       QueueOptions qo;
       qo.dlq.journal = {.path = "/nonexistent/never-opened.dlq", .file_mode = 0666};
       (void)e.declare_queue<int>("w", qo);
     },
     ErrorCode::invalid_option, "without write permission for others"},
    {"NegativeBlockTimeout",
     [](Engine& e, Queue<int>&) {
       (void)e.declare_queue<int>("b", QueueOptions{.block_timeout = -1ms});
     },
     ErrorCode::invalid_option, "block_timeout"},
    {"BlankJobName", [](Engine&, Queue<int>& q) { (void)q.add(" \t", 1); },
     ErrorCode::invalid_option, "job name"},
    {"NegativeChangeDelay", [](Engine&, Queue<int>& q) { (void)q.change_delay(1, -1s); },
     ErrorCode::invalid_option, "change_delay: the delay is negative"},
    {"UnknownQueue", [](Engine& e, Queue<int>&) { (void)e.queue<int>("nope"); },
     ErrorCode::unknown_queue, "no queue named 'nope'"},
    {"QueueOfAnotherPayloadType", [](Engine& e, Queue<int>&) { (void)e.queue<double>("q"); },
     ErrorCode::type_mismatch, "another type"},
    {"QueueOfAnotherResultType", [](Engine& e, Queue<int>&) { (void)e.queue<int, int>("q"); },
     ErrorCode::type_mismatch, "another result type"},
    {"QueueDeclaredTwice", [](Engine& e, Queue<int>&) { (void)e.declare_queue<int>("q", {}); },
     ErrorCode::queue_exists, "already declared"},
    {"ScheduleEveryZero", [](Engine&, Queue<int>& q) { (void)q.every("s", 0s, "a", 1); },
     ErrorCode::invalid_option, "expected a duration > 0"},
    {"ScheduleWithADelay",
     [](Engine&, Queue<int>& q) { (void)q.every("s", 1s, "a", 1, {.job = {.delay = 1s}}); },
     ErrorCode::invalid_option, "ScheduleOptions.job.delay is set"},
    {"BadCronField", [](Engine&, Queue<int>& q) { (void)q.cron("s", "* 24 * * *", "a", 1); },
     ErrorCode::invalid_option, "hour field '24' is out of range"},
    {"CronWithFourFields", [](Engine&, Queue<int>& q) { (void)q.cron("s", "* * * *", "a", 1); },
     ErrorCode::invalid_option, "expected 5"},
    {"NonPositiveTimerTick",
     [](Engine&, Queue<int>&) { Engine e(EngineOptions{.timer_tick = 0ns}); },
     ErrorCode::invalid_option, "timer_tick"},
    {"NegativeShutdownGrace", [](Engine& e, Queue<int>&) { (void)e.shutdown(-1s); },
     ErrorCode::invalid_option, "shutdown grace is -1000000000 ns; expected 0"},
    {"BlankQueueName", [](Engine& e, Queue<int>&) { (void)e.declare_queue<int>(" \t", {}); },
     ErrorCode::invalid_option, "QueueOptions.name is blank"},
    {"MegabyteQueueName",
     [](Engine& e, Queue<int>&) { (void)e.declare_queue<int>(std::string(1 << 20, 'q'), {}); },
     ErrorCode::invalid_option, "1048576 bytes long; expected at most 255 bytes"},
    {"QueueNameWithANewline",
     [](Engine& e, Queue<int>&) { (void)e.declare_queue<int>("a\nb", {}); },
     ErrorCode::invalid_option, "control character 10"},
    {"QueueNameWithANul",
     [](Engine& e, Queue<int>&) { (void)e.declare_queue<int>(std::string("a\0b", 3), {}); },
     ErrorCode::invalid_option, "control character 0"},
    {"EmptyDownstreamName", [](Engine& e, Queue<int>&) { (void)e.declare_downstream("", {}); },
     ErrorCode::invalid_option, "DownstreamOptions.name is empty"},
    {"DownstreamAfterShutdown",
     [](Engine& e, Queue<int>&) {
       (void)e.shutdown(0s);
       (void)e.declare_downstream("late", {});
     },
     ErrorCode::shutting_down, "downstream 'late' declared after shutdown began"},
};

struct BadInputs : ::testing::TestWithParam<BadInput> {
  ManualClock clock;
  Engine engine{EngineOptions{.clock = &clock, .mode = Mode::inlined}};
  Queue<int> q = engine.declare_queue<int>("q", {});
};

TEST_P(BadInputs, AreRefusedWithACodeAndAMessageNamingWhatIsExpected) {
  const BadInput& bad = GetParam();
  try {
    bad.call(engine, q);
    ADD_FAILURE() << "no rail::Error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), bad.code) << e.what();
    EXPECT_NE(std::string(e.what()).find(bad.message), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Table, BadInputs, ::testing::ValuesIn(kBadInputs),
                         [](const ::testing::TestParamInfo<BadInput>& info) {
                           return std::string(info.param.name);
                         });

TEST(Options, ConcurrencyAtTheBoundIsAccepted) {
  Engine engine(EngineOptions{.mode = Mode::inlined});
  auto q = engine.declare_queue<int>("q", {});
  q.process({.concurrency = WorkerOptions::kMaxConcurrency}, [](Job<int>&) {});
}

}  // namespace
}  // namespace rail
