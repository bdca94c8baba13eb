// peers_rail: rail's side of the peers benchmark (issue 4 item 7). bench/peers/run drives it next
// to bench/peers/bullmq.mjs and bench/peers/rabbitmq.mjs; all three run the same two workloads,
// time them the same way and print the same JSON object (one line on stdout per run):
//   orders  N no-op jobs, payload {"order":i}; workers start first, then one producer adds while
//           they drain. add_per_s = N / (last add returned - first add began); jobs_per_s =
//           N / (last completion - first add began).
//   retry   the same, but every job's first attempt fails and its second succeeds (attempts 2,
//           fixed backoff); late_ms = second attempt's start - first attempt's failure - backoff,
//           as p50 / p99 / max over the jobs.
//   peers_rail --workload orders|retry [--jobs N] [--batch B] [--concurrency W] [--backoff-ms D]
//              [--min-seconds S]
// One workload takes rail about 10 ms, too short to time against a shared machine's hiccups, so
// peers_rail repeats it (a fresh engine each time) until --min-seconds (1 s) of work has passed
// and reports the median repeat: jobs_per_s and add_per_s are medians, `repeats` and
// `jobs_per_s_runs` say what they are the median of (issue 9 item 6).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <rail/rail.hpp>
#include <span>
#include <string>
#include <vector>

#include "peers/peers_common.hpp"

