// Flows (JobOptions::after, Flow): a parent waits in waiting_children until every child ended on
// any queue, reads their ends and results (Job::children), and a failed child applies its edge's
// policy (fail: dead-lettered with dependency_failed; ignore; cancel). Inline under the manual
// clock; then threads: the last child's end racing the parent's cancel, and many children ending
// at once.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "rail/detail/queue_stats.hpp"
#include "rail/rail.hpp"
#include "support/inline_engine.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;
using Flows = test::InlineEngine;

JobOptions after(std::vector<Dependency> deps) {
  JobOptions o;
  o.after = std::move(deps);
  return o;
}

TEST_F(Flows, AParentStartsOnlyOnceEveryChildOnAnyQueueCompletedAndReadsTheirResults) {
  auto charges = engine.declare_queue<int, std::string>("charges", QueueOptions{});
  auto emails = engine.declare_queue<int>("emails", QueueOptions{});
  auto close = engine.declare_queue<int>("close", QueueOptions{});
  charges.process(
      {}, [](Job<int>& j) -> Result<std::string> { return "receipt-" + std::to_string(j.data()); });
  emails.process({}, [](Job<int>&) { return Outcome::done(); });
  std::vector<ChildEnd> seen;
  int runs = 0;
  close.process({}, [&](Job<int>& j) {
    ++runs;
    seen = j.children();
    return Outcome::done();
  });
  auto charge = charges.add_tracked("charge", 7);
  const JobId email = emails.add("email", 1).id;
  const AddReceipt parent = close.add("close", 42, after({charge, email}));
  ASSERT_EQ(parent.status, AddStatus::added);
  EXPECT_EQ(close.state(parent.id).status, JobStatus::waiting_children);
  EXPECT_EQ(close.counts().waiting_children, 1u);
  EXPECT_EQ(close.counts().delayed, 0u) << "a waiting parent is not delayed";
  EXPECT_EQ(close.jobs(JobStatus::waiting_children).size(), 1u);
  EXPECT_EQ(close.explain(parent.id).holdup, Holdup::children);
  engine.run_until_idle();
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(close.state(parent.id).status, JobStatus::completed);
  EXPECT_EQ(close.counts().waiting_children, 0u);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].end.id, charge.id());
  EXPECT_EQ(seen[0].queue, "charges");
  EXPECT_TRUE(seen[0].end.completed());
  ASSERT_TRUE(seen[0].result<std::string>());
  EXPECT_EQ(*seen[0].result<std::string>(), "receipt-7");
  EXPECT_EQ(seen[1].end.id, email);
  EXPECT_EQ(seen[1].queue, "emails");
  EXPECT_FALSE(seen[1].result<void>()) << "a queue without a result type has none";
  // The parent starts after its last child ended.
  EXPECT_LT(of(EventKind::completed, email).front().at.time_since_epoch(),
            first(EventKind::started).at.time_since_epoch() + 1h);
  const auto started = ids_of(EventKind::started);
  ASSERT_EQ(started.size(), 3u);
  EXPECT_EQ(started.back(), parent.id);
}

TEST_F(Flows, AChildResultOfAnotherTypeThrowsTypeMismatchNamingTheChild) {
  auto charges = engine.declare_queue<int, std::string>("charges", QueueOptions{});
  auto close = engine.declare_queue<int>("close", QueueOptions{});
  charges.process({}, [](Job<int>&) -> Result<std::string> { return std::string("r"); });
  std::string error;
  close.process({}, [&](Job<int>& j) {
    try {
      (void)j.children().front().result<int>();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::type_mismatch);
      error = e.what();
    }
    return Outcome::done();
  });
  auto charge = charges.add_tracked("charge", 1);
  (void)close.add("close", 1, after({charge}));
  engine.run_until_idle();
  EXPECT_NE(error.find("queue 'charges'"), std::string::npos) << error;
}

