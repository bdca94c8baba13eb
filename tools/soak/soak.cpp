#include "soak/soak.hpp"

#include <algorithm>
#include <atomic>
#include <coroutine>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include "rail/rail.hpp"
#include "soak/group_ledger.hpp"

namespace rail::soak {
namespace {

using namespace std::chrono_literals;

/// ShutdownBegan: thrown by a producer's add loop when the engine answers shutting_down, to end
/// production from wherever the add was.
struct ShutdownBegan {};

struct Payload {
  std::uint64_t plan = 0;  // seeds the fate of every delivery
};

enum class Fate { ok, fail, throw_, permanent, discard, hang, pushback };

/// unit(plan, delivery): a number in [0, 1) fixed by the job's plan and the delivery.
double unit(std::uint64_t plan, std::uint32_t delivery) {
  SplitMix64 r(plan ^ (std::uint64_t{delivery} * 0x9E3779B97F4A7C15ULL));
  return static_cast<double>(r.next() >> 11) / 9007199254740992.0;
}

Fate fate(const Config& c, std::uint64_t plan, std::uint32_t delivery) {
  double x = unit(plan, delivery);
  if ((x -= c.hang) < 0) return Fate::hang;
  if ((x -= c.permanent) < 0) return Fate::permanent;
  if ((x -= c.discard) < 0) return Fate::discard;
  if ((x -= c.throw_) < 0) return Fate::throw_;
  if ((x -= c.fail) < 0) return Fate::fail;
  if (c.downstream && (x -= c.pushback) < 0) return Fate::pushback;
  return Fate::ok;
}

/// Everything the events said about one job id. Delivery numbers are tracked as bit sets of
/// kMaxDelivery bits (the soak's jobs have 3 attempts and, under StallPolicy::own_budget, one
/// stall to spare, so at most 4 deliveries); a number outside them is a violation of its own.
constexpr std::uint32_t kMaxDelivery = 16;
struct Track {
  std::atomic<std::uint8_t> accepted{0}, cancel_accepted{0}, delayed{0};
  std::atomic<std::uint16_t> started{0}, failed{0}, stalled{0}, late{0}, pushed{0};
  std::atomic<std::uint16_t> completed{0}, dead{0}, cancelled{0}, discarded{0};
  std::atomic<std::uint16_t> stalled_out{0};  // lives dead-lettered by a lapse (lease_expired)
  std::atomic<std::uint16_t> completed_delivery{0};
  std::atomic<std::uint16_t> started_mask{0}, stalled_mask{0};  // bit d-1: delivery d
  std::atomic<std::uint16_t> redriven{0};  // lives beyond the first (a redrive restarts it)
  std::atomic<std::uint8_t> taken{0};      // handed back by take_leftovers after a shutdown
  // Set by the redriver before it redrives the job: a redriven job holds its dedup id again, so
  // a re-add after the first life's window may rightly merge into it.
  std::atomic<std::uint8_t> redrive_tried{0};
};

/// delivery_bit(d): delivery d's bit in a Track mask, or 0 if d is outside what a mask holds.
std::uint16_t delivery_bit(std::uint32_t d) {
  return d >= 1 && d <= kMaxDelivery ? static_cast<std::uint16_t>(1u << (d - 1)) : 0;
}

/// PauseWatch: checks that a paused queue starts nothing. The pauser makes `epoch` odd after
/// pause() returns and even again before resume(). A worker may already have taken a job when
/// pause() is called, so it may start that one while paused; but once its `started` observer saw
/// the odd epoch it also sees the pause (the epoch's store follows pause() in the pauser), so its
/// next job cannot start in the same epoch. Two starts by one thread in one odd epoch are a
/// violation.
struct PauseWatch {
  std::atomic<std::uint64_t> epoch{0};
  std::uint64_t run = 0;  // tells runs apart in the workers' thread-local records
  std::atomic<std::uint64_t> starts_while_paused{0};

