// rail::amqp::Consumer against a real broker (one per test): jobs a Producer added run on the
// local queue's workers and their messages are acked; a failed attempt goes back through the
// broker with its backoff (never early) and its handler sees the job's own attempt, unless its
// wait is short enough to stay in the process (retry_here_within, within retry_here_max); a lapsed
// lease goes back through the broker too, its late outcome fenced; the last failed attempt lands in
// the broker DLQ with its reason and every attempt's error; a body its codec cannot read is
// dead-lettered unrun; redrive_all sends every dead letter back, its attempts restarted; a
// consumer process killed with -9 has its deliveries redelivered to the next; every confirmed
// add runs across a broker killed with -9 mid-run, and across one frozen past its heartbeats.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "rail/amqp.hpp"
#include "rail/detail/amqp_connection.hpp"
#include "rail/rail.hpp"
#include "support/broker_test.hpp"
#include "support/child_process.hpp"
#include "support/eventually.hpp"
#include "support/release_on_exit.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;
using test::eventually;
namespace wire = detail::amqp;

using AmqpConsumer = test::BrokerTest;

// Every retry through the broker's delay cascade, however short its wait (no retry here).
const amqp::ConsumerOptions kBrokerRetries{.retry_here_within = Duration{0}};

TEST_F(AmqpConsumer, JobsAddedThroughTheBrokerRunOnTheLocalWorkersAndAreAcked) {
  Engine engine;
  auto local = engine.declare_queue<std::string>("orders", {});
  std::mutex m;
  std::multiset<std::string> ran;
  local.process({.concurrency = 3}, [&](Job<std::string>& j) {
    std::lock_guard lock(m);
    ran.insert(j.data());
  });
  amqp::Consumer<std::string> consumer(options(), engine, local);
  amqp::Producer<std::string> producer(options(), "orders");
  constexpr int kJobs = 300;
  for (int i = 0; i < kJobs; ++i)
    ASSERT_EQ(producer.add("charge", std::to_string(i)).status, AddStatus::added);
  ASSERT_TRUE(eventually([&] { return local.counts().completed == kJobs; }, 60s))
      << local.counts().completed << " of " << kJobs << " completed";
  {
    std::lock_guard lock(m);
    EXPECT_EQ(ran.size(), static_cast<std::size_t>(kJobs));
    for (int i = 0; i < kJobs; ++i)
      EXPECT_EQ(ran.count(std::to_string(i)), 1u) << "job " << i;
  }
  wire::Connection c = raw("reader");
  EXPECT_TRUE(eventually([&] { return c.queue_depth("rail.q.orders") == 0; }));
  EXPECT_EQ(c.queue_depth("rail.dlq.orders"), 0u);
}

TEST_F(AmqpConsumer, AFailedAttemptGoesBackThroughTheBrokerAfterItsBackoff) {
  Engine engine;
  auto local = engine.declare_queue<std::string>("payments", {});
  struct Run {
    std::chrono::steady_clock::time_point at;
    std::uint32_t attempt, failed, max;
    std::string last_error;
  };
  std::mutex m;
  std::vector<Run> runs;
  local.process({.concurrency = 2}, [&](Job<std::string>& j) {
    std::lock_guard lock(m);
    runs.push_back({std::chrono::steady_clock::now(), j.attempt(), j.failed_attempts(),
                    j.max_attempts(), std::string(j.last_error())});
    return j.attempt() < 3 ? Outcome::retry("gateway timeout #" + std::to_string(j.attempt()))
                           : Outcome::done();
  });
  amqp::Consumer<std::string> consumer(options(), engine, local, {}, kBrokerRetries);
  amqp::Producer<std::string> producer(options(), "payments");
  JobOptions o;
  o.max_attempts = 4;
  o.backoff = Backoff::fixed(400ms);
  ASSERT_EQ(producer.add("charge", "card-1", o).status, AddStatus::added);
  ASSERT_TRUE(eventually([&] { return local.counts().completed == 1; }, 60s));
  std::lock_guard lock(m);
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_GE(runs[1].at - runs[0].at, 400ms) << "a retry came before its backoff";
  EXPECT_GE(runs[2].at - runs[1].at, 400ms) << "a retry came before its backoff";
  for (std::uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(runs[i].attempt, i + 1) << "the broker's attempts are the job's";
    EXPECT_EQ(runs[i].failed, i);
    EXPECT_EQ(runs[i].max, 4u);
  }
  EXPECT_EQ(runs[0].last_error, "");
  EXPECT_EQ(runs[2].last_error, "gateway timeout #2");
  const QueueCounts c = local.counts();
  EXPECT_EQ(c.forwarded, 2u) << "each retry left this process for the broker";
  EXPECT_EQ(c.added, 3u);
  EXPECT_EQ(raw("reader").queue_depth("rail.dlq.payments"), 0u);
}

