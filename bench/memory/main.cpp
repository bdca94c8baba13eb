// memory_bench: issue 4 item 6 — engine bytes per waiting job and heap allocations per job in
// steady state, for rail and the two baseline pools.
//   memory_bench [--jobs=N] [--capacity=C] [--benchmark_* flags]
// --jobs (measured jobs for allocations per job) defaults to 1,000,000; --capacity (waiting jobs
// for bytes per job) to 2^20. Allocation counting: see memory/alloc_counter.hpp. The summary
// against issue 4's targets goes to stderr after the run.
#include <cstdio>
#include <map>
#include <mutex>
#include <string>

#include "engine/flags.hpp"
#include "memory/workload.hpp"

namespace bench {

MemoryConfig& memory_config() {
  static MemoryConfig c;
  return c;
}

namespace {
std::mutex g_results_mu;
std::map<std::string, double>& results() {
  static std::map<std::string, double> r;
  return r;
}
}  // namespace

void record_memory_result(const std::string& name, double value) {
  std::lock_guard lock(g_results_mu);
  results()[name] = value;
}
double memory_result(const std::string& name) {
  std::lock_guard lock(g_results_mu);
  auto it = results().find(name);
  return it == results().end() ? -1.0 : it->second;
}

namespace {

void print_summary() {
  std::fprintf(stderr, "\nmemory and allocation (same run)\n");
  std::lock_guard lock(g_results_mu);
  for (const auto& [name, value] : results())
    std::fprintf(stderr, "  %-44s %10.3f\n", name.c_str(), value);
  auto get = [](const char* n) {
    auto it = results().find(n);
    return it == results().end() ? -1.0 : it->second;
  };
  if (double b = get("rail/bytes_per_waiting_job"); b >= 0)
    std::fprintf(stderr, "  target: engine overhead <= 128 bytes per waiting job: %.1f  %s\n", b,
                 b <= 128 ? "MET" : "MISSED");
  if (double b = get("rail/bytes_per_idle_group"); b >= 0)
    std::fprintf(stderr, "  target: a FIFO group with no job left costs no memory: %.3f B  %s\n", b,
                 b < 1 ? "MET" : "MISSED");
  double worst = -1;
  for (const char* v : {"add", "add_bulk:64", "add+fail10%", "add+dedup", "add+events", "add+group",
                        "add+tenant"}) {
    double a = get(("rail/allocs_per_job/" + std::string(v)).c_str());
    if (a > worst) worst = a;
  }
  if (worst >= 0)
    std::fprintf(stderr,
                 "  target: 0 allocations per job in steady state: worst variant %.6f  %s\n", worst,
                 worst == 0 ? "MET" : "MISSED");
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  bench::MemoryConfig& c = bench::memory_config();
  bench::take_flag(argc, argv, "--jobs", c.jobs);
  bench::take_flag(argc, argv, "--capacity", c.capacity);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  bench::add_machine_context();
  benchmark::AddCustomContext("allocation_counting",
                              "operator new + malloc family + mimalloc, replaced in this binary");
  bench::register_rail_memory();
  bench::register_moodycamel_memory();
  bench::register_mutex_pool_memory();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  bench::print_summary();
  return 0;
}
