// Engine throughput workload (issue 4, item 2): add -> handler -> completed for N no-op jobs,
// the same for every contender (rail, a moodycamel BlockingConcurrentQueue pool, a mutex +
// condvar + deque pool), so each figure is a ratio against baselines run in the same process.
//
// What "the same" means here:
//   * the task body is CompletionLatch::hit() (engine/completion_latch.hpp) for every contender,
//     so the ratios compare the schedulers, not the bodies;
//   * every contender gets one untimed warm-up batch of N jobs first (steady state);
//   * each timed iteration runs from the moment the producers start to the moment the last task
//     has run (manual time: the engine or pool is built once per benchmark run, outside the
//     timed region, because State::PauseTiming costs more than a small batch);
//   * besides the rate, each benchmark reports the CPU time its contender spent per job
//     (cpu_ns_per_job: the process's CPU time over an iteration, less the background load's, over
//     the jobs; the median iteration's). Producers, workers, the engine's timer thread and the
//     waiting main thread all count. On busy cores the contenders get about the same share of the
//     machine, so their rates follow this figure;
//   * producers are threads spawned per iteration (a few tens of microseconds inside a window of
//     hundreds of milliseconds), each adding its share of the N jobs; rail's bounded queue makes
//     a producer that outruns the workers wait for room inside add (OnFull::block, as a
//     server that must not drop work configures it); the baselines' queues are unbounded. A full
//     dedup window is answered by yield-and-retry.
#pragma once

#include <benchmark/benchmark.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/background_load.hpp"
#include "engine/completion_latch.hpp"

namespace bench {

/// Config: the binary's own flags (parsed before Google Benchmark sees argv).
struct Config {
  std::uint64_t jobs = 1'000'000;  // --jobs=N: jobs per timed iteration
  std::int64_t iterations = 3;     // --iterations=K: timed iterations per benchmark
  std::size_t capacity = 65'536;   // --capacity=C: rail's queue capacity (its back-pressure)
  // --matrix=1x1,2x2,...: producers x workers cells run after the default rows, each with every
  // contender's scaling variants (rail add, add:shared, add_bulk:64; the moodycamel pool bare,
  // with consumer tokens, with producer tokens, bulk 64; the mutex pool).
  std::vector<std::pair<int, int>> matrix;
};
Config& config();

/// run_producers(p, n, fn) runs fn(begin, end) on p threads over [0, n) split evenly, and joins.
inline void run_producers(int producers, std::uint64_t n,
                          const std::function<void(std::uint64_t, std::uint64_t)>& fn) {
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(producers));
  for (int p = 0; p < producers; ++p) {
    std::uint64_t begin = n * static_cast<std::uint64_t>(p) / static_cast<std::uint64_t>(producers);
    std::uint64_t end =
        n * static_cast<std::uint64_t>(p + 1) / static_cast<std::uint64_t>(producers);
    threads.emplace_back([&fn, begin, end] { fn(begin, end); });
  }
  for (auto& t : threads)
    t.join();
}

/// Results keeps each benchmark's jobs/s so main() can print the ratios against the targets
/// after the run (on stderr: stdout stays pure JSON under --benchmark_format=json).
class Results {
 public:
  static Results& instance() {
    static Results r;
    return r;
  }
  void record(const std::string& name, double jobs_per_s) {
    std::lock_guard lock(mu_);
    rate_[name] = jobs_per_s;
  }
  [[nodiscard]] double rate(const std::string& name) const {
    std::lock_guard lock(mu_);
    auto it = rate_.find(name);
    return it == rate_.end() ? 0.0 : it->second;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, double> rate_;
};

/// process_cpu_ns(): the CPU time every thread of the process has used, the exited ones included.
inline std::int64_t process_cpu_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

/// median(v): the middle value (the mean of the two middle ones for an even count); v non-empty.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 == 0 ? (v[m - 1] + v[m]) / 2 : v[m];
}

/// timed_batches(state, name, latch, produce, load): the common iteration loop. After one untimed
/// warm-up batch, each iteration resets the latch to config().jobs, runs produce() (which returns
/// once every job is submitted), waits for the last task and reports the wall time from start to
/// that point. Files the median iteration's jobs/s under `name` in Results: this machine is
/// shared, and the median shrugs off an iteration that a neighbour's burst slowed down. `load`:
/// the background load the benchmark runs under, if any, whose CPU time is not the contender's.
inline void timed_batches(benchmark::State& state, const std::string& name, CompletionLatch& latch,
                          const std::function<void()>& produce,
                          const BackgroundLoad* load = nullptr) {
  const std::uint64_t n = config().jobs;
  // One untimed batch first: page faults on fresh rings and slots, moodycamel's first blocks,
  // rail's lazily built dedup window and per-slot error logs all belong to warm-up, not to the
  // steady state the targets are about.
  latch.reset(n);
  produce();
  latch.wait();
  auto own_cpu_ns = [load] { return process_cpu_ns() - (load ? load->cpu_ns() : 0); };
  std::vector<double> seconds, cpu_per_job;
  for (auto _ : state) {
    latch.reset(n);
    const std::int64_t cpu0 = own_cpu_ns();
    auto t0 = std::chrono::steady_clock::now();
    produce();
    latch.wait();
    auto t1 = std::chrono::steady_clock::now();
    const std::int64_t cpu1 = own_cpu_ns();
    double s = std::chrono::duration<double>(t1 - t0).count();
    seconds.push_back(s);
    cpu_per_job.push_back(static_cast<double>(cpu1 - cpu0) / static_cast<double>(n));
    state.SetIterationTime(s);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(n) * state.iterations());
  if (seconds.empty()) return;
  const double rate = static_cast<double>(n) / median(seconds);
  state.counters["median_jobs_per_s"] = rate;
  state.counters["cpu_ns_per_job"] = median(cpu_per_job);
  Results::instance().record(name, rate);
}

/// Registration hooks, one per contender file: the producers x workers matrix, then the extra
/// variants run at 1 producer + 2 workers (the configuration issue 4's targets name). main()
/// interleaves contenders per configuration, so the runs a ratio compares are close in time.
void register_rail(int producers, int workers, bool matrix = false);
void register_rail_extras();
void register_moodycamel(int producers, int workers);
void register_moodycamel_extras();
void register_mutex_pool(int producers, int workers);

/// case_name(contender, variant, producers, workers): "rail/add/p:1/w:2".
inline std::string case_name(const std::string& contender, const std::string& variant,
                             int producers, int workers) {
  return contender + "/" + variant + "/p:" + std::to_string(producers) +
         "/w:" + std::to_string(workers);
}

/// register_case(name, body) registers body(state, name) as a manual-time benchmark of
/// config().iterations iterations, once per name: a matrix cell that repeats a default row (2x2)
/// runs once. Called from main() only (single-threaded).
template <class Body>
void register_case(const std::string& name, Body body) {
  static std::set<std::string> registered;
  if (!registered.insert(name).second) return;
  benchmark::RegisterBenchmark(name.c_str(), [name, body](benchmark::State& s) { body(s, name); })
      ->UseManualTime()
      ->Iterations(config().iterations)
      ->Unit(benchmark::kMillisecond);
}

}  // namespace bench
