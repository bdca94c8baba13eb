// cold_path_races: races the cold paths of the split job flow (JobFlow / TimerPort / QueueImpl)
// against each other through the public API, many short engines in a row, oversubscribed.
//   A  cancel by id   vs lease lapse / redelivery / retry backoff
//   B  debounce       vs the timer firing the kept job (plus cancel of the owners)
//   C  shutdown + take_leftovers vs stale handlers, lapses and cancels after shutdown
//   D  DLQ redrive    vs cancel by id vs permanent failures
// Accounting: per job id, begins (added, redriven) minus ends (completed, dead_lettered,
// cancelled) must be 0 at quiescence (1 only for a job taken by take_leftovers, exactly once).
// Handlers check their payload is intact (a moved-from or destroyed string fails). After each
// run of A/B/D the queue must again hold exactly `capacity` jobs (no slot lost or freed twice).
// Usage: cold_path_races <scenario A|B|C|D|all> <iterations> [workers]
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "rail/rail.hpp"

using namespace rail;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t kMaxIds = 1 << 20;
constexpr std::size_t kLen = 200;
std::atomic<long> g_kinds[32];
std::atomic<long> g_taken{0};

// The first kTrace event kinds of each job, so that a failure tells what happened to it.
constexpr std::size_t kTrace = 24;

struct Books {
  std::vector<std::atomic<int>> bal = std::vector<std::atomic<int>>(kMaxIds);
  std::vector<std::atomic<int>> ends = std::vector<std::atomic<int>>(kMaxIds);
  std::vector<std::atomic<std::uint8_t>> seen = std::vector<std::atomic<std::uint8_t>>(kMaxIds);
  std::vector<std::atomic<std::uint8_t>> trace =
      std::vector<std::atomic<std::uint8_t>>(kMaxIds * kTrace);
  std::atomic<long> corrupt{0};
  std::atomic<long> events{0};
  void on(const Event& e) {
    events.fetch_add(1, std::memory_order_relaxed);
    g_kinds[static_cast<int>(e.kind) & 31].fetch_add(1, std::memory_order_relaxed);
    if (e.job_id == 0 || e.job_id >= kMaxIds) return;
    const std::uint8_t n = seen[e.job_id].fetch_add(1, std::memory_order_relaxed);
    if (n < kTrace)
      trace[e.job_id * kTrace + n].store(static_cast<std::uint8_t>(e.kind),
                                         std::memory_order_relaxed);
    switch (e.kind) {
      case EventKind::added:
      case EventKind::redriven:
        bal[e.job_id].fetch_add(1);
        break;
      case EventKind::completed:
      case EventKind::dead_lettered:
      case EventKind::cancelled:
      case EventKind::discarded:
        bal[e.job_id].fetch_sub(1);
        ends[e.job_id].fetch_add(1);
        break;
      default:
        break;
    }
  }
};

std::string payload(std::mt19937& rng) {
  return std::string(kLen, static_cast<char>('a' + rng() % 26));
}

/// key(prefix, n): a dedup id. snprintf: GCC 12 warns (-Wrestrict, a false positive) on
/// "literal" + std::to_string(n) at -O2.
std::string key(char prefix, unsigned n) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%c%u", prefix, n);
  return buf;
}

bool intact(const std::string& s) {
  if (s.size() != kLen) return false;
  for (char c : s)
    if (c != s[0] || c < 'a' || c > 'z') return false;
  return true;
}

[[noreturn]] void fail(const char* scenario, int it, const std::string& what) {
  std::fprintf(stderr, "FAIL %s iteration %d: %s\n", scenario, it, what.c_str());
  std::fflush(stderr);
  std::abort();
}

struct Watchdog {
  explicit Watchdog(std::chrono::seconds limit, const char* what) {
    t = std::thread([this, limit, what] {
      std::unique_lock l(m);
      if (!cv.wait_for(l, limit, [&] { return done; })) {
        std::fprintf(stderr, "watchdog: %s hung\n", what);
        std::abort();
      }
    });
  }
  ~Watchdog() {
    {
      std::lock_guard l(m);
      done = true;
    }
    cv.notify_all();
    t.join();
  }
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::thread t;
};

