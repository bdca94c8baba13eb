// JobFlow's workers: starting a queue's processing on its own threads or the shared pool (with
// the lease records its deliveries need), undoing that when a start fails, and the inline
// engine's run of ready jobs. See include/rail/detail/job_flow.hpp.
#include <cstdint>
#include <memory>

#include "rail/detail/job_flow.hpp"
#include "rail/detail/worker_pool.hpp"

namespace rail::detail {

void JobFlow::start_processing(const WorkerOptions& w) {
  const std::uint64_t seed = parts_.core.seed() ^ (std::uint64_t{index_} << 32);
  if (w.pool == Pool::shared && parts_.core.mode() == Mode::threaded) {
    WorkerPool& pool = parts_.core.shared_pool();  // may throw Error(resources): nothing done yet
    make_leases(pool.size(), w.max_pending);
    try {
      dispatch_.join_pool(*this, pool.size(), pool.wake(), *leases_, seed,
                          w.concurrency.value_or(0));  // join_pool's 0: the whole pool
    } catch (...) {
      drop_leases();  // join_pool undid its part: the queue is as before
      throw;
    }
    pool.add(dispatch_);
  } else {
    start_dedicated(w, seed);
  }
  // seq_cst, before the request below: see admit_unusual. (Also the release that publishes
  // leases_ to sweep_inline and run_ready.)
  processing_.store(true, std::memory_order_seq_cst);
  // Threaded: the sweep is a self-re-arming wheel timer. Inline: time moves only through
  // ManualClock::advance, whose process_timers() calls sweep_inline() directly, so no timer is
  // left on the wheel for next_timer_in() to chase forever.
  // seq_cst: job_timeouts, the other side of admit_unusual's hand-off.
  if ((parts_.leases_enabled() || parts_.job_timeouts.load(std::memory_order_seq_cst)) &&
      parts_.core.mode() == Mode::threaded)
    timers_.request_sweep();
}

void JobFlow::start_dedicated(const WorkerOptions& w, std::uint64_t seed) {
  const std::uint32_t workers =
      parts_.core.mode() == Mode::threaded ? w.concurrency.value_or(1) : 1;
  make_leases(workers, w.max_pending);
  try {
    dispatch_.start(*this, workers, *leases_, seed, parts_.name);
  } catch (...) {
    // start() joined the threads it had started before any ran a job: undo the rest, so that
    // the queue is as before.
    drop_leases();
    throw;
  }
}

void JobFlow::make_leases(std::size_t workers, std::uint32_t max_pending) {
  // The workers' records first, then one per pending delivery, then held_max_ per worker for
  // the deliveries a batch queue's workers hold: one sweep scans them all.
  auto leases =
      std::make_unique<LeaseTracker>(workers + max_pending + workers * std::size_t{held_max_},
                                     warn_fraction(parts_.options.stall_warning));
  completions_.open(*leases, max_pending, static_cast<std::uint32_t>(workers));
  held_first_ = static_cast<std::uint32_t>(workers + max_pending);
  leases_ = std::move(leases);
}

void JobFlow::drop_leases() noexcept {
  completions_.drop();
  leases_.reset();
}

std::size_t JobFlow::run_ready(std::size_t max) {
  if (!processing()) return 0;
  return dispatch_.run_inline(*this, *leases_, parts_.core.seed() ^ index_, max);
}

}  // namespace rail::detail
