// Shared by rail's micro-benchmark binaries (bench_ring, bench_timers, bench_dedup): a main()
// that records how the run was set up, and the opt-in thread pinning.
//
// Provenance (STYLE rule 11): every JSON file these binaries write carries, in its "context"
// block, the compiler, the optimisation flags, whether SMT was active, and whether threads were
// pinned, so a result can be compared only with results taken the same way. Pinning is off by
// default: this machine has 2 shared vCPUs, and pinning two benchmark threads onto cores that
// other engineers' jobs also use makes each of them wait for its one core instead of migrating to
// the idle one. Set RAIL_BENCH_PIN=1 to pin thread k of a run to CPU k mod (CPUs available).
#pragma once

#include <benchmark/benchmark.h>
#include <pthread.h>
#include <sched.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace rail_bench {

/// take_options(argc, argv, take): calls take(arg) for each argument and keeps those it refuses
/// (returns false) for Google Benchmark; returns them, argv[0] first.
template <class Take>
std::vector<char*> take_options(int argc, char** argv, Take take) {
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i)
    if (i == 0 || !take(std::string(argv[i]))) rest.push_back(argv[i]);
  return rest;
}

/// print_ratios(title, rates, baseline): each variant's rate and its ratio to `baseline`'s, on
/// stderr (nothing if the baseline did not run).
inline void print_ratios(const std::string& title, const std::map<std::string, double>& rates,
                         const std::string& baseline) {
  const auto base = rates.find(baseline);
  if (base == rates.end() || base->second == 0) return;
  std::fprintf(stderr, "\n%s\n", title.c_str());
  for (const auto& [name, rate] : rates)
    std::fprintf(stderr, "  %-24s %10.0f jobs/s  %6.3fx\n", name.c_str(), rate,
                 rate / base->second);
}

/// pinning_requested() is true when the environment variable RAIL_BENCH_PIN is set to 1.
inline bool pinning_requested() {
  const char* value = std::getenv("RAIL_BENCH_PIN");
  return value != nullptr && std::string(value) == "1";
}

/// pin_thread(k) pins the calling thread to the k-th CPU it may run on (mod their count) when
/// RAIL_BENCH_PIN=1, and does nothing otherwise. Best effort: a failure leaves the thread unpinned.
inline void pin_thread(unsigned k) {
  if (!pinning_requested()) return;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return;
  const int count = CPU_COUNT(&allowed);
  if (count <= 0) return;
  int wanted = static_cast<int>(k % static_cast<unsigned>(count));
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed)) continue;
    if (wanted-- == 0) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
      return;
    }
  }
}

/// smt_state() reads the kernel's SMT switch: "on", "off", or "unknown" when it is not exposed.
/// A VM that reports "off" may still run on host hyperthreads; the kernel cannot see that.
inline std::string smt_state() {
  std::ifstream file("/sys/devices/system/cpu/smt/active");
  int active = -1;
  if (file >> active) return active == 1 ? "on" : "off";
  return "unknown";
}

/// add_context() records the run's setup in Google Benchmark's context block.
inline void add_context() {
  benchmark::AddCustomContext("rail_compiler", __VERSION__);
#ifdef RAIL_BENCH_FLAGS
  benchmark::AddCustomContext("rail_flags", RAIL_BENCH_FLAGS);
#endif
  benchmark::AddCustomContext("rail_smt", smt_state());
  benchmark::AddCustomContext("rail_pinned", pinning_requested() ? "yes" : "no");
  benchmark::AddCustomContext("rail_hardware_threads",
                              std::to_string(std::thread::hardware_concurrency()));
}

/// run_main(argc, argv, register_all) is the body of each binary's main(): register_all() adds the
/// benchmarks (so their order in the output is the order written there, not static-init order).
template <class Register>
int run_main(int argc, char** argv, Register register_all) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  add_context();
  register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace rail_bench
