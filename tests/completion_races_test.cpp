// Async completion against the slot protocol: races and sequences through Job::defer and
// Completion (lapses, cancels, redrive, debounce, completing inside the handler). Each test pins
// one race or sequence; the stress tests repeat random mixes under the sanitizers.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "rail/rail.hpp"
#include "support/downstream_options.hpp"
#include "support/end_counter.hpp"
#include "support/ended_jobs.hpp"
#include "support/eventually.hpp"
#include "support/inline_engine.hpp"
#include "support/parked_completions.hpp"
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
TEST(CompletionRaces, CompletingInsideTheHandlerKeepsThePayloadUntilTheHandlerReturns) {
  ManualClock clock;
  Engine engine(EngineOptions{.clock = &clock, .mode = Mode::inlined});
  auto q = engine.declare_queue<Probe>("calls", {});
  Probe::destroyed().store(0);
  int alive_after_complete = -1;
  bool intact_after_complete = false;
  q.process({.max_pending = 1}, [&](Job<Probe>& job) {
    return job.defer([&](Completion c) {
      EXPECT_TRUE(c.complete(Outcome::done()));
      // The handler has not returned: the payload is still its to read.
      alive_after_complete = Probe::destroyed().load() == 0 ? 1 : 0;
      intact_after_complete = job.data().intact();
    });
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
TEST(CompletionRaces, ACompletionFromAnotherThreadWhileItsHandlerRunsLeavesThePayloadAlone) {
  const test::Watchdog watchdog(
      60s, "ACompletionFromAnotherThreadWhileItsHandlerRunsLeavesThePayloadAlone");
  Engine engine;
  auto q = engine.declare_queue<Probe>("calls", {.capacity = 1});
  Probe::destroyed().store(0);
  std::atomic<int> alive_after_complete{-1};
  std::atomic<int> reused{-1};
  q.process({.max_pending = 1}, [&](Job<Probe>& job) {
    Completion c;
    const Outcome pending = job.defer([&](Completion given) { c = std::move(given); });
    if (job.data().value != 3) return pending;  // dropped: fails, ends (attempts 1)
    std::thread([&] {
      EXPECT_TRUE(c.complete(Outcome::done()));
      // The only slot: free only once the handler is done with it.
      reused.store(q.add("call", Probe(5)).status == AddStatus::added ? 1 : 0);
    }).join();
    alive_after_complete.store(Probe::destroyed().load() == 0 && job.data().intact() ? 1 : 0);
    return pending;
  });
  const JobId id = q.add("call", Probe(3)).id;
  ASSERT_TRUE(test::eventually([&] { return alive_after_complete.load() != -1; }));
  EXPECT_EQ(alive_after_complete.load(), 1)
      << "the completion destroyed the payload under its handler";
  EXPECT_EQ(reused.load(), 0) << "the slot was handed to a new job while its handler ran";
  ASSERT_TRUE(test::eventually([&] { return q.state(id).status == JobStatus::completed; }));
  ASSERT_TRUE(q.wait_idle(10s));
  EXPECT_EQ(q.counts().active, 0u);
}

// A job whose Completions are held while its lease lapses again and again: each stale Completion
// keeps its delivery's pin (16 bits in the slot's control word). With max_pending at the old
// bound (1 << 20), 65,536 lapses of one job overflowed its pins (the invariant aborted; a
// reproduction needs 65,536 sweeps of every pending record, minutes): max_pending is bounded
// below 65,536 less the workers and a canceller instead.
TEST(CompletionRaces, MaxPendingStaysWithinWhatAJobsPinsCanCount) {
  static_assert(std::uint64_t{WorkerOptions::kMaxPending} + WorkerOptions::kMaxConcurrency + 1 <=
                0xFFFF);
  ManualClock clock;
  Engine engine(EngineOptions{.clock = &clock, .mode = Mode::inlined});
  auto q = engine.declare_queue<int>("calls", {});
  try {
    q.process({.max_pending = 0x10000}, [](Job<int>&) { return Outcome::done(); });
    ADD_FAILURE() << "max_pending 65536 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find("max_pending"), std::string::npos) << e.what();
  }
  q.process({.max_pending = WorkerOptions::kMaxPending}, [](Job<int>&) { return Outcome::done(); });
}

// --- stress ---------------------------------------------------------------------------------

/// Mix: one random round of handlers that defer in every way the API allows, completers on
/// other threads (some answer at once, some late past 1-3 ms leases, some drop), a canceller,
/// and a downstream permit held across the pending time.
using Mix = test::ParkedCompletions;

Outcome pick_outcome(std::uint64_t r) {
  switch (r % 8) {
    case 0:
      return Outcome::retry("503");
    case 1:
      return Outcome::fail("400");
    case 2:
      return Outcome::discard("stale");
    case 3:
      return Outcome::pushback(1ms, "429");
    default:
      return Outcome::done();
  }
}

void run_mix(std::uint32_t seed, bool shared_pool, bool with_downstream) {
  constexpr int kJobs = 300;
  std::mt19937_64 rng(seed);
  Engine engine(EngineOptions{.timer_tick = 100us, .workers = 2});
  if (with_downstream) engine.declare_downstream("svc", {.concurrency = 3});
  QueueOptions qo = with_downstream ? test::calling("svc") : QueueOptions{};
  qo.defaults = {.max_attempts = 3,
                 .backoff = Backoff::fixed(std::chrono::microseconds(rng() % 2000))};
  qo.visibility_timeout = std::chrono::milliseconds(1 + rng() % 3);
  qo.max_stalls = 2;
  auto q = engine.declare_queue<Probe>("calls", qo);
  test::EndCounter ends;
  std::vector<JobId> ids(kJobs + 1, 0);
  engine.on_event(ends.observer());
  Mix mix;
  std::atomic<int> torn{0};
  WorkerOptions wo = shared_pool ? WorkerOptions::shared() : WorkerOptions{.concurrency = 2};
  wo.max_pending = 64;
  q.process(wo, [&](Job<Probe>& job) -> Outcome {
    const std::uint64_t r = job.id() * 0x9E3779B97F4A7C15ull ^ job.deliveries() * 31 ^ seed;
    const int how = static_cast<int>((r >> 7) % 6);
    if (how == 5) return pick_outcome(r >> 11);  // no defer
    Completion c;
    Outcome out;
    try {
      out = job.defer([&](Completion given) { c = std::move(given); });
    } catch (const Error&) {
      return Outcome::retry("max_pending");  // capacity: all 64 records out
    }
    switch (how) {
      case 0:  // answered at once, before the handler returns
        c.complete(pick_outcome(r >> 11));
        break;
      case 1:  // deferred, then the handler throws: the Completion is dropped in the unwind
        if (!job.data().intact()) torn.fetch_add(1);
        throw std::runtime_error("after defer");
      case 2:  // deferred and parked, but the handler says done: ignored
        mix.put(std::move(c));
        out = Outcome::done();
        break;
      default:
        mix.put(std::move(c));
        break;
    }
    // After the hand-off: the payload is still the handler's until it returns.
    if (!job.data().intact()) torn.fetch_add(1);
    return out;
  });
  for (int i = 1; i <= kJobs; ++i) {
    const AddReceipt a = q.add("call", Probe(i));
    ASSERT_EQ(a.status, AddStatus::added);
    const std::lock_guard lock(ends.mu);
    ids[i] = a.id;
  }
  std::atomic<bool> stop{false};
  std::vector<std::thread> helpers;
  for (unsigned t = 0; t < 2; ++t)
    helpers.emplace_back([&, t] {
      std::mt19937_64 local(seed * 3 + t);
      while (!stop.load()) {
        for (Completion& c : mix.take()) {
          const std::uint64_t x = local();
          if (x % 5 == 0) std::this_thread::sleep_for(std::chrono::microseconds(x % 2500));
          if (x % 7 == 0) (void)c.extend_lease(std::chrono::milliseconds(1 + x % 3));
          if (x % 11 == 0) (void)c.cancelled();
          if (x % 9 == 0) {
            c = Completion{};  // dropped
          } else {
            (void)c.complete(pick_outcome(x >> 8));
          }
        }
        std::this_thread::yield();
      }
    });
  helpers.emplace_back([&] {  // the canceller
    std::mt19937_64 local(seed * 5);
    while (!stop.load()) {
      JobId id;
      {
        const std::lock_guard lock(ends.mu);
        id = ids[1 + local() % kJobs];
      }
      (void)q.cancel(id);
      std::this_thread::sleep_for(std::chrono::microseconds(200 + local() % 800));
    }
  });
  const bool settled = test::eventually(
      [&] {
        const QueueCounts c = q.counts();
        return test::ended_jobs(c) == kJobs && c.active == 0 && c.waiting == 0 && c.delayed == 0;
      },
      20s);
  stop.store(true);
  for (auto& t : helpers)
    t.join();
  for (Completion& late : mix.take())
    EXPECT_FALSE(late.complete(Outcome::done())) << "seed " << seed << ": every job had ended";
  const QueueCounts c = q.counts();
  ASSERT_TRUE(settled) << "seed " << seed << ": completed " << c.completed << " dlq "
                       << c.dead_lettered << " cancelled " << c.cancelled << " discarded "
                       << c.discarded << " active " << c.active << " waiting " << c.waiting
                       << " delayed " << c.delayed;
  EXPECT_EQ(torn.load(), 0) << "seed " << seed << ": a handler read a destroyed payload";
  EXPECT_EQ(q.dlq().size(), c.dead_lettered) << "seed " << seed;
  if (with_downstream) {
    EXPECT_EQ(engine.downstream("svc").stats().in_flight, 0u) << "seed " << seed;
  }
  const std::lock_guard lock(ends.mu);
  EXPECT_EQ(ends.ends.size(), static_cast<std::size_t>(kJobs)) << "seed " << seed;
  for (int i = 1; i <= kJobs; ++i)
    EXPECT_EQ(ends.ends[ids[i]], 1)
        << "seed " << seed << ": job " << ids[i] << " ended " << ends.ends[ids[i]] << " times";
}

std::uint32_t base_seed() {
  const char* env = std::getenv("RAIL_REVIEW_SEED");
  return env != nullptr ? static_cast<std::uint32_t>(std::strtoul(env, nullptr, 10))
                        : std::random_device{}();
}

TEST(CompletionRaceStress, DedicatedWorkersWithDownstream) {
  const test::Watchdog watchdog(120s, "DedicatedWorkersWithDownstream");
  const std::uint32_t seed = base_seed();
  for (std::uint32_t round = 0; round < 3; ++round)
    run_mix(seed + round, false, true);
}

TEST(CompletionRaceStress, SharedPoolWithoutDownstream) {
  const test::Watchdog watchdog(120s, "SharedPoolWithoutDownstream");
  const std::uint32_t seed = base_seed();
  for (std::uint32_t round = 0; round < 3; ++round)
    run_mix(seed + round, true, false);
}

TEST(CompletionRaceStress, SharedPoolWithDownstream) {
  const test::Watchdog watchdog(120s, "SharedPoolWithDownstream");
  const std::uint32_t seed = base_seed();
  for (std::uint32_t round = 0; round < 3; ++round)
    run_mix(seed + round, true, true);
}

/// Completers: threads that answer whatever Completions are parked, until stopped.
class Completers {
 public:
  Completers(std::shared_ptr<Mix> mix, std::uint64_t seed, unsigned n) : mix_(std::move(mix)) {
    for (unsigned t = 0; t < n; ++t)
      threads_.emplace_back([this, seed, t] {
        std::mt19937_64 local(seed * 7 + t);
        while (!stop_.load()) {
          for (Completion& c : mix_->take()) {
            const std::uint64_t x = local();
            if (x % 13 == 0) std::this_thread::sleep_for(std::chrono::microseconds(x % 300));
            if (x % 7 == 0) (void)c.extend_lease(1s);
            if (x % 5 == 0) (void)c.cancelled();
            if (x % 4 == 0) {
              c = Completion{};
            } else if (c.complete(x % 3 == 0 ? Outcome::retry("503") : Outcome::done())) {
              answered.fetch_add(1);
            } else {
              refused.fetch_add(1);
            }
          }
          std::this_thread::yield();
        }
      });
  }
  Completers(const Completers&) = delete;
  Completers& operator=(const Completers&) = delete;
  ~Completers() { stop(); }
  void stop() {
    stop_.store(true);
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }
  std::atomic<int> answered{0};
  std::atomic<int> refused{0};

 private:
  std::shared_ptr<Mix> mix_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

// Completions answered and dropped on other threads while the engine is destroyed: the hub's
// close waits out the completers inside; later ones touch nothing (TSan/ASan are the judges).
TEST(CompletionRaceStress, CompletionsRaceTheEnginesDestruction) {
  const test::Watchdog watchdog(120s, "CompletionsRaceTheEnginesDestruction");
  const std::uint32_t seed = base_seed();
  for (std::uint32_t round = 0; round < 12; ++round) {
    auto mix = std::make_shared<Mix>();
    Completers completers(mix, seed + round, 2);
    {
      Engine engine(EngineOptions{.timer_tick = 100us, .workers = 2});
      auto q = engine.declare_queue<Probe>(
          "calls", {.defaults = {.max_attempts = 5, .backoff = Backoff::fixed(1ms)},
                    .visibility_timeout = 20ms,
                    .max_stalls = 5});
      WorkerOptions wo = round % 2 == 0 ? WorkerOptions{.concurrency = 2} : WorkerOptions::shared();
      wo.max_pending = 128;
      q.process(wo, [mix](Job<Probe>& job) {
        return job.defer([&](Completion c) { mix->put(std::move(c)); });
      });
      for (int i = 0; i < 100; ++i)
        ASSERT_EQ(q.add("call", Probe(i)).status, AddStatus::added);
      const int want = static_cast<int>((seed + round) % 60);
      ASSERT_TRUE(test::eventually([&] { return completers.answered.load() >= want; }, 10s))
          << "seed " << seed + round << ": answered " << completers.answered.load() << " of "
          << want << "; completed " << q.counts().completed << " dlq " << q.counts().dead_lettered
          << " refused " << completers.refused.load() << " active " << q.counts().active
          << " waiting " << q.counts().waiting << " delayed " << q.counts().delayed;
    }  // destroyed while the completers answer
    const int after = completers.answered.load();
    std::this_thread::sleep_for(1ms);  // give late completers a go (decides nothing)
    completers.stop();
    EXPECT_EQ(completers.answered.load(), after) << "a completion counted after the engine died";
    for (Completion& c : mix->take())
      EXPECT_FALSE(c.complete(Outcome::done()));
  }
}

// Completions answered while shutdown() waits and take_leftovers() takes: every job ends once
// or comes back once, never both.
TEST(CompletionRaceStress, CompletionsRaceShutdownAndTakeLeftovers) {
  const test::Watchdog watchdog(120s, "CompletionsRaceShutdownAndTakeLeftovers");
  const std::uint32_t seed = base_seed();
  for (std::uint32_t round = 0; round < 8; ++round) {
    constexpr int kJobs = 100;
    auto mix = std::make_shared<Mix>();
    Completers completers(mix, seed + round, 2);
    Engine engine(EngineOptions{.timer_tick = 100us, .workers = 2});
    auto q = engine.declare_queue<Probe>("calls", {.defaults = {.max_attempts = 1000}});
    test::EndCounter ends;
    engine.on_event(ends.observer());
    WorkerOptions wo = round % 2 == 0 ? WorkerOptions{.concurrency = 2} : WorkerOptions::shared();
    wo.max_pending = 16;
    q.process(wo, [mix](Job<Probe>& job) {
      return job.defer([&](Completion c) { mix->put(std::move(c)); });
    });
    std::vector<JobId> ids;
    for (int i = 0; i < kJobs; ++i) {
      const AddReceipt a = q.add("call", Probe(i));
      ASSERT_EQ(a.status, AddStatus::added);
      ids.push_back(a.id);
    }
    const int want = static_cast<int>((seed + round) % 40);
    ASSERT_TRUE(test::eventually([&] { return completers.answered.load() >= want; }));
    (void)engine.shutdown(std::chrono::milliseconds((seed + round) % 3));
    std::unordered_map<JobId, int> back;
    for (auto& l : q.take_leftovers())
      ++back[l.id];
    completers.stop();
    // A worker may still be inside a handler that is about to park its Completion: answer
    // until nothing is pending (each retry goes back to waiting, for take_leftovers).
    EXPECT_TRUE(test::eventually(
        [&] {
          for (Completion& c : mix->take())
            (void)c.complete(Outcome::retry("at shutdown"));
          for (auto& l : q.take_leftovers())
            ++back[l.id];
          return q.counts().active == 0 && q.counts().waiting == 0 && q.counts().delayed == 0;
        },
        10s))
        << "seed " << seed + round << ": active " << q.counts().active;
    const ShutdownReport again = engine.shutdown(0s);
    EXPECT_TRUE(again.still_running.empty()) << "round " << round;
    EXPECT_EQ(q.counts().active, 0u) << "round " << round;
    const std::lock_guard lock(ends.mu);
    for (JobId id : ids)
      EXPECT_EQ(ends.ends[id] + back[id], 1)
          << "seed " << seed + round << ": job " << id << " ended " << ends.ends[id]
          << " times, came back " << back[id] << " times";
  }
}

// An inline engine on a manual clock: the test thread runs jobs and moves time (lapses, retries)
// while another thread completes: every job ends exactly once.
TEST(CompletionRaceStress, InlineEngineRacesACompleterThread) {
  const test::Watchdog watchdog(120s, "InlineEngineRacesACompleterThread");
  const std::uint32_t seed = base_seed();
  for (std::uint32_t round = 0; round < 6; ++round) {
    constexpr int kJobs = 200;
    std::mt19937_64 rng(seed + round);
    ManualClock clock;
    auto mix = std::make_shared<Mix>();
    Engine engine(EngineOptions{.clock = &clock, .mode = Mode::inlined});
    auto q = engine.declare_queue<Probe>(
        "calls", {.defaults = {.max_attempts = 3, .backoff = Backoff::fixed(10ms)},
                  .visibility_timeout = 1s,
                  .max_stalls = 3});
    test::EndCounter ends;
    engine.on_event(ends.observer());
    std::atomic<int> torn{0};
    q.process({.max_pending = 16}, [&](Job<Probe>& job) -> Outcome {
      Completion c;
      Outcome pending;
      try {
        pending = job.defer([&](Completion given) { c = std::move(given); });
      } catch (const Error&) {
        return Outcome::retry("max_pending");
      }
      if (job.id() % 5 == 0) {
        c.complete(pick_outcome(job.id() >> 3));
      } else {
        mix->put(std::move(c));
      }
      if (!job.data().intact()) torn.fetch_add(1);
      return pending;
    });
    std::vector<JobId> ids;
    for (int i = 0; i < kJobs; ++i)
      ids.push_back(q.add("call", Probe(i)).id);
    Completers completers(mix, seed + round, 1);
    for (int step = 0; step < 20000; ++step) {
      engine.run_until_idle();
      if (rng() % 3 == 0) clock.advance(std::chrono::milliseconds(rng() % 1500));
      const QueueCounts c = q.counts();
      if (test::ended_jobs(c) == kJobs) break;
      if (rng() % 4 == 0) (void)q.cancel(ids[rng() % kJobs]);
      std::this_thread::yield();
    }
    completers.stop();
    for (Completion& c : mix->take())
      EXPECT_FALSE(c.complete(Outcome::done()));
    const QueueCounts c = q.counts();
    EXPECT_EQ(test::ended_jobs(c), static_cast<std::uint64_t>(kJobs)) << "seed " << seed + round;
    EXPECT_EQ(c.active, 0u);
    EXPECT_EQ(torn.load(), 0);
    const std::lock_guard lock(ends.mu);
    for (JobId id : ids)
      EXPECT_EQ(ends.ends[id], 1) << "seed " << seed + round << ": job " << id;
  }
}

}  // namespace
}  // namespace rail
