// broker_soak: the distributed soak (soak/broker_soak.hpp): consumer processes sharing one
// RabbitMQ queue, one killed with SIGKILL mid-run, and an account of every job. Exit status 1
// on any violation.
#include <CLI/CLI.hpp>
#include <iostream>

#include "soak/broker_soak.hpp"

int main(int argc, char** argv) {
  rail::soak::BrokerSoakOptions o;
  CLI::App app{"rail broker soak: consumer processes sharing a RabbitMQ queue, with a kill"};
  app.add_option("--url", o.url, "the broker, amqp://user:password@host:port")->required();
  app.add_option("--queue", o.queue, "the broker queue (must be empty)");
  app.add_option("--jobs", o.jobs)->check(CLI::Range(1u, 1'000'000u));
  app.add_option("--workers", o.workers, "consumer processes")->check(CLI::Range(1u, 64u));
  app.add_option("--concurrency", o.concurrency, "handlers per process")
      ->check(CLI::Range(1u, 256u));
  bool no_kill = false;
  app.add_flag("--no-kill", no_kill, "kill no worker");
  app.add_option("--dir", o.dir, "where the workers' logs go (default: a new /tmp directory)");
  int deadline_s = 300;
  app.add_option("--deadline-s", deadline_s, "the longest the jobs may take to end")
      ->check(CLI::Range(1, 86'400));
  CLI11_PARSE(app, argc, argv);
  o.kill_one = !no_kill;
  o.deadline = std::chrono::seconds(deadline_s);
  try {
    const rail::soak::BrokerSoakReport r = rail::soak::run_broker_soak(o, &std::cout);
    rail::soak::print(r, std::cout);
    return r.ok() ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "broker_soak: " << e.what() << "\n";
    return 2;
  }
}
