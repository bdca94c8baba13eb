// The mutex + condvar + deque pool in the memory workloads.
//   bytes per waiting job: the pool's std::deque<std::function<void()>> filled with C tasks, each
//   carrying its 8-byte payload (payload_task).
//   allocations per job: the engine workload's pool (engine/mutex_pool.hpp), 2 workers,
//   std::function<void()> tasks capturing one pointer.
#include "engine/mutex_pool.hpp"

#include <atomic>
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
  std::atomic<std::uint64_t> sink{0};
  measure_container_bytes<std::deque<std::function<void()>>>(
      state, name, [&sink](auto& q, std::uint64_t i) { q.push_back(payload_task(i, &sink)); });
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
