// rail::amqp::broker_counts against a real broker: the jobs waiting in a queue and its
// partitions, its dead letters and its consumers, read from any process.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "rail/amqp.hpp"
#include "rail/rail.hpp"
#include "support/broker_test.hpp"
#include "support/eventually.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;
using test::eventually;

using AmqpCounts = test::BrokerTest;

TEST_F(AmqpCounts, TheBrokerCountsWhatWaitsWhatDiedAndWhoConsumes) {
  amqp::Producer<std::string> producer(options(), "billing");
  for (const char* body : {"a", "b", "bad"})
    ASSERT_EQ(producer.add("invoice", body).status, AddStatus::added);
  JobOptions grouped;
  grouped.group = "customer-7";
  for (const char* body : {"c", "d"})
    ASSERT_EQ(producer.add("invoice", body, grouped).status, AddStatus::added);
  amqp::BrokerCounts c = amqp::broker_counts(options(), "billing");
  EXPECT_EQ(c.waiting, 5u) << "three in the jobs queue, two in their group's partition";
  EXPECT_EQ(c.dead_lettered, 0u);
  EXPECT_EQ(c.consumers, 0u);

  Engine engine;
  auto local = engine.declare_queue<std::string>("billing", {});
  local.process({.concurrency = 2}, [](Job<std::string>& j) {
    return j.data() == "bad" ? Outcome::fail("no such customer") : Outcome::done();
  });
  amqp::Consumer<std::string> consumer(options(), engine, local);
  ASSERT_TRUE(eventually(
      [&] {
        c = amqp::broker_counts(options(), "billing");
        return c.waiting == 0 && c.dead_lettered == 1;
      },
      60s))
      << c.waiting << " waiting, " << c.dead_lettered << " dead-lettered";
  EXPECT_EQ(c.consumers, 1u);
  EXPECT_EQ(local.counts().completed, 4u) << "the local queue counts what ran in this process";
}

TEST_F(AmqpCounts, AQueueTheBrokerDoesNotHoldIsAnError) {
  try {
    (void)amqp::broker_counts(options(), "never-declared");
    ADD_FAILURE() << "counts of a queue that does not exist";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::broker);
    EXPECT_NE(std::string(e.what()).find("rail.q.never-declared"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace rail