// A handler past its lease: its delivery goes back to the broker, which delivers it again (here,
// to the same process, on another worker), its stall counted; the lapsed handler's late
// outcome is fenced, so the job completes once.
TEST_F(AmqpConsumer, ALapsedLeaseGoesBackThroughTheBrokerAndTheLateOutcomeIsFenced) {
  std::atomic<bool> release{false};  // read by the handler until the engine joined it
  Engine engine;
  QueueOptions q;
  q.visibility_timeout = 300ms;
  auto local = engine.declare_queue<std::string>("reports", q);
  std::atomic<std::uint32_t> second_stalls{0}, second_deliveries{0};
  local.process({.concurrency = 2}, [&](Job<std::string>& j) {
    if (j.stalls() == 0) {
      while (!release.load())
        std::this_thread::sleep_for(5ms);  // the first delivery hangs
      return Outcome::done();
    }
    second_stalls = j.stalls();
    second_deliveries = j.deliveries();
    release = true;
    return Outcome::done();
  });
  test::ReleaseOnExit unblock{release};
  amqp::Consumer<std::string> consumer(options(), engine, local);
  amqp::Producer<std::string> producer(options(), "reports");
  ASSERT_EQ(producer.add("render", "q3").status, AddStatus::added);
  ASSERT_TRUE(eventually([&] { return local.counts().completed == 1; }, 60s));
  ASSERT_TRUE(eventually([&] { return local.counts().late_outcomes == 1; }, 60s));
  EXPECT_EQ(second_stalls.load(), 1u);
  EXPECT_EQ(second_deliveries.load(), 2u);
  const QueueCounts c = local.counts();
  EXPECT_EQ(c.forwarded, 1u);
  EXPECT_EQ(c.completed, 1u) << "the fenced handler's done does not count";
  wire::Connection r = raw("reader");
  EXPECT_TRUE(eventually([&] { return r.queue_depth("rail.q.reports") == 0; }));
  EXPECT_EQ(r.queue_depth("rail.dlq.reports"), 0u);
}

// A custom backoff is the consuming process's QueueOptions::custom_backoff: the retry comes
// back through the broker no earlier than the delay it computed.
TEST_F(AmqpConsumer, ACustomBackoffIsTheConsumingQueuesFunction) {
  Engine engine;
  QueueOptions q;
  q.custom_backoff = [](const RetryContext& c) {
    return std::chrono::milliseconds(300) * c.failed_attempts;
  };
  auto local = engine.declare_queue<std::string>("quotes", q);
  std::mutex m;
  std::vector<std::chrono::steady_clock::time_point> runs;
  local.process({.concurrency = 1}, [&](Job<std::string>& j) {
    const std::lock_guard lock(m);
    runs.push_back(std::chrono::steady_clock::now());
    return j.attempt() < 3 ? Outcome::retry("upstream busy") : Outcome::done();
  });
  amqp::Consumer<std::string> consumer(options(), engine, local, {}, kBrokerRetries);
  amqp::Producer<std::string> producer(options(), "quotes");
  JobOptions o;
  o.max_attempts = 3;
  o.backoff = Backoff::custom();
  ASSERT_EQ(producer.add("quote", "EURUSD", o).status, AddStatus::added);
  ASSERT_TRUE(eventually([&] { return local.counts().completed == 1; }, 60s));
  const std::lock_guard lock(m);
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_GE(runs[1] - runs[0], 300ms) << "the first retry came before its custom delay";
  EXPECT_GE(runs[2] - runs[1], 600ms) << "the second retry came before its custom delay";
}

