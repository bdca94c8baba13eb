// latency_bench: issue 4 item 3 (add-to-handler-start latency at 10k and 100k jobs/s, rail and
// the moodycamel pool, and the platform floor: a bare busy-polling hand-off) and item 4's retry
// punctuality (a 10 ms backoff at full load).
//   latency_bench [--jobs_100k=N] [--jobs_10k=N] [--probes=N] [--benchmark_* flags]
// Defaults: 200,000 jobs at 100k/s, 50,000 at 10k/s, 500 probes. The summary against issue 4's
// targets goes to stderr after the run (stdout stays the reporter's).
#include <cstdio>
#include <string>
#include <utility>

#include "engine/flags.hpp"
#include "latency/histogram.hpp"
#include "latency/workload.hpp"

namespace bench {

LatencyConfig& latency_config() {
  static LatencyConfig c;
  return c;
}

namespace {

/// self_check(): the histogram's percentiles against exact ones on a known distribution; a
/// broken histogram would make every figure below meaningless, so it stops the run.
bool self_check() {
  Histogram h;
  for (std::uint64_t v = 1; v <= 1'000'000; ++v)
    h.record(v);
  const double p50 = static_cast<double>(h.percentile(50));
  const double p999 = static_cast<double>(h.percentile(99.9));
  const double bound = 1.0 / static_cast<double>(Histogram::kSub);
  return p50 >= 500'000 && p50 <= 500'000 * (1 + bound) && p999 >= 999'000 &&
         p999 <= 999'000 * (1 + bound) && h.max() == 1'000'000 && h.min() == 1;
}

void print_summary() {
  const LatencyResults& r = LatencyResults::instance();
  std::fprintf(stderr, "\nlatency (add -> handler start), ns\n");
  for (int w : {1, 2}) {
    for (std::uint64_t rate : {10'000u, 100'000u}) {
      const Percentiles* ours = r.find(latency_name("rail", rate, w));
      const Percentiles* mc = r.find(latency_name("moodycamel", rate, w));
      if (!ours || !mc) continue;
      std::fprintf(stderr,
                   "  %6llu/s w:%d  rail p50 %7.0f p99 %7.0f p99.9 %8.0f max %9.0f | moodycamel "
                   "p50 %7.0f p99 %7.0f p99.9 %8.0f max %9.0f\n",
                   static_cast<unsigned long long>(rate), w, ours->p50, ours->p99, ours->p999,
                   ours->max, mc->p50, mc->p99, mc->p999, mc->max);
      if (rate != 100'000 || w != 2) continue;
      if (const Percentiles* floor = r.find(latency_name("spin_handoff", rate, 1)))
        std::fprintf(stderr,
                     "  platform floor (busy-polling SPSC hand-off, no library): p50 %.0f p99 %.0f "
                     "p99.9 %.0f max %.0f\n",
                     floor->p50, floor->p99, floor->p999, floor->max);
      auto verdict = [](bool ok) { return ok ? "MET" : "MISSED"; };
      std::fprintf(stderr, "  target 100k/s p50 <= 2000 ns: %.0f ns  %s\n", ours->p50,
                   verdict(ours->p50 <= 2000));
      std::fprintf(stderr, "  target 100k/s p99 <= 15000 ns: %.0f ns  %s\n", ours->p99,
                   verdict(ours->p99 <= 15000));
      std::fprintf(stderr, "  target 100k/s p99 <= moodycamel p99: %.0f / %.0f = %.2fx  %s\n",
                   ours->p99, mc->p99, ours->p99 / mc->p99, verdict(ours->p99 <= mc->p99));
    }
  }
  std::fprintf(stderr, "issue 14, 100k/s w:2: rail vs the moodycamel pool, p99 and p99.9 (ns)\n");
  for (const auto& [ours, theirs] :
       {std::pair{"rail:shared", "moodycamel"}, std::pair{"rail:busy", "moodycamel:busy"},
        std::pair{"rail:busy-shared", "moodycamel:busy"}}) {
    const Percentiles* a = r.find(latency_name(ours, 100'000, 2));
    const Percentiles* b = r.find(latency_name(theirs, 100'000, 2));
    if (!a || !b) continue;
    std::fprintf(stderr, "  %-17s p99 %8.0f vs %8.0f (%s)  p99.9 %9.0f vs %9.0f (%s)  [%s]\n", ours,
                 a->p99, b->p99, a->p99 <= b->p99 ? "no worse" : "WORSE", a->p999, b->p999,
                 a->p999 <= b->p999 ? "no worse" : "WORSE", theirs);
  }
  std::fprintf(stderr, "retry punctuality, 10 ms fixed backoff: lateness in ms (p50 / max)\n");
  for (const char* load : {"idle", "separate", "shared"}) {
    std::string base = std::string("rail/retry_punctuality/load:") + load;
    const Percentiles* start = r.find(base + "/start");
    const Percentiles* fire = r.find(base + "/fire");
    if (!start || !fire) continue;
    std::fprintf(stderr, "  load:%-8s fire %6.2f / %6.2f   start %6.2f / %6.2f\n", load, fire->p50,
                 fire->max, start->p50, start->max);
    // The one definition, shared with bench/run: at full load, a retry is punctual when its
    // second attempt STARTS at most 2 ms after its due time, for every probe (the max), the probe
    // having its own queue and worker ("separate"). The fire is the timer's half of that; the
    // "shared" variant adds FIFO queueing behind 65,536 ready jobs, which is not the timer's.
    if (std::string(load) == "separate")
      std::fprintf(stderr, "  target: the retry starts <= 2 ms late at full load (max start): %s\n",
                   start->max <= 2.0 ? "MET" : "MISSED");
  }
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  bench::LatencyConfig& c = bench::latency_config();
  bench::take_flag(argc, argv, "--jobs_100k", c.jobs_100k);
  bench::take_flag(argc, argv, "--jobs_10k", c.jobs_10k);
  bench::take_flag(argc, argv, "--probes", c.probes);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (!bench::self_check()) {
    std::fprintf(stderr, "latency_bench: histogram self-check failed\n");
    return 1;
  }
  bench::add_machine_context();
  benchmark::AddCustomContext("histogram", "log-linear, 2^5 sub-buckets per octave (<= 3.1%)");
  benchmark::AddCustomContext("pacing", "1 producer busy-waiting on steady_clock");
  // 100k/s first (the target), rail and its baseline back to back.
  for (std::uint64_t rate : {100'000u, 10'000u}) {
    for (int w : {2, 1}) {
      bench::register_rail_latency(rate, w);
      bench::register_moodycamel_latency(rate, w);
    }
    bench::register_spin_handoff_latency(rate);
  }
  // Issue 14 at 100k/s with 2 workers: the shared pool, and cores kept busy by the embedding
  // server's own threads; each rail row next to its baseline.
  bench::register_rail_latency(100'000, 2, bench::Setting::shared);
  bench::register_rail_latency(100'000, 2, bench::Setting::busy);
  bench::register_rail_latency(100'000, 2, bench::Setting::busy_shared);
  bench::register_moodycamel_latency(100'000, 2, bench::Setting::busy);
  bench::register_retry_punctuality();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  bench::print_summary();
  return 0;
}
