// Payload kinds: the queue, its DLQ and its journal are compiled once for every payload type and
// reach a payload only through its type's table (detail/payload_ops.hpp). These tests pin the
// table's facts per kind of type and that every path a payload takes (add, bulk add, retry, the
// DLQ, redrive, remove, debounce, a kept add, a schedule's run, leftovers, the engine's end)
// constructs and destroys each payload exactly once, with the value it was given, in storage
// aligned as its type asks; and that a handler process() refuses stays the caller's.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rail/detail/payload_ops.hpp"
#include "rail/rail.hpp"
#include "support/inline_engine.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;

/// Counted: a payload that counts the live objects of its type and checks it is never used
/// after its end (a destroyed object's value is poisoned).
struct Counted {
  static inline int live = 0;
  int value = 0;
  explicit Counted(int v) : value(v) { ++live; }
  Counted(const Counted& other) : value(other.value) {
    EXPECT_NE(other.value, kDead) << "copied after its end";
    ++live;
  }
  Counted(Counted&& other) noexcept : value(other.value) {
    EXPECT_NE(other.value, kDead) << "moved after its end";
    ++live;
  }
  Counted& operator=(Counted&& other) noexcept {
    EXPECT_NE(value, kDead) << "assigned to after its end";
    value = other.value;
    return *this;
  }
  Counted& operator=(const Counted&) = delete;
  ~Counted() {
    EXPECT_NE(value, kDead) << "destroyed twice";
    value = kDead;
    --live;
  }
  static constexpr int kDead = -0x5eed;
};

/// Wide: a payload aligned past what operator new gives by default.
struct alignas(64) Wide {
  std::array<std::uint64_t, 8> words{};
};

bool aligned(const void* p, std::size_t to) {
  return reinterpret_cast<std::uintptr_t>(p) % to == 0;
}

TEST(PayloadOps, ATriviallyCopyablePayloadIsMovedByMemcpyAndNeverDestroyed) {
  const auto& ops = detail::payload_ops<int>();
  EXPECT_TRUE(ops.trivial);
  EXPECT_EQ(ops.destroy, nullptr);
  EXPECT_TRUE(ops.copyable);
  ASSERT_NE(ops.codec_name, nullptr) << "trivially copyable types have a journal codec";
  EXPECT_EQ(ops.size, sizeof(int));
  EXPECT_EQ(ops.type, typeid(int));
}

TEST(PayloadOps, AMoveOnlyPayloadHasNoCopyAndNoCodec) {
  const auto& ops = detail::payload_ops<std::unique_ptr<int>>();
  EXPECT_FALSE(ops.trivial);
  EXPECT_NE(ops.destroy, nullptr);
  EXPECT_FALSE(ops.copyable);
  EXPECT_EQ(ops.copy_to, nullptr);
  EXPECT_EQ(ops.copy_entry, nullptr);
  EXPECT_EQ(ops.codec_name, nullptr);
  EXPECT_EQ(ops.decode_entry, nullptr);
}

TEST(PayloadOps, OneTablePerPayloadType) {
  EXPECT_EQ(&detail::payload_ops<std::string>(), &detail::payload_ops<std::string>());
  EXPECT_NE(&detail::payload_ops<std::string>(), &detail::payload_ops<int>());
  EXPECT_EQ(detail::payload_ops<std::string>().codec_name(), "std::string");
  EXPECT_EQ(detail::payload_ops<Wide>().align, 64u);
}

struct PayloadKinds : test::InlineEngine {
  void TearDown() override { EXPECT_EQ(Counted::live, 0) << "a payload leaked"; }
};

