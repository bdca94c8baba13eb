// Observers (detail/observer_list.hpp, Engine::on_event / remove_observer / subscribe): any
// number of them, removable, in add order; what removing one from inside an observer does; and,
// threaded, that an observer is never called once remove_observer returned, while workers emit
// and other threads add and remove observers. The grace period's kernel also runs under the
// seeded DeterministicSchedule, where a failing interleaving replays from its seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "rail/detail/observer_list.hpp"
#include "rail/rail.hpp"
#include "support/deterministic_schedule.hpp"
#include "support/eventually.hpp"
#include "support/sanitized.hpp"
#include "support/watchdog.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;
using test::eventually;

struct InlineFixture : ::testing::Test {
  ManualClock clock;
  Engine engine{EngineOptions{.clock = &clock, .mode = Mode::inlined}};
  Queue<int> q = engine.declare_queue<int>("q", {});
  void SetUp() override {
    q.process({}, [](Job<int>&) {});
  }
  /// run_one(): adds one job and runs it: events added, started, completed (and drained).
  JobId run_one() {
    const JobId id = q.add("job", 1).id;
    engine.run_until_idle();
    return id;
  }
};

using Observers = InlineFixture;

TEST_F(Observers, AnObserverSeesExactlyTheEventsBetweenItsAddAndItsRemove) {
  const JobId before = run_one();
  std::vector<JobId> seen;
  const ObserverId id = engine.on_event([&](const Event& e) {
    if (e.kind == EventKind::completed) seen.push_back(e.job_id);
  });
  EXPECT_NE(id, ObserverId::none);
  EXPECT_EQ(engine.observer_count(), 1u);
  const JobId during = q.add("job", 2, JobOptions{.delay = 1s}).id;
  clock.advance(1s);
  engine.run_until_idle();
  EXPECT_TRUE(engine.remove_observer(id));
  EXPECT_EQ(engine.observer_count(), 0u);
  const JobId after = run_one();
  EXPECT_EQ(seen, (std::vector<JobId>{during}));
  EXPECT_NE(before, during);
  EXPECT_NE(after, during);
  EXPECT_EQ(q.counts().completed, 3u);
}

TEST_F(Observers, RemovingAnUnknownOrAlreadyRemovedIdIsFalse) {
  EXPECT_FALSE(engine.remove_observer(ObserverId::none));
  EXPECT_FALSE(engine.remove_observer(ObserverId{42}));
  const ObserverId a = engine.on_event([](const Event&) {});
  const ObserverId b = engine.on_event([](const Event&) {});
  EXPECT_NE(a, b);
  EXPECT_TRUE(engine.remove_observer(a));
  EXPECT_FALSE(engine.remove_observer(a));
  const ObserverId c = engine.on_event([](const Event&) {});
  EXPECT_NE(c, a);  // ids are never reused
  EXPECT_EQ(engine.observer_count(), 2u);
}

TEST_F(Observers, AHundredObserversEachSeeEveryEventInAddOrder) {
  constexpr int kObservers = 100;
  std::vector<int> calls;  // observer index per call, in call order
  std::vector<ObserverId> ids;
  for (int i = 0; i < kObservers; ++i)
    ids.push_back(engine.on_event([&calls, i](const Event& e) {
      if (e.kind == EventKind::completed) calls.push_back(i);
    }));
  EXPECT_EQ(engine.observer_count(), static_cast<std::size_t>(kObservers));
  run_one();
  std::vector<int> all(kObservers);
  for (int i = 0; i < kObservers; ++i)
    all[i] = i;
  EXPECT_EQ(calls, all);
  // Every other one removed: the rest still run, still in order.
  for (int i = 0; i < kObservers; i += 2)
    ASSERT_TRUE(engine.remove_observer(ids[i]));
  calls.clear();
  run_one();
  std::vector<int> odd;
  for (int i = 1; i < kObservers; i += 2)
    odd.push_back(i);
  EXPECT_EQ(calls, odd);
}

