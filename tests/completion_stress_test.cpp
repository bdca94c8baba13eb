// Stress of async completion where its stale Completions meet the DLQ's redrive and a debounce,
// and of concurrent adds reaching a queue's limit of downstream links. Real-clock engines with
// 1-2 ms leases, oversubscribed (6 workers, 3 completers, a redriver or producers on 2 cores).
// Judges: per job id, begins (added, redriven) equal ends (completed, dead_lettered, cancelled,
// discarded) at quiescence; payloads carry a checksum that every reader checks; a completion
// made after its delivery was fenced returns false and counts as a late outcome; after the
// round the queue holds exactly `capacity` jobs (a slot lost or freed twice shows); TSan.
// Seeds: RAIL_STRESS_SEED=<n> replays a failing round's seed (each failure names it).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "rail/rail.hpp"
#include "support/downstream_options.hpp"
#include "support/eventually.hpp"
#include "support/inline_engine.hpp"
#include "support/watchdog.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;

std::uint64_t base_seed() {
  const char* env = std::getenv("RAIL_STRESS_SEED");
  return env != nullptr ? std::strtoull(env, nullptr, 10) : std::random_device{}();
}

// --- payloads ---------------------------------------------------------------------------------

std::uint64_t fnv1a(std::uint64_t key, const std::string& s) {
  std::uint64_t h = 0xcbf29ce484222325ull ^ key;
  for (const char ch : s)
    h = (h ^ static_cast<unsigned char>(ch)) * 0x100000001b3ull;
  return h;
}

/// Sealed: a payload whose body (on the heap: past the small-string buffer) is sealed by a
/// checksum over its key, so a torn, moved-from or destroyed payload fails intact().
struct Sealed {
  std::uint64_t key = 0;
  std::string body;
  std::uint64_t sum = 0;

  static Sealed make(std::uint64_t key, std::mt19937_64& rng) {
    Sealed s;
    s.key = key;
    s.body.resize(48 + rng() % 160);
    for (char& ch : s.body)
      ch = static_cast<char>('a' + rng() % 26);
    s.sum = fnv1a(key, s.body);
    return s;
  }
  [[nodiscard]] bool intact() const { return body.size() >= 48 && sum == fnv1a(key, body); }
};

/// Boxed: the move-only form, whose DLQ entry takes the payload only once the last pin drops.
struct Boxed {
  std::unique_ptr<Sealed> p;

  static Boxed make(std::uint64_t key, std::mt19937_64& rng) {
    return Boxed{std::make_unique<Sealed>(Sealed::make(key, rng))};
  }
  [[nodiscard]] bool intact() const { return p != nullptr && p->intact(); }
  [[nodiscard]] std::uint64_t key() const { return p ? p->key : ~0ull; }
};

std::uint64_t key_of(const Sealed& s) {
  return s.key;
}
std::uint64_t key_of(const Boxed& b) {
  return b.key();
}

// --- the books --------------------------------------------------------------------------------

/// Ledger: every job's begins and ends as the observer saw them, with its first events, so that
/// an unbalanced job says what happened to it.
class Ledger {
 public:
  void on(const Event& e) {
    const std::lock_guard lock(mu_);
    if (e.kind == EventKind::late_outcome) ++late_;
    if (e.job_id == 0) return;
    Job& j = jobs_[e.job_id];
    if (j.trace.size() < 400) {
      if (!j.trace.empty()) j.trace += ' ';
      j.trace += to_string(e.kind);
    }
    const bool balanced = j.begins == j.ends;
    switch (e.kind) {
      case EventKind::redriven:
        ++j.redriven;
        [[fallthrough]];
      case EventKind::added:
        ++j.begins;
        break;
      case EventKind::completed:
      case EventKind::dead_lettered:
      case EventKind::cancelled:
      case EventKind::discarded:
        ++j.ends;
        break;
      default:
        return;
    }
    if (balanced != (j.begins == j.ends)) open_ += balanced ? 1 : -1;
  }
  /// open(): jobs begun and not (yet) ended, or ended more often than begun.
  [[nodiscard]] long open() const {
    const std::lock_guard lock(mu_);
    return open_;
  }
  [[nodiscard]] std::uint64_t late() const {
    const std::lock_guard lock(mu_);
    return late_;
  }
  [[nodiscard]] int redriven(JobId id) const {
    const std::lock_guard lock(mu_);
    const auto it = jobs_.find(id);
    return it == jobs_.end() ? 0 : it->second.redriven;
  }
  /// unbalanced(): the jobs whose begins and ends differ, with their events (at most 8).
  [[nodiscard]] std::string unbalanced() const {
    const std::lock_guard lock(mu_);
    std::string out;
    int n = 0;
    for (const auto& [id, j] : jobs_) {
      if (j.begins == j.ends) continue;
      if (++n > 8) return out + "...";
      out += "\n  job " + std::to_string(id) + ": " + std::to_string(j.begins) + " begins, " +
             std::to_string(j.ends) + " ends; events: " + j.trace;
    }
    return out;
  }

