// job_results_bench: what a job's result and a handle on its end cost (issue 13), as ratios
// against the plain queue measured in the same run.
//   job_results_bench [--jobs=N] [--benchmark_* flags]
// Each iteration adds N jobs (default 20,000) with a 64-byte payload to a threaded queue with two
// workers and waits until all N completed. Variants:
//   plain              queue<std::string>: handler returns Outcome::done()   (the baseline)
//   result             queue<std::string, std::string>: returns a 16-byte result, retention
//                      default (the last 1,000 completed ends kept)
//   result_no_retain   the same with keep_ended.keep_completed = 0: the result's allocation only
//   tracked            result queue, every add with add_tracked (a waiter per job), the handles
//                      waited on after the adds
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "common/bench_main.hpp"
#include "rail/rail.hpp"

namespace {

std::size_t& jobs() {
  static std::size_t n = 20000;
  return n;
}
std::map<std::string, double>& rates() {
  static std::map<std::string, double> r;
  return r;
}

enum class Variant { plain, result, result_no_retain, tracked };

template <class Q>
void wait_completed(Q& q, std::uint64_t target) {
  while (q.counts().completed < target)
    std::this_thread::yield();
}

void run(benchmark::State& state, Variant v, const std::string& name) {
  const std::size_t n = jobs();
  rail::QueueOptions o;
  o.capacity = n;
  if (v == Variant::result_no_retain) o.keep_ended.keep_completed = 0;
  const std::string payload(64, 'p');
  std::uint64_t done = 0;
  double seconds = 0;
  rail::Engine engine;
  auto measure = [&](auto&& add_all) {
    for (auto _ : state) {
      const auto start = std::chrono::steady_clock::now();
      add_all();
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      done += n;
    }
  };
  if (v == Variant::plain) {
    auto q = engine.declare_queue<std::string>("bench", o);
    q.process({.concurrency = 2}, [](rail::Job<std::string>&) { return rail::Outcome::done(); });
    measure([&] {
      const std::uint64_t target = q.counts().completed + n;
      for (std::size_t i = 0; i < n; ++i)
        while (q.add("job", payload).status != rail::AddStatus::added)
          std::this_thread::yield();
      wait_completed(q, target);
    });
  } else {
    auto q = engine.declare_queue<std::string, std::string>("bench", o);
    q.process({.concurrency = 2}, [](rail::Job<std::string>&) -> rail::Result<std::string> {
      return std::string("receipt-0123456");
    });
    std::vector<rail::JobHandle<std::string>> handles;
    handles.reserve(n);
    measure([&] {
      const std::uint64_t target = q.counts().completed + n;
      if (v == Variant::tracked) {
        handles.clear();
        for (std::size_t i = 0; i < n; ++i) {
          handles.push_back(q.add_tracked("job", payload));
          while (handles.back().added().status != rail::AddStatus::added) {
            std::this_thread::yield();
            handles.back() = q.add_tracked("job", payload);
          }
        }
        for (const auto& h : handles)
          if (!h.wait_for(std::chrono::seconds(60)))
            state.SkipWithError("a tracked job did not end within 60 s");
      } else {
        for (std::size_t i = 0; i < n; ++i)
          while (q.add("job", payload).status != rail::AddStatus::added)
            std::this_thread::yield();
      }
      wait_completed(q, target);
    });
  }
  engine.shutdown();
  state.SetItemsProcessed(static_cast<std::int64_t>(done));
  rates()[name] = seconds > 0 ? static_cast<double>(done) / seconds : 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> rest = rail_bench::take_options(argc, argv, [](const std::string& a) {
    if (a.rfind("--jobs=", 0) != 0) return false;
    jobs() = std::stoul(a.substr(7));
    return true;
  });
  int n = static_cast<int>(rest.size());
  benchmark::Initialize(&n, rest.data());
  if (benchmark::ReportUnrecognizedArguments(n, rest.data())) return 1;
  rail_bench::add_context();
  benchmark::AddCustomContext("jobs_per_iteration", std::to_string(jobs()));
  for (const auto& [v, name] :
       {std::pair{Variant::plain, "plain"}, std::pair{Variant::result, "result"},
        std::pair{Variant::result_no_retain, "result_no_retain"},
        std::pair{Variant::tracked, "tracked"}})
    benchmark::RegisterBenchmark(
        ("results/" + std::string(name)).c_str(),
        [v = v, name = std::string(name)](benchmark::State& s) { run(s, v, name); })
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->MinTime(0.5);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  rail_bench::print_ratios("throughput vs the plain queue (same run, 2 workers)", rates(), "plain");
  return 0;
}