// A job that kills its process on every delivery never reaches an outcome rail could count:
// the broker's x-delivery-limit dead-letters it, and the DLQ says it was a crash loop.
TEST_F(AmqpConsumer, AJobThatKillsEveryConsumerIsDeadLetteredAsACrashLoop) {
  const amqp::BrokerQueueOptions guarded{.max_length = 100, .delivery_limit = 2, .partitions = 0};
  {
    amqp::Producer<std::string> producer(options(), "poison", guarded);
    ASSERT_EQ(producer.add("parse", "boom").status, AddStatus::added);
  }
  amqp::DeadLetters dlq(options(), "poison", guarded);
  int deliveries = 0;
  while (dlq.depth() == 0 && deliveries < 6) {
    ++deliveries;
    // No thread runs in this process: safe to fork. The handler ends its process at once.
    test::ChildProcess child([&](test::ChildProcess::Signal) {
      Engine engine;
      auto local = engine.declare_queue<std::string>("poison", {});
      local.process({.concurrency = 1}, [](Job<std::string>&) -> Outcome { _exit(7); });
      amqp::Consumer<std::string> consumer(options(), engine, local, guarded);
      for (;;)
        std::this_thread::sleep_for(1s);
    });
    EXPECT_FALSE(child.wait_signals(1)) << "the child signalled: it never ran the job";
    ASSERT_TRUE(eventually(
        [&] { return dlq.depth() == 1 || raw("reader").queue_depth("rail.q.poison") == 1; }, 30s))
        << "the message is in neither the queue nor its DLQ";
  }
  EXPECT_EQ(deliveries, 3) << "a delivery limit of 2 allows 3 deliveries";
  const std::vector<amqp::BrokerDeadLetter> dead = dlq.list();
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].reason, "crash_loop");
  EXPECT_EQ(dead[0].body, "boom");
}

// Whether the first attempt's retry went through the broker or stayed here, the dead letter
// carries both attempts' errors: from the message's headers, or from the local DLQ entry.
TEST_F(AmqpConsumer, TheLastFailedAttemptLandsInTheBrokerDlqWithEveryError) {
  for (const bool here : {false, true}) {
    SCOPED_TRACE(here ? "the retry stayed here" : "the retry went through the broker");
    const std::string queue = here ? "emails.here" : "emails";
    Engine engine;
    auto local = engine.declare_queue<std::string>(queue, {});
    std::atomic<int> runs{0};
    local.process({.concurrency = 1}, [&](Job<std::string>&) {
      return Outcome::retry("smtp 451 #" + std::to_string(runs.fetch_add(1) + 1));
    });
    amqp::Consumer<std::string> consumer(options(), engine, local, {},
                                         here ? amqp::ConsumerOptions{} : kBrokerRetries);
    amqp::Producer<std::string> producer(options(), queue);
    JobOptions o;
    o.max_attempts = 2;
    const AddReceipt r = producer.add("welcome", "ann@example.com", o);
    ASSERT_EQ(r.status, AddStatus::added);
    wire::Connection c = raw("reader");
    ASSERT_TRUE(eventually([&] { return c.queue_depth("rail.dlq." + queue) == 1; }, 60s));
    EXPECT_EQ(runs.load(), 2);
    EXPECT_EQ(local.counts().forwarded, here ? 0u : 1u);
    EXPECT_EQ(local.counts().added, here ? 1u : 2u) << "a retry here is the same local job";
    EXPECT_TRUE(local.dlq().list().empty())
        << "the local DLQ keeps no copy of a broker dead letter";
    c.consume("rail.dlq." + queue, 1);
    const std::optional<wire::Delivery> d = c.next(10s);
    ASSERT_TRUE(d);
    EXPECT_EQ(d->body, "ann@example.com");
    EXPECT_EQ(d->message_id, std::to_string(r.id));
    EXPECT_EQ(std::get<std::string>(*wire::field(d->headers, "x-rail-reason")),
              "attempts_exhausted");
    EXPECT_EQ(std::get<std::int64_t>(*wire::field(d->headers, "x-rail-attempt")), 2);
    EXPECT_EQ(std::get<std::string>(*wire::field(d->headers, "x-rail-error-1")), "smtp 451 #1");
    EXPECT_EQ(std::get<std::string>(*wire::field(d->headers, "x-rail-error-2")), "smtp 451 #2");
    c.ack(d->tag);
  }
}

