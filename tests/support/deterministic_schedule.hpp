// DeterministicSchedule: runs N real threads one at a time and picks who runs next at every atomic
// operation with a seeded PRNG, so a failing interleaving replays exactly from its seed.
//
// The pattern is folly's DeterministicSchedule (folly/test/DeterministicSchedule.h): the code under
// test takes an `Atom` template parameter, and tests instantiate it with DeterministicAtomic, whose
// every operation is a scheduling point. Between two scheduling points a thread runs alone, so an
// execution is a sequentially consistent interleaving of atomic operations. It explores
// interleavings, not weak-memory reorderings: memory orders are passed through to a real
// std::atomic but never weakened, so acquire/release mistakes remain ThreadSanitizer's job.
//
// Determinism holds as long as the bodies depend only on the values they read and on the seed (no
// clocks, no unmanaged threads, no std::this_thread::yield-based waits), and replays are exact on
// the same standard library (std::shuffle and the distributions are implementation-defined).
// compare_exchange_weak fails spuriously at seeded points, so retry loops are exercised too.
//
// Liveness: a thread that spins must perform a DeterministicAtomic operation (or call
// DeterministicSchedule::yield_point()) in every iteration; each one yields, so the waited-for
// thread eventually runs. A schedule that exceeds its step budget has livelocked (a thread spins
// on a state no other thread will change, e.g. inside a noexcept try_pop), and no thread can be
// cancelled, so it prints its seed and policy and aborts: a loud failure that names its replay,
// instead of a hang that a CTest timeout kills without one.
//
// Use:
//   MpmcRing<std::uint64_t, DeterministicAtomic> ring(2);
//   DeterministicSchedule sched(seed, SchedulePolicy::uniform);
//   std::uint64_t out = 0;
//   sched.run({[&] { while (!ring.try_push(1)) {} },
//              [&] { while (!ring.try_pop(out)) {} }});
//   // then check invariants on the main thread, printing `seed` on failure
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <semaphore>
#include <thread>
#include <utility>
#include <vector>

namespace rail::test {

enum class SchedulePolicy {
  uniform,  // every step picks uniformly among the unfinished threads
  subset,   // every step picks among a random pair of them, re-drawn every 64 steps: long runs of
            // two threads racing, which uniform choice rarely produces with three or more threads
            // (with exactly two threads it is uniform)
};

namespace detail {

// WorkerPool keeps threads alive across schedules: creating three threads costs more than a
// whole short schedule, and the ring tests run thousands of schedules.
class WorkerPool {
 public:
  static WorkerPool& instance() {
    static WorkerPool pool;
    return pool;
  }

  // run_all(tasks) runs tasks[i] on worker i, all concurrently, and returns when all have
  // finished. The semaphores order each task after the call and its effects before the return.
  void run_all(std::vector<std::function<void()>>& tasks) {
    std::lock_guard lock(mutex_);  // one batch at a time; workers are not shared between batches
    while (workers_.size() < tasks.size())
      workers_.push_back(std::make_unique<Worker>(*this));
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      workers_[i]->task = std::move(tasks[i]);
      workers_[i]->start.release();
    }
    for (std::size_t i = 0; i < tasks.size(); ++i)
      done_.acquire();
  }

  ~WorkerPool() {
    for (auto& w : workers_) {
      w->stop = true;
      w->start.release();
    }
    for (auto& w : workers_)
      w->thread.join();
  }

 private:
  struct Worker {
    explicit Worker(WorkerPool& pool) : thread([this, &pool] { loop(pool); }) {}
    void loop(WorkerPool& pool) {
      for (;;) {
        start.acquire();
        if (stop) return;
        task();
        task = nullptr;
        pool.done_.release();
      }
    }
    std::binary_semaphore start{0};
    std::function<void()> task;
    bool stop = false;   // written before start.release(), read after start.acquire()
    std::thread thread;  // last: starts after the members it uses are constructed
  };

  std::mutex mutex_;
  std::counting_semaphore<> done_{0};
  std::vector<std::unique_ptr<Worker>> workers_;
};

}  // namespace detail

class DeterministicSchedule {
 public:
  static constexpr std::uint64_t kDefaultStepBudget = 1'000'000;

  DeterministicSchedule(std::uint64_t seed, SchedulePolicy policy,
                        std::uint64_t step_budget = kDefaultStepBudget)
      : seed_(seed), rng_(seed), policy_(policy), step_budget_(step_budget) {}

