// The downstreams scenario (issue 14's demo): an online shop's two downstream services behind
// two queues of one engine.
//   payments: a card gateway with a quota of 20 charges in any second and at most 3
//             calls in flight; 60 orders are charged.
//   email:    a mail API allowing 2 calls in flight, which hangs: every send blocks until all
//             60 charges are done (a stalled partner), with 20 confirmation emails queued.
// What it shows: payments runs at its quota (never more than 20 starts in any 1 s window, the
// first included) and finishes while email is stalled; email's blocked jobs hold no worker
// thread (its queue keeps 2 handlers active, the rest wait); when the mail API recovers, every
// email goes out. The checks are exact whatever the machine's speed: the rate bound is the
// window's, checked on the clock readings it admitted at (no timing assumption), and email is
// released by the payments' end, not by a clock.
#pragma once

#include <cstdint>
#include <ostream>
#include <vector>

#include "rail/rail.hpp"

namespace rail::orders {

/// DownstreamsReport: what the scenario measured.
struct DownstreamsReport {
  std::vector<Duration> charge_starts;  // since the first charge, in start order
  std::uint64_t charged = 0, mailed = 0;
  std::uint64_t mail_active_while_stalled = 0;   // email handlers holding a thread, stalled
  std::uint64_t mail_waiting_while_stalled = 0;  // email jobs waiting at their downstream then
  std::uint64_t max_in_window = 0;               // most charge starts in any 1 s window
  std::uint64_t bound_in_window = 0;             // what the rate allows in 1 s: max
  std::uint64_t max_charges_in_flight = 0;
  bool payments_done_before_email = false;  // no email sent when the last charge ended
  Duration payments_done_at{0};
  /// ok(): every check of the header held.
  [[nodiscard]] bool ok() const noexcept;
};

/// run_downstreams(engine, log): declares the downstreams and queues on `engine` (threaded),
/// runs the scenario to the end and reports; with `log`, prints its timeline there.
DownstreamsReport run_downstreams(Engine& engine, std::ostream* log);

}  // namespace rail::orders
