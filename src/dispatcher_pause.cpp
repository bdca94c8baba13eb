// Dispatcher's pause: pause() and resume() with their events, and pause_and_wait(), which waits
// until every worker has acknowledged the pause between jobs or is parked (pause_barrier.hpp),
// and hold_back(), where a worker that popped jobs as the pause came keeps them unstarted.
// See include/rail/detail/dispatcher.hpp.
#include <algorithm>
#include <string>

#include "rail/detail/deadline.hpp"
#include "rail/detail/dispatcher.hpp"
#include "rail/detail/poll_until.hpp"
#include "rail/error.hpp"

namespace rail::detail {

void Dispatcher::pause() noexcept {
  if (pause_.pause()) {  // the one call that changed the state raises the event
    if (pause_listener_) pause_listener_->pause_changed();
    emit_queue_event(EventKind::paused);
  }
}

void Dispatcher::resume() noexcept {
  const bool was_paused = pause_.resume();
  // One signal per worker: each may be between its paused check and its wait().
  wake_.load(std::memory_order_acquire)
      ->ec.notify_all(static_cast<std::int32_t>(std::max<std::uint32_t>(workers(), 1)));
  if (was_paused) {
    if (pause_listener_) pause_listener_->pause_changed();
    emit_queue_event(EventKind::resumed);
  }
}

bool Dispatcher::pause_and_wait(Duration timeout) {
  // The rule wait_idle() follows: a handler of this queue (its events included) or a callback of
  // the timer (which a worker of this queue may be running between two jobs) would wait for
  // its own thread, which acknowledges the pause only from next_job.
  if (current_delivery() == &owner_ || core_.in_timer_context())
    throw Error(ErrorCode::would_deadlock,
                "pause_and_wait() on queue '" + std::string(queue_) +
                    "' was called from one of its own handlers (or an observer of its events on "
                    "its worker) or from a callback of the timer (an observer of "
                    "retry_due/stalled, a DLQ alert), which would wait for itself; call pause() "
                    "there, or pause_and_wait from outside handlers and callbacks");
  pause();
  const auto deadline = steady_deadline(timeout);  // Duration::max(): no timeout
  if (core_.mode() != Mode::threaded) {
    // Inline: handlers run only inside run_until_idle, which checks the pause before each job;
    // from outside it (any other thread) wait for the one in progress there, if any.
    return poll_until(deadline, [&] { return stats_.counts(true).active == 0; });
  }
  // Sleeping workers are not woken: they are parked, which counts as acknowledged.
  const std::uint64_t epoch = pause_.begin_wait();
  return poll_until(deadline, [&] { return workers_acknowledged(epoch); });
}

bool Dispatcher::workers_acknowledged(std::uint64_t epoch) const noexcept {
  // acquire: set (release) once contexts_ is complete; it never changes after. Not yet: no
  // worker runs a job yet, and each will see the pause before its first one.
  if (!contexts_ready_.load(std::memory_order_acquire)) return true;
  return PauseBarrier::acknowledged(epoch, contexts_);
}

/// hold_back(wc, w, idx, n): worker w (wc) or the inline runner (null) popped n ready jobs and then
/// saw the queue paused: none starts. A worker keeps them in its stash, in order (it is empty:
/// its own take() failed before it popped, and only its owner fills a stash; n <= kCapacity) and
/// acknowledges the pause; the inline runner puts them back into the ring (behind what was pushed
/// meanwhile: the only place inline mode reorders). Returns false, next_job's "no job".
bool Dispatcher::hold_back(WorkerContext* wc, std::uint32_t w, const std::uint32_t* idx,
                           std::size_t n) noexcept {
  if (wc) {
    wc->stash->fill(idx, static_cast<std::uint32_t>(n));
  } else {
    put_back_entries(idx, n);
  }
  // release, after the fill or push: see held_back().
  held_back_.fetch_add(1, std::memory_order_release);
  if (wc && may_acknowledge(w)) pause_.acknowledge(wc->pause);
  return false;
}

}  // namespace rail::detail
