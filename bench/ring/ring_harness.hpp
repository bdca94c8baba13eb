// bench_ring's shared harness: moves a fixed number of uint64 items through one queue from P
// producer threads to C consumer threads and reports items/s. Every contender (rail_ring.cpp,
// moodycamel.cpp, boost_lockfree.cpp, mutex_deque.cpp) runs through this one function, so the
// work around the queue is identical and only the queue differs.
//
// What is measured: wall-clock time (UseRealTime) for kItemsPerIteration items to go from the
// producers into the queue and out to the consumers; items_per_second = items / wall time. The
// process CPU time is reported alongside (MeasureProcessCPUTime), which shows how much of it was
// spinning on a full or empty queue.
//
// Why it is like-for-like:
//   * Same items, split evenly over the producers (producer p pushes p*n+1 .. (p+1)*n), same
//     capacity for the bounded queues (kCapacity), same retry policy on full/empty for everyone
//     (Backoff: 64 pauses, then yield), same consumer bookkeeping.
//   * Threads are created once per benchmark run, outside the timed loop, and a blocking
//     rendezvous starts and ends every iteration, so thread start-up is never timed and every
//     iteration starts from an empty queue. One untimed warm-up iteration runs first, so
//     allocations a contender makes while growing (moodycamel's blocks) are not charged to the
//     timed ones.
//   * Conservation is checked on every iteration: the consumers' count, sum and sum of squares of
//     the values must equal the producers'. A queue that loses or duplicates items is reported as
//     an error (SkipWithError), not as a fast result.
//   * A queue that loses items, or livelocks inside its own push/pop, cannot hang the suite: the
//     benchmark thread waits for each iteration at most kDeadline. Past it, the run is reported
//     as an error and abandoned: threads that come back see the abort flag and exit, threads
//     stuck inside the queue are detached and demoted to SCHED_IDLE (they cannot be stopped from
//     outside), and the queue is leaked with them. This is not hypothetical: boost::lockfree::queue
//     at 2P2C livelocked inside push/pop once on this machine under a load average of ~11.
//   * The consumers find out that the iteration is over through a shared counter they update
//     every kFlushEvery items and whenever their pop fails, never per item, so the harness adds
//     no shared read-modify-write to the per-item path.
//   * Waiting threads sleep (mutex + condition variable), so the benchmark thread does not take
//     CPU from the workers while an iteration runs. (libstdc++ 12's std::barrier spins in its
//     wait, which on 2 vCPUs costs the workers most of a core.)
//
// Threads and SMT: nothing is pinned by default (2 shared vCPUs; see common/bench_main.hpp,
// RAIL_BENCH_PIN=1 pins). SMT matters here: a producer and a consumer on two hyperthreads of one
// core hand items over through a shared L1/L2 and look several times faster than on two cores,
// where every hand-off is a cross-core cache-line transfer (~70 ns). The JSON context records
// what the kernel reports (rail_smt); a VM reporting "off" may still sit on host hyperthreads.
// With more threads than cores (2P2C, 4P4C here) the figures include preemption: a thread
// descheduled between claiming a slot and publishing it stalls the others, which is exactly the
// behaviour a job scheduler's ready queue must survive, so it is measured, not avoided.
//
// Reading the results on a shared 2-vCPU machine: cpu_time / real_time (process CPU per wall
// second) should be close to 2, meaning both cores worked on the run. Close to 1 means another
// process held a core and the threads were time-sliced on the other; that measures a different
// thing (no cross-core hand-off at all: boost::lockfree looks ~10x faster, rail's 2x2 too), and
// such runs should be discarded. Placement matters at 2x2 and above: when the two threads that
// happen to share a core have the same role, the run behaves like 1x1; when each core holds a
// producer and a consumer, same-role threads contend across cores on every operation. Unpinned
// runs therefore scatter between the two (rail's 2x2 varied 11..47 M/s on a quiet machine);
// RAIL_BENCH_PIN=1 fixes one producer and one consumer per core, the contended case.
#pragma once