TEST_F(Flows, ChildrenThatEndedBeforeTheParentWasAddedReleaseItAtOnce) {
  auto q = engine.declare_queue<int, int>("q", QueueOptions{});
  q.process({}, [](Job<int>& j) -> Result<int> { return j.data() * 2; });
  auto a = q.add_tracked("a", 1);
  const JobId b = q.add("b", 2).id;
  engine.run_until_idle();  // both completed
  std::vector<ChildEnd> seen;
  auto parents = engine.declare_queue<int>("parents", QueueOptions{});
  parents.process({}, [&](Job<int>& j) {
    seen = j.children();
    return Outcome::done();
  });
  const JobId p = parents.add("p", 0, after({a, b})).id;
  EXPECT_EQ(parents.state(p).status, JobStatus::waiting) << "released as it was added";
  engine.run_until_idle();
  ASSERT_EQ(seen.size(), 2u);
  ASSERT_TRUE(seen[0].result<int>()) << "through its handle: the result however early it ended";
  EXPECT_EQ(*seen[0].result<int>(), 2);
  EXPECT_TRUE(seen[1].end.completed()) << "by id: its history knows how it ended";
}

TEST_F(Flows, AParentAddedAsItsChildEndsIsReleasedThoughTheChildsHistoryEntryWasOverwritten) {
  // The parent is added by the observer of its child's end (a completion on the worker, then a
  // cancel): the child is still moving out of its slot, its end decided, and by then another
  // job's end has taken the child's entry in the queue's history (a table of
  // history_entries(capacity) entries, indexed by id). The slot still says how the child ended.
  constexpr std::uint32_t kCapacity = 64;
  auto q = engine.declare_queue<int>("q", QueueOptions{.capacity = kCapacity});
  q.process({}, [](Job<int>&) { return Outcome::done(); });
  auto parents = engine.declare_queue<int>("parents", QueueOptions{});
  std::vector<ChildEnd> seen;
  parents.process({}, [&](Job<int>& j) {
    seen = j.children();
    return Outcome::done();
  });
  const std::uint64_t entries = detail::QueueStats::history_entries(kCapacity);
  EventKind ending = EventKind::completed;
  JobId child = 0, overwriter = 0, parent = 0;
  engine.on_event([&](const Event& e) {
    if (e.kind != ending || e.job_id != child || parent != 0) return;
    // This thread's ids rise one by one: end fresh jobs until one takes the child's entry.
    for (std::uint64_t n = 0; n < 4 * entries && overwriter == 0; ++n) {
      const JobId id = q.add("filler", 0).id;
      EXPECT_TRUE(q.cancel(id));
      if (id % entries == child % entries) overwriter = id;
    }
    parent = parents.add("parent", 0, after({{child, ChildFailure::ignore}})).id;
  });
  for (const EventKind end : {EventKind::completed, EventKind::cancelled}) {
    ending = end;
    overwriter = parent = 0;
    child = q.add("child", 0).id;
    if (end == EventKind::cancelled) {
      EXPECT_TRUE(q.cancel(child));
    }
    engine.run_until_idle();
    ASSERT_NE(overwriter, 0u) << "no job took the child's history entry";
    ASSERT_NE(parent, 0u);
    EXPECT_EQ(parents.state(parent).status, JobStatus::completed) << parents.explain(parent).text;
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0].end.status,
              end == EventKind::completed ? JobStatus::completed : JobStatus::cancelled);
  }
}

