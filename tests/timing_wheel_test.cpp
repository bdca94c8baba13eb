// Tests for rail::detail::TimingWheel on a fake clock: the test owns time and calls advance() with
// chosen nanosecond values, so nothing sleeps and every run is reproducible from its seed.
//
// Most tests go through Harness, which mirrors every schedule/cancel into a reference
// std::multimap<deadline, serial> and checks each advance() against it: the nodes fired are
// exactly the reference's entries with deadline <= now, in the reference's order (deadline, then
// schedule order), each once, none early, and nothing due is left behind (lateness 0).
//
// Typed over wheel shapes: tiny wheels (LevelBits 1-2) overflow and cascade every few ticks, a tick
// of 7 ns makes most test times fall inside a tick, and <8,4> at 1 ms is the engine's default.
#include "rail/detail/timing_wheel.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "rail/error.hpp"

namespace {

using rail::detail::TimerNode;

constexpr std::int64_t kMaxNs = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kMinNs = std::numeric_limits<std::int64_t>::min();

template <unsigned LevelBitsV, unsigned LevelsV, std::int64_t TickV>
struct Shape {
  using Wheel = rail::detail::TimingWheel<LevelBitsV, LevelsV>;
  static constexpr unsigned kLevelBits = LevelBitsV;
  static constexpr unsigned kLevels = LevelsV;
  static constexpr std::int64_t kTick = TickV;
  static constexpr std::int64_t kSlots = std::int64_t{1} << LevelBitsV;
  // Ticks covered by one aligned top-level block; a deadline outside the cursor's block overflows.
  static constexpr std::int64_t kSpanTicks = std::int64_t{1} << (LevelBitsV * LevelsV);
  static constexpr std::int64_t kSpanNs = kSpanTicks * TickV;
  static std::string name() {
    return "LevelBits" + std::to_string(LevelBitsV) + "_Levels" + std::to_string(LevelsV) +
           "_Tick" + std::to_string(TickV) + "ns";
  }
};

using Shapes = ::testing::Types<Shape<1, 3, 3>, Shape<2, 2, 7>, Shape<2, 3, 7>, Shape<4, 3, 1>,
                                Shape<8, 4, 1'000'000>>;

struct ShapeName {
  template <class T>
  static std::string GetName(int) {
    return T::name();
  }
};

std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  const std::int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}

// A seeded generator whose draws do not depend on the standard library's distributions, so a
// failing seed replays identically with g++ and clang.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : engine_(seed) {}
  // Uniform in [lo, hi], inclusive.
  std::int64_t uniform(std::int64_t lo, std::int64_t hi) {
    const auto width = static_cast<std::uint64_t>(hi) - static_cast<std::uint64_t>(lo);
    if (width == std::numeric_limits<std::uint64_t>::max())
      return static_cast<std::int64_t>(engine_());
    return static_cast<std::int64_t>(static_cast<std::uint64_t>(lo) + engine_() % (width + 1));
  }
  bool chance(double p) { return unit() < p; }
  double unit() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  // Log-uniform in [lo, hi] (lo >= 1): as many values per decade at every scale.
  std::int64_t log_uniform(std::int64_t lo, std::int64_t hi) {
    const double x =
        std::exp(std::log(static_cast<double>(lo)) +
                 unit() * (std::log(static_cast<double>(hi)) - std::log(static_cast<double>(lo))));
    return std::clamp(static_cast<std::int64_t>(x), lo, hi);
  }

 private:
  std::mt19937_64 engine_;
};

std::uint64_t seed_from_env() {
  if (const char* text = std::getenv("RAIL_TEST_SEED")) return std::strtoull(text, nullptr, 0);
  return 0x7a11'5eedULL;
}

// Records with an embedded TimerNode, a reference model and a checked advance().
template <class S>
class Harness {
 public:
  enum class State : std::uint8_t { pending, fired, cancelled };

  Harness(std::int64_t start_ns, std::size_t records)
      : start_(start_ns),
        wheel_(std::make_unique<typename S::Wheel>(S::kTick, start_ns)),
        records_(records) {
    for (std::size_t i = 0; i < records; ++i)
      records_[i].node.tag = i;
  }

  typename S::Wheel& wheel() { return *wheel_; }
  std::size_t records() const { return records_.size(); }
  std::int64_t now() const { return wheel_->now_ns(); }
  bool pending(std::size_t id) const { return records_[id].node.linked(); }
  int fires(std::size_t id) const { return records_[id].fires; }
  std::size_t serials() const { return serial_state_.size(); }
  State serial_state(std::size_t serial) const { return serial_state_[serial]; }
  std::size_t current_serial(std::size_t id) const { return records_[id].serial; }
  std::int64_t deadline(std::size_t id) const { return records_[id].node.deadline; }
  std::size_t live() const { return reference_.size(); }