  /// on_start(): called by a worker's `started` observer; false on a violation.
  bool on_start() {
    // acquire: pairs with the pauser's release increment, so pause() is visible from here on.
    const std::uint64_t e = epoch.load(std::memory_order_acquire);
    if ((e & 1) == 0) return true;
    starts_while_paused.fetch_add(1, std::memory_order_relaxed);
    thread_local std::uint64_t seen_run = 0, seen_epoch = 0;
    const bool again = seen_run == run && seen_epoch == e;
    seen_run = run;
    seen_epoch = e;
    return !again;
  }
};
std::atomic<std::uint64_t> g_runs{0};

struct Violations {
  std::atomic<std::uint64_t> count{0};
  std::mutex mu;
  std::vector<std::string> first;
  void add(std::string what) {
    count.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard lock(mu);
    if (first.size() < 10) first.push_back(std::move(what));
  }
};

}  // namespace

Report run(const Config& cfg) {
  const bool side = cfg.side_queue && cfg.downstream && cfg.shutdown_at <= 0;
  const std::uint64_t side_jobs = side ? cfg.jobs / 10 : 0;
  // Job ids are the engine's: the side queue's take some of them.
  const std::uint64_t max_id = cfg.jobs * 2 + side_jobs + 1024;
  auto track = std::make_unique<Track[]>(max_id + 1);
  // FIFO groups: each producer has groups_each of its own (Config::groups).
  const std::uint32_t groups_each =
      cfg.groups == 0 ? 0 : std::max<std::uint32_t>(1, cfg.groups / cfg.producers);
  GroupLedger groups(max_id, groups_each * cfg.producers);
  Violations v;
  PauseWatch pause_watch;
  pause_watch.run = g_runs.fetch_add(1) + 1;
  ManualClock manual;
  EngineOptions eo;
  eo.seed = cfg.seed;
  eo.workers = cfg.workers;  // the shared pool's, when the queue uses it
  if (cfg.manual_clock) eo.clock = &manual;
  Engine engine(eo);
  Clock& clock = engine.clock();
  std::atomic<std::uint64_t> debounced{0}, throttled{0};

  engine.on_event([&](const Event& e) {
    if (e.job_id == 0 || e.queue == "soak-side") return;  // the side queue is checked apart
    if (e.job_id > max_id) {
      v.add("event for job " + std::to_string(e.job_id) + " beyond every id the soak could add");
      return;
    }
    Track& t = track[e.job_id];
    auto bump = [](std::atomic<std::uint16_t>& a) { a.fetch_add(1, std::memory_order_relaxed); };
    switch (e.kind) {
      case EventKind::added:
        if (e.delay.count() > 0) t.delayed.store(1, std::memory_order_relaxed);
        break;
      case EventKind::started: {
        bump(t.started);
        groups.on_start(e.job_id);
        const std::uint16_t bit = delivery_bit(e.deliveries);
        if (bit == 0)
          v.add("job " + std::to_string(e.job_id) + ": a start numbered " +
                std::to_string(e.deliveries));
        else if (t.started_mask.fetch_or(bit) & bit)
          v.add("job " + std::to_string(e.job_id) + ": delivery " + std::to_string(e.deliveries) +
                " started twice");
        if (!pause_watch.on_start())
          v.add("job " + std::to_string(e.job_id) + " started while its queue was paused, after " +
                "the same worker had started another one in that pause");
        break;
      }
      case EventKind::attempt_failed:
        bump(t.failed);
        break;
      case EventKind::stalled:
        bump(t.stalled);
        // A lapse on the wheel's owner raises its events once the wheel is released, while a
        // lapse that dead-letters files the DLQ entry at once: a redrive can come between, and
        // its `redriven` event first. A stall seen while a redriven life's predecessor has not
        // reported its dead_lettered yet is that predecessor's, not one of this life's
        // deliveries.
        if (t.dead.load() >= t.redriven.load()) t.stalled_mask.fetch_or(delivery_bit(e.deliveries));
        break;
      case EventKind::late_outcome:
        bump(t.late);
        break;
      case EventKind::completed:
        groups.on_end(e.job_id);
        bump(t.completed);
        t.completed_delivery.store(static_cast<std::uint16_t>(e.deliveries));
        break;
      case EventKind::dead_lettered:
        groups.on_end(e.job_id);
        bump(t.dead);
        if (e.reason == DeadLetterReason::lease_expired) bump(t.stalled_out);
        break;
      case EventKind::cancelled:
        groups.on_end(e.job_id);
        bump(t.cancelled);
        break;
      case EventKind::discarded:
        groups.on_end(e.job_id);
        bump(t.discarded);
        break;
      case EventKind::redriven:
        // Raised before the new life is published, so before any of its starts: the delivery
        // numbering restarts here.
        bump(t.redriven);
        t.started_mask.store(0);
        t.stalled_mask.store(0);
        break;
      case EventKind::debounced:
        debounced.fetch_add(1, std::memory_order_relaxed);
        break;
      case EventKind::throttled:
        // A pushback ends a delivery (its handler returned); a refusal comes before one.
        if (e.throttle == Throttle::pushed_back) bump(t.pushed);
        throttled.fetch_add(1, std::memory_order_relaxed);
        break;
      default:
        break;
    }
  });

  QueueOptions qo;
  qo.capacity = cfg.capacity;
  qo.visibility_timeout = cfg.visibility;
  qo.stall_policy = cfg.stall_policy;
  qo.defaults.max_attempts = 3;
  qo.defaults.backoff = Backoff::fixed(1ms).with_jitter(Jitter::full);
  qo.dlq.max_entries = max_id;
  // The downstream: its concurrency flips between `budget` and 1, its rate between two quotas
  // and none (the flipper thread below), so the most handlers ever inside is `budget`.
  const std::uint32_t budget = std::max<std::uint32_t>(1, cfg.workers / 2);
  std::atomic<std::uint32_t> inside{0}, most_inside{0};
  if (cfg.downstream) {
    engine.declare_downstream(
        "soak-api", {.concurrency = cfg.rate_only_downstream ? std::nullopt
                                                             : std::optional<std::uint32_t>(budget),
                     .rate = cfg.rate_only_downstream ? RateLimit{.max = 10'000, .per = 1s}
                                                      : RateLimit::token_bucket(200'000, 1s, 256)});
    qo.downstream = "soak-api";
  }
  auto q = engine.declare_queue<Payload>("soak", qo);
  WorkerOptions wo =
      cfg.shared_pool ? WorkerOptions::shared() : WorkerOptions{.concurrency = cfg.workers};
  if (cfg.async > 0 || cfg.coroutines)
    wo.max_pending = static_cast<std::uint32_t>(
        std::min<std::size_t>(2 * cfg.capacity, WorkerOptions::kMaxPending));
  // Calls inside the downstream at once (invariant 6): from a handler's start to its return,
  // or, deferred, to just before its Completion completes (which gives the permit back).
  auto enter_downstream = [&] {
    const std::uint32_t now = inside.fetch_add(1) + 1;
    std::uint32_t m = most_inside.load();
    while (now > m && !most_inside.compare_exchange_weak(m, now)) {
    }
  };
  // Async deliveries (cfg.async of them): the handler defers, and a completer thread applies
  // the same fate later (a hang: once the delivery is fenced; an exception: a dropped
  // Completion). Under cfg.coroutines the handler is a coroutine (rail::Task) that parks on the
  // simulated call instead, and the completer resumes it: the coroutine then applies the fate
  // itself (an exception is thrown after resuming).
  struct Call {
    Completion done;  // Job::defer's, or empty for a parked coroutine
    Fate fate;
    std::coroutine_handle<> coroutine{};
    const AsyncJob<Payload>* job = nullptr;  // the parked coroutine's (in its frame)
    [[nodiscard]] bool cancelled() const { return job ? job->cancelled() : done.cancelled(); }
  };
  std::mutex calls_mu;
  std::deque<Call> calls;
  std::atomic<std::uint64_t> deferred{0};
  auto is_async = [&](const Payload& p, std::uint32_t deliveries) {
    return cfg.async > 0 && unit(p.plan ^ 0xA5A5'5A5A'C3C3'3C3Cull, deliveries) < cfg.async;
  };
  // The fate of an async call as the outcome its completion applies (a throw is the caller's).
  auto async_outcome = [](Fate f) {
    switch (f) {
      case Fate::fail:
        return Outcome::retry("flaky downstream, async");
      case Fate::permanent:
        return Outcome::fail("permanent failure, async");
      case Fate::discard:
        return Outcome::discard("not worth doing any more");
      case Fate::pushback:
        return Outcome::pushback(1ms, "429 from the soak's downstream, async");
      default:  // ok, or a hang whose delivery was fenced: the engine must ignore it
        return Outcome::done();
    }
  };
  // A delivery handled where it runs (every one but the async share), by either kind of handler.
  auto run_here = [&](Fate f, auto& j) -> Outcome {
    struct Leave {
      std::atomic<std::uint32_t>& n;
      ~Leave() { n.fetch_sub(1); }
    } leave{inside};
    switch (f) {
      case Fate::pushback:
        return Outcome::pushback(1ms, "429 from the soak's downstream");
      case Fate::ok:
        return Outcome::done();
      case Fate::fail:
        return Outcome::retry("flaky downstream");
      case Fate::throw_:
        throw std::runtime_error("handler threw");
      case Fate::permanent:
        if (j.data().plan % 2 == 0) throw UnrecoverableError("unrecoverable, thrown");
        return Outcome::fail("permanent failure");
      case Fate::discard:
        return Outcome::discard("not worth doing any more");
      case Fate::hang:
        // Outlive the lease: wait until this delivery is fenced, then claim success. The
        // engine must ignore it (a late outcome).
        while (!j.cancelled())
          std::this_thread::sleep_for(cfg.manual_clock ? 10us : 1ms);
        return Outcome::done();
    }
    return Outcome::done();
  };
  struct ParkOnCall {
    std::mutex& mu;
    std::deque<Call>& calls;
    Fate fate;
    const AsyncJob<Payload>* job;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) {
      const std::lock_guard lock(mu);
      calls.push_back({Completion{}, fate, h, job});
    }
    void await_resume() const noexcept {}
  };
  if (cfg.coroutines) {
    q.process(wo, [&](AsyncJob<Payload> j) -> Task {
      enter_downstream();
      const Fate f = fate(cfg, j.data().plan, j.deliveries());
      if (is_async(j.data(), j.deliveries())) {
        deferred.fetch_add(1);
        co_await ParkOnCall{calls_mu, calls, f, &j};  // the completer resumes it
        if (f == Fate::throw_) throw std::runtime_error("handler threw after resuming");
        co_return async_outcome(f);
      }
      co_return run_here(f, j);
    });
  } else {
    q.process(wo, [&](Job<Payload>& j) -> Outcome {
      enter_downstream();
      const Fate f = fate(cfg, j.data().plan, j.deliveries());
      if (is_async(j.data(), j.deliveries())) {
        // Throws Error(capacity) only past max_pending: a failure.
        Outcome pending = j.defer([&](Completion c) {
          const std::lock_guard lock(calls_mu);
          calls.push_back({std::move(c), f});
        });
        deferred.fetch_add(1);
        return pending;
      }
      return run_here(f, j);
    });
  }

  // The side queue: the same downstream, the other kind of pool, plain jobs that complete.
  std::optional<Queue<int>> side_q;
  if (side) {
    QueueOptions so;
    so.capacity = 1024;
    so.downstream = "soak-api";
    side_q.emplace(engine.declare_queue<int>("soak-side", so));
    side_q->process(cfg.shared_pool ? WorkerOptions{.concurrency = 2} : WorkerOptions::shared(),
                    [&](Job<int>&) {
                      enter_downstream();
                      inside.fetch_sub(1);
                      return Outcome::done();
                    });
  }

  std::atomic<bool> producing{true}, settled{false}, stopped{false};
  std::vector<std::thread> completers;
  for (unsigned t = 0; cfg.async > 0 && t < 2; ++t)
    completers.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(cfg.seed) * 31u + t);
      while (!settled.load()) {
        std::optional<Call> call;
        {
          const std::lock_guard lock(calls_mu);
          if (!calls.empty()) {
            call.emplace(std::move(calls.front()));
            calls.pop_front();
          }
        }
        if (!call) {
          std::this_thread::sleep_for(50us);
          continue;
        }
        // The call's latency: up to 200 us, less under the manual clock (whose driver moves
        // 1 ms per 20 us), so that few lapse but for the hangs.
        std::this_thread::sleep_for(
            std::chrono::microseconds(rng() % (cfg.manual_clock ? 20 : 200)));
        if (call->fate == Fate::hang)
          while (!call->cancelled() && !settled.load())
            std::this_thread::sleep_for(cfg.manual_clock ? 10us : 1ms);
        inside.fetch_sub(1);
        if (call->coroutine) {
          call->coroutine.resume();  // it applies its fate; its frame may be gone after this
        } else if (call->fate == Fate::throw_) {
          call->done = Completion{};  // dropped: a failed attempt
        } else {
          call->done.complete(async_outcome(call->fate));
        }
      }
    });
  std::atomic<std::uint64_t> dup_merged{0}, dup_new{0}, cancels_ok{0}, pauses{0};
  std::atomic<std::uint64_t> pauses_with_work{0}, accepted_count{0}, redrives{0};
  std::atomic<std::uint64_t> delayed_cancelled{0};
  std::thread driver;
  if (cfg.manual_clock) {
    driver = std::thread([&] {
      while (!settled.load()) {
        manual.advance(1ms);
        std::this_thread::sleep_for(20us);
      }
    });
  }
  std::thread pauser;
  if (cfg.pauses) {
    pauser = std::thread([&] {
      while (producing.load()) {
        std::this_thread::sleep_for(5ms);
        q.pause();
        // release: a worker whose observer sees the odd epoch sees the pause too (PauseWatch).
        pause_watch.epoch.fetch_add(1, std::memory_order_acq_rel);
        pauses.fetch_add(1);
        if (q.counts().waiting > 0) pauses_with_work.fetch_add(1);  // the pause held back work
        std::this_thread::sleep_for(1ms);
        pause_watch.epoch.fetch_add(1, std::memory_order_acq_rel);
        q.resume();
      }
      q.resume();
    });
  }

  // Redrives while the workers run: a DLQ entry goes back to the queue for a second life (once
  // per job, every other id, so that some dead letters stay for the DLQ check).
  std::thread redriver;
  if (cfg.redrives) {
    redriver = std::thread([&] {
      std::unordered_map<JobId, bool> done;
      while (producing.load() && !stopped.load()) {
        std::this_thread::sleep_for(2ms);
        int budget = 4;
        for (const auto& e : q.dlq().list()) {
          if (budget == 0) break;
          if (e.id % 2 != 0 || !done.emplace(e.id, true).second) continue;
          --budget;
          if (e.id <= max_id) track[e.id].redrive_tried.store(1);
          if (q.dlq().redrive(e.id) == RedriveStatus::redriven) redrives.fetch_add(1);
        }
      }
    });
  }
  // The downstream's limits flip while jobs run (a gateway announcing new quotas).
  std::thread flipper;
  std::atomic<std::uint64_t> limit_changes{0};
  if (cfg.downstream) {
    flipper = std::thread([&] {
      auto api = engine.downstream("soak-api");
      for (std::uint64_t k = 0; producing.load() && !stopped.load(); ++k) {
        std::this_thread::sleep_for(3ms);
        if (cfg.rate_only_downstream) {
          // Seldom (every ~150 ms): a change wakes the gate's blocked jobs, which would hide a
          // chain that stalls between changes.
          // Windows and a bucket: a change between windows carries the last window's starts,
          // a change of kind starts afresh.
          static constexpr RateLimit kRates[] = {{.max = 10'000, .per = 1s},
                                                 RateLimit::token_bucket(1'000, 1s, 1),
                                                 {.max = 50'000, .per = 1s}};
          if (k % 50 == 49) api.set_rate(kRates[(k / 50) % 3]);
        } else {
          api.set_concurrency(k % 3 == 1 ? 1 : budget);
          api.set_rate(k % 4 == 3 ? std::nullopt
                                  : std::optional<RateLimit>(RateLimit::token_bucket(
                                        k % 2 ? 20'000u : 200'000u, 1s, 64)));
        }
        limit_changes.fetch_add(1);
      }
      if (cfg.rate_only_downstream) {
        api.set_rate(RateLimit{.max = 20'000, .per = 1s});  // still rate-only
      } else {
        api.set_concurrency(budget);
        api.set_rate(std::nullopt);  // let what is left finish at full speed
      }
    });
  }
  // A shutdown in the middle of the run: producers see AddStatus::shutting_down and stop; what
  // never ran is handed back by take_leftovers below.
  std::thread stopper;
  if (cfg.shutdown_at > 0) {
    stopper = std::thread([&] {
      const auto at = static_cast<std::uint64_t>(cfg.shutdown_at * static_cast<double>(cfg.jobs));
      while (accepted_count.load() < at && producing.load())
        std::this_thread::sleep_for(100us);
      (void)engine.shutdown(20ms);
      stopped.store(true);
    });
  }

  const Duration window = 200ms;
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> producers;
  const std::uint64_t per = cfg.jobs / cfg.producers;
  for (std::uint32_t p = 0; p < cfg.producers; ++p) {
    producers.emplace_back([&, p] {
      std::mt19937_64 rng(cfg.seed * 1000003 + p);
      std::uniform_real_distribution<double> u(0, 1);
      struct Later {
        std::string key;
        JobId first;
        TimePoint after;  // re-adding at or after this time must create a new job
      };
      // Ids to re-add once their window has certainly passed, in the order it passes (each
      // `after` is a later clock reading than the one before it): every one is checked.
      std::deque<Later> later;
      std::vector<JobId> to_cancel;
      auto accept = [&](const AddReceipt& r) {
        if (r.id > max_id) return v.add("job id " + std::to_string(r.id) + " out of range");
        track[r.id].accepted.store(1);
        accepted_count.fetch_add(1);
      };
      auto add = [&](const JobOptions& o) {
        for (;;) {
          AddReceipt r = q.add("soak", Payload{rng()}, o);
          if (r.status == AddStatus::shutting_down) throw ShutdownBegan{};  // ends production
          if (r.status != AddStatus::full && r.status != AddStatus::dedup_full) return r;
          std::this_thread::yield();  // back-pressure: the queue (or its window) is full
        }
      };
      // readd(later): re-adds the oldest id whose window has passed: it must create a new job.
      auto readd = [&](std::deque<Later>& ids) {
        const Later& l = ids.front();
        JobOptions lo = qo.defaults;
        lo.dedup = {.id = l.key, .ttl = window};
        AddReceipt r2 = add(lo);
        const bool into_redriven = r2.status == AddStatus::duplicate && r2.id == l.first &&
                                   track[l.first].redrive_tried.load() != 0;
        if (into_redriven) {
          dup_merged.fetch_add(1);
        } else if (r2.status != AddStatus::added || r2.id == l.first) {
          v.add("add of dedup id " + l.key + " after its window got " +
                std::string(to_string(r2.status)));
        } else {
          accept(r2);
          dup_new.fetch_add(1);
        }
        ids.pop_front();
      };
      try {
        for (std::uint64_t n = 0; n < per; ++n) {
          JobOptions o = qo.defaults;  // attempts 3, jittered backoff
          if (u(rng) < cfg.delayed) o.delay = std::chrono::milliseconds(1 + rng() % 5);
          bool dup = u(rng) < cfg.duplicate;
          // This producer's groups, round robin (one producer per group: its ids rise in its
          // add order, so a group's add order is its id order).
          const std::uint32_t group =
              groups.on() ? p * groups_each + static_cast<std::uint32_t>(n % groups_each) : 0;
          if (groups.on()) o.group = GroupLedger::group_name(group);
          if (dup) {
            o.dedup = {.id = std::string("p")
                                 .append(std::to_string(p))
                                 .append("-")
                                 .append(std::to_string(n)),
                       .ttl = window};
            // Debounce lands on the kept job whatever its state: delayed (replaced), waiting or
            // running (merged: a running job's payload is never replaced).
            if (u(rng) < cfg.debounce) o.dedup.mode = DedupMode::debounce;
          }
          TimePoint before = clock.now();
          AddReceipt r = add(o);
          if (r.status != AddStatus::added) {
            v.add("a fresh add returned " + std::string(to_string(r.status)));
            continue;
          }
          accept(r);
          if (groups.on()) groups.note_added(r.id, group, !dup && o.delay.count() == 0);
          if (dup) {
            TimePoint after_first = clock.now();
            AddReceipt again = add(o);
            TimePoint after_second = clock.now();
            // A debounce restarts the window at the second add.
            if (again.status == AddStatus::debounced) after_first = after_second;
            if (after_second < before + window) {  // certainly inside the window
              if (!again.duplicate() || again.id != r.id)
                v.add("duplicate add of job " + std::to_string(r.id) + " inside its window got " +
                      std::string(to_string(again.status)) + " id " + std::to_string(again.id));
              else
                dup_merged.fetch_add(1);
            } else if (again.status == AddStatus::added) {
              // Ambiguous timing: the window may have ended; a new job is legal and now owns the
              // id for a window of its own.
              accept(again);
              later.push_back({o.dedup.id, again.id, after_second + window});
              continue;
            }
            later.push_back({o.dedup.id, r.id, after_first + window});
          }
          if (!dup && o.delay.count() > 0 && u(rng) < cfg.cancel_delayed) {
            // A delayed job cancelled at once: its slot must come back at once too.
            if (q.cancel(r.id)) {
              track[r.id].cancel_accepted.store(1);
              cancels_ok.fetch_add(1);
              delayed_cancelled.fetch_add(1);
            }
          } else if (u(rng) < cfg.cancel) {
            to_cancel.push_back(r.id);
          }
          if (to_cancel.size() > 8 || (n + 1 == per && !to_cancel.empty())) {
            for (JobId id : to_cancel)
              if (q.cancel(id)) {
                track[id].cancel_accepted.store(1);
                cancels_ok.fetch_add(1);
              }
            to_cancel.clear();
          }
          while (!later.empty() && clock.now() >= later.front().after)
            readd(later);
        }
        // The windows still open when production ends: wait each out (a manual clock is moved by
        // the driver until the jobs settle), so that every duplicated id is re-added once.
        while (!later.empty()) {
          if (clock.now() >= later.front().after)
            readd(later);
          else
            std::this_thread::sleep_for(100us);
        }
      } catch (const ShutdownBegan&) {
        // A mid-run shutdown ends production; one without a planned shutdown is a violation.
        if (cfg.shutdown_at <= 0) v.add("a producer's add answered shutting_down");
      } catch (const Error& e) {
        v.add(std::string("a producer got ") + e.what());
      }
    });
  }
  std::thread side_producer;
  if (side) {
    side_producer = std::thread([&] {
      try {
        for (std::uint64_t k = 0; k < side_jobs; ++k)
          for (;;) {
            const AddStatus s = side_q->add("side", static_cast<int>(k)).status;
            if (s == AddStatus::shutting_down) throw ShutdownBegan{};
            if (s != AddStatus::full) break;
            std::this_thread::sleep_for(1ms);  // its jobs wait at the gate: room comes back
          }
      } catch (const ShutdownBegan&) {
        if (cfg.shutdown_at <= 0) v.add("the side queue's add answered shutting_down");
      } catch (const Error& e) {
        v.add(std::string("the side queue's producer got ") + e.what());
      }
    });
  }
  for (auto& t : producers)
    t.join();
  if (side_producer.joinable()) side_producer.join();
  producing.store(false);
  if (pauser.joinable()) pauser.join();
  if (redriver.joinable()) redriver.join();
  if (stopper.joinable()) stopper.join();
  if (flipper.joinable()) flipper.join();
  q.resume();
  std::uint64_t handed_back = 0;
  // After a mid-run shutdown: wait for the handlers that were running (a hung one returns once
  // its lease lapses), then take back what never ran; a worker that had popped a job as the
  // shutdown came puts it back, so a second pass after the handlers ended takes the rest.
  auto take_back = [&] {
    for (auto& l : q.take_leftovers()) {
      if (l.id > max_id || track[l.id].taken.fetch_add(1) != 0)
        v.add("take_leftovers handed back job " + std::to_string(l.id) + " twice");
      ++handed_back;
    }
  };

  auto deadline = std::chrono::steady_clock::now() + 10min;
  for (;;) {
    QueueCounts c = q.counts();
    if (stopped.load()) {
      if (c.active == 0) {
        take_back();
        if (q.counts().active == 0) break;
      }
    } else if (c.completed + c.dead_lettered + c.cancelled + c.discarded == c.added &&
               c.active == 0 && c.waiting == 0 && c.delayed == 0) {
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      v.add("jobs did not settle within 10 minutes: added " + std::to_string(c.added) + ", ended " +
            std::to_string(c.completed + c.dead_lettered + c.cancelled + c.discarded));
      break;
    }
    std::this_thread::sleep_for(1ms);
  }
  // Every side job completes: none is stranded at the gate the two queues share.
  while (side && side_q->counts().completed < side_jobs) {
    if (std::chrono::steady_clock::now() > deadline) {
      v.add("the side queue completed " + std::to_string(side_q->counts().completed) + " of " +
            std::to_string(side_jobs) + " jobs within 10 minutes");
      break;
    }
    std::this_thread::sleep_for(1ms);
  }
  settled.store(true);
  if (driver.joinable()) driver.join();
  for (auto& t : completers)
    t.join();
  // Coroutines still parked (none once every job ended; some after a mid-run shutdown): freeing
  // the frame drops its AsyncJob's Completion, as a lost callback would.
  for (Call& c : calls)
    if (c.coroutine) c.coroutine.destroy();
  calls.clear();
  ShutdownReport sr = engine.shutdown(10s);
  if (!sr.clean())
    v.add("shutdown found " + std::to_string(sr.not_started.size()) + " unstarted and " +
          std::to_string(sr.still_running.size()) + " running jobs after the drain");

  // One pass over the DLQ (a per-id get() would be quadratic in a long soak).
  struct Filed {
    std::uint32_t attempts, deliveries, stalls;
  };
  std::unordered_map<JobId, Filed> dlq_entries;
  for (const auto& e : q.dlq().list())
    dlq_entries.emplace(e.id, Filed{e.failed_attempts, e.deliveries, e.stalls});
  // Under StallPolicy::own_budget a lapse is not a failed attempt (no attempt_failed event)
  // unless it is the one past the budget, which dead-letters the job with reason lease_expired
  // and is both; so a life's deliveries are its failures, its stalls (less that last one) and
  // its completion. Under count_as_attempt every lapse is also a failure.
  const bool own_budget = cfg.stall_policy == StallPolicy::own_budget;

  Report rep;
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (std::uint64_t id = 1; id <= max_id; ++id) {
    Track& t = track[id];
    std::uint32_t ends = t.completed + t.dead + t.cancelled + t.discarded;
    auto job = [id] { return "job " + std::to_string(id) + ": "; };  // only on a violation
    if (!t.accepted) {
      if (ends || t.started || t.taken) v.add(job() + "events for a job never accepted");
      continue;
    }
    // The checker's account: each life ends once, or its last one is handed back.
    const std::uint32_t lives = 1u + t.redriven, accounted = ends + t.taken;
    if (accounted == lives) {
      ++rep.ok_jobs;
    } else {
      ++(accounted < lives ? rep.lost : rep.duplicated);
      v.add(job() + std::to_string(lives) + " lives, " + std::to_string(ends) + " ends and " +
            std::to_string(t.taken) + " handed back");
    }
    ++rep.accepted;
    rep.completed += t.completed;
    rep.dead_lettered += t.dead;
    rep.cancelled += t.cancelled;
    rep.discarded += t.discarded;
    rep.stalls += t.stalled;
    rep.late_outcomes += t.late;
    rep.deliveries += t.started;
    rep.failed_attempts += t.failed;
    rep.pushbacks += t.pushed;
    if (t.delayed) ++rep.delayed;
    if (accounted != lives) continue;
    if (t.cancel_accepted && !t.cancelled)
      v.add(job() + "cancel() accepted but it did not end cancelled");
    if (t.cancelled && !t.cancel_accepted)
      v.add(job() + "ended cancelled but no cancel() of it was accepted");
    if (t.completed && (t.stalled_mask & delivery_bit(t.completed_delivery))) {
      ++rep.late_applied;
      v.add(job() + "completed by delivery " + std::to_string(t.completed_delivery) +
            " whose lease had lapsed (life " + std::to_string(lives) + ")");
    }
    if (t.redriven || t.taken) continue;  // the checks below count one whole life
    if (t.late != t.stalled)
      v.add(job() + std::to_string(t.stalled) + " lapses but " + std::to_string(t.late) +
            " late outcomes");
    // Starts numbered exactly 1..n: no gap, no repeat (a repeat was reported when it happened).
    const auto all_n =
        static_cast<std::uint16_t>((1u << std::min<std::uint32_t>(t.started, 16)) - 1);
    if (t.started > kMaxDelivery || t.started_mask != all_n)
      v.add(job() + std::to_string(t.started) + " starts, numbered other than 1.." +
            std::to_string(t.started));
    const std::uint32_t ended_deliveries =
        t.failed + (own_budget ? t.stalled.load() - t.stalled_out.load() : 0u) + t.pushed.load();
    if ((t.completed || t.discarded) && ended_deliveries + 1 != t.started)
      v.add(job() + (t.completed ? "completed" : "discarded") + " after " +
            std::to_string(t.started) + " deliveries with " + std::to_string(t.failed) +
            " failures, " + std::to_string(t.stalled) + " stalls and " + std::to_string(t.pushed) +
            " pushbacks");
    if (own_budget && t.stalled > static_cast<std::uint32_t>(QueueOptions{}.max_stalls) + 1)
      v.add(job() + std::to_string(t.stalled) + " stalls, past the budget of " +
            std::to_string(QueueOptions{}.max_stalls));
    if (t.dead) {
      if (ended_deliveries != t.started)
        v.add(job() + "dead-lettered after " + std::to_string(t.started) + " deliveries with " +
              std::to_string(t.failed) + " failures and " + std::to_string(t.stalled) + " stalls");
      auto entry = dlq_entries.find(id);
      if (entry == dlq_entries.end()) {
        v.add(job() + "dead-lettered but not in the DLQ");
      } else if (entry->second.attempts != t.failed || entry->second.deliveries != t.started ||
                 entry->second.stalls != t.stalled) {
        v.add(job() + "DLQ entry says " + std::to_string(entry->second.attempts) + " attempts, " +
              std::to_string(entry->second.deliveries) + " deliveries and " +
              std::to_string(entry->second.stalls) + " stalls; events say " +
              std::to_string(t.failed) + ", " + std::to_string(t.started) + " and " +
              std::to_string(t.stalled));
      }
    }
  }
  if (most_inside.load() > budget && cfg.downstream && !cfg.rate_only_downstream)
    v.add(std::to_string(most_inside.load()) + " handlers inside the downstream at once; its " +
          "concurrency was never above " + std::to_string(budget));
  rep.grouped_started = groups.check([&](std::string what) { v.add(std::move(what)); });
  rep.most_inside = most_inside.load();
  rep.deferred = deferred.load();
  rep.throttled = throttled.load();
  rep.limit_changes = limit_changes.load();
  QueueCounts c = q.counts();
  // A redrive counts as an add of the queue (a new life), not of the producers.
  if (c.added != rep.accepted + redrives.load())
    v.add("queue counted " + std::to_string(c.added) + " adds, producers " +
          std::to_string(rep.accepted) + " and the redriver " + std::to_string(redrives.load()));
  rep.duplicates_merged = dup_merged;
  rep.duplicates_new = dup_new;
  rep.cancels_accepted = cancels_ok;
  rep.pauses = pauses;
  rep.pauses_with_work = pauses_with_work;
  rep.starts_while_paused = pause_watch.starts_while_paused;
  rep.debounced = debounced;
  rep.redriven = redrives;
  rep.handed_back = handed_back;
  rep.delayed_cancelled = delayed_cancelled;
  rep.violations = v.count;
  rep.first_violations = v.first;
  return rep;
}

void print(const Report& r, const Config& c, std::ostream& out) {
  char line[512];
  std::snprintf(line, sizeof line,
                "soak: %llu jobs accepted in %.1f s (%s clock, %u producers, %u workers%s, seed "
                "%llu)\n",
                static_cast<unsigned long long>(r.accepted), r.seconds,
                c.manual_clock ? "manual" : "real", c.producers, c.workers,
                c.shared_pool ? " of the shared pool" : "",
                static_cast<unsigned long long>(c.seed));
  out << line;
  std::snprintf(
      line, sizeof line,
      "  ended: %llu completed, %llu dead-lettered, %llu cancelled, %llu discarded\n"
      "  deliveries %llu, failed attempts %llu, lease lapses %llu, late outcomes fenced "
      "%llu\n"
      "  duplicates merged %llu, re-adds after the window %llu, cancels accepted %llu, "
      "delayed %llu\n"
      "  pauses %llu (%llu holding back work, %llu starts already under way)\n",
      static_cast<unsigned long long>(r.completed),
      static_cast<unsigned long long>(r.dead_lettered),
      static_cast<unsigned long long>(r.cancelled), static_cast<unsigned long long>(r.discarded),
      static_cast<unsigned long long>(r.deliveries),
      static_cast<unsigned long long>(r.failed_attempts), static_cast<unsigned long long>(r.stalls),
      static_cast<unsigned long long>(r.late_outcomes),
      static_cast<unsigned long long>(r.duplicates_merged),
      static_cast<unsigned long long>(r.duplicates_new),
      static_cast<unsigned long long>(r.cancels_accepted),
      static_cast<unsigned long long>(r.delayed), static_cast<unsigned long long>(r.pauses),
      static_cast<unsigned long long>(r.pauses_with_work),
      static_cast<unsigned long long>(r.starts_while_paused));
  out << line;
  if (c.async > 0) {
    std::snprintf(line, sizeof line, "  async: %llu deliveries completed %s\n",
                  static_cast<unsigned long long>(r.deferred),
                  c.coroutines ? "by a resumed coroutine (rail::Task)" : "by a Completion");
    out << line;
  }
  if (c.groups > 0) {
    std::snprintf(line, sizeof line, "  FIFO groups: %llu grouped jobs started, in %u groups\n",
                  static_cast<unsigned long long>(r.grouped_started),
                  std::max<std::uint32_t>(1, c.groups / c.producers) * c.producers);
    out << line;
  }
  if (c.downstream) {
    std::snprintf(
        line, sizeof line,
        "  downstream: %llu pushbacks, %llu throttled, %llu limit changes, at most %llu "
        "handlers inside (concurrency %u)\n",
        static_cast<unsigned long long>(r.pushbacks), static_cast<unsigned long long>(r.throttled),
        static_cast<unsigned long long>(r.limit_changes),
        static_cast<unsigned long long>(r.most_inside), std::max<std::uint32_t>(1, c.workers / 2));
    out << line;
  }
  std::snprintf(
      line, sizeof line,
      "  debounced %llu, redriven %llu, delayed jobs cancelled at once %llu, handed "
      "back after shutdown %llu\n"
      "checker: ok %llu, lost %llu, duplicated %llu, late outcomes applied %llu\n",
      static_cast<unsigned long long>(r.debounced), static_cast<unsigned long long>(r.redriven),
      static_cast<unsigned long long>(r.delayed_cancelled),
      static_cast<unsigned long long>(r.handed_back), static_cast<unsigned long long>(r.ok_jobs),
      static_cast<unsigned long long>(r.lost), static_cast<unsigned long long>(r.duplicated),
      static_cast<unsigned long long>(r.late_applied));
  out << line;
  for (const auto& s : r.first_violations)
    out << "  VIOLATION " << s << "\n";
  out << (r.ok() ? "invariants: all hold\n"
                 : "invariants: " + std::to_string(r.violations) + " violations\n");
}

}  // namespace rail::soak
