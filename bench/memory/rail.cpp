// rail's contender in the memory workloads.
//
// Bytes per waiting job: an Engine is built first (its wheel, name table and timer thread are a
// per-engine constant, reported as engine_fixed_bytes), then a queue<uint64_t> of capacity C is
// declared (rail preallocates every slot and ring cell here: declare_bytes_per_slot) and filled
// with C jobs (fill_bytes_per_job: what adding them allocates on top). `+dedup` gives every job a
// unique dedup id (the window is built on the first such add).
//
// Bytes per FIFO group: see rail_bytes_per_group. Bytes per flow edge: see rail_bytes_per_edge.
//
// Allocations per job: a queue of capacity 65,536 drained by 2 workers (`add+group`: each job in
// one of 1,024 FIFO groups; `add+tenant`: one of 16 tenants, tenant_window 64, on 4 priority
// levels round robin, so the backlog parks in ranked tenant lines). Before the workers start,
// every slot is filled once with a job that fails its first attempt (and carries a dedup id in the
// dedup variant), so each slot's lazily created error log and dedup key exist — the state a
// long-running queue reaches; then 2 x capacity warm-up jobs; then the measured --jobs=N.
#include <array>
#include <atomic>
#include <charconv>
#include <chrono>
#include <rail/rail.hpp>
#include <string>
#include <thread>

#include "engine/completion_latch.hpp"
#include "memory/workload.hpp"