// A handler whose speed, outcome and lease overrun vary per delivery.
Outcome chaos_handler(Books& books, const Job<std::string>& job, bool allow_fail) {
  if (!intact(job.data())) books.corrupt.fetch_add(1);
  thread_local std::mt19937 rng(std::random_device{}());
  const unsigned r = rng() % 100;
  if (r < 12)
    std::this_thread::sleep_for(std::chrono::microseconds(1000 + rng() % 5000));
  else if (r < 30)
    std::this_thread::yield();
  if (!intact(job.data())) books.corrupt.fetch_add(1);  // still intact after the lease lapsed
  const unsigned o = rng() % 100;
  if (o < 55) return Outcome::done();
  if (o < 75) return Outcome::retry("again");
  if (o < 85) return Outcome::retry_in(std::chrono::microseconds(rng() % 3000), "later");
  if (allow_fail) return Outcome::fail("permanent");
  return Outcome::retry("again");
}

/// history(b, id): the job's events as observed, in the order the observer saw them.
std::string history(const Books& b, std::uint64_t id) {
  std::string h;
  const unsigned n = b.seen[id].load();
  for (unsigned i = 0; i < n && i < kTrace; ++i) {
    if (i) h += ' ';
    h += to_string(static_cast<EventKind>(b.trace[id * kTrace + i].load()));
  }
  if (n > kTrace) h += " ... (" + std::to_string(n) + " events)";
  return h;
}

void check_books(const char* sc, int it, Books& b, std::uint64_t last_id,
                 const std::vector<char>* taken = nullptr, const Queue<std::string>* q = nullptr) {
  if (b.corrupt.load())
    fail(sc, it, "a handler read a corrupt payload x" + std::to_string(b.corrupt.load()));
  for (std::uint64_t id = 1; id <= last_id && id < kMaxIds; ++id) {
    const int bal = b.bal[id].load();
    const bool was_taken = taken && (*taken)[id];
    const int want = was_taken ? 1 : 0;
    if (bal != want)
      fail(sc, it,
           "job " + std::to_string(id) + " balance " + std::to_string(bal) +
               (was_taken ? " (taken as leftover)" : "") + ", ends " +
               std::to_string(b.ends[id].load()) + "; events: " + history(b, id) +
               (q ? "; state now: " + std::string(to_string(q->state(id).status)) : ""));
  }
}

// After quiescence: the queue holds exactly capacity jobs again (a lost slot or one freed twice
// shows here). Handlers are gated so that the jobs stay.
void check_capacity(const char* sc, int it, Queue<std::string>& q, std::size_t cap,
                    std::atomic<bool>& gate, std::mt19937& rng) {
  gate.store(true);
  std::size_t added = 0;
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (added < cap && std::chrono::steady_clock::now() < deadline) {
    if (q.add("fill", payload(rng)).status == AddStatus::added) {
      ++added;
    } else {
      std::this_thread::sleep_for(200us);  // a cancelled waiting job's slot returns when popped
    }
  }
  if (added < cap)
    fail(sc, it,
         "only " + std::to_string(added) + " of " + std::to_string(cap) +
             " slots could be filled: a slot was lost");
  if (q.add("extra", payload(rng)).status == AddStatus::added)
    fail(sc, it, "capacity + 1 jobs accepted: a slot index was freed twice");
  gate.store(false);
  if (!q.wait_idle(10s)) fail(sc, it, "fill jobs did not drain");
}

/// gated(gate, body): a handler that parks while the capacity check holds `gate` (its fill jobs
/// then occupy every slot) and otherwise runs body.
template <class F>
auto gated(std::atomic<bool>& gate, F body) {
  return [&gate, body](Job<std::string>& job) -> Outcome {
    if (gate.load()) {
      while (gate.load())
        std::this_thread::sleep_for(100us);
      return Outcome::done();
    }
    return body(job);
  };
}

/// racing_options(cap, attempts, lease): a small bounded queue whose leases lapse within ms.
QueueOptions racing_options(std::size_t cap, std::int32_t attempts, Duration lease = 2ms) {
  QueueOptions o;
  o.capacity = cap;
  o.on_full = OnFull::reject;
  o.visibility_timeout = lease;
  o.defaults.max_attempts = attempts;
  return o;
}