  // on_fire(id) runs inside on_expire, after the harness has checked and recorded the firing.
  void set_on_fire(std::function<void(std::size_t)> hook) { on_fire_ = std::move(hook); }

  void schedule(std::size_t id, std::int64_t deadline) {
    Record& rec = records_[id];
    ASSERT_FALSE(rec.node.linked()) << "test bug: record " << id << " is still pending";
    rec.serial = serial_state_.size();
    serial_state_.push_back(State::pending);
    serial_deadline_.push_back(deadline);
    rec.where = reference_.emplace(deadline, rec.serial);  // equal keys: after, like the wheel
    wheel_->schedule(rec.node, deadline);
    EXPECT_EQ(rec.node.deadline, deadline);
    EXPECT_TRUE(rec.node.linked());
  }

  // Cancels and checks the return value against the model: true exactly when pending.
  bool cancel(std::size_t id) {
    Record& rec = records_[id];
    const bool expected = !serial_state_.empty() && rec.serial != kNone &&
                          serial_state_[rec.serial] == State::pending;
    const bool was_linked = wheel_->cancel(rec.node);
    EXPECT_EQ(was_linked, expected) << "record " << id;
    EXPECT_FALSE(rec.node.linked());
    if (was_linked && expected) {
      serial_state_[rec.serial] = State::cancelled;
      reference_.erase(rec.where);
    }
    return was_linked;
  }

  // advance(now) and check the firing against the reference. Returns the number fired.
  std::size_t advance(std::int64_t now) {
    const std::int64_t effective = std::max(now, wheel_->now_ns());
    const std::size_t first_new_serial = serial_state_.size();
    std::vector<std::size_t> due_before;
    for (auto it = reference_.begin(); it != reference_.end() && it->first <= effective; ++it) {
      due_before.push_back(it->second);
    }
    fired_.clear();
    const std::size_t count = wheel_->advance(now, [&](TimerNode& node) { on_expire(node); });
    EXPECT_EQ(count, fired_.size());
    EXPECT_EQ(wheel_->now_ns(), effective);

    // Every node due before the call fired in it (or a callback cancelled it first), in reference
    // order; nodes scheduled by callbacks are checked for never-early and not-left-behind only.
    std::vector<std::size_t> fired_old;
    for (std::size_t serial : fired_) {
      if (serial < first_new_serial) fired_old.push_back(serial);
    }
    std::vector<std::size_t> expected_old;
    for (std::size_t serial : due_before) {
      if (serial_state_[serial] == State::fired) {
        expected_old.push_back(serial);
      } else {
        EXPECT_EQ(serial_state_[serial], State::cancelled)
            << "serial " << serial << " was due at " << effective << " but did not fire";
      }
    }
    EXPECT_EQ(fired_old, expected_old) << "fired set or order differs from the reference";
    if (!reference_.empty()) {
      EXPECT_GT(reference_.begin()->first, effective)
          << "a timer due at " << reference_.begin()->first << " was left pending at " << effective;
    }
    EXPECT_EQ(wheel_->size(), reference_.size());
    return count;
  }

  // next_event_ns() is a lower bound on every pending deadline, and exact where the header says;
  // earliest_deadline_ns() is the earliest pending deadline, always.
  void check_next_event() {
    const std::optional<std::int64_t> next = wheel_->next_event_ns();
    const std::optional<std::int64_t> exact = wheel_->earliest_deadline_ns();
    if (reference_.empty()) {
      EXPECT_FALSE(next.has_value());
      EXPECT_FALSE(exact.has_value());
      return;
    }
    ASSERT_TRUE(exact.has_value());
    EXPECT_EQ(*exact, reference_.begin()->first) << "earliest_deadline_ns() must be exact";
    ASSERT_TRUE(next.has_value());
    const std::int64_t earliest = reference_.begin()->first;
    EXPECT_LE(*next, earliest);
    if (earliest <= now()) return;  // due already: any value <= earliest is right
    const auto origin = static_cast<std::uint64_t>(floor_div(start_, S::kTick));
    const auto tick = static_cast<std::uint64_t>(floor_div(earliest, S::kTick)) - origin;
    const auto cursor = static_cast<std::uint64_t>(floor_div(now(), S::kTick)) - origin;
    if (tick == cursor) {
      EXPECT_EQ(*next, earliest) << "earliest timer is in the current tick: must be exact";
    } else if ((tick >> S::kLevelBits) == (cursor >> S::kLevelBits)) {
      EXPECT_EQ(*next, floor_div(earliest, S::kTick) * S::kTick)
          << "earliest timer is on level 0: must be its deadline rounded down to its tick";
    }
  }

