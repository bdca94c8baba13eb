// AmqpTopology: the broker objects behind a bridged queue and how a message is routed through
// them, for rail::amqp. Names and arguments are fixed here so that every process declares the
// same ones (RabbitMQ refuses a redeclaration that differs: Error(broker) names the queue).
//
//   rail.q.<queue>      the jobs (quorum queue; x-max-length with reject-publish: a full queue
//                       nacks the publish, which add() reports as `full`; x-delivery-limit: a
//                       crash-loop guard, past which the broker dead-letters the message)
//   rail.dlx            direct exchange of dead letters, routed by queue name to
//   rail.dlq.<queue>    the queue's dead letters (quorum)
//   rail.delay.<L>      L = 31 .. 0: the delay cascade shared by every queue of a vhost (kombu's
//                       and NServiceBus's design): a topic exchange and a quorum queue with a
//                       message TTL of 2^L ms; a message's routing key spells its delay in 32
//                       binary digits, most significant first, then its queue's name. At level
//                       L a 1 sends it into the level's queue (it waits 2^L ms, then dead-letters
//                       to level L-1), a 0 straight on to exchange L-1; level 0 hands it to
//   rail.delay.out      the topic exchange that routes it by its last word to rail.q.<queue>.
//
// Guarantee: a delayed message reaches its queue no earlier than its delay (each hop waits at
// least its TTL). The delay is rounded up to 8 significant bits (at most 1/128 later, below
// 0.8%), so it takes at most 8 hops; the longest is kMaxDelayMs (49.5 days). The queues of the
// cascade hold messages of a single TTL each, so none waits behind a longer one (per-message
// TTLs expire only at a queue's head).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "rail/detail/amqp_connection.hpp"

namespace rail::detail::amqp {

constexpr int kDelayLevels = 32;
/// kMaxDelayMs: the longest delay, the largest 32-bit number of 8 significant bits (49.5 days).
constexpr std::uint64_t kMaxDelayMs = 0xFF00'0000;

/// QueueTopology: the arguments of a bridged queue's broker queue, fixed at declaration.
struct QueueTopology {
  std::string queue;                 // rail's queue name
  std::uint32_t max_length = 0;      // ready messages before a publish is refused; 0: no bound
  std::uint32_t delivery_limit = 0;  // deliveries before the broker dead-letters; 0: none
  std::uint32_t partitions = 0;      // FIFO groups' partition queues; 0: none
};

/// jobs_queue(q) / dlq_queue(q): the broker queues of rail queue q.
[[nodiscard]] std::string jobs_queue(std::string_view queue);
[[nodiscard]] std::string dlq_queue(std::string_view queue);
/// partition_queue(q, n): partition n of rail queue q's FIFO groups, a single-active-consumer
/// queue (one process takes its groups at a time, in order). partition_of(group, partitions):
/// the partition of a group: the same in every process of one byte order (hash_bytes).
[[nodiscard]] std::string partition_queue(std::string_view queue, std::uint32_t n);
[[nodiscard]] std::uint32_t partition_of(std::string_view group, std::uint32_t partitions);
/// leader_queue(q): the single-active-consumer queue whose token makes one process the leader
/// of rail queue q's schedules (amqp_schedules.hpp); declare_leader(c, q) declares it.
[[nodiscard]] std::string leader_queue(std::string_view queue);
void declare_leader(Connection& c, std::string_view queue);
inline constexpr std::string_view kDeadLetters = "rail.dlx";
inline constexpr std::string_view kDelayOut = "rail.delay.out";
/// delay_exchange(level): the cascade's exchange (and queue) of one level.
[[nodiscard]] std::string delay_exchange(int level);

/// rounded_delay_ms(ms): ms rounded up to 8 significant bits (exact below 256 ms), capped at
/// kMaxDelayMs: the delay the cascade gives a message asked to wait ms.
[[nodiscard]] std::uint64_t rounded_delay_ms(std::uint64_t ms) noexcept;
/// delay_route(ms, queue): the routing key that takes a message through the cascade for
/// rounded_delay_ms(ms) to `queue`. Publish it to delay_entry(ms).
/// delay_entry(ms): the exchange of the highest level whose bit the delay sets (level 0 for
/// none): the levels above would only pass it on. Each pass between exchanges costs the broker
/// about 0.15 ms per message (100 publishes through all 32 levels took 400-540 ms to confirm,
/// as many straight to a queue 4-20 ms), so a delay takes as many as its highest bit's level.
[[nodiscard]] std::string delay_entry(std::uint64_t ms);
[[nodiscard]] std::string delay_route(std::uint64_t ms, std::string_view queue);

/// check_queue_name(queue): refuses a name the cascade cannot route (Error(invalid_option)):
/// longer than 191 bytes (a routing key holds 255, 64 of them the delay), or with an empty word
/// or a word `*` or `#` (topic wildcards) between its dots.
void check_queue_name(std::string_view queue);

/// declare_cascade(c): the delay cascade and rail.delay.out (idempotent; once per connection).
void declare_cascade(Connection& c);
/// declare_queue(c, t): the queue's jobs and dead-letter queues, rail.dlx, and the queue's
/// binding from rail.delay.out. Throws Error(broker) if they exist with other arguments.
void declare_queue(Connection& c, const QueueTopology& t);
/// declare_all(c, t): declare_cascade, then declare_queue: what a producer or consumer of a
/// queue needs before its first publish.
void declare_all(Connection& c, const QueueTopology& t);

}  // namespace rail::detail::amqp
