// A downstream per job (JobOptions::downstream) under races: several queues whose jobs
// name several downstreams, the queue's own among them, under the gate's wake protocol (blocked
// rings per link, the leader on the wheel), cancels, debounces, pauses, run-time limit changes,
// pushbacks, async completions, shutdown. Every job must end exactly once, no gate may
// hold more calls than its concurrency, and every gate must end with nothing waiting or inside.
// Timed cases run inline under a ManualClock; threaded ones bound their waits (eventually,
// watchdog). Seeds: RAIL_REVIEW_SEED, else random (printed on failure).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "rail/rail.hpp"
#include "support/downstream_options.hpp"
#include "support/eventually.hpp"
#include "support/inline_fuzz.hpp"
#include "support/sanitized.hpp"
#include "support/watchdog.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;

std::uint64_t base_seed() {
  if (const char* s = std::getenv("RAIL_REVIEW_SEED")) return std::strtoull(s, nullptr, 0);
  static const std::uint64_t seed = std::random_device{}();
  return seed;
}

std::string gate_name(std::uint64_t g) {
  std::string name = "g";
  name += std::to_string(g);
  return name;
}

JobOptions calling_job(std::string downstream) {
  JobOptions o;
  o.downstream = std::move(downstream);
  return o;
}

// --- inline, manual clock -------------------------------------------------------------------

#ifdef RAIL_SANITIZED
constexpr std::uint64_t kInlineSeeds = 4;
#else
constexpr std::uint64_t kInlineSeeds = 30;
#endif

