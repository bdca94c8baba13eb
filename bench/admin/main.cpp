// admin_bench: what the cold paths an admin endpoint calls cost on a full queue (issue 11:
// promote, changeDelay and getJobs "cheap enough for an admin endpoint"). Each is one pass over
// the queue's slots, so the figure grows with the capacity, not with the jobs asked for.
// Inline engine on a manual clock: the jobs stay where the setup put them (half waiting, half
// delayed an hour), whatever the benchmark loop does.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "rail/rail.hpp"

namespace {

using namespace std::chrono_literals;

/// Full: an inline engine whose queue of `capacity` slots holds `capacity` * 3/4 jobs.
struct Full {
  explicit Full(std::size_t capacity)
      : engine({.clock = &clock, .mode = rail::Mode::inlined}),
        q(engine.declare_queue<std::uint64_t>(
            "q", rail::QueueOptions{.capacity = static_cast<std::uint32_t>(capacity)})) {
    const std::size_t n = capacity * 3 / 4;
    ids.reserve(n);
    for (std::size_t i = 0; i < n; ++i)
      ids.push_back(q.add("job", i, {.delay = i % 2 ? 1h : 0s}).id);
  }
  rail::ManualClock clock;
  rail::Engine engine;
  rail::Queue<std::uint64_t> q;
  std::vector<rail::JobId> ids;
};

void BM_JobsWaitingFirst100(benchmark::State& state) {
  Full f(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state)
    benchmark::DoNotOptimize(f.q.jobs(rail::JobStatus::waiting, 100));
}

void BM_StateOfTheNewestJob(benchmark::State& state) {
  Full f(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state)
    benchmark::DoNotOptimize(f.q.state(f.ids.back()));
}

void BM_ChangeDelayOfADelayedJob(benchmark::State& state) {
  Full f(static_cast<std::size_t>(state.range(0)));
  const rail::JobId delayed = f.ids[f.ids.size() - 1 - (f.ids.size() % 2 == 0 ? 0 : 1)];
  bool longer = false;
  for (auto _ : state) {
    benchmark::DoNotOptimize(f.q.change_delay(delayed, longer ? 2h : 1h));
    longer = !longer;
  }
}

void BM_CancelAndAddBack(benchmark::State& state) {
  Full f(static_cast<std::size_t>(state.range(0)));
  rail::JobId id = f.ids.back();
  for (auto _ : state) {
    benchmark::DoNotOptimize(f.q.cancel(id));
    id = f.q.add("job", 1, {.delay = 1h}).id;
  }
}

#define RAIL_ADMIN_BENCH(fn) \
  BENCHMARK(fn)->Arg(1 << 12)->Arg(1 << 16)->Arg(1 << 20)->Unit(benchmark::kMicrosecond)
RAIL_ADMIN_BENCH(BM_JobsWaitingFirst100);
RAIL_ADMIN_BENCH(BM_StateOfTheNewestJob);
RAIL_ADMIN_BENCH(BM_ChangeDelayOfADelayedJob);
RAIL_ADMIN_BENCH(BM_CancelAndAddBack);

}  // namespace

BENCHMARK_MAIN();
