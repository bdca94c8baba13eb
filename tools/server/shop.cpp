// Shop (shop.hpp): the queues, the downstream and the simulated gateway's handlers.
#include "server/shop.hpp"

#include <chrono>
#include <random>
#include <thread>

namespace rail::server {
namespace {

using namespace std::chrono_literals;

/// spend(d, work): a gateway call's time, waited or burnt.
void spend(Duration d, Work work) {
  if (work == Work::sleep) {
    std::this_thread::sleep_for(d);
    return;
  }
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
  }
}

QueueOptions payments_options(const ShopOptions& o) {
  QueueOptions q;
  q.capacity = o.capacity;
  q.downstream = "payments-gateway";
  q.defaults.max_attempts = 4;
  q.defaults.backoff = Backoff::exponential(50ms);
  q.visibility_timeout = 10s;
  q.dlq.alert_depth = 100;
  q.dlq.alert_age = 1min;  // a dead letter nobody handled for a minute pages someone
  return q;
}

/// with_gateway(engine, o): the engine, with the payments gateway declared (before the queue that
/// names it).
Engine& with_gateway(Engine& engine, const ShopOptions& o) {
  (void)engine.declare_downstream(
      "payments-gateway",
      DownstreamOptions{.concurrency = o.gateway_concurrency,
                        .rate = RateLimit::token_bucket(o.gateway_rate, 1s, o.gateway_rate)});
  return engine;
}

}  // namespace

Shop::Shop(const ShopOptions& options)
    : options_(options),
      engine_(EngineOptions{}),
      payments_(with_gateway(engine_, options)
                    .declare_queue<Order>("payments", payments_options(options))),
      emails_(engine_.declare_queue<Order>("emails", QueueOptions{.capacity = options.capacity})) {
  payments_.process(WorkerOptions{.concurrency = options.workers},
                    [this](Job<Order>& job) { return charge(job); });
  emails_.process(WorkerOptions{.concurrency = 1}, [](Job<Order>&) {
    std::this_thread::sleep_for(200us);  // an email API's call
    return Outcome::done();
  });
}

Shop::~Shop() {
  (void)engine_.shutdown(5s);
}

AddReceipt Shop::add_order(std::string customer, std::int64_t amount_cents,
                           std::string_view label) {
  Order order{next_order_.fetch_add(1, std::memory_order_relaxed), std::move(customer),
              amount_cents};
  const std::string name = label.empty() ? "charge" : "charge:" + std::string(label);
  return payments_.add(name, std::move(order));
}

Outcome Shop::charge(Job<Order>& job) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  // A real gateway call would send this attempt's span as its own traceparent header, so the
  // gateway's spans join the trace of the request that added the order.
  const std::string traceparent =
      job.trace().valid() ? job.trace().attempt.traceparent() : std::string();
  (void)traceparent;
  spend(options_.gateway_latency, options_.work);
  if (job.data().amount_cents % 100 == 13)
    return Outcome::fail("card declined (amount ends in 13)");
  if (std::uniform_real_distribution<double>(0, 1)(rng) < options_.timeout_rate)
    return Outcome::retry("payments gateway timed out");
  const auto receipt = emails_.add("receipt", job.data());
  (void)receipt;  // a full email queue loses a receipt, not a charge: the demo accepts that
  return Outcome::done();
}

}  // namespace rail::server
