// engine_bench: engine throughput against the moodycamel and mutex pools.
//   engine_bench [--jobs=N] [--iterations=K] [--capacity=C] [--matrix=PxW,...]
//                [--benchmark_* flags]
// --jobs defaults to 1,000,000 per timed iteration (--jobs=200000 for a quick run), --iterations
// to 3, --capacity (rail's bounded queue) to 65,536. --matrix=1x1,2x2,4x4,8x8,1x8 adds the scaling
// cells after the default rows (which it leaves as they are). After the run, the ratios go to
// stderr (stdout stays the reporter's: console or --benchmark_format=json).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

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

/// parse_matrix("1x1,8x8"): the cells, or exits with a message naming the malformed one.
std::vector<std::pair<int, int>> parse_matrix(const std::string& text) {
  std::vector<std::pair<int, int>> cells;
  std::size_t at = 0;
  while (at <= text.size()) {
    std::size_t comma = text.find(',', at);
    if (comma == std::string::npos) comma = text.size();
    const std::string cell = text.substr(at, comma - at);
    int p = 0, w = 0, used = 0;
    if (std::sscanf(cell.c_str(), "%dx%d%n", &p, &w, &used) != 2 ||
        used != static_cast<int>(cell.size()) || p < 1 || w < 1 || p > 256 || w > 256) {
      std::fprintf(stderr,
                   "--matrix expects producers x workers cells such as 1x1,8x8 (1..256 each), "
                   "got '%s'\n",
                   cell.c_str());
      std::exit(2);
    }
    cells.emplace_back(p, w);
    at = comma + 1;
  }
  return cells;
}

/// print_matrix(): each cell's rail add against the moodycamel pool with producer tokens, and
/// each contender's scaling (its last cell over its first, 8x8 over 1x1 for the default list).
void print_matrix() {
  const Results& r = Results::instance();
  const auto& cells = config().matrix;
  if (cells.empty()) return;
  std::fprintf(stderr, "\nscaling matrix (median M jobs/s)\n  %-30s", "contender");
  for (auto [p, w] : cells)
    std::fprintf(stderr, " %5dx%-3d", p, w);
  std::fprintf(stderr, "  last/first\n");
  const std::pair<const char*, const char*> contenders[] = {
      {"rail", "add"},      {"rail", "add:shared"},          {"rail", "add_bulk:64"},
      {"moodycamel", "fn"}, {"moodycamel", "fn+tokens"},     {"moodycamel", "fn+ptokens"},
      {"mutex_pool", "fn"}, {"moodycamel", "struct+bulk:64"}};
  for (auto [contender, variant] : contenders) {
    std::fprintf(stderr, "  %-30s", (std::string(contender) + " " + variant).c_str());
    for (auto [p, w] : cells)
      std::fprintf(stderr, " %9.2f", r.rate(case_name(contender, variant, p, w)) / 1e6);
    const double first =
        r.rate(case_name(contender, variant, cells.front().first, cells.front().second));
    const double last =
        r.rate(case_name(contender, variant, cells.back().first, cells.back().second));
    if (first > 0 && last > 0)
      std::fprintf(stderr, "  %5.2fx\n", last / first);
    else
      std::fprintf(stderr, "  -\n");
  }
}

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
      {"add_bulk:64 + process_batch:64 vs moodycamel bulk:64, 1P+2W",
       case_name("rail", "add_bulk:64+batch:64", 1, 2),
       case_name("moodycamel", "struct+bulk:64", 1, 2), 0.5},
      {"add_bulk:64 + process_batch:64 vs moodycamel bulk:64, 2P+2W",
       case_name("rail", "add_bulk:64+batch:64", 2, 2),
       case_name("moodycamel", "struct+bulk:64", 2, 2), 0.5},
      {"single add, 1P+2W vs mutex pool", add, case_name("mutex_pool", "fn", 1, 2), 0},
      {"single add, 2P+2W vs moodycamel pool", case_name("rail", "add", 2, 2),
       case_name("moodycamel", "fn", 2, 2), 0},
      {"single add, 2P+2W vs moodycamel pool + producer tokens", case_name("rail", "add", 2, 2),
       case_name("moodycamel", "fn+ptokens", 2, 2), 1.0},
      {"single add, 1P+1W vs moodycamel pool", case_name("rail", "add", 1, 1),
       case_name("moodycamel", "fn", 1, 1), 0},
      {"feature cost: 10% failures + retries vs plain add", case_name("rail", "add+fail10%", 1, 2),
       add, 0},
      {"feature cost: dedup ids vs plain add", case_name("rail", "add+dedup", 1, 2), add, 0},
      {"feature cost: FIFO groups (1,024) vs plain add", case_name("rail", "add+group", 1, 2), add,
       0},
      {"feature cost: 4 priority levels vs plain add", case_name("rail", "add+priority", 1, 2), add,
       0},
      {"feature cost: fair shares (16 tenants) vs plain add", case_name("rail", "add+tenant", 1, 2),
       add, 0},
      {"feature cost: attempt timeout vs plain add", case_name("rail", "add+timeout", 1, 2), add,
       0},
      {"feature cost: expiry vs plain add", case_name("rail", "add+expire", 1, 2), add, 0},
      {"feature cost: a flow edge per two jobs vs plain add", case_name("rail", "add+edge", 1, 2),
       add, 0},
      {"feature cost: event observer vs plain add", case_name("rail", "add+events", 1, 2), add, 0},
      {"feature cost, inline: dedup ids vs plain add", case_name("rail", "add+dedup:inline", 1, 0),
       case_name("rail", "add:inline", 1, 0), 0},
      {"feature cost, inline: event observer vs plain add",
       case_name("rail", "add+events:inline", 1, 0), case_name("rail", "add:inline", 1, 0), 0},
      {"feature cost, inline: add_bulk:64 + process_batch:64 vs plain add",
       case_name("rail", "add_bulk:64+batch:64:inline", 1, 0),
       case_name("rail", "add:inline", 1, 0), 0},
      {"metrics cost: latency histograms on (plain add) vs off", add,
       case_name("rail", "add:no-histograms", 1, 2), 0.95},
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
      std::fprintf(stderr, "  target >= %.2fx: %s\n", row.target, verdict.c_str());
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
  if (std::string m; bench::take_text_flag(argc, argv, "--matrix", m))
    c.matrix = bench::parse_matrix(m);
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
  for (auto [p, w] : c.matrix) {
    bench::register_rail(p, w, true);
    bench::register_moodycamel(p, w);
    bench::register_mutex_pool(p, w);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  bench::print_ratios();
  bench::print_matrix();
  return 0;
}