 private:
  struct Job {
    int begins = 0;
    int ends = 0;
    int redriven = 0;
    std::string trace;
  };
  mutable std::mutex mu_;
  std::unordered_map<JobId, Job> jobs_;
  long open_ = 0;
  std::uint64_t late_ = 0;
};

// --- completers -------------------------------------------------------------------------------

/// Answerers: threads that complete the Completions handlers hand them. A `late` one is held
/// until its delivery is fenced (the lease lapsed: cancelled() turns true for good, the seq
/// only grows), then completed: it must return false. A prompt one is completed at once with
/// prompt(pick), racing the lease; either answer is allowed, false counts as late.
class Answerers {
 public:
  using Prompt = Outcome (*)(std::uint64_t);
  Answerers(unsigned n, std::uint64_t seed, Prompt prompt) : prompt_(prompt) {
    for (unsigned t = 0; t < n; ++t)
      threads_.emplace_back([this, seed, t] { run(seed * 31 + t); });
  }
  Answerers(const Answerers&) = delete;
  Answerers& operator=(const Answerers&) = delete;
  ~Answerers() { stop(); }

  /// defer(job, pending): the handler's Completion, outstanding until answered, and in
  /// `pending` the Outcome the handler returns; empty (counted in refused_defer) if all
  /// max_pending records are out.
  template <class P>
  Completion defer(Job<P>& job, Outcome& pending) {
    outstanding_.fetch_add(1);  // before: a completer may answer before defer() returns here
    try {
      Completion c;
      pending = job.defer([&](Completion given) { c = std::move(given); });
      return c;
    } catch (const Error&) {
      outstanding_.fetch_sub(1);
      refused_defer.fetch_add(1);
      return Completion{};
    }
  }
  void put(Completion c, bool late, std::uint64_t pick) {
    const std::lock_guard lock(mu_);
    inbox_.push_back({std::move(c), late, pick});
  }
  void stop() {
    stop_.store(true);
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }
  [[nodiscard]] long outstanding() const { return outstanding_.load(); }

  std::atomic<std::uint64_t> refused{0};        // complete() returned false
  std::atomic<std::uint64_t> counted{0};        // complete() returned true
  std::atomic<std::uint64_t> late_counted{0};   // a fenced delivery's complete() returned true
  std::atomic<std::uint64_t> refused_defer{0};  // defer() threw (max_pending records all out)

 private:
  struct Parked {
    Completion c;
    bool late;
    std::uint64_t pick;
  };
  void answer(Parked& p) {
    const bool fenced = p.late;  // held until cancelled() said so
    const bool ok = p.c.complete(fenced ? Outcome::done() : prompt_(p.pick));
    (ok ? counted : refused).fetch_add(1);
    if (ok && fenced) late_counted.fetch_add(1);
    outstanding_.fetch_sub(1);
  }
  void run(std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<Parked> held;
    while (!stop_.load()) {
      std::vector<Parked> batch;
      {
        const std::lock_guard lock(mu_);
        batch.swap(inbox_);
      }
      for (Parked& p : batch) {
        if (p.late) {
          held.push_back(std::move(p));
          continue;
        }
        if (rng() % 8 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 1500));
        answer(p);
      }
      // The held ones whose delivery is fenced now, in random order.
      std::shuffle(held.begin(), held.end(), rng);
      auto fenced = std::partition(held.begin(), held.end(),
                                   [](const Parked& p) { return !p.c.cancelled(); });
      for (auto it = fenced; it != held.end(); ++it)
        answer(*it);
      held.erase(fenced, held.end());
      std::this_thread::yield();
    }
  }

  Prompt prompt_;
  std::mutex mu_;
  std::vector<Parked> inbox_;
  std::atomic<long> outstanding_{0};
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