 private:
  static constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();
  using Reference = std::multimap<std::int64_t, std::size_t>;
  struct Record {
    TimerNode node;
    std::size_t serial = kNone;
    int fires = 0;
    Reference::iterator where;
  };

  void on_expire(TimerNode& node) {
    ASSERT_LT(node.tag, records_.size());
    Record& rec = records_[node.tag];
    EXPECT_EQ(&rec.node, &node);
    EXPECT_FALSE(node.linked()) << "on_expire must see the node already unlinked";
    EXPECT_LE(node.deadline, wheel_->now_ns()) << "fired early";
    EXPECT_EQ(node.deadline, serial_deadline_[rec.serial]);
    EXPECT_EQ(serial_state_[rec.serial], State::pending) << "fired twice or after cancel";
    serial_state_[rec.serial] = State::fired;
    ++rec.fires;
    reference_.erase(rec.where);
    fired_.push_back(rec.serial);
    if (on_fire_) on_fire_(node.tag);
  }

  std::int64_t start_;
  std::unique_ptr<typename S::Wheel> wheel_;  // 32 KiB of sentinels at the default shape
  std::vector<Record> records_;               // sized once: linked nodes must not move
  Reference reference_;
  std::vector<State> serial_state_;  // one entry per schedule() call
  std::vector<std::int64_t> serial_deadline_;
  std::vector<std::size_t> fired_;
  std::function<void(std::size_t)> on_fire_;
};

template <class S>
class TimingWheel : public ::testing::Test {};
TYPED_TEST_SUITE(TimingWheel, Shapes, ShapeName);

// Deadlines on both sides of every slot and level boundary, measured both from start and from the
// aligned blocks, up to the overflow (level == kLevels).
template <class S>
std::vector<std::int64_t> boundary_deadlines(std::int64_t start) {
  std::vector<std::int64_t> out;
  for (unsigned level = 0; level <= S::kLevels; ++level) {
    const std::int64_t span = S::kTick << (S::kLevelBits * level);
    const std::int64_t aligned = floor_div(start, span) * span;
    for (std::int64_t m : {std::int64_t{1}, std::int64_t{2}, std::int64_t{3}, S::kSlots - 1,
                           S::kSlots, S::kSlots + 1, 2 * S::kSlots + 1}) {
      for (std::int64_t offset : {-1, 0, 1}) {
        out.push_back(start + m * span + offset);
        out.push_back(aligned + m * span + offset);
      }
    }
  }
  return out;
}

// Starts that put the cursor at zero, two ticks before a top-level block boundary (so even short
// timers start in the overflow), and at a negative, non-aligned time.
template <class S>
std::vector<std::int64_t> interesting_starts() {
  return {0, S::kTick * (3 * S::kSpanTicks - 2) + S::kTick / 2, -(2 * S::kSpanNs) - 3};
}

TYPED_TEST(TimingWheel, NeverFiresBeforeDeadline) {
  using S = TypeParam;
  for (std::int64_t start : interesting_starts<S>()) {
    SCOPED_TRACE("start_ns=" + std::to_string(start));
    const std::vector<std::int64_t> deadlines = boundary_deadlines<S>(start);
    Harness<S> h(start, deadlines.size());
    for (std::size_t id = 0; id < deadlines.size(); ++id) {
      h.schedule(id, deadlines[id]);
    }
    h.advance(start);  // deadlines <= start are due at once; the harness checks exactly which
    std::vector<std::int64_t> times = deadlines;
    std::sort(times.begin(), times.end());
    times.erase(std::unique(times.begin(), times.end()), times.end());
    for (std::int64_t d : times) {
      if (d <= h.now()) continue;
      // One nanosecond short of a deadline fires nothing; the deadline itself fires every timer
      // that has it (the harness checks which ones).
      EXPECT_EQ(h.advance(d - 1), 0u) << "something fired before " << d;
      const auto expected =
          static_cast<std::size_t>(std::count(deadlines.begin(), deadlines.end(), d));
      EXPECT_EQ(h.advance(d), expected) << "at " << d;
      h.check_next_event();
      if (this->HasFailure()) return;
    }
    EXPECT_EQ(h.wheel().size(), 0u);
  }
}

