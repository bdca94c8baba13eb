// FIFO groups over a real broker (one per test): a group's jobs go to its partition queue, which
// one process takes at a time; each group's jobs start one at a time in add order, their retries
// holding the group in place, also when the process that took the partitions goes and another
// takes them over (duplicates only among the jobs it had not settled). A group with a delay, or
// on a queue without partitions, is refused by name; so is a process that declares the queue
// with another partition count.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "rail/amqp.hpp"
#include "rail/rail.hpp"
#include "support/broker_test.hpp"
#include "support/eventually.hpp"
#include "support/release_on_exit.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;
using test::eventually;

/// GroupLog: each group's job starts and completions across processes, and any overlap.
struct GroupLog {
  std::mutex mu;
  std::map<std::string, std::vector<int>> completed;  // each group's completions, in order
  std::map<std::string, int> running;                 // each group's handlers running now
  bool overlap = false;
  std::atomic<int> completions{0};

  Outcome run(Job<std::string>& j, std::atomic<int>& here) {
    const std::string& body = j.data();  // "group:seq"
    const std::string group = body.substr(0, body.find(':'));
    const int seq = std::stoi(body.substr(body.find(':') + 1));
    {
      const std::lock_guard lock(mu);
      if (++running[group] > 1) overlap = true;
    }
    std::this_thread::sleep_for(2ms);
    // Every seventh job fails its first attempt: its retry must keep the group's place.
    const bool fail = seq % 7 == 3 && j.attempt() == 1;
    const std::lock_guard lock(mu);
    --running[group];
    if (fail) return Outcome::retry("flaky");
    completed[group].push_back(seq);
    completions.fetch_add(1);
    here.fetch_add(1);
    return Outcome::done();
  }
  /// in_order(group, n): its jobs 0 .. n-1 first completed in that order (a repeat after the
  /// failover may follow, but never before the next job's first completion).
  bool in_order(const std::string& group, int n) {
    const std::lock_guard lock(mu);
    int next = 0;
    for (const int seq : completed[group]) {
      if (seq == next)
        ++next;
      else if (seq > next)
        return false;  // a later job before this one
    }
    return next == n;
  }
};

using AmqpGroups = test::BrokerTest;

TEST_F(AmqpGroups, AGroupsJobsRunInAddOrderAcrossAFailoverBetweenProcesses) {
  constexpr int kGroups = 6, kPerGroup = 30;
  GroupLog log;
  std::atomic<int> on_first{0}, on_second{0};
  QueueOptions q;
  // Every job waits in its partition before any process takes one: the first process cannot
  // finish them all before it goes, however slow the adds (a sanitized build) are.
  amqp::Producer<std::string> producer(options(), "orders");
  for (int seq = 0; seq < kPerGroup; ++seq)
    for (int g = 0; g < kGroups; ++g) {
      JobOptions o;
      o.group = "customer-" + std::to_string(g);
      o.max_attempts = 3;
      o.backoff = Backoff::fixed(20ms);
      ASSERT_EQ(producer.add("charge", o.group + ":" + std::to_string(seq), o).status,
                AddStatus::added);
    }
  std::atomic<bool> let_go{false};  // read by the first's handlers until its engine joined them
  std::optional<Engine> first_engine(std::in_place);
  test::ReleaseOnExit release{let_go};  // destroyed first: a held handler ends before the engine
  auto first_local = first_engine->declare_queue<std::string>("orders", q);
  // The first process takes a third of the jobs, then holds until the test pauses it: a slow
  // test thread (a sanitized build) cannot let it finish them all.
  first_local.process({.concurrency = 4}, [&](Job<std::string>& j) {
    while (on_first.load() >= kGroups * kPerGroup / 3 && !let_go.load())
      std::this_thread::sleep_for(1ms);
    return log.run(j, on_first);
  });
  // The first to subscribe is each partition's active consumer: this process takes every group.
  std::optional<amqp::Consumer<std::string>> first(std::in_place, options(), *first_engine,
                                                   first_local);
  Engine second_engine;
  auto second_local = second_engine.declare_queue<std::string>("orders", q);
  second_local.process({.concurrency = 4},
                       [&](Job<std::string>& j) { return log.run(j, on_second); });
  amqp::Consumer<std::string> second(options(), second_engine, second_local);

  ASSERT_TRUE(eventually([&] { return on_first.load() >= kGroups * kPerGroup / 3; }, 60s));
  first_local.pause();  // no job of its starts any more
  let_go = true;
  // The first process goes: no job of its starts any more (running handlers finish), its
  // engine stops with the waiting jobs unsettled, then its connections close and the broker
  // hands the partitions, those jobs in their places, on.
  ASSERT_TRUE(first_local.pause_and_wait(30s));
  (void)first_engine->shutdown(10s);
  first.reset();
  first_engine.reset();
  const bool all = eventually(
      [&] {
        for (int g = 0; g < kGroups; ++g)
          if (!log.in_order("customer-" + std::to_string(g), kPerGroup)) return false;
        return true;
      },
      120s);
  const std::lock_guard lock(log.mu);
  for (int g = 0; g < kGroups; ++g) {
    std::string seqs;
    for (const int s : log.completed["customer-" + std::to_string(g)])
      seqs += std::to_string(s) + " ";
    EXPECT_TRUE(all) << "customer-" << g << " completed out of order or not at all: " << seqs;
  }
  EXPECT_FALSE(log.overlap) << "two jobs of one group ran at once";
  EXPECT_GT(on_first.load(), 0);
  EXPECT_GT(on_second.load(), 0) << "the partitions were not handed on";
}

TEST_F(AmqpGroups, AGroupWithADelayOrWithoutPartitionsIsRefusedByName) {
  amqp::Producer<std::string> producer(options(), "refusals");
  JobOptions o;
  o.group = "customer-1";
  o.delay = 1s;
  try {
    (void)producer.add("x", "y", o);
    ADD_FAILURE() << "a delayed grouped add was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find("JobOptions.delay"), std::string::npos) << e.what();
  }
  amqp::Producer<std::string> flat(options(), "flat",
                                   {.max_length = 100, .delivery_limit = 20, .partitions = 0});
  o.delay = {};
  try {
    (void)flat.add("x", "y", o);
    ADD_FAILURE() << "a grouped add to a queue without partitions was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find("partitions"), std::string::npos) << e.what();
  }
}

// Every process must declare a queue with the same partitions: one that declares another count
// is refused at once, naming the option, rather than sending a group's jobs to another partition.
TEST_F(AmqpGroups, AProcessDeclaringAnotherPartitionCountIsRefusedNamingIt) {
  amqp::Producer<std::string> eight(options(), "shaped", {.partitions = 8});
  try {
    amqp::Producer<std::string> four(options(), "shaped", {.partitions = 4});
    ADD_FAILURE() << "a second partition count for the same queue was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::broker);
    const std::string why = e.what();
    EXPECT_NE(why.find("BrokerQueueOptions::partitions"), std::string::npos) << why;
    EXPECT_NE(why.find("partitions=8"), std::string::npos) << "the broker's count: " << why;
  }
  amqp::Producer<std::string> again(options(), "shaped", {.partitions = 8});  // the same: fine
  EXPECT_EQ(again.add("x", "y").status, AddStatus::added);
}

}  // namespace
}  // namespace rail