/// expect_exact_capacity(q, cap, make): after quiescence the queue accepts exactly `cap` jobs
/// (parked an hour ahead, so none runs), then refuses one more; they are cancelled again.
template <class P, class Make>
void expect_exact_capacity(Queue<P>& q, std::size_t cap, Make make) {
  JobOptions parked;
  parked.delay = 1h;
  std::vector<JobId> ids;
  const bool filled = test::eventually(
      [&] {
        while (ids.size() < cap) {
          const AddReceipt r = q.add("fill", make(), parked);
          if (r.status != AddStatus::added) return false;  // a slot still on its way back
          ids.push_back(r.id);
        }
        return true;
      },
      5s);
  EXPECT_TRUE(filled) << "only " << ids.size() << " of " << cap
                      << " slots could be filled: a slot was lost (freed under a pin never)";
  EXPECT_EQ(q.add("extra", make(), parked).status, AddStatus::full)
      << "capacity + 1 jobs accepted: a slot was freed twice";
  for (const JobId id : ids)
    EXPECT_TRUE(q.cancel(id)) << "fill job " << id;
}

/// delivery_hash(job, seed): a delivery's random choices, the same for the same seed.
template <class P>
std::uint64_t delivery_hash(const Job<P>& job, std::uint64_t seed) {
  return (job.id() * 0x9E3779B97F4A7C15ull) ^ (job.deliveries() * 0xBF58476D1CE4E5B9ull) ^ seed;
}

/// quiet(q, ledger, answerers): every job begun has ended, every Completion was answered and
/// the queue holds nothing.
template <class P>
bool quiet(Queue<P>& q, const Ledger& ledger, const Answerers& answerers) {
  const QueueCounts c = q.counts();
  return ledger.open() == 0 && answerers.outstanding() == 0 && c.active == 0 && c.waiting == 0 &&
         c.delayed == 0;
}

/// expect_sound_end(q, ledger, answerers, settled, cap, make): the checks every round ends with,
/// once its helper threads stopped: it settled; the books balance; late completions were
/// refused and counted as late outcomes (and raised as such); then exactly `cap` slots.
template <class P, class Make>
void expect_sound_end(Queue<P>& q, const Ledger& ledger, const Answerers& answerers, bool settled,
                      std::size_t cap, Make make) {
  EXPECT_TRUE(settled) << "open jobs " << ledger.open() << ", outstanding completions "
                       << answerers.outstanding() << ", active " << q.counts().active
                       << ", waiting " << q.counts().waiting << ", delayed " << q.counts().delayed
                       << ledger.unbalanced();
  ASSERT_TRUE(q.wait_idle(10s));
  const QueueCounts c = q.counts();
  EXPECT_EQ(answerers.late_counted.load(), 0u) << "a fenced delivery's completion counted";
  EXPECT_GT(answerers.refused.load(), 0u) << "no stale completion came late: nothing was tested";
  EXPECT_EQ(ledger.open(), 0) << ledger.unbalanced();
  EXPECT_EQ(c.late_outcomes, ledger.late()) << "late outcomes counted and raised differ";
  // Every refused completion is a late outcome; so is a synchronous retry after a refused
  // defer, if its lease had lapsed.
  EXPECT_GE(c.late_outcomes, answerers.refused.load());
  EXPECT_LE(c.late_outcomes, answerers.refused.load() + answerers.refused_defer.load());
  expect_exact_capacity(q, cap, make);
  EXPECT_EQ(ledger.open(), 0) << ledger.unbalanced();
}

// --- 1. stale Completions against redrive -------------------------------------------------------

Outcome prompt_for_redrive(std::uint64_t pick) {
  switch (pick % 10) {
    case 0:
    case 1:
      return Outcome::fail("400");
    case 2:
    case 3:
    case 4:
      return Outcome::retry("503");
    default:
      return Outcome::done();
  }
}