TEST_F(Observers, AnObserverThatRemovesItselfIsNotCalledAgainAndTheLaterOnesStillRun) {
  int self_calls = 0, later_calls = 0;
  ObserverId self = ObserverId::none;
  self = engine.on_event([&](const Event&) {
    ++self_calls;
    EXPECT_TRUE(engine.remove_observer(self));  // inside an observer: does not wait for itself
  });
  engine.on_event([&](const Event& e) { later_calls += e.kind == EventKind::added; });
  run_one();
  run_one();
  EXPECT_EQ(self_calls, 1);
  EXPECT_EQ(later_calls, 2);  // the same event went on to the later observer
  EXPECT_EQ(engine.observer_count(), 1u);
}

TEST_F(Observers, RemovingALaterObserverFromInsideSkipsItForTheEventBeingDelivered) {
  ObserverId later = ObserverId::none;
  int later_calls = 0;
  engine.on_event([&](const Event& e) {
    if (e.kind == EventKind::started) {
      EXPECT_TRUE(engine.remove_observer(later));
    }
  });
  later = engine.on_event([&](const Event& e) {
    ++later_calls;
    EXPECT_NE(e.kind, EventKind::started);  // removed during this event's delivery
  });
  run_one();
  EXPECT_EQ(later_calls, 1);  // `added` only
}

TEST_F(Observers, AnObserverAddedFromInsideSeesTheNextEventNotTheCurrentOne) {
  std::vector<EventKind> late;
  bool added = false;
  engine.on_event([&](const Event& e) {
    if (e.kind != EventKind::started || added) return;
    added = true;
    engine.on_event([&](const Event& e2) { late.push_back(e2.kind); });
  });
  run_one();
  ASSERT_FALSE(late.empty());
  EXPECT_EQ(late.front(), EventKind::completed);  // not `started`, being delivered when added
}

TEST_F(Observers, AThrowingObserverIsCountedAndOnceRemovedCountsNoMore) {
  const ObserverId thrower = engine.on_event([](const Event& e) {
    if (e.kind == EventKind::completed) throw std::runtime_error("observer broke");
  });
  ::testing::internal::CaptureStderr();
  run_one();
  run_one();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(engine.observer_errors(), 2u);
  EXPECT_NE(err.find("an observer threw on event completed"), std::string::npos) << err;
  ASSERT_TRUE(engine.remove_observer(thrower));
  run_one();
  EXPECT_EQ(engine.observer_errors(), 2u);
}

TEST_F(Observers, ASubscriptionRemovesItsObserverWhenDestroyedOrReset) {
  int calls = 0;
  {
    Subscription sub =
        engine.subscribe([&](const Event& e) { calls += e.kind == EventKind::added; });
    EXPECT_TRUE(sub);
    run_one();
    Subscription moved = std::move(sub);
    EXPECT_FALSE(sub);  // NOLINT(bugprone-use-after-move): pinned on purpose
    run_one();
  }
  run_one();
  EXPECT_EQ(calls, 2);
  Subscription kept =
      engine.subscribe([&](const Event& e) { calls += e.kind == EventKind::added; });
  kept.reset();
  EXPECT_FALSE(kept);
  run_one();
  EXPECT_EQ(calls, 2);
  Subscription released = engine.subscribe([&](const Event&) {});
  const ObserverId id = released.release();
  EXPECT_FALSE(released);
  EXPECT_EQ(engine.observer_count(), 1u);  // release() kept it
  EXPECT_TRUE(engine.remove_observer(id));
}

TEST_F(Observers, RemovingOneDestroysItsCallableBeforeReturning) {
  auto token = std::make_shared<int>(0);
  const ObserverId id = engine.on_event([token](const Event&) {});
  EXPECT_EQ(token.use_count(), 2);
  ASSERT_TRUE(engine.remove_observer(id));
  EXPECT_EQ(token.use_count(), 1);  // the engine's copy is gone already
}

// --- threaded ------------------------------------------------------------------------------------

