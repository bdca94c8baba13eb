// Review of async completion (21c96ec): attacks on the slot protocol through Job::defer and
// Completion. Each test pins one race or sequence; the stress tests repeat random mixes under
// the sanitizers.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "rail/rail.hpp"
#include "support/downstream_options.hpp"
#include "support/eventually.hpp"
#include "support/inline_engine.hpp"
#include "support/watchdog.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;

/// Probe: a payload that counts destructions of value 3 (moved-from husks do not count) and
/// whose text lives on the heap, so that ASan also sees a read after its destruction.
struct Probe {
  static std::atomic<int>& destroyed() {
    static std::atomic<int> n{0};
    return n;
  }
  explicit Probe(int v) : value(v), text(64, static_cast<char>('a' + v % 26)) {}
  Probe(Probe&& o) noexcept : value(o.value), text(std::move(o.text)), armed(o.armed) {
    o.armed = false;
  }
  Probe& operator=(Probe&&) = delete;
  ~Probe() {
    if (armed && value == 3) destroyed().fetch_add(1);
  }
  [[nodiscard]] bool intact() const {
    return text.size() == 64 && text[63] == static_cast<char>('a' + value % 26);
  }
  int value;
  std::string text;
  bool armed = true;
};

// A handler whose Completion is completed before it returns (a cached answer calls back at
// once) still runs on its job's payload: the completion must not destroy it under the handler.
TEST(CompletionReview, CompletingInsideTheHandlerKeepsThePayloadUntilTheHandlerReturns) {
  ManualClock clock;
  Engine engine(EngineOptions{.clock = &clock, .mode = Mode::inlined});
  auto q = engine.queue<Probe>("calls", {});
  Probe::destroyed().store(0);
  int alive_after_complete = -1;
  bool intact_after_complete = false;
  q.process({.max_pending = 1}, [&](Job<Probe>& job) {
    Completion c = job.defer();
    EXPECT_TRUE(c.complete(Outcome::done()));
    // The handler has not returned: the payload is still its to read.
    alive_after_complete = Probe::destroyed().load() == 0 ? 1 : 0;
    intact_after_complete = job.data().intact();
    return Outcome::pending();
  });
  const JobId id = q.add("call", Probe(3)).id;
  EXPECT_EQ(engine.run_until_idle(), 1u);
  EXPECT_EQ(alive_after_complete, 1) << "the completion destroyed the payload under its handler";
  EXPECT_TRUE(intact_after_complete);
  EXPECT_EQ(Probe::destroyed().load(), 1) << "destroyed once the handler returned";
  EXPECT_EQ(q.state(id).status, JobStatus::completed);
  EXPECT_EQ(q.counts().active, 0u);
}

// The same from another thread, on worker threads: the completer ends the job while its
// handler still runs; the slot must not be freed (and reused) before the handler returns.
TEST(CompletionReview, ACompletionFromAnotherThreadWhileItsHandlerRunsLeavesThePayloadAlone) {
  const test::Watchdog watchdog(60s, "ACompletionFromAnotherThreadWhileItsHandlerRunsLeavesThePayloadAlone");
  Engine engine;
  auto q = engine.queue<Probe>("calls", {.capacity = 1});
  Probe::destroyed().store(0);
  std::atomic<int> alive_after_complete{-1};
  std::atomic<int> reused{-1};
  q.process({.max_pending = 1}, [&](Job<Probe>& job) {
    Completion c = job.defer();
    if (job.data().value != 3) return Outcome::pending();  // dropped: fails, ends (attempts 1)
    std::thread([&] {
      EXPECT_TRUE(c.complete(Outcome::done()));
      // The only slot: free only once the handler is done with it.
      reused.store(q.add("call", Probe(5)).status == AddStatus::added ? 1 : 0);
    }).join();
    alive_after_complete.store(Probe::destroyed().load() == 0 && job.data().intact() ? 1 : 0);
    return Outcome::pending();
  });
  const JobId id = q.add("call", Probe(3)).id;
  ASSERT_TRUE(test::eventually([&] { return alive_after_complete.load() != -1; }));
  EXPECT_EQ(alive_after_complete.load(), 1)
      << "the completion destroyed the payload under its handler";
  EXPECT_EQ(reused.load(), 0) << "the slot was handed to a new job while its handler ran";
  ASSERT_TRUE(test::eventually([&] { return q.state(id).status == JobStatus::completed; }));
  ASSERT_TRUE(q.drain(10s));
  EXPECT_EQ(q.counts().active, 0u);
}

// A job whose Completions are held while its lease lapses again and again: each stale Completion
// keeps its delivery's pin (16 bits in the slot's control word). With max_pending at the old
// bound (1 << 20), 65,536 lapses of one job overflowed its pins (the invariant aborted; a
// reproduction needs 65,536 sweeps of every pending record, minutes): max_pending is bounded
// below 65,536 less the workers and a canceller instead.
TEST(CompletionReview, MaxPendingStaysWithinWhatAJobsPinsCanCount) {
  static_assert(std::uint64_t{WorkerOptions::kMaxPending} + WorkerOptions::kMaxConcurrency + 1 <=
                0xFFFF);
  ManualClock clock;
  Engine engine(EngineOptions{.clock = &clock, .mode = Mode::inlined});
  auto q = engine.queue<int>("calls", {});
  try {
    q.process({.max_pending = 0x10000}, [](Job<int>&) { return Outcome::done(); });
    ADD_FAILURE() << "max_pending 65536 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find("max_pending"), std::string::npos) << e.what();
  }
  q.process({.max_pending = WorkerOptions::kMaxPending}, [](Job<int>&) { return Outcome::done(); });
}

}  // namespace
}  // namespace rail
