// bench_timers' shared workload: 1M one-shot timers with deadlines spread uniformly over
// [1 ms, 10 s] (fixed seed), a 1 ms tick, and time advanced in 1 ms steps up to 10 s. Two
// contenders run it through the same four benchmark bodies below (rail_wheel.cpp, binary_heap.cpp):
//
//   BM_Timers/schedule/<c>                    schedule all 1M                 items = 1M schedules
//   BM_Timers/cancel_half/<c>                 cancel the even ids (500k)      items = 500k cancels
//                                             of 1M scheduled (untimed)
//   BM_Timers/expire/<c>                      advance 0 -> 10 s in 1 ms steps items = 1M timers
//                                             firing all 1M (untimed schedule)
//   BM_Timers/schedule_cancel_half_expire/<c> schedule 1M + cancel the even   items = 1M timers
//                                             ids + advance to 10 s (fires the odd half)
//
// ns per op = 1e9 / items_per_second (also shown directly as the `op_time` counter, in seconds).
// The last one is the "schedule + expire of 1M timers with half of them cancelled": a
// timer's whole life, where a heap pays for its cheap tombstone cancel at expiry.
//
// Why it is like-for-like: both contenders get the same deadlines in the same order, ids 0..N-1
// as their payload, storage reserved before the timed region (the wheel's intrusive nodes in one
// array, the heap's vector reserved to N), and the same expiry callback (count the fired ids and
// sum them). Each iteration starts from a fresh structure built while the timer is paused. Every
// expiring benchmark checks that exactly the right ids fired (count and sum) and reports an error
// otherwise, so a structure that drops timers cannot win.
//
// Time is the benchmark thread's CPU time (Google Benchmark's default), since this is one thread
// on a shared machine; SMT does not matter beyond the noise a busy sibling adds.
#pragma once

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace rail_bench::timers {

inline constexpr std::size_t kTimers = 1'000'000;
inline constexpr std::int64_t kMs = 1'000'000;  // ns
inline constexpr std::int64_t kTickNs = kMs;
inline constexpr std::int64_t kMinDeadline = 1 * kMs;
inline constexpr std::int64_t kHorizon = 10'000 * kMs;  // 10 s: the latest deadline
inline constexpr std::int64_t kStep = kMs;              // advance() granularity

/// deadlines() is the fixed workload: kTimers deadlines uniform in [kMinDeadline, kHorizon] ns,
/// in schedule order (timer id i gets deadlines()[i]). Time starts at 0.
inline const std::vector<std::int64_t>& deadlines() {
  static const std::vector<std::int64_t> values = [] {
    std::mt19937_64 random(20240604);
    std::uniform_int_distribution<std::int64_t> spread(kMinDeadline, kHorizon);
    std::vector<std::int64_t> v(kTimers);
    for (std::int64_t& d : v)
      d = spread(random);
    return v;
  }();
  return values;
}

/// Fired is what the expiry callback accumulates, for the check.
struct Fired {
  std::uint64_t count = 0;
  std::uint64_t id_sum = 0;
  void add(std::uint64_t id) noexcept {
    ++count;
    id_sum += id;
  }
};

// A Contender implements:
//   explicit Contender(std::size_t timers);   storage for `timers` ids, allocated here
//   void reset();                              empty structure, time 0 (untimed)
//   void schedule(std::uint32_t id, std::int64_t deadline_ns) noexcept;
//   void cancel(std::uint32_t id) noexcept;    id is scheduled and has not fired
//   void advance(std::int64_t now_ns, Fired& fired) noexcept;   fires every live deadline <= now

template <class Contender>
void schedule_all(Contender& timers) {
  const std::vector<std::int64_t>& d = deadlines();
  for (std::uint32_t id = 0; id < kTimers; ++id)
    timers.schedule(id, d[id]);
}

template <class Contender>
void cancel_even(Contender& timers) {
  for (std::uint32_t id = 0; id < kTimers; id += 2)
    timers.cancel(id);
}

template <class Contender>
void expire_all(Contender& timers, Fired& fired) {
  for (std::int64_t now = kStep; now <= kHorizon; now += kStep)
    timers.advance(now, fired);
}

inline void set_rate(benchmark::State& state, std::size_t ops_per_iteration) {
  const auto ops =
      static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(ops_per_iteration);
  state.SetItemsProcessed(ops);
  state.counters["op_time"] = benchmark::Counter(
      static_cast<double>(ops), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

inline bool check(benchmark::State& state, const Fired& fired, bool half_cancelled) {
  std::uint64_t count = 0;
  std::uint64_t sum = 0;
  for (std::uint64_t id = half_cancelled ? 1 : 0; id < kTimers; id += half_cancelled ? 2 : 1) {
    ++count;
    sum += id;
  }
  if (fired.count == count && fired.id_sum == sum) return true;
  state.SkipWithError("wrong timers fired: the count or the id sum differs from the live set");
  return false;
}

/// warm_up(timers) runs one untimed schedule pass, so the deadlines, the contender's storage and
/// the heap's reserved vector are paged in and cached as in steady state: otherwise the first
/// iteration of each run pays ~10k page faults, and a short run reports mostly those.
template <class Contender>
void warm_up(Contender& timers) {
  timers.reset();
  schedule_all(timers);
}

template <class Contender>
void bm_schedule(benchmark::State& state) {
  Contender timers(kTimers);
  warm_up(timers);
  for (auto _ : state) {
    state.PauseTiming();
    timers.reset();
    state.ResumeTiming();
    schedule_all(timers);
  }
  set_rate(state, kTimers);
}

template <class Contender>
void bm_cancel_half(benchmark::State& state) {
  Contender timers(kTimers);
  warm_up(timers);
  for (auto _ : state) {
    state.PauseTiming();
    timers.reset();
    schedule_all(timers);
    state.ResumeTiming();
    cancel_even(timers);
  }
  set_rate(state, kTimers / 2);
}

template <class Contender>
void bm_expire(benchmark::State& state) {
  Contender timers(kTimers);
  warm_up(timers);
  for (auto _ : state) {
    state.PauseTiming();
    timers.reset();
    schedule_all(timers);
    Fired fired;
    state.ResumeTiming();
    expire_all(timers, fired);
    if (!check(state, fired, false)) break;
  }
  set_rate(state, kTimers);
}

template <class Contender>
void bm_schedule_cancel_half_expire(benchmark::State& state) {
  Contender timers(kTimers);
  warm_up(timers);
  for (auto _ : state) {
    state.PauseTiming();
    timers.reset();
    Fired fired;
    state.ResumeTiming();
    schedule_all(timers);
    cancel_even(timers);
    expire_all(timers, fired);
    if (!check(state, fired, true)) break;
  }
  set_rate(state, kTimers);
}

/// register_contender<Contender>(name) adds the four BM_Timers/<op>/<name> benchmarks.
template <class Contender>
void register_contender(const std::string& name) {
  const auto add = [&name](const std::string& op, void (*body)(benchmark::State&)) {
    benchmark::RegisterBenchmark(("BM_Timers/" + op + "/" + name).c_str(), body)
        ->Unit(benchmark::kMillisecond);
  };
  add("schedule", &bm_schedule<Contender>);
  add("cancel_half", &bm_cancel_half<Contender>);
  add("expire", &bm_expire<Contender>);
  add("schedule_cancel_half_expire", &bm_schedule_cancel_half_expire<Contender>);
}

// One registration function per contender file, called in this order by main.cpp.
void register_rail_wheel();
void register_binary_heap();

}  // namespace rail_bench::timers