/// One round: 300 jobs whose every delivery defers; 1-2 ms leases lapse under the handlers and
/// the held Completions, so the jobs dead-letter (attempts or stalls run out) while stale
/// Completions still pin their slots; a redriver sends DLQ entries back (up to 3 times each)
/// while the completers answer the stale Completions late.
template <class P>
void redrive_round(std::uint64_t seed) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  constexpr int kJobs = 300;
  constexpr std::size_t kCap = 384;
  constexpr int kMaxRedrives = 3;
  std::mt19937_64 rng(seed);
  Ledger ledger;
  std::atomic<int> torn{0};
  Answerers answerers(3, seed, prompt_for_redrive);
  {
    Engine engine(EngineOptions{.timer_tick = 100us, .seed = seed});
    engine.on_event([&](const Event& e) { ledger.on(e); });
    QueueOptions qo;
    qo.capacity = kCap;
    qo.visibility_timeout = std::chrono::milliseconds(1 + seed % 2);
    if (seed % 2 == 0) {  // SQS: a lapse is a failed attempt; the last dead-letters the job
      qo.stall_policy = StallPolicy::count_as_attempt;
      qo.defaults.max_attempts = 1 + static_cast<std::int32_t>(seed / 2 % 2);
    } else {  // BullMQ: no stall survives
      qo.max_stalls = 0;
      qo.defaults.max_attempts = 2;
      qo.defaults.backoff = Backoff::fixed(200us);
    }
    auto q = engine.declare_queue<P>("calls", qo);
    q.process({.concurrency = 6, .max_pending = 4096}, [&](Job<P>& job) -> Outcome {
      if (!job.data().intact()) torn.fetch_add(1);
      const std::uint64_t r = delivery_hash(job, seed);
      Outcome pending;
      Completion c = answerers.defer(job, pending);
      if (!c) return Outcome::retry("max_pending");
      // The handler still reads its payload after the hand-off, at times past its lease (the
      // job may dead-letter and be redriven meanwhile: this slot is pinned until we return).
      if ((r >> 5) % 6 == 0) std::this_thread::sleep_for(std::chrono::microseconds(r % 2500));
      if (!job.data().intact()) torn.fetch_add(1);
      answerers.put(std::move(c), (r >> 9) % 5 < 2, r >> 13);
      if (!job.data().intact()) torn.fetch_add(1);
      return pending;
    });

    std::atomic<bool> stop_redriver{false};
    std::atomic<bool> redriver_idle{false};
    std::atomic<int> redriven{0};
    std::thread redriver([&] {
      std::mt19937_64 local(seed * 7 + 1);
      std::unordered_map<JobId, int> times;
      while (!stop_redriver.load()) {
        std::vector<JobId> ids;
        q.dlq().visit(
            [&](const DeadLetter<P>& e) {
              if (!e.data.intact()) torn.fetch_add(1);
              ids.push_back(e.id);
            },
            0, 128);
        bool any = false;
        for (const JobId id : ids) {
          if (times[id] >= kMaxRedrives) continue;
          any = true;
          if (local() % 3 == 0) continue;  // later
          const RedriveStatus st =
              q.dlq().redrive(id, RedriveOptions{.reset_counters = local() % 2 == 0});
          if (st == RedriveStatus::redriven) {
            ++times[id];
            redriven.fetch_add(1);
          }
        }
        redriver_idle.store(!any);
        std::this_thread::sleep_for(std::chrono::microseconds(local() % 300));
      }
    });

    std::vector<JobId> ids;
    for (int i = 0; i < kJobs; ++i) {
      // Jobs added earlier may already be dead-lettered and redriven while stale Completions
      // still pin their old slots; those count against the capacity until answered, so on a
      // slow machine an add can meet a full queue for a moment. A slot that never came back
      // fails expect_exact_capacity below.
      AddReceipt a;
      ASSERT_TRUE(test::eventually([&] {
        a = q.add("call", P::make(static_cast<std::uint64_t>(i), rng));
        return a.status != AddStatus::full;
      }));
      ASSERT_EQ(a.status, AddStatus::added);
      ids.push_back(a.id);
    }
    const bool settled =
        test::eventually([&] { return quiet(q, ledger, answerers) && redriver_idle.load(); });
    stop_redriver.store(true);
    redriver.join();
    // A redrive as the redriver stopped.
    const bool settled_again = test::eventually([&] { return quiet(q, ledger, answerers); });
    answerers.stop();
    std::uint64_t fill_key = 1'000'000;
    expect_sound_end(q, ledger, answerers, settled && settled_again, kCap,
                     [&] { return P::make(fill_key++, rng); });
    const QueueCounts c = q.counts();
    EXPECT_EQ(torn.load(), 0) << "a handler or the DLQ read a torn payload";
    EXPECT_GT(c.dead_lettered, 0u) << "the round never dead-lettered: it tested nothing";
    EXPECT_GT(redriven.load(), 0) << "the round never redrove";
    int redriven_seen = 0;
    for (const JobId id : ids)
      redriven_seen += ledger.redriven(id);
    EXPECT_EQ(redriven_seen, redriven.load()) << "every redrive raised one redriven event";
    EXPECT_EQ(c.completed + c.dead_lettered + c.discarded,
              static_cast<std::uint64_t>(kJobs + redriven.load()))
        << "completed " << c.completed << ", dead-lettered " << c.dead_lettered;
    EXPECT_EQ(q.dlq().size(), c.dead_lettered - static_cast<std::uint64_t>(redriven.load()));
  }
}

