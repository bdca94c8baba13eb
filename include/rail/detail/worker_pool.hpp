// WorkerPool: the engine's shared worker threads (EngineOptions.workers), which run the jobs of
// every queue that processes on it (WorkerOptions.pool = Pool::shared).
//
// Why: a thread per handler call in flight, per queue, sizes threads to the queues rather than to
// the machine; twenty queues of four workers each is eighty threads on two cores. The shared pool
// has one thread per core by default, and what each queue may take of it is its share
// (WorkerOptions.concurrency) and its downstream's limits (downstream_gate.hpp), which keep a job
// that may not start from holding a thread.
// Members: each queue keeps its own Dispatcher (ready ring, and per pool worker a stash and a
// context), joined to the pool once (Dispatcher::join_pool, then add). Members are appended to a
// fixed array, never removed while the pool runs; the engine stops and joins the pool before any
// queue dies.
// Turns: a worker visits every member in turn, starting one member further on each round (so
// that no queue is always first), and runs up to Dispatcher::kTurn of its jobs there
// (serve_turn); an idle member costs a few relaxed loads. A round that ran nothing makes the
// worker idle.
// Idle: as a dedicated pool's workers (dispatcher.hpp), one idle worker at a time spins, here on
// every member's turn_possible() hint, for up to Dispatcher::kSpinNs; the others sleep on the
// pool's event count, which every member's producers notify (WakeTarget). A spinner whose last
// handler was fast keeps its duty through the round it then goes (PoolDuty), and through the
// ones after while its handlers stay fast, so producers of every member go on skipping their
// wake-ups; it gives the duty up after a handler that ran long, and sleepers watch meanwhile
// (sleep), as in a dedicated pool. Pushes the duty covered are announced as it is given up: a
// sleeper for each member with work but one (the giver's round may stay in the first one's
// handler), and within a member by next_job, as in a dedicated pool.
// Memory ordering: count_ is published with release after the member is stored; workers load it
// with acquire, which carries the member's join_pool writes. The duty is a Dekker with
// wake_for_ready, fence against fence (give_up_duty), and one with sleep(), four seq_cst
// operations (spin, sleep). stop_ is release/acquire.
// Threading: add/start/stop/join from any thread, cold; worker_loop on the pool's threads.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>

#include "rail/detail/dispatcher.hpp"
#include "rail/detail/thread_group.hpp"

namespace rail::detail {

class WorkerPool {
 public:
  static constexpr std::size_t kMaxMembers = EngineCore::kMaxQueues;

  /// WorkerPool(workers): no threads until start().
  explicit WorkerPool(std::uint32_t workers) noexcept : size_(workers) { wake_.workers = workers; }
  ~WorkerPool() {
    stop();
    join();
  }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  /// start(): creates the threads, all or nothing; throws Error(resources) when the system
  /// refuses one (the ones created exited without running anything). None after stop().
  void start();
  /// add(d): d (joined with join_pool) is served from now on; its visible jobs wake a worker.
  void add(Dispatcher& d);
  /// stop(): the workers exit after their current turn. join(): waits for them (never for the
  /// calling thread).
  void stop() noexcept;
  void join() noexcept { threads_.join(); }

  [[nodiscard]] std::uint32_t size() const noexcept { return size_; }
  [[nodiscard]] WakeTarget& wake() noexcept { return wake_; }

 private:
  void worker_loop(std::uint32_t w);
  bool round(std::uint32_t w, std::uint32_t& first, PoolDuty& duty) noexcept;
  bool spin(PoolDuty& duty) noexcept;
  std::uint32_t give_up_duty(PoolDuty& duty, std::uint32_t serves) noexcept;
  void sleep() noexcept;
  /// jobs_started(): handlers started by every member (a watch's progress).
  [[nodiscard]] std::uint64_t jobs_started() const noexcept;
  /// turns_possible(most): members whose turn_possible() hint holds, counting up to `most`.
  [[nodiscard]] std::uint32_t turns_possible(std::uint32_t most) const noexcept;

  const std::uint32_t size_;
  WakeTarget wake_;
  std::array<Dispatcher*, kMaxMembers> members_{};  // [0, count_) published by count_
  std::atomic<std::uint32_t> count_{0};
  std::mutex add_mu_;  // serializes add()
  std::atomic<bool> stop_{false};
  ThreadGroup threads_;
};

}  // namespace rail::detail
