// hang(job, manual_clock, v): the soak's hang fate, for a Job or an AsyncJob: outlive the lease
// (or the timeout), waiting until this delivery is fenced, then return so that the handler claims
// success, which the engine must ignore (a late outcome). Half the hangs (by the plan's bit 20)
// wait on their stop token, which the fence must stop: a lost stop would hang them, so one that
// does not come within kStopGrace of the fence is given up on and counted. A lapse stops the
// token once the timer thread lets the wheel go and has delivered the events raised before it:
// on a starved machine (TSan, two cores, other tests beside) that took up to 2.5 s.
#pragma once

#include <chrono>
#include <stop_token>
#include <string>
#include <thread>

#include "soak/violations.hpp"

namespace rail::soak {

template <class J>
void hang(J& j, bool manual_clock, Violations& v) {
  using namespace std::chrono_literals;
  constexpr auto kStopGrace = 30s;
  const bool by_token = (j.data().plan >> 20) & 1;
  const std::stop_token stop = by_token ? j.stop_token() : std::stop_token{};
  while (by_token ? !stop.stop_requested() : !j.cancelled()) {
    std::this_thread::sleep_for(manual_clock ? 10us : 1ms);
    if (by_token && j.cancelled()) {
      const auto grace = std::chrono::steady_clock::now() + kStopGrace;
      while (!stop.stop_requested() && std::chrono::steady_clock::now() < grace)
        std::this_thread::sleep_for(100us);
      if (!stop.stop_requested())
        v.add("job " + std::to_string(j.id()) + ": delivery " + std::to_string(j.deliveries()) +
              " was fenced but its stop token never stopped");
      return;
    }
  }
}

}  // namespace rail::soak