namespace bench {
namespace {

enum class Variant { plain, bulk, failures, dedup, events, groups, tenants };

/// set_dedup_id(o, seq): a unique id without allocating (it fits the small-string buffer).
void set_dedup_id(rail::JobOptions& o, std::uint64_t seq) {
  char buf[24] = {'j'};
  auto r = std::to_chars(buf + 1, buf + sizeof(buf), seq);
  o.dedup.id.assign(buf, static_cast<std::size_t>(r.ptr - buf));
}

/// set_key(key, prefix, n): a group or tenant named `prefix` + n, without allocating (it fits
/// the small-string buffer).
void set_key(std::string& key, char prefix, std::uint64_t n) {
  char buf[24] = {prefix};
  auto r = std::to_chars(buf + 1, buf + sizeof(buf), n);
  key.assign(buf, static_cast<std::size_t>(r.ptr - buf));
}

/// set_lines(o, v, seq): job seq's FIFO group (groups) or tenant and priority (tenants).
void set_lines(rail::JobOptions& o, Variant v, std::uint64_t seq) {
  if (v == Variant::groups) set_key(o.group, 'g', seq % 1024);
  if (v == Variant::tenants) {
    set_key(o.tenant, 't', seq % 16);
    o.priority = static_cast<std::uint8_t>(seq % 4);
  }
}

/// Bytes per FIFO group: an inline engine's queue of capacity C takes one grouped job first (the
/// per-queue tables, built on the first grouped add: group_fixed_bytes), then C jobs at a time,
/// each in a group of its own, run to the end: 2^20 groups that once had work. The bytes left
/// after, per group, is bytes_per_idle_group (the goal: none); the bytes while C groups hold a
/// job each, per group, is bytes_per_group_with_work.
void rail_bytes_per_group(benchmark::State& state, const std::string& name) {
  constexpr std::uint32_t kCapacity = 65'536;
  constexpr std::uint64_t kGroups = std::uint64_t{1} << 20;
  for (auto _ : state) {
    rail::Engine engine(rail::EngineOptions{.mode = rail::Mode::inlined});
    auto q =
        engine.declare_queue<std::uint64_t>("groups", rail::QueueOptions{.capacity = kCapacity});
    q.process({}, [](rail::Job<std::uint64_t>&) {});
    const AllocSnapshot declared = snapshot();
    rail::JobOptions o;
    set_key(o.group, 'w', 0);
    if (q.add("warm", std::uint64_t{0}, o).status != rail::AddStatus::added) std::abort();
    engine.run_until_idle();
    const AllocSnapshot before = snapshot();
    const auto t0 = std::chrono::steady_clock::now();
    AllocSnapshot busy{};
    for (std::uint64_t g = 0; g < kGroups;) {
      for (std::uint32_t i = 0; i < kCapacity; ++i, ++g) {
        set_key(o.group, 'c', g);
        if (q.add("job", std::uint64_t{g}, o).status != rail::AddStatus::added) {
          state.SkipWithError("rail add did not return added");
          return;
        }
      }
      if (g == kCapacity) busy = snapshot();
      engine.run_until_idle();
    }
    state.SetIterationTime(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    const AllocSnapshot after = snapshot();
    if (q.counts().groups != 0 || q.counts().completed != kGroups + 1) {
      state.SkipWithError("not every grouped job completed");
      return;
    }
    state.counters["group_fixed_bytes"] =
        static_cast<double>(before.live_bytes - declared.live_bytes);
    state.counters["bytes_per_group_with_work"] =
        static_cast<double>(busy.live_bytes - before.live_bytes) / kCapacity;
    const double idle =
        static_cast<double>(after.live_bytes - before.live_bytes) / static_cast<double>(kGroups);
    state.counters["bytes_per_idle_group"] = idle;
    record_memory_result(name, idle);
    record_memory_result("rail/bytes_per_group_with_work",
                         static_cast<double>(busy.live_bytes - before.live_bytes) / kCapacity);
  }
}

/// Bytes per edge: an inline engine's queue holds kChildren jobs; a parent on another queue then
/// waits for all of them, named by id (JobOptions::after, built before the first snapshot). The
/// parent's add costs bytes_per_live_edge per child (its record's edge, the child's waiter in
/// its queue's tracker and one callback); once every child ended (before the parent runs), what
/// is left per child is bytes_per_ended_edge (its end, kept for Job::children until the parent's
/// slot takes another job). The first add of a parent (not measured) builds nothing per queue.
void rail_bytes_per_edge(benchmark::State& state, const std::string& name) {
  constexpr std::uint32_t kChildren = 65'536;
  for (auto _ : state) {
    rail::Engine engine(rail::EngineOptions{.mode = rail::Mode::inlined});
    auto children =
        engine.declare_queue<std::uint64_t>("children", rail::QueueOptions{.capacity = kChildren});
    auto parents = engine.declare_queue<std::uint64_t>("parents", rail::QueueOptions{});
    children.process({}, [](rail::Job<std::uint64_t>&) {});
    std::uint64_t ran_with = 0;
    parents.process({}, [&](rail::Job<std::uint64_t>& j) { ran_with = j.children().size(); });
    rail::JobOptions o;
    o.after.reserve(kChildren);
    for (std::uint32_t i = 0; i < kChildren; ++i)
      o.after.emplace_back(children.add("child", std::uint64_t{i}).id);
    const AllocSnapshot before = snapshot();
    const auto t0 = std::chrono::steady_clock::now();
    if (parents.add("parent", std::uint64_t{0}, o).status != rail::AddStatus::added) {
      state.SkipWithError("rail add of the parent did not return added");
      return;
    }
    state.SetIterationTime(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    const AllocSnapshot waiting = snapshot();
    parents.pause();  // the children run, the parent (released by the last) waits
    engine.run_until_idle();
    const AllocSnapshot ended = snapshot();
    parents.resume();
    engine.run_until_idle();
    if (ran_with != kChildren || parents.counts().completed != 1) {
      state.SkipWithError("the parent did not run once with every child");
      return;
    }
    const double live = static_cast<double>(waiting.live_bytes - before.live_bytes) / kChildren;
    const double left = static_cast<double>(ended.live_bytes - before.live_bytes) / kChildren;
    state.counters["bytes_per_live_edge"] = live;
    state.counters["bytes_per_ended_edge"] = left;
    record_memory_result(name, live);
    record_memory_result("rail/bytes_per_ended_edge", left);
  }
}

void rail_bytes_per_waiting_job(benchmark::State& state, const std::string& name, bool dedup) {
  const std::size_t capacity = memory_config().capacity;
  for (auto _ : state) {
    const AllocSnapshot empty = snapshot();
    rail::Engine engine;
    const AllocSnapshot before = snapshot();
    auto q = engine.declare_queue<std::uint64_t>(
        "memory", rail::QueueOptions{.capacity = static_cast<std::uint32_t>(capacity)});
    const AllocSnapshot declared = snapshot();
    rail::JobOptions o;
    o.dedup.id.reserve(32);
    const auto t0 = std::chrono::steady_clock::now();
    std::uint64_t waiting = 0;
    rail::AddStatus stopped = rail::AddStatus::added;
    for (; waiting < capacity; ++waiting) {
      if (dedup) set_dedup_id(o, waiting);
      stopped = q.add("waiting", std::uint64_t{waiting}, o).status;
      if (stopped != rail::AddStatus::added) break;
    }
    state.SetIterationTime(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    const AllocSnapshot filled = snapshot();
    if (waiting == 0) {
      state.SkipWithError("rail add accepted no job");
      return;
    }
    // With dedup ids the window (QueueOptions::dedup_capacity, by default the queue's capacity)
    // has room for every job; should an add still stop early (dedup_full), the figures are per
    // job actually waiting, and `filled_fraction` says how far it got.
    state.counters["filled_fraction"] =
        static_cast<double>(waiting) / static_cast<double>(capacity);
    state.counters["stopped_by_dedup_full"] = stopped == rail::AddStatus::dedup_full ? 1 : 0;
    report_bytes(state, before, filled, waiting, sizeof(std::uint64_t));
    // RSS growth too, as a cross-check of the heap figure: rail touches every slot at declaration
    // (value-initialised slots, ring cells), so the two agree when this runs first in a fresh
    // process, as it does by default.
    state.counters["rss_bytes_per_job"] =
        static_cast<double>(filled.rss_bytes - before.rss_bytes) / static_cast<double>(waiting) -
        static_cast<double>(sizeof(std::uint64_t));
    const double c = static_cast<double>(capacity);
    state.counters["declare_bytes_per_slot"] =
        static_cast<double>(declared.live_bytes - before.live_bytes) / c;
    state.counters["fill_bytes_per_job"] =
        static_cast<double>(filled.live_bytes - declared.live_bytes) / static_cast<double>(waiting);
    state.counters["engine_fixed_bytes"] =
        static_cast<double>(before.live_bytes - empty.live_bytes);
    record_memory_result(name, static_cast<double>(filled.live_bytes - before.live_bytes) /
                                       static_cast<double>(waiting) -
                                   static_cast<double>(sizeof(std::uint64_t)));
  }
}

struct Work {
  std::uint64_t seq = 0;
  bool fail_first = false;
};

void rail_allocs_per_job(benchmark::State& state, const std::string& name, Variant v) {
  constexpr std::size_t kCapacity = 65'536;
  const std::uint64_t jobs = memory_config().jobs;
  rail::Engine engine;
  std::atomic<std::uint64_t> events{0};
  if (v == Variant::events)
    engine.on_event(
        [&events](const rail::Event&) { events.fetch_add(1, std::memory_order_relaxed); });
  rail::QueueOptions qo{.capacity = kCapacity};
  if (v == Variant::tenants) {
    qo.priorities = 4;
    qo.tenant_window = 64;
  }
  auto q = engine.declare_queue<Work>("alloc", qo);
  rail::JobOptions o{.max_attempts = 3};
  o.dedup.id.reserve(32);
  std::uint64_t seq = 0;
  // Warm every slot: one job per slot, all failing once, before any worker runs.
  for (std::size_t i = 0; i < kCapacity; ++i, ++seq) {
    if (v == Variant::dedup) set_dedup_id(o, seq);
    set_lines(o, v, seq);
    rail::AddStatus s = q.add("work", Work{seq, true}, o).status;
    if (s == rail::AddStatus::dedup_full) {  // a full shard of the window: warm the slot anyway
      o.dedup.id.clear();
      s = q.add("work", Work{seq, true}, o).status;
    }
    if (s != rail::AddStatus::added) {
      state.SkipWithError("rail add did not return added while warming the slots");
      return;
    }
  }
  CompletionLatch latch;
  latch.reset(kCapacity);
  q.process({.concurrency = 2}, [&latch, v](rail::Job<Work>& j) {
    if (j.attempt() == 1 &&
        (j.data().fail_first || (v == Variant::failures && j.data().seq % 10 == 0)))
      return rail::Outcome::retry("x");
    latch.hit();
    return rail::Outcome::done();
  });
  latch.wait();

  Work batch[64];
  auto run = [&](std::uint64_t n) {
    latch.reset(n);
    if (v == Variant::bulk) {
      for (std::uint64_t i = 0; i < n; i += 64) {
        const std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(64, n - i));
        for (std::size_t b = 0; b < k; ++b)
          batch[b] = Work{seq++, false};
        while (q.add_bulk("work", std::span<Work>(batch, k), o).status == rail::AddStatus::full)
          std::this_thread::yield();
      }
    } else {
      for (std::uint64_t i = 0; i < n; ++i, ++seq) {
        if (v == Variant::dedup) set_dedup_id(o, seq);
        set_lines(o, v, seq);
        rail::AddStatus s;
        while ((s = q.add("work", Work{seq, false}, o).status) != rail::AddStatus::added) {
          if (s != rail::AddStatus::full && s != rail::AddStatus::dedup_full) std::abort();
          std::this_thread::yield();
        }
      }
    }
    latch.wait();
  };
  if (v == Variant::bulk) o.dedup.id.clear();
  run(2 * kCapacity);  // warm-up
  // Let the last job's end-of-job bookkeeping finish before the snapshot.
  auto settle = [&](std::uint64_t expected) {
    for (int i = 0; i < 1000 && q.counts().completed != expected; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  settle(3 * kCapacity);
  measure_allocs(state, name, jobs, run, [&] { settle(3 * kCapacity + jobs); });
  if (v == Variant::events) state.counters["events"] = static_cast<double>(events.load());
}

/// RSS growth with few jobs in flight: a queue of 16 KB payloads at the default capacity (1 GB
/// of payload cells reserved, untouched until used) runs 100,000 jobs with at most 4 in flight.
/// Resident memory must follow the jobs in flight (recycled slots first), not the capacity.
void rail_rss_few_in_flight(benchmark::State& state, const std::string& name) {
  using Payload = std::array<char, 16384>;
  constexpr std::uint64_t kJobs = 100'000;
  constexpr int kInFlight = 4;
  for (auto _ : state) {
    rail::Engine engine;
    auto q = engine.declare_queue<Payload>("rss", rail::QueueOptions{.capacity = 65'536});
    std::atomic<std::uint64_t> done{0};
    q.process({.concurrency = 2}, [&done](rail::Job<Payload>& j) {
      benchmark::DoNotOptimize(j.data()[0]);
      done.fetch_add(1, std::memory_order_release);
    });
    const AllocSnapshot before = snapshot();
    const auto t0 = std::chrono::steady_clock::now();
    Payload p{};
    for (std::uint64_t i = 0; i < kJobs; ++i) {
      while (i - done.load(std::memory_order_acquire) >= kInFlight)
        std::this_thread::yield();
      p[0] = static_cast<char>(i);
      if (q.add("job", p).status != rail::AddStatus::added) {
        state.SkipWithError("rail add did not return added with 4 jobs in flight");
        return;
      }
    }
    while (done.load(std::memory_order_acquire) != kJobs)
      std::this_thread::yield();
    state.SetIterationTime(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    const AllocSnapshot after = snapshot();
    const double growth = static_cast<double>(after.rss_bytes - before.rss_bytes);
    state.counters["rss_growth_bytes"] = growth;
    state.counters["payload_bytes_reserved"] = 65'536.0 * sizeof(Payload);
    record_memory_result(name, growth);
  }
}

}  // namespace

void register_rail_memory() {
  add_memory_benchmark("rail/rss_growth/16KB_x4_in_flight", [](benchmark::State& s) {
    rail_rss_few_in_flight(s, "rail/rss_growth/16KB_x4_in_flight");
  });
  for (bool dedup : {false, true}) {
    std::string name = dedup ? "rail/bytes_per_waiting_job+dedup" : "rail/bytes_per_waiting_job";
    add_memory_benchmark(
        name, [name, dedup](benchmark::State& s) { rail_bytes_per_waiting_job(s, name, dedup); });
  }
  add_memory_benchmark("rail/bytes_per_idle_group", [](benchmark::State& s) {
    rail_bytes_per_group(s, "rail/bytes_per_idle_group");
  });
  add_memory_benchmark("rail/bytes_per_live_edge", [](benchmark::State& s) {
    rail_bytes_per_edge(s, "rail/bytes_per_live_edge");
  });
  const std::pair<Variant, const char*> variants[] = {{Variant::plain, "add"},
                                                      {Variant::bulk, "add_bulk:64"},
                                                      {Variant::failures, "add+fail10%"},
                                                      {Variant::dedup, "add+dedup"},
                                                      {Variant::events, "add+events"},
                                                      {Variant::groups, "add+group"},
                                                      {Variant::tenants, "add+tenant"}};
  for (auto [v, label] : variants) {
    std::string name = std::string("rail/allocs_per_job/") + label;
    add_memory_benchmark(name,
                         [name, v = v](benchmark::State& s) { rail_allocs_per_job(s, name, v); });
  }
}

}  // namespace bench