/// add_retrying(q, name, rng, jo, hi): adds one job, waiting out `full`; raises hi to its id.
void add_retrying(Queue<std::string>& q, const char* name, std::mt19937& rng, const JobOptions& jo,
                  std::atomic<std::uint64_t>& hi) {
  auto r = q.add(name, payload(rng), jo);
  while (r.status == AddStatus::full) {
    std::this_thread::sleep_for(50us);
    r = q.add(name, payload(rng), jo);
  }
  if (r.status != AddStatus::added) return;
  std::uint64_t cur = hi.load();
  while (r.id > cur && !hi.compare_exchange_weak(cur, r.id)) {
  }
}

/// settle(sc, it, q, books, last, cap, gate): the end the gated scenarios share: drain, account
/// for every id up to `last`, then check that exactly `cap` slots are free again.
void settle(const char* sc, int it, Queue<std::string>& q, Books& books, std::uint64_t last,
            std::size_t cap, std::atomic<bool>& gate) {
  if (!q.wait_idle(30s)) fail(sc, it, "drain timed out");
  check_books(sc, it, books, last, nullptr, &q);
  std::mt19937 rng(it);
  check_capacity(sc, it, q, cap, gate, rng);
}

// --- A ----------------------------------------------------------------------------------------
void scenario_a(int it, std::uint32_t workers) {
  Books books;
  std::atomic<bool> gate{false};
  const std::size_t cap = 64;
  {
    Engine engine;
    engine.on_event([&](const Event& e) { books.on(e); });
    auto q = engine.declare_queue<std::string>("a", racing_options(cap, 4));
    q.process({.concurrency = workers}, gated(gate, [&](const Job<std::string>& job) -> Outcome {
                return chaos_handler(books, job, true);
              }));
    std::atomic<bool> producing{true};
    std::atomic<std::uint64_t> hi{0};
    std::vector<std::thread> ts;
    ts.reserve(8);  // no regrowth (and no GCC 12 -Warray-bounds false positive on it)
    for (int p = 0; p < 2; ++p)
      ts.emplace_back([&, p] {
        std::mt19937 rng(it * 7 + p);
        for (int i = 0; i < 1500; ++i) {
          JobOptions jo;
          jo.max_attempts = 1 + rng() % 4;
          if (rng() % 4 == 0) jo.delay = std::chrono::microseconds(rng() % 3000);
          if (rng() % 3 == 0)
            jo.backoff = Backoff::fixed(std::chrono::microseconds(200 + rng() % 2000));
          if (rng() % 5 == 0) jo.visibility_timeout = std::chrono::microseconds(500 + rng() % 3000);
          add_retrying(q, "a", rng, jo, hi);
        }
      });
    for (int c = 0; c < 2; ++c)
      ts.emplace_back([&, c] {
        std::mt19937 rng(it * 13 + c);
        while (producing.load()) {
          const std::uint64_t h = hi.load();
          if (h > 0) {
            const std::uint64_t id = h - rng() % std::min<std::uint64_t>(h, 48);
            (void)q.cancel(id);
            (void)q.state(id);
          }
          std::this_thread::sleep_for(std::chrono::microseconds(rng() % 400));
        }
      });
    for (int p = 0; p < 2; ++p)
      ts[p].join();
    producing.store(false);
    for (std::size_t i = 2; i < ts.size(); ++i)
      ts[i].join();
    settle("A", it, q, books, hi.load(), cap, gate);
  }
}

// --- B ----------------------------------------------------------------------------------------
void scenario_b(int it, std::uint32_t workers) {
  Books books;
  std::atomic<bool> gate{false};
  const std::size_t cap = 32;
  std::atomic<std::uint64_t> hi{0};
  {
    Engine engine;
    engine.on_event([&](const Event& e) { books.on(e); });
    auto q = engine.declare_queue<std::string>("b", racing_options(cap, 1, 3ms));
    q.process({.concurrency = workers}, gated(gate, [&](const Job<std::string>& job) -> Outcome {
                return chaos_handler(books, job, false);
              }));
    std::atomic<bool> producing{true};
    std::vector<std::thread> ts;
    ts.reserve(8);  // no regrowth (and no GCC 12 -Warray-bounds false positive on it)
    for (int p = 0; p < 3; ++p)
      ts.emplace_back([&, p] {
        std::mt19937 rng(it * 11 + p);
        for (int i = 0; i < 3000; ++i) {
          JobOptions jo;
          jo.max_attempts = 1 + rng() % 3;
          jo.delay = std::chrono::microseconds(rng() % 1500);
          jo.dedup.id = key('k', rng() % 6);
          jo.dedup.mode = rng() % 4 ? DedupMode::debounce : DedupMode::merge;
          if (jo.dedup.mode == DedupMode::debounce || rng() % 2)
            jo.dedup.ttl = std::chrono::microseconds(200 + rng() % 4000);
          if (rng() % 3 == 0)
            jo.backoff = Backoff::fixed(std::chrono::microseconds(100 + rng() % 1500));
          auto r = q.add("b", payload(rng), jo);
          if (r.id != 0) {
            std::uint64_t cur = hi.load();
            while (r.id > cur && !hi.compare_exchange_weak(cur, r.id)) {
            }
          }
        }
      });
    ts.emplace_back([&] {
      std::mt19937 rng(it);
      while (producing.load()) {
        const std::uint64_t h = hi.load();
        if (h > 0 && rng() % 16 == 0) (void)q.cancel(h - rng() % std::min<std::uint64_t>(h, 8));
        std::this_thread::yield();
      }
    });
    for (int p = 0; p < 3; ++p)
      ts[p].join();
    producing.store(false);
    ts.back().join();
    settle("B", it, q, books, hi.load(), cap, gate);
  }
}

