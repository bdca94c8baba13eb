// orders_demo --broker: the seed's orders through a real broker (one per test). The handler
// sees the job's own attempt across the broker's retries, so order-2 completes on attempt 3 and
// order-3 dies after 3 attempts with each attempt's error; under the sqs scenario order-3's
// overrunning handler lapses its lease 3 times, each lapse going back through the broker, and it
// dies lease_expired with each late outcome fenced.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "orders/broker_scenario.hpp"
#include "support/broker_test.hpp"

namespace rail {
namespace {

struct OrdersBroker : test::BrokerTest {
  Engine engine;
  std::ostringstream log;
  orders::BrokerReport run(orders::Scenario scenario) {
    return orders::run_over_broker(engine, scenario, options().url, log);
  }
};

TEST_F(OrdersBroker, TheBullmqScenarioCountsTheBrokersAttemptsAndDeadLettersOrder3There) {
  const orders::BrokerReport r = run(orders::Scenario::bullmq);
  SCOPED_TRACE(log.str());
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.orders, 4u);
  EXPECT_EQ(r.local.completed, 3u) << "order-1, order-2 and order-4's email";
  EXPECT_EQ(r.local.forwarded, 4u) << "order-2's and order-3's first two attempts";
  ASSERT_EQ(r.dead.size(), 1u);
  const amqp::BrokerDeadLetter& d = r.dead[0];
  EXPECT_EQ(d.payload<orders::Order>().order_id, "order-3");
  EXPECT_EQ(d.reason, "attempts_exhausted");
  EXPECT_EQ(d.failed_attempts, 3u);
  EXPECT_EQ(d.max_attempts, 3u);
  ASSERT_EQ(d.errors.size(), 3u);
  for (std::uint32_t a = 1; a <= 3; ++a)
    EXPECT_EQ(d.errors[a - 1].message,
              "Simulated payment gateway timeout (attempt " + std::to_string(a) + ")")
        << "each attempt's number is the broker job's";
  EXPECT_NE(log.str().find("FORWARDED job"), std::string::npos);
  EXPECT_NE(log.str().find("BROKER DLQ INSPECTOR"), std::string::npos);
}

TEST_F(OrdersBroker, TheSqsScenarioHandsEachLapsedLeaseBackToTheBroker) {
  const orders::BrokerReport r = run(orders::Scenario::sqs);
  SCOPED_TRACE(log.str());
  EXPECT_TRUE(r.ok());
  ASSERT_EQ(r.dead.size(), 1u);
  EXPECT_EQ(r.dead[0].payload<orders::Order>().order_id, "order-3");
  EXPECT_EQ(r.dead[0].reason, "lease_expired");
  EXPECT_EQ(r.dead[0].failed_attempts, 3u) << "maxReceiveCount 3: every receive counts";
  EXPECT_EQ(r.local.stalled, 3u);
  EXPECT_EQ(r.local.late_outcomes, 3u) << "each overrun's outcome fenced";
  EXPECT_EQ(r.local.completed, 3u);
}

}  // namespace
}  // namespace rail
