// rail's contender in the engine throughput workload: add -> worker -> handler -> completed, with
// JobOptions.max_attempts = 3 on every job (retries configured, none taken unless a variant fails).
//
// Variants (each a ratio against plain `add` in the same run):
//   add            one add() per job
//   add_bulk:B     add_bulk() of B jobs per call
//   add_bulk:64+batch:64
//                  add_bulk() of 64, consumed by process_batch (at most 64 jobs per handler call)
//   add+fail10%    every tenth job fails its first attempt (Outcome::retry, no backoff delay so
//                  the retry goes straight back to the ready ring) and completes on the second
//   add+dedup      every job carries a unique dedup id (no ttl: held until the job ends)
//   add+group      every job is in one of 1,024 FIFO groups (JobOptions::group), round robin,
//                  so 2 workers always find a group free: the cost of the groups' bookkeeping
//   add+priority   the queue has 4 priority levels (QueueOptions::priorities) and the jobs take
//                  them round robin: rings per level instead of lanes, one pop at a time
//   add+tenant     every job is one of 16 tenants' (JobOptions::tenant), round robin, with
//                  tenant_window 64: the backlog parks in the tenants' lines and each end hands
//                  a turn on: the cost of the fair shares' bookkeeping
//   add+timeout    the queue has an attempt timeout (QueueOptions::timeout, an hour: none
//                  fires) and no leases: every delivery takes and gives back a deadline
//   add+expire     the queue's jobs expire an hour after their add (QueueOptions::expire_after:
//                  none does): each add computes its expiry and reads the sweep's floor, each
//                  delivery checks it
//   add+edge       jobs in pairs: the first a tracked add (Queue::add_tracked), the second waits
//                  for it (JobOptions::after, by its handle): one flow edge per two jobs, with
//                  the parent's record, the child's waiter and the parent's release
//   add+events     an observer sees every event and counts it (EventTally: a counter per thread,
//                  so the figure is rail's cost of raising events, not the observer's own)
//   add+permit     the queue calls a downstream whose concurrency equals the workers: every
//                  job takes and gives back a permit, none waits (the permit's own cost)
//   add+rate       the queue calls a downstream with a token bucket too fast to bind (10^9/s,
//                  burst 2^20): every job takes a token and a permit, none waits
//   add:no-histograms
//                  the queue records no latency histograms (QueueOptions::histograms = false):
//                  plain `add` records them (the default), so add over this is their cost
//   add:shared     the queue runs on the engine's shared pool of `workers` threads
//                  (WorkerOptions::shared) instead of its own: the cost of the pool's turns
//   add:20q-shared / add:20q-own1
//                  20 queues, the producers spreading jobs over them round robin: all on one
//                  shared pool of `workers` threads, or each with one thread of its own (20)
//   add:busy, add:busy-shared
//                  add (own pool) and add:shared with a CPU-bound thread per core running
//                  throughout (BackgroundLoad): against moodycamel's fn:busy
//   add:inline, add+dedup:inline, add+events:inline (p:1/w:0)
//                  an inline engine (Mode::inlined): one thread adds 16 jobs and runs them
//                  (run_until_idle), and again. No hand-off between cores, so the VM's phases
//                  barely move it: a feature's own cost, against add:inline
//   add_bulk:64+batch:64:inline (p:1/w:0)
//                  the same engine: one thread adds 64 jobs with add_bulk and runs them
//                  (run_until_idle) through process_batch: the batch path's own CPU per job,
//                  without the cross-core misses of the threaded row
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <rail/rail.hpp>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "engine/workload.hpp"

