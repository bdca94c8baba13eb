// rail::amqp::Producer against a real broker (tools/rabbitmq/local-broker, one per test): an add
// is confirmed and carries its job (name, id, codec, attempt budget) in the message; a delayed
// add goes through the delay cascade and arrives no earlier than its delay; a bulk add is
// confirmed as a whole; a full broker queue answers `full`; options a broker queue cannot carry
// and a queue redeclared with other arguments are refused by name; an add made while the broker
// is down is confirmed once it is back. Without a broker: the cascade's delay rounding and
// routing keys.
#include <gtest/gtest.h>

#include <bit>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "rail/amqp.hpp"
#include "rail/detail/amqp_connection.hpp"
#include "rail/detail/amqp_topology.hpp"
#include "rail/error.hpp"
#include "support/amqp_reader.hpp"
#include "support/broker_test.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;
namespace wire = detail::amqp;

TEST(AmqpDelays, ADelayIsRoundedUpToEightSignificantBitsNeverDown) {
  for (std::uint64_t ms = 0; ms < 256; ++ms)
    EXPECT_EQ(wire::rounded_delay_ms(ms), ms) << "exact below 256 ms";
  for (std::uint64_t ms : std::vector<std::uint64_t>{256, 257, 511, 1000, 1001, 30'000, 86'400'000,
                                                     wire::kMaxDelayMs - 1, wire::kMaxDelayMs}) {
    const std::uint64_t d = wire::rounded_delay_ms(ms);
    EXPECT_GE(d, ms) << "early";
    EXPECT_LE(d - ms, ms / 128) << "more than 1/128 late for " << ms;
    EXPECT_LE(std::popcount(d), 8) << "more than 8 hops for " << ms;
  }
  EXPECT_EQ(wire::rounded_delay_ms(wire::kMaxDelayMs + 5), wire::kMaxDelayMs);
  EXPECT_EQ(std::popcount(wire::kMaxDelayMs), 8);
}

TEST(AmqpDelays, TheRoutingKeySpellsTheDelayInBinaryThenTheQueue) {
  std::string zeros;
  for (int i = 0; i < 29; ++i)
    zeros += "0.";
  EXPECT_EQ(wire::delay_route(5, "orders.eu"), zeros + "1.0.1.orders.eu");
  EXPECT_EQ(wire::delay_route(0, "q"), zeros + "0.0.0.q");
  // 1000 ms rounds to itself (0b1111101000: 7 significant bits set within 8).
  EXPECT_EQ(wire::delay_route(1000, "q"), zeros.substr(0, 2 * 22) + "1.1.1.1.1.0.1.0.0.0.q");
}

TEST(AmqpDelays, AQueueNameTheCascadeCannotRouteIsRefusedByName) {
  for (const std::string& bad :
       {std::string(), std::string("a..b"), std::string("a.*"), std::string("#.orders"),
        std::string(".x"), std::string(192, 'q')}) {
    try {
      wire::check_queue_name(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_option);
      EXPECT_NE(std::string(e.what()).find("broker queue name"), std::string::npos) << e.what();
    }
  }
  for (const std::string& good :
       {std::string("orders"), std::string("orders.eu"), std::string("a*b"), std::string(191, 'q')})
    EXPECT_NO_THROW(wire::check_queue_name(good)) << good;
}

using AmqpProducer = test::BrokerTest;

TEST_F(AmqpProducer, AnAddIsConfirmedAndCarriesItsJobInTheMessage) {
  amqp::Producer<std::string> orders(options(), "orders");
  JobOptions o;
  o.max_attempts = 3;
  o.backoff = Backoff::exponential(100ms);
  const AddReceipt r = orders.add("charge", "order-1", o);
  ASSERT_EQ(r.status, AddStatus::added);
  wire::Connection c = raw("reader");
  EXPECT_EQ(c.queue_depth("rail.q.orders"), 1u) << "confirmed: stored before add() returned";
  c.consume("rail.q.orders", 1);
  const std::optional<wire::Delivery> d = c.next(10s);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->body, "order-1");
  EXPECT_EQ(d->type, "charge");
  EXPECT_EQ(d->message_id, std::to_string(r.id));
  EXPECT_EQ(std::get<std::string>(*wire::field(d->headers, "x-rail-codec")), "std::string");
  EXPECT_EQ(std::get<std::int64_t>(*wire::field(d->headers, "x-rail-attempt")), 0);
  EXPECT_EQ(std::get<std::int64_t>(*wire::field(d->headers, "x-rail-max-attempts")), 3);
  EXPECT_NE(wire::field(d->headers, "x-rail-backoff"), nullptr);
  c.ack(d->tag);
}

