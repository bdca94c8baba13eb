// peers_rail_amqp: rail over RabbitMQ (rail::amqp) in bench/peers, on the same two workloads as
// the other drivers (see rail_orders.cpp), against the broker bench/peers/run started:
//   orders  a Producer adds N no-op jobs with add_bulk (one confirm wait per --batch), while a
//           Consumer bridges them into a local queue whose --concurrency workers complete them.
//   retry   every job's first attempt fails and its second succeeds (attempts 2, fixed backoff):
//           a retry due within --retry-here-ms (ConsumerOptions::retry_here_within, 1 s) waits
//           here while a place is free (--retry-here-max, half the prefetch); the others go
//           back to the broker, whose delay cascade brings them back.
// Its broker queue is a quorum queue with persistent messages and confirms: what rail::amqp
// always uses. Compare it with `rabbitmq.mjs --durable`, the same durability by hand.
// Figures as the other drivers print them, plus start_ms: each job's add (its batch's start) to
// its first handler start, p50 / p99 / max.
//   peers_rail_amqp --port P --workload orders|retry [--jobs N] [--batch B] [--concurrency W]
//                   [--prefetch F] [--backoff-ms D] [--retry-here-ms MS] [--retry-here-max N]
//                   [--timeout-s T]
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <rail/amqp.hpp>
#include <rail/detail/amqp_connection.hpp>
#include <rail/detail/amqp_topology.hpp>
#include <rail/rail.hpp>
#include <string>
#include <thread>
#include <vector>

#include "peers/peers_common.hpp"