TEST_F(PayloadKinds, EveryPathConstructsAndDestroysEachPayloadExactlyOnce) {
  {
    Engine e(EngineOptions{
        .clock = &clock, .mode = Mode::inlined, .on_destroy = [](const ShutdownReport&) {}});
    auto q = e.declare_queue<Counted>("counted", {});
    std::vector<int> seen;
    bool fail = true;
    q.process({}, [&](Job<Counted>& job) {
      seen.push_back(job.data().value);
      return fail && job.data().value < 100 ? Outcome::fail("no") : Outcome::done();
    });
    // Dead-lettered, then redriven (and run to its end), and one removed.
    const JobId a = q.add("a", Counted(1)).id;
    const JobId b = q.add("b", Counted(2)).id;
    e.run_until_idle();
    ASSERT_EQ(q.dlq().size(), 2u);
    std::optional<DeadLetter<Counted>> removed = q.dlq().remove(b);
    ASSERT_TRUE(removed);
    EXPECT_EQ(removed->data.value, 2);
    fail = false;
    EXPECT_EQ(q.dlq().redrive(a), RedriveStatus::redriven);
    // A bulk add, a debounced delayed job whose payload is replaced, a schedule's copy.
    std::vector<Counted> batch;
    batch.emplace_back(100);
    batch.emplace_back(101);
    (void)q.add_bulk("bulk", std::span<Counted>(batch));
    const JobOptions debounce{.delay = 1s,
                              .dedup = {.id = "d", .ttl = 10s, .mode = DedupMode::debounce}};
    const JobId d = q.add("d", Counted(200), debounce).id;
    EXPECT_EQ(q.add("d", Counted(201), debounce).status, AddStatus::debounced);
    (void)q.every("tick", 2s, "tick", Counted(300));
    e.run_until_idle();
    clock.advance(2s);
    e.run_until_idle();
    EXPECT_EQ(q.state(d).status, JobStatus::completed);
    EXPECT_EQ(seen, (std::vector<int>{1, 2, 1, 100, 101, 201, 300}));
    // Left at shutdown: one taken back, one dropped with the engine.
    (void)q.add("left", Counted(400), JobOptions{.delay = 1h});
    (void)e.shutdown(0s);
    std::vector<Leftover<Counted>> left = q.take_leftovers();
    ASSERT_EQ(left.size(), 1u);
    EXPECT_EQ(left[0].data.value, 400);
  }
  EXPECT_EQ(Counted::live, 0);
}

TEST_F(PayloadKinds, AnAddKeptForARunningJobIsDestroyedOnceWhetherRunOrHandedBack) {
  auto q = engine.declare_queue<Counted>("kept", {});
  std::vector<int> seen;
  const JobOptions keep{.dedup = {.id = "k", .keep_last_if_active = true}};
  q.process({}, [&](Job<Counted>& job) {
    seen.push_back(job.data().value);
    if (job.data().value == 1) {
      EXPECT_EQ(q.add("k", Counted(2), keep).status, AddStatus::kept);
      EXPECT_EQ(q.add("k", Counted(3), keep).status, AddStatus::kept) << "the newest wins";
    }
  });
  (void)q.add("k", Counted(1), keep);
  engine.run_until_idle();
  EXPECT_EQ(seen, (std::vector<int>{1, 3}));
}

TEST_F(PayloadKinds, AnOverAlignedPayloadIsAlignedInItsSlotItsDeadLetterAndItsLeftover) {
  auto q = engine.declare_queue<Wide>("wide", {.capacity = 8});
  int ran = 0;
  q.process({}, [&](Job<Wide>& job) {
    EXPECT_TRUE(aligned(&job.data(), 64));
    EXPECT_EQ(job.data().words[7], 7u);
    ++ran;
    return Outcome::fail("no");
  });
  Wide w;
  w.words[7] = 7;
  for (int i = 0; i < 3; ++i)
    (void)q.add("w", w);
  engine.run_until_idle();
  EXPECT_EQ(ran, 3);
  q.dlq().visit([&](const DeadLetter<Wide>& e) {
    EXPECT_TRUE(aligned(&e.data, 64));
    EXPECT_EQ(e.data.words[7], 7u);
  });
  (void)q.add("w", w, JobOptions{.delay = 1h});
  (void)engine.shutdown(0s);
  auto left = q.take_leftovers();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].data.words[7], 7u);
}

TEST_F(PayloadKinds, ADeadLetterIsReadThroughItsInfoWithoutItsPayloadType) {
  auto q = engine.declare_queue<std::string>("strings", {});
  q.process({}, [](Job<std::string>&) { return Outcome::fail("bad"); });
  const JobId id = q.add("s", std::string(100, 'x')).id;
  engine.run_until_idle();
  std::optional<DeadLetter<std::string>> e = q.dlq().get(id);
  ASSERT_TRUE(e);
  const DeadLetterInfo& info = *e;
  EXPECT_EQ(info.id, id);
  EXPECT_EQ(info.last_error(), "bad");
  EXPECT_EQ(e->data, std::string(100, 'x'));
}

TEST_F(PayloadKinds, ARefusedProcessLeavesTheHandlerWithTheCaller) {
  auto q = engine.declare_queue<int>("bound", {});
  q.process({}, [](Job<int>&) { return Outcome::done(); });
  auto owned = std::make_shared<int>(7);
  auto handler = [owned](Job<int>&) { return Outcome::done(); };
  EXPECT_THROW(q.process({}, std::move(handler)), Error) << "one processor per queue";
  EXPECT_EQ(owned.use_count(), 2) << "the refused handler was not taken";
  auto other = engine.declare_queue<int>("other", {});
  EXPECT_THROW(other.process({.concurrency = 0}, std::move(handler)), Error);
  EXPECT_EQ(owned.use_count(), 2) << "bad options: not taken either";
}

}  // namespace
}  // namespace rail
