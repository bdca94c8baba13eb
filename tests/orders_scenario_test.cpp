// The seed's acceptance logs, replayed in virtual time: the exact delays and the final state.
#include "orders/orders_scenario.hpp"

#include <gtest/gtest.h>

#include <sstream>

#include "orders/downstreams_scenario.hpp"
#include "orders/fairness_scenario.hpp"
#include "orders/flow_scenario.hpp"

namespace rail::orders {
namespace {

using namespace std::chrono_literals;

struct Replay {
  ManualClock clock;
  Engine engine{EngineOptions{.clock = &clock, .mode = Mode::inlined}};
  std::vector<std::pair<EventKind, std::pair<JobId, Duration>>> trace;
  std::ostringstream log;

  explicit Replay(Scenario s) : queue_(nullptr) {
    engine.on_event([this](const Event& e) {
      trace.push_back({e.kind, {e.job_id, e.at.time_since_epoch()}});
    });
    engine.on_event(make_log_observer(log, clock));
    queue_ = std::make_unique<OrdersQueue>(declare(engine, s));
    results = add_orders(*queue_, s);
    start_worker(*queue_, s, &clock);
    settle(engine, *queue_, &clock);
  }
  std::vector<Duration> times(EventKind k, JobId id) const {
    std::vector<Duration> out;
    for (const auto& [kind, v] : trace)
      if (kind == k && v.first == id) out.push_back(v.second);
    return out;
  }
  OrdersQueue& queue() { return *queue_; }
  std::vector<JobHandle<Receipt>> results;