namespace {

using rail::peers::Finish;
using rail::peers::now_ns;
using rail::peers::order_of;
using rail::peers::payload;
using rail::peers::quantile;

struct Config {
  std::string workload = "orders";
  std::uint64_t jobs = 50'000;
  std::size_t batch = 1000;
  std::uint32_t workers = 2;
  std::uint16_t prefetch = 100;
  int backoff_ms = 10;
  // ConsumerOptions' defaults: retries due within 1 s stay here, half the prefetch at most.
  int retry_here_ms = 1000;
  std::uint16_t retry_here_max = 0;
  int port = 0;
  int timeout_s = 300;
};

nlohmann::ordered_json quantiles(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {{"p50", quantile(v, 0.50)}, {"p99", quantile(v, 0.99)}, {"max", quantile(v, 1.0)}};
}

int run(const Config& c) {
  const bool retry = c.workload == "retry";
  // A queue of its own per run: nothing from an earlier run can be picked up.
  const std::string queue = "peers." + c.workload + "." + std::to_string(getpid());
  rail::amqp::BrokerOptions broker;
  broker.url = "amqp://guest:guest@127.0.0.1:" + std::to_string(c.port);
  broker.name = "peers_rail_amqp";
  // No bound (as the peers' queues), no groups.
  const rail::amqp::BrokerQueueOptions shape{
      .max_length = 0, .delivery_limit = 20, .partitions = 0};
  const std::int64_t backoff_ns = std::int64_t{c.backoff_ms} * 1'000'000;
  // Written by the producer before the add that publishes job k, read by its handler after the
  // broker delivered it (the socket orders them); failed_at by the first attempt's handler,
  // read by the second's after the broker's round trip; all read here after Finish::wait().
  std::vector<std::int64_t> added_at(c.jobs), failed_at(retry ? c.jobs : 0);
  std::vector<double> start_ms(c.jobs), late_ms(retry ? c.jobs : 0);
  Finish finish(c.jobs);
  std::int64_t t0 = 0, t_added = 0, t_done = 0;
  rail::QueueCounts counts;
  {
    rail::Engine engine;
    auto local = engine.declare_queue<std::string>(
        queue, rail::QueueOptions{.capacity = std::max<std::uint32_t>(2u * c.prefetch, 1024)});
    local.process({.concurrency = c.workers}, [&](rail::Job<std::string>& job) {
      const std::int64_t started = now_ns();
      const std::uint64_t k = order_of(job.data());
      if (job.attempt() == 1) start_ms[k] = static_cast<double>(started - added_at[k]) / 1e6;
      if (retry && job.attempt() == 1) {
        failed_at[k] = now_ns();
        return rail::Outcome::retry("first attempt fails by design");
      }
      if (retry) late_ms[k] = static_cast<double>(started - failed_at[k] - backoff_ns) / 1e6;
      finish.hit();
      return rail::Outcome::done();
    });
    rail::amqp::Consumer<std::string> consumer(
        broker, engine, local, shape,
        {.prefetch = c.prefetch,
         .retry_here_within = std::chrono::milliseconds(c.retry_here_ms),
         .retry_here_max = c.retry_here_max});
    rail::amqp::Producer<std::string> producer(broker, queue, shape);
    rail::JobOptions o;
    o.max_attempts = retry ? 2 : 1;
    if (retry) o.backoff = rail::Backoff::fixed(std::chrono::milliseconds(c.backoff_ms));
    std::vector<std::string> chunk;
    chunk.reserve(c.batch);
    t0 = now_ns();
    for (std::uint64_t i = 0; i < c.jobs;) {
      chunk.clear();
      const std::int64_t at = now_ns();
      for (; i < c.jobs && chunk.size() < c.batch; ++i) {
        added_at[i] = at;
        chunk.push_back(payload(i));
      }
      const rail::BulkAddReceipt r =
          producer.add_bulk("order", std::span<const std::string>(chunk), o);
      if (r.status != rail::AddStatus::added) {
        std::fprintf(stderr, "rail_amqp: an add_bulk answered %s\n",
                     std::string(rail::to_string(r.status)).c_str());
        return 2;
      }
    }
    t_added = now_ns();
    std::thread timeout([&] {
      const std::int64_t until = now_ns() + std::int64_t{c.timeout_s} * 1'000'000'000;
      while (now_ns() < until) {
        if (local.counts().completed >= c.jobs) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      std::fprintf(stderr, "rail_amqp: %s: %llu of %llu jobs completed after %d s\n",
                   c.workload.c_str(), static_cast<unsigned long long>(local.counts().completed),
                   static_cast<unsigned long long>(c.jobs), c.timeout_s);
      std::_Exit(2);
    });
    t_done = finish.wait();
    timeout.join();
    (void)local.wait_idle(std::chrono::seconds(10));
    counts = local.counts();
  }
  // Untimed: the run's broker queues go.
  rail::detail::amqp::Connection admin(rail::detail::amqp::parse_url(broker.url),
                                       std::chrono::seconds(10), "peers_rail_amqp admin");
  admin.delete_queue(rail::detail::amqp::jobs_queue(queue));
  admin.delete_queue(rail::detail::amqp::dlq_queue(queue));

  const auto n = static_cast<double>(c.jobs);
  nlohmann::ordered_json out = {
      // Every retry through the broker: its own line in bench/peers/run's table.
      {"system", c.retry_here_ms == 0 ? "rail_amqp_cascade" : "rail_amqp"},
      {"workload", c.workload},
      {"jobs", c.jobs},
      {"batch", c.batch},
      {"concurrency", c.workers},
      {"prefetch", c.prefetch},
      {"add_s", static_cast<double>(t_added - t0) / 1e9},
      {"total_s", static_cast<double>(t_done - t0) / 1e9},
      {"add_per_s", n * 1e9 / static_cast<double>(t_added - t0)},
      {"jobs_per_s", n * 1e9 / static_cast<double>(t_done - t0)},
      {"start_ms", quantiles(start_ms)},
  };
  if (retry) {
    out["backoff_ms"] = c.backoff_ms;
    out["forwarded"] = counts.forwarded;
    out["retry_here_ms"] = c.retry_here_ms;
    out["retry_here_max"] = c.retry_here_max;
    out["late_ms"] = quantiles(late_ms);
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app{"rail over RabbitMQ in bench/peers: the orders and retry workloads via rail::amqp"};
  app.add_option("--port", c.port, "the broker's AMQP port on 127.0.0.1")->required();
  app.add_option("--workload", c.workload)->check(CLI::IsMember({"orders", "retry"}));
  app.add_option("--jobs", c.jobs, "jobs to add")->check(CLI::Range(1u, 1u << 24));
  app.add_option("--batch", c.batch, "jobs per add_bulk")->check(CLI::Range(1u, 1u << 20));
  app.add_option("--concurrency", c.workers, "local worker threads")->check(CLI::Range(1u, 1024u));
  app.add_option("--prefetch", c.prefetch, "deliveries held at once")->check(CLI::Range(1, 65'535));
  app.add_option("--backoff-ms", c.backoff_ms, "retry workload's fixed backoff")
      ->check(CLI::Range(0, 60'000));
  app.add_option("--retry-here-ms", c.retry_here_ms,
                 "ConsumerOptions::retry_here_within (0: every retry through the broker)")
      ->check(CLI::Range(0, 86'400'000));
  app.add_option("--retry-here-max", c.retry_here_max,
                 "ConsumerOptions::retry_here_max (0: half the prefetch)");
  app.add_option("--timeout-s", c.timeout_s)->check(CLI::Range(1, 86'400));
  CLI11_PARSE(app, argc, argv);
  try {
    return run(c);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rail_amqp: %s\n", e.what());
    return 2;
  }
}
