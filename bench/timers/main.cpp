// bench_timers: rail's timing wheel against std::priority_queue with tombstones, for schedule,
// cancel and expire of 1M timers (issue 4, item 4; the engine's retry punctuality is measured by
// the engine benchmarks, not here). The workload is in timers_harness.hpp.
#include "common/bench_main.hpp"
#include "timers/timers_harness.hpp"

int main(int argc, char** argv) {
  return rail_bench::run_main(argc, argv, [] {
    rail_bench::timers::register_rail_wheel();
    rail_bench::timers::register_binary_heap();
  });
}
