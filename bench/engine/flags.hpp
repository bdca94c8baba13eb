// Flags and run context shared by the engine-level benchmark binaries (engine, latency, memory).
// Each binary takes a few flags of its own (--jobs=N, ...) and removes them from argv before
// Google Benchmark parses the rest, so every --benchmark_* flag (--benchmark_format=json,
// --benchmark_filter=...) still works.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>
#include <thread>

namespace bench {

/// take_text_flag(argc, argv, "--matrix", out): if argv holds --matrix=V, copies V into out,
/// removes it from argv and returns true (the last one wins when it is given twice).
inline bool take_text_flag(int& argc, char** argv, std::string_view flag, std::string& out) {
  bool found = false;
  int w = 1;
  for (int r = 1; r < argc; ++r) {
    std::string_view a = argv[r];
    if (a.size() > flag.size() + 1 && a.substr(0, flag.size()) == flag && a[flag.size()] == '=') {
      out.assign(a.substr(flag.size() + 1));
      found = true;
      continue;
    }
    argv[w++] = argv[r];
  }
  argc = w;
  return found;
}

/// take_flag(argc, argv, "--jobs", out): if argv holds --jobs=V, parses V into out (an integer),
/// removes it from argv and returns true. Exits with a message on a malformed value.
template <class Int>
bool take_flag(int& argc, char** argv, std::string_view flag, Int& out) {
  std::string value;
  if (!take_text_flag(argc, argv, flag, value)) return false;
  char* end = nullptr;
  long long v = std::strtoll(value.c_str(), &end, 10);
  if (end == value.c_str() || *end != '\0' || v <= 0) {
    std::fprintf(stderr, "%.*s expects a positive integer, got '%s'\n",
                 static_cast<int>(flag.size()), flag.data(), value.c_str());
    std::exit(2);
  }
  out = static_cast<Int>(v);
  return true;
}

/// add_machine_context(): what the JSON needs to compare runs (issue 4 / STYLE rule 11).
inline void add_machine_context() {
  std::string smt = "unknown";
  if (std::ifstream f("/sys/devices/system/cpu/smt/active"); f) {
    int v = -1;
    f >> v;
    smt = v == 1 ? "on" : v == 0 ? "off" : "unknown";
  }
  benchmark::AddCustomContext("smt", smt);
  benchmark::AddCustomContext("hardware_threads",
                              std::to_string(std::thread::hardware_concurrency()));
  // rail owns its worker and timer threads and exposes no affinity hook; with 1-2 producers, 1-2
  // workers and a timer thread on a 2-core machine the cores are oversubscribed anyway, so no
  // contender (rail or baseline) is pinned: the scheduler places them all alike.
  benchmark::AddCustomContext("threads_pinned", "no");
  benchmark::AddCustomContext("compiler", "g++ " __VERSION__);
#ifdef RAIL_BENCH_FLAGS
  benchmark::AddCustomContext("bench_flags", RAIL_BENCH_FLAGS);
#endif
  // The machine is shared: its load when the run started says how much to trust absolute figures
  // (the ratios are measured in the same run either way).
  if (std::ifstream f("/proc/loadavg"); f) {
    std::string one, five, fifteen;
    f >> one >> five >> fifteen;
    benchmark::AddCustomContext("loadavg_at_start", one + " " + five + " " + fifteen);
  }
}

}  // namespace bench
