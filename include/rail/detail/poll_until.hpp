// poll_until: the one wait of rail's cold paths, a poll with doubling sleeps against a steady
// deadline (src/ only: it pulls in <thread>, which no public header needs).
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>

namespace rail::detail {

/// poll_until(deadline, ready, first, cap): calls ready() until it returns true (then true), or
/// until the steady clock reaches `deadline` (then false), sleeping between calls for `first`,
/// doubled each time up to `cap`. The one wait of rail's cold paths (wait_idle, a producer
/// blocked on a full queue, shutdown's wait for deliveries): nobody on the hot path pays to wake
/// them. ready() is always called at least once, so a deadline already passed still looks;
/// it may throw to end the wait with an error.
template <class Ready>
[[nodiscard]] bool poll_until(std::chrono::steady_clock::time_point deadline, Ready&& ready,
                              std::chrono::microseconds first = std::chrono::microseconds(10),
                              std::chrono::microseconds cap = std::chrono::microseconds(2000)) {
  for (auto pause = first;; pause = std::min(pause * 2, cap)) {
    if (ready()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(pause);
  }
}

}  // namespace rail::detail