// ConsumerOptions::retry_here_within: a retry due that soon waits in this process, holding its
// delivery, and runs as the same local job (the broker sees one delivery and one ack); a
// longer wait goes back through the broker.
TEST_F(AmqpConsumer, AShortRetryStaysInTheProcessAndALongOneGoesThroughTheBroker) {
  Engine engine;
  auto local = engine.declare_queue<std::string>("webhooks", {});
  std::mutex m;
  std::map<std::string, std::vector<std::chrono::steady_clock::time_point>> runs;
  local.process({.concurrency = 2}, [&](Job<std::string>& j) {
    const std::lock_guard lock(m);
    runs[j.data()].push_back(std::chrono::steady_clock::now());
    return j.attempt() < 3 ? Outcome::retry("503") : Outcome::done();
  });
  amqp::Consumer<std::string> consumer(options(), engine, local, {}, {.retry_here_within = 300ms});
  amqp::Producer<std::string> producer(options(), "webhooks");
  JobOptions shorter, longer;
  shorter.max_attempts = longer.max_attempts = 3;
  shorter.backoff = Backoff::fixed(200ms);
  longer.backoff = Backoff::fixed(400ms);
  ASSERT_EQ(producer.add("post", "short", shorter).status, AddStatus::added);
  ASSERT_EQ(producer.add("post", "long", longer).status, AddStatus::added);
  ASSERT_TRUE(eventually([&] { return local.counts().completed == 2; }, 60s));
  const QueueCounts c = local.counts();
  EXPECT_EQ(c.forwarded, 2u) << "only the long job's two retries went through the broker";
  EXPECT_EQ(c.added, 4u) << "the short job once, the long one once per delivery";
  const std::lock_guard lock(m);
  for (const char* job : {"short", "long"}) {
    ASSERT_EQ(runs[job].size(), 3u) << job;
    for (std::size_t i = 1; i < 3; ++i)
      EXPECT_GE(runs[job][i] - runs[job][i - 1], std::string(job) == "short" ? 200ms : 400ms)
          << job << ": a retry came before its backoff";
  }
  wire::Connection r = raw("reader");
  EXPECT_TRUE(eventually([&] { return r.queue_depth("rail.q.webhooks") == 0; }));
  EXPECT_EQ(r.queue_depth("rail.dlq.webhooks"), 0u);
}