// --- 2. stale Completions against debounce ------------------------------------------------------

Outcome prompt_for_debounce(std::uint64_t pick) {
  switch (pick % 8) {
    case 0:
    case 1:
    case 2:
      return Outcome::retry_in(std::chrono::microseconds(pick / 8 % 2000), "later");
    case 3:
      return Outcome::retry("503");
    case 4:
      return Outcome::fail("400");
    default:
      return Outcome::done();
  }
}

/// key_in(name): the key a job's name "k<n>" stands for; each add's payload carries it.
std::uint64_t key_in(std::string_view name) {
  return name.size() == 2 && name[0] == 'k' ? static_cast<std::uint64_t>(name[1] - '0') : ~0ull;
}

/// One round: three producers debounce 8 dedup ids (a delay, a ttl) into a 48-slot queue whose
/// every delivery defers and lapses within 1 ms. A prompt retry_after (a completer answering
/// while the handler still reads) or a lapse then a retry_after sends the job back to delayed
/// with a handler or a stale Completion still on its slot: a debounce must not replace the
/// payload under a reader (begin_update refuses while pinned) nor the slot be freed or reused.
template <class P>
void debounce_round(std::uint64_t seed) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  constexpr std::size_t kCap = 48;
  constexpr unsigned kKeys = 8;
  constexpr int kAdds = 600;
  Ledger ledger;
  std::atomic<int> torn{0};
  std::atomic<int> foreign{0};  // a payload whose key is not its job's
  Answerers answerers(3, seed, prompt_for_debounce);
  {
    Engine engine(EngineOptions{.timer_tick = 100us, .seed = seed});
    engine.on_event([&](const Event& e) { ledger.on(e); });
    QueueOptions qo;
    qo.capacity = kCap;
    qo.visibility_timeout = 1ms;
    qo.max_stalls = 6;
    auto q = engine.declare_queue<P>("debounced", qo);
    auto check = [&](const Job<P>& job) {
      if (!job.data().intact()) torn.fetch_add(1);
      if (key_of(job.data()) != key_in(job.name())) foreign.fetch_add(1);
    };
    q.process({.concurrency = 6, .max_pending = 4096}, [&](Job<P>& job) -> Outcome {
      check(job);
      const std::uint64_t r = delivery_hash(job, seed);
      Outcome pending;
      Completion c = answerers.defer(job, pending);
      if (!c) return Outcome::retry("max_pending");
      if ((r >> 5) % 6 == 0) std::this_thread::sleep_for(std::chrono::microseconds(r % 2000));
      check(job);
      answerers.put(std::move(c), (r >> 9) % 4 == 0, r >> 13);
      // Still reading while the completer may have sent the job back to delayed (and the
      // producers debounce it): the payload is ours until we return.
      for (std::uint64_t i = 0; i < (r >> 17) % 64; ++i) {
        check(job);
        if (i % 8 == 0) std::this_thread::yield();
      }
      return pending;
    });

    std::atomic<int> debounced{0};
    std::vector<std::thread> producers;
    for (unsigned p = 0; p < 3; ++p)
      producers.emplace_back([&, p] {
        std::mt19937_64 rng(seed * 11 + p);
        for (int i = 0; i < kAdds; ++i) {
          const unsigned k = static_cast<unsigned>(rng() % kKeys);
          const std::string name{'k', static_cast<char>('0' + k)};
          JobOptions jo;
          jo.max_attempts = 1 + static_cast<std::int32_t>(rng() % 3);
          jo.delay = std::chrono::microseconds(rng() % 600);
          jo.dedup.id = name;
          jo.dedup.mode = DedupMode::debounce;
          jo.dedup.ttl = std::chrono::microseconds(200 + rng() % 3000);
          const AddReceipt a = q.add(name, P::make(k, rng), jo);
          if (a.status == AddStatus::debounced) debounced.fetch_add(1);
          if (rng() % 2 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 300));
        }
      });
    for (auto& t : producers)
      t.join();
    const bool settled = test::eventually([&] { return quiet(q, ledger, answerers); });
    answerers.stop();
    std::mt19937_64 rng(seed);
    expect_sound_end(q, ledger, answerers, settled, kCap, [&] { return P::make(9, rng); });
    const QueueCounts c = q.counts();
    EXPECT_EQ(torn.load(), 0) << "a handler read a payload torn under it";
    EXPECT_EQ(foreign.load(), 0) << "a handler read another job's payload (its slot reused)";
    EXPECT_GT(debounced.load(), 0) << "no add debounced: the round tested nothing";
    EXPECT_EQ(c.completed + c.dead_lettered + c.discarded + c.cancelled, c.added);
  }
}

