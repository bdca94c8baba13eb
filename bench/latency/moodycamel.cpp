// The moodycamel BlockingConcurrentQueue pool (engine/moodycamel_pool.hpp) in the latency
// workload: std::function<void()> tasks, enqueue + wait_dequeue — the pool issue 4's latency
// target is stated against. The task captures a context pointer and the add time (16 bytes: it
// fits std::function's local buffer, so no task allocates).
#include <functional>
#include <optional>
#include <string>

#include "common/background_load.hpp"
#include "engine/completion_latch.hpp"
#include "engine/moodycamel_pool.hpp"
#include "latency/workload.hpp"

namespace bench {
namespace {

struct Context {
  PerThreadHistograms hists;
  CompletionLatch latch;
};

void moodycamel_latency(benchmark::State& state, const std::string& name, std::uint64_t rate,
                        int workers, Setting setting) {
  const std::uint64_t jobs =
      rate >= 100'000 ? latency_config().jobs_100k : latency_config().jobs_10k;
  const std::uint64_t warmup = std::min<std::uint64_t>(jobs / 10, 10'000);
  std::optional<BackgroundLoad> load;  // busy: as rail's busy rows (no shared pool here)
  if (setting == Setting::busy || setting == Setting::busy_shared) load.emplace();
  Context ctx;
  MoodycamelPool<std::function<void()>> pool(workers, 1);
  double seconds = 0;
  for (auto _ : state) {
    ctx.latch.reset(warmup + jobs);
    const std::int64_t t0 = now_ns();
    paced(warmup + jobs, static_cast<double>(rate), [&](std::uint64_t i, std::int64_t t) {
      const std::int64_t added = i < warmup ? -t : t;
      Context* c = &ctx;
      pool.submit([c, added] {
        const std::int64_t start = now_ns();
        if (added >= 0) c->hists.record(static_cast<std::uint64_t>(start - added));
        c->latch.hit();
      });
    });
    ctx.latch.wait();
    seconds = static_cast<double>(now_ns() - t0) / 1e9;
    state.SetIterationTime(seconds);
  }
  report(state, name, ctx.hists.merged(), seconds, warmup + jobs);
}

}  // namespace

void register_moodycamel_latency(std::uint64_t rate, int workers, Setting setting) {
  std::string name = latency_name(contender_name("moodycamel", setting), rate, workers);
  benchmark::RegisterBenchmark(name.c_str(),
                               [name, rate, workers, setting](benchmark::State& s) {
                                 moodycamel_latency(s, name, rate, workers, setting);
                               })
      ->UseManualTime()
      ->Iterations(1)
      ->Unit(benchmark::kMillisecond);
}

}  // namespace bench
