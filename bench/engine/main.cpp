// engine_bench: issue 4 item 2 — engine throughput against the moodycamel and mutex pools.
//   engine_bench [--jobs=N] [--iterations=K] [--capacity=C] [--benchmark_* flags]
// --jobs defaults to 1,000,000 per timed iteration (--jobs=200000 for a quick run), --iterations
// to 3, --capacity (rail's bounded queue) to 65,536. After the run, the ratios against issue 4's
// targets go to stderr (stdout stays the reporter's: console or --benchmark_format=json).
#include <cstdio>
#include <string>
#include <utility>

#include "engine/flags.hpp"
#include "engine/workload.hpp"

namespace bench {

Config& config() {
  static Config c;
  return c;
}

namespace {

struct Ratio {
  const char* what;
  std::string ours;
  std::string base;
  double target;  // <= 0: informational
};

void print_ratios() {
  const Results& r = Results::instance();
  const std::string mc = case_name("moodycamel", "fn", 1, 2);
  const std::string add = case_name("rail", "add", 1, 2);
  const Ratio rows[] = {
      {"single add, 1P+2W vs moodycamel pool (bare callable)", add, mc, 1.0},
      {"add_bulk:64, 1P+2W vs moodycamel pool (bare callable)",
       case_name("rail", "add_bulk:64", 1, 2), mc, 5.0},
      {"add_bulk:256, 1P+2W vs moodycamel pool (bare callable)",
       case_name("rail", "add_bulk:256", 1, 2), mc, 5.0},
      {"single add, 1P+2W vs moodycamel struct+deqbulk", add,
       case_name("moodycamel", "struct+deqbulk", 1, 2), 0},
      {"add_bulk:64 vs moodycamel enqueue_bulk:64, 1P+2W", case_name("rail", "add_bulk:64", 1, 2),
       case_name("moodycamel", "struct+bulk:64", 1, 2), 0},
      {"single add, 1P+2W vs mutex pool", add, case_name("mutex_pool", "fn", 1, 2), 0},
      {"single add, 2P+2W vs moodycamel pool", case_name("rail", "add", 2, 2),
       case_name("moodycamel", "fn", 2, 2), 0},
      {"single add, 1P+1W vs moodycamel pool", case_name("rail", "add", 1, 1),
       case_name("moodycamel", "fn", 1, 1), 0},
      {"feature cost: 10% failures + retries vs plain add", case_name("rail", "add+fail10%", 1, 2),
       add, 0},
      {"feature cost: dedup ids vs plain add", case_name("rail", "add+dedup", 1, 2), add, 0},
      {"feature cost: event observer vs plain add", case_name("rail", "add+events", 1, 2), add, 0},
      {"feature cost: downstream permit vs plain add", case_name("rail", "add+permit", 1, 2), add,
       0},
      {"feature cost: downstream rate + permit vs plain add", case_name("rail", "add+rate", 1, 2),
       add, 0},
      // Issue 14: the shared pool.
      {"shared pool: single add, 1P+2W vs moodycamel pool", case_name("rail", "add:shared", 1, 2),
       mc, 1.0},
      {"shared pool: single add, 2P+2W vs moodycamel pool", case_name("rail", "add:shared", 2, 2),
       case_name("moodycamel", "fn", 2, 2), 1.0},
      {"shared pool: add_bulk:64, 1P+2W vs moodycamel pool",
       case_name("rail", "add_bulk:64:shared", 1, 2), mc, 3.0},
      {"shared pool vs the queue's own pool, single add 1P+2W",
       case_name("rail", "add:shared", 1, 2), add, 0},
      {"20 queues: one shared pool (2 thr) vs a pool each (20 thr)",
       case_name("rail", "add:20q-shared", 1, 2), case_name("rail", "add:20q-own1", 1, 20), 0},
      {"busy cores: shared pool vs moodycamel pool, 1P+2W",
       case_name("rail", "add:busy-shared", 1, 2), case_name("moodycamel", "fn:busy", 1, 2), 1.0},
      {"busy cores: own pool vs moodycamel pool, 1P+2W", case_name("rail", "add:busy", 1, 2),
       case_name("moodycamel", "fn:busy", 1, 2), 0},
  };
  std::fprintf(stderr, "\nengine throughput ratios (median jobs/s of each benchmark, same run)\n");
  for (const Ratio& row : rows) {
    double a = r.rate(row.ours);
    double b = r.rate(row.base);
    if (a == 0 || b == 0) continue;  // filtered out of this run
    double ratio = a / b;
    std::string verdict = "info";
    if (row.target > 0) verdict = ratio >= row.target ? "MET" : "MISSED";
    std::fprintf(stderr, "  %-58s %7.2f M/s / %7.2f M/s = %5.2fx", row.what, a / 1e6, b / 1e6,
                 ratio);
    if (row.target > 0)
      std::fprintf(stderr, "  target >= %.1fx: %s\n", row.target, verdict.c_str());
    else
      std::fprintf(stderr, "\n");
  }
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  bench::Config& c = bench::config();
  bench::take_flag(argc, argv, "--jobs", c.jobs);
  bench::take_flag(argc, argv, "--iterations", c.iterations);
  bench::take_flag(argc, argv, "--capacity", c.capacity);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  bench::add_machine_context();
  benchmark::AddCustomContext("jobs_per_iteration", std::to_string(c.jobs));
  benchmark::AddCustomContext("rail_queue_capacity", std::to_string(c.capacity));
  // 1P+2W first: it is the configuration the targets name.
  for (auto [p, w] : {std::pair{1, 2}, std::pair{1, 1}, std::pair{2, 1}, std::pair{2, 2}}) {
    bench::register_rail(p, w);
    bench::register_moodycamel(p, w);
    bench::register_mutex_pool(p, w);
  }
  bench::register_rail_extras();
  bench::register_moodycamel_extras();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  bench::print_ratios();
  return 0;
}