// The race above, step by step on a manual clock: a delivery's stale Completion pins the slot
// of a job that went back to delayed; a debounce then merges (the payload stays), and once the
// stale Completion is answered (late: false) the next debounce replaces the payload again.
using StaleDebounce = test::InlineEngine;

TEST_F(StaleDebounce, ADebounceMergesWhileAStaleCompletionPinsTheDelayedJob) {
  auto q = engine.declare_queue<Sealed>("debounced", {.visibility_timeout = 30s, .max_stalls = 5});
  std::vector<Completion> parked;
  std::vector<std::uint64_t> seen;  // the payload key (here: its version) of each delivery
  q.process({.max_pending = 4}, [&](Job<Sealed>& job) {
    EXPECT_TRUE(job.data().intact());
    seen.push_back(job.data().key);
    return job.defer([&](Completion c) { parked.push_back(std::move(c)); });
  });
  std::mt19937_64 rng(1);
  JobOptions jo;
  jo.max_attempts = 3;
  jo.delay = 1s;
  jo.dedup = {.id = "k1", .ttl = 1h, .mode = DedupMode::debounce};
  const JobId id = q.add("k1", Sealed::make(1, rng), jo).id;
  clock.advance(1s);
  engine.run_until_idle();  // delivery 1
  clock.advance(30s);
  engine.run_until_idle();  // its lease lapses: delivery 2
  ASSERT_EQ(parked.size(), 2u);
  EXPECT_TRUE(parked[0].cancelled());
  EXPECT_TRUE(parked[1].complete(Outcome::retry_in(10s, "later")));
  EXPECT_EQ(q.state(id).status, JobStatus::delayed);
  const AddReceipt merged = q.add("k1", Sealed::make(2, rng), jo);
  EXPECT_EQ(merged.id, id);
  EXPECT_EQ(merged.status, AddStatus::duplicate) << "debounced under delivery 1's pin";
  EXPECT_FALSE(parked[0].complete(Outcome::done())) << "delivery 1's lease had lapsed";
  const AddReceipt debounced = q.add("k1", Sealed::make(3, rng), jo);
  EXPECT_EQ(debounced.status, AddStatus::debounced) << "no pin left";
  clock.advance(1h);
  engine.run_until_idle();  // delivery 3
  ASSERT_EQ(parked.size(), 3u);
  EXPECT_EQ(seen, (std::vector<std::uint64_t>{1, 1, 3}));
  EXPECT_TRUE(parked[2].complete(Outcome::done()));
  EXPECT_EQ(q.state(id).status, JobStatus::completed);
  EXPECT_EQ(q.counts().late_outcomes, 1u);
}

// --- the tests ----------------------------------------------------------------------------------

