// Retry punctuality (issue 4, item 4's second half): how late a 10 ms backoff fires while the
// engine runs at full load.
//
// Load: a "load" queue (capacity 65,536, 2 workers) kept full by a producer thread that adds
// no-op jobs as fast as add() accepts them (yield-and-retry on full).
// Probe: one job at a time, attempts = 2, Backoff::fixed(10 ms); its first attempt fails. Then
//   start lateness = second attempt's Job::started_at() - first attempt's end - 10 ms
//   fire lateness  = the retry_due event's time      - first attempt's end - 10 ms
// where "first attempt's end" is the handler's last clock read before it returns
// Outcome::retry. Fire lateness is the timer's own punctuality (wheel tick + timer-thread
// wake-up); start lateness adds the wait in the ready ring and for a worker.
// Probes are spaced by a random 0-3 ms pause so they do not lock onto the wheel's tick phase.
//
// Variants:
//   idle      no load: the floor set by the 1 ms tick and the timer thread's wake-up
//   separate  load running; the probe has its own queue and worker: the timer under load
//   shared    load running; the probe sits in the loaded queue, so its retry queues behind up to
//             65,536 ready no-op jobs (FIFO): start lateness includes draining that backlog
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <rail/rail.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "latency/workload.hpp"

namespace bench {
namespace {

using namespace std::chrono_literals;

enum class Load { idle, separate, shared };

struct Work {
  bool probe = false;
};

/// ProbeState: what the probe's two attempts and the observer report to the benchmark thread.
struct ProbeState {
  std::atomic<rail::JobId> id{0};  // the probe in flight (set right after add returns)
  std::atomic<std::int64_t> first_end_ns{0};
  std::atomic<std::int64_t> fired_ns{0};
  std::mutex mu;
  std::condition_variable cv;
  std::int64_t second_start_ns = 0;  // guarded by mu
  bool done = false;                 // guarded by mu
};

/// Quantiles of a small sample (50 probes): nearest rank.
double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  auto rank = static_cast<std::size_t>(q * static_cast<double>(v.size()) + 0.999999);
  if (rank == 0) rank = 1;
  return v[std::min(rank, v.size()) - 1];
}

void retry_punctuality(benchmark::State& state, const std::string& name, Load load) {
  rail::Engine engine;
  ProbeState ps;
  engine.on_event([&ps](const rail::Event& e) {
    if (e.kind == rail::EventKind::retry_due && e.job_id == ps.id.load(std::memory_order_relaxed))
      ps.fired_ns.store(e.at.time_since_epoch().count(), std::memory_order_relaxed);
  });
  auto handler = [&ps](rail::Job<Work>& j) {
    if (!j.data().probe) return rail::Outcome::done();
    if (j.attempt() == 1) {
      ps.first_end_ns.store(now_ns(), std::memory_order_relaxed);  // published via the retry
      return rail::Outcome::retry("probe");
    }
    {
      std::lock_guard lock(ps.mu);
      ps.second_start_ns = j.started_at().time_since_epoch().count();
      ps.done = true;
    }
    ps.cv.notify_one();
    return rail::Outcome::done();
  };
  auto load_q = engine.declare_queue<Work>("load", rail::QueueOptions{.capacity = 65'536});
  load_q.process({.concurrency = 2}, handler);
  auto probe_q = load_q;
  if (load != Load::shared) {
    probe_q = engine.declare_queue<Work>("probe", rail::QueueOptions{.capacity = 64});
    probe_q.process({.concurrency = 1}, handler);
  }

  std::atomic<bool> stop{false};
  std::thread producer;
  if (load != Load::idle) {
    producer = std::thread([&] {
      const rail::JobOptions o{.max_attempts = 3};
      while (!stop.load(std::memory_order_relaxed)) {
        if (load_q.add("load", Work{}, o).status == rail::AddStatus::full)
          std::this_thread::yield();
      }
    });
    std::this_thread::sleep_for(200ms);  // let the load queue fill up
  }

  const rail::JobOptions probe_opts{.max_attempts = 2, .backoff = rail::Backoff::fixed(10ms)};
  std::vector<double> start_late_ms, fire_late_ms;
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> gap_us(0, 3000);
  const std::uint64_t completed_before = load_q.counts().completed;
  const std::int64_t t0 = now_ns();
  bool timed_out = false;
  for (auto _ : state) {
    for (std::uint64_t k = 0; k < latency_config().probes && !timed_out; ++k) {
      {
        std::lock_guard lock(ps.mu);
        ps.done = false;
      }
      ps.fired_ns.store(0, std::memory_order_relaxed);
      rail::AddReceipt r;
      while ((r = probe_q.add("probe", Work{true}, probe_opts)).status == rail::AddStatus::full)
        std::this_thread::yield();
      ps.id.store(r.id, std::memory_order_relaxed);
      std::unique_lock lock(ps.mu);
      if (!ps.cv.wait_for(lock, 10s, [&] { return ps.done; })) {
        timed_out = true;
        break;
      }
      const double end = static_cast<double>(ps.first_end_ns.load(std::memory_order_relaxed));
      start_late_ms.push_back((static_cast<double>(ps.second_start_ns) - end) / 1e6 - 10.0);
      if (std::int64_t fired = ps.fired_ns.load(std::memory_order_relaxed); fired != 0)
        fire_late_ms.push_back((static_cast<double>(fired) - end) / 1e6 - 10.0);
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(gap_us(rng)));
    }
    state.SetIterationTime(static_cast<double>(now_ns() - t0) / 1e9);
  }
  const double seconds = static_cast<double>(now_ns() - t0) / 1e9;
  const std::uint64_t load_done = load_q.counts().completed - completed_before;
  stop.store(true, std::memory_order_relaxed);
  if (producer.joinable()) producer.join();

  state.counters["start_late_p50_ms"] = quantile(start_late_ms, 0.5);
  state.counters["start_late_p90_ms"] = quantile(start_late_ms, 0.9);
  state.counters["start_late_max_ms"] = quantile(start_late_ms, 1.0);
  state.counters["fire_late_p50_ms"] = quantile(fire_late_ms, 0.5);
  state.counters["fire_late_p90_ms"] = quantile(fire_late_ms, 0.9);
  state.counters["fire_late_max_ms"] = quantile(fire_late_ms, 1.0);
  state.counters["probes"] = static_cast<double>(start_late_ms.size());
  state.counters["load_jobs_per_s"] = seconds > 0 ? static_cast<double>(load_done) / seconds : 0;
  LatencyResults::instance().record(name + "/start",
                                    {quantile(start_late_ms, 0.5), quantile(start_late_ms, 0.99), 0,
                                     quantile(start_late_ms, 1.0)});
  LatencyResults::instance().record(
      name + "/fire",
      {quantile(fire_late_ms, 0.5), quantile(fire_late_ms, 0.99), 0, quantile(fire_late_ms, 1.0)});
  if (timed_out) state.SkipWithError("a probe's retry did not start within 10 s");
}

}  // namespace

void register_retry_punctuality() {
  const std::pair<Load, const char*> variants[] = {
      {Load::idle, "idle"}, {Load::separate, "separate"}, {Load::shared, "shared"}};
  for (auto [load, label] : variants) {
    std::string name = std::string("rail/retry_punctuality/load:") + label;
    benchmark::RegisterBenchmark(
        name.c_str(),
        [name, load = load](benchmark::State& s) { retry_punctuality(s, name, load); })
        ->UseManualTime()
        ->Iterations(1)
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace bench