// Three gates (g0, g1, g2) with random permits and rates; queue a calls g0, b none, c g1; each
// add names one of "", g0, g1, g2 at random. Handlers push back, retry, or defer (a Completion
// completed at a later step). Cancels, debounces, pauses, promotes/change_delays, limit changes
// and downstream pauses run at random. Then everything resumes and time runs out: no job may be
// stranded, and every gate must be empty.
void fuzz_inline(std::uint64_t seed, bool fixed) {
  SCOPED_TRACE("seed " + std::to_string(seed) + (fixed ? " fixed" : " changes"));
  std::mt19937_64 rng(seed);
  ManualClock clock;
  Engine engine{EngineOptions{.clock = &clock, .mode = Mode::inlined}};
  std::vector<Downstream> gates;
  std::vector<std::uint32_t> limit;
  for (int g = 0; g < 3; ++g) {
    const auto conc = static_cast<std::uint32_t>(rng() % 3);
    std::optional<RateLimit> rate;
    if (rng() % 3 != 0) rate = test::fuzz_rate(rng);
    gates.push_back(engine.declare_downstream(
        gate_name(g), {.concurrency = test::limit_or_none(conc), .rate = rate}));
    limit.push_back(conc);
  }
  std::vector<Queue<int>> queues;
  queues.push_back(engine.declare_queue<int>("a", test::calling("g0")));
  queues.push_back(engine.declare_queue<int>("b", QueueOptions{}));
  queues.push_back(engine.declare_queue<int>("c", test::calling("g1")));
  const int own[3] = {0, -1, 1};
  test::FuzzJobs jobs;
  std::map<JobId, int> done;
  std::map<JobId, int> gate_of;
  int inside[3] = {0, 0, 0};
  std::deque<std::pair<Completion, int>> open;  // a deferred call and its gate (-1: none)
  auto enter = [&](const Job<int>& j) -> int {
    const int g = gate_of.at(j.id());
    if (g >= 0) {
      ++inside[g];
      if (limit[g] > 0) {
        EXPECT_LE(inside[g], static_cast<int>(limit[g])) << "gate g" << g;
      }
    }
    return g;
  };
  for (auto& q : queues) {
    q.process({.max_pending = 64}, [&](Job<int>& j) -> Outcome {
      const int g = enter(j);
      const std::uint64_t r = rng() % 100;
      if (r < 15 && open.size() < 60) {
        return j.defer([&](Completion c) { open.emplace_back(std::move(c), g); });
      }
      if (g >= 0) --inside[g];
      if (r < 21) return Outcome::pushback(std::chrono::milliseconds(rng() % 300));
      if (r < 27) return Outcome::retry_in(std::chrono::milliseconds(rng() % 200), "again");
      ++done[j.id()];
      return Outcome::done();
    });
  }
  auto complete_one = [&] {
    if (open.empty()) return;
    const std::size_t k = rng() % open.size();
    auto [c, g] = std::move(open[k]);
    open.erase(open.begin() + static_cast<std::ptrdiff_t>(k));
    if (g >= 0) --inside[g];
    const JobId id = c.id();
    const std::uint64_t r = rng() % 10;
    if (r == 0) {
      (void)c.complete(Outcome::pushback(std::chrono::milliseconds(rng() % 200)));
    } else if (r == 1) {
      (void)c.complete(Outcome::retry_in(std::chrono::milliseconds(rng() % 100), "later"));
    } else if (c.complete(Outcome::done())) {
      ++done[id];
    }
  };
  for (int step = 0; step < 400; ++step) {
    const std::size_t qi = rng() % queues.size();
    auto& q = queues[qi];
    switch (rng() % 14) {
      case 0:
      case 1:
      case 2:
      case 3: {
        const int pick = static_cast<int>(rng() % 4) - 1;  // -1: none named
        const auto added =
            q.add("call", 0,
                  test::fuzz_job(rng, calling_job(pick < 0 ? std::string() : gate_name(pick))));
        if (added.status == AddStatus::added) {
          jobs.emplace_back(static_cast<int>(qi), added.id);
          gate_of[added.id] = pick >= 0 ? pick : own[qi];
        }
        break;
      }
      case 4:
        test::fuzz_cancel(rng, queues, jobs);
        break;
      case 5:
        q.pause();
        break;
      case 6:
        q.resume();
        break;
      case 7:
        test::fuzz_retime(rng, queues, jobs);
        break;
      case 8:
        if (!fixed) test::fuzz_set_rate(rng, gates[rng() % 3]);
        break;
      case 9:
        gates[rng() % 3].pause_for(std::chrono::milliseconds(rng() % 200));
        break;
      case 10:
        if (!fixed) {
          const std::size_t g = rng() % 3;
          // Only raised (or unlimited): a lowered limit lets the calls inside finish above it.
          const auto l = static_cast<std::uint32_t>(rng() % 4);
          if (limit[g] != 0 && (l == 0 || l > limit[g])) {
            limit[g] = l;
            gates[g].set_concurrency(test::limit_or_none(l));
          }
        }
        break;
      case 11:
      case 12:
        complete_one();
        break;
      default:
        clock.advance(std::chrono::milliseconds(rng() % 60));
        break;
    }
    engine.run_until_idle();
  }
  for (auto& q : queues)
    q.resume();
  engine.run_until_idle();
  for (int round = 0; round < 10000; ++round) {
    while (!open.empty())
      complete_one();
    engine.run_until_idle();
    auto next = engine.next_timer_in();
    if (!next && open.empty()) break;
    if (next) clock.advance(std::max<Duration>(*next, 1ns));
    engine.run_until_idle();
  }
  test::expect_all_ended(queues, jobs.size());
  for (int g = 0; g < 3; ++g) {
    EXPECT_EQ(gates[g].stats().waiting, 0u) << "g" << g;
    EXPECT_EQ(gates[g].stats().in_flight, 0u) << "g" << g;
  }
  for (const auto& [jq, id] : jobs)
    if (queues[jq].state(id).status == JobStatus::completed) {
      EXPECT_EQ(done[id], 1) << id;
    }
}

TEST(JobDownstreamFuzz, InlineWithFixedLimits) {
  const std::uint64_t base = base_seed();
  for (std::uint64_t k = 0; k < kInlineSeeds; ++k) {
    fuzz_inline(base + k, true);
    if (HasFailure()) return;
  }
}

TEST(JobDownstreamFuzz, InlineWithLimitChanges) {
  const std::uint64_t base = base_seed() ^ 0xABCDEF;
  for (std::uint64_t k = 0; k < kInlineSeeds; ++k) {
    fuzz_inline(base + k, false);
    if (HasFailure()) return;
  }
}

