#include "orders/broker_scenario.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "rail/log_observer.hpp"

namespace rail::orders {
namespace {

using namespace std::chrono_literals;

/// settled(queue, dead, dlq_before, orders): every order ended here and each dead letter is in
/// the broker's DLQ (the relay publishes it after the local end).
bool settled(OrdersQueue& queue, amqp::DeadLetters& dead, std::uint32_t dlq_before,
             std::uint64_t orders) {
  const QueueCounts c = queue.counts();
  // Ended, and no overrunning handler still running (its late outcome is part of the story).
  return c.completed + c.dead_lettered == orders && c.active == 0 &&
         dead.depth() >= dlq_before + c.dead_lettered;
}

}  // namespace

bool BrokerReport::ok() const noexcept {
  return local.completed + local.dead_lettered == orders && dead.size() == 1 &&
         dead[0].name == "charge-card";
}

BrokerReport run_over_broker(Engine& engine, Scenario scenario, const std::string& url,
                             std::ostream& log) {
  const amqp::BrokerOptions broker{.url = url,
                                   .heartbeat = std::chrono::seconds(10),
                                   .confirm_timeout = std::chrono::seconds(10),
                                   .name = "orders_demo"};
  engine.on_event(make_log_observer(log, engine.clock()));
  OrdersQueue queue = declare(engine, scenario);
  start_worker(queue, scenario);
  amqp::Producer<Order> producer(broker, "orders");
  amqp::DeadLetters dead(broker, "orders");
  const std::uint32_t dlq_before = dead.depth();
  // Every retry through the broker, to show its round trip: by default a retry due within 1 s
  // (all of this scenario's) would wait in this process instead.
  amqp::Consumer<Order, Receipt> consumer(broker, engine, queue, {},
                                          {.retry_here_within = Duration{0}});
  log << "(every retry goes back through the broker here: ConsumerOptions::retry_here_within = 0;"
         " by default a retry due within 1 s waits in the consuming process)\n";

  const JobOptions o = retry_policy(scenario);
  const Order orders[] = {
      {"order-1", 49.99, 0}, {"order-2", 19.99, 2}, {"order-3", 99.00, 99}, {"order-4", 0, 0}};
  BrokerReport report;
  std::vector<JobId> ids;
  for (const Order& order : orders) {
    const char* name = order.order_id == "order-4" ? "send-confirmation-email" : "charge-card";
    const AddReceipt r = producer.add(name, order, o);
    log << "broker confirmed " << name << " of " << order.order_id << " as job " << r.id << " ("
        << to_string(r.status) << ")\n";
    if (r.status != AddStatus::added) continue;
    ++report.orders;
    ids.push_back(r.id);
  }
  log << "(order-4's email is added once: a dedup id needs one process's view of every job, "
         "which a broker queue shared by several does not have)\n";
  while (!settled(queue, dead, dlq_before, report.orders))
    std::this_thread::sleep_for(10ms);

  report.local = queue.counts();
  for (amqp::BrokerDeadLetter& e : dead.list())  // this run's: another's may wait there too
    if (std::find(ids.begin(), ids.end(), e.id) != ids.end()) report.dead.push_back(std::move(e));
  for (const auto& e : report.dead) {
    const Order order = e.payload<Order>();
    char amount[32];
    std::snprintf(amount, sizeof amount, "%g", order.amount);
    log << "🔎 BROKER DLQ INSPECTOR: job " << e.id << " (" << e.name << ") {\"orderId\":\""
        << order.order_id << "\",\"amount\":" << amount << "} reason=" << e.reason
        << " attempts=" << e.failed_attempts << "/" << e.max_attempts << "\n";
    for (const auto& err : e.errors)
      log << "    attempt " << err.attempt << ": " << err.message << "\n";
  }
  return report;
}

}  // namespace rail::orders