#include <benchmark/benchmark.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/bench_main.hpp"

namespace rail_bench::ring {

/// kCapacity is the capacity of every bounded contender (rounded to a power of two by rail).
inline constexpr std::size_t kCapacity = 65536;
/// kItemsPerIteration items move through the queue in each benchmark iteration.
inline constexpr std::uint64_t kItemsPerIteration = std::uint64_t{1} << 20;
/// kDeadline bounds one iteration; only a broken queue (lost items, livelock) reaches it.
inline constexpr std::chrono::seconds kDeadline{60};
/// kMaxBatch bounds Contender::kBatch (the harness keeps one batch buffer on the stack).
inline constexpr std::size_t kMaxBatch = 64;
/// Consumers publish their count to the shared counter at least this often (in items).
inline constexpr std::uint64_t kFlushEvery = 1024;

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/// Backoff is the one retry policy every contender gets on full/empty: a short spin (an item is
/// usually a hand-off away), then yield (on 2 cores with more threads than cores, the thread we
/// wait for needs our core).
class Backoff {
 public:
  void wait() noexcept {
    if (spins_ < kSpins) {
      ++spins_;
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
  void reset() noexcept { spins_ = 0; }

 private:
  static constexpr unsigned kSpins = 64;
  unsigned spins_ = 0;
};

/// Rendezvous is a reusable barrier for `parties` threads that sleeps while it waits, can time out
/// (for the benchmark thread's watchdog) and can be abandoned (every wait then returns false).
class Rendezvous {
 public:
  explicit Rendezvous(unsigned parties) : parties_(parties) {}

  /// arrive_and_wait() blocks until all parties have arrived; false when abandoned.
  bool arrive_and_wait() { return arrive(std::nullopt); }

  /// arrive_and_wait_for(timeout) is arrive_and_wait() giving up after timeout (returns false).
  /// After a timeout the rendezvous is unusable; the caller abandons it.
  bool arrive_and_wait_for(std::chrono::nanoseconds timeout) { return arrive(timeout); }

  /// abandon() releases every waiter, now and later, with false.
  void abandon() {
    const std::lock_guard lock(mutex_);
    abandoned_ = true;
    changed_.notify_all();
  }

 private:
  bool arrive(std::optional<std::chrono::nanoseconds> timeout) {
    std::unique_lock lock(mutex_);
    if (abandoned_) return false;
    const std::uint64_t generation = generation_;
    if (++arrived_ == parties_) {
      arrived_ = 0;
      ++generation_;
      changed_.notify_all();
      return true;
    }
    auto released = [&] { return generation_ != generation || abandoned_; };
    if (!timeout) {
      changed_.wait(lock, released);
    } else if (!changed_.wait_for(lock, *timeout, released)) {
      return false;
    }
    return !abandoned_;
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  const unsigned parties_;
  unsigned arrived_ = 0;
  std::uint64_t generation_ = 0;
  bool abandoned_ = false;
};

// A Contender wraps one queue behind this interface (see rail_ring.cpp for the smallest one):
//
//   static constexpr std::size_t kBatch;       values per push/pop call; 1 = the per-item API
//   explicit Contender(std::size_t capacity);  capacity applies to bounded queues only
//   Producer make_producer();                  per-thread handle: a token, or an empty struct
//   Consumer make_consumer();
//   std::size_t push(Producer&, const std::uint64_t* values, std::size_t n) noexcept;
//       pushes a prefix of values[0..n) and returns its length, 0 when full (n <= kBatch)
//   std::size_t pop(Consumer&, std::uint64_t* out, std::size_t max) noexcept;
//       pops up to max values and returns how many, 0 when empty (max == kBatch)

struct alignas(64) ConsumerTally {
  std::uint64_t count = 0;
  std::uint64_t sum = 0;
  std::uint64_t sum_sq = 0;  // wraps mod 2^64, on both sides of the comparison
};

struct alignas(64) SharedCounter {
  std::atomic<std::uint64_t> value{0};
};

template <class Contender>
void produce(Contender& queue, typename Contender::Producer& handle, std::uint64_t first,
             std::uint64_t end, const std::atomic<bool>& abort) {
  std::uint64_t values[Contender::kBatch];
  Backoff backoff;
  std::uint64_t next = first;
  while (next < end) {
    const std::size_t n =
        static_cast<std::size_t>(std::min<std::uint64_t>(Contender::kBatch, end - next));
    for (std::size_t i = 0; i < n; ++i)
      values[i] = next + i;
    const std::size_t pushed = queue.push(handle, values, n);
    if (pushed == 0) {
      // Relaxed: a stop hint; nothing is read on the strength of it.
      if (abort.load(std::memory_order_relaxed)) return;
      backoff.wait();
      continue;
    }
    backoff.reset();
    next += pushed;
  }
}

template <class Contender>
ConsumerTally consume(Contender& queue, typename Contender::Consumer& handle, std::uint64_t total,
                      SharedCounter& consumed, const std::atomic<bool>& abort) {
  std::uint64_t values[Contender::kBatch];
  ConsumerTally tally;
  Backoff backoff;
  std::uint64_t unflushed = 0;
  for (;;) {
    const std::size_t popped = queue.pop(handle, values, Contender::kBatch);
    if (popped != 0) {
      for (std::size_t i = 0; i < popped; ++i) {
        tally.sum += values[i];
        tally.sum_sq += values[i] * values[i];
      }
      tally.count += popped;
      unflushed += popped;
      if (unflushed >= kFlushEvery) {
        // Relaxed: a progress count; the end-of-iteration barrier orders the tallies.
        consumed.value.fetch_add(unflushed, std::memory_order_relaxed);
        unflushed = 0;
      }
      backoff.reset();
      continue;
    }
    if (unflushed != 0) {
      consumed.value.fetch_add(unflushed, std::memory_order_relaxed);
      unflushed = 0;
    }
    if (consumed.value.load(std::memory_order_relaxed) >= total) break;
    // Relaxed: a stop hint, as in produce().
    if (abort.load(std::memory_order_relaxed)) break;
    backoff.wait();
  }
  return tally;
}

/// Everything the worker threads share, on the heap and owned jointly by them and the benchmark
/// thread, so that a run abandoned with threads stuck inside the queue can leak it safely.
template <class Contender>
struct RunState {
  RunState(unsigned producers, unsigned consumers)
      : queue(kCapacity), sync(producers + consumers + 1), tallies(consumers) {}
  Contender queue;
  Rendezvous sync;
  std::atomic<bool> abort{false};
  SharedCounter consumed;
  std::vector<ConsumerTally> tallies;
};

/// run<Contender>(state, producers, consumers) is the body of BM_Ring/<contender>/<P>x<C>.
template <class Contender>
void run(benchmark::State& state, unsigned producers, unsigned consumers) {
  static_assert(Contender::kBatch >= 1 && Contender::kBatch <= kMaxBatch,
                "ring harness: a contender's batch must be 1..kMaxBatch values");
  const std::uint64_t per_producer = kItemsPerIteration / producers;
  const std::uint64_t total = per_producer * producers;
  std::uint64_t expected_sum = 0;
  std::uint64_t expected_sum_sq = 0;
  for (std::uint64_t v = 1; v <= total; ++v) {
    expected_sum += v;
    expected_sum_sq += v * v;
  }

  const auto shared = std::make_shared<RunState<Contender>>(producers, consumers);
  std::vector<std::thread> threads;
  threads.reserve(producers + consumers);
  for (unsigned p = 0; p < producers; ++p) {
    threads.emplace_back([shared, p, per_producer] {
      pin_thread(p);
      auto handle = shared->queue.make_producer();
      // Each iteration: start rendezvous, work, end rendezvous. false: stop, or abandoned.
      while (shared->sync.arrive_and_wait()) {
        produce(shared->queue, handle, p * per_producer + 1, (p + 1) * per_producer + 1,
                shared->abort);
        if (!shared->sync.arrive_and_wait()) return;
      }
    });
  }
  for (unsigned c = 0; c < consumers; ++c) {
    threads.emplace_back([shared, c, total, producers] {
      pin_thread(producers + c);
      auto handle = shared->queue.make_consumer();
      while (shared->sync.arrive_and_wait()) {
        shared->tallies[c] = consume(shared->queue, handle, total, shared->consumed, shared->abort);
        if (!shared->sync.arrive_and_wait()) return;
      }
    });
  }

  // One iteration: nullptr when every item arrived exactly once, or what went wrong.
  const auto iterate = [&]() -> const char* {
    // Written before the start rendezvous, whose mutex orders it before every worker's reads.
    shared->consumed.value.store(0, std::memory_order_relaxed);
    shared->sync.arrive_and_wait();
    if (!shared->sync.arrive_and_wait_for(kDeadline)) {
      return "iteration took longer than kDeadline: the queue lost items or livelocked (run "
             "abandoned; threads stuck inside the queue were detached at SCHED_IDLE)";
    }
    // The end rendezvous orders every consumer's tally before these reads.
    ConsumerTally sum;
    for (const ConsumerTally& t : shared->tallies) {
      sum.count += t.count;
      sum.sum += t.sum;
      sum.sum_sq += t.sum_sq;
    }
    if (sum.count != total || sum.sum != expected_sum || sum.sum_sq != expected_sum_sq) {
      return "conservation check failed: items lost or duplicated";
    }
    return nullptr;
  };

  // Untimed warm-up: moodycamel allocates its blocks, the deque its nodes, and every thread has
  // run once, so the timed iterations measure the steady state.
  const char* error = iterate();
  if (error != nullptr) state.SkipWithError(error);
  for (auto _ : state) {
    error = iterate();
    if (error != nullptr) {
      state.SkipWithError(error);
      break;
    }
  }

  if (error == nullptr) {
    shared->sync.abandon();  // the normal stop: every worker is at its start rendezvous
    for (std::thread& t : threads)
      t.join();
  } else {
    // Threads that return see abort or the abandoned rendezvous and exit; threads stuck inside
    // the queue never will. Demote them all so a livelocked queue only burns idle time, and let
    // them go: `shared` lives on as long as any of them.
    shared->abort.store(true, std::memory_order_relaxed);
    shared->sync.abandon();
    for (std::thread& t : threads) {
      const sched_param idle{};
      pthread_setschedparam(t.native_handle(), SCHED_IDLE, &idle);
      t.detach();
    }
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * total));
  state.counters["producers"] = producers;
  state.counters["consumers"] = consumers;
}

/// register_contender<Contender>(name) adds BM_Ring/<name>/<P>x<C> for 1x1, 2x2 and 4x4.
template <class Contender>
void register_contender(const std::string& name) {
  static constexpr unsigned kConfigs[][2] = {{1, 1}, {2, 2}, {4, 4}};
  for (const auto& config : kConfigs) {
    const unsigned producers = config[0];
    const unsigned consumers = config[1];
    const std::string full =
        "BM_Ring/" + name + "/" + std::to_string(producers) + "x" + std::to_string(consumers);
    benchmark::RegisterBenchmark(full.c_str(),
                                 [producers, consumers](benchmark::State& state) {
                                   run<Contender>(state, producers, consumers);
                                 })
        ->UseRealTime()
        ->MeasureProcessCPUTime()
        ->Unit(benchmark::kMillisecond);
  }
}

// One registration function per contender file, called in this order by main.cpp.
void register_rail();
void register_moodycamel();
void register_boost_lockfree();
void register_mutex_deque();

}  // namespace rail_bench::ring