// ConsumerOptions::retry_here_max: retries waiting here hold at most that many deliveries; a
// short retry past it goes back through the broker, so they never take the whole prefetch.
TEST_F(AmqpConsumer, AShortRetryPastTheConsumersPlacesGoesThroughTheBroker) {
  Engine engine;
  auto local = engine.declare_queue<std::string>("sms", {});
  std::atomic<int> first_failures{0};
  local.process({.concurrency = 2}, [&](Job<std::string>& j) {
    if (j.attempt() > 1) return Outcome::done();
    first_failures.fetch_add(1);
    // Both first attempts fail before either retry is due (2 s): one place for two jobs.
    (void)eventually([&] { return first_failures.load() == 2; }, 60s);
    return Outcome::retry("carrier busy");
  });
  amqp::Consumer<std::string> consumer(
      options(), engine, local, {}, {.prefetch = 4, .retry_here_within = 5s, .retry_here_max = 1});
  amqp::Producer<std::string> producer(options(), "sms");
  JobOptions o;
  o.max_attempts = 2;
  o.backoff = Backoff::fixed(2s);
  ASSERT_EQ(producer.add("send", "a", o).status, AddStatus::added);
  ASSERT_EQ(producer.add("send", "b", o).status, AddStatus::added);
  ASSERT_TRUE(eventually([&] { return local.counts().completed == 2; }, 60s));
  EXPECT_EQ(local.counts().forwarded, 1u) << "one retry had the place, the other went back";
}

TEST_F(AmqpConsumer, RedriveAllSendsEveryDeadLetterBackWithItsAttemptsRestarted) {
  Engine engine;
  auto local = engine.declare_queue<std::string>("imports", {});
  std::atomic<bool> healthy{false};
  std::atomic<int> completed{0};
  local.process({.concurrency = 2}, [&](Job<std::string>&) {
    if (!healthy.load()) return Outcome::retry("upstream down");
    completed.fetch_add(1);
    return Outcome::done();
  });
  amqp::Consumer<std::string> consumer(options(), engine, local);
  amqp::Producer<std::string> producer(options(), "imports");
  JobOptions o;
  o.max_attempts = 2;
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(producer.add("import", std::to_string(i), o).status, AddStatus::added);
  amqp::DeadLetters dlq(options(), "imports");
  ASSERT_TRUE(eventually([&] { return dlq.depth() == 3; }, 60s)) << dlq.depth();
  healthy.store(true);
  EXPECT_EQ(dlq.redrive_all(), 3u);
  ASSERT_TRUE(eventually([&] { return completed.load() == 3; }, 60s)) << completed.load();
  EXPECT_EQ(dlq.depth(), 0u);
  EXPECT_EQ(dlq.redrive_all(), 0u) << "nothing left to redrive";
}

// A consumer process killed with deliveries in its handlers: the broker hands them to the next
// consumer, and every job completes there (the killed process's runs never ended).
TEST_F(AmqpConsumer, AKilledConsumerProcessesDeliveriesAreRedeliveredToTheNext) {
  constexpr int kJobs = 20;
  {
    amqp::Producer<std::string> producer(options(), "work");
    for (int i = 0; i < kJobs; ++i)
      ASSERT_EQ(producer.add("task", std::to_string(i)).status, AddStatus::added);
  }
  {
    // No thread runs yet in this process: safe to fork.
    test::ChildProcess child([&](test::ChildProcess::Signal started) {
      Engine engine;
      auto local = engine.declare_queue<std::string>("work", {});
      local.process({.concurrency = 4}, [&](Job<std::string>&) {
        started();
        for (;;)
          std::this_thread::sleep_for(1s);  // holds its delivery until the process is killed
      });
      amqp::Consumer<std::string> consumer(options(), engine, local, {}, {.prefetch = 8});
      for (;;)
        std::this_thread::sleep_for(1s);
    });
    // Four handlers hold four deliveries (and four more wait).
    ASSERT_TRUE(child.wait_signals(4)) << "the consumer process died before its handlers started";
  }  // killed with -9

  Engine engine;
  auto local = engine.declare_queue<std::string>("work", {});
  std::mutex m;
  std::set<std::string> ran;
  local.process({.concurrency = 2}, [&](Job<std::string>& j) {
    std::lock_guard lock(m);
    ran.insert(j.data());
  });
  amqp::Consumer<std::string> consumer(options(), engine, local);
  ASSERT_TRUE(eventually([&] { return local.counts().completed >= kJobs; }, 60s))
      << local.counts().completed << " of " << kJobs;
  std::lock_guard lock(m);
  EXPECT_EQ(ran.size(), static_cast<std::size_t>(kJobs)) << "a confirmed job was lost";
  EXPECT_EQ(local.counts().completed, static_cast<std::uint64_t>(kJobs))
      << "jobs ran twice with no fault in this process";
}

