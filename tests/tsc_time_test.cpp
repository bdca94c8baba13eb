// TscTime (detail/tsc_time.hpp) and TscClock (clock.hpp): the steady time read from the CPU's
// counter. A scripted Source (counter and kernel clock set by the test) pins the calibration:
// kernel readings until a period is measured, the counter's readings after, re-anchoring past a
// window, a fresh measurement when the counter jumps or goes back, and no torn anchor under
// concurrent re-anchoring. The real clock is then held to steady_clock's time and to never
// going back on a thread. No sleep decides an outcome.
#include "rail/detail/tsc_time.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <thread>
#include <vector>

#include "rail/clock.hpp"
#include "support/watchdog.hpp"

namespace rail::detail {
namespace {

using namespace std::chrono_literals;

/// Script: what the scripted counter and kernel clock read; tests move them.
struct Script {
  std::atomic<std::uint64_t> ticks{1'000'000};
  std::atomic<std::int64_t> kernel{5'000'000'000};
  std::atomic<std::uint64_t> tick_reads{0};
  std::uint64_t step = 0;  // each counter reading moves the counter on by this much
  bool usable = true;
};

struct ScriptedSource {
  Script* script;
  std::uint64_t ticks() const noexcept {
    script->tick_reads.fetch_add(1, std::memory_order_relaxed);
    return script->ticks.fetch_add(script->step, std::memory_order_relaxed);
  }
  std::int64_t kernel_ns() const noexcept { return script->kernel.load(std::memory_order_relaxed); }
  bool usable() const noexcept { return script->usable; }
};

using Time = BasicTscTime<ScriptedSource>;

/// advance(s, ns, ticks_per_ns): both clocks move on together.
void advance(Script& s, std::int64_t ns, std::uint64_t ticks_per_ns = 2) {
  s.kernel += ns;
  s.ticks += static_cast<std::uint64_t>(ns) * ticks_per_ns;
}

/// measure(t, s): t's period (2 ticks per ns) is measured over kMinBaselineNs.
void measure(Time& t, Script& s) {
  advance(s, Time::kMinBaselineNs);
  ASSERT_EQ(t.now(), s.kernel.load());
  ASSERT_TRUE(t.measured());
}

/// expect_kernel_readings(t, s, n): n baselines pass, and each reading is the kernel's.
void expect_kernel_readings(Time& t, Script& s, int n) {
  for (int i = 0; i < n; ++i) {
    advance(s, Time::kMinBaselineNs);
    EXPECT_EQ(t.now(), s.kernel.load());
  }
}

TEST(TscTime, ReadsTheKernelClockUntilAPeriodIsMeasured) {
  Script s;
  Time t(ScriptedSource{&s});
  advance(s, Time::kMinBaselineNs / 2);
  EXPECT_EQ(t.now(), s.kernel.load());
  EXPECT_FALSE(t.measured());
  s.kernel += 7;  // the counter does not move: still the kernel's reading
  EXPECT_EQ(t.now(), s.kernel.load());
}

TEST(TscTime, OnceMeasuredReadingsComeFromTheCounterAtTheMeasuredRate) {
  Script s;
  Time t(ScriptedSource{&s});
  measure(t, s);
  const std::int64_t anchored = s.kernel.load();
  s.ticks += 2'000;  // 1,000 ns at 2 ticks per ns; the kernel clock is not read
  EXPECT_EQ(t.now(), anchored + 1'000);
  s.ticks += 2 * 1'000'000;
  EXPECT_EQ(t.now(), anchored + 1'001'000);
}

TEST(TscTime, AReadingPastItsWindowReanchorsOnTheKernelClock) {
  Script s;
  Time t(ScriptedSource{&s});
  measure(t, s);
  advance(s, Time::kWindowTicks / 2 + 10);  // just past the window, kernel agreeing
  s.kernel += 3;                            // within what the check allows
  const std::int64_t kernel = s.kernel.load();
  EXPECT_EQ(t.now(), kernel);  // the slow path's reading is the kernel's
  EXPECT_TRUE(t.measured());
  s.ticks += 20;
  EXPECT_EQ(t.now(), kernel + 10);  // from the new anchor
}

TEST(TscTime, ACounterThatJumpsAheadIsMeasuredAfresh) {
  Script s;
  Time t(ScriptedSource{&s});
  measure(t, s);
  s.ticks += std::uint64_t{50} * Time::kWindowTicks;  // a restored VM: the counter leapt
  s.kernel += 1'000;
  EXPECT_EQ(t.now(), s.kernel.load());
  EXPECT_FALSE(t.measured());  // kernel readings until kMinBaselineNs of new baseline
  advance(s, 1'000);
  EXPECT_EQ(t.now(), s.kernel.load());
  advance(s, Time::kMinBaselineNs);
  EXPECT_EQ(t.now(), s.kernel.load());
  EXPECT_TRUE(t.measured());
  s.ticks += 4'000;
  EXPECT_EQ(t.now(), s.kernel.load() + 2'000);
}

TEST(TscTime, ACounterThatGoesBackIsMeasuredAfresh) {
  Script s;
  Time t(ScriptedSource{&s});
  measure(t, s);
  s.ticks -= 1'000'000;
  s.kernel += 500;
  EXPECT_EQ(t.now(), s.kernel.load());
  EXPECT_FALSE(t.measured());
}

TEST(TscTime, ACounterThatChangesRateIsMeasuredAfresh) {
  Script s;
  Time t(ScriptedSource{&s});
  measure(t, s);
  advance(s, Time::kWindowTicks + 1, 1);  // half the rate: past the window in twice the time
  EXPECT_EQ(t.now(), s.kernel.load());
  EXPECT_FALSE(t.measured());
}

TEST(TscTime, AReadingALittleBehindItsAnchorReadsTheAnchorsTime) {
  Script s;
  Time t(ScriptedSource{&s});
  measure(t, s);
  const std::int64_t anchored = s.kernel.load();
  s.ticks -= 100;       // a CPU whose counter trails the anchoring CPU's
  s.kernel += 999'999;  // would show if the kernel clock were read
  EXPECT_EQ(t.now(), anchored);
  EXPECT_TRUE(t.measured());
}

TEST(TscTime, AnAnchorWhoseReadingsAreFarApartIsNotUsed) {
  // Every counter reading moves the counter on by 2,000 ticks (the reading thread was
  // preempted): no anchor pairs a counter reading tightly with the kernel's, so none measures a
  // period, and every reading is the kernel's.
  Script s;
  s.step = 2'000;
  Time t(ScriptedSource{&s});
  expect_kernel_readings(t, s, 3);
  EXPECT_FALSE(t.measured());
  s.step = 0;  // quiet again: the next anchor is tight and starts a new baseline
  advance(s, Time::kMinBaselineNs);
  EXPECT_EQ(t.now(), s.kernel.load());
  EXPECT_FALSE(t.measured());
  advance(s, Time::kMinBaselineNs);
  EXPECT_EQ(t.now(), s.kernel.load());
  EXPECT_TRUE(t.measured());
}

TEST(TscTime, ACounterThatKeepsJumpingIsGivenUp) {
  // Three resets within 10 s: the counter is no longer read, whatever it does next.
  Script s;
  Time t(ScriptedSource{&s});
  for (int i = 0; i < Time::kMaxResets; ++i) {
    measure(t, s);
    s.ticks += std::uint64_t{50} * Time::kWindowTicks;
    EXPECT_EQ(t.now(), s.kernel.load());
  }
  EXPECT_TRUE(t.given_up());
  const std::uint64_t reads = s.tick_reads.load();
  expect_kernel_readings(t, s, 3);
  EXPECT_FALSE(t.measured());
  EXPECT_EQ(s.tick_reads.load(), reads);
}

TEST(TscTime, ResetsFarApartDoNotGiveTheCounterUp) {
  Script s;
  Time t(ScriptedSource{&s});
  for (int i = 0; i < 2 * Time::kMaxResets; ++i) {
    measure(t, s);
    s.ticks += std::uint64_t{50} * Time::kWindowTicks;
    s.kernel += Time::kResetSpanNs;  // each reset 10 s after the previous one
    EXPECT_EQ(t.now(), s.kernel.load());
  }
  EXPECT_FALSE(t.given_up());
  measure(t, s);
}

TEST(TscTime, ThePeriodFollowsTheKernelClocksRateWithinTwoMaxBaselines) {
  // For 30 s the kernel clock runs at 2 ticks per ns; then 100 ppm faster (NTP slewing it,
  // within what agrees() takes for the same clock). Measured from a fixed origin, the period
  // would stay a blend of both rates (an error of ~6 us per window at 55 s); the origin moves
  // up every 10 s, so 25 s later the period is the new rate's.
  Script s;
  Time t(ScriptedSource{&s});
  measure(t, s);
  const auto step = [&](std::int64_t ppm) {
    const std::int64_t ns = Time::kWindowTicks / 2 + 1'000;
    s.ticks += static_cast<std::uint64_t>(2 * ns);
    s.kernel += ns + ns * ppm / 1'000'000;
    ASSERT_EQ(t.now(), s.kernel.load());  // past the window: re-anchors on the kernel
  };
  while (s.kernel.load() < 35'000'000'000)
    step(0);
  while (s.kernel.load() < 60'000'000'000)
    step(100);
  const std::int64_t anchored = s.kernel.load();
  s.ticks += static_cast<std::uint64_t>(Time::kWindowTicks);  // a window's ticks, kernel still
  const std::int64_t expected = anchored + (Time::kWindowTicks / 2) * 10'001 / 10'000;  // 1e-4
  EXPECT_LT(std::abs(t.now() - expected), 200) << "a fixed origin would be ~6 us off";
  EXPECT_TRUE(t.measured());
}

TEST(TscTime, AnUnusableCounterIsNeverRead) {
  Script s;
  s.usable = false;
  Time t(ScriptedSource{&s});
  expect_kernel_readings(t, s, 3);
  EXPECT_FALSE(t.measured());
  EXPECT_EQ(s.tick_reads.load(), 0U);
}

TEST(TscTime, EachReanchoringMeasuresThePeriodOverALongerBaseline) {
  // The first anchor after the origin reads the kernel 400 ns late (sampling noise): a period
  // measured over 10 ms is that much off, and a window later the counter's reading is off by
  // about 400 ns * window / 10 ms. Re-measured from the origin over that longer baseline, the
  // next window's error is a fraction of it.
  Script s;
  Time t(ScriptedSource{&s});
  advance(s, Time::kMinBaselineNs);
  s.kernel += 400;
  ASSERT_EQ(t.now(), s.kernel.load());
  s.kernel -= 400;
  const std::int64_t window_ns = Time::kWindowTicks / 2;
  advance(s, window_ns - 1'000);
  const std::int64_t first_error = t.now() - s.kernel.load();
  EXPECT_GT(first_error, 1'000);  // ~400 * 134 / 10 = ~5.4 us
  advance(s, 2'000);              // past the window: re-anchors on the (now exact) kernel
  ASSERT_EQ(t.now(), s.kernel.load());
  advance(s, window_ns - 1'000);
  const std::int64_t second_error = t.now() - s.kernel.load();
  EXPECT_LT(std::abs(second_error), first_error / 50);
}

/// OneTime: a counter and a kernel clock that read one atomic time, so an anchor taken while
/// the time stands still is exact (TscTime keeps the tightest of its tries).
struct OneTime {
  std::atomic<std::int64_t>* t;
  std::uint64_t ticks() const noexcept {
    return 2 * static_cast<std::uint64_t>(t->load(std::memory_order_relaxed));
  }
  std::int64_t kernel_ns() const noexcept { return t->load(std::memory_order_relaxed); }
  bool usable() const noexcept { return true; }
};

/// SlowPublish: the writer holds still for ~2 us between an anchor's counter and its time.
struct SlowPublish {
  static void publishing() noexcept {
    const auto until = std::chrono::steady_clock::now() + 2us;
    while (std::chrono::steady_clock::now() < until) {
    }
  }
};

TEST(TscTime, ConcurrentReadersNeverSeeATornAnchor) {
  // One thread moves the time on by a window and a bit per step, so that each step's first
  // reading re-anchors (100,000 re-anchorings, 20,000 under sanitizers), and three readers
  // check that every reading lies within the times read around it. The writer holds still
  // between the anchor's counter and its time (SlowPublish), so readers do meet half-written
  // anchors: one anchor's counter with the previous one's time is off by a window, ~134 ms.
  // The 20 ms of slack is for nothing in particular (exact anchors here read exactly).
  test::Watchdog dog(120s, "TscTime torn anchors");
  std::atomic<std::int64_t> now{1'000'000'000};
  BasicTscTime<OneTime, SlowPublish> t(OneTime{&now});
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> bad{0};
  std::atomic<std::uint64_t> readings{0};
#ifdef RAIL_SANITIZED
  constexpr int kSteps = 20'000;
#else
  constexpr int kSteps = 100'000;
#endif
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r)
    readers.emplace_back([&] {
      while (!done.load(std::memory_order_acquire)) {
        const std::int64_t before = now.load();
        const std::int64_t reading = t.now();
        const std::int64_t after = now.load();
        if (reading < before - 20'000'000 || reading > after + 20'000'000)
          bad.fetch_add(1, std::memory_order_relaxed);
        readings.fetch_add(1, std::memory_order_relaxed);
      }
    });
  const auto real = [] { return std::chrono::steady_clock::now(); };
  for (int i = 0; i < kSteps; ++i) {
    now += Time::kWindowTicks / 2 + 1'000;  // 2 ticks per ns: just past the window
    const auto until = real() + 1us;        // readers read (and one re-anchors) meanwhile
    while (real() < until) {
    }
    if (i % 256 == 0) std::this_thread::yield();  // let the readers in on two cores
  }
  done.store(true, std::memory_order_release);
  for (auto& r : readers)
    r.join();
  EXPECT_EQ(bad.load(), 0U);
  EXPECT_GT(readings.load(), std::uint64_t{kSteps});
  EXPECT_TRUE(t.measured());
}

TEST(TscClock, ReadsSteadyClocksTime) {
  // Every reading lies between steady_clock's readings around it, give or take the
  // calibration's error (1 ms is far beyond it: ~2 us at worst, in the window after the first
  // measurement). Readings go on for 0.5 s: a few re-anchorings, and the first measurement
  // when this test runs first (the calibration is the process's).
  auto& clock = TscClock::instance();
  const auto steady = [] { return std::chrono::steady_clock::now().time_since_epoch().count(); };
  const std::int64_t start = steady();
  std::int64_t worst = 0;
  std::uint64_t n = 0;
  while (steady() - start < 500'000'000) {
    const std::int64_t before = steady();
    const std::int64_t reading = clock.now().time_since_epoch().count();
    const std::int64_t after = steady();
    worst = std::max({worst, before - reading, reading - after});
    ++n;
  }
  EXPECT_LT(worst, 1'000'000) << "over " << n << " readings; counting: " << clock.counting();
}

TEST(TscClock, NeverGoesBackOnAThread) {
  // Four threads on two cores (they move between CPUs) read for 0.4 s each, through a few
  // re-anchorings.
  test::Watchdog dog(120s, "TscClock monotonic");
  auto& clock = TscClock::instance();
  std::atomic<std::uint64_t> back{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&] {
      const auto until = std::chrono::steady_clock::now() + 400ms;
      TimePoint last = clock.now();
      while (std::chrono::steady_clock::now() < until) {
        for (int i = 0; i < 1'000; ++i) {
          const TimePoint now = clock.now();
          if (now < last) back.fetch_add(1, std::memory_order_relaxed);
          last = now;
        }
      }
    });
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(back.load(), 0U);
}

}  // namespace
}  // namespace rail::detail
