// rail::amqp::DeadLetters: see include/rail/amqp.hpp.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>

#include "rail/amqp.hpp"
#include "rail/detail/amqp_headers.hpp"
#include "rail/detail/amqp_topology.hpp"
#include "rail/error.hpp"

namespace rail::amqp {
namespace wire = rail::detail::amqp;

struct DeadLetters::State {
  BrokerOptions broker;
  std::string queue;
  BrokerQueueOptions options;
  std::optional<wire::Connection> connection;

  wire::Connection& open() {
    if (!connection || !connection->ok()) {
      connection.reset();
      connection.emplace(wire::parse_url(broker.url), broker.heartbeat,
                         broker.name + " dead letters of " + queue);
    }
    return *connection;
  }
};

DeadLetters::DeadLetters(BrokerOptions broker, std::string queue, BrokerQueueOptions options)
    : state_(std::make_unique<State>()) {
  state_->options = options;
  rail::amqp::detail::check_broker(broker);
  state_->broker = std::move(broker);
  state_->queue = std::move(queue);
  (void)state_->open().queue_depth(wire::dlq_queue(state_->queue));  // declared by its queue
}

DeadLetters::~DeadLetters() = default;

std::uint32_t DeadLetters::depth() {
  try {
    return state_->open().queue_depth(wire::dlq_queue(state_->queue));
  } catch (const Error& e) {
    if (e.code() != ErrorCode::broker) throw;
    state_->connection.reset();  // closed while idle (no heartbeats without calls): once more
    return state_->open().queue_depth(wire::dlq_queue(state_->queue));
  }
}

std::vector<BrokerDeadLetter> DeadLetters::list(std::size_t max) {
  std::vector<BrokerDeadLetter> out;
  const std::string dlq = wire::dlq_queue(state_->queue);
  const std::uint32_t waiting = depth();
  const std::size_t wanted = std::min<std::size_t>(max, waiting);
  if (wanted == 0) return out;
  // A connection of its own: closing it hands every delivery it holds back to the DLQ, also
  // when this call throws half way.
  wire::Connection in(wire::parse_url(state_->broker.url), state_->broker.heartbeat,
                      state_->broker.name + " inspector of " + state_->queue);
  in.consume(dlq, static_cast<std::uint16_t>(std::min<std::size_t>(wanted, 65'535)));
  while (out.size() < wanted) {
    std::optional<wire::Delivery> d = in.next(state_->broker.confirm_timeout);
    if (!d) break;  // another process took the rest meanwhile
    BrokerDeadLetter e;
    e.id = std::strtoull(d->message_id.c_str(), nullptr, 10);
    e.name = d->type;
    e.reason = wire::header_text(d->headers, wire::kReasonHeader);
    if (e.reason.empty()) {
      // Dead-lettered by the broker itself: past the queue's x-delivery-limit (a job that
      // ended every process that took it), or refused as it was (a permanent refusal).
      const std::string broker_reason = wire::header_text(d->headers, "x-first-death-reason");
      e.reason = broker_reason == "delivery_limit" ? "crash_loop" : broker_reason;
    }
    e.failed_attempts = wire::header_count(d->headers, wire::kAttemptHeader, 0);
    e.max_attempts = wire::header_count(d->headers, wire::kMaxAttemptsHeader, 0);
    e.errors = wire::header_errors(d->headers, e.failed_attempts);
    e.error = wire::header_text(d->headers, wire::kErrorHeader);
    if (e.error.empty() && !e.errors.empty()) e.error = e.errors.back().message;
    e.body = std::move(d->body);
    out.push_back(std::move(e));
  }
  return out;  // `in` closes: the broker requeues what it delivered
}

std::size_t DeadLetters::redrive_all() {
  // Two connections: one consumes the DLQ, the other publishes with confirms (a channel in
  // confirm mode would mix the confirms with the deliveries).
  // Fresh connections for each call, dropped on every way out: a channel left in confirm mode
  // (or closed while idle) never serves the next call.
  state_->connection.reset();
  struct Drop {
    State& s;
    ~Drop() { s.connection.reset(); }
  } drop{*state_};
  wire::Connection& out = state_->open();
  const std::string dlq = wire::dlq_queue(state_->queue);
  const std::uint32_t waiting = out.queue_depth(dlq);
  if (waiting == 0) return 0;
  out.enable_confirms();
  wire::Connection in(wire::parse_url(state_->broker.url), state_->broker.heartbeat,
                      state_->broker.name + " redrive of " + state_->queue);
  in.consume(dlq, 64);
  std::size_t sent = 0;
  while (sent < waiting) {
    std::optional<wire::Delivery> d = in.next(state_->broker.confirm_timeout);
    if (!d) break;  // another process took the rest meanwhile
    wire::Fields headers;
    for (auto& [key, value] : d->headers)  // the job's own headers; its last round's go
      if (key != wire::kAttemptHeader && key != wire::kReasonHeader && key != wire::kErrorHeader &&
          key != wire::kDeliveriesHeader && key != wire::kStallsHeader &&
          key != wire::kPreviousDelayHeader && key.rfind("x-rail-error-", 0) != 0)
        headers.emplace_back(key, value);
    headers.emplace_back(wire::kAttemptHeader, std::int64_t{0});
    // A group's job goes back to its partition, behind the group's later jobs (a redrive is a
    // new life: its place is gone).
    const std::string group = wire::header_text(headers, wire::kGroupHeader);
    const std::string to =
        group.empty() || state_->options.partitions == 0
            ? wire::jobs_queue(state_->queue)
            : wire::partition_queue(state_->queue,
                                    wire::partition_of(group, state_->options.partitions));
    const std::uint64_t n = out.publish("", to,
                                        {.body = d->body,
                                         .type = d->type,
                                         .message_id = d->message_id,
                                         .timestamp = d->timestamp,
                                         .headers = &headers});
    if (!out.wait_confirms(n, state_->broker.confirm_timeout).empty()) {
      in.nack(d->tag, true);  // the queue is full: the dead letter stays
      throw Error(ErrorCode::capacity, "redrive_all: broker queue '" + to + "' is full; " +
                                           std::to_string(sent) +
                                           " dead letters were sent back before it");
    }
    in.ack(d->tag);
    ++sent;
  }
  return sent;
}

}  // namespace rail::amqp