  DeterministicSchedule(const DeterministicSchedule&) = delete;
  DeterministicSchedule& operator=(const DeterministicSchedule&) = delete;

  /// run(bodies) runs each body on its own thread (from a pool reused across schedules), one
  /// thread at a time, and blocks until all have returned. An exception escaping a body is
  /// rethrown here after every body has finished. Aborts if the step budget runs out (see the
  /// header comment). Call once per schedule.
  void run(std::vector<std::function<void()>> bodies) {
    const std::size_t n = bodies.size();
    if (n == 0) return;
    finished_.assign(n, 0);
    turn_.clear();
    for (std::size_t i = 0; i < n; ++i) {
      turn_.push_back(std::make_unique<std::counting_semaphore<>>(0));
    }
    unfinished_ = n;
    std::vector<std::function<void()>> tasks;
    for (std::size_t i = 0; i < n; ++i) {
      tasks.emplace_back([this, i, body = std::move(bodies[i])] { thread_main(i, body); });
    }
    // The caller holds the baton until here. Releasing the first pick's semaphore before its
    // worker starts is fine (the count waits for it); the pool's start semaphores order the setup
    // above before every worker.
    turn_[pick()]->release();
    detail::WorkerPool::instance().run_all(tasks);
    if (error_) std::rethrow_exception(error_);
  }

  /// steps() is the number of scheduling points passed; read it after run() returns.
  [[nodiscard]] std::uint64_t steps() const noexcept { return steps_; }

  /// yield_point() is a scheduling point: the calling thread may be suspended while others run.
  /// A no-op on threads that no schedule manages (e.g. the test's main thread).
  static void yield_point() noexcept {
    if (current_ != nullptr) current_->yield_from(current_index_);
  }

  /// spurious_failure() decides, from the seed, whether a compare_exchange_weak on a managed
  /// thread fails although the value matched (as LL/SC hardware may). Roughly 1 in 8.
  static bool spurious_failure() noexcept {
    return current_ != nullptr && (current_->rng_() & 7u) == 0;
  }

 private:
  // The baton: exactly one managed thread runs between scheduling points, and it alone touches
  // rng_, steps_, finished_, subset_, unfinished_ and error_. Passing the baton is a semaphore
  // release by the holder and an acquire by the next thread, which orders all of that state (and
  // everything the code under test did) for the next holder. One semaphore per thread rather than
  // one condition variable: each hand-over wakes exactly the chosen thread.
  void thread_main(std::size_t index, const std::function<void()>& body) {
    current_ = this;
    current_index_ = index;
    turn_[index]->acquire();
    try {
      body();
    } catch (...) {
      if (!error_) error_ = std::current_exception();
    }
    current_ = nullptr;
    finished_[index] = 1;
    if (--unfinished_ != 0) turn_[pick()]->release();
  }

  void yield_from(std::size_t index) noexcept {
    if (++steps_ > step_budget_) {
      std::fprintf(stderr,
                   "DeterministicSchedule: %llu steps without finishing (seed %llu, policy %s): "
                   "livelock in the code under test\n",
                   static_cast<unsigned long long>(step_budget_),
                   static_cast<unsigned long long>(seed_),
                   policy_ == SchedulePolicy::uniform ? "uniform" : "subset");
      std::abort();
    }
    const std::size_t next = pick();
    if (next == index) return;
    turn_[next]->release();
    turn_[index]->acquire();
  }

  // Picks an unfinished thread per the policy. Precondition: unfinished_ > 0.
  std::size_t pick() {
    std::vector<std::size_t>& candidates = scratch_;  // a member: no allocation per step
    candidates.clear();
    for (std::size_t i = 0; i < finished_.size(); ++i) {
      if (finished_[i] == 0) candidates.push_back(i);
    }
    if (policy_ == SchedulePolicy::subset) {
      const bool stale = subset_.empty() || steps_ % 64 == 0 ||
                         std::any_of(subset_.begin(), subset_.end(),
                                     [&](std::size_t i) { return finished_[i] != 0; });
      if (stale) {
        std::shuffle(candidates.begin(), candidates.end(), rng_);
        subset_.assign(candidates.begin(),
                       candidates.begin() + static_cast<std::ptrdiff_t>(
                                                std::min<std::size_t>(2, candidates.size())));
      }
      candidates.assign(subset_.begin(), subset_.end());
    }
    return candidates[std::uniform_int_distribution<std::size_t>(0, candidates.size() - 1)(rng_)];
  }