/// across_a_fault(options, broker, fault, heal): a producer adds 300 jobs (confirm_timeout 120 s)
/// to a queue a consumer bridges into a local one; halfway `fault` hits the broker and `heal`, a
/// second later on another thread, ends it. Every add that was confirmed must run (some twice:
/// duplicates only after the fault). Returns the confirmed adds' count.
template <class Fault, class Heal>
std::size_t across_a_fault(const amqp::BrokerOptions& options, test::LocalBroker& broker,
                           Fault fault, Heal heal) {
  constexpr int kJobs = 300;
  { amqp::Producer<std::string> declare(options, "ledger"); }
  broker.restart();  // a clean restart saves the queue's registration (see the README)
  Engine engine;
  auto local = engine.declare_queue<std::string>("ledger", {});
  std::mutex m;
  std::multiset<std::string> ran;
  local.process({.concurrency = 2}, [&](Job<std::string>& j) {
    std::lock_guard lock(m);
    ran.insert(j.data());
  });
  amqp::Consumer<std::string> consumer(options, engine, local);
  amqp::BrokerOptions patient = options;
  patient.confirm_timeout = 120s;
  amqp::Producer<std::string> producer(patient, "ledger");
  std::vector<std::string> confirmed;
  std::thread healer;
  for (int i = 0; i < kJobs; ++i) {
    if (i == kJobs / 2) {
      fault();
      healer = std::thread([&] {
        std::this_thread::sleep_for(1s);  // the next adds find the fault; decides nothing
        heal();
      });
    }
    try {
      if (producer.add("entry", std::to_string(i)).status == AddStatus::added)
        confirmed.push_back(std::to_string(i));
    } catch (const Error& e) {
      ADD_FAILURE() << "add " << i << ": " << e.what();
    }
  }
  healer.join();
  const bool all_ran = eventually(
      [&] {
        std::lock_guard lock(m);
        for (const std::string& c : confirmed)
          if (ran.count(c) == 0) return false;
        return true;
      },
      120s);
  std::lock_guard lock(m);
  EXPECT_TRUE(all_ran) << "a confirmed add never ran (" << ran.size() << " runs)";
  return confirmed.size();
}

// kill -9 of the broker mid-run: the producer and the consumer reconnect with backoff and
// redeclare once it is back.
TEST_F(AmqpConsumer, EveryConfirmedAddRunsAcrossABrokerKilledMidRun) {
  const std::size_t confirmed = across_a_fault(
      options(), *broker_, [&] { broker_->kill(); }, [&] { broker_->start(); });
  EXPECT_GT(confirmed, 150u);
}

// A frozen broker (SIGSTOP past two heartbeats of 2 s, then SIGCONT): the heartbeat finds it,
// the clients reconnect once it answers again.
TEST_F(AmqpConsumer, EveryConfirmedAddRunsAcrossABrokerFrozenPastItsHeartbeats) {
  const std::size_t confirmed = across_a_fault(
      options(), *broker_, [&] { broker_->freeze(); },
      [&] {
        std::this_thread::sleep_for(5s);  // with the second above: past two heartbeats
        broker_->thaw();
      });
  EXPECT_GT(confirmed, 150u);
}

