// The asymmetric fence as a store-buffering litmus test: thread A stores x, light_fence(),
// loads y; thread B stores y, heavy_fence(), loads x. Both loads reading 0 is the outcome a
// Dekker handshake must exclude. Without fences it is common on x86 (each store waits in its
// core's store buffer while the other core loads), so the test bites when either side's fence
// stops working.
#include "rail/detail/asymmetric_fence.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <thread>

namespace {

using rail::detail::heavy_fence;
using rail::detail::light_fence;

// One round per `round` value: both threads spin until the round starts, race, and report.
struct Litmus {
  std::atomic<int> x{0}, y{0};
  std::atomic<int> r1{-1}, r2{-1};
  std::atomic<std::uint32_t> go{0}, done{0};
};

// await(a, v): spin (so that both threads are on a core when the round starts, which is when the
// reordering can show), yielding now and then (two cores, other tests running).
void await(const std::atomic<std::uint32_t>& a, std::uint32_t v) {
  for (std::uint32_t spins = 0; a.load(std::memory_order_acquire) != v; ++spins)
    if (spins % 4096 == 4095) std::this_thread::yield();
}

// jitter(state): a random pause of 0-1023 iterations, so that the two threads' stores meet in
// some rounds whatever the cores' relative latency (as in Preshing's "reordering caught in the
// act").
void jitter(std::uint64_t& state) {
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  for (std::uint64_t i = state & 1023; i > 0; --i)
    std::atomic_signal_fence(std::memory_order_seq_cst);  // keeps the loop
}

std::uint32_t both_zero(int rounds, bool fenced) {
  Litmus t;
  std::uint32_t forbidden = 0;
  std::uint64_t ra = 0x9E3779B97F4A7C15ull;
  std::thread b([&] {
    std::uint64_t rb = 0xD1B54A32D192ED03ull;
    for (int r = 1; r <= rounds; ++r) {
      await(t.go, static_cast<std::uint32_t>(r));
      jitter(rb);
      t.y.store(1, std::memory_order_relaxed);
      if (fenced) heavy_fence();
      t.r2.store(t.x.load(std::memory_order_relaxed), std::memory_order_relaxed);
      t.done.fetch_add(1, std::memory_order_acq_rel);
    }
  });
  for (int r = 1; r <= rounds; ++r) {
    t.x.store(0, std::memory_order_relaxed);
    t.y.store(0, std::memory_order_relaxed);
    t.go.store(static_cast<std::uint32_t>(r), std::memory_order_release);
    jitter(ra);
    jitter(ra);  // B first has to see `go`: start A later on average
    t.x.store(1, std::memory_order_relaxed);
    if (fenced) light_fence();
    t.r1.store(t.y.load(std::memory_order_relaxed), std::memory_order_relaxed);
    await(t.done, static_cast<std::uint32_t>(r));
    if (t.r1.load(std::memory_order_relaxed) == 0 && t.r2.load(std::memory_order_relaxed) == 0)
      ++forbidden;
  }
  b.join();
  return forbidden;
}

// Unfenced, the same rounds show the reordering (about one in ten when both threads have a
// core; on a loaded machine the threads may never overlap, so that count is reported, not
// asserted): it is what the fenced count must not show.
TEST(AsymmetricFence, LightAndHeavyFencesForbidBothLoadsMissingBothStores) {
  rail::detail::init_asymmetric_fence();
  const std::uint32_t unfenced = both_zero(20000, false);
  EXPECT_EQ(both_zero(20000, true), 0u)
      << "a store and a load on each side were reordered: the handshake is not fenced ("
      << (rail::detail::g_membarrier_expedited.load() ? "membarrier" : "full fences")
      << "); unfenced, " << unfenced << " of 20000 rounds reordered";
  std::printf("unfenced: %u of 20000 rounds reordered\n", unfenced);
}

TEST(AsymmetricFence, InitIsIdempotentAndTheHeavyFenceAlwaysReturns) {
  rail::detail::init_asymmetric_fence();
  const bool first = rail::detail::g_membarrier_expedited.load();
  rail::detail::init_asymmetric_fence();
  EXPECT_EQ(rail::detail::g_membarrier_expedited.load(), first);
  for (int i = 0; i < 100; ++i)
    heavy_fence();
}

}  // namespace
