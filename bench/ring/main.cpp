// bench_ring: MPMC hand-off throughput of rail's ring against moodycamel, Boost.Lockfree and a
// mutex + deque (issue 4, item 1). The workload and its like-for-like rules are in
// ring_harness.hpp; each contender is in its own file.
#include "common/bench_main.hpp"
#include "ring/ring_harness.hpp"

int main(int argc, char** argv) {
  return rail_bench::run_main(argc, argv, [] {
    rail_bench::ring::register_rail();
    rail_bench::ring::register_moodycamel();
    rail_bench::ring::register_boost_lockfree();
    rail_bench::ring::register_mutex_deque();
  });
}