TEST(ObserversThreaded, RemoveWaitsForACallInProgressOnAnotherThread) {
  test::Watchdog watchdog(60s, "RemoveWaitsForACallInProgressOnAnotherThread");
  std::atomic<bool> entered{false}, release{false}, finished{false};
  Engine engine;
  auto q = engine.declare_queue<int>("q", {});
  const ObserverId id = engine.on_event([&](const Event& e) {
    if (e.kind != EventKind::started || entered.exchange(true)) return;
    while (!release.load())
      std::this_thread::yield();
    finished.store(true);  // the last thing this call does
  });
  q.process({}, [](Job<int>&) {});
  (void)q.add("job", 1);
  ASSERT_TRUE(eventually([&] { return entered.load(); }));
  std::atomic<bool> calling{false};
  std::atomic<int> finished_at_return{-1};
  std::thread remover([&] {
    calling.store(true);
    const bool removed = engine.remove_observer(id);
    finished_at_return.store(removed && finished.load() ? 1 : 0);
  });
  ASSERT_TRUE(eventually([&] { return calling.load(); }));
  // Gives the remover time to be waiting; it decides nothing (the check is finished_at_return).
  std::this_thread::sleep_for(20ms);
  release.store(true);
  remover.join();
  EXPECT_EQ(finished_at_return.load(), 1) << "remove_observer returned while the call ran";
}

/// Probe: what an observer added by a churn thread uses; freed the moment remove returns. Under
/// ASan a call after that is a heap-use-after-free; without it, `alive` reads false.
struct Probe {
  std::atomic<bool> alive{true};
  std::atomic<std::uint64_t> calls{0};
};

// Threads add and remove observers (each one's state destroyed right after remove_observer
// returns) while oversubscribed workers and a producer emit events; some observers remove
// themselves from inside (their state is kept: a call in progress elsewhere may still run).
// A permanent observer checks that every completion is still seen by the list.
TEST(ObserversThreaded, ARemovedObserverIsNeverCalledAfterRemoveReturnsWhileWorkersEmit) {
  test::Watchdog watchdog(300s, "ARemovedObserverIsNeverCalledAfterRemoveReturnsWhileWorkersEmit");
#ifdef RAIL_SANITIZED
  constexpr int kRounds = 4, kChurn = 150;
#else
  constexpr int kRounds = 10, kChurn = 600;
#endif
  for (int round = 0; round < kRounds; ++round) {
    std::atomic<std::uint64_t> violations{0}, completions{0};
    std::vector<std::unique_ptr<Probe>> kept;  // self-removed observers' state: freed at the end
    std::mutex kept_mu;
    Engine engine;  // after what its observers use: destroyed (threads joined) before it
    auto q = engine.declare_queue<int>("q", {.capacity = 4096});
    engine.on_event([&](const Event& e) {
      if (e.kind == EventKind::completed) completions.fetch_add(1, std::memory_order_relaxed);
    });
    q.process({.concurrency = 6}, [](Job<int>&) {});  // 6 workers on 2 cores
    std::atomic<bool> stop{false};
    std::atomic<std::uint64_t> added{0};
    std::thread producer([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        if (q.add("job", 1).status == AddStatus::added) added.fetch_add(1);
        if (added.load() % 64 == 0) std::this_thread::yield();
      }
    });
    auto churn = [&](int seed) {
      std::mt19937 rng(static_cast<unsigned>(seed));
      for (int i = 0; i < kChurn; ++i) {
        auto probe = std::make_unique<Probe>();
        Probe* p = probe.get();
        const bool self_remove = rng() % 4 == 0;
        auto id_box = std::make_shared<std::atomic<ObserverId>>(ObserverId::none);
        if (self_remove) {
          {
            std::lock_guard lock(kept_mu);
            kept.push_back(std::move(probe));
          }
          id_box->store(engine.on_event([&engine, &violations, p, id_box](const Event&) {
            if (!p->alive.load()) violations.fetch_add(1);
            if (p->calls.fetch_add(1) == 3) (void)engine.remove_observer(id_box->load());
          }));
          continue;
        }
        const ObserverId id = engine.on_event([&violations, p](const Event&) {
          if (!p->alive.load(std::memory_order_relaxed)) violations.fetch_add(1);
          // The core goes to another thread mid-call (workers are oversubscribed): a remove
          // that did not wait for this call would free the probe under it, and the check below
          // (or ASan) sees that.
          std::this_thread::yield();
          p->calls.fetch_add(1, std::memory_order_relaxed);
          if (!p->alive.load(std::memory_order_relaxed)) violations.fetch_add(1);
        });
        if (rng() % 2) std::this_thread::yield();  // let it see a few events, or none
        if (!engine.remove_observer(id)) violations.fetch_add(1);
        p->alive.store(false, std::memory_order_relaxed);
        probe.reset();  // what the observer captured is gone
      }
    };
    std::vector<std::thread> churners;
    for (int t = 0; t < 3; ++t)
      churners.emplace_back(churn, round * 10 + t);
    for (auto& t : churners)
      t.join();
    stop.store(true);
    producer.join();
    ASSERT_TRUE(q.wait_idle(60s));
    EXPECT_EQ(violations.load(), 0u) << "round " << round;
    EXPECT_EQ(completions.load(), added.load()) << "round " << round;
    (void)engine.shutdown(0s);
  }
}