 private:
  std::unique_ptr<OrdersQueue> queue_;
};

TEST(OrdersScenario, BullmqOrder2CompletesOnThirdAttemptAfter500And1000ms) {
  Replay r(Scenario::bullmq);
  EXPECT_EQ(r.times(EventKind::started, 2), (std::vector<Duration>{0ms, 500ms, 1500ms}));
  EXPECT_EQ(r.times(EventKind::completed, 2), (std::vector<Duration>{1500ms}));
}

TEST(OrdersScenario, BullmqOrder3ExhaustsThreeAttemptsIntoTheDlq) {
  Replay r(Scenario::bullmq);
  EXPECT_EQ(r.times(EventKind::started, 3), (std::vector<Duration>{0ms, 500ms, 1500ms}));
  EXPECT_EQ(r.times(EventKind::dead_lettered, 3), (std::vector<Duration>{1500ms}));
  auto dlq = r.queue().dlq().list();
  ASSERT_EQ(dlq.size(), 1u);
  EXPECT_EQ(dlq[0].id, 3u);
  EXPECT_EQ(dlq[0].data.order_id, "order-3");
  EXPECT_EQ(dlq[0].errors.size(), 3u);
  EXPECT_EQ(dlq[0].errors[0].message, "Simulated payment gateway timeout (attempt 1)");
}

TEST(OrdersScenario, BullmqOrder4EmailAddedTwiceIsOneJob) {
  Replay r(Scenario::bullmq);
  ASSERT_EQ(r.results.size(), 5u);
  EXPECT_EQ(r.results[3].id(), 4u);
  EXPECT_EQ(r.results[4].id(), 4u);
  EXPECT_TRUE(r.results[4].added().duplicate());
  EXPECT_EQ(r.times(EventKind::completed, 4).size(), 1u);
  Summary s = summarize(r.queue());
  EXPECT_EQ(s.added, 4u);
  EXPECT_EQ(s.completed, 3u);
  EXPECT_EQ(s.failed_attempts, 5u);
  EXPECT_EQ(s.dead_lettered, 1u);
  EXPECT_EQ(s.deduplicated, 1u);
}

TEST(OrdersScenario, BullmqLogReadsLikeTheSeed) {
  Replay r(Scenario::bullmq);
  std::string log = r.log.str();
  EXPECT_NE(log.find("[00:00:00.500] WORKER picked up job 2 (charge-card) - attempt #2"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("FAILED job 2 attempt 1/3: Simulated payment gateway timeout (attempt 1) - "
                     "retry in 500ms"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("[00:00:01.500] ✅ COMPLETED job 2 (charge-card) after 3 attempt(s): "
                     "{ charged: 19.99, orderId: 'order-2' }"),
            std::string::npos)
      << log;
  // order-2's handle: its result, as the demo prints it at the end.
  const auto end = r.results[1].ended();
  ASSERT_TRUE(end && end->completed());
  EXPECT_EQ(end->result->order_id, "order-2");
  EXPECT_EQ(end->result->charged, 19.99);
  EXPECT_EQ(end->attempt, 3u);
  // order-3's handle: dead-lettered with every attempt's error; the duplicate's is order-4's.
  EXPECT_EQ(r.results[2].ended()->status, JobStatus::dead_lettered);
  EXPECT_EQ(r.results[2].ended()->errors.size(), 3u);
  EXPECT_EQ(r.results[4].ended()->result->order_id, "order-4");
  EXPECT_NE(log.find("💀 Job 3 exhausted all 3 attempts -> moving to DLQ"), std::string::npos);
  EXPECT_NE(log.find("DEDUP: add of send-confirmation-email with dedup id=order-4-email merged "
                     "into job 4"),
            std::string::npos);
}

TEST(OrdersScenario, RabbitmqRetriesEveryTwoSecondsAndDeadLettersOnThirdFailure) {
  Replay r(Scenario::rabbitmq);
  EXPECT_EQ(r.times(EventKind::started, 3), (std::vector<Duration>{0s, 2s, 4s}));
  EXPECT_EQ(r.times(EventKind::dead_lettered, 3), (std::vector<Duration>{4s}));
  EXPECT_EQ(r.times(EventKind::completed, 2), (std::vector<Duration>{4s}));
  EXPECT_TRUE(r.results[4].added().duplicate());
  EXPECT_EQ(summarize(r.queue()).deduplicated, 1u);
}

TEST(OrdersScenario, SqsOverrunningHandlerIsRedeliveredThenDeadLetteredWithLeaseExpired) {
  // Inline, the next delivery starts when the overrunning handler returns (one thread), so
  // deliveries are 3 s apart here; each lapse is still found at exactly 2 s into its delivery.
  Replay r(Scenario::sqs);
  EXPECT_EQ(r.times(EventKind::started, 3), (std::vector<Duration>{0s, 3s, 6s}));
  EXPECT_EQ(r.times(EventKind::stalled, 3), (std::vector<Duration>{2s, 5s, 8s}));
  EXPECT_EQ(r.times(EventKind::late_outcome, 3), (std::vector<Duration>{3s, 6s, 9s}));
  EXPECT_EQ(r.times(EventKind::dead_lettered, 3), (std::vector<Duration>{8s}));
  EXPECT_TRUE(r.times(EventKind::completed, 3).empty());  // no late outcome completed it
  auto dlq = r.queue().dlq().list();
  ASSERT_EQ(dlq.size(), 1u);
  EXPECT_EQ(dlq[0].reason, DeadLetterReason::lease_expired);
  EXPECT_EQ(dlq[0].failed_attempts, 3u);
  EXPECT_TRUE(r.results[4].added().duplicate());  // the FIFO case: one job for one dedup id
  Summary s = summarize(r.queue());
  EXPECT_EQ(s.deduplicated, 1u);
  EXPECT_EQ(s.stalled, 3u);
  EXPECT_EQ(s.late_outcomes, 3u);
  EXPECT_EQ(s.completed, 3u);
}

TEST(OrdersScenario, UnknownScenarioIsAClearError) {
  try {
    (void)parse_scenario("kafka");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find("kafka"), std::string::npos);
  }
}

}  // namespace
}  // namespace rail::orders

// Issue 14's demo: the payments gateway's quota holds (never more than 20 starts in any 1 s, the
// first included), its concurrency too, and payments finish while the email API hangs
// with only its 2 permitted handlers holding threads; then every email goes out.
TEST(DownstreamsScenario, RateLimitedPaymentsFinishWhileAStalledEmailApiWaitsWithoutThreads) {
  rail::Engine engine;
  std::ostringstream log;
  const auto r = rail::orders::run_downstreams(engine, &log);
  EXPECT_TRUE(r.ok()) << log.str();
  EXPECT_EQ(r.charged, 60u);
  EXPECT_EQ(r.mailed, 20u);
  EXPECT_TRUE(r.payments_done_before_email) << log.str();
  EXPECT_LE(r.max_in_window, r.bound_in_window) << log.str();
  EXPECT_LE(r.max_charges_in_flight, 3u);
  EXPECT_LE(r.mail_active_while_stalled, 2u);
  EXPECT_EQ(r.mail_waiting_while_stalled + r.mail_active_while_stalled, 20u);
  // 60 charges, at most 20 in any second: the 41st starts 2 s after the 1st at the earliest.
  ASSERT_EQ(r.charge_starts.size(), 60u);
  EXPECT_GE(r.charge_starts.back(), std::chrono::seconds(2)) << log.str();
}

// Issue 38's demo: customer-42's steps run in order through a retry, a small shop's order is
// not held back by a bulk importer's flood (its share of 16 jobs), and an express order starts
// next whatever waits.
TEST(FairnessScenario, PerCustomerOrderAPriorityLaneAndATenantThatCannotCrowdOutTheOthers) {
  rail::Engine engine;
  std::ostringstream log;
  const auto r = rail::orders::run_fairness(engine, &log);
  EXPECT_TRUE(r.ok()) << log.str();
  EXPECT_EQ(r.customer42, (std::vector<std::string>{"charge", "charge", "ship", "email"}));
  EXPECT_LE(r.small_shop_started_at, r.importer_share + 5) << log.str();
  EXPECT_LE(r.express_started_at, 5u) << log.str();
  EXPECT_EQ(r.completed, r.added);
}

// Issue 39's demo: an order as a flow (charge, then email and invoice, then close): the close
// step reads its three children's results; a declined charge dead-letters everything after it
// with dependency_failed, unrun.
TEST(FlowScenario, TheCloseStepReadsItsChildrensResultsAndADeclinedChargeStopsTheRest) {
  rail::Engine engine;
  std::ostringstream log;
  const auto r = rail::orders::run_flow(engine, &log);
  EXPECT_TRUE(r.ok()) << log.str();
  ASSERT_EQ(r.closed.size(), 3u) << log.str();
  EXPECT_NE(r.closed[0].find("receipt R-order-1"), std::string::npos) << log.str();
  EXPECT_NE(r.closed[1].find("email sent for order-1"), std::string::npos) << log.str();
  EXPECT_NE(r.closed[2].find("invoice INV-order-1"), std::string::npos) << log.str();
  EXPECT_EQ(r.dependency_failed, 3u) << log.str();
  EXPECT_NE(log.str().find("dependency_failed: child job"), std::string::npos) << log.str();
}