// --- C ----------------------------------------------------------------------------------------
void scenario_c(int it, std::uint32_t workers) {
  Books books;
  std::vector<char> taken(kMaxIds, 0);
  std::uint64_t last = 0;
  std::atomic<std::uint64_t> hi{0};
  {
    Engine engine;
    engine.on_event([&](const Event& e) { books.on(e); });
    QueueOptions o;
    o.capacity = 128;
    o.visibility_timeout = 2ms;
    auto q = engine.declare_queue<std::string>("c", o);
    q.process({.concurrency = workers},
              [&](Job<std::string>& job) { return chaos_handler(books, job, true); });
    std::atomic<bool> producing{true};
    std::vector<std::thread> ts;
    ts.reserve(8);  // no regrowth (and no GCC 12 -Warray-bounds false positive on it)
    for (int p = 0; p < 2; ++p)
      ts.emplace_back([&, p] {
        std::mt19937 rng(it * 5 + p);
        try {
          for (;;) {
            JobOptions jo;
            jo.max_attempts = 1 + rng() % 4;
            if (rng() % 3 == 0) jo.delay = std::chrono::microseconds(rng() % 4000);
            if (rng() % 3 == 0)
              jo.backoff = Backoff::fixed(std::chrono::microseconds(rng() % 2000 + 1));
            auto r = q.add("c", payload(rng), jo);
            if (r.status == AddStatus::shutting_down) break;
            if (r.id != 0) {
              std::uint64_t cur = hi.load();
              while (r.id > cur && !hi.compare_exchange_weak(cur, r.id)) {
              }
            }
            if (r.status != AddStatus::added) std::this_thread::sleep_for(100us);
          }
        } catch (const Error& e) {
          if (e.code() != ErrorCode::shutting_down) fail("C", it, e.what());
        }
      });
    ts.emplace_back([&] {
      std::mt19937 rng(it * 3);
      while (producing.load()) {
        const std::uint64_t h = hi.load();
        if (h > 0) (void)q.cancel(h - rng() % std::min<std::uint64_t>(h, 64));
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 300));
      }
    });
    std::mt19937 rng(it);
    std::this_thread::sleep_for(std::chrono::microseconds(2000 + rng() % 20000));
    (void)engine.shutdown(std::chrono::microseconds(rng() % 3000));
    for (int p = 0; p < 2; ++p)
      ts[p].join();
    // take_leftovers repeatedly while stale handlers return, lapses fire and a canceller runs
    auto take = [&] {
      for (auto& l : q.take_leftovers()) {
        if (!intact(l.data)) fail("C", it, "leftover payload corrupt, job " + std::to_string(l.id));
        if (l.id >= kMaxIds) continue;
        if (taken[l.id]) fail("C", it, "job " + std::to_string(l.id) + " taken twice");
        taken[l.id] = 1;
        g_taken.fetch_add(1);
      }
    };
    const auto until = std::chrono::steady_clock::now() + 30ms;
    while (std::chrono::steady_clock::now() < until) {
      take();
      std::this_thread::sleep_for(500us);
    }
    producing.store(false);
    ts.back().join();
    // Every handler returns within a few ms: wait for them, then take what remains.
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (q.counts().active > 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(1ms);
    if (q.counts().active > 0) fail("C", it, "handlers still running 10 s after shutdown");
    std::this_thread::sleep_for(5ms);  // lapses/timers after the last handler
    take();
    last = hi.load();
    // Every job with a live balance must have been handed back: nothing left behind.
    auto report = engine.shutdown(0ms);
    for (auto& j : report.not_started)
      fail("C", it, "job " + std::to_string(j.id) + " not started but not taken");
    for (auto& j : report.still_running)
      fail("C", it, "job " + std::to_string(j.id) + " still running");
  }
  // Balance 1 exactly for the taken jobs, 0 for the others (ended once). Cancelled jobs whose
  // slot was never reclaimed after shutdown are ended (their balance is 0).
  check_books("C", it, books, last, &taken);
}

