// take_bodies(c, queue, n): consumes up to n messages of a broker queue on connection c, acking
// each, and returns their bodies in delivery order; stops early when none comes for 10 s.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "rail/detail/amqp_connection.hpp"

namespace rail::test {

inline std::vector<std::string> take_bodies(detail::amqp::Connection& c, const std::string& queue,
                                            std::size_t n) {
  c.consume(queue, 100);
  std::vector<std::string> bodies;
  while (bodies.size() < n) {
    std::optional<detail::amqp::Delivery> d = c.next(std::chrono::seconds(10));
    if (!d) break;
    bodies.push_back(std::move(d->body));
    c.ack(d->tag);
  }
  return bodies;
}

}  // namespace rail::test
