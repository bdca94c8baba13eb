// bench_dedup's shared workload: check-and-insert of dedup ids with a TTL, at 1 and 2 threads,
// through one shared set. Three contenders run it: rail_dedup_set.cpp, and two baselines,
// mutex_unordered_map.cpp (sweeps when full) and mutex_unordered_map_fifo.cpp (a FIFO of expiries).
// Benchmarks are BM_Dedup/<contender>/live:<n>, n being the number of live ids: 98304 (tables
// far larger than the caches, as a busy dedup window is) and 6144 (everything cache-resident).
//
// Workload. A universe of 8n ids "order-<k>-email", formatted once up front so formatting is not
// timed, split evenly between the threads (disjoint: two producers add different jobs). Each
// thread walks its ids in groups of four claims: three new ids, then the second of them again (a
// resubmitted job), so 3/4 of the claims insert and 1/4 are duplicates of a live id. The TTL keeps
// an id live for 8n/6 claims, so about n ids are live at any time, and a thread's ids come back
// only after a whole lap of its 8n/T ids, long after they expired and were physically removed:
// every new-id claim is a fresh id to both sets, which therefore must reclaim expired entries and
// reuse their space all the time (the universe is 4x each set's capacity, so neither can keep
// every id it ever saw). That is the TTL path the issue asks for. The set is pre-filled with one
// full lap, untimed, so the timed claims all run in that steady state.
//
// Time is logical, so both contenders see the same clock whatever their speed: each thread
// advances one tick per claim and catches up with a shared clock that threads publish to every
// kPublishEvery claims (a relaxed load per claim, of a line written every 64 claims; no
// read-modify-write). Ticks thus count claims per thread, the TTL is 8n / (6 * threads) ticks,
// and a thread's own id comes back at least one lap of ticks later (expired), its duplicate two
// claims later (live). The pre-fill interleaves the threads' laps the same way.
//
// Correctness check, so a set that answers wrongly cannot win: every claim's result is compared
// with the expected one (inserted or duplicate) and mismatches are counted (`wrong`, of which
// `full` answers are also counted apart). At 1 thread the expected answers are exact and any
// mismatch is an error. At 2 threads preemption causes legitimate ones: a thread preempted between
// inserting an id and re-claiming it, for longer than a TTL of the other thread's claims, finds it
// expired; a thread preempted between reading the clock and claiming claims at a stale time, at
// which more ids are live than the capacity holds, and gets `full`. A real caller reading a real
// clock sees the same. So up to 1 in 1000 mismatches is tolerated and reported; more is an error.
//
// Why it is like-for-like: same ids in the same order, same clock, same TTL, same owner values,
// same capacity (2n keys), both sets allocated before timing, and both reclaim expired entries
// lazily plus a sweep when full. Throughput is wall-clock (UseRealTime) over all threads:
// items_per_second counts every thread's claims, so ns per claim = 1e9 / items_per_second is the
// aggregate cost. Nothing is pinned (see common/bench_main.hpp). SMT matters at 2 threads the way
// it does for any shared lock or cache line: siblings of one core share it through L1, separate
// cores through a ~70 ns cross-core transfer.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace rail_bench::dedup {

/// kLiveSizes are the benchmarked numbers of live ids (the `live:` argument); each is a multiple
/// of 3 * kMaxThreads / 8 so every thread gets whole groups of three ids.
inline constexpr std::size_t kLiveSizes[] = {98304, 6144};
/// kUniversePerLive: the id universe is this many times the live set (see the workload).
inline constexpr std::size_t kUniversePerLive = 8;
/// kMaxKeyBytes bounds an id ("order-786431-email" is 18 bytes).
inline constexpr std::size_t kMaxKeyBytes = 32;
/// A thread publishes its tick to the shared clock every kPublishEvery claims.
inline constexpr unsigned kPublishEvery = 64;
/// A thread's lap (4/3 * universe / threads ticks) must outlast the TTL (universe / 6 ticks).
inline constexpr int kMaxThreads = 8;

enum class Outcome { inserted, duplicate, full };

// A Contender implements:
//   explicit Contender(std::size_t capacity);   all storage allocated here
//   Outcome claim(const std::string& key, std::int64_t now_ns, std::int64_t expires_at_ns,
//                 std::uint64_t owner) noexcept;
//       inserted (key stored with owner and expiry) unless key is live at now_ns (duplicate) or
//       the set is full of live keys (full)

/// keys() is every id of the largest universe, formatted once; smaller universes use a prefix.
inline const std::vector<std::string>& keys() {
  static const std::vector<std::string> values = [] {
    std::size_t universe = 0;
    for (const std::size_t live : kLiveSizes)
      universe = std::max(universe, live * kUniversePerLive);
    std::vector<std::string> v;
    v.reserve(universe);
    for (std::size_t n = 0; n < universe; ++n)
      v.push_back("order-" + std::to_string(n) + "-email");
    return v;
  }();
  return values;
}

/// lap(universe, thread, threads) is one thread's sequence of claims: for each group of three of
/// its ids a, b, c, the claims a, b, c, b.
inline std::vector<const std::string*> lap(std::size_t universe, int thread, int threads) {
  const std::vector<std::string>& all = keys();
  const std::size_t per_thread = universe / static_cast<std::size_t>(threads);
  const std::size_t base = per_thread * static_cast<std::size_t>(thread);
  std::vector<const std::string*> sequence;
  sequence.reserve(per_thread / 3 * 4);
  for (std::size_t g = base; g < base + per_thread; g += 3) {
    sequence.push_back(&all[g]);
    sequence.push_back(&all[g + 1]);
    sequence.push_back(&all[g + 2]);
    sequence.push_back(&all[g + 1]);
  }
  return sequence;
}