// --- D ----------------------------------------------------------------------------------------
void scenario_d(int it, std::uint32_t workers) {
  Books books;
  std::atomic<bool> gate{false};
  const std::size_t cap = 64;
  {
    Engine engine;
    engine.on_event([&](const Event& e) { books.on(e); });
    auto q = engine.declare_queue<std::string>("d", racing_options(cap, 1));
    q.process({.concurrency = workers}, gated(gate, [&](const Job<std::string>& job) -> Outcome {
                thread_local std::mt19937 rng(std::random_device{}());
                if (!intact(job.data())) books.corrupt.fetch_add(1);
                if (rng() % 10 == 0)
                  std::this_thread::sleep_for(std::chrono::microseconds(rng() % 4000));
                if (!intact(job.data())) books.corrupt.fetch_add(1);
                return rng() % 3 ? Outcome::fail("permanent") : Outcome::done();
              }));
    std::atomic<bool> producing{true};
    std::atomic<std::uint64_t> hi{0};
    std::vector<std::thread> ts;
    ts.reserve(8);  // no regrowth (and no GCC 12 -Warray-bounds false positive on it)
    ts.emplace_back([&] {
      std::mt19937 rng(it);
      for (int i = 0; i < 2500; ++i) {
        JobOptions jo;
        jo.max_attempts = 1 + rng() % 2;
        add_retrying(q, "d", rng, jo, hi);
      }
    });
    auto dlq = q.dlq();
    ts.emplace_back([&] {  // redrive
      std::mt19937 rng(it * 3);
      while (producing.load()) {
        std::vector<JobId> ids;
        dlq.visit(
            [&](const DeadLetter<std::string>& e) {
              if (!intact(e.data)) books.corrupt.fetch_add(1);
              ids.push_back(e.id);
            },
            0, 64);
        for (JobId id : ids)
          if (rng() % 2) (void)dlq.redrive(id);
        if (rng() % 4 == 0) (void)dlq.redrive_all();
        std::this_thread::yield();
      }
    });
    ts.emplace_back([&] {  // cancel what is redriven
      std::mt19937 rng(it * 5);
      while (producing.load()) {
        std::vector<JobId> ids;
        dlq.visit([&](const DeadLetter<std::string>& e) { ids.push_back(e.id); }, 0, 16);
        for (JobId id : ids)
          (void)q.cancel(id);
        const std::uint64_t h = hi.load();
        if (h) (void)q.cancel(1 + rng() % h);
        std::this_thread::yield();
      }
    });
    ts[0].join();
    std::this_thread::sleep_for(20ms);
    producing.store(false);
    ts[1].join();
    ts[2].join();
    settle("D", it, q, books, hi.load(), cap, gate);
  }
}