namespace bench {
namespace {

struct NoOp {
  std::uint64_t seq = 0;
};

enum class Feature {
  none,
  failures,
  dedup,
  events,
  permit,
  rate,
  batch64,
  groups,
  priority,
  tenant,
  timeout,
  expire,
  edge,
  no_histograms
};

struct RailCase {
  int producers;
  int workers;
  std::size_t batch;  // 0: single add()
  Feature feature;
  int queues = 1;        // jobs spread round robin over this many queues
  bool shared = false;   // the engine's shared pool of `workers` threads; else per queue:
                         // `workers` threads (1 queue) or 1 thread each (several)
  bool busy = false;     // a BackgroundLoad runs throughout
  bool inlined = false;  // Mode::inlined, no workers: the producer runs its jobs every kBurst adds
};

/// kBurst: an inline case's adds between two run_until_idle() calls.
constexpr std::uint64_t kBurst = 16;

/// DedupIds: each job's dedup id, formatted into the add's options as the job is added: a letter
/// for the set and 14 hex digits of the job's number, 15 bytes (the small-string buffer: no
/// allocation). Two sets alternate between iterations: a job's id is let go when the job ends, a
/// few instructions after the handler that completed the batch, so the next batch uses the other
/// set. A table of ids formatted beforehand (32 MB for 1M jobs) would charge the row with a
/// stream of misses to memory that the plain add does not pay; a server has its id at hand.
struct DedupIds {
  static constexpr std::size_t kWidth = 15;
  /// format(set, n, id): id = the id of job n of `set` (0 or 1).
  static void format(std::uint64_t set, std::uint64_t n, std::string& id) {
    static constexpr char kHex[] = "0123456789abcdef";
    id.resize(kWidth);
    id[0] = set == 0 ? 'a' : 'b';
    for (std::size_t d = kWidth - 1; d >= 1; --d, n >>= 4)
      id[d] = kHex[n & 15];
  }
};

/// EventTally: the add+events observer's count, one cache line per thread (a thread takes the
/// next of kLines on its first event; threads beyond that share, which stays correct). One
/// shared counter bumped by the producer and both workers made the observer's own cache-line
/// transfers a quarter of the run's samples: the cost of that observer, not of rail's events.
class EventTally {
 public:
  void count() noexcept {
    thread_local const std::size_t line = next_.fetch_add(1, std::memory_order_relaxed) % kLines;
    lines_[line].n.fetch_add(1, std::memory_order_relaxed);
  }
  [[nodiscard]] std::uint64_t total() const noexcept {
    std::uint64_t sum = 0;
    for (const auto& l : lines_)
      sum += l.n.load(std::memory_order_relaxed);
    return sum;
  }