// Queue b's jobs wait at a rate-limited gate (no permit limit) behind a's leader, and b is
// paused. The leader's token comes with a second one: its stepping down wakes one job and its
// admission another (a token is left), both refused by paused b. b's resume hands on one wake:
// that job takes the last token, and with nothing left its admission wakes nobody. No job
// leads, no permit is released to wake one, and b's other jobs wait forever.
void paused_queue_takes_two_wakes(bool per_job) {
  ManualClock clock;
  Engine engine{EngineOptions{.clock = &clock, .mode = Mode::inlined}};
  auto api = engine.declare_downstream("api", {.rate = RateLimit::token_bucket(2, 1s, 2)});
  auto a = engine.declare_queue<int>("a", per_job ? QueueOptions{} : test::calling("api"));
  auto b = engine.declare_queue<int>("b", per_job ? QueueOptions{} : test::calling("api"));
  const JobOptions o = per_job ? calling_job("api") : JobOptions{};
  std::vector<std::string> ran;
  a.process({},
            [&](Job<int>& j) { ran.push_back(std::string("a").append(std::to_string(j.data()))); });
  b.process({},
            [&](Job<int>& j) { ran.push_back(std::string("b").append(std::to_string(j.data()))); });
  (void)a.add("call", 1, o);
  (void)a.add("call", 2, o);
  engine.run_until_idle();  // both tokens taken
  (void)a.add("call", 3, o);
  engine.run_until_idle();  // leads
  for (int i = 1; i <= 3; ++i)
    (void)b.add("call", i, o);
  engine.run_until_idle();  // blocked behind a3
  ASSERT_EQ(api.stats().waiting, 3u);
  b.pause();
  clock.advance(1s);  // two tokens: a3 takes one, and wakes for the other go to paused b
  engine.run_until_idle();
  b.resume();
  engine.run_until_idle();
  for (int s = 0; s < 5; ++s) {
    clock.advance(1s);
    engine.run_until_idle();
  }
  EXPECT_EQ(ran.size(), 6u);
  EXPECT_EQ(b.counts().completed, 3u) << "b's jobs stranded at the gate";
  EXPECT_EQ(api.stats().waiting, 0u);
}

TEST(JobDownstreamInline, APausedQueueThatRefusedTwoWakesStrandsNoJobOnResume) {
  paused_queue_takes_two_wakes(false);
}

TEST(JobDownstreamInline, APausedQueueThatRefusedTwoWakesStrandsNoJobNamingTheGate) {
  paused_queue_takes_two_wakes(true);
}

// --- threaded -------------------------------------------------------------------------------

#ifdef RAIL_SANITIZED
constexpr int kRounds = 2;
constexpr int kPerProducer = 400;
#else
constexpr int kRounds = 3;
constexpr int kPerProducer = 700;
#endif