  // Which schedule manages the calling thread, and as which index; set in thread_main.
  static inline thread_local DeterministicSchedule* current_ = nullptr;
  static inline thread_local std::size_t current_index_ = 0;

  const std::uint64_t seed_;
  std::mt19937_64 rng_;
  const SchedulePolicy policy_;
  const std::uint64_t step_budget_;
  std::uint64_t steps_ = 0;
  std::vector<char> finished_;  // char, not vector<bool>: no shared words between elements
  std::vector<std::size_t> subset_;
  std::vector<std::size_t> scratch_;
  std::size_t unfinished_ = 0;
  std::exception_ptr error_;
  std::vector<std::unique_ptr<std::counting_semaphore<>>> turn_;  // one per thread: wake only it
};

/// DeterministicAtomic<T> is std::atomic<T>'s interface (the part rail's lock-free types use)
/// with a scheduling point before every operation. Memory orders are forwarded unchanged.
template <class T>
class DeterministicAtomic {
 public:
  DeterministicAtomic() noexcept = default;  // value-initialised, like C++20 std::atomic
  constexpr DeterministicAtomic(T desired) noexcept : value_(desired) {}  // NOLINT: as std::atomic
  DeterministicAtomic(const DeterministicAtomic&) = delete;
  DeterministicAtomic& operator=(const DeterministicAtomic&) = delete;

  T load(std::memory_order order = std::memory_order_seq_cst) const noexcept {
    DeterministicSchedule::yield_point();
    return value_.load(order);
  }
  void store(T desired, std::memory_order order = std::memory_order_seq_cst) noexcept {
    DeterministicSchedule::yield_point();
    value_.store(desired, order);
  }
  T exchange(T desired, std::memory_order order = std::memory_order_seq_cst) noexcept {
    DeterministicSchedule::yield_point();
    return value_.exchange(desired, order);
  }
  T fetch_add(T arg, std::memory_order order = std::memory_order_seq_cst) noexcept {
    DeterministicSchedule::yield_point();
    return value_.fetch_add(arg, order);
  }
  T fetch_sub(T arg, std::memory_order order = std::memory_order_seq_cst) noexcept {
    DeterministicSchedule::yield_point();
    return value_.fetch_sub(arg, order);
  }
  T fetch_or(T arg, std::memory_order order = std::memory_order_seq_cst) noexcept {
    DeterministicSchedule::yield_point();
    return value_.fetch_or(arg, order);
  }
  T fetch_and(T arg, std::memory_order order = std::memory_order_seq_cst) noexcept {
    DeterministicSchedule::yield_point();
    return value_.fetch_and(arg, order);
  }
  bool compare_exchange_strong(T& expected, T desired, std::memory_order success,
                               std::memory_order failure) noexcept {
    DeterministicSchedule::yield_point();
    return value_.compare_exchange_strong(expected, desired, success, failure);
  }
  bool compare_exchange_strong(T& expected, T desired,
                               std::memory_order order = std::memory_order_seq_cst) noexcept {
    return compare_exchange_strong(expected, desired, order, failure_order(order));
  }
  bool compare_exchange_weak(T& expected, T desired, std::memory_order success,
                             std::memory_order failure) noexcept {
    DeterministicSchedule::yield_point();
    if (DeterministicSchedule::spurious_failure()) {
      // A spurious failure still reports the current value, as hardware CAS does.
      expected = value_.load(failure);
      return false;
    }
    // Strong underneath: real spurious failures would make the run depend on the hardware.
    return value_.compare_exchange_strong(expected, desired, success, failure);
  }
  bool compare_exchange_weak(T& expected, T desired,
                             std::memory_order order = std::memory_order_seq_cst) noexcept {
    return compare_exchange_weak(expected, desired, order, failure_order(order));
  }

 private:
  // The failure order std::atomic derives from a single order argument.
  static constexpr std::memory_order failure_order(std::memory_order order) noexcept {
    if (order == std::memory_order_acq_rel) return std::memory_order_acquire;
    if (order == std::memory_order_release) return std::memory_order_relaxed;
    return order;
  }

  std::atomic<T> value_{};
};

}  // namespace rail::test
