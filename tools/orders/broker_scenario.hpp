// The orders scenarios over a RabbitMQ broker (orders_demo --broker URL): the same four orders,
// added by a rail::amqp::Producer (each add confirmed by the broker), run by the scenario's
// worker on a local queue that a rail::amqp::Consumer feeds. Retries and lapsed leases go back
// through the broker (the local queue forwards them), the handler sees the job's own attempt
// each time, and the dead letters are read from the broker's DLQ. What needs one process's view
// of every job stays out: order-4's email is added once (a dedup id is refused on a broker add).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "orders/orders_scenario.hpp"
#include "rail/amqp.hpp"

namespace rail::orders {

/// BrokerReport: what a run over the broker counted.
struct BrokerReport {
  QueueCounts local;                         // the local queue's counts (this process's share)
  std::vector<amqp::BrokerDeadLetter> dead;  // this run's entries in the broker's DLQ
  std::uint64_t orders = 0;                  // jobs added through the broker
  /// ok(): every order ended (completed, or dead-lettered on the broker) and order-3 alone died.
  [[nodiscard]] bool ok() const noexcept;
};

/// run_over_broker(engine, scenario, url, log): runs the scenario through the broker at `url`
/// (its queue "orders", declared if missing; jobs another run left there run too), printing the
/// log observer's lines and the DLQ inspector's to `log`. Throws Error(broker) if the broker
/// cannot be reached.
BrokerReport run_over_broker(Engine& engine, Scenario scenario, const std::string& url,
                             std::ostream& log);

}  // namespace rail::orders