 private:
  static constexpr std::size_t kLines = 64;
  struct alignas(64) Line {
    std::atomic<std::uint64_t> n{0};
  };
  std::atomic<std::size_t> next_{0};
  Line lines_[kLines];
};

/// Stats: what producers met besides `added`.
struct AddStats {
  std::atomic<std::uint64_t> errors{0};      // neither added nor back-pressure
  std::atomic<std::uint64_t> full{0};        // AddStatus::full retries
  std::atomic<std::uint64_t> dedup_full{0};  // AddStatus::dedup_full retries
};

/// add_one(q, o, seq, latch, stats): add, retrying (after a yield) while the dedup window is
/// full, or the queue is (only if its wait for room ends: never with the bench's options): both
/// are back-pressure, nothing was created. Any other status is counted as an error and the job
/// counted done, so the batch still ends (the run is then flagged).
void add_one(rail::Queue<NoOp>& q, const rail::JobOptions& o, std::uint64_t seq,
             CompletionLatch& latch, AddStats& stats) {
  for (;;) {
    auto r = q.add("noop", NoOp{seq}, o);
    if (r.status == rail::AddStatus::added) return;
    if (r.status == rail::AddStatus::full) {
      stats.full.fetch_add(1, std::memory_order_relaxed);
    } else if (r.status == rail::AddStatus::dedup_full) {
      stats.dedup_full.fetch_add(1, std::memory_order_relaxed);
    } else {
      stats.errors.fetch_add(1, std::memory_order_relaxed);
      latch.hit();
      return;
    }
    std::this_thread::yield();
  }
}

void rail_throughput(benchmark::State& state, const std::string& name, RailCase c) {
  const Config& cfg = config();
  std::optional<BackgroundLoad> load;
  if (c.busy) load.emplace();
  const auto workers = static_cast<std::uint32_t>(c.workers);
  auto events = std::make_unique<EventTally>();  // before the engine: it outlives the observer
  rail::EngineOptions eo;
  if (c.inlined) {
    eo.mode = rail::Mode::inlined;  // no pool: workers stays unset
  } else {
    eo.workers = workers;
  }
  rail::Engine engine(eo);
  rail::QueueOptions qo;
  qo.capacity = cfg.capacity;
  // A producer that outruns the workers waits for room inside add() (OnFull::block), as a
  // server that must not drop work would configure it: a retry loop on AddStatus::full spins
  // (sched_yield) on one of the two cores the workers need. With the loop, add_bulk:64 on the
  // shared pool ran at 3.2-4.6 M jobs/s and the producer's yields took a quarter of the samples;
  // waiting, 7.1-8.2 (3 alternating runs each, session 20). full_retries counts what is left:
  // adds that met `full` after waiting (never, with no timeout).
  qo.on_full = rail::OnFull::block;
  qo.block_timeout = rail::Duration::max();
  if (c.feature == Feature::permit || c.feature == Feature::rate) {
    rail::DownstreamOptions d{.concurrency = static_cast<std::uint32_t>(c.workers)};
    if (c.feature == Feature::rate)
      d.rate = rail::RateLimit::token_bucket(1'000'000'000, std::chrono::seconds(1),
                                             std::uint64_t{1} << 20);
    engine.declare_downstream("api", d);
    qo.downstream = "api";
  }
  if (c.feature == Feature::priority) qo.priorities = 4;
  if (c.feature == Feature::tenant) qo.tenant_window = 64;
  if (c.feature == Feature::expire) qo.expire_after = std::chrono::hours(1);
  if (c.feature == Feature::no_histograms) qo.histograms = false;
  if (c.feature == Feature::timeout) {
    qo.visibility_timeout = rail::Duration::max();  // the timeout's deadline alone
    qo.timeout = std::chrono::hours(1);
  }
  std::vector<rail::Queue<NoOp>> queues;
  for (int i = 0; i < c.queues; ++i)
    queues.push_back(engine.declare_queue<NoOp>("bench" + std::to_string(i), qo));
  CompletionLatch latch;
  AddStats stats;
  if (c.feature == Feature::events)
    engine.on_event([tally = events.get()](const rail::Event&) { tally->count(); });
  const rail::WorkerOptions wo = c.inlined       ? rail::WorkerOptions{}
                                 : c.shared      ? rail::WorkerOptions::shared()
                                 : c.queues == 1 ? rail::WorkerOptions{.concurrency = workers}
                                                 : rail::WorkerOptions{.concurrency = 1};
  for (auto& q : queues) {
    if (c.feature == Feature::failures) {
      q.process(wo, [&latch](rail::Job<NoOp>& j) {
        if (j.attempt() == 1 && j.data().seq % 10 == 0) return rail::Outcome::retry("x");
        latch.hit();
        return rail::Outcome::done();
      });
    } else if (c.feature == Feature::batch64) {
      q.process_batch(wo, {.max = 64}, [&latch](rail::Batch<NoOp>& b) {
        for (std::size_t i = 0; i < b.size(); ++i)
          latch.hit();
      });
    } else {
      q.process(wo, [&latch](rail::Job<NoOp>&) { latch.hit(); });
    }
  }
  const bool ids = c.feature == Feature::dedup;
  std::uint64_t iteration = 0;

  // Preformatted group names (they fit the small-string buffer: no allocation per add).
  std::vector<std::string> groups, tenants;
  if (c.feature == Feature::groups)
    for (int g = 0; g < 1024; ++g)
      groups.push_back("g" + std::to_string(g));
  if (c.feature == Feature::tenant)
    for (int t = 0; t < 16; ++t)
      tenants.push_back("t" + std::to_string(t));

  auto produce_range = [&](std::uint64_t begin, std::uint64_t end) {
    rail::JobOptions o{.max_attempts = 3};
    if (c.feature == Feature::edge) {
      rail::JobOptions parent = o;
      for (std::uint64_t i = begin; i < end; ++i) {
        if ((i - begin) % 2 != 0 || i + 1 == end) {
          add_one(queues[0], o, i, latch, stats);
          continue;
        }
        auto child = queues[0].add_tracked("noop", NoOp{i}, o);
        if (child.added().status != rail::AddStatus::added) {
          stats.errors.fetch_add(1, std::memory_order_relaxed);
          latch.hit();
          continue;
        }
        parent.after.assign(1, rail::Dependency(child));
        ++i;
        add_one(queues[0], parent, i, latch, stats);
      }
      return;
    }
    if (c.batch == 0) {
      o.dedup.id.reserve(DedupIds::kWidth);
      for (std::uint64_t i = begin; i < end; ++i) {
        if (ids) DedupIds::format(iteration & 1, i, o.dedup.id);
        if (!groups.empty()) o.group.assign(groups[i % groups.size()]);
        if (!tenants.empty()) o.tenant.assign(tenants[i % tenants.size()]);
        if (c.feature == Feature::priority) o.priority = static_cast<std::uint8_t>(i % 4);
        add_one(queues[i % queues.size()], o, i, latch, stats);
        if (c.inlined && ((i - begin) % kBurst == kBurst - 1 || i + 1 == end))
          engine.run_until_idle();
      }
      return;
    }
    std::vector<NoOp> batch(c.batch);
    for (std::uint64_t i = begin; i < end; i += c.batch) {
      std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(c.batch, end - i));
      for (std::size_t k = 0; k < n; ++k)
        batch[k].seq = i + k;
      for (;;) {
        auto r = queues[(i / c.batch) % queues.size()].add_bulk(
            "noop", std::span<NoOp>(batch.data(), n), o);
        if (r.status == rail::AddStatus::added) break;
        if (r.status == rail::AddStatus::full) {
          stats.full.fetch_add(1, std::memory_order_relaxed);
        } else {
          stats.errors.fetch_add(n, std::memory_order_relaxed);
          for (std::size_t k = 0; k < n; ++k)
            latch.hit();
          break;
        }
        std::this_thread::yield();
      }
      if (c.inlined) engine.run_until_idle();
    }
  };
  timed_batches(
      state, name, latch,
      [&] {
        run_producers(c.producers, cfg.jobs, produce_range);
        ++iteration;
      },
      load ? &*load : nullptr);

