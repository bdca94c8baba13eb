// Steady state allocates nothing per job: after a warm-up, adding and running jobs (with
// retries, delays and dedup ids) makes zero heap allocations. Counted by replacing the global
// operator new in this test binary.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "rail/rail.hpp"

namespace {
std::atomic<std::uint64_t> g_allocations{0};
std::atomic<bool> g_counting{false};
}  // namespace

// The replacements pair malloc with free. g++ 12 inlines them into call sites and then reports
// -Wmismatched-new-delete ("free called on a pointer returned from operator new"), a false
// positive for replaced global operators.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

void* operator new(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed))
    g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}

namespace rail {
namespace {

using namespace std::chrono_literals;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RAIL_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define RAIL_SANITIZED 1
#endif
#endif

struct Payload {
  std::uint64_t order;
  double amount;
};

std::uint64_t allocations_during(const std::function<void()>& f) {
  g_allocations.store(0);
  g_counting.store(true);
  f();
  g_counting.store(false);
  return g_allocations.load();
}

TEST(Allocation, SteadyStateAddAndRunAllocatesNothing) {
#ifdef RAIL_SANITIZED
  GTEST_SKIP() << "sanitizers supply their own allocator";
#endif
  ManualClock clock;
  Engine engine({.clock = &clock, .mode = Mode::inlined});
  auto q = engine.queue<Payload>("q", QueueOptions{.capacity = 1024});
  std::uint64_t sum = 0;
  // Short error strings fit the small-string buffer; a retry records one per failed attempt.
  q.process({}, [&](Job<Payload>& j) {
    sum += j.data().order;
    return j.attempt() == 1 && j.data().order % 4 == 0 ? Outcome::retry("flaky") : Outcome::done();
  });
  JobOptions o{.attempts = 2, .backoff = Backoff::fixed(1ms)};
  auto round = [&](std::uint64_t base) {
    for (std::uint64_t i = 0; i < 512; ++i)
      (void)q.add("charge", Payload{base + i, 1.0}, o);
    engine.run_until_idle();
    clock.advance(1ms);
    engine.run_until_idle();
  };
  // Warm-up: fill every slot with a job that fails once, so each slot's error log exists (it is
  // created on a slot's first failure and kept for reuse); then a few ordinary rounds.
  for (std::uint64_t i = 0; i < 1024; ++i)
    (void)q.add("charge", Payload{4 * i, 1.0}, o);
  engine.run_until_idle();
  clock.advance(1ms);
  engine.run_until_idle();
  for (int warm = 0; warm < 8; ++warm)
    round(0);
  auto n = allocations_during([&] {
    for (int r = 0; r < 200; ++r)
      round(static_cast<std::uint64_t>(r) * 512);
  });
  EXPECT_EQ(n, 0u) << "allocations per job: " << static_cast<double>(n) / (200 * 512);
  EXPECT_EQ(q.counts().completed, q.counts().added);
  EXPECT_GT(sum, 0u);
}

TEST(Allocation, DedupIdsAllocateNothingOnceWarm) {
#ifdef RAIL_SANITIZED
  GTEST_SKIP() << "sanitizers supply their own allocator";
#endif
  ManualClock clock;
  Engine engine({.clock = &clock, .mode = Mode::inlined});
  auto q = engine.queue<int>("q", QueueOptions{.capacity = 256});
  q.process({}, [](Job<int>&) {});
  JobOptions o;
  o.dedup.id.reserve(32);
  auto round = [&](int base) {
    for (int i = 0; i < 128; ++i) {
      o.dedup.id.assign("order-");
      o.dedup.id += static_cast<char>('a' + (base + i) % 26);
      o.dedup.id += static_cast<char>('a' + (base + i) / 26 % 26);
      (void)q.add("email", i, o);
      (void)q.add("email", i, o);  // the duplicate
    }
    engine.run_until_idle();
  };
  for (int warm = 0; warm < 8; ++warm)
    round(warm * 128);
  auto n = allocations_during([&] {
    for (int r = 0; r < 100; ++r)
      round(r * 128);
  });
  EXPECT_EQ(n, 0u);
}

}  // namespace
}  // namespace rail
