// The fairness scenario (issue 38's demo): one orders queue shared by every customer of a shop.
//   per-customer order: customer-42's three steps of one order (charge, ship, email) are a FIFO
//                       group: they run one at a time, in order, on any of the workers, while
//                       other customers' jobs run beside them; its charge fails once and is
//                       retried, and the ship step waits for that retry.
//   a priority lane:    express orders (priority 1) start before the standard ones (priority 0)
//                       already waiting.
//   a fair share:       a bulk importer (tenant) floods the queue with 2,000 jobs first; a
//                       small shop's (another tenant's) order still starts after at most the
//                       importer's share (tenant_window jobs), not after the flood.
// The checks count starts, not time, so they hold whatever the machine's speed.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "rail/rail.hpp"

namespace rail::orders {

/// FairnessReport: what the scenario measured.
struct FairnessReport {
  std::vector<std::string> customer42;      // its steps, in start order (retries included)
  std::uint64_t small_shop_started_at = 0;  // its order's place among all starts (1 = first)
  std::uint64_t importer_share = 0;         // the importer's share: its jobs ready or running
  std::uint64_t express_started_at = 0;     // the express order's place among the starts after
                                            // it was added (1 = next)
  std::uint64_t completed = 0, added = 0;
  /// ok(): customer-42's steps ran in order (its charge twice), the small shop's order started
  /// within the importer's share plus the workers, the express order next, and every job ended.
  [[nodiscard]] bool ok() const noexcept;
};

/// run_fairness(engine, log): declares the queue on `engine` (threaded), runs the scenario to
/// the end and reports; with `log`, prints its timeline there.
FairnessReport run_fairness(Engine& engine, std::ostream* log);

}  // namespace rail::orders
