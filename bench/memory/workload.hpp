// Memory workloads (issue 4, item 6), the same for each contender:
//   bytes per waiting job  declare a queue of capacity C for an 8-byte payload, with no workers,
//                          fill it, and divide the growth of the heap (and of RSS) by C, minus
//                          the payload's 8 bytes: what the scheduler adds per waiting job.
//   allocations per job    after a warm-up, run --jobs=N no-op jobs (1 producer, the benchmark
//                          thread, and 2 workers) and divide the allocation calls made meanwhile
//                          by every thread (operator new, malloc, mimalloc) by N.
#pragma once

#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "memory/alloc_counter.hpp"

namespace bench {

struct MemoryConfig {
  std::uint64_t jobs = 1'000'000;   // --jobs=N: measured jobs for allocations per job
  std::size_t capacity = 1u << 20;  // --capacity=C: waiting jobs for bytes per job
};
MemoryConfig& memory_config();

/// report_bytes(state, before, after, jobs, payload): the bytes-per-waiting-job counters, from
/// the allocator's live usable bytes (RSS deltas are not comparable across benchmarks in one
/// process: pages an earlier benchmark freed stay mapped in the allocator and are reused).
inline void report_bytes(benchmark::State& state, const AllocSnapshot& before,
                         const AllocSnapshot& after, std::uint64_t jobs, std::size_t payload) {
  const double n = static_cast<double>(jobs);
  state.counters["heap_bytes_per_job"] =
      static_cast<double>(after.live_bytes - before.live_bytes) / n - static_cast<double>(payload);
  state.counters["waiting_jobs"] = n;
}

/// report_allocs(state, before, after, jobs): the allocations-per-job counters.
inline void report_allocs(benchmark::State& state, const AllocSnapshot& before,
                          const AllocSnapshot& after, std::uint64_t jobs) {
  const double n = static_cast<double>(jobs);
  state.counters["allocs_per_job"] = static_cast<double>(after.calls() - before.calls()) / n;
  state.counters["new_calls"] = static_cast<double>(after.new_calls - before.new_calls);
  state.counters["malloc_calls"] = static_cast<double>(after.malloc_calls - before.malloc_calls);
  state.counters["mi_calls"] = static_cast<double>(after.mi_calls - before.mi_calls);
  state.counters["jobs"] = n;
  state.SetItemsProcessed(static_cast<std::int64_t>(jobs));
}

/// MemoryResults: headline figures per benchmark name, for the summary on stderr.
void record_memory_result(const std::string& name, double value);
double memory_result(const std::string& name);

/// payload_task(payload, sink): what a pool's queue really holds for a job whose payload is an
/// 8-byte value — the bare callable that runs it (std::function<void()>, its capture of the
/// payload and of where the work goes fits std::function's local buffer: no heap per task).
inline std::function<void()> payload_task(std::uint64_t payload, std::atomic<std::uint64_t>* sink) {
  return [payload, sink] { sink->fetch_add(payload, std::memory_order_relaxed); };
}

/// measure_container_bytes<Queue>(state, name, push): a baseline's bytes per waiting job beyond
/// its 8-byte payload: fill a fresh Queue with memory_config().capacity tasks through
/// push(queue, i), each carrying payload i (payload_task), as the pool would hold them.
template <class Queue, class Push>
void measure_container_bytes(benchmark::State& state, const std::string& name, Push&& push) {
  const std::size_t capacity = memory_config().capacity;
  for (auto _ : state) {
    const AllocSnapshot before = snapshot();
    Queue q;
    const auto t0 = std::chrono::steady_clock::now();
    for (std::uint64_t i = 0; i < capacity; ++i)
      push(q, i);
    state.SetIterationTime(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    const AllocSnapshot filled = snapshot();
    report_bytes(state, before, filled, capacity, sizeof(std::uint64_t));
    record_memory_result(name, static_cast<double>(filled.live_bytes - before.live_bytes) /
                                       static_cast<double>(capacity) -
                                   static_cast<double>(sizeof(std::uint64_t)));
  }
}

/// measure_allocs(state, name, jobs, run, settle): the timed loop of every allocations-per-job
/// benchmark. run(n) submits n jobs and returns once they ran; settle() (optional) waits for the
/// contender's own end-of-job bookkeeping before the closing snapshot.
template <class Run, class Settle>
void measure_allocs(benchmark::State& state, const std::string& name, std::uint64_t jobs, Run&& run,
                    Settle&& settle) {
  for (auto _ : state) {
    const AllocSnapshot before = snapshot();
    const auto t0 = std::chrono::steady_clock::now();
    run(jobs);
    state.SetIterationTime(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    settle();
    const AllocSnapshot after = snapshot();
    report_allocs(state, before, after, jobs);
    record_memory_result(
        name, static_cast<double>(after.calls() - before.calls()) / static_cast<double>(jobs));
  }
}
template <class Run>
void measure_allocs(benchmark::State& state, const std::string& name, std::uint64_t jobs,
                    Run&& run) {
  measure_allocs(state, name, jobs, std::forward<Run>(run), [] {});
}

/// add_memory_benchmark(name, body): one run of one iteration, timed manually (the bodies time
/// only the measured jobs, not the warm-up).
inline void add_memory_benchmark(const std::string& name,
                                 const std::function<void(benchmark::State&)>& body) {
  benchmark::RegisterBenchmark(name.c_str(), body)
      ->UseManualTime()
      ->Iterations(1)
      ->Unit(benchmark::kMillisecond);
}

void register_rail_memory();
void register_moodycamel_memory();
void register_mutex_pool_memory();

}  // namespace bench