// Five queues (two calling a downstream of their own, three none; dedicated workers and the
// shared pool, one with async completions) and six downstreams named per job, first named by
// three producers at once (racing link_to), with a canceller and a thread that pauses and resumes
// queues, pauses downstreams and changes rates and (raises) permits. No gate may ever hold more
// calls than its highest concurrency; every job must end once; every gate must end empty.
void threaded_round(std::uint64_t seed, bool with_changes) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 seed_rng(seed);
  constexpr int kGates = 6;
  constexpr int kProducers = 3;
  constexpr int kJobs = kProducers * kPerProducer;
  Engine engine(EngineOptions{.workers = 3});
  std::vector<Downstream> gates;
  std::vector<std::atomic<int>> high_limit(kGates);
  for (int g = 0; g < kGates; ++g) {
    const auto conc = static_cast<std::uint32_t>(1 + seed_rng() % 3);
    std::optional<RateLimit> rate;
    if (g % 2 == 1) rate = RateLimit::token_bucket(20'000, 1s, 5 + seed_rng() % 20);
    gates.push_back(engine.declare_downstream(
        gate_name(g), {.concurrency = test::limit_or_none(conc), .rate = rate}));
    high_limit[g].store(static_cast<int>(conc));
  }
  std::vector<Queue<int>> queues;
  queues.push_back(engine.declare_queue<int>("own0", test::calling("g0")));
  queues.push_back(engine.declare_queue<int>("own1", test::calling("g1")));
  queues.push_back(engine.declare_queue<int>("none", QueueOptions{}));
  queues.push_back(engine.declare_queue<int>("pool", QueueOptions{}));
  queues.push_back(engine.declare_queue<int>("async", test::calling("g2")));
  const int own[5] = {0, 1, -1, -1, 2};
  std::vector<std::atomic<int>> gate_of(kJobs), where(kJobs), done(kJobs);
  std::vector<std::atomic<JobId>> ids(kJobs);
  std::vector<std::atomic<int>> inside(kGates);
  std::atomic<int> over{0};
  auto enter = [&](int data) {
    const int g = gate_of[data].load();
    if (g < 0) return g;
    const int now = inside[g].fetch_add(1) + 1;
    if (now > high_limit[g].load()) over.fetch_add(1);
    return g;
  };
  auto leave = [&](int g) {
    if (g >= 0) inside[g].fetch_sub(1);
  };
  auto outcome = [&](const Job<int>& j) {
    const std::uint64_t r = static_cast<std::uint64_t>(j.id()) * 0x9E3779B97F4A7C15ull;
    if (j.deliveries() == 1 && r % 37 == 0) return Outcome::pushback(200us);
    if (j.deliveries() == 1 && r % 41 == 1) return Outcome::retry_in(100us, "again");
    return Outcome::done();
  };
  auto handler = [&](Job<int>& j) -> Outcome {
    const int g = enter(j.data());
    std::this_thread::yield();
    leave(g);
    Outcome out = outcome(j);
    if (out.kind() == Outcome::Kind::done) done[j.data()].fetch_add(1);
    return out;
  };
  queues[0].process({.concurrency = 3}, handler);
  queues[1].process({.concurrency = 2}, handler);
  queues[2].process({.concurrency = 3}, handler);
  queues[3].process(WorkerOptions::shared(), handler);
  // Async: calls complete on a completer thread, holding their permits until then.
  std::mutex open_mu;
  std::deque<std::pair<Completion, int>> open;  // (call, data)
  queues[4].process({.concurrency = 2, .max_pending = 4096}, [&](Job<int>& j) -> Outcome {
    (void)enter(j.data());
    const std::lock_guard lock(open_mu);
    // data + a flag: its first delivery, which may push back
    return j.defer([&](Completion c) {
      open.emplace_back(std::move(c), j.deliveries() == 1 ? j.data() | (1 << 30) : j.data());
    });
  });
  std::atomic<int> producers_left{kProducers};
  std::atomic<bool> all_done{false};
  std::vector<std::thread> threads;
  for (int p = 0; p < kProducers; ++p) {
    threads.emplace_back([&, p, s = seed_rng()] {
      std::mt19937_64 rng(s);
      for (int i = 0; i < kPerProducer; ++i) {
        const int data = p * kPerProducer + i;
        const int qi = static_cast<int>(rng() % queues.size());
        // Each producer names the gates in another order first: first uses race.
        const int pick = i < kGates ? (i + 2 * p) % kGates : static_cast<int>(rng() % 8) - 2;
        JobOptions o = calling_job(pick < 0 ? std::string() : gate_name(pick));
        if (rng() % 8 == 0) o.delay = std::chrono::microseconds(rng() % 1000);
        o.max_attempts = 100;
        gate_of[data].store(pick >= 0 ? pick : own[qi]);
        where[data].store(qi);
        const auto added = queues[qi].add("call", data, o);
        ASSERT_EQ(added.status, AddStatus::added);
        ids[data].store(added.id);
        if (rng() % 64 == 0) std::this_thread::yield();
      }
      producers_left.fetch_sub(1);
    });
  }
  threads.emplace_back([&, s = seed_rng()] {  // the canceller
    std::mt19937_64 rng(s);
    while (producers_left.load() > 0) {
      const int data = static_cast<int>(rng() % kJobs);
      if (const JobId id = ids[data].load()) (void)queues[where[data].load()].cancel(id);
      std::this_thread::yield();
    }
  });
  threads.emplace_back([&, s = seed_rng()] {  // the completer
    std::mt19937_64 rng(s);
    for (;;) {
      std::pair<Completion, int> call;
      {
        const std::lock_guard lock(open_mu);
        if (!open.empty()) {
          const std::size_t k = rng() % open.size();
          call = std::move(open[k]);
          open.erase(open.begin() + static_cast<std::ptrdiff_t>(k));
        }
      }
      if (!call.first) {
        if (all_done.load()) return;
        std::this_thread::yield();
        continue;
      }
      const bool first = (call.second & (1 << 30)) != 0;
      call.second &= ~(1 << 30);
      leave(gate_of[call.second].load());
      const Outcome out =
          first && call.first.id() % 29 == 0 ? Outcome::pushback(100us) : Outcome::done();
      const bool is_done = out.kind() == Outcome::Kind::done;
      if (call.first.complete(out) && is_done) done[call.second].fetch_add(1);
    }
  });
  threads.emplace_back([&, s = seed_rng()] {  // the flipper
    std::mt19937_64 rng(s);
    while (producers_left.load() > 0) {
      auto& gw = gates[rng() % kGates];
      switch (rng() % 7) {
        case 0:
          if (with_changes) {
            const int l = 1 + static_cast<int>(rng() % 4);
            const int g = static_cast<int>(&gw - gates.data());
            if (l > high_limit[g].load()) {
              high_limit[g].store(l);  // before: a call it admits may start at once
              gw.set_concurrency(static_cast<std::uint32_t>(l));
            }
          }
          break;
        case 1:
          if (with_changes)
            gw.set_rate(RateLimit::token_bucket(5'000 + rng() % 20'000, 1s, 1 + rng() % 30));
          break;
        case 2:
          queues[rng() % queues.size()].pause();
          break;
        case 3:
          for (auto& q : queues)
            q.resume();
          break;
        case 4:
          gw.pause_for(std::chrono::microseconds(rng() % 400));
          break;
        default:
          break;
      }
      std::this_thread::yield();
    }
  });
  for (std::size_t t = 0; t < kProducers + 1u; ++t)
    threads[t].join();
  for (auto& q : queues)
    q.resume();
  for (auto& q : queues) {
    if (!q.wait_idle(20s)) {
      std::string gs;
      for (int g = 0; g < kGates; ++g) {
        const auto st = gates[g].stats();
        gs += " g" + std::to_string(g) + "{in " + std::to_string(st.in_flight) + "/" +
              std::to_string(st.concurrency.value_or(0)) + " wait " + std::to_string(st.waiting) +
              " tok " + std::to_string(st.tokens.value_or(-1)) + " paused " +
              (st.paused_until
                   ? std::to_string(
                         (*st.paused_until - std::chrono::steady_clock::now().time_since_epoch())
                             .time_since_epoch()
                             .count())
                   : "n") +
              " inside " + std::to_string(inside[g].load()) + "}";
      }
      std::size_t n_open;
      {
        const std::lock_guard lock(open_mu);
        n_open = open.size();
      }
      all_done.store(true);
      for (std::size_t t = kProducers + 1u; t < threads.size(); ++t)
        threads[t].join();
      for (const auto& info : q.jobs(JobStatus::active, 5))
        gs += " active " + std::to_string(info.id) + " deliveries " +
              std::to_string(info.state.deliveries);
      for (const auto& info : q.jobs(JobStatus::waiting, 5))
        gs += " waiting " + std::to_string(info.id) + " deliveries " +
              std::to_string(info.state.deliveries);
      FAIL() << q.name() << ": " << q.counts().waiting << " waiting, " << q.counts().delayed
             << " delayed, " << q.counts().active << " active; open " << n_open << ";" << gs;
    }
  }
  all_done.store(true);
  for (std::size_t t = kProducers + 1u; t < threads.size(); ++t)
    threads[t].join();
  EXPECT_EQ(over.load(), 0) << "a gate held more calls than its concurrency";
  std::uint64_t ended = 0;
  for (auto& q : queues) {
    const auto n = q.counts();
    EXPECT_EQ(n.waiting + n.delayed + n.active, 0u) << q.name();
    EXPECT_EQ(n.dead_lettered, 0u) << q.name();
    ended += n.completed + n.cancelled + n.dead_lettered;
  }
  EXPECT_EQ(ended, static_cast<std::uint64_t>(kJobs));
  for (int g = 0; g < kGates; ++g) {
    EXPECT_EQ(gates[g].stats().waiting, 0u) << "g" << g;
    EXPECT_EQ(gates[g].stats().in_flight, 0u) << "g" << g;
  }
  for (int d = 0; d < kJobs; ++d) {
    const auto st = queues[where[d].load()].state(ids[d].load()).status;
    if (st == JobStatus::completed) {
      EXPECT_EQ(done[d].load(), 1) << "job " << d;
    } else {
      EXPECT_EQ(st, JobStatus::cancelled) << "job " << d;
      EXPECT_LE(done[d].load(), 1) << "job " << d;
    }
  }
}

