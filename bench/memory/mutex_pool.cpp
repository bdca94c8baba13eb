// The mutex + condvar + deque pool in the memory workloads.
//   bytes per waiting job: a std::deque<uint64_t> filled with C items.
//   allocations per job: the engine workload's pool (engine/mutex_pool.hpp), 2 workers,
//   std::function<void()> tasks capturing one pointer.
#include "engine/mutex_pool.hpp"

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>

#include "engine/completion_latch.hpp"
#include "memory/workload.hpp"

namespace bench {
namespace {

void deque_bytes_per_waiting_job(benchmark::State& state, const std::string& name) {
  measure_container_bytes<std::deque<std::uint64_t>>(
      state, name, [](auto& q, std::uint64_t i) { q.push_back(i); });
}

void mutex_pool_allocs_per_job(benchmark::State& state, const std::string& name) {
  const std::uint64_t jobs = memory_config().jobs;
  CompletionLatch latch;
  MutexPool pool(2);
  auto run = [&](std::uint64_t n) {
    latch.reset(n);
    for (std::uint64_t i = 0; i < n; ++i)
      pool.submit([&latch] { latch.hit(); });
    latch.wait();
  };
  run(3 * 65'536);  // warm-up, as long as rail's
  measure_allocs(state, name, jobs, run);
}

}  // namespace

void register_mutex_pool_memory() {
  add_memory_benchmark("mutex_pool/bytes_per_waiting_job", [](benchmark::State& s) {
    deque_bytes_per_waiting_job(s, "mutex_pool/bytes_per_waiting_job");
  });
  add_memory_benchmark("mutex_pool/allocs_per_job/fn", [](benchmark::State& s) {
    mutex_pool_allocs_per_job(s, "mutex_pool/allocs_per_job/fn");
  });
}

}  // namespace bench
