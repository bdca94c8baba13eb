#include "orders/orders_scenario.hpp"

#include <bit>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <thread>

namespace rail::orders {
namespace {

using namespace std::chrono_literals;

}  // namespace

JobOptions retry_policy(Scenario s) {
  JobOptions o;
  o.max_attempts = 3;  // SQS: maxReceiveCount 3
  // SQS has no backoff: an undeleted message reappears when its visibility timeout (2 s) ends.
  o.backoff = s == Scenario::bullmq ? Backoff::exponential(500ms) : Backoff::fixed(2000ms);
  return o;
}

namespace {

constexpr Duration kSqsVisibility = 2s;
constexpr Duration kSqsOverrun = 3s;

}  // namespace

Scenario parse_scenario(std::string_view name) {
  if (name == "bullmq") return Scenario::bullmq;
  if (name == "rabbitmq") return Scenario::rabbitmq;
  if (name == "sqs") return Scenario::sqs;
  throw Error(ErrorCode::invalid_option,
              "scenario '" + std::string(name) + "' is unknown; expected bullmq, rabbitmq or sqs");
}

OrdersQueue declare(Engine& engine, Scenario scenario, const std::string& dlq_journal) {
  QueueOptions q;
  q.dlq.journal.path = dlq_journal;
  q.capacity = 1024;
  q.defaults = retry_policy(scenario);
  if (scenario == Scenario::sqs) {
    q.visibility_timeout = kSqsVisibility;
    q.stall_policy = StallPolicy::count_as_attempt;  // maxReceiveCount: every receive counts
  }
  // With a journal, the declaration that checks at compile time that Order has a codec.
  if (!dlq_journal.empty()) return engine.declare_journaled_queue<Order, Receipt>("orders", q);
  return engine.declare_queue<Order, Receipt>("orders", q);
}

void start_worker(OrdersQueue& queue, Scenario scenario, ManualClock* manual) {
  std::uint32_t concurrency = scenario == Scenario::sqs ? 3 : 1;
  queue.process(WorkerOptions{.concurrency = concurrency},
                [scenario, manual](Job<Order>& job) -> Result<Receipt> {
                  const Order& o = job.data();
                  if (scenario == Scenario::sqs && o.order_id == "order-3") {
                    // Overruns its lease every time: the outcome arrives after the job was
                    // redelivered and is fenced (a late_outcome event), never completing the job.
                    if (manual) {
                      while (manual->now() - job.started_at() < kSqsOverrun)
                        manual->advance(10ms);
                    } else {
                      std::this_thread::sleep_for(kSqsOverrun);
                    }
                    return Receipt{o.order_id, o.amount};
                  }
                  if (o.fail_times > 0 && static_cast<int>(job.failed_attempts()) < o.fail_times) {
                    // A thrown exception is a retryable failure carrying what(), like a rejected
                    // promise.
                    throw std::runtime_error("Simulated payment gateway timeout (attempt " +
                                             std::to_string(job.attempt()) + ")");
                  }
                  return Receipt{o.order_id, o.amount};
                });
}

std::vector<JobHandle<Receipt>> add_orders(OrdersQueue& queue, Scenario scenario) {
  std::vector<JobHandle<Receipt>> ids;
  ids.push_back(queue.add_tracked("charge-card", Order{"order-1", 49.99, 0}));
  ids.push_back(queue.add_tracked("charge-card", Order{"order-2", 19.99, 2}));
  ids.push_back(queue.add_tracked("charge-card", Order{"order-3", 99.00, 99}));
  JobOptions email = retry_policy(scenario);
  email.dedup.id = scenario == Scenario::bullmq ? "order-4-email" : "order-4-confirmation";
  if (scenario == Scenario::sqs) email.dedup.ttl = 5min;  // SQS FIFO's deduplication interval
  ids.push_back(queue.add_tracked("send-confirmation-email", Order{"order-4", 0, 0}, email));
  ids.push_back(queue.add_tracked("send-confirmation-email", Order{"order-4", 0, 0}, email));
  return ids;
}

void settle(Engine& engine, OrdersQueue& queue, ManualClock* manual) {
  auto done = [&] {
    QueueCounts c = queue.counts();
    // Ended, and no overrunning handler still running (its late outcome is part of the story).
    return c.completed + c.dead_lettered == c.added && c.active == 0;
  };
  if (manual && engine.mode() == Mode::inlined) {
    engine.run_until_idle();
    while (!done()) {
      auto next = engine.next_timer_in();
      if (!next) break;
      manual->advance(*next);
      engine.run_until_idle();
    }
    return;
  }
  while (!done())
    std::this_thread::sleep_for(1ms);
}

std::ostream& operator<<(std::ostream& out, const Receipt& r) {
  char charged[32];
  std::snprintf(charged, sizeof charged, "%g", r.charged);
  return out << "{ charged: " << charged << ", orderId: '" << r.order_id << "' }";
}

void inspect_dlq(OrdersQueue& queue, std::ostream& out) {
  for (const auto& e : queue.dlq().list()) {
    char amount[32];
    std::snprintf(amount, sizeof amount, "%g", e.data.amount);
    out << "🔎 DLQ INSPECTOR received permanently-failed job (original id " << e.id << ")\n"
        << "  DLQ entry: {\"orderId\":\"" << e.data.order_id << "\",\"amount\":" << amount
        << ",\"failTimes\":" << e.data.fail_times << "} reason=" << to_string(e.reason)
        << " attempts=" << e.failed_attempts << "/" << e.max_attempts << "\n";
    for (const auto& err : e.errors)
      out << "    attempt " << err.attempt << ": " << err.message << "\n";
  }
}

Summary summarize(OrdersQueue& queue) {
  return queue.counts();
}

}  // namespace rail::orders

void rail::JournalCodec<rail::orders::Order>::encode(const rail::orders::Order& o,
                                                     std::string& out) {
  auto put = [&out](std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i)
      out.push_back(static_cast<char>(v >> (8 * i)));
  };
  put(o.order_id.size(), 4);
  out.append(o.order_id);
  put(std::bit_cast<std::uint64_t>(o.amount), 8);
  put(static_cast<std::uint32_t>(o.fail_times), 4);
}

rail::orders::Order rail::JournalCodec<rail::orders::Order>::decode(
    std::span<const std::byte> bytes) {
  std::size_t at = 0;
  auto get = [&](int n) {
    if (bytes.size() - at < static_cast<std::size_t>(n))
      throw std::length_error("Order payload ends early; expected " + std::to_string(n) +
                              " more bytes at byte " + std::to_string(at));
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i)
      v |= std::uint64_t(std::to_integer<std::uint8_t>(bytes[at + i])) << (8 * i);
    at += static_cast<std::size_t>(n);
    return v;
  };
  rail::orders::Order o;
  const auto id_len = static_cast<std::size_t>(get(4));
  if (id_len > bytes.size() - at)
    throw std::length_error("Order id of " + std::to_string(id_len) +
                            " bytes overruns the payload");
  o.order_id.assign(reinterpret_cast<const char*>(bytes.data() + at), id_len);
  at += id_len;
  o.amount = std::bit_cast<double>(get(8));
  o.fail_times = static_cast<int>(static_cast<std::uint32_t>(get(4)));
  if (at != bytes.size()) throw std::length_error("Order payload has trailing bytes");
  return o;
}
