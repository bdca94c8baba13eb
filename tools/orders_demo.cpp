// orders_demo: replays the seed's orders through rail with the real clock and prints the
// timestamped log. `--scenario bullmq` (default) or `--scenario rabbitmq`.
#include <CLI/CLI.hpp>
#include <iostream>

#include "orders/orders_scenario.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Replays the seed's four orders through rail and prints what happened"};
  std::string scenario_name = "bullmq";
  app.add_option("--scenario", scenario_name,
                 "bullmq (exponential 500 ms), rabbitmq (fixed 2000 ms) or sqs (visibility timeout "
                 "2 s, an overrunning handler, maxReceiveCount 3)")
      ->check(CLI::IsMember({"bullmq", "rabbitmq", "sqs"}));
  std::string dlq_journal;
  app.add_option("--dlq-journal", dlq_journal,
                 "keep the DLQ in this journal file (restored on the next run; read it with "
                 "rail-dlq list FILE)");
  CLI11_PARSE(app, argc, argv);

  try {
    auto scenario = rail::orders::parse_scenario(scenario_name);
    rail::Engine engine;
    engine.on_event(rail::make_log_observer(std::cout, engine.clock()));
    auto queue = rail::orders::declare(engine, scenario, dlq_journal);
    std::cout << "rail orders demo - scenario " << scenario_name << "\n";
    auto results = rail::orders::add_orders(queue, scenario);
    rail::orders::start_worker(queue, scenario);
    for (const auto& r : results)
      if (r.duplicate())
        std::cout << "add returned job " << r.id << " (duplicate: merged, nothing created)\n";
    rail::orders::settle(engine, queue, nullptr);
    rail::orders::inspect_dlq(queue, std::cout);
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