TYPED_TEST(TimingWheel, FiresExactlyOnceAtOrAfterDeadline) {
  using S = TypeParam;
  Rng rng(seed_from_env() ^ 0x1);
  const std::int64_t start = S::kTick * 1000 + 1;
  Harness<S> h(start, 3000);
  for (std::size_t id = 0; id < h.records(); ++id) {
    h.schedule(id, start + rng.log_uniform(1, 4 * S::kSpanNs));
  }
  // Coarse steps, rarely tick-aligned: each timer must fire in the first step that passes it.
  while (h.wheel().size() > 0) {
    const std::int64_t step = rng.log_uniform(1, S::kSpanNs / 2);
    h.advance(h.now() + step);
    if (this->HasFailure()) return;
  }
  for (std::size_t id = 0; id < h.records(); ++id)
    EXPECT_EQ(h.fires(id), 1) << "record " << id;
  // Nothing is left to fire, however far time moves.
  EXPECT_EQ(h.advance(kMaxNs), 0u);
  EXPECT_FALSE(h.wheel().next_event_ns().has_value());
}

TYPED_TEST(TimingWheel, FiresInSameAdvanceWhenDeadlineAlreadyPassed) {
  using S = TypeParam;
  const std::int64_t start = S::kTick * 5 + S::kTick / 2;
  Harness<S> h(start, 8);
  const std::int64_t now = start + 3 * S::kSpanNs + 1;
  EXPECT_EQ(h.advance(now), 0u);
  // Deadlines at, just before, and far before the wheel's time, in scrambled order.
  h.schedule(0, now);
  h.schedule(1, now - 1);
  h.schedule(2, kMinNs);
  h.schedule(3, start - 10 * S::kSpanNs);
  h.schedule(4, now - 1);
  h.check_next_event();
  EXPECT_LE(*h.wheel().next_event_ns(), now) << "something is due: next_event must say 'now'";
  // An advance that does not move time still fires them, in deadline order (the harness checks).
  EXPECT_EQ(h.advance(now), 5u);
  // Same for an advance to an earlier time: time stays, the due node fires.
  h.schedule(5, now - 7);
  EXPECT_EQ(h.advance(now - 1000), 1u);
  EXPECT_EQ(h.now(), now);
  // A deadline one nanosecond ahead is not due yet.
  h.schedule(6, now + 1);
  EXPECT_EQ(h.advance(now), 0u);
  EXPECT_EQ(h.advance(now + 1), 1u);
}

TYPED_TEST(TimingWheel, CancelPreventsFire) {
  using S = TypeParam;
  const std::int64_t start = S::kTick * 3 + 1;
  const std::vector<std::int64_t> deadlines = boundary_deadlines<S>(start);
  const std::size_t n = deadlines.size();  // even: the last one is far in the overflow
  Harness<S> h(start, n + 4);
  EXPECT_FALSE(h.cancel(n)) << "never scheduled";
  for (std::size_t id = 0; id < n; ++id)
    h.schedule(id, deadlines[id]);
  h.schedule(n, start - 1);      // ready list
  h.schedule(n + 1, start + 1);  // current tick
  // Cancel every other node: on every level, in the overflow, the ready list and the current tick.
  auto cancelled_up_front = [&](std::size_t id) {
    return (id < n && id % 2 == 0) || id == n || id == n + 1;
  };
  for (std::size_t id = 0; id < n + 2; ++id) {
    if (cancelled_up_front(id)) {
      EXPECT_TRUE(h.cancel(id)) << "record " << id;
    }
  }
  for (std::size_t id = 0; id < n + 2; ++id) {
    if (cancelled_up_front(id)) {
      EXPECT_FALSE(h.cancel(id)) << "second cancel of " << id;
    }
  }
  h.check_next_event();
  // A callback cancels a node due in the same advance before it fires, and one due much later.
  const std::int64_t t = start + 5 * S::kTick;
  h.schedule(n + 2, t);
  h.schedule(n + 3, t);  // same deadline, scheduled later: fires after n + 2, which cancels it
  h.set_on_fire([&](std::size_t id) {
    if (id != n + 2) return;
    EXPECT_TRUE(h.cancel(n + 3));
    EXPECT_TRUE(h.cancel(n - 1));
  });
  h.advance(t);
  EXPECT_EQ(h.fires(n + 2), 1);
  EXPECT_EQ(h.fires(n + 3), 0);
  h.set_on_fire(nullptr);
  h.advance(kMaxNs);
  for (std::size_t id = 0; id < n + 4; ++id) {
    const bool cancelled = cancelled_up_front(id) || id == n + 3 || id == n - 1;
    EXPECT_EQ(h.fires(id), cancelled ? 0 : 1) << "record " << id;
  }
  EXPECT_FALSE(h.cancel(n + 2)) << "cancel after firing";
  EXPECT_EQ(h.wheel().size(), 0u);
}