TEST_F(AmqpProducer, ADelayedAddArrivesNoEarlierThanItsDelay) {
  amqp::Producer<std::string> later(options(), "later");
  wire::Connection c = raw("reader");
  c.consume("rail.q.later", 4);
  for (Duration delay : {Duration(300ms), Duration(1300ms)}) {
    const auto before = std::chrono::steady_clock::now();
    JobOptions o;
    o.delay = delay;
    ASSERT_EQ(later.add("reminder", "r", o).status, AddStatus::added);
    EXPECT_EQ(c.queue_depth("rail.q.later"), 0u) << "a delayed job waits in the cascade";
    const std::optional<wire::Delivery> d = c.next(30s);
    ASSERT_TRUE(d) << "the delayed job never arrived";
    const auto waited = std::chrono::steady_clock::now() - before;
    EXPECT_GE(waited, delay) << "arrived early";
    c.ack(d->tag);
  }
}

TEST_F(AmqpProducer, ABulkAddIsConfirmedAsAWhole) {
  amqp::Producer<std::string> bulk(options(), "bulk");
  std::vector<std::string> payloads;
  for (int i = 0; i < 1000; ++i)
    payloads.push_back(std::string(1, 'p').append(std::to_string(i)));
  const BulkAddReceipt r = bulk.add_bulk("import", payloads);
  EXPECT_EQ(r.status, AddStatus::added);
  EXPECT_EQ(r.count, 1000u);
  EXPECT_EQ(raw("reader").queue_depth("rail.q.bulk"), 1000u);
}

TEST_F(AmqpProducer, AFullBrokerQueueAnswersFull) {
  amqp::Producer<std::string> small(options(), "small", {.max_length = 3, .delivery_limit = 20});
  int added = 0, full = 0;
  for (int i = 0; i < 6; ++i) {
    const AddStatus s = small.add("job", "x").status;
    (s == AddStatus::added ? added : full)++;
    if (full > 0) {
      EXPECT_EQ(s, AddStatus::full) << "an add taken after one was refused";
    }
  }
  EXPECT_GE(added, 3);
  EXPECT_LE(added, 4) << "a quorum queue takes one past its length at most";
  EXPECT_EQ(added + full, 6);
}

TEST_F(AmqpProducer, OptionsABrokerQueueCannotCarryAreRefusedByName) {
  amqp::Producer<std::string> q(options(), "strict");
  auto refused = [&](const char* field, const JobOptions& o) {
    try {
      (void)q.add("job", "x", o);
      ADD_FAILURE() << field << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_option);
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  JobOptions dedup;
  dedup.dedup.id = "k";
  refused("dedup.id", dedup);
  JobOptions tenant;
  tenant.tenant = "acme";
  refused("tenant", tenant);
  JobOptions priority;
  priority.priority = 1;
  refused("priority", priority);
  JobOptions far;
  far.delay = std::chrono::hours(24 * 60);
  refused("delay", far);
  JobOptions never;
  never.delay = Duration::max();
  refused("delay", never);
  amqp::BrokerOptions fast = options();
  fast.heartbeat = 500ms;
  try {
    amqp::Producer<std::string> bad(fast, "strict");
    ADD_FAILURE() << "a heartbeat of 500 ms was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find("heartbeat"), std::string::npos) << e.what();
  }
  EXPECT_EQ(raw("reader").queue_depth("rail.q.strict"), 0u) << "a refused add stored nothing";
}

TEST_F(AmqpProducer, AQueueRedeclaredWithOtherArgumentsIsRefused) {
  amqp::Producer<std::string> first(options(), "fixed", {.max_length = 10, .delivery_limit = 20});
  try {
    amqp::Producer<std::string> second(options(), "fixed",
                                       {.max_length = 20, .delivery_limit = 20});
    FAIL() << "a second declaration with another max_length was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::broker);
    EXPECT_NE(std::string(e.what()).find("rail.q.fixed"), std::string::npos) << e.what();
  }
}

TEST_F(AmqpProducer, AnAddWhileTheBrokerIsDownIsConfirmedOnceItIsBack) {
  amqp::BrokerOptions o = options();
  o.confirm_timeout = 120s;
  amqp::Producer<std::string> q(o, "resilient");
  ASSERT_EQ(q.add("job", "before").status, AddStatus::added);
  broker_
      ->restart();  // a clean restart: the queue's registration is saved (see the connection test)
  broker_->kill();
  std::thread revive([&] {
    std::this_thread::sleep_for(1s);  // the add below must find it down first; decides nothing
    broker_->start();
  });
  const AddReceipt r = q.add("job", "during");
  revive.join();
  EXPECT_EQ(r.status, AddStatus::added);
  wire::Connection c = raw("reader");
  EXPECT_EQ(test::take_bodies(c, "rail.q.resilient", 2),
            (std::vector<std::string>{"before", "during"}));
}

}  // namespace
}  // namespace rail