// Readers in cells of their own and in shared cells at once (a list with 4 owned cells and 10
// walking threads: the lowest indices own one, the others share), while a writer adds and removes
// observers and frees each one's state the moment remove returns: no walk calls an observer whose
// remove returned, and every walk in progress is waited for.
TEST(ObserversThreaded, WalksInOwnedAndSharedCellsNeverCallAnObserverWhoseRemoveReturned) {
  test::Watchdog watchdog(300s, "WalksInOwnedAndSharedCellsNeverCallAnObserverWhoseRemoveReturned");
#ifdef RAIL_SANITIZED
  constexpr int kChurn = 150;
#else
  constexpr int kChurn = 1000;
#endif
  struct State {
    std::atomic<bool> alive{true};
  };
  using Fn = std::function<void()>;
  constexpr std::uint32_t kOwned = 4;
  detail::BasicObserverList<Fn, std::atomic, kOwned> list;
  std::atomic<std::uint64_t> violations{0}, calls{0};
  std::atomic<bool> stop{false};
  std::atomic<int> owning{0}, sharing{0};
  std::vector<std::thread> walkers;
  for (int t = 0; t < 10; ++t)
    walkers.emplace_back([&] {
      (detail::this_thread_index() < kOwned ? owning : sharing).fetch_add(1);
      while (!stop.load(std::memory_order_relaxed))
        list.for_each([](const Fn& fn) { fn(); });
    });
  std::mt19937 rng(7);
  for (int i = 0; i < kChurn; ++i) {
    auto state = std::make_unique<State>();
    State* s = state.get();
    const std::uint64_t id = list.add([s, &violations, &calls] {
      if (!s->alive.load(std::memory_order_relaxed)) violations.fetch_add(1);
      if (calls.fetch_add(1, std::memory_order_relaxed) % 8 == 0) std::this_thread::yield();
      if (!s->alive.load(std::memory_order_relaxed)) violations.fetch_add(1);
    });
    if (rng() % 2) std::this_thread::yield();
    if (!list.remove(id)) violations.fetch_add(1);
    s->alive.store(false, std::memory_order_relaxed);
    state.reset();  // freed: a call still in progress would read it (ASan), or see it dead
  }
  stop.store(true);
  for (auto& t : walkers)
    t.join();
  EXPECT_EQ(violations.load(), 0u);
  EXPECT_GT(calls.load(), 0u);
  EXPECT_GT(owning.load(), 0) << "no walker counted in a cell of its own";
  EXPECT_GT(sharing.load(), 0) << "no walker counted in a shared cell";
}

// --- the kernel under the DeterministicSchedule
// -----------------------------------------------------

/// Model: per observer index, whether its callable is still alive and whether its remove
/// returned; every call checks both at entry and exit.
struct Model {
  static constexpr int kMax = 4;
  test::DeterministicAtomic<int> alive[kMax] = {};
  test::DeterministicAtomic<int> remove_returned[kMax] = {};
  test::DeterministicAtomic<int> violations{0};
  test::DeterministicAtomic<int> calls{0};
};

/// DetProbe: the observer type; owns its index (moved-from ones own none).
struct DetProbe {
  DetProbe(Model* m, int i) : model(m), index(i) { model->alive[index].store(1); }
  DetProbe(DetProbe&& o) noexcept : model(o.model), index(std::exchange(o.index, -1)) {}
  DetProbe& operator=(DetProbe&&) = delete;
  ~DetProbe() {
    if (index >= 0) model->alive[index].store(0);
  }
  void operator()() const {
    auto check = [&] {
      if (model->alive[index].load() != 1 || model->remove_returned[index].load() != 0)
        model->violations.fetch_add(1);
    };
    check();
    model->calls.fetch_add(1);
    check();
  }
  Model* model;
  int index;
};

