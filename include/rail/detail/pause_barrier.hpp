// PauseBarrier: a queue's paused flag, and the epoch barrier by which pause_and_wait learns that
// no handler of the queue still runs: every worker has seen the pause between jobs, or sleeps.
//
// Contract: a worker checks the flag before taking each job (seen), so a job it took before the
// pause still runs, and nothing starts after it saw the pause. begin_wait() opens a new epoch;
// acknowledged(epoch, workers) is true once every worker has acknowledged that epoch (or a later
// one) from `seen`, between jobs, is parked (asleep between jobs, or outside this queue's turn in
// a shared pool), or has exited its loop. A worker acknowledges only between jobs with the pause
// in sight, so its last handler (a stale one whose lease lapsed included) has returned. Sleepers
// are not woken to acknowledge: an event count's signals go to whichever worker waits next, so
// one worker could take them all; a parked worker runs nothing, and when it unparks its next
// check sees the pause. Nothing is paid per job while the queue runs: the acknowledgement is in
// the paused branch, parking is per sleep or per pool turn.
// Memory ordering: pause()'s exchange, a worker's check in `seen`, its unpark store and the
// waiter's load of `parked` are seq_cst: a Dekker — if the waiter reads `parked`, the unpark
// comes later in the single order, so that worker's next check sees the pause. The epoch's
// increment is acq_rel after the pause; a worker's acquire load of it then sees the pause, and
// its ack (release, after its last handler's counts) is acquired by the waiter. park() is
// release: the worker's last handler happens before a waiter's load that sees it parked.
// resume() is acq_rel; paused() acquire; paused_now() relaxed, for a re-check whose ordering the
// caller has by other means (Dispatcher::paused_after_pop).
// Threading: pause/resume/begin_wait/acknowledged from any thread; a worker's marks are written
// only by that worker (after start; the pool's join sets them before its workers see them).
#pragma once

#include <atomic>
#include <cstdint>

namespace rail::detail {

/// PauseMarks: one worker's side of the barrier.
struct PauseMarks {
  static constexpr std::uint64_t kExited = ~std::uint64_t{0};
  /// ack: the last epoch this worker acknowledged between jobs (kExited once it left its loop).
  std::atomic<std::uint64_t> ack{0};
  /// parked: the worker sleeps between jobs (or is about to), or is outside this queue's turn.
  std::atomic<bool> parked{false};

  /// park(): before a sleep or at the end of a turn (release: see the contract).
  void park() noexcept { parked.store(true, std::memory_order_release); }
  /// unpark(): after a sleep, at the start of a turn (seq_cst: see the contract).
  void unpark() noexcept { parked.store(false, std::memory_order_seq_cst); }
  /// exit(): the worker left its loop for good; no waiter waits for it again.
  void exit() noexcept { ack.store(kExited, std::memory_order_release); }
};

class PauseBarrier {
 public:
  /// pause() / resume(): true if the call changed the state (the one that raises the event).
  bool pause() noexcept { return !paused_.exchange(true, std::memory_order_seq_cst); }
  bool resume() noexcept { return paused_.exchange(false, std::memory_order_acq_rel); }
  [[nodiscard]] bool paused() const noexcept { return paused_.load(std::memory_order_acquire); }
  [[nodiscard]] bool paused_now() const noexcept { return paused_.load(std::memory_order_relaxed); }

  /// seen(marks, may_ack): the queue is paused, as a worker sees it between jobs; it then
  /// acknowledges the pause (acknowledge), as a pause_and_wait may be waiting for it, unless
  /// may_ack() says it still holds jobs it will run first (a batch, Queue::process_batch).
  /// may_ack is asked only when paused: the unpaused path stays one load.
  template <class MayAck>
  [[nodiscard]] bool seen(PauseMarks& marks, MayAck&& may_ack) noexcept {
    // seq_cst: see the contract (a plain load on x86, ldar on ARMv8 as acquire is).
    if (!paused_.load(std::memory_order_seq_cst)) [[likely]]
      return false;
    if (may_ack()) acknowledge(marks);
    return true;
  }
  /// acknowledge(marks): a worker, between jobs, saw the queue paused (or holds jobs back).
  void acknowledge(PauseMarks& marks) noexcept {
    // acquire: if this reads a waiter's epoch, the load below sees its pause (or a later resume,
    // and then the worker does not acknowledge).
    const std::uint64_t epoch = epoch_.load(std::memory_order_acquire);
    if (!paused_.load(std::memory_order_acquire)) return;
    // relaxed load: the worker's own last store. release store: its finished handler's effects
    // and counts happen before the waiter's acquire load of the ack.
    if (marks.ack.load(std::memory_order_relaxed) != epoch)
      marks.ack.store(epoch, std::memory_order_release);
  }

  /// begin_wait(): after pause(), the epoch a waiter waits for the workers to acknowledge.
  [[nodiscard]] std::uint64_t begin_wait() noexcept {
    return epoch_.fetch_add(1, std::memory_order_acq_rel) + 1;
  }
  /// acknowledged(epoch, workers): every worker (a range of pointers to objects whose `pause`
  /// member is their PauseMarks) acknowledged `epoch`, is parked, or has exited.
  template <class Workers>
  [[nodiscard]] static bool acknowledged(std::uint64_t epoch, const Workers& workers) noexcept {
    for (const auto& w : workers) {
      const PauseMarks& m = w->pause;
      // acquire: pairs with the ack's release (the worker's handler has returned).
      if (m.ack.load(std::memory_order_acquire) >= epoch) continue;
      // seq_cst: the Dekker of the contract.
      if (m.parked.load(std::memory_order_seq_cst)) continue;
      return false;
    }
    return true;
  }

 private:
  std::atomic<bool> paused_{false};
  std::atomic<std::uint64_t> epoch_{0};  // bumped by each begin_wait
};

}  // namespace rail::detail