// A local queue with no room: deliveries wait in the consumer, not handed back to the broker
// (each requeue would come straight back and count against x-delivery-limit: with a limit of 3,
// a hot loop would dead-letter them within milliseconds).
TEST_F(AmqpConsumer, DeliveriesWaitForRoomInAFullLocalQueueWithoutARequeueLoop) {
  Engine engine;
  QueueOptions small;
  small.capacity = 1;
  auto local = engine.declare_queue<std::string>("narrow", small);
  std::atomic<int> done{0};
  local.process({.concurrency = 1}, [&](Job<std::string>&) {
    std::this_thread::sleep_for(100ms);  // keeps the queue full a while; decides nothing
    done.fetch_add(1);
  });
  const amqp::BrokerQueueOptions guarded{.max_length = 1000, .delivery_limit = 3};
  amqp::Consumer<std::string> consumer(options(), engine, local, guarded, {.prefetch = 8});
  amqp::Producer<std::string> producer(options(), "narrow", guarded);
  constexpr int kJobs = 8;
  for (int i = 0; i < kJobs; ++i)
    ASSERT_EQ(producer.add("slow", std::to_string(i)).status, AddStatus::added);
  ASSERT_TRUE(eventually([&] { return done.load() == kJobs; }, 60s)) << done.load();
  EXPECT_EQ(raw("reader").queue_depth("rail.dlq.narrow"), 0u)
      << "the broker dead-lettered requeued deliveries";
}

// The engine shuts down while deliveries wait for room in its full local queue: the consumer
// closes its subscription and hands every unsettled delivery back to the broker, in one piece.
TEST_F(AmqpConsumer, AShutdownWhileDeliveriesWaitForRoomHandsThemBack) {
  std::atomic<bool> release{false};  // read by the handler until the engine joined it
  Engine engine;
  QueueOptions small;
  small.capacity = 1;
  auto local = engine.declare_queue<std::string>("backlog", small);
  std::atomic<int> started{0};
  local.process({.concurrency = 1}, [&](Job<std::string>&) {
    started.fetch_add(1);
    while (!release.load())
      std::this_thread::sleep_for(5ms);  // holds the queue full until the shutdown
  });
  test::ReleaseOnExit unblock{release};
  amqp::Consumer<std::string> consumer(options(), engine, local, {}, {.prefetch = 8});
  amqp::Producer<std::string> producer(options(), "backlog");
  constexpr int kJobs = 6;
  for (int i = 0; i < kJobs; ++i)
    ASSERT_EQ(producer.add("slow", std::to_string(i)).status, AddStatus::added);
  ASSERT_TRUE(eventually([&] { return started.load() == 1; }, 60s));
  std::this_thread::sleep_for(200ms);  // the rest arrive and park; decides nothing
  std::thread stop([&] { (void)engine.shutdown(30s); });
  std::this_thread::sleep_for(100ms);  // a parked delivery meets the shutdown; decides nothing
  release = true;
  stop.join();
  wire::Connection reader = raw("reader");
  EXPECT_TRUE(eventually([&] { return reader.queue_depth("rail.q.backlog") >= kJobs - 1; }, 30s))
      << "the parked deliveries did not go back to the broker";
}

// After the consumer sat idle past two heartbeats, a failed attempt's retry is published on a
// connection the relay kept alive: no reconnect, so the delivery a handler still holds is not
// handed back and run twice.
TEST_F(AmqpConsumer, ARetryAfterAnIdleSpellRunsNoHeldJobTwice) {
  Engine engine;
  auto local = engine.declare_queue<std::string>("idle", {});
  std::atomic<bool> release{false};
  std::atomic<int> holds{0}, flaky{0};
  test::ReleaseOnExit release_on_exit{release};
  local.process({.concurrency = 2}, [&](Job<std::string>& j) {
    if (j.data() == "hold") {
      holds.fetch_add(1);
      (void)eventually([&] { return release.load(); }, 120s);
      return Outcome::done();
    }
    return flaky.fetch_add(1) == 0 ? Outcome::retry("first try fails") : Outcome::done();
  });
  amqp::Consumer<std::string> consumer(options(), engine, local, {}, kBrokerRetries);
  amqp::Producer<std::string> producer(options(), "idle");
  ASSERT_EQ(producer.add("job", "hold").status, AddStatus::added);
  ASSERT_TRUE(eventually([&] { return holds.load() == 1; }));
  std::this_thread::sleep_for(7s);  // idle past two 2 s heartbeats (the condition under test)
  JobOptions o;
  o.max_attempts = 2;
  ASSERT_EQ(producer.add("job", "flaky", o).status, AddStatus::added);
  ASSERT_TRUE(eventually([&] { return flaky.load() == 2; }, 60s)) << "the retry never ran";
  release.store(true);
  ASSERT_TRUE(eventually([&] { return local.counts().completed == 2; }, 60s));
  EXPECT_EQ(holds.load(), 1) << "the held delivery was handed back and ran again";
}

