// PauseWatch: the soak's invariant 5, a paused queue starts nothing. The pauser makes `epoch`
// odd after pause() returns and even again before resume(). A worker may already have taken a
// job when pause() is called, so it may start that one while paused; but once its `started`
// observer saw the odd epoch it also sees the pause (the epoch's store follows pause() in the
// pauser), so its next job cannot start in the same epoch. Two starts by one thread in one odd
// epoch are a violation.
// Threading: the pauser writes epoch; workers' observers call on_start.
#pragma once

#include <atomic>
#include <cstdint>

namespace rail::soak {

struct PauseWatch {
  std::atomic<std::uint64_t> epoch{0};
  std::uint64_t run = 0;  // tells runs apart in the workers' thread-local records
  std::atomic<std::uint64_t> starts_while_paused{0};

  /// on_start(): called by a worker's `started` observer; false on a violation.
  bool on_start() {
    // acquire: pairs with the pauser's release increment, so pause() is visible from here on.
    const std::uint64_t e = epoch.load(std::memory_order_acquire);
    if ((e & 1) == 0) return true;
    starts_while_paused.fetch_add(1, std::memory_order_relaxed);
    thread_local std::uint64_t seen_run = 0, seen_epoch = 0;
    const bool again = seen_run == run && seen_epoch == e;
    seen_run = run;
    seen_epoch = e;
    return !again;
  }
};

}  // namespace rail::soak