/// Each test runs with a copyable payload (a stale handler's DLQ entry is filed from a copy at
/// once) and a move-only one (the entry takes the payload when the last pin drops).
template <class P>
class CompletionStress : public ::testing::Test {};
struct PayloadNames {
  template <class P>
  static std::string GetName(int) {
    return std::is_same_v<P, Sealed> ? "Copyable" : "MoveOnly";
  }
};
using Payloads = ::testing::Types<Sealed, Boxed>;
TYPED_TEST_SUITE(CompletionStress, Payloads, PayloadNames);

TYPED_TEST(CompletionStress, StaleCompletionsRaceTheRedriveOfTheirDeadLetteredJobs) {
  const test::Watchdog watchdog(120s, "StaleCompletionsRaceTheRedriveOfTheirDeadLetteredJobs");
  const std::uint64_t seed = base_seed();
  for (std::uint64_t round = 0; round < 4; ++round)
    redrive_round<TypeParam>(seed + round);
}

TYPED_TEST(CompletionStress, StaleCompletionsRaceDebouncesOfTheirDelayedJobs) {
  const test::Watchdog watchdog(120s, "StaleCompletionsRaceDebouncesOfTheirDelayedJobs");
  const std::uint64_t seed = base_seed();
  for (std::uint64_t round = 0; round < 3; ++round)
    debounce_round<TypeParam>(seed + round);
}

// --- 3. concurrent adds reaching the downstream-link limit --------------------------------------

/// A queue's jobs may name up to 15 downstreams besides the queue's own (JobOptions::downstream,
/// options.hpp): link 0 is the queue's own, links 1..15 are made by the first add naming each.
constexpr std::size_t kNamedLinks = 15;
constexpr std::size_t kDownstreams = 24;

std::string downstream_name(std::size_t i) {
  return "svc" + std::to_string(100 + i);  // no name is a prefix of another
}

/// Tagged: a job's payload names the downstream index its add named.
struct Tagged {
  std::size_t downstream = 0;
};

/// AddTally: per downstream, the adds accepted and refused; the refusals' messages checked.
struct AddTally {
  std::array<std::atomic<int>, kDownstreams> accepted{};
  std::array<std::atomic<int>, kDownstreams> refused{};
  std::atomic<int> wrong_error{0};
  std::mutex mu;
  std::string first_wrong;
  std::vector<JobId> ids;

  void add(Queue<Tagged>& q, std::size_t d) {
    JobOptions jo;
    jo.downstream = downstream_name(d);
    try {
      const AddReceipt a = q.add("call", Tagged{d}, jo);
      if (a.status != AddStatus::added) {
        note_wrong("add returned status " + std::to_string(static_cast<int>(a.status)));
        return;
      }
      accepted[d].fetch_add(1);
      const std::lock_guard lock(mu);
      ids.push_back(a.id);
    } catch (const Error& e) {
      refused[d].fetch_add(1);
      const std::string what = e.what();
      // The message names the queue, the limit and the name one too many.
      if (e.code() != ErrorCode::capacity || what.find("'links'") == std::string::npos ||
          what.find(std::to_string(kNamedLinks) + " downstreams") == std::string::npos ||
          what.find("'" + jo.downstream + "'") == std::string::npos)
        note_wrong(what);
    }
  }
  void note_wrong(const std::string& what) {
    wrong_error.fetch_add(1);
    const std::lock_guard lock(mu);
    if (first_wrong.empty()) first_wrong = what;
  }
};

