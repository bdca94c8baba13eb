// rail's contender in the latency workload: a threaded Engine, one queue of capacity 65,536, `w`
// worker threads (its own, or the engine's shared pool of `w`), JobOptions.max_attempts = 3 (as in
// the throughput workload); the handler records (its start - the producer's clock read before
// add()). Busy settings run a CPU-bound thread per core throughout (BackgroundLoad).
#include <optional>
#include <rail/rail.hpp>
#include <string>
#include <thread>

#include "common/background_load.hpp"
#include "engine/completion_latch.hpp"
#include "latency/workload.hpp"

namespace bench {
namespace {

struct Stamp {
  std::int64_t added_ns = 0;  // negative: a warm-up job, not recorded
};

void rail_latency(benchmark::State& state, const std::string& name, std::uint64_t rate, int workers,
                  Setting setting) {
  const std::uint64_t jobs =
      rate >= 100'000 ? latency_config().jobs_100k : latency_config().jobs_10k;
  const std::uint64_t warmup = std::min<std::uint64_t>(jobs / 10, 10'000);
  std::optional<BackgroundLoad> load;
  if (setting == Setting::busy || setting == Setting::busy_shared) load.emplace();
  const auto w = static_cast<std::uint32_t>(workers);
  const bool shared = setting == Setting::shared || setting == Setting::busy_shared;
  rail::Engine engine({.workers = w});
  auto q = engine.declare_queue<Stamp>("latency", rail::QueueOptions{.capacity = 65'536});
  PerThreadHistograms hists;
  CompletionLatch latch;
  q.process(shared ? rail::WorkerOptions::shared() : rail::WorkerOptions{.concurrency = w},
            [&hists, &latch](rail::Job<Stamp>& j) {
              const std::int64_t start = now_ns();
              if (j.data().added_ns >= 0)
                hists.record(static_cast<std::uint64_t>(start - j.data().added_ns));
              latch.hit();
            });
  const rail::JobOptions o{.max_attempts = 3};
  double seconds = 0;
  for (auto _ : state) {
    latch.reset(warmup + jobs);
    const std::int64_t t0 = now_ns();
    paced(warmup + jobs, static_cast<double>(rate), [&](std::uint64_t i, std::int64_t t) {
      Stamp s{i < warmup ? -t : t};
      while (q.add("tick", s, o).status == rail::AddStatus::full)
        std::this_thread::yield();
    });
    latch.wait();
    seconds = static_cast<double>(now_ns() - t0) / 1e9;
    state.SetIterationTime(seconds);
  }
  report(state, name, hists.merged(), seconds, warmup + jobs);
}

}  // namespace

void register_rail_latency(std::uint64_t rate, int workers, Setting setting) {
  std::string name = latency_name(contender_name("rail", setting), rate, workers);
  benchmark::RegisterBenchmark(name.c_str(),
                               [name, rate, workers, setting](benchmark::State& s) {
                                 rail_latency(s, name, rate, workers, setting);
                               })
      ->UseManualTime()
      ->Iterations(1)
      ->Unit(benchmark::kMillisecond);
}

}  // namespace bench
