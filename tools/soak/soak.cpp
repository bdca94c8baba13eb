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
#include <stop_token>
#include <thread>
#include <unordered_map>

#include "rail/rail.hpp"
#include "soak/async_calls.hpp"
#include "soak/batch_watch.hpp"
#include "soak/fates.hpp"
#include "soak/flow_watch.hpp"
#include "soak/group_ledger.hpp"
#include "soak/hang.hpp"
#include "soak/job_ledger.hpp"
#include "soak/pause_watch.hpp"
#include "soak/reporter.hpp"
#include "soak/share_watch.hpp"
#include "soak/violations.hpp"

namespace rail::soak {
namespace {

using namespace std::chrono_literals;

/// ShutdownBegan: thrown by a producer's add loop when the engine answers shutting_down, to end
/// production from wherever the add was.
struct ShutdownBegan {};

std::atomic<std::uint64_t> g_runs{0};

}  // namespace

Report run(const Config& cfg) {
  const bool side = cfg.side_queue && cfg.downstream && cfg.shutdown_at <= 0;
  const std::uint64_t side_jobs = side ? cfg.jobs / 10 : 0;
  // Job ids are the engine's: the side queue's take some of them.
  const std::uint64_t max_id = cfg.jobs * 2 + side_jobs + 1024;
  if (!cfg.leases && cfg.timeout == Duration::max() && cfg.hang > 0)
    throw std::invalid_argument("soak: Config::hang is " + std::to_string(cfg.hang) +
                                " with leases and timeouts off; a hang waits for its lease to "
                                "lapse or its attempt to time out, so expected 0");
  JobLedger ledger(max_id);
  ShareWatch shares(cfg, max_id);
  BatchWatch batches(cfg.batch_size);
  FlowWatch flows(cfg.flow_every);
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
    ledger.on_event(e, v);
    if (flows.on()) flows.on_event(e, ledger, v);
    shares.on_event(e);
    switch (e.kind) {
      case EventKind::started:
        groups.on_start(e.job_id);
        if (!pause_watch.on_start())
          v.add("job " + std::to_string(e.job_id) + " started while its queue was paused, after " +
                "the same worker had started another one in that pause");
        break;
      case EventKind::completed:
      case EventKind::dead_lettered:
      case EventKind::cancelled:
      case EventKind::discarded:
        groups.on_end(e.job_id);
        break;
      case EventKind::debounced:
        debounced.fetch_add(1, std::memory_order_relaxed);
        break;
      case EventKind::throttled:
        throttled.fetch_add(1, std::memory_order_relaxed);
        break;
      default:
        break;
    }
  });

  QueueOptions qo;
  qo.capacity = cfg.capacity;
  qo.visibility_timeout = cfg.leases ? Duration{cfg.visibility} : Duration::max();
  qo.timeout = cfg.timeout;
  qo.expire_after = cfg.expire_after;
  qo.stall_policy = cfg.stall_policy;
  qo.defaults.max_attempts = 3;
  qo.defaults.backoff = Backoff::fixed(1ms).with_jitter(Jitter::full);
  qo.dlq.max_entries = max_id;
  shares.declare(qo);
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
  const Reporter reporter(cfg, q);  // live progress, if asked for: stops before the queue goes
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
  // Async deliveries (cfg.async of them): completed later by AsyncCalls' threads.
  AsyncCalls calls(cfg, inside);
  // A delivery handled where it runs (every one but the async share), by either kind of handler.
  // A handler of the capped tenant's job counts as inside it (invariant 8) until it returns or
  // parks: a redriven life has no tenant.
  auto enter_tenant = [&](JobId id, const Payload& p) {
    return shares.enter(p.plan, ledger.in_range(id) && ledger.track(id).redriven.load() == 0);
  };
  auto run_here = [&](Fate f, auto& j, bool tenant_counted) -> Outcome {
    struct Leave {
      std::atomic<std::uint32_t>& n;
      ShareWatch& shares;
      bool tenant_counted;
      ~Leave() {
        n.fetch_sub(1);
        shares.leave(tenant_counted);
      }
    } leave{inside, shares, tenant_counted};
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
        hang(j, cfg.manual_clock, v);  // until fenced; its outcome must be ignored
        return Outcome::done();
    }
    return Outcome::done();
  };
  if (cfg.coroutines) {
    q.process(wo, [&](AsyncJob<Payload> j) -> Task {
      enter_downstream();
      const Fate f = fate(cfg, j.data().plan, j.deliveries());
      if (calls.is_async(j.data(), j.deliveries())) {
        co_await calls.park(f, &j);  // a completer resumes it
        if (f == Fate::throw_) throw std::runtime_error("handler threw after resuming");
        co_return async_outcome(f);
      }
      co_return run_here(f, j, enter_tenant(j.id(), j.data()));
    });
  } else {
    q.process(wo, [&](Job<Payload>& j) -> Outcome {
      if (flows.on()) flows.on_start(j.id(), j.children(), v);
      enter_downstream();
      const Fate f = fate(cfg, j.data().plan, j.deliveries());
      if (calls.is_async(j.data(), j.deliveries())) {
        // Throws Error(capacity) only past max_pending: a failure.
        return j.defer([&calls, f](Completion c) { calls.defer(std::move(c), f); });
      }
      return run_here(f, j, enter_tenant(j.id(), j.data()));
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
  calls.start();
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
          if (ledger.in_range(e.id)) ledger.track(e.id).redrive_tried.store(1);
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
        ledger.track(r.id).accepted.store(1);
        accepted_count.fetch_add(1);
      };
      // add(o, fresh): one add, repeated while the queue is full; its plan picks its faults, its
      // priority and its tenant. A fresh job (no dedup id) joins the producer's batch, if any.
      BatchWatch::Producer batch;
      FlowWatch::Producer flow;
      auto add = [&](JobOptions o, bool fresh = false) {
        const std::uint64_t plan = rng();
        shares.choose(o, plan);
        for (;;) {
          AddReceipt r = !(fresh && batches.on())
                             ? q.add("soak", Payload{plan}, o)
                             : batches.add(engine, batch, [&](JobBatch& b) {
                                 return b.add(q, "soak", Payload{plan}, o).added();
                               });
          if (r.status == AddStatus::shutting_down) throw ShutdownBegan{};  // ends production
          if (r.status == AddStatus::added) shares.note_added(r.id, plan, o.delay.count() > 0);
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
                                   ledger.track(l.first).redrive_tried.load() != 0;
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
          bool parent = !dup && flows.make_parent(flow, o);
          TimePoint before = clock.now();
          AddReceipt r;
          try {
            r = add(o, !dup);
          } catch (const Error& e) {
            // A child that ended may be forgotten by its queue's history already (a short one:
            // the soak's capacity): refused, the job is added without children.
            if (!parent || e.code() != ErrorCode::invalid_option) throw;
            flows.refused();
            o.after.clear();
            parent = false;
            r = add(o, !dup);
          }
          if (r.status != AddStatus::added) {
            v.add("a fresh add returned " + std::string(to_string(r.status)));
            continue;
          }
          accept(r);
          if (!dup && flows.on()) FlowWatch::accepted(flow, r.id);
          // Its edges cancel it when a child fails so: a cancel the ledger must accept.
          if (parent) ledger.track(r.id).cancel_accepted.store(2);
          // A parent waits for its children: its start is not its group's add order.
          if (groups.on()) groups.note_added(r.id, group, !dup && !parent && o.delay.count() == 0);
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
              ledger.track(r.id).cancel_accepted.store(1);
              cancels_ok.fetch_add(1);
              delayed_cancelled.fetch_add(1);
            }
          } else if (u(rng) < cfg.cancel) {
            to_cancel.push_back(r.id);
          }
          if (to_cancel.size() > 8 || (n + 1 == per && !to_cancel.empty())) {
            for (JobId id : to_cancel)
              if (q.cancel(id)) {
                ledger.track(id).cancel_accepted.store(1);
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
        // Engine::batch refuses once shutdown began, as an add answers shutting_down.
        if (e.code() != ErrorCode::shutting_down || cfg.shutdown_at <= 0)
          v.add(std::string("a producer got ") + e.what());
      }
      batches.finish(batch);
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
      if (!ledger.in_range(l.id) || ledger.track(l.id).taken.fetch_add(1) != 0)
        v.add("take_leftovers handed back job " + std::to_string(l.id) + " twice");
      ++handed_back;
    }
  };

  // Well inside the presets' ctest timeout (600 s for the release preset, with the production
  // phase before this), so a job that never settles is explained rather than killed.
  constexpr auto kSettleWithin = 3min;
  const std::string within = "within " + std::to_string(kSettleWithin.count()) + " minutes";
  auto deadline = std::chrono::steady_clock::now() + kSettleWithin;
  for (;;) {
    QueueCounts c = q.counts();
    if (stopped.load()) {
      if (c.active == 0) {
        take_back();
        if (q.counts().active == 0) break;
      }
    } else if (c.completed + c.dead_lettered + c.cancelled + c.discarded == c.added &&
               c.active == 0 && c.waiting == 0 && c.delayed == 0 && c.waiting_children == 0) {
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      v.add("jobs did not settle " + within + ": added " + std::to_string(c.added) + ", ended " +
            std::to_string(c.completed + c.dead_lettered + c.cancelled + c.discarded));
      for (const JobStatus st :
           {JobStatus::waiting, JobStatus::delayed, JobStatus::waiting_children, JobStatus::active})
        for (const JobInfo& j : q.jobs(st, 3))
          v.add("  unsettled job " + std::to_string(j.id) + ": " + q.explain(j.id).text);
      break;
    }
    std::this_thread::sleep_for(1ms);
  }
  // Every side job completes: none is stranded at the gate the two queues share.
  while (side && side_q->counts().completed < side_jobs) {
    if (std::chrono::steady_clock::now() > deadline) {
      v.add("the side queue completed " + std::to_string(side_q->counts().completed) + " of " +
            std::to_string(side_jobs) + " jobs " + within);
      break;
    }
    std::this_thread::sleep_for(1ms);
  }
  settled.store(true);
  if (driver.joinable()) driver.join();
  calls.settle();  // coroutines still parked (after a mid-run shutdown) are destroyed
  ShutdownReport sr = engine.shutdown(10s);
  if (!sr.clean())
    v.add("shutdown found " + std::to_string(sr.not_started.size()) + " unstarted and " +
          std::to_string(sr.still_running.size()) + " running jobs after the drain");

  // One pass over the DLQ (a per-id get() would be quadratic in a long soak).
  std::unordered_map<JobId, DlqFiled> dlq_entries;
  for (const auto& e : q.dlq().list())
    dlq_entries.emplace(e.id, DlqFiled{e.failed_attempts, e.deliveries, e.stalls});

  Report rep;
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ledger.account(cfg, dlq_entries, rep, v);
  shares.report(rep, v);
  if (most_inside.load() > budget && cfg.downstream && !cfg.rate_only_downstream)
    v.add(std::to_string(most_inside.load()) + " handlers inside the downstream at once; its " +
          "concurrency was never above " + std::to_string(budget));
  rep.grouped_started = groups.check([&](std::string what) { v.add(std::move(what)); });
  const BatchWatch::Totals bt = batches.check(ledger, [&](std::string w) { v.add(std::move(w)); });
  rep.batches = bt.batches;
  rep.batches_succeeded = bt.succeeded;
  rep.parents_started = flows.parents_started();
  rep.dependency_failed = flows.dependency_failed();
  rep.parents_refused = flows.parents_refused();
  rep.most_inside = most_inside.load();
  rep.deferred = calls.deferred();
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

}  // namespace rail::soak
