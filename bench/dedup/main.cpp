// bench_dedup: rail's dedup window against two mutex + unordered map baselines, check-and-insert
// with TTL expiry at 1 and 2 threads (issue 4, item 5). The workload is in dedup_harness.hpp.
#include "common/bench_main.hpp"
#include "dedup/dedup_harness.hpp"

int main(int argc, char** argv) {
  return rail_bench::run_main(argc, argv, [] {
    rail_bench::dedup::register_rail_dedup_set();
    rail_bench::dedup::register_mutex_unordered_map();
    rail_bench::dedup::register_mutex_unordered_map_fifo();
  });
}