TEST_F(Flows, AFailedChildDeadLettersItsParentUnstartedWithDependencyFailedNamingTheChild) {
  auto work = engine.declare_queue<int>("work", QueueOptions{});
  work.process({}, [](Job<int>& j) {
    return j.data() == 0 ? Outcome::fail("card declined") : Outcome::done();
  });
  auto parents = engine.declare_queue<int>("parents", QueueOptions{});
  int runs = 0;
  parents.process({}, [&](Job<int>&) {
    ++runs;
    return Outcome::done();
  });
  const JobId bad = work.add("bad", 0).id;
  const JobId good = work.add("good", 1).id;
  const JobId p = parents.add("p", 0, after({good, bad})).id;
  engine.run_until_idle();
  EXPECT_EQ(runs, 0);
  EXPECT_EQ(parents.state(p).status, JobStatus::dead_lettered);
  auto entry = parents.dlq().get(p);
  ASSERT_TRUE(entry);
  EXPECT_EQ(entry->reason, DeadLetterReason::dependency_failed);
  ASSERT_FALSE(entry->errors.empty());
  const std::string& why = entry->errors.back().message;
  EXPECT_NE(why.find("child job " + std::to_string(bad)), std::string::npos) << why;
  EXPECT_NE(why.find("queue 'work'"), std::string::npos) << why;
  EXPECT_NE(why.find("card declined"), std::string::npos) << why;
  EXPECT_EQ(parents.counts().dead_lettered, 1u);
  EXPECT_EQ(parents.counts().waiting_children, 0u);
  EXPECT_EQ(parents.counts().delayed, 0u);
  EXPECT_EQ(first(EventKind::dead_lettered).reason, DeadLetterReason::permanent_failure);
  EXPECT_EQ(of(EventKind::dead_lettered, p).at(0).reason, DeadLetterReason::dependency_failed);
}

TEST_F(Flows, IgnoreRunsTheParentAfterTheRestAndItsChildrenShowTheFailure) {
  auto work = engine.declare_queue<int>("work", QueueOptions{});
  work.process(
      {}, [](Job<int>& j) { return j.data() == 0 ? Outcome::discard("stale") : Outcome::done(); });
  auto parents = engine.declare_queue<int>("parents", QueueOptions{});
  std::vector<ChildEnd> seen;
  parents.process({}, [&](Job<int>& j) {
    seen = j.children();
    return Outcome::done();
  });
  const JobId bad = work.add("bad", 0).id;
  const JobId good = work.add("good", 1).id;
  const JobId p = parents.add("p", 0, after({{bad, ChildFailure::ignore}, good})).id;
  engine.run_until_idle();
  EXPECT_EQ(parents.state(p).status, JobStatus::completed);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].end.status, JobStatus::discarded);
  EXPECT_EQ(seen[0].end.error, "stale");
  EXPECT_EQ(seen[0].on_failure, ChildFailure::ignore);
  EXPECT_TRUE(seen[1].end.completed());
}

TEST_F(Flows, CancelPolicyCancelsTheParentUnstartedWhenAChildIsCancelled) {
  auto work = engine.declare_queue<int>("work", QueueOptions{});
  work.process({}, [](Job<int>&) { return Outcome::done(); });
  auto parents = engine.declare_queue<int>("parents", QueueOptions{});
  parents.process({}, [](Job<int>&) { return Outcome::done(); });
  const JobId child = work.add("child", 0).id;
  const JobId p = parents.add("p", 0, after({{child, ChildFailure::cancel}})).id;
  EXPECT_TRUE(work.cancel(child));
  EXPECT_EQ(parents.state(p).status, JobStatus::cancelled);
  EXPECT_EQ(parents.counts().cancelled, 1u);
  EXPECT_EQ(parents.counts().waiting_children, 0u);
}

TEST_F(Flows, ADiamondRunsEachJobOnceAndTheSinkAfterBothBranches) {
  auto q = engine.declare_queue<std::string>("q", QueueOptions{});
  std::vector<std::string> order;
  q.process({}, [&](Job<std::string>& j) {
    order.push_back(j.data());
    return Outcome::done();
  });
  Flow f;
  auto charge = f.job(q, "charge", std::string("charge"));
  auto email = f.job(q, "email", std::string("email"));
  auto invoice = f.job(q, "invoice", std::string("invoice"));
  auto done = f.job(q, "close", std::string("close"));
  f.after(email, charge).after(invoice, charge).after(done, email).after(done, invoice);
  const std::vector<JobId> ids = f.add();
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_EQ(f.id(done), ids[3]);
  EXPECT_EQ(q.state(ids[1]).status, JobStatus::waiting_children);
  EXPECT_EQ(q.counts().waiting_children, 3u);
  engine.run_until_idle();
  ASSERT_EQ(order.size(), 4u);
  EXPECT_EQ(order.front(), "charge");
  EXPECT_EQ(order.back(), "close");
  EXPECT_EQ(q.counts().completed, 4u);
}

