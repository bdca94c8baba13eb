// The moodycamel BlockingConcurrentQueue pool in the memory workloads.
//   bytes per waiting job: the pool's BlockingConcurrentQueue<std::function<void()>> filled with
//   C tasks, each carrying its 8-byte payload (payload_task; no workers).
//   allocations per job: the engine workload's pool (engine/moodycamel_pool.hpp), 2 workers, with
//   `fn` tasks (std::function<void()> whose capture — one pointer — fits its local buffer) and
//   `struct` tasks (PlainTask: a function pointer and a context).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "engine/completion_latch.hpp"
#include "engine/moodycamel_pool.hpp"
#include "memory/workload.hpp"

namespace bench {
namespace {

void moodycamel_bytes_per_waiting_job(benchmark::State& state, const std::string& name) {
  std::atomic<std::uint64_t> sink{0};
  measure_container_bytes<moodycamel::BlockingConcurrentQueue<std::function<void()>>>(
      state, name, [&sink](auto& q, std::uint64_t i) { q.enqueue(payload_task(i, &sink)); });
}

void hit_latch(void* latch) {
  static_cast<CompletionLatch*>(latch)->hit();
}

template <class Task, class Make>
void moodycamel_allocs_per_job(benchmark::State& state, const std::string& name, Make make) {
  const std::uint64_t jobs = memory_config().jobs;
  CompletionLatch latch;
  MoodycamelPool<Task> pool(2, 1);
  auto run = [&](std::uint64_t n) {
    latch.reset(n);
    for (std::uint64_t i = 0; i < n; ++i)
      pool.submit(make(latch));
    latch.wait();
  };
  run(3 * 65'536);  // warm-up, as long as rail's
  measure_allocs(state, name, jobs, run);
}

}  // namespace

void register_moodycamel_memory() {
  add_memory_benchmark("moodycamel/bytes_per_waiting_job", [](benchmark::State& s) {
    moodycamel_bytes_per_waiting_job(s, "moodycamel/bytes_per_waiting_job");
  });
  add_memory_benchmark("moodycamel/allocs_per_job/fn", [](benchmark::State& s) {
    moodycamel_allocs_per_job<std::function<void()>>(
        s, "moodycamel/allocs_per_job/fn",
        [](CompletionLatch& l) { return std::function<void()>([&l] { l.hit(); }); });
  });
  add_memory_benchmark("moodycamel/allocs_per_job/struct", [](benchmark::State& s) {
    moodycamel_allocs_per_job<PlainTask>(s, "moodycamel/allocs_per_job/struct",
                                         [](CompletionLatch& l) {
                                           return PlainTask{&hit_latch, &l};
                                         });
  });
}

}  // namespace bench