namespace {

using rail::peers::Finish;
using rail::peers::median_of;
using rail::peers::now_ns;
using rail::peers::payload;
using rail::peers::quantile;

struct Config {
  std::string workload = "orders";
  std::uint64_t jobs = 50'000;
  std::size_t batch = 1000;  // jobs per add_bulk; 1: one add() per job
  std::uint32_t workers = 2;
  int backoff_ms = 10;
  double min_seconds = 1.0;
};

/// add_all(q, c, o) adds c.jobs jobs from this thread; false if any add was refused (the queue's
/// capacity is c.jobs, so a refusal means the run is not the workload it claims to be).
bool add_all(rail::Queue<std::string>& q, const Config& c, const rail::JobOptions& o) {
  if (c.batch <= 1) {
    for (std::uint64_t i = 0; i < c.jobs; ++i) {
      if (q.add("order", payload(i), o).status != rail::AddStatus::added) return false;
    }
    return true;
  }
  std::vector<std::string> chunk;
  chunk.reserve(c.batch);
  for (std::uint64_t i = 0; i < c.jobs;) {
    chunk.clear();
    for (; i < c.jobs && chunk.size() < c.batch; ++i)
      chunk.push_back(payload(i));
    if (q.add_bulk("order", std::span<std::string>(chunk), o).status != rail::AddStatus::added)
      return false;
  }
  return true;
}

/// run_once(c, out): one workload on a fresh engine; 0 and its JSON in out, or 2 on a failure.
int run_once(const Config& c, nlohmann::ordered_json& result) {
  const bool retry = c.workload == "retry";
  const rail::Duration backoff = std::chrono::milliseconds(c.backoff_ms);
  // Per job: when its first attempt failed, and how late its second started. failed_at[k] is read
  // by the second attempt's handler, after the engine's hand-off of the retried job; late_ms
  // after Finish::wait(). All of it is declared before the engine, which is destroyed first and
  // waits for its handlers while what they touch still lives.
  std::vector<std::int64_t> failed_at(retry ? c.jobs : 0);
  std::vector<double> late_ms(retry ? c.jobs : 0);
  Finish finish(c.jobs);

  rail::Engine engine;
  // Capacity for every job at once: the producer never meets back-pressure, as with the peers'
  // unbounded queues.
  auto q = engine.declare_queue<std::string>(
      "orders", rail::QueueOptions{.capacity = static_cast<std::uint32_t>(c.jobs)});
  // A fresh engine numbers its jobs from 1 in add order, so a job's index is its id - 1.
  q.process({.concurrency = c.workers}, [&](rail::Job<std::string>& job) {
    if (!retry) {
      finish.hit();
      return rail::Outcome::done();
    }
    const std::int64_t started = now_ns();
    const std::size_t k = job.id() - 1;
    if (job.attempt() == 1) {
      failed_at[k] = now_ns();
      return rail::Outcome::retry("first attempt fails by design");
    }
    late_ms[k] = static_cast<double>(started - failed_at[k] - backoff.count()) / 1e6;
    finish.hit();
    return rail::Outcome::done();
  });

  const rail::JobOptions o{.max_attempts = retry ? 2u : 1u,
                           .backoff = retry ? rail::Backoff::fixed(backoff) : rail::Backoff{}};
  const std::int64_t t0 = now_ns();
  const bool added = add_all(q, c, o);
  const std::int64_t t_added = now_ns();
  if (!added) {
    std::fprintf(stderr, "peers_rail: an add was refused with capacity %llu\n",
                 static_cast<unsigned long long>(c.jobs));
    return 2;
  }
  const std::int64_t t_done = finish.wait();
  // The last handler's hit() comes just before the engine records its completion: let the
  // bookkeeping finish before the counts are checked (untimed).
  q.wait_idle();
  const rail::QueueCounts counts = q.counts();
  if (counts.completed != c.jobs || counts.dead_lettered != 0) {
    std::fprintf(stderr, "peers_rail: %llu of %llu jobs completed, %llu dead-lettered\n",
                 static_cast<unsigned long long>(counts.completed),
                 static_cast<unsigned long long>(c.jobs),
                 static_cast<unsigned long long>(counts.dead_lettered));
    return 2;
  }

  const auto n = static_cast<double>(c.jobs);
  nlohmann::ordered_json out = {
      {"system", "rail"},
      {"workload", c.workload},
      {"jobs", c.jobs},
      {"batch", c.batch},
      {"concurrency", c.workers},
      {"add_s", static_cast<double>(t_added - t0) / 1e9},
      {"total_s", static_cast<double>(t_done - t0) / 1e9},
      {"add_per_s", n * 1e9 / static_cast<double>(t_added - t0)},
      {"jobs_per_s", n * 1e9 / static_cast<double>(t_done - t0)},
  };
  if (retry) {
    std::sort(late_ms.begin(), late_ms.end());
    out["backoff_ms"] = c.backoff_ms;
    out["failed_attempts"] = counts.failed_attempts;
    out["late_ms"] = {{"p50", quantile(late_ms, 0.50)},
                      {"p99", quantile(late_ms, 0.99)},
                      {"max", quantile(late_ms, 1.0)}};
  }
  result = std::move(out);
  return 0;
}

/// run(c): repeats run_once for at least c.min_seconds and prints the median repeat's JSON.
int run(const Config& c) {
  std::vector<nlohmann::ordered_json> runs;
  std::vector<double> jobs_per_s, add_per_s;
  const std::int64_t start = now_ns();
  do {
    nlohmann::ordered_json one;
    if (int rc = run_once(c, one); rc != 0) return rc;
    jobs_per_s.push_back(one["jobs_per_s"].get<double>());
    add_per_s.push_back(one["add_per_s"].get<double>());
    runs.push_back(std::move(one));
  } while (static_cast<double>(now_ns() - start) / 1e9 < c.min_seconds);
  // The median repeat by jobs/s carries the rest of its figures (late_ms of the retry workload).
  const double median_jobs = median_of(jobs_per_s);
  nlohmann::ordered_json out = *std::find_if(runs.begin(), runs.end(), [&](const auto& r) {
    return r["jobs_per_s"].template get<double>() == median_jobs;
  });
  out["jobs_per_s"] = median_jobs;
  out["add_per_s"] = median_of(add_per_s);
  out["repeats"] = runs.size();
  out["jobs_per_s_runs"] = jobs_per_s;
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app{"rail's side of bench/peers: the orders and retry workloads through rail::Engine"};
  app.add_option("--workload", c.workload)->check(CLI::IsMember({"orders", "retry"}));
  app.add_option("--jobs", c.jobs, "jobs to add")->check(CLI::Range(1u, 1u << 24));
  app.add_option("--batch", c.batch, "jobs per add_bulk (1: add() per job)")
      ->check(CLI::Range(1u, 1u << 20));
  app.add_option("--concurrency", c.workers, "worker threads")->check(CLI::Range(1u, 1024u));
  app.add_option("--backoff-ms", c.backoff_ms, "retry workload's fixed backoff")
      ->check(CLI::Range(0, 60'000));
  app.add_option("--min-seconds", c.min_seconds,
                 "repeat the workload until this much time has passed; report the median")
      ->check(CLI::Range(0.0, 3600.0));
  CLI11_PARSE(app, argc, argv);
  try {
    return run(c);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "peers_rail: %s\n", e.what());
    return 2;
  }
}