TEST_F(Flows, AFlowWithACycleIsRefusedNamingItAndAddsNothing) {
  auto q = engine.declare_queue<int>("q", QueueOptions{});
  Flow f;
  auto a = f.job(q, "a", 1);
  auto b = f.job(q, "b", 2);
  auto c = f.job(q, "c", 3);
  f.after(a, b).after(b, c).after(c, a);
  try {
    (void)f.add();
    FAIL() << "a cycle was added";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    const std::string what = e.what();
    EXPECT_NE(what.find("cycle"), std::string::npos) << what;
    EXPECT_NE(what.find("'a' (node 0"), std::string::npos) << what;
    EXPECT_NE(what.find("'c' (node 2"), std::string::npos) << what;
  }
  EXPECT_EQ(q.counts().added, 0u);
  EXPECT_THROW(f.after(a, a), Error);
  EXPECT_THROW(f.after(a, Flow::Node{9}), Error);
  EXPECT_THROW(f.after(a, b), Error) << "an edge named twice";
}

TEST_F(Flows, AFlowNodeThatFindsNoRoomCancelsTheJobsAddedBeforeItParentsFirst) {
  auto small = engine.declare_queue<int>("small", QueueOptions{.capacity = 2});
  auto roomy = engine.declare_queue<int>("roomy", QueueOptions{});
  small.process({}, [](Job<int>&) { return Outcome::done(); });
  roomy.process({}, [](Job<int>&) { return Outcome::done(); });
  (void)small.add("filler", 0);
  Flow f;
  auto child = f.job(roomy, "child", 1);
  auto parent = f.job(small, "parent", 2);
  auto grand = f.job(small, "grand", 3);
  f.after(parent, child).after(grand, parent);
  try {
    (void)f.add();
    FAIL() << "the grandparent found room";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::capacity);
    EXPECT_NE(std::string(e.what()).find("'grand'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(roomy.state(f.id(child)).status, JobStatus::cancelled);
  EXPECT_EQ(small.state(f.id(parent)).status, JobStatus::cancelled)
      << "cancelled, not failed by its cancelled child";
  EXPECT_EQ(small.counts().dead_lettered, 0u);
}

TEST_F(Flows, FlowCancelCancelsEveryJobNotEndedAndCancellingOneParentLeavesItsChildren) {
  auto q = engine.declare_queue<int>("q", QueueOptions{});
  q.process({}, [](Job<int>&) { return Outcome::done(); });
  Flow f;
  auto child = f.job(q, "child", 1);
  auto parent = f.job(q, "parent", 2);
  f.after(parent, child);
  (void)f.add();
  EXPECT_TRUE(q.cancel(f.id(parent)));
  EXPECT_EQ(q.state(f.id(child)).status, JobStatus::waiting) << "its child stays";
  EXPECT_EQ(f.cancel(), 1u) << "the child; the parent had ended";
  EXPECT_EQ(q.counts().cancelled, 2u);
  EXPECT_EQ(q.counts().dead_lettered, 0u);
}

TEST_F(Flows, AnUnknownDuplicateOrZeroChildAndAfterWithDelayOrDedupAreRefused) {
  auto q = engine.declare_queue<int>("q", QueueOptions{});
  const JobId real = q.add("real", 1).id;
  const auto refused = [&](JobOptions o, const std::string& says) {
    try {
      (void)q.add("p", 0, o);
      ADD_FAILURE() << "accepted: " << says;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_option);
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused(after({12345}), "names job 12345, which no queue of this engine knows");
  refused(after({real, real}), "twice");
  refused(after({JobId{0}}), "job 0");
  JobOptions delayed = after({real});
  delayed.delay = 1s;
  refused(delayed, "delay");
  JobOptions dedup = after({real});
  dedup.dedup.id = "x";
  refused(dedup, "dedup id");
  std::vector<int> items{1, 2};
  EXPECT_THROW((void)q.add_bulk("p", std::span<int>(items), after({real})), Error)
      << "each would wait";
  EXPECT_EQ(q.counts().added, 1u) << "nothing else was added";
}

TEST_F(Flows, PromoteAndChangeDelayLeaveAWaitingParentWaiting) {
  auto q = engine.declare_queue<int>("q", QueueOptions{});
  q.process({}, [](Job<int>&) { return Outcome::done(); });
  const JobId child = q.add("child", 1).id;
  const JobId p = q.add("p", 0, after({child})).id;
  EXPECT_FALSE(q.promote(p));
  EXPECT_FALSE(q.change_delay(p, 0s));
  EXPECT_EQ(q.state(p).status, JobStatus::waiting_children);
}

TEST_F(Flows, AWaitingParentPastItsExpiryIsDeadLetteredExpiredAndItsChildEndChangesNothing) {
  auto q = engine.declare_queue<int>("q", QueueOptions{});
  int runs = 0;
  q.process({}, [&](Job<int>&) {
    ++runs;
    return Outcome::done();
  });
  const JobId child = q.add("child", 1).id;
  JobOptions o = after({child});
  o.expire_after = 5s;
  const JobId p = q.add("p", 0, o).id;
  EXPECT_EQ(engine.next_timer_in(), Duration{5s});
  clock.advance(5s);
  engine.run_until_idle();
  EXPECT_EQ(q.state(p).status, JobStatus::dead_lettered);
  EXPECT_EQ(q.dlq().get(p)->reason, DeadLetterReason::expired);
  EXPECT_EQ(q.counts().waiting_children, 0u);
  engine.run_until_idle();
  EXPECT_EQ(runs, 1) << "the child ran; the parent had ended";
}

TEST_F(Flows, ShutdownReportsParentsStillWaitingForChildren) {
  auto q = engine.declare_queue<int>("q", QueueOptions{});
  q.process({}, [](Job<int>&) { return Outcome::done(); });
  const JobId child = q.add("child", 1).id;
  const JobId p = q.add("p", 0, after({child})).id;
  const ShutdownReport r = engine.shutdown(1s);
  ASSERT_EQ(r.waiting_children.size(), 1u);
  EXPECT_EQ(r.waiting_children[0].id, p);
  EXPECT_EQ(r.not_started.size(), 2u);
}

TEST_F(Flows, AParentRedrivenFromTheDlqRunsWithoutWaiting) {
  auto q = engine.declare_queue<int>("q", QueueOptions{});
  int runs = 0;
  q.process({}, [&](Job<int>& j) {
    if (j.data() == 0) return Outcome::fail("no");
    ++runs;
    return Outcome::done();
  });
  const JobId child = q.add("child", 0).id;
  const JobId p = q.add("p", 1, after({child})).id;
  engine.run_until_idle();
  ASSERT_EQ(q.state(p).status, JobStatus::dead_lettered);
  EXPECT_EQ(q.dlq().redrive(p), RedriveStatus::redriven);
  engine.run_until_idle();
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(q.state(p).status, JobStatus::completed);
}

TEST_F(Flows, AChildCancelledWhileWaitingBeforeTheParentWasAddedFailsItAtOnce) {
  // Its slot still holds it (cancelled, its index in the ready ring) with its end in the
  // history, recorded for no waiter: the parent must read that end, not wait for another.
  auto q = engine.declare_queue<int>("q", QueueOptions{});
  q.process({}, [](Job<int>&) { return Outcome::done(); });
  const JobId child = q.add("child", 1).id;
  ASSERT_TRUE(q.cancel(child));
  const JobId p = q.add("p", 0, after({child})).id;
  EXPECT_EQ(q.state(p).status, JobStatus::dead_lettered);
  EXPECT_EQ(q.dlq().get(p)->reason, DeadLetterReason::dependency_failed);
}

TEST_F(Flows, AChildsHandleKeepsItsResultWhenAParentNamesItById) {
  auto q = engine.declare_queue<int, int>("q", QueueOptions{});
  q.process({}, [](Job<int>& j) -> Result<int> { return j.data() * 2; });
  auto child = q.add_tracked("child", 21);
  engine.run_until_idle();
  auto parents = engine.declare_queue<int>("parents", QueueOptions{});
  (void)parents.add("p", 0, after({child.id()}));
  const auto end = child.wait();
  ASSERT_TRUE(end.result) << "the handle's end came from the history, without its result";
  EXPECT_EQ(*end.result, 42);
}

TEST_F(Flows, AChainTenThousandDeepFailsOrCancelsInALoopWithErrorsOfBoundedSize) {
  // Each parent's end decides for its own parent, on the same thread: a loop, not recursion;
  // and a failed dependency's error names its child without repeating the chain below it.
  for (const ChildFailure policy : {ChildFailure::fail, ChildFailure::cancel}) {
    auto q = engine.declare_queue<int>(policy == ChildFailure::fail ? "fail" : "cancel",
                                       QueueOptions{.capacity = 16'384});
    q.process({}, [](Job<int>&) { return Outcome::fail("root cause"); });
    JobHandle<> link = q.add_tracked("root", 0);
    for (int i = 1; i < 10'000; ++i)
      link = q.add_tracked("link", i, after({{link, policy}}));
    const JobId last = link.id();
    engine.run_until_idle();
    if (policy == ChildFailure::fail) {
      const auto entry = q.dlq().get(last);
      ASSERT_TRUE(entry);
      EXPECT_EQ(entry->reason, DeadLetterReason::dependency_failed);
      EXPECT_LT(entry->errors.back().message.size(), 200u) << entry->errors.back().message;
      EXPECT_EQ(q.counts().dead_lettered, 10'000u);
    } else {
      EXPECT_EQ(q.state(last).status, JobStatus::cancelled);
      EXPECT_EQ(q.counts().cancelled, 9'999u);
    }
  }
}

TEST_F(Flows, AHandleOfAnEngineThatIsGoneIsRefused) {
  std::optional<JobHandle<>> kept;
  {
    Engine other{EngineOptions{.mode = Mode::inlined}};
    auto q = other.declare_queue<int>("q", QueueOptions{});
    kept = q.add_tracked("child", 1);
  }
  auto q = engine.declare_queue<int>("q", QueueOptions{});
  try {
    (void)q.add("p", 0, after({*kept}));
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find("engine is gone"), std::string::npos) << e.what();
  }
}

TEST_F(Flows, ACoroutineParentReadsItsChildrenToo) {
  auto q = engine.declare_queue<int, int>("q", QueueOptions{});
  q.process({}, [](Job<int>& j) -> Result<int> { return j.data() + 1; });
  auto parents = engine.declare_queue<int>("parents", QueueOptions{});
  int read = 0;
  parents.process({.max_pending = 2}, [&](AsyncJob<int> job) -> Task {
    for (const ChildEnd& c : job.children())
      read = *c.result<int>();
    co_return Outcome::done();
  });
  auto child = q.add_tracked("c", 41);
  (void)parents.add("p", 0, after({child}));
  engine.run_until_idle();
  EXPECT_EQ(read, 42);
}

TEST_F(Flows, AScheduleWithChildrenIsRefused) {
  auto q = engine.declare_queue<int>("q", QueueOptions{});
  const JobId child = q.add("child", 1).id;
  ScheduleOptions o;
  o.job.after = {child};
  EXPECT_THROW((void)q.schedule("s", Schedule::every(1s), "run", 0, o), Error);
}

// --- threads -----------------------------------------------------------------------------------

TEST(FlowsThreaded, TheLastChildsEndRacingTheParentsCancelEndsTheParentExactlyOnce) {
  // 4 workers on 2 cores; each round a parent waits for 3 children while another thread cancels
  // it at a random moment: a cancel that said true ends it cancelled (unstarted, or flagged
  // while it ran: then it ran once); one that said false came after its end: it completed,
  // having run once. It never runs before its 3 children completed, nor twice.
  Engine engine;
  auto work = engine.declare_queue<int>("work", QueueOptions{});
  auto parents = engine.declare_queue<int>("parents", QueueOptions{});
  work.process({.concurrency = 4}, [](Job<int>& j) {
    if (j.data() % 3 == 0) std::this_thread::yield();
    return Outcome::done();
  });
  constexpr int kRounds = 300;
  std::vector<std::atomic<int>> ran(kRounds);
  std::atomic<int> early{0};
  parents.process({.concurrency = 2}, [&](Job<int>& j) {
    ran[j.data()].fetch_add(1);
    for (const ChildEnd& c : j.children())
      if (!c.end.completed()) early.fetch_add(1);
    return Outcome::done();
  });
  std::vector<JobHandle<>> handles;
  std::vector<bool> cancelled(kRounds);
  for (int round = 0; round < kRounds; ++round) {
    std::vector<Dependency> kids;
    for (int k = 0; k < 3; ++k)
      kids.emplace_back(work.add("child", round * 3 + k).id);
    auto h = parents.add_tracked("parent", round, after(kids));
    std::thread canceller([&, id = h.id()] {
      for (int spin = round % 50; spin > 0; --spin)
        std::this_thread::yield();
      cancelled[round] = parents.cancel(id);
    });
    canceller.join();
    handles.push_back(h);
  }
  for (int round = 0; round < kRounds; ++round) {
    const auto end = handles[round].wait_for(30s);
    ASSERT_TRUE(end) << "round " << round << ": the parent never ended";
    if (cancelled[round]) {
      EXPECT_EQ(end->status, JobStatus::cancelled) << "round " << round;
      EXPECT_LE(ran[round].load(), 1) << "round " << round;
    } else {
      EXPECT_EQ(end->status, JobStatus::completed) << "round " << round;
      EXPECT_EQ(ran[round].load(), 1) << "round " << round;
    }
  }
  ASSERT_TRUE(work.wait_idle(30s)) << "the children of cancelled parents run on";
  EXPECT_EQ(early.load(), 0) << "a parent ran before a child had completed";
  EXPECT_EQ(parents.counts().waiting_children, 0u);
  EXPECT_TRUE(engine.shutdown(10s).clean());
}

TEST(FlowsThreaded, AFanInOfChildrenEndingOnManyWorkersReleasesTheParentOnceAfterAll) {
  Engine engine;
  auto work = engine.declare_queue<int>("work", QueueOptions{});
  auto parents = engine.declare_queue<int>("parents", QueueOptions{});
  std::atomic<int> children_done{0};
  work.process({.concurrency = 4}, [&](Job<int>&) {
    children_done.fetch_add(1);
    return Outcome::done();
  });
  std::atomic<int> runs{0};
  std::atomic<int> seen_done{-1};
  std::atomic<std::size_t> seen_children{0};
  parents.process({}, [&](Job<int>& j) {
    seen_done.store(children_done.load());
    seen_children.store(j.children().size());
    runs.fetch_add(1);
    return Outcome::done();
  });
  for (int round = 0; round < 20; ++round) {
    std::vector<Dependency> kids;
    for (int k = 0; k < 200; ++k)
      kids.emplace_back(work.add("child", k).id);
    auto h = parents.add_tracked("parent", round, after(kids));
    const auto end = h.wait_for(30s);
    ASSERT_TRUE(end);
    EXPECT_TRUE(end->completed());
    EXPECT_EQ(seen_children.load(), 200u);
    EXPECT_EQ(seen_done.load(), (round + 1) * 200) << "started before every child had ended";
  }
  EXPECT_EQ(runs.load(), 20);
  EXPECT_TRUE(engine.shutdown(10s).clean());
}

}  // namespace
}  // namespace rail