/// One round: 6 threads add 150 jobs each, naming the 24 downstreams in an order of their own,
/// at once; the queue names one of them itself (own) or none. Exactly 15 named links are made
/// (16 names linked with the queue's own); a name is linked for good or refused for good.
void link_limit_round(std::uint64_t seed, bool own) {
  SCOPED_TRACE("seed " + std::to_string(seed) + (own ? ", the queue calls svc100 itself" : ""));
  constexpr int kThreads = 6;
  constexpr int kAddsEach = 150;
  AddTally tally;
  std::array<std::atomic<int>, kDownstreams> ran{};
  std::atomic<int> outside{0};  // a job ran without a permit of the downstream its add named
  std::atomic<int> runs{0};
  Engine engine(EngineOptions{.timer_tick = 100us, .seed = seed});
  std::vector<Downstream> gates;
  for (std::size_t d = 0; d < kDownstreams; ++d)
    gates.push_back(engine.declare_downstream(downstream_name(d), {.concurrency = 64}));
  auto q = engine.declare_queue<Tagged>("links",
                                        own ? test::calling(downstream_name(0)) : QueueOptions{});
  q.process({.concurrency = 4}, [&](Job<Tagged>& job) {
    const std::size_t d = job.data().downstream;
    if (gates[d].stats().in_flight == 0) outside.fetch_add(1);  // ours is one of them
    ran[d].fetch_add(1);
    runs.fetch_add(1);
    return Outcome::done();
  });
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(seed * 13 + static_cast<std::uint64_t>(t));
      std::array<std::size_t, kDownstreams> order{};
      for (std::size_t d = 0; d < kDownstreams; ++d)
        order[d] = d;
      std::shuffle(order.begin(), order.end(), rng);
      ready.fetch_add(1);
      while (ready.load() < kThreads)
        std::this_thread::yield();  // all start adding at once
      for (int i = 0; i < kAddsEach; ++i)
        tally.add(q, i < static_cast<int>(kDownstreams) ? order[i] : rng() % kDownstreams);
    });
  for (auto& t : threads)
    t.join();

  EXPECT_EQ(tally.wrong_error.load(), 0) << "first: " << tally.first_wrong;
  std::vector<bool> linked(kDownstreams);
  std::size_t named = 0;
  for (std::size_t d = 0; d < kDownstreams; ++d) {
    linked[d] = tally.accepted[d].load() > 0;
    EXPECT_TRUE(tally.accepted[d].load() == 0 || tally.refused[d].load() == 0)
        << downstream_name(d) << " was both accepted (" << tally.accepted[d].load()
        << " adds) and refused (" << tally.refused[d].load() << ")";
    if (linked[d] && !(own && d == 0)) ++named;
  }
  EXPECT_EQ(named, kNamedLinks) << "distinct downstreams named per job and linked";
  if (own) {
    EXPECT_TRUE(linked[0]) << "the queue's own downstream is always there";
  }
  // Forever after: each linked name is accepted again, each refused one refused again.
  for (std::size_t d = 0; d < kDownstreams; ++d) {
    const int accepted = tally.accepted[d].load();
    tally.add(q, d);
    EXPECT_EQ(tally.accepted[d].load() - accepted, linked[d] ? 1 : 0) << downstream_name(d);
  }
  EXPECT_EQ(tally.wrong_error.load(), 0) << "first: " << tally.first_wrong;

  int accepted = 0;
  for (std::size_t d = 0; d < kDownstreams; ++d)
    accepted += tally.accepted[d].load();
  ASSERT_TRUE(q.wait_idle(20s));
  EXPECT_TRUE(test::eventually([&] { return q.counts().completed >= std::uint64_t(accepted); }));
  const QueueCounts c = q.counts();
  EXPECT_EQ(c.added, static_cast<std::uint64_t>(accepted)) << "a refused add left a job";
  EXPECT_EQ(c.completed, static_cast<std::uint64_t>(accepted)) << "an accepted job was lost";
  EXPECT_EQ(runs.load(), accepted) << "each accepted job ran once";
  EXPECT_EQ(outside.load(), 0) << "a job ran outside the downstream its add named";
  for (std::size_t d = 0; d < kDownstreams; ++d) {
    EXPECT_EQ(ran[d].load(), tally.accepted[d].load()) << downstream_name(d);
    EXPECT_EQ(gates[d].stats().in_flight, 0u) << downstream_name(d) << ": a permit never returned";
  }
  std::vector<JobId> ids = tally.ids;
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(std::adjacent_find(ids.begin(), ids.end()), ids.end()) << "two adds got one id";
  for (const JobId id : ids)
    EXPECT_EQ(q.state(id).status, JobStatus::completed) << "job " << id;
}

TEST(DownstreamLinkStress, ConcurrentAddsLinkExactlyFifteenNamedDownstreamsAndRefuseTheRest) {
  const test::Watchdog watchdog(120s, "ConcurrentAddsLinkExactlyFifteenNamedDownstreams");
  const std::uint64_t seed = base_seed();
  for (std::uint64_t round = 0; round < 6; ++round)
    link_limit_round(seed + round, round % 2 == 1);
}

}  // namespace
}  // namespace rail