  // The handler's latch.hit() runs before the engine counts the completion, so give the last
  // job's bookkeeping a moment before comparing totals.
  const std::uint64_t expected = cfg.jobs * (static_cast<std::uint64_t>(state.iterations()) + 1);
  auto total = [&] {
    rail::QueueCounts sum;
    for (auto& q : queues) {
      const rail::QueueCounts one = q.counts();
      sum.completed += one.completed;
      sum.failed_attempts += one.failed_attempts;
    }
    return sum;
  };
  auto counts = total();
  for (int spin = 0; spin < 1000 && counts.completed != expected; ++spin) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    counts = total();
  }
  const std::uint64_t errors = stats.errors.load();
  state.counters["failed_attempts"] = static_cast<double>(counts.failed_attempts);
  state.counters["full_retries"] = static_cast<double>(stats.full.load());
  if (c.feature == Feature::dedup)
    state.counters["dedup_full_retries"] = static_cast<double>(stats.dedup_full.load());
  if (c.feature == Feature::events) state.counters["events"] = static_cast<double>(events->total());
  if (errors != 0 || counts.completed != expected)
    Results::instance().record(name, 0);  // no ratio from a failed run
  if (errors != 0) {
    state.SkipWithError(
        ("rail add returned an unexpected status for " + std::to_string(errors) + " jobs").c_str());
  } else if (counts.completed != expected) {
    state.SkipWithError("rail completed count differs from jobs added");
  }
}