// --- E ----------------------------------------------------------------------------------------
// Parked jobs (due never: delay max, retry_after max, a debounce to never) against cancel by id,
// the timer and, on odd iterations, shutdown + take_leftovers instead of the final cancel.
void scenario_e(int it, std::uint32_t workers) {
  Books books;
  std::atomic<bool> gate{false};
  std::vector<char> taken(kMaxIds, 0);
  const std::size_t cap = 48;
  std::atomic<std::uint64_t> hi{0};
  const bool leftovers = it % 2 == 1;
  {
    Engine engine;
    engine.on_event([&](const Event& e) { books.on(e); });
    QueueOptions o;
    o.capacity = cap;
    o.visibility_timeout = 2ms;
    auto q = engine.declare_queue<std::string>("e", o);
    q.process({.concurrency = workers}, gated(gate, [&](const Job<std::string>& job) -> Outcome {
                thread_local std::mt19937 rng(std::random_device{}());
                if (!intact(job.data())) books.corrupt.fetch_add(1);
                if (rng() % 8 == 0)
                  std::this_thread::sleep_for(std::chrono::microseconds(rng() % 4000));
                if (!intact(job.data())) books.corrupt.fetch_add(1);
                switch (rng() % 4) {
                  case 0:
                    return Outcome::retry_in(Duration::max(), "park me");
                  case 1:
                    return Outcome::retry_in(std::chrono::microseconds(rng() % 2000), "soon");
                  default:
                    return Outcome::done();
                }
              }));
    std::atomic<bool> producing{true};
    std::vector<std::thread> ts;
    ts.reserve(8);  // no regrowth (and no GCC 12 -Warray-bounds false positive on it)
    for (int p = 0; p < 2; ++p)
      ts.emplace_back([&, p] {
        std::mt19937 rng(it * 17 + p);
        for (int i = 0; i < 1500; ++i) {
          JobOptions jo;
          jo.max_attempts = 1 + rng() % 3;
          const unsigned k = rng() % 3;
          jo.delay = k == 0   ? Duration::max()
                     : k == 1 ? Duration{std::chrono::microseconds(rng() % 2000)}
                              : Duration{0};
          if (rng() % 3 == 0) {
            jo.dedup.id = key('p', rng() % 4);
            jo.dedup.mode = DedupMode::debounce;
            jo.dedup.ttl = std::chrono::microseconds(100 + rng() % 3000);
          }
          auto r = q.add("e", payload(rng), jo);
          if (r.id != 0) {
            std::uint64_t cur = hi.load();
            while (r.id > cur && !hi.compare_exchange_weak(cur, r.id)) {
            }
          }
          if (r.status == AddStatus::full) {  // parked jobs fill it: free some
            const std::uint64_t h = hi.load();
            for (int c = 0; c < 8 && h; ++c)
              (void)q.cancel(1 + rng() % h);
          }
        }
      });
    ts.emplace_back([&] {
      std::mt19937 rng(it * 19);
      while (producing.load()) {
        const std::uint64_t h = hi.load();
        if (h) (void)q.cancel(h - rng() % std::min<std::uint64_t>(h, 32));
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 200));
      }
    });
    ts[0].join();
    ts[1].join();
    producing.store(false);
    ts[2].join();
    if (leftovers) {
      (void)engine.shutdown(5s);
      for (auto& l : q.take_leftovers()) {
        if (!intact(l.data)) fail("E", it, "leftover payload corrupt");
        if (taken[l.id]) fail("E", it, "taken twice");
        taken[l.id] = 1;
        g_taken.fetch_add(1);
      }
      auto report = engine.shutdown(0ms);
      if (!report.clean()) fail("E", it, "jobs left after take_leftovers");
    } else {
      // Parked jobs wait forever: cancel every job, then all must have ended exactly once.
      for (std::uint64_t id = 1; id <= hi.load(); ++id)
        (void)q.cancel(id);
      settle("E", it, q, books, hi.load(), cap, gate);
    }
  }
  check_books("E", it, books, hi.load(), leftovers ? &taken : nullptr);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string which = argc > 1 ? argv[1] : "all";
  const int iters = argc > 2 ? std::atoi(argv[2]) : 10;
  const std::uint32_t workers = argc > 3 ? static_cast<std::uint32_t>(std::atoi(argv[3])) : 6;
  struct S {
    const char* name;
    void (*fn)(int, std::uint32_t);
  } all[] = {{"A", scenario_a},
             {"B", scenario_b},
             {"C", scenario_c},
             {"D", scenario_d},
             {"E", scenario_e}};
  for (auto& s : all) {
    if (which != "all" && which != s.name) continue;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) {
      Watchdog wd(120s, s.name);
      s.fn(i, workers);
    }
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    std::printf("scenario %s: %d iterations OK (%lld ms):", s.name, iters,
                static_cast<long long>(ms));
    for (int k = 0; k <= static_cast<int>(EventKind::idle); ++k)
      std::printf(" %s=%ld", std::string(to_string(static_cast<EventKind>(k))).c_str(),
                  g_kinds[k].exchange(0));
    std::printf(" leftovers_taken=%ld\n", g_taken.exchange(0));
    std::fflush(stdout);
  }
  return 0;
}
