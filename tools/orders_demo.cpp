// orders_demo: replays the seed's orders through rail with the real clock and prints the
// timestamped log. `--scenario bullmq` (default) or `--scenario rabbitmq`.
#include <CLI/CLI.hpp>
#include <iostream>

#include "orders/downstreams_scenario.hpp"
#include "orders/fairness_scenario.hpp"
#include "orders/flow_scenario.hpp"
#include "orders/orders_scenario.hpp"

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