void add(const std::string& name, RailCase c) {
  register_case(name, [c](benchmark::State& s, const std::string& n) { rail_throughput(s, n, c); });
}

}  // namespace

void register_rail(int producers, int workers, bool matrix) {
  add(case_name("rail", "add", producers, workers), {producers, workers, 0, Feature::none});
  add(case_name("rail", "add_bulk:64", producers, workers),
      {producers, workers, 64, Feature::none});
  if (matrix)
    add(case_name("rail", "add:shared", producers, workers),
        {producers, workers, 0, Feature::none, 1, true});
}

void register_rail_extras() {
  add(case_name("rail", "add_bulk:256", 1, 2), {1, 2, 256, Feature::none});
  add(case_name("rail", "add_bulk:64+batch:64", 1, 2), {1, 2, 64, Feature::batch64});
  add(case_name("rail", "add_bulk:64+batch:64", 2, 2), {2, 2, 64, Feature::batch64});
  add(case_name("rail", "add+fail10%", 1, 2), {1, 2, 0, Feature::failures});
  add(case_name("rail", "add+dedup", 1, 2), {1, 2, 0, Feature::dedup});
  add(case_name("rail", "add+group", 1, 2), {1, 2, 0, Feature::groups});
  add(case_name("rail", "add+priority", 1, 2), {1, 2, 0, Feature::priority});
  add(case_name("rail", "add+tenant", 1, 2), {1, 2, 0, Feature::tenant});
  add(case_name("rail", "add+timeout", 1, 2), {1, 2, 0, Feature::timeout});
  add(case_name("rail", "add+expire", 1, 2), {1, 2, 0, Feature::expire});
  add(case_name("rail", "add+edge", 1, 2), {1, 2, 0, Feature::edge});
  add(case_name("rail", "add+events", 1, 2), {1, 2, 0, Feature::events});
  add(case_name("rail", "add:no-histograms", 1, 2), {1, 2, 0, Feature::no_histograms});
  add(case_name("rail", "add+permit", 1, 2), {1, 2, 0, Feature::permit});
  add(case_name("rail", "add+rate", 1, 2), {1, 2, 0, Feature::rate});
  add(case_name("rail", "add:shared", 1, 2), {1, 2, 0, Feature::none, 1, true});
  add(case_name("rail", "add:shared", 2, 2), {2, 2, 0, Feature::none, 1, true});
  add(case_name("rail", "add_bulk:64:shared", 1, 2), {1, 2, 64, Feature::none, 1, true});
  add(case_name("rail", "add:20q-shared", 1, 2), {1, 2, 0, Feature::none, 20, true});
  add(case_name("rail", "add:20q-own1", 1, 20), {1, 20, 0, Feature::none, 20, false});
  add(case_name("rail", "add:busy", 1, 2), {1, 2, 0, Feature::none, 1, false, true});
  add(case_name("rail", "add:busy-shared", 1, 2), {1, 2, 0, Feature::none, 1, true, true});
  add(case_name("rail", "add:inline", 1, 0), {1, 0, 0, Feature::none, 1, false, false, true});
  add(case_name("rail", "add+dedup:inline", 1, 0),
      {1, 0, 0, Feature::dedup, 1, false, false, true});
  add(case_name("rail", "add+events:inline", 1, 0),
      {1, 0, 0, Feature::events, 1, false, false, true});
  add(case_name("rail", "add_bulk:64+batch:64:inline", 1, 0),
      {1, 0, 64, Feature::batch64, 1, false, false, true});
}

}  // namespace bench
