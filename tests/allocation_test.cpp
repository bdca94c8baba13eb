// Steady state allocates nothing per job: after a warm-up, adding and running jobs (with
// retries, delays and dedup ids) makes zero heap allocations, on an inline engine and on a
// threaded one (workers and the timer thread included).
//
// Counted: every way this process can allocate, on every thread, while counting is on.
//   * operator new and new[] in all their forms (plain, nothrow, aligned, aligned nothrow);
//   * the C allocator: malloc, calloc, realloc, aligned_alloc, posix_memalign, memalign, valloc,
//     defined here, so they interpose libc's and the shared libmimalloc's exports of them;
//   * mimalloc's own API: the linker's --wrap (tests.cmake) sends every reference to the
//     functions listed there from this binary's objects to the __wrap_ versions below;
//   * rail's own blocks (a slot's error log, a queue's payload cells): rail reaches mimalloc
//     through a private handle (rail/detail/allocation.hpp) and counts them itself;
//     allocations_during() adds that count.
// Each path forwards to mimalloc (the __real_ entry points, which do not count), the allocator the
// process uses anyway; free and every operator delete go to mi_free. The first test checks that
// each path counts, so the others cannot pass by being blind to one.
#include "rail/detail/allocation.hpp"

#include <errno.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <mimalloc.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "rail/detail/thread_index.hpp"
#include "rail/rail.hpp"
#include "support/sanitized.hpp"

