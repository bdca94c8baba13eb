// The platform floor of the latency workload: no queue library and no scheduler, just the
// producer writing the add time into a single-producer single-consumer array of atomics and one
// consumer thread busy-polling it without ever sleeping. Nothing can hand a job over faster on
// this machine, so its percentiles say how much of any contender's tail is the machine's own (a
// virtual CPU descheduled for tens of microseconds, timer interrupts), not the contender's.
#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "latency/workload.hpp"

namespace bench {
namespace {

void spin_handoff_latency(benchmark::State& state, const std::string& name, std::uint64_t rate) {
  const std::uint64_t jobs =
      rate >= 100'000 ? latency_config().jobs_100k : latency_config().jobs_10k;
  const std::uint64_t warmup = std::min<std::uint64_t>(jobs / 10, 10'000);
  const std::uint64_t total = warmup + jobs;
  // A cell holds an add time (never 0: steady_clock is far from its epoch) or 0 when empty.
  constexpr std::size_t kCells = 1 << 16;
  auto cells = std::make_unique<std::atomic<std::int64_t>[]>(kCells);
  PerThreadHistograms hists;
  double seconds = 0;
  for (auto _ : state) {
    std::thread consumer([&] {
      for (std::uint64_t i = 0; i < total; ++i) {
        std::atomic<std::int64_t>& cell = cells[i % kCells];
        std::int64_t added = 0;
        // acquire: pairs with the producer's release store; busy-polling, never sleeping.
        while ((added = cell.load(std::memory_order_acquire)) == 0)
          cpu_relax();
        const std::int64_t start = now_ns();
        if (i >= warmup) hists.record(static_cast<std::uint64_t>(start - added));
        cell.store(0, std::memory_order_release);  // the producer may reuse the cell
      }
    });
    const std::int64_t t0 = now_ns();
    paced(total, static_cast<double>(rate), [&](std::uint64_t i, std::int64_t t) {
      std::atomic<std::int64_t>& cell = cells[i % kCells];
      while (cell.load(std::memory_order_acquire) != 0)  // the consumer is a lap behind
        cpu_relax();
      cell.store(t, std::memory_order_release);
    });
    consumer.join();
    seconds = static_cast<double>(now_ns() - t0) / 1e9;
    state.SetIterationTime(seconds);
  }
  report(state, name, hists.merged(), seconds, total);
}

}  // namespace

void register_spin_handoff_latency(std::uint64_t rate) {
  std::string name = latency_name("spin_handoff", rate, 1);
  benchmark::RegisterBenchmark(
      name.c_str(), [name, rate](benchmark::State& s) { spin_handoff_latency(s, name, rate); })
      ->UseManualTime()
      ->Iterations(1)
      ->Unit(benchmark::kMillisecond);
}

}  // namespace bench