TYPED_TEST(TimingWheel, RescheduleFromCallbackFiresInSameAdvanceIfDue) {
  using S = TypeParam;
  const std::int64_t start = 0;
  Harness<S> h(start, 4);
  const std::int64_t t = 10 * S::kTick + S::kTick / 2;
  const std::int64_t now = 3 * S::kSpanNs + 1;  // far ahead: the advance crosses the overflow
  h.schedule(0, t);
  int rearms = 0;
  h.set_on_fire([&](std::size_t id) {
    if (id != 0) return;
    ++rearms;
    if (rearms <= 3) {
      h.schedule(0, h.now() - rearms);  // already due: fires again in this advance
    } else if (rearms == 4) {
      h.schedule(0, h.now() + 1);       // one nanosecond too late for this advance
      h.schedule(1, t + S::kTick);      // behind the wheel's time now: due, fires in this advance
      h.schedule(2, now + S::kSpanNs);  // far ahead: waits
    }
  });
  EXPECT_EQ(h.advance(now), 5u);  // 0 four times, 1 once
  EXPECT_EQ(h.fires(0), 4);
  EXPECT_EQ(h.fires(1), 1);
  EXPECT_TRUE(h.pending(0));
  EXPECT_TRUE(h.pending(2));
  EXPECT_EQ(h.advance(now + 1), 1u);  // 0's fifth firing; re-arms nothing
  EXPECT_EQ(h.fires(0), 5);
  EXPECT_EQ(h.advance(now + S::kSpanNs), 1u);
  EXPECT_EQ(h.wheel().size(), 0u);
}

TYPED_TEST(TimingWheel, CascadesAcrossLevels) {
  using S = TypeParam;
  Rng rng(seed_from_env() ^ 0x2);
  const std::int64_t start = S::kTick * (S::kSpanTicks - 1) + 1;  // one tick before a block ends
  Harness<S> h(start, 64 * (S::kLevels + 1));
  // 64 timers per level band [span(L), span(L+1)) and 64 in the overflow band beyond the top.
  std::size_t id = 0;
  for (unsigned level = 0; level <= S::kLevels; ++level) {
    const std::int64_t lo = S::kTick << (S::kLevelBits * level);
    const std::int64_t hi = level == S::kLevels ? 4 * S::kSpanNs : lo << S::kLevelBits;
    for (int i = 0; i < 64; ++i)
      h.schedule(id++, start + rng.uniform(lo, hi - 1));
  }
  h.check_next_event();
  // Walk forward to a random point between consecutive deadlines, so the cursor jumps over whole
  // slots and blocks and every level cascades on the way; the harness checks that each timer fires
  // in exactly the advance that passes its deadline.
  std::vector<std::int64_t> deadlines;
  for (std::size_t i = 0; i < h.records(); ++i)
    deadlines.push_back(h.deadline(i));
  std::sort(deadlines.begin(), deadlines.end());
  const std::uint64_t steps_before = h.wheel().steps();
  for (std::size_t i = 0; i < deadlines.size(); ++i) {
    const std::int64_t gap = i + 1 < deadlines.size() ? deadlines[i + 1] - deadlines[i] : 1;
    h.advance(deadlines[i] + rng.uniform(0, gap - 1));
    h.check_next_event();
    if (this->HasFailure()) return;
  }
  EXPECT_GT(h.wheel().steps(), steps_before);
  for (std::size_t i = 0; i < h.records(); ++i)
    EXPECT_EQ(h.fires(i), 1) << "record " << i;
}

TYPED_TEST(TimingWheel, LongAdvanceOverEmptyWheelIsFast) {
  using S = TypeParam;
  constexpr std::int64_t kDay = 86'400'000'000'000;
  const std::int64_t start = 7 * S::kTick + 1;
  Harness<S> h(start, 5);
  // Empty wheel: moving time by 1,000 days makes no stops at all.
  EXPECT_EQ(h.advance(start + 1000 * kDay), 0u);
  EXPECT_EQ(h.wheel().steps(), 0u);
  // Five timers days apart (for the small shapes, millions of overflow windows apart). A per-tick
  // wheel would need up to 10^17 iterations here; the bitmaps and the overflow's window bound make
  // the work a few stops per timer: one per level it cascades through, one for its overflow
  // window, one for its own tick.
  const std::int64_t t0 = h.now();
  for (std::size_t id = 0; id < 5; ++id) {
    h.schedule(id, t0 + static_cast<std::int64_t>(id + 1) * 3 * kDay + 12345);
  }
  std::size_t callbacks = 0;
  h.set_on_fire([&](std::size_t) { ++callbacks; });
  EXPECT_EQ(h.advance(t0 + 365 * kDay), 5u);
  EXPECT_EQ(callbacks, 5u);
  EXPECT_LE(h.wheel().steps(), 5u * (S::kLevels + 1)) << "advance visited empty ticks";
  EXPECT_EQ(h.wheel().size(), 0u);
}