namespace {
std::atomic<std::uint64_t> g_allocations{0};
std::atomic<bool> g_counting{false};

void counted() noexcept {
  // relaxed: a tally, read after the counted work was joined or seen finished (an acquire that
  // orders every allocation of that work before the read).
  if (g_counting.load(std::memory_order_relaxed))
    g_allocations.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

// The wrapped mimalloc API: the originals, reached as __real_<name>, and the counting wrappers.
#define RAIL_COUNTED_MI(ret, name, params, args) \
  extern "C" ret __real_##name params noexcept;  \
  extern "C" ret __wrap_##name params noexcept { \
    counted();                                   \
    return __real_##name args;                   \
  }
RAIL_COUNTED_MI(void*, mi_malloc, (std::size_t n), (n))
RAIL_COUNTED_MI(void*, mi_zalloc, (std::size_t n), (n))
RAIL_COUNTED_MI(void*, mi_calloc, (std::size_t c, std::size_t n), (c, n))
RAIL_COUNTED_MI(void*, mi_realloc, (void* p, std::size_t n), (p, n))
RAIL_COUNTED_MI(void*, mi_malloc_aligned, (std::size_t n, std::size_t a), (n, a))
RAIL_COUNTED_MI(void*, mi_zalloc_aligned, (std::size_t n, std::size_t a), (n, a))
RAIL_COUNTED_MI(void*, mi_realloc_aligned, (void* p, std::size_t n, std::size_t a), (p, n, a))
#undef RAIL_COUNTED_MI

// The C allocator.
extern "C" {
void* malloc(std::size_t n) noexcept {
  counted();
  return __real_mi_malloc(n);
}
void* calloc(std::size_t c, std::size_t n) noexcept {
  counted();
  return __real_mi_calloc(c, n);
}
void* realloc(void* p, std::size_t n) noexcept {
  counted();
  return __real_mi_realloc(p, n);
}
void free(void* p) noexcept {
  mi_free(p);
}
void* aligned_alloc(std::size_t a, std::size_t n) noexcept {
  counted();
  return __real_mi_malloc_aligned(n, a);
}
void* memalign(std::size_t a, std::size_t n) noexcept {
  counted();
  return __real_mi_malloc_aligned(n, a);
}
void* valloc(std::size_t n) noexcept {
  counted();
  return mi_valloc(n);
}
int posix_memalign(void** out, std::size_t a, std::size_t n) noexcept {
  counted();
  if (a < sizeof(void*) || (a & (a - 1)) != 0) return EINVAL;
  void* p = __real_mi_malloc_aligned(n, a);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
}

// operator new and delete in all their forms.
namespace {
void* new_or_throw(std::size_t n, std::size_t align) {
  counted();
  if (void* p = __real_mi_malloc_aligned(n ? n : 1, align)) return p;
  throw std::bad_alloc();
}
void* new_or_null(std::size_t n, std::size_t align) noexcept {
  counted();
  return __real_mi_malloc_aligned(n ? n : 1, align);
}
constexpr std::size_t kPlain = __STDCPP_DEFAULT_NEW_ALIGNMENT__;
}  // namespace

void* operator new(std::size_t n) {
  return new_or_throw(n, kPlain);
}
void* operator new[](std::size_t n) {
  return new_or_throw(n, kPlain);
}
void* operator new(std::size_t n, std::align_val_t a) {
  return new_or_throw(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return new_or_throw(n, static_cast<std::size_t>(a));
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  return new_or_null(n, kPlain);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return new_or_null(n, kPlain);
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return new_or_null(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return new_or_null(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept {
  mi_free(p);
}
void operator delete[](void* p) noexcept {
  mi_free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  mi_free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  mi_free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  mi_free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  mi_free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  mi_free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  mi_free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  mi_free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  mi_free(p);
}
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  mi_free(p);
}
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  mi_free(p);
}

namespace rail {
namespace {

using namespace std::chrono_literals;

struct Payload {
  std::uint64_t order;
  double amount;
};

std::uint64_t allocations_during(const std::function<void()>& f) {
  const std::uint64_t rail_before = rail::detail::allocation_stats().allocations;
  g_allocations.store(0);
  g_counting.store(true);
  f();
  g_counting.store(false);
  return g_allocations.load() + (rail::detail::allocation_stats().allocations - rail_before);
}

// keep(p): stores p where the compiler cannot see it unused, so that it does not pair an
// allocation with its release and drop both.
void* volatile g_sink = nullptr;
void* keep(void* p) {
  g_sink = p;
  return p;
}

TEST(Allocation, CounterSeesEveryAllocationPath) {
  // One allocation per path, each counted exactly once (no path counts twice through another).
  const std::vector<std::pair<std::string, std::function<void()>>> paths = {
      {"operator new", [] { ::operator delete(keep(::operator new(24))); }},
      {"operator new[]", [] { ::operator delete[](keep(::operator new[](24))); }},
      {"aligned new",
       [] {
         ::operator delete (keep(::operator new (24, std::align_val_t{64})), std::align_val_t{64});
       }},
      {"aligned new[]",
       [] {
         ::operator delete[](keep(::operator new[](24, std::align_val_t{64})),
                             std::align_val_t{64});
       }},
      {"nothrow new", [] { ::operator delete(keep(::operator new(24, std::nothrow))); }},
      {"nothrow new[]", [] { ::operator delete[](keep(::operator new[](24, std::nothrow))); }},
      {"aligned nothrow new",
       [] {
         ::operator delete (keep(::operator new (24, std::align_val_t{64}, std::nothrow)),
                            std::align_val_t{64});
       }},
      {"aligned nothrow new[]",
       [] {
         ::operator delete[](keep(::operator new[](24, std::align_val_t{64}, std::nothrow)),
                             std::align_val_t{64});
       }},
      {"malloc", [] { std::free(keep(std::malloc(24))); }},
      {"calloc", [] { std::free(keep(std::calloc(3, 8))); }},
      {"realloc", [] { std::free(keep(std::realloc(nullptr, 24))); }},
      {"aligned_alloc", [] { std::free(keep(std::aligned_alloc(64, 64))); }},
      {"memalign", [] { std::free(keep(memalign(64, 24))); }},
      {"valloc", [] { std::free(keep(valloc(24))); }},
      {"posix_memalign",
       [] {
         void* p = nullptr;
         if (posix_memalign(&p, 64, 24) == 0) std::free(keep(p));
       }},
      {"mi_malloc", [] { mi_free(keep(mi_malloc(24))); }},
      {"mi_zalloc", [] { mi_free(keep(mi_zalloc(24))); }},
      {"mi_calloc", [] { mi_free(keep(mi_calloc(3, 8))); }},
      {"mi_realloc", [] { mi_free(keep(mi_realloc(nullptr, 24))); }},
      {"mi_malloc_aligned", [] { mi_free(keep(mi_malloc_aligned(24, 64))); }},
      {"mi_zalloc_aligned", [] { mi_free(keep(mi_zalloc_aligned(24, 64))); }},
      {"mi_realloc_aligned", [] { mi_free(keep(mi_realloc_aligned(nullptr, 24, 64))); }},
  };
  for (const auto& [name, path] : paths)
    EXPECT_EQ(allocations_during(path), 1u) << name;
  // On another thread too: the counter is process-wide.
  std::atomic<bool> go{false};
  std::thread other([&] {
    while (!go.load())
      std::this_thread::yield();
    std::free(keep(std::malloc(24)));
  });
  EXPECT_EQ(allocations_during([&] {
              go.store(true);
              other.join();
            }),
            1u);
}

TEST(Allocation, SteadyStateAddAndRunAllocatesNothing) {
#ifdef RAIL_SANITIZED
  GTEST_SKIP() << "sanitizers supply their own allocator";
#endif
  ManualClock clock;
  Engine engine({.clock = &clock, .mode = Mode::inlined});
  auto q = engine.declare_queue<Payload>("q", QueueOptions{.capacity = 1024});
  std::uint64_t sum = 0;
  // Short error strings fit the small-string buffer; a retry records one per failed attempt.
  q.process({}, [&](Job<Payload>& j) {
    sum += j.data().order;
    return j.attempt() == 1 && j.data().order % 4 == 0 ? Outcome::retry("flaky") : Outcome::done();
  });
  JobOptions o{.max_attempts = 2, .backoff = Backoff::fixed(1ms)};
  auto round = [&](std::uint64_t base) {
    for (std::uint64_t i = 0; i < 512; ++i)
      (void)q.add("charge", Payload{base + i, 1.0}, o);
    engine.run_until_idle();
    clock.advance(1ms);
    engine.run_until_idle();
  };
  // Warm-up: fill every slot with a job that fails once, so each slot's error log exists (it is
  // created on a slot's first failure, through mi_malloc_aligned, and kept for reuse); then a few
  // ordinary rounds.
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
  auto q = engine.declare_queue<int>("q", QueueOptions{.capacity = 256});
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
  // Warm-up: a slot's first dedup id creates its extra record (mi_malloc_aligned, kept for
  // reuse), so fill every slot with a dedup job once; then a few ordinary rounds. (Rounds alone
  // leave some slots never used by a first add: the duplicates take and return a slot each.)
  for (int i = 0; i < 256; ++i) {
    o.dedup.id = "warm-" + std::to_string(i);
    (void)q.add("email", i, o);
  }
  engine.run_until_idle();
  for (int warm = 0; warm < 8; ++warm)
    round(warm * 128);
  auto n = allocations_during([&] {
    for (int r = 0; r < 100; ++r)
      round(r * 128);
  });
  EXPECT_EQ(n, 0u);
}

TEST(Allocation, ThreadedSteadyStateAllocatesNothingOnAnyThread) {
#ifdef RAIL_SANITIZED
  GTEST_SKIP() << "sanitizers supply their own allocator";
#endif
  // Two workers and the timer thread (woken by the manual clock) run retries, delays and dedup
  // ids; counting covers them all, since the counter is process-wide.
  constexpr std::uint64_t kCapacity = 1024, kPerRound = 256;
  ManualClock clock;
  Engine engine({.clock = &clock});
  auto q = engine.declare_queue<Payload>("q", QueueOptions{.capacity = kCapacity});
  std::atomic<std::uint64_t> sum{0};
  q.process({.concurrency = 2}, [&](Job<Payload>& j) {
    sum.fetch_add(j.data().order, std::memory_order_relaxed);
    return j.attempt() == 1 && j.data().order % 4 == 0 ? Outcome::retry("flaky") : Outcome::done();
  });
  JobOptions plain{.max_attempts = 2, .backoff = Backoff::fixed(1ms)};
  JobOptions delayed = plain;
  delayed.delay = 1ms;
  JobOptions deduped = plain;
  deduped.dedup.id.reserve(32);
  std::uint64_t added = 0;
  // Waits (without allocating) until every job added so far has ended, moving the clock so that
  // delays and backoffs come due on the timer thread.
  auto settle = [&] {
    while (q.counts().completed != added) {
      clock.advance(1ms);
      std::this_thread::yield();
    }
  };
  auto round = [&](std::uint64_t base) {
    for (std::uint64_t i = 0; i < kPerRound; ++i) {
      const std::uint64_t order = base + i;
      const JobOptions* o = &plain;
      if (i % 8 == 1) o = &delayed;
      if (i % 8 == 2) {
        deduped.dedup.id.assign("order-");
        deduped.dedup.id += static_cast<char>('a' + order % 26);
        deduped.dedup.id += static_cast<char>('a' + order / 26 % 26);
        deduped.dedup.id += static_cast<char>('a' + order / 676 % 26);
        o = &deduped;
      }
      if (q.add("charge", Payload{order, 1.0}, *o).status == AddStatus::added) ++added;
    }
    settle();
  };
  // Warm-up: every slot fails once (its error log exists from then on), then ordinary rounds.
  for (std::uint64_t i = 0; i < kCapacity; ++i)
    if (q.add("charge", Payload{4 * i, 1.0}, plain).status == AddStatus::added) ++added;
  settle();
  for (std::uint64_t warm = 0; warm < 8; ++warm)
    round(warm * kPerRound);
  const std::uint64_t added_before = added;
  auto n = allocations_during([&] {
    for (std::uint64_t r = 0; r < 100; ++r)
      round(r * kPerRound);
  });
  EXPECT_EQ(n, 0u) << "allocations per job: "
                   << static_cast<double>(n) / static_cast<double>(added - added_before);
  EXPECT_EQ(added - added_before, 100 * kPerRound);
  EXPECT_EQ(q.counts().completed, q.counts().added);
  EXPECT_GT(sum.load(), 0u);
}

// A thread's first counter bump or observer walk claims its thread index: with a thread_local
// whose destructor freed it, glibc allocated to register that destructor, and the timer thread's
// first count inside ThreadedSteadyState...'s window was 1 allocation in 25,600 jobs. The index
// is freed by a pthread key instead, whose value glibc keeps in the thread.
TEST(Allocation, AThreadsFirstIndexAllocatesNothing) {
#ifdef RAIL_SANITIZED
  GTEST_SKIP() << "sanitizers supply their own allocator";
#endif
  (void)detail::this_thread_index();  // the allocator itself exists from here on
  std::uint64_t n = 1;
  std::uint32_t index = detail::kNoThreadIndex;
  std::thread([&] { n = allocations_during([&] { index = detail::this_thread_index(); }); }).join();
  EXPECT_NE(index, detail::kNoThreadIndex);
  EXPECT_EQ(n, 0u);
}

// A worker's first turn at the wheel (here: its handler asks next_timer_in(); a worker's
// poll_timers that fires due timers is another) built its thread's delivery buffer, a
// thread_local whose destructor glibc registers with an allocation: ThreadedSteadyState...
// counted 1 allocation in 25,600 jobs once, when a worker first polled the timers inside the
// window. Worker threads now build it as they start (without: 2 here, one per worker).
TEST(Allocation, AWorkersFirstTurnAtTheWheelAllocatesNothing) {
#ifdef RAIL_SANITIZED
  GTEST_SKIP() << "sanitizers supply their own allocator";
#endif
  ManualClock clock;
  Engine engine({.clock = &clock});
  auto q = engine.declare_queue<int>("q", QueueOptions{.capacity = 64});
  std::atomic<bool> ask_the_wheel{false};
  std::atomic<int> asked{0};
  std::atomic<bool> meet{false};
  std::atomic<int> inside{0};
  q.process({.concurrency = 2}, [&](Job<int>&) {
    if (meet.load()) {  // both workers in a handler at once: both threads are past their start
      inside.fetch_add(1);
      while (inside.load() < 2)
        std::this_thread::yield();
    }
    if (ask_the_wheel.load()) {
      (void)engine.next_timer_in();
      asked.fetch_add(1);
    }
  });
  std::uint64_t added = 0;
  auto run = [&](int jobs) {
    for (int i = 0; i < jobs; ++i) {
      // 64 slots: an add may find them all still held (running, or freed into a worker's batch
      // not yet flushed); every job of the window must be added for `asked` to count 64.
      auto r = q.add("x", i);
      while (r.status == AddStatus::full) {
        std::this_thread::yield();
        r = q.add("x", i);
      }
      ASSERT_EQ(r.status, AddStatus::added);
      ++added;
    }
    while (q.counts().completed != added)
      std::this_thread::yield();
  };
  // A worker thread's first step allocates once (prepare_worker_thread). On a loaded machine the
  // second worker could start only after the warm-up, which one worker ran alone, and allocate
  // inside the window (1 run in 14 with 6 copies in parallel): two jobs that meet first.
  meet.store(true);
  run(2);
  meet.store(false);
  run(256);  // warm: the workers have run jobs, neither has touched the wheel
  ask_the_wheel.store(true);
  auto n = allocations_during([&] { run(64); });
  EXPECT_EQ(n, 0u);
  EXPECT_EQ(asked.load(), 64);
}

}  // namespace
}  // namespace rail