TEST_F(AmqpConsumer, APermanentFailureIsDeadLetteredAtOnce) {
  Engine engine;
  auto local = engine.declare_queue<std::string>("cards", {});
  std::atomic<int> runs{0};
  local.process({.concurrency = 1}, [&](Job<std::string>&) {
    runs.fetch_add(1);
    return Outcome::fail("card stolen");
  });
  amqp::Consumer<std::string> consumer(options(), engine, local);
  amqp::Producer<std::string> producer(options(), "cards");
  JobOptions o;
  o.max_attempts = 5;
  ASSERT_EQ(producer.add("charge", "4111", o).status, AddStatus::added);
  wire::Connection c = raw("reader");
  ASSERT_TRUE(eventually([&] { return c.queue_depth("rail.dlq.cards") == 1; }, 60s));
  EXPECT_EQ(runs.load(), 1);
}

// A queue deleted under a consumer: the broker cancels the consumer (consumer_cancel_notify),
// which reconnects, declares the queue again and consumes the adds that come after.
TEST_F(AmqpConsumer, AQueueDeletedUnderTheConsumerIsDeclaredAgainAndConsumed) {
  Engine engine;
  auto local = engine.declare_queue<std::string>("reindex", {});
  std::atomic<int> ran{0};
  local.process({.concurrency = 1}, [&](Job<std::string>&) { ran.fetch_add(1); });
  amqp::Consumer<std::string> consumer(options(), engine, local);
  wire::Connection admin = raw("admin");
  admin.delete_queue("rail.q.reindex");
  // Back once the consumer saw the cancel and declared it again; found by a passive declare.
  ASSERT_TRUE(eventually(
      [&] {
        try {
          return raw("reader").queue_state("rail.q.reindex").consumers == 1;
        } catch (const Error&) {
          return false;
        }
      },
      60s))
      << "the consumer never came back to the queue";
  amqp::Producer<std::string> producer(options(), "reindex");
  ASSERT_EQ(producer.add("doc", "42").status, AddStatus::added);
  ASSERT_TRUE(eventually([&] { return ran.load() == 1; }, 60s));
}

TEST_F(AmqpConsumer, ABodyItsCodecCannotReadIsDeadLetteredUnrun) {
  Engine engine;
  auto local = engine.declare_queue<std::string>("mixed", {});
  std::atomic<int> runs{0};
  local.process({.concurrency = 1}, [&](Job<std::string>&) { runs.fetch_add(1); });
  amqp::Consumer<std::string> consumer(options(), engine, local);
  // Another codec's message on the same queue (a producer of another payload type).
  amqp::Producer<std::vector<std::uint8_t>> other(options(), "mixed");
  ASSERT_EQ(other.add("blob", std::vector<std::uint8_t>{1, 2, 3}).status, AddStatus::added);
  wire::Connection c = raw("reader");
  ASSERT_TRUE(eventually([&] { return c.queue_depth("rail.dlq.mixed") == 1; }, 60s));
  EXPECT_EQ(runs.load(), 0);
  c.consume("rail.dlq.mixed", 1);
  const std::optional<wire::Delivery> d = c.next(10s);
  ASSERT_TRUE(d);
  EXPECT_EQ(std::get<std::string>(*wire::field(d->headers, "x-rail-reason")), "codec_mismatch");
}

}  // namespace
}  // namespace rail