TYPED_TEST(TimingWheel, NextEventNeverLaterThanEarliestDeadline) {
  using S = TypeParam;
  Rng rng(seed_from_env() ^ 0x3);
  const std::int64_t start = -S::kTick * 17 - 2;
  Harness<S> h(start, 2000);
  const auto records = static_cast<std::int64_t>(h.records());
  for (int op = 0; op < 20000 && !this->HasFailure(); ++op) {
    h.check_next_event();
    const std::int64_t kind = rng.uniform(0, 9);
    const auto id = static_cast<std::size_t>(rng.uniform(0, records - 1));
    if (kind < 4) {
      if (!h.pending(id)) h.schedule(id, h.now() + rng.log_uniform(1, 3 * S::kSpanNs) - 2);
    } else if (kind < 6) {
      h.cancel(id);
    } else {
      // Advance to exactly next_event_ns() - 1 (must fire nothing), to it, or by a random step.
      const std::optional<std::int64_t> next = h.wheel().next_event_ns();
      if (next && *next > h.now() && kind == 6) {
        EXPECT_EQ(h.advance(*next - 1), 0u) << "a timer fired before next_event_ns()";
      } else if (next && *next > h.now() && kind == 7) {
        h.advance(*next);
      } else {
        h.advance(h.now() + rng.log_uniform(1, S::kSpanNs));
      }
    }
  }
}

TYPED_TEST(TimingWheel, TiesFireInScheduleOrderAndDeadlinesInOrder) {
  using S = TypeParam;
  const std::int64_t start = 1;
  Harness<S> h(start, 100);
  const std::int64_t d = start + 2 * S::kSpanNs + S::kTick / 2;  // starts in the overflow
  // The same deadline scheduled from many cursor positions: the early ones travel the overflow
  // and every level, the late ones are scheduled straight into lower levels. Interleaved with
  // distinct deadlines in the same tick, scheduled in reverse.
  for (std::size_t id = 0; id < 100; ++id) {
    if (id % 2 == 0) {
      h.schedule(id, d);
    } else {
      h.schedule(id, d + S::kTick - 1 - static_cast<std::int64_t>(id) % S::kTick);
    }
    if (h.now() < d - 1) h.advance(std::min(d - 1, h.now() + S::kSpanNs / 40 + 1));
  }
  h.advance(d + S::kTick);  // the harness asserts the exact (deadline, schedule order) sequence
  EXPECT_EQ(h.wheel().size(), 0u);
}

TYPED_TEST(TimingWheel, CrowdedTickFiresInOrderAboveAndBelowTheSortBuffer) {
  // A tick's bucket is sorted in an array up to a size and by a list merge sort above it: both
  // paths must give the (deadline, schedule order) sequence, ties included.
  using S = TypeParam;
  for (std::size_t count : {std::size_t{300}, std::size_t{1500}}) {
    const std::int64_t start = 1;
    Harness<S> h(start, count);
    const std::int64_t tick_start = (4 * S::kTick << S::kLevelBits);  // cascades into level 0
    Rng rng(count);
    for (std::size_t id = 0; id < count; ++id)
      h.schedule(id, tick_start + rng.uniform(0, 7) * (S::kTick / 8));  // 8 values: many ties
    h.advance(tick_start + S::kTick);  // the harness asserts the exact sequence
    EXPECT_EQ(h.wheel().size(), 0u) << count << " timers";
  }
}

TYPED_TEST(TimingWheel, ExtremeTimesDoNotOverflow) {
  using S = TypeParam;
  for (std::int64_t start : {kMinNs, kMinNs + 5, std::int64_t{-1}, kMaxNs - 3 * S::kSpanNs}) {
    SCOPED_TRACE("start_ns=" + std::to_string(start));
    Harness<S> h(start, 6);
    h.schedule(0, kMaxNs);
    h.schedule(1, kMaxNs - 1);
    h.schedule(2, start);  // due
    h.schedule(3, kMinNs);
    h.schedule(4, start / 2 + kMaxNs / 2);
    h.check_next_event();
    h.advance(kMaxNs - 1);
    h.check_next_event();
    h.advance(kMaxNs);  // the shutdown drain: fires everything
    h.schedule(5, kMaxNs);
    EXPECT_EQ(h.advance(kMaxNs), 1u);
    EXPECT_EQ(h.wheel().size(), 0u);
    for (std::size_t id = 0; id < 6; ++id)
      EXPECT_EQ(h.fires(id), 1) << "record " << id;
  }
}

