// The seed's orders scenarios, as one piece of code the demo program and the tests share.
//   bullmq:   order-1 succeeds; order-2 fails twice (attempts 3, exponential 500 ms) and completes
//             on attempt 3; order-3 exhausts 3 attempts and lands in the DLQ; order-4's
//             confirmation email is added twice under one dedup id and runs once.
//   rabbitmq: the same orders with the RabbitMQ retry-queue pattern: a fixed 2000 ms delay, the
//             attempt count carried with the job, DLQ on the 3rd failure, a duplicate dropped by
//             its dedup id.
//   sqs:      the SQS example: visibility timeout 2 s and a handler that overruns its lease on
//             order-3 every time (it returns only after 3 s), so order-3 is delivered with
//             receive counts 1, 2, 3 about 2 s apart, each overrun's late outcome is fenced, and
//             rail moves it to the DLQ after maxReceiveCount (attempts) 3; the FIFO case: the
//             same deduplication id sent twice leaves one job (a 5-minute window).
#pragma once

#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rail/rail.hpp"

namespace rail::orders {

enum class Scenario { bullmq, rabbitmq, sqs };

/// Order: the payload of every job in the scenario.
struct Order {
  std::string order_id;
  double amount = 0;
  int fail_times = 0;  // the handler fails this many attempts first (99: always)
};

/// Receipt: what the handler returns, as the seed's worker does
/// (`return { charged: job.data.amount, orderId: job.data.orderId }`).
struct Receipt {
  std::string order_id;
  double charged = 0;
};
/// Prints a receipt as the seed's log shows it: { charged: 19.99, orderId: 'order-2' }.
std::ostream& operator<<(std::ostream& out, const Receipt& r);

/// OrdersQueue: the scenario's queue: orders in, receipts out.
using OrdersQueue = Queue<Order, Receipt>;

}  // namespace rail::orders

/// The Order codec: how the demo's DLQ journal (orders_demo --dlq-journal FILE) stores an
/// Order, and an example of rail's payload customization point (rail/journal_codec.hpp).
/// Layout: u32 id length, the id's bytes, the amount's IEEE-754 bits (u64), fail_times (i32),
/// all little-endian.
template <>
struct rail::JournalCodec<rail::orders::Order> {
  static std::string name() { return "rail::orders::Order/v1"; }
  static void encode(const rail::orders::Order& o, std::string& out);
  static rail::orders::Order decode(std::span<const std::byte> bytes);
};

namespace rail::orders {

/// Summary: the final counts of the scenario's queue.
using Summary = QueueCounts;

/// parse_scenario("bullmq" | "rabbitmq" | "sqs"); throws rail::Error(invalid_option) otherwise.
Scenario parse_scenario(std::string_view name);

/// retry_policy(scenario): the jobs' options: 3 attempts, the scenario's backoff.
JobOptions retry_policy(Scenario scenario);

/// declare(engine, scenario, dlq_journal) declares the "orders" queue with the scenario's retry
/// policy; a non-empty `dlq_journal` is the path of its DLQ's journal (restored if it exists).
OrdersQueue declare(Engine& engine, Scenario scenario, const std::string& dlq_journal = {});

/// start_worker(queue, scenario, manual) starts the queue's worker: concurrency 1 like the
/// seed's single worker (3 for sqs, so a redelivery finds a free worker while the overrunning
/// handler still runs). Called after add_orders, so that both adds of order-4's email happen
/// before anything runs, as in the seed (a simple-mode dedup id is released when its job
/// completes; a fast worker could otherwise finish the email between the two adds). With a
/// ManualClock the sqs handler "takes 3 s" by advancing it in 10 ms steps instead of sleeping.
void start_worker(OrdersQueue& queue, Scenario scenario, ManualClock* manual = nullptr);

/// add_orders(queue, scenario) adds the four orders (order-4's email twice), each with a handle
/// on its job's end (the duplicate's is order-4's first job).
std::vector<JobHandle<Receipt>> add_orders(OrdersQueue& queue, Scenario scenario);

/// settle(engine, queue, manual) waits until every added job has ended. With a ManualClock and
/// an inline engine it replays the scenario in virtual time (advancing to each timer); otherwise
/// it polls the queue's counts in real time.
void settle(Engine& engine, OrdersQueue& queue, ManualClock* manual);

/// inspect_dlq(queue, out) prints every DLQ entry as the seed's DLQ inspector does.
void inspect_dlq(OrdersQueue& queue, std::ostream& out);

/// summarize(queue) reads the final counts.
Summary summarize(OrdersQueue& queue);

}  // namespace rail::orders