TEST(JobDownstreamThreaded, ManyQueuesManyDownstreamsNamedPerJob) {
  const test::Watchdog watchdog(300s, "ManyQueuesManyDownstreamsNamedPerJob");
  const std::uint64_t base = base_seed();
  for (int r = 0; r < kRounds; ++r) {
    threaded_round(base + static_cast<std::uint64_t>(r), r % 2 == 1);
    if (HasFailure()) return;
  }
}

// Shutdown with jobs blocked at several downstreams named per job (two queues, one of them
// calling its own) and one call holding each gate's only permit: every job is either run or
// handed back by take_leftovers, exactly once, and every permit comes back.
TEST(JobDownstreamThreaded, ShutdownHandsBackTheJobsWaitingAtGatesNamedPerJob) {
  const test::Watchdog watchdog(120s, "ShutdownHandsBackTheJobsWaitingAtGatesNamedPerJob");
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    Engine engine;
    std::vector<Downstream> gates;
    for (int g = 0; g < 3; ++g)
      gates.push_back(engine.declare_downstream(
          gate_name(g), {.concurrency = 1, .rate = RateLimit::token_bucket(1000, 1s, 5)}));
    auto a = engine.declare_queue<int>("a", test::calling("g0"));
    auto b = engine.declare_queue<int>("b", QueueOptions{});
    std::atomic<bool> hold{true};
    constexpr int kJobs = 600;
    std::vector<std::atomic<int>> ran(kJobs);
    auto handler = [&](Job<int>& j) {
      if (j.data() < 3)
        while (hold.load())
          std::this_thread::yield();
      ran[j.data()].fetch_add(1);
    };
    a.process({.concurrency = 3}, handler);
    b.process(WorkerOptions::shared(), handler);
    for (int g = 0; g < 3; ++g)
      (void)(g % 2 ? b : a).add("call", g, calling_job(gate_name(g)));
    ASSERT_TRUE(test::eventually([&] {
      return gates[0].stats().in_flight + gates[1].stats().in_flight + gates[2].stats().in_flight ==
             3;
    }));
    for (int i = 3; i < kJobs; ++i)
      (void)(i % 2 ? a : b)
          .add("call", i, calling_job(i % 4 == 0 ? std::string() : gate_name(i % 3)));
    std::thread releaser([&] {
      std::this_thread::yield();
      hold.store(false);
    });
    (void)engine.shutdown(10s);
    releaser.join();
    std::vector<int> left(kJobs, 0);
    for (auto* q : {&a, &b})
      for (auto& l : q->take_leftovers())
        ++left[l.data];
    for (int i = 0; i < kJobs; ++i)
      EXPECT_EQ(ran[i].load() + left[i], 1) << "job " << i;
    for (int g = 0; g < 3; ++g)
      EXPECT_TRUE(test::eventually([&] { return gates[g].stats().in_flight == 0; }, 10s));
  }
}

}  // namespace
}  // namespace rail