// The model test: many timers, log-uniform delays from one tick to beyond the top level, half of
// them marked for cancellation at a random later time (some after they fire), callbacks that
// cancel and re-arm, and advance steps of every size, most not tick-aligned. The harness compares
// every advance() against the multimap reference. RAIL_WHEEL_MODEL_TIMERS scales it (default
// 200,000); RAIL_TEST_SEED replays a failure.
TYPED_TEST(TimingWheel, MatchesReferenceModelUnderRandomLoad) {
  using S = TypeParam;
  const std::uint64_t seed = seed_from_env();
  SCOPED_TRACE("RAIL_TEST_SEED=" + std::to_string(seed));
  std::size_t timers = 200'000;
  if (const char* text = std::getenv("RAIL_WHEEL_MODEL_TIMERS")) {
    timers = std::strtoull(text, nullptr, 0);
  }
  Rng rng(seed);
  const std::int64_t start = rng.uniform(-S::kSpanNs, S::kSpanNs);
  Harness<S> h(start, timers);
  const std::int64_t max_delay = 8 * S::kSpanNs;  // the top level's block, then 7 more blocks
  // Large steps (log-uniform up to two maximum delays: some jump past everything pending) are
  // made rare enough that they alone cover about 32 maximum delays over the run. On tiny wheels
  // the few-tick steps cover far more anyway; at the 1 ms default this keeps time far from
  // INT64_MAX, and `limit` is the hard stop in case the dice disagree.
  constexpr double kScheduleShare = 0.6;
  const double advances = static_cast<double>(timers) * (1 - kScheduleShare) / kScheduleShare;
  const auto large_max = static_cast<double>(2 * max_delay);
  const double large_mean = large_max / std::log(large_max);
  const double p_large =
      std::clamp(32.0 * static_cast<double>(max_delay) / (advances * large_mean), 0.0, 0.2);
  const std::int64_t limit = kMaxNs / 2;  // leaves room for now + 2 * max_delay
  // (cancel time, record, serial) in time order.
  using CancelAt = std::tuple<std::int64_t, std::size_t, std::size_t>;
  std::priority_queue<CancelAt, std::vector<CancelAt>, std::greater<>> cancels;
  std::size_t next_id = 0;
  std::size_t rearmed = 0;
  std::size_t callback_cancels = 0;

  h.set_on_fire([&](std::size_t id) {
    if (rng.chance(0.02) && next_id > 0) {
      // Cancel another record, pending or not; recent ones are the likeliest to be pending.
      const auto newest = static_cast<std::int64_t>(next_id) - 1;
      const auto victim =
          static_cast<std::size_t>(rng.uniform(std::max<std::int64_t>(0, newest - 64), newest));
      if (h.cancel(victim)) ++callback_cancels;
    }
    if (rng.chance(0.01)) {  // re-arm this one; sometimes already due, so it fires again now
      ++rearmed;
      const std::int64_t delay =
          rng.chance(0.3) ? -rng.uniform(0, 3 * S::kTick) : rng.log_uniform(1, max_delay);
      h.schedule(id, h.now() + delay);
    }
  });

  auto advance_to = [&](std::int64_t to) {
    const std::int64_t effective = std::max(to, h.now());
    while (!cancels.empty() && std::get<0>(cancels.top()) <= effective) {
      const CancelAt due = cancels.top();
      cancels.pop();
      // Skip stale entries (the record was re-armed since); otherwise cancel, which returns false
      // when the timer already fired.
      if (h.current_serial(std::get<1>(due)) == std::get<2>(due)) h.cancel(std::get<1>(due));
    }
    h.advance(to);
  };

  while ((next_id < timers || h.live() > 0) && h.now() < limit && !this->HasFailure()) {
    if (rng.chance(kScheduleShare) && next_id < timers) {
      const std::size_t id = next_id++;
      std::int64_t delay;
      if (rng.chance(0.02)) {
        delay = -rng.uniform(0, 3 * S::kTick);  // already due
      } else {
        delay = rng.log_uniform(S::kTick, max_delay) + rng.uniform(0, S::kTick - 1);
      }
      h.schedule(id, h.now() + delay);
      if (rng.chance(0.5)) {
        const std::int64_t at = h.now() + rng.uniform(0, std::max<std::int64_t>(delay, 0) * 5 / 4);
        cancels.emplace(at, id, h.current_serial(id));
      }
      continue;
    }
    std::int64_t to = h.now();
    const double kind = rng.unit();
    if (rng.chance(p_large)) {
      to += rng.log_uniform(1, 2 * max_delay);
    } else if (kind < 0.30) {
      to += rng.uniform(0, S::kTick - 1);  // inside a tick
    } else if (kind < 0.60) {
      to += rng.uniform(0, 8 * S::kTick);  // a few ticks
    } else if (kind < 0.75) {
      to = (floor_div(to, S::kTick) + rng.uniform(1, 3)) * S::kTick;  // exactly on a tick
    } else if (kind < 0.95) {
      const std::optional<std::int64_t> next = h.wheel().next_event_ns();
      if (next && *next > to) to = rng.chance(0.5) ? *next : *next - 1;
    } else {
      to -= rng.uniform(0, S::kTick);  // backwards: time must not move
    }
    advance_to(std::min(to, limit));
    h.check_next_event();
  }
  EXPECT_LT(h.now(), limit) << "the run hit its time limit; recalibrate p_large";
  const std::int64_t end_of_run = h.now();
  advance_to(kMaxNs);  // the shutdown drain

  std::size_t fired = 0;
  std::size_t cancelled = 0;
  for (std::size_t serial = 0; serial < h.serials(); ++serial) {
    const auto state = h.serial_state(serial);
    ASSERT_NE(state, Harness<S>::State::pending) << "serial " << serial << " never resolved";
    (state == Harness<S>::State::fired ? fired : cancelled) += 1;
  }
  EXPECT_EQ(h.wheel().size(), 0u);
  // Half are marked; a marked timer whose cancel time falls after its deadline fires first.
  EXPECT_GT(cancelled, timers / 4);
  EXPECT_GT(fired, timers / 4);
  std::printf(
      "[   info   ] %zu timers, %zu schedules: fired %zu, cancelled %zu (%zu from callbacks), "
      "re-armed %zu; %llu stops; time covered %.1f max delays\n",
      timers, h.serials(), fired, cancelled, callback_cancels, rearmed,
      static_cast<unsigned long long>(h.wheel().steps()),
      static_cast<double>(end_of_run - start) / static_cast<double>(max_delay));
}

