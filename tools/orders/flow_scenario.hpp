// The flow scenario (issue 39's demo): each order is a flow of four jobs on three queues: charge
// the card, then send the email and render the invoice side by side, then close the order once
// all three have ended; the close step prints its children's results (Job::children()).
//   order-1: every step completes; its close prints the receipt, the email and the invoice.
//   order-2: the card is declined (a permanent failure): its email and invoice are dead-lettered
//            with reason dependency_failed naming the charge, and so is its close, naming them:
//            nothing after a failed charge runs.
// The checks count ends and read results, not time, so they hold whatever the machine's speed.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "rail/rail.hpp"

namespace rail::orders {

/// FlowReport: what the scenario measured.
struct FlowReport {
  std::vector<std::string> closed;  // what each close step printed, one line per child
  std::uint64_t steps_run = 0;      // handler starts, all queues
  std::uint64_t dependency_failed = 0;
  std::uint64_t completed = 0;
  /// ok(): order-1's four steps completed and its close read its three children's results;
  /// order-2's charge failed and its three later steps were dead-lettered unrun.
  [[nodiscard]] bool ok() const noexcept;
};

/// run_flow(engine, log): declares the queues on `engine` (threaded), runs both orders to the
/// end and reports; with `log`, prints its timeline there.
FlowReport run_flow(Engine& engine, std::ostream* log);

}  // namespace rail::orders
