// rail::amqp::Producer's untyped core: see include/rail/amqp.hpp.
#include <algorithm>
#include <chrono>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include "rail/amqp.hpp"
#include "rail/detail/amqp_headers.hpp"
#include "rail/detail/amqp_topology.hpp"
#include "rail/error.hpp"

namespace rail::amqp::detail {
namespace amqp = rail::detail::amqp;

struct Publisher::State {
  BrokerOptions broker;
  std::string queue;
  BrokerQueueOptions options;
  amqp::Address address;
  std::mutex mu;                               // one add on the connection at a time
  std::optional<amqp::Connection> connection;  // under mu; empty or dead: reconnect
  std::uint64_t next_id = 1;                   // under mu; the low 40 bits of the next id
  std::uint64_t node = 0;                      // this Producer's 24 random bits, shifted

  /// connect(): a connection with the queue's objects declared and confirms on.
  void connect() {
    connection.reset();
    connection.emplace(address, broker.heartbeat, broker.name + " producer of " + queue);
    amqp::declare_all(*connection, amqp::QueueTopology{.queue = queue,
                                                       .max_length = options.max_length,
                                                       .delivery_limit = options.delivery_limit,
                                                       .partitions = options.partitions});
    connection->enable_confirms();
  }
};

namespace {

std::int64_t to_ms(Duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

/// refused(o, field): Error(invalid_option) for an option a broker queue does not carry.
[[noreturn]] void refused(const std::string& queue, const char* field) {
  throw Error(ErrorCode::invalid_option,
              std::string("JobOptions.") + field + " is set on an add to broker queue '" + queue +
                  "'; it needs one process's view of every job, which a broker queue shared "
                  "by several does not have: expected it unset");
}

}  // namespace

Publisher::Publisher(BrokerOptions broker, std::string queue, BrokerQueueOptions options)
    : state_(std::make_unique<State>()) {
  state_->broker = std::move(broker);
  state_->queue = std::move(queue);
  state_->options = options;
  check_broker(state_->broker);
  state_->address = amqp::parse_url(state_->broker.url);
  if (state_->queue.empty())
    throw Error(ErrorCode::invalid_option,
                "broker queue name is empty; expected a rail queue name");
  std::random_device rd;
  state_->node = (std::uint64_t{rd()} & 0xFF'FFFF) << 40;
  state_->connect();
}

Publisher::~Publisher() = default;

void check_broker(const BrokerOptions& o) {
  if (o.heartbeat != Duration{0} && o.heartbeat < std::chrono::seconds(1))
    throw Error(ErrorCode::invalid_option,
                "BrokerOptions.heartbeat is " + std::to_string(to_ms(o.heartbeat)) +
                    " ms; expected whole seconds, 1 s or more (AMQP counts it in seconds), or 0 "
                    "for none");
  if (o.confirm_timeout <= Duration{0})
    throw Error(ErrorCode::invalid_option,
                "BrokerOptions.confirm_timeout is not positive; expected a wait, e.g. 10 s");
}

void Publisher::check(const JobOptions& o) const {
  const std::string& q = state_->queue;
  if (!o.dedup.id.empty()) refused(q, "dedup.id");
  if (!o.group.empty() && state_->options.partitions == 0)
    throw Error(ErrorCode::invalid_option,
                "JobOptions.group is '" + o.group + "' on an add to broker queue '" + q +
                    "', whose BrokerQueueOptions.partitions is 0; expected partitions for its "
                    "groups, e.g. 8 (the same in every process)");
  if (!o.group.empty() && o.delay.count() > 0)
    throw Error(ErrorCode::invalid_option,
                "JobOptions.group and JobOptions.delay are both set on an add to broker queue '" +
                    q +
                    "'; a delayed job would join its group's partition late, out of order: "
                    "expected one of them");
  if (!o.tenant.empty()) refused(q, "tenant");
  if (o.priority != 0) refused(q, "priority");
  if (!o.after.empty()) refused(q, "after");
  if (o.expire_after) refused(q, "expire_after");
  if (!o.downstream.empty()) refused(q, "downstream");
  if (o.delay == Duration::max())
    throw Error(ErrorCode::invalid_option,
                "JobOptions.delay is Duration::max() (never) on an add to broker queue '" + q +
                    "'; a broker queue has no job that waits for ever: expected a finite delay");
  if (o.max_attempts == 0)
    throw Error(ErrorCode::invalid_option, "JobOptions.max_attempts is 0; expected 1 or more");
  if (o.delay.count() < 0)
    throw Error(ErrorCode::invalid_option, "JobOptions.delay is negative; expected >= 0");
  if (o.delay != Duration::max() && o.delay > std::chrono::milliseconds(amqp::kMaxDelayMs))
    throw Error(ErrorCode::invalid_option,
                "JobOptions.delay is longer than a broker queue's longest, " +
                    std::to_string(amqp::kMaxDelayMs) + " ms (49.5 days); expected a shorter one");
}

BulkAddReceipt Publisher::publish(std::string_view name, std::span<const std::string> bodies,
                                  const JobOptions& o, const std::string& codec) {
  State& s = *state_;
  const std::lock_guard lock(s.mu);
  const auto deadline = std::chrono::steady_clock::now() + s.broker.confirm_timeout;
  // A delay rounds up to whole milliseconds, then to the cascade's steps: never early.
  const auto delay_ms =
      static_cast<std::uint64_t>(std::chrono::ceil<std::chrono::milliseconds>(o.delay).count());
  const std::string exchange = delay_ms > 0 ? amqp::delay_entry(delay_ms) : "";
  // A group's jobs go straight to its partition, in add order (check refused a delay).
  const std::string key =
      delay_ms > 0 ? amqp::delay_route(delay_ms, s.queue)
      : o.group.empty()
          ? amqp::jobs_queue(s.queue)
          : amqp::partition_queue(s.queue, amqp::partition_of(o.group, s.options.partitions));
  const std::int64_t added_ms = to_ms(std::chrono::system_clock::now().time_since_epoch());
  amqp::Fields headers;
  headers.emplace_back(amqp::kVersionHeader, std::int64_t{1});
  headers.emplace_back(amqp::kCodecHeader, codec);
  headers.emplace_back(amqp::kAttemptHeader, std::int64_t{0});
  headers.emplace_back(amqp::kMaxAttemptsHeader, std::int64_t{o.max_attempts});
  headers.emplace_back(amqp::kBackoffHeader, amqp::backoff_header(o.backoff));
  headers.emplace_back(amqp::kAddedHeader, added_ms);
  if (o.visibility_timeout)
    headers.emplace_back(amqp::kVisibilityHeader, to_ms(*o.visibility_timeout));
  if (o.timeout) headers.emplace_back(amqp::kTimeoutHeader, to_ms(*o.timeout));
  if (!o.group.empty()) headers.emplace_back(amqp::kGroupHeader, o.group);
  auto backoff = std::chrono::milliseconds(50);
  for (;;) {
    const std::uint64_t first = s.node | (s.next_id & ((std::uint64_t{1} << 40) - 1));
    try {
      if (!s.connection || !s.connection->ok()) s.connect();
      std::uint64_t last = 0;
      for (std::size_t i = 0; i < bodies.size(); ++i) {
        const std::string id = std::to_string(first + i);
        last = s.connection->publish(exchange, key,
                                     {.body = bodies[i],
                                      .type = name,
                                      .message_id = id,
                                      .timestamp = added_ms / 1000,
                                      .headers = &headers});
      }
      const auto left =
          std::chrono::duration_cast<Duration>(deadline - std::chrono::steady_clock::now());
      const std::size_t nacked =
          bodies.empty() ? 0
                         : s.connection->wait_confirms(last, std::max(left, Duration{0})).size();
      s.next_id += bodies.size();
      return BulkAddReceipt{.status = nacked == 0 ? AddStatus::added : AddStatus::full,
                            .first_id = first,
                            .count = bodies.size() - nacked};
    } catch (const Error& e) {
      if (e.code() != ErrorCode::broker) throw;
      s.next_id += bodies.size();  // they may have been stored: their ids stay theirs
      s.connection.reset();
      // A refusal that stays the same however often it is tried (a queue declared otherwise,
      // a message too large) is said at once.
      if (const auto* r = dynamic_cast<const amqp::Refused*>(&e); r != nullptr && r->permanent())
        throw;
      if (std::chrono::steady_clock::now() + backoff >= deadline)
        throw Error(ErrorCode::broker,
                    "add to broker queue '" + s.queue + "' was not confirmed within " +
                        std::to_string(to_ms(s.broker.confirm_timeout)) +
                        " ms (BrokerOptions::confirm_timeout); it may have been stored. Last "
                        "failure: " +
                        e.what());
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
    }
  }
}

}  // namespace rail::amqp::detail
