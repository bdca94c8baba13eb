// BrokerTest: the fixture of the rail::amqp tests that need a broker: a LocalBroker of their own
// per test (skipped where rabbitmq-server is not installed), BrokerOptions for it, and a raw
// connection to look at its queues.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>

#include "rail/amqp.hpp"
#include "rail/detail/amqp_connection.hpp"
#include "support/local_broker.hpp"

namespace rail::test {

class BrokerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!LocalBroker::available()) GTEST_SKIP() << "rabbitmq-server is not installed";
    broker_ = std::make_unique<LocalBroker>();
  }
  [[nodiscard]] amqp::BrokerOptions options() const {
    amqp::BrokerOptions o;
    o.url = broker_->url();
    o.heartbeat = std::chrono::seconds(2);
    return o;
  }
  [[nodiscard]] detail::amqp::Connection raw(const char* name) const {
    return detail::amqp::Connection(detail::amqp::parse_url(broker_->url()),
                                    std::chrono::seconds(2), name);
  }
  std::unique_ptr<LocalBroker> broker_;
};

}  // namespace rail::test
