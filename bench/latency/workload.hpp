// Latency workload (issue 4, item 3): add-to-handler-start latency at a paced rate, the same for
// every contender. One producer (the benchmark thread) adds a job every 1/rate seconds,
// busy-waiting on steady_clock between adds (sleeping would add its own wake-up latency to the
// pacing); the payload is the steady_clock time read just before add(); the handler's first
// statement reads the clock again and records the difference in its thread's histogram.
// So a sample is: add() + hand-off to a worker + the worker's wake-up or poll + the handler call.
//
// The first `warmup` jobs of a run (payload time negated) are handled but not recorded: they pay
// for page faults in fresh rings and first-touch of the pool's blocks.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "latency/histogram.hpp"

namespace bench {

/// LatencyConfig: the binary's flags.
struct LatencyConfig {
  std::uint64_t jobs_100k = 200'000;  // --jobs_100k=N: jobs at 100k/s (2 s)
  std::uint64_t jobs_10k = 50'000;    // --jobs_10k=N: jobs at 10k/s (5 s)
  // --probes=N: retry-punctuality probes per variant. 500: the verdict is a max, and a max of 50
  // samples (the old default) missed the tail a rerun found (1 in 200 retries 2+ ms late).
  std::uint64_t probes = 500;
};
LatencyConfig& latency_config();

inline std::int64_t now_ns() noexcept {
  return std::chrono::steady_clock::now().time_since_epoch().count();
}

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/// paced(total, rate, submit): calls submit(i, t_ns) for i in [0, total), the i-th call no earlier
/// than start + i / rate, where t_ns is the clock read that released it. A producer that falls
/// behind (a preempted core) catches up without sleeping, so the offered load averages `rate`.
template <class Submit>
void paced(std::uint64_t total, double rate, Submit&& submit) {
  const double period_ns = 1e9 / rate;
  const std::int64_t start = now_ns();
  for (std::uint64_t i = 0; i < total; ++i) {
    const std::int64_t due = start + static_cast<std::int64_t>(period_ns * static_cast<double>(i));
    std::int64_t t = now_ns();
    while (t < due) {
      cpu_relax();
      t = now_ns();
    }
    submit(i, t);
  }
}

/// PerThreadHistograms: one histogram per recording thread (no sharing on the record path),
/// claimed on a thread's first record() for this instance, merged after the run. A generation
/// number per instance keeps a thread's cached claim from leaking into a later instance.
class PerThreadHistograms {
 public:
  explicit PerThreadHistograms(std::size_t max_threads = 16)
      : slots_(max_threads), generation_(next_generation()) {}

  void record(std::uint64_t v) noexcept { local().record(v); }

  [[nodiscard]] Histogram merged() const {
    Histogram h;
    std::size_t n = std::min(claimed_.load(std::memory_order_acquire), slots_.size());
    for (std::size_t i = 0; i < n; ++i)
      h.merge(slots_[i].h);
    return h;
  }

 private:
  struct alignas(64) Slot {
    Histogram h;
  };
  static std::uint64_t next_generation() noexcept {
    static std::atomic<std::uint64_t> g{0};
    return g.fetch_add(1, std::memory_order_relaxed) + 1;
  }
  Histogram& local() noexcept {
    thread_local std::uint64_t generation = 0;
    thread_local Histogram* mine = nullptr;
    if (generation != generation_) {
      // acq_rel: merged()'s acquire load of claimed_ orders after this claim; the samples
      // themselves are published by the run's completion latch (release/acquire).
      std::size_t i = claimed_.fetch_add(1, std::memory_order_acq_rel);
      if (i >= slots_.size()) std::abort();  // more recording threads than slots: a bench bug
      generation = generation_;
      mine = &slots_[i].h;
    }
    return *mine;
  }

  std::vector<Slot> slots_;
  std::uint64_t generation_;
  std::atomic<std::size_t> claimed_{0};
};

/// LatencyResults: percentiles per benchmark name, for the summary main() prints on stderr.
struct Percentiles {
  double p50 = 0, p99 = 0, p999 = 0, max = 0;
};
class LatencyResults {
 public:
  static LatencyResults& instance() {
    static LatencyResults r;
    return r;
  }
  void record(const std::string& name, Percentiles p) {
    std::lock_guard lock(mu_);
    map_[name] = p;
  }
  [[nodiscard]] const Percentiles* find(const std::string& name) const {
    std::lock_guard lock(mu_);
    auto it = map_.find(name);
    return it == map_.end() ? nullptr : &it->second;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, Percentiles> map_;
};

/// report(state, name, h, seconds, jobs): the counters every latency benchmark reports.
inline void report(benchmark::State& state, const std::string& name, const Histogram& h,
                   double seconds, std::uint64_t jobs) {
  Percentiles p{static_cast<double>(h.percentile(50)), static_cast<double>(h.percentile(99)),
                static_cast<double>(h.percentile(99.9)), static_cast<double>(h.max())};
  state.counters["p50_ns"] = p.p50;
  state.counters["p99_ns"] = p.p99;
  state.counters["p999_ns"] = p.p999;
  state.counters["max_ns"] = p.max;
  state.counters["mean_ns"] = h.mean();
  state.counters["samples"] = static_cast<double>(h.count());
  if (seconds > 0) state.counters["offered_per_s"] = static_cast<double>(jobs) / seconds;
  state.SetItemsProcessed(static_cast<std::int64_t>(jobs));
  LatencyResults::instance().record(name, p);
}

/// latency_name(contender, rate, workers): "rail/rate:100000/w:2".
inline std::string latency_name(const std::string& contender, std::uint64_t rate, int workers) {
  return contender + "/rate:" + std::to_string(rate) + "/w:" + std::to_string(workers);
}

/// Setting: where a contender's workers run (issue 14). own: the queue's (pool's) own threads;
/// shared: rail's engine-wide shared pool; busy: own threads against a CPU-bound thread per
/// core (BackgroundLoad) for the whole run; busy_shared: both.
enum class Setting { own, shared, busy, busy_shared };

/// contender_name(contender, setting): "rail", "rail:shared", "rail:busy", "moodycamel:busy", ...
inline std::string contender_name(const std::string& contender, Setting setting) {
  switch (setting) {
    case Setting::own:
      return contender;
    case Setting::shared:
      return contender + ":shared";
    case Setting::busy:
      return contender + ":busy";
    case Setting::busy_shared:
      return contender + ":busy-shared";
  }
  return contender;
}

void register_rail_latency(std::uint64_t rate, int workers, Setting setting = Setting::own);
void register_moodycamel_latency(std::uint64_t rate, int workers, Setting setting = Setting::own);
/// The platform floor: a busy-polling consumer of a plain SPSC array (spin_handoff.cpp).
void register_spin_handoff_latency(std::uint64_t rate);
void register_retry_punctuality();

}  // namespace bench
