// rail::amqp::broker_counts: a broker queue's jobs as the broker holds them (see amqp.hpp).
#include "rail/amqp.hpp"
#include "rail/detail/amqp_connection.hpp"
#include "rail/detail/amqp_topology.hpp"

namespace rail::amqp {
namespace wire = rail::detail::amqp;

BrokerCounts broker_counts(const BrokerOptions& broker, const std::string& queue,
                           const BrokerQueueOptions& options) {
  detail::check_broker(broker);
  wire::Connection c(wire::parse_url(broker.url), broker.heartbeat, broker.name + " counts");
  const wire::QueueState jobs = c.queue_state(wire::jobs_queue(queue));
  BrokerCounts out;
  out.waiting = jobs.ready;
  out.consumers = jobs.consumers;
  for (std::uint32_t n = 0; n < options.partitions; ++n)
    out.waiting += c.queue_depth(wire::partition_queue(queue, n));
  out.dead_lettered = c.queue_depth(wire::dlq_queue(queue));
  return out;
}

}  // namespace rail::amqp
