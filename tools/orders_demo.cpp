// orders_demo: replays the seed's orders through rail with the real clock and prints the
// timestamped log. `--scenario bullmq` (default) or `--scenario rabbitmq`; `--broker URL` runs
// it through a RabbitMQ broker (rail::amqp).
#include <CLI/CLI.hpp>
#include <iostream>

#include "orders/downstreams_scenario.hpp"
#include "orders/fairness_scenario.hpp"
#include "orders/flow_scenario.hpp"
#include "orders/orders_scenario.hpp"
#ifdef RAIL_HAVE_AMQP
#include "orders/broker_scenario.hpp"
#endif

/// run_broker(scenario, name, url): orders_demo --broker URL.
int run_broker(rail::orders::Scenario scenario, const std::string& name, const std::string& url) {
#ifdef RAIL_HAVE_AMQP
  rail::Engine engine;
  std::cout << "rail orders demo - scenario " << name << " over the broker at " << url << "\n";
  const auto r = rail::orders::run_over_broker(engine, scenario, url, std::cout);
  std::cout << "--- SUMMARY: completed " << r.local.completed << ", retried through the broker "
            << r.local.forwarded << ", dead-lettered " << r.dead.size() << " (in the broker's DLQ)";
  if (scenario == rail::orders::Scenario::sqs)
    std::cout << ", lease lapses " << r.local.stalled << ", late outcomes fenced "
              << r.local.late_outcomes;
  std::cout << " ---\n";
  engine.shutdown();
  return r.ok() ? 0 : 1;
#else
  (void)scenario;
  (void)name;
  std::cerr << "orders_demo: --broker " << url
            << ": this build has no rail::amqp (apt-get install -y librabbitmq-dev, then "
               "reconfigure)\n";
  return 2;
#endif
}

int main(int argc, char** argv) {
  CLI::App app{"Replays the seed's four orders through rail and prints what happened"};
  std::string scenario_name = "bullmq";
  app.add_option(
         "--scenario", scenario_name,
         "bullmq (exponential 500 ms), rabbitmq (fixed 2000 ms) or sqs (visibility timeout "
         "2 s, an overrunning handler, maxReceiveCount 3), downstreams (a rate-limited "
         "payments gateway and a hung email API) or fairness (per-customer order, a "
         "priority lane, a tenant that cannot crowd out the others) or flow (charge, then email "
         "and invoice side by side, then close the order with its children's results)")
      ->check(CLI::IsMember({"bullmq", "rabbitmq", "sqs", "downstreams", "fairness", "flow"}));
  std::string dlq_journal;
  app.add_option("--dlq-journal", dlq_journal,
                 "keep the DLQ in this journal file (restored on the next run; read it with "
                 "rail-dlq list FILE)");
  std::string broker;
  app.add_option("--broker", broker,
                 "run the scenario through a RabbitMQ broker at this URL "
                 "(amqp://guest:guest@127.0.0.1:PORT): a rail::amqp Producer adds the orders, a "
                 "Consumer runs them on a local queue, retries go back through the broker "
                 "(bullmq, rabbitmq and sqs scenarios)");
  CLI11_PARSE(app, argc, argv);

  try {
    if (scenario_name == "fairness") {
      rail::Engine engine;
      std::cout << "rail orders demo - scenario fairness\n";
      const auto r = rail::orders::run_fairness(engine, &std::cout);
      std::cout << "--- SUMMARY: customer-42's steps in order: "
                << (r.customer42.size() == 4 ? "yes" : "no") << "; small-shop started at "
                << r.small_shop_started_at << " (the importer's share is " << r.importer_share
                << "); express started " << r.express_started_at << " start(s) after its add; "
                << r.completed << " of " << r.added << " completed ---\n";
      engine.shutdown();
      return r.ok() ? 0 : 1;
    }
    if (scenario_name == "flow") {
      rail::Engine engine;
      std::cout << "rail orders demo - scenario flow\n";
      const auto r = rail::orders::run_flow(engine, &std::cout);
      std::cout << "--- SUMMARY: " << r.completed << " steps completed, " << r.dependency_failed
                << " dead-lettered for a failed dependency, " << r.steps_run
                << " handler starts ---\n";
      engine.shutdown();
      return r.ok() ? 0 : 1;
    }
    if (scenario_name == "downstreams") {
      rail::Engine engine;
      std::cout << "rail orders demo - scenario downstreams\n";
      const bool ok = rail::orders::run_downstreams(engine, &std::cout).ok();
      engine.shutdown();
      return ok ? 0 : 1;
    }
    auto scenario = rail::orders::parse_scenario(scenario_name);
    if (!broker.empty()) return run_broker(scenario, scenario_name, broker);
    rail::Engine engine;
    engine.on_event(rail::make_log_observer(std::cout, engine.clock()));
    auto queue = rail::orders::declare(engine, scenario, dlq_journal);
    std::cout << "rail orders demo - scenario " << scenario_name << "\n";
    auto handles = rail::orders::add_orders(queue, scenario);
    rail::orders::start_worker(queue, scenario);
    for (const auto& h : handles)
      if (h.added().duplicate())
        std::cout << "add returned job " << h.id() << " (duplicate: merged, nothing created)\n";
    rail::orders::settle(engine, queue, nullptr);
    rail::orders::inspect_dlq(queue, std::cout);
    // As a producer that waits for one job (BullMQ's job.waitUntilFinished): order-2's handle.
    const auto order2 = handles[1].wait();
    std::cout << "order-2 (job " << order2.id << ") " << rail::to_string(order2.status) << " after "
              << order2.attempt << " attempt(s): ";
    if (order2.result) std::cout << *order2.result;
    std::cout << "\n";
    auto s = rail::orders::summarize(queue);
    std::cout << "--- SUMMARY: completed " << s.completed << ", retried (failed attempts) "
              << s.failed_attempts << ", dead-lettered " << s.dead_lettered << ", deduplicated "
              << s.deduplicated;
    if (scenario == rail::orders::Scenario::sqs)
      std::cout << ", lease lapses " << s.stalled << ", late outcomes fenced " << s.late_outcomes;
    std::cout << " ---\n";
    engine.shutdown();
  } catch (const rail::Error& e) {
    std::cerr << "orders_demo: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