struct alignas(64) SharedClock {
  std::atomic<std::int64_t> now{0};
};

/// ClockReader gives one thread its next tick: one past its previous tick, or the shared clock's
/// time when another thread has published a later one (after this thread was preempted, say).
class ClockReader {
 public:
  explicit ClockReader(SharedClock& clock) noexcept : clock_(clock) {}
  std::int64_t tick() noexcept {
    // Relaxed: the clock only has to be monotonic per thread and roughly shared; the sets' own
    // synchronisation orders their entries. A store may briefly move the shared time back by less
    // than kPublishEvery ticks (two threads publishing at once); each thread's own time never does.
    now_ = std::max(now_ + 1, clock_.now.load(std::memory_order_relaxed));
    if (++unpublished_ == kPublishEvery) {
      unpublished_ = 0;
      clock_.now.store(now_, std::memory_order_relaxed);
    }
    return now_;
  }

 private:
  SharedClock& clock_;
  std::int64_t now_ = 0;
  unsigned unpublished_ = 0;
};

template <class Contender>
struct Shared {
  std::unique_ptr<Contender> set;
  SharedClock clock;
  std::vector<std::vector<const std::string*>> laps;
  std::int64_t ttl = 0;
};

/// run<Contender>(state) is the body of BM_Dedup/<contender> at state.threads() threads.
template <class Contender>
void run(benchmark::State& state) {
  static Shared<Contender> shared;  // one per contender; rebuilt by thread 0 for every run
  const int threads = state.threads();
  const int thread = state.thread_index();
  const auto live = static_cast<std::size_t>(state.range(0));
  const std::size_t universe = live * kUniversePerLive;
  if (threads > kMaxThreads || universe % (3 * static_cast<std::size_t>(threads)) != 0) {
    state.SkipWithError("bench_dedup: too many threads, or ids do not split into whole groups");
    for (auto _ : state) {
    }
    return;
  }
  if (thread == 0) {
    shared.set = std::make_unique<Contender>(2 * live);
    shared.clock.now.store(0, std::memory_order_relaxed);
    shared.laps.clear();
    for (int t = 0; t < threads; ++t)
      shared.laps.push_back(lap(universe, t, threads));
    shared.ttl = static_cast<std::int64_t>(universe / (6 * static_cast<std::size_t>(threads)));
    // Pre-fill: one lap per thread, untimed and interleaved as if the threads ran side by side,
    // so the timed claims start in steady state.
    std::uint64_t owner = 0;
    const std::size_t lap_length = shared.laps[0].size();
    for (std::size_t i = 0; i < lap_length; ++i) {
      const auto now = static_cast<std::int64_t>(i);
      for (const auto& sequence : shared.laps)
        (void)shared.set->claim(*sequence[i], now, now + shared.ttl, ++owner);
    }
    shared.clock.now.store(static_cast<std::int64_t>(lap_length), std::memory_order_relaxed);
  }
  // Google Benchmark's start barrier (entering the loop) orders thread 0's setup before every
  // thread's first iteration, and its stop barrier (leaving it) orders every thread's last
  // iteration before thread 0's teardown.
  ClockReader clock(shared.clock);
  std::size_t position = 0;
  std::uint64_t owner = (std::uint64_t{1} << 40) * static_cast<std::uint64_t>(thread + 1);
  std::int64_t wrong = 0;
  std::int64_t full = 0;
  for (auto _ : state) {
    // Looked up inside the loop: before the first iteration (the start barrier) thread 0 may
    // still be building the laps.
    const std::vector<const std::string*>& sequence = shared.laps[static_cast<std::size_t>(thread)];
    const std::int64_t now = clock.tick();
    const Outcome expected = position % 4 == 3 ? Outcome::duplicate : Outcome::inserted;
    const Outcome got = shared.set->claim(*sequence[position], now, now + shared.ttl, ++owner);
    wrong += got != expected ? 1 : 0;
    full += got == Outcome::full ? 1 : 0;
    if (++position == sequence.size()) position = 0;
  }
  const auto ops = static_cast<std::int64_t>(state.iterations());
  state.SetItemsProcessed(ops);
  state.counters["wrong"] = static_cast<double>(wrong);  // summed over threads
  state.counters["full"] = static_cast<double>(full);    // included in wrong
  if ((threads == 1 && wrong != 0) || wrong * 1000 > ops) {
    state.SkipWithError("claims answered wrongly (see the correctness check in dedup_harness.hpp)");
  }
  if (thread == 0) shared.set.reset();
}

/// register_contender<Contender>(name) adds BM_Dedup/<name>/live:<n> at 1 and 2 threads.
template <class Contender>
void register_contender(const std::string& name) {
  auto* family = benchmark::RegisterBenchmark(("BM_Dedup/" + name).c_str(), &run<Contender>);
  family->ArgName("live");
  for (const std::size_t live : kLiveSizes)
    family->Arg(static_cast<std::int64_t>(live));
  family->Threads(1)->Threads(2)->UseRealTime();
}

// One registration function per contender file, called in this order by main.cpp.
void register_rail_dedup_set();
void register_mutex_unordered_map();
void register_mutex_unordered_map_fifo();

}  // namespace rail_bench::dedup
