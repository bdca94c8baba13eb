// The broker objects of rail::amqp: see include/rail/detail/amqp_topology.hpp.
#include "rail/detail/amqp_topology.hpp"

#include <bit>

#include "rail/detail/hash_bytes.hpp"
#include "rail/error.hpp"

namespace rail::detail::amqp {
namespace {

/// quorum(): the arguments every rail queue shares: replicated, and a dead-lettering that keeps
/// the message until its target confirmed it (RabbitMQ 3.10's at-least-once strategy, which
/// needs reject-publish).
Fields quorum() {
  return Fields{{"x-queue-type", std::string("quorum")},
                {"x-overflow", std::string("reject-publish")},
                {"x-dead-letter-strategy", std::string("at-least-once")}};
}

/// words(n): n topic words matching anything ("*.*.").
std::string words(int n) {
  std::string out;
  for (int i = 0; i < n; ++i)
    out += "*.";
  return out;
}

}  // namespace

std::string jobs_queue(std::string_view queue) {
  return "rail.q." + std::string(queue);
}

std::string partition_queue(std::string_view queue, std::uint32_t n) {
  return jobs_queue(queue) + ".p" + std::to_string(n);
}

std::uint32_t partition_of(std::string_view group, std::uint32_t partitions) {
  return static_cast<std::uint32_t>(hash_bytes(group) % partitions);
}

std::string leader_queue(std::string_view queue) {
  return "rail.leader." + std::string(queue);
}

void declare_leader(Connection& c, std::string_view queue) {
  check_queue_name(queue);
  Fields args{{"x-queue-type", std::string("quorum")}, {"x-single-active-consumer", true}};
  c.declare_queue(leader_queue(queue), args);
}

std::string dlq_queue(std::string_view queue) {
  return "rail.dlq." + std::string(queue);
}

std::string delay_exchange(int level) {
  return "rail.delay." + std::to_string(level);
}

std::uint64_t rounded_delay_ms(std::uint64_t ms) noexcept {
  if (ms >= kMaxDelayMs) return kMaxDelayMs;
  const int bits = std::bit_width(ms);
  if (bits <= 8) return ms;
  const std::uint64_t unit = std::uint64_t{1} << (bits - 8);
  // May carry into a ninth bit (a power of two: one significant bit); never past kMaxDelayMs,
  // itself a multiple of the unit of 32-bit delays.
  return (ms + unit - 1) / unit * unit;
}

std::string delay_entry(std::uint64_t ms) {
  const std::uint64_t d = rounded_delay_ms(ms);
  return delay_exchange(d == 0 ? 0 : std::bit_width(d) - 1);
}

std::string delay_route(std::uint64_t ms, std::string_view queue) {
  const std::uint64_t d = rounded_delay_ms(ms);
  std::string key;
  key.reserve(2 * kDelayLevels + queue.size());
  for (int level = kDelayLevels - 1; level >= 0; --level) {
    key += ((d >> level) & 1) ? '1' : '0';
    key += '.';
  }
  key += queue;
  return key;
}

void declare_cascade(Connection& c) {
  c.declare_exchange(std::string(kDelayOut), "topic");
  for (int level = kDelayLevels - 1; level >= 0; --level)
    c.declare_exchange(delay_exchange(level), "topic");
  for (int level = kDelayLevels - 1; level >= 0; --level) {
    const std::string name = delay_exchange(level);
    const std::string next = level == 0 ? std::string(kDelayOut) : delay_exchange(level - 1);
    Fields args = quorum();
    args.emplace_back("x-message-ttl", std::int64_t{1} << level);
    args.emplace_back("x-dead-letter-exchange", next);
    c.declare_queue(name, args);
    // The word of this level is the (kDelayLevels - level)-th: a 1 waits here, a 0 goes on.
    const std::string before = words(kDelayLevels - 1 - level);
    c.bind(name, name, before + "1.#");
    c.bind_exchange(next, name, before + "0.#");
  }
}

void check_queue_name(std::string_view queue) {
  constexpr std::size_t kLongest = 255 - 2 * kDelayLevels;
  const auto bad = [&](const std::string& why) {
    throw Error(ErrorCode::invalid_option, "broker queue name '" + std::string(queue) + "' " + why +
                                               "; expected 1 to " + std::to_string(kLongest) +
                                               " bytes of dot-separated words, none empty, * or #");
  };
  if (queue.empty() || queue.size() > kLongest)
    bad("is " + std::to_string(queue.size()) + " bytes long");
  std::size_t start = 0;
  for (;;) {
    const std::size_t dot = queue.find('.', start);
    const std::string_view word =
        queue.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (word.empty() || word == "*" || word == "#")
      bad("has the word '" + std::string(word) + "', which a topic binding cannot match literally");
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
}

void declare_queue(Connection& c, const QueueTopology& t) {
  check_queue_name(t.queue);
  // Its partition count, kept where a declare that differs is refused: an exchange's
  // alternate-exchange is the one argument RabbitMQ compares (the exchange routes nothing).
  // Every process must agree, or a group's jobs would reach two partitions.
  const std::string shape = "rail.partitions." + std::string(t.queue);
  try {
    c.declare_exchange(shape, "fanout",
                       {{"alternate-exchange", "partitions=" + std::to_string(t.partitions)}});
  } catch (const Refused& e) {
    if (e.reply() != 406) throw;
    throw Refused(406, "broker queue '" + std::string(t.queue) +
                           "' is declared with another BrokerQueueOptions::partitions than " +
                           std::to_string(t.partitions) +
                           " (every process must declare the same; delete exchange '" + shape +
                           "' with the queues to change it): " + e.what());
  }
  const std::string jobs = jobs_queue(t.queue), dead = dlq_queue(t.queue);
  c.declare_exchange(std::string(kDeadLetters), "direct");
  c.declare_queue(dead, quorum());
  c.bind(dead, std::string(kDeadLetters), t.queue);
  Fields args = quorum();
  args.emplace_back("x-dead-letter-exchange", std::string(kDeadLetters));
  args.emplace_back("x-dead-letter-routing-key", t.queue);
  if (t.max_length != 0) args.emplace_back("x-max-length", std::int64_t{t.max_length});
  if (t.delivery_limit != 0) args.emplace_back("x-delivery-limit", std::int64_t{t.delivery_limit});
  c.declare_queue(jobs, args);
  // A partition's arguments are the queue's, with one consumer at a time: a group's jobs reach
  // one process in order, and a requeue keeps its place (a delivery limit is set by default).
  args.emplace_back("x-single-active-consumer", true);
  for (std::uint32_t n = 0; n < t.partitions; ++n)
    c.declare_queue(partition_queue(t.queue, n), args);
  c.bind(jobs, std::string(kDelayOut), words(kDelayLevels) + t.queue);
}

void declare_all(Connection& c, const QueueTopology& t) {
  declare_cascade(c);
  declare_queue(c, t);
}

}  // namespace rail::detail::amqp