// The worked example in the header's top comment, call by call.
TEST(TimingWheel, WorkedExampleFromHeader) {
  rail::detail::TimingWheel<2, 2> wheel(10, 0);
  TimerNode a, b, c, d, e;
  std::vector<TimerNode*> fired;
  auto record = [&](TimerNode& node) { fired.push_back(&node); };
  wheel.schedule(a, 25);
  wheel.schedule(b, 61);
  wheel.schedule(c, 138);
  wheel.schedule(d, 215);
  EXPECT_EQ(wheel.next_event_ns(), 20);  // a's tick (level 0)

  EXPECT_EQ(wheel.advance(27, record), 1u);
  EXPECT_EQ(wheel.steps(), 1u);
  EXPECT_EQ(wheel.advance(64, record), 1u);
  EXPECT_EQ(wheel.steps(), 3u);  // cascade at 4, fire at 6
  EXPECT_EQ(wheel.advance(140, record), 1u);
  EXPECT_EQ(wheel.steps(), 5u);  // cascade at 12, fire at 13; then the jump to 14 is free
  wheel.schedule(e, 145);
  EXPECT_EQ(wheel.next_event_ns(), 145);
  EXPECT_EQ(wheel.advance(200, record), 1u);
  EXPECT_EQ(wheel.steps(), 7u);  // overflow window at 16, cascade at 20
  EXPECT_EQ(wheel.next_event_ns(), 210);
  EXPECT_EQ(wheel.advance(212, record), 0u);
  EXPECT_TRUE(d.linked());
  EXPECT_EQ(wheel.next_event_ns(), 215);
  EXPECT_EQ(wheel.advance(215, record), 1u);
  EXPECT_EQ(fired, (std::vector<TimerNode*>{&a, &b, &c, &e, &d}));
  EXPECT_EQ(wheel.size(), 0u);
  EXPECT_EQ(wheel.next_event_ns(), std::nullopt);
}

TEST(TimingWheel, RejectsNonPositiveTick) {
  for (std::int64_t tick : {std::int64_t{0}, std::int64_t{-1}, kMinNs}) {
    try {
      rail::detail::TimingWheel<> wheel(tick, 0);
      ADD_FAILURE() << "tick " << tick << " was accepted";
    } catch (const rail::Error& error) {
      EXPECT_EQ(error.code(), rail::ErrorCode::invalid_option);
      EXPECT_NE(std::string(error.what()).find("tick_ns"), std::string::npos) << error.what();
    }
  }
  rail::detail::TimingWheel<> wheel(1'000'000, 5);
  EXPECT_EQ(wheel.tick_ns(), 1'000'000);
  EXPECT_EQ(wheel.now_ns(), 5);
  EXPECT_EQ(wheel.size(), 0u);
}

}  // namespace
