// dlq_bench: dead-lettering throughput with the DLQ journal on, under each sync policy, against
// the in-memory DLQ, as ratios taken in one run (issue 12).
//   dlq_bench [--jobs=N] [--dir=PATH] [--benchmark_* flags]
// Each iteration adds N jobs (default 2,000) to a threaded queue whose two workers fail every job
// permanently, so each job is dead-lettered once; it ends when the DLQ holds all N. The journal
// lives in --dir (default $TMPDIR or /tmp): the figures say as much about that file system's
// fdatasync as about rail, so the ratios are printed with the directory they were measured in.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "common/bench_main.hpp"
#include "rail/rail.hpp"

namespace {

struct Config {
  std::size_t jobs = 2000;
  std::string dir;
};
Config& config() {
  static Config c;
  return c;
}
std::map<std::string, double>& rates() {
  static std::map<std::string, double> r;
  return r;
}

struct Variant {
  std::string name;
  bool journal;
  rail::JournalSync sync;
};

void dead_letter(benchmark::State& state, const Variant& v) {
  const Config& c = config();
  const std::string path = c.dir + "/dlq_bench.dlq";
  std::filesystem::remove(path);
  rail::QueueOptions o;
  o.capacity = c.jobs;
  o.dlq.max_entries = c.jobs * 2;
  if (v.journal) {
    o.dlq.journal.path = path;
    o.dlq.journal.sync = v.sync;
    o.dlq.journal.sync_every_n = 64;
    o.dlq.journal.sync_interval = std::chrono::milliseconds(100);
    // Purging between iterations must not make the measured part pay for compactions.
    o.dlq.journal.compact_min_dead_bytes = std::uint64_t{1} << 40;
  }
  std::uint64_t done = 0;
  double seconds = 0;
  {
    rail::Engine engine;
    auto q = engine.declare_queue<std::string>("bench", o);
    q.process({.concurrency = 2},
              [](rail::Job<std::string>&) { return rail::Outcome::fail("card declined"); });
    const std::string payload(64, 'p');
    for (auto _ : state) {
      auto start = std::chrono::steady_clock::now();
      for (std::size_t i = 0; i < c.jobs; ++i)
        while (q.add("charge-card", payload).status != rail::AddStatus::added)
          std::this_thread::yield();
      while (q.dlq().size() < c.jobs)
        std::this_thread::yield();
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      done += c.jobs;
      state.PauseTiming();
      (void)q.dlq().purge();
      state.ResumeTiming();
    }
    engine.shutdown();
  }
  std::filesystem::remove(path);
  state.SetItemsProcessed(static_cast<std::int64_t>(done));
  rates()[v.name] = seconds > 0 ? static_cast<double>(done) / seconds : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config& c = config();
  const char* tmp = std::getenv("TMPDIR");
  c.dir = tmp && *tmp ? tmp : "/tmp";
  std::vector<char*> rest = rail_bench::take_options(argc, argv, [&c](const std::string& a) {
    if (a.rfind("--jobs=", 0) == 0)
      c.jobs = std::stoul(a.substr(7));
    else if (a.rfind("--dir=", 0) == 0)
      c.dir = a.substr(6);
    else
      return false;
    return true;
  });
  int n = static_cast<int>(rest.size());
  benchmark::Initialize(&n, rest.data());
  if (benchmark::ReportUnrecognizedArguments(n, rest.data())) return 1;
  rail_bench::add_context();
  benchmark::AddCustomContext("jobs_per_iteration", std::to_string(c.jobs));
  benchmark::AddCustomContext("journal_dir", c.dir);
  using rail::JournalSync;
  for (const Variant& v : {Variant{"in_memory", false, JournalSync::none},
                           Variant{"journal:every_entry", true, JournalSync::every_entry},
                           Variant{"journal:every_n:64", true, JournalSync::every_n},
                           Variant{"journal:interval:100ms", true, JournalSync::interval},
                           Variant{"journal:none", true, JournalSync::none}})
    benchmark::RegisterBenchmark(("dlq/" + v.name).c_str(),
                                 [v](benchmark::State& s) { dead_letter(s, v); })
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->MinTime(0.5);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  rail_bench::print_ratios(
      "dead-lettering throughput vs the in-memory DLQ (same run; journal in " + c.dir + ")",
      rates(), "in_memory");
  return 0;
}