/// DetList<Owned>: the list under the schedule. Owned 64: each schedule thread counts in a cell
/// of its own (plain stores, the step's heavy fence); Owned 0: every thread in the shared,
/// striped cells (locked read-modify-writes), as threads past the engine's 64 do.
template <std::size_t Owned>
using DetList = detail::BasicObserverList<DetProbe, test::DeterministicAtomic, Owned>;

// Seeded schedules per test: fewer under a sanitizer, whose runtime makes each one slower.
#ifdef RAIL_SANITIZED
constexpr std::uint64_t kSeeds = 300;
#else
constexpr std::uint64_t kSeeds = 3000;
#endif

template <std::size_t Owned>
void no_call_once_remove_returned() {
  for (std::uint64_t seed = 0; seed < kSeeds; ++seed) {
    Model m;
    DetList<Owned> list;
    const std::uint64_t first = list.add(DetProbe(&m, 0));
    test::DeterministicSchedule sched(
        seed, seed % 2 ? test::SchedulePolicy::subset : test::SchedulePolicy::uniform);
    auto reader = [&] {
      for (int i = 0; i < 3; ++i)
        list.for_each([](const DetProbe& p) { p(); });
    };
    sched.run({[&] {
                 const std::uint64_t second = list.add(DetProbe(&m, 1));
                 EXPECT_TRUE(list.remove(first));
                 m.remove_returned[0].store(1);
                 const std::uint64_t third = list.add(DetProbe(&m, 2));
                 EXPECT_TRUE(list.remove(second));
                 m.remove_returned[1].store(1);
                 EXPECT_TRUE(list.remove(third));
                 m.remove_returned[2].store(1);
               },
               reader, reader});
    ASSERT_EQ(m.violations.load(), 0) << "seed " << seed;
    for (int i = 0; i < 3; ++i)
      ASSERT_EQ(m.alive[i].load(), 0) << "seed " << seed << ": observer " << i << " leaked";
    ASSERT_FALSE(list.any());
  }
}

TEST(ObserverListSchedule, NoCallIsInProgressOrStartsOnceRemoveReturned) {
  no_call_once_remove_returned<64>();
}

TEST(ObserverListSchedule, NoCallIsInProgressOrStartsOnceRemoveReturnedWhenReadersShareCells) {
  no_call_once_remove_returned<0>();
}

// The same, with the writer removing from inside a walk (it must not wait for itself) while
// another reader walks: the removed observer's callable outlives that reader's call.
template <std::size_t Owned>
void remove_inside_a_walk() {
  for (std::uint64_t seed = 0; seed < kSeeds; ++seed) {
    Model m;
    {
      DetList<Owned> list;
      const std::uint64_t a = list.add(DetProbe(&m, 0));
      (void)list.add(DetProbe(&m, 1));
      test::DeterministicSchedule sched(seed, test::SchedulePolicy::uniform);
      sched.run({[&] {
                   bool removed = false;
                   list.for_each([&](const DetProbe& p) {
                     if (!removed) removed = list.remove(a);  // inside: does not wait
                     (void)p;
                   });
                   // A later add runs the grace period's steps without waiting for it.
                   const std::uint64_t c = list.add(DetProbe(&m, 2));
                   EXPECT_TRUE(list.remove(c));  // outside: waits, and frees a too if it can
                 },
                 [&] {
                   for (int i = 0; i < 3; ++i)
                     list.for_each([&](const DetProbe& p) {
                       if (p.model->alive[p.index].load() != 1) p.model->violations.fetch_add(1);
                     });
                 }});
      ASSERT_EQ(m.violations.load(), 0) << "seed " << seed;
      EXPECT_EQ(m.alive[2].load(), 0) << "seed " << seed;
    }
    ASSERT_EQ(m.alive[0].load(), 0) << "seed " << seed;  // freed by then, or by the destructor
  }
}

TEST(ObserverListSchedule, ARemoveInsideAWalkNeverFreesWhatAnotherWalkIsCalling) {
  remove_inside_a_walk<64>();
}

TEST(ObserverListSchedule, ARemoveInsideAWalkNeverFreesWhatAnotherWalkIsCallingInSharedCells) {
  remove_inside_a_walk<0>();
}

}  // namespace
}  // namespace rail
