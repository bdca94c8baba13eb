// The mutex + condvar + deque pool (engine/mutex_pool.hpp) in the engine throughput workload:
// one submit() per job of the same no-op callable the moodycamel `fn` variant runs.
#include "engine/mutex_pool.hpp"

#include <string>

#include "engine/workload.hpp"

namespace bench {
namespace {

void mutex_pool(benchmark::State& state, const std::string& name, int producers, int workers) {
  CompletionLatch latch;
  MutexPool pool(workers);
  timed_batches(state, name, latch, [&] {
    run_producers(producers, config().jobs, [&](std::uint64_t begin, std::uint64_t end) {
      for (std::uint64_t i = begin; i < end; ++i)
        pool.submit([&latch] { latch.hit(); });
    });
  });
}

}  // namespace

void register_mutex_pool(int p, int w) {
  register_case(case_name("mutex_pool", "fn", p, w),
                [p, w](benchmark::State& s, const std::string& n) { mutex_pool(s, n, p, w); });
}

}  // namespace bench
