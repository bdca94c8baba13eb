// Conservation under concurrency (Jepsen's total-queue check, in-process): with producers and
// oversubscribed workers racing, random retryable failures, throws, permanent failures and
// backoff through the timing wheel, every accepted job ends exactly once — completed xor
// dead-lettered — and nothing is lost or invented.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "rail/rail.hpp"

#if defined(__SANITIZE_THREAD__)
#define RAIL_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RAIL_UNDER_TSAN 1
#endif
#endif

namespace rail {
namespace {

using namespace std::chrono_literals;

#ifdef RAIL_UNDER_TSAN
constexpr std::uint64_t kJobs = 20'000;
#else
constexpr std::uint64_t kJobs = 120'000;
#endif

// The fate of an attempt is a pure function of (id, attempt), so the check can recompute it.
enum class Fate { ok, retry, throw_, fail };
Fate fate(std::uint64_t id, std::uint32_t attempt) {
  std::uint64_t h = (id * 0x9E3779B97F4A7C15ULL) ^ (attempt * 0xBF58476D1CE4E5B9ULL);
  h ^= h >> 29;
  switch (h % 20) {
    case 0:
    case 1:
      return Fate::retry;  // 10%
    case 2:
      return Fate::throw_;  // 5%
    case 3:
      if (attempt == 1) return Fate::fail;
      return Fate::ok;  // ~5% of first attempts
    default:
      return Fate::ok;
  }
}

struct Params {
  int producers;
  std::uint32_t workers;
  bool bulk;
};

class EngineStress : public ::testing::TestWithParam<Params> {};

TEST_P(EngineStress, EveryAcceptedJobEndsExactlyOnce) {
  const Params p = GetParam();
  // Ids are unique but not dense: each thread takes them in blocks (EngineCore::kIdBlock) and
  // leaves the rest of a block behind when a bulk does not fit. Twice the jobs, plus a block per
  // thread, bounds them with room to spare; an id past it fails the run (recorded below).
  const std::uint64_t max_id = 2 * kJobs + 64 * 256;
  std::atomic<std::uint64_t> past_max{0};
  auto completed = std::make_unique<std::atomic<std::uint32_t>[]>(max_id + 1);
  auto dead = std::make_unique<std::atomic<std::uint32_t>[]>(max_id + 1);
  auto attempts = std::make_unique<std::atomic<std::uint32_t>[]>(max_id + 1);
  auto added_token = std::make_unique<std::atomic<std::uint64_t>[]>(max_id + 1);
  auto seen_token = std::make_unique<std::atomic<std::uint64_t>[]>(max_id + 1);

  Engine engine;
  engine.on_event([&](const Event& e) {
    if (e.job_id > max_id) return;
    if (e.kind == EventKind::completed) completed[e.job_id].fetch_add(1, std::memory_order_relaxed);
    if (e.kind == EventKind::dead_lettered) dead[e.job_id].fetch_add(1, std::memory_order_relaxed);
  });
  QueueOptions qo;
  qo.capacity = 4096;  // small enough that producers hit "full" and must retry the add
  qo.defaults.max_attempts = 3;
  qo.defaults.backoff = Backoff::fixed(1ms).with_jitter(Jitter::full);
  qo.dlq.max_entries = kJobs;
  auto q = engine.declare_queue<std::uint64_t>("stress", qo);
  q.process(WorkerOptions{.concurrency = p.workers}, [&](Job<std::uint64_t>& j) -> Outcome {
    if (j.id() > max_id) {
      past_max.fetch_add(1, std::memory_order_relaxed);
      return Outcome::done();
    }
    attempts[j.id()].fetch_add(1, std::memory_order_relaxed);
    seen_token[j.id()].store(j.data(), std::memory_order_relaxed);
    switch (fate(j.id(), j.attempt())) {
      case Fate::ok:
        return Outcome::done();
      case Fate::retry:
        return Outcome::retry("flaky");
      case Fate::throw_:
        throw std::runtime_error("thrown");
      case Fate::fail:
        return Outcome::fail("permanent");
    }
    return Outcome::done();
  });

  // Payloads are unique tokens (producer << 40 | sequence). The producer records which token
  // it added under which id; the handler records which token it saw under which id; the two
  // must agree at the end (the payload travelled with its job through retries and the DLQ).
  std::atomic<std::uint64_t> accepted{0};
  std::atomic<std::uint64_t> full_retries{0};
  std::vector<std::thread> producers;
  const std::uint64_t per_producer = kJobs / static_cast<std::uint64_t>(p.producers);
  for (int t = 0; t < p.producers; ++t) {
    producers.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(t) + 1);
      std::uint64_t made = 0;
      const std::uint64_t base = static_cast<std::uint64_t>(t + 1) << 40;
      std::vector<std::uint64_t> items;
      while (made < per_producer) {
        if (p.bulk && (rng() & 1)) {
          std::uint64_t n = std::min<std::uint64_t>(1 + rng() % 32, per_producer - made);
          items.resize(n);
          for (std::uint64_t i = 0; i < n; ++i)
            items[i] = base | (made + i);
          auto r = q.add_bulk("bulk", std::span<std::uint64_t>(items));
          if (r.status == AddStatus::full) {
            full_retries.fetch_add(1, std::memory_order_relaxed);
            std::this_thread::yield();
            continue;
          }
          ASSERT_EQ(r.count, n);
          ASSERT_LE(r.first_id + n - 1, max_id);
          for (std::uint64_t i = 0; i < n; ++i)
            added_token[r.first_id + i].store(base | (made + i), std::memory_order_relaxed);
          made += n;
          accepted.fetch_add(n, std::memory_order_relaxed);
        } else {
          auto r = q.add("one", base | made);
          if (r.status == AddStatus::full) {
            full_retries.fetch_add(1, std::memory_order_relaxed);
            std::this_thread::yield();
            continue;
          }
          ASSERT_EQ(r.status, AddStatus::added);
          ASSERT_LE(r.id, max_id);
          added_token[r.id].store(base | made, std::memory_order_relaxed);
          ++made;
          accepted.fetch_add(1, std::memory_order_relaxed);
        }
      }
    });
  }
  for (auto& t : producers)
    t.join();

  auto deadline = std::chrono::steady_clock::now() + 60s;
  for (;;) {
    auto c = q.counts();
    if (c.completed + c.dead_lettered == c.added) break;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline)
        << "jobs did not settle: added " << c.added << " completed " << c.completed << " dead "
        << c.dead_lettered << " waiting " << c.waiting << " delayed " << c.delayed << " active "
        << c.active;
    std::this_thread::sleep_for(2ms);  // polling for the end, not deciding an outcome
  }
  auto report = engine.shutdown(10s);
  EXPECT_TRUE(report.clean());

  const std::uint64_t n = accepted.load();
  EXPECT_EQ(past_max.load(), 0U);
  std::uint64_t ended_completed = 0, ended_dead = 0, added_ids = 0;
  for (std::uint64_t id = 1; id <= max_id; ++id) {
    std::uint32_t c = completed[id].load(), d = dead[id].load();
    if (added_token[id].load() == 0) {  // an id no add was given: nothing ran or ended under it
      ASSERT_EQ(c + d + attempts[id].load(), 0u) << "id " << id << " was never added";
      continue;
    }
    ++added_ids;
    ASSERT_EQ(c + d, 1u) << "job " << id << " ended " << c << " times completed and " << d
                         << " times dead-lettered";
    // Recompute the expected end from the fates.
    std::uint32_t a = 1;
    bool expect_dead = false;
    for (;; ++a) {
      Fate f = fate(id, a);
      if (f == Fate::ok) break;
      if (f == Fate::fail || a == 3) {
        expect_dead = true;
        break;
      }
    }
    ASSERT_EQ(d == 1, expect_dead) << "job " << id;
    ASSERT_EQ(attempts[id].load(), a) << "job " << id;
    ASSERT_EQ(seen_token[id].load(), added_token[id].load()) << "job " << id;
    ended_completed += c;
    ended_dead += d;
  }
  EXPECT_EQ(added_ids, n);
  auto c = q.counts();
  EXPECT_EQ(c.added, n);
  EXPECT_EQ(c.completed, ended_completed);
  EXPECT_EQ(c.dead_lettered, ended_dead);
  EXPECT_EQ(q.dlq().size(), ended_dead);
  EXPECT_EQ(c.waiting + c.delayed + c.active, 0u);
}

INSTANTIATE_TEST_SUITE_P(Oversubscribed, EngineStress,
                         ::testing::Values(Params{1, 1, false}, Params{2, 4, false},
                                           Params{4, 8, true}, Params{8, 2, true}),
                         [](const auto& info) {
                           // Appended piece by piece: GCC 12 warns (-Wrestrict, a false
                           // positive) on "literal" + std::to_string(...) here.
                           std::string name = "P";
                           name += std::to_string(info.param.producers);
                           name += "W";
                           name += std::to_string(info.param.workers);
                           name += info.param.bulk ? "Bulk" : "Single";
                           return name;
                         });

}  // namespace
}  // namespace rail
