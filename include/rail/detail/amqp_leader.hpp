// Leader: whether this process leads a broker queue's schedules (amqp_schedules.hpp), decided by
// a lease message. The queue rail.leader.<queue> is a single-active-consumer quorum queue: the
// broker delivers its messages to one consumer at a time, the first to subscribe, and to the next
// when that one's connection closes. A token message waits there (each Leader publishes one if
// it finds none ready; extra tokens are harmless: they all go to the one active consumer). A
// Leader holds a token unacked with prefetch 1: while it holds one it leads.
//
// Contract:
// - held(): this process leads now. It turns false as soon as this side sees its connection
//   die (a broken socket, or two missed heartbeats); the broker hands the token to the next
//   process when it sees the connection die. Both sides see a crash at once; a partition that
//   leaves the socket open can make two leaders for up to two heartbeats.
// - The token is handed back (nack with requeue) every `renew` and taken again at once (the
//   active consumer stays the same), so that RabbitMQ's consumer_timeout never closes the
//   channel of a delivery held for hours; leadership stays with this process meanwhile, and
//   ends if the token is not back within 5 s (the broker made another consumer active without
//   closing this connection). On RabbitMQ 3.10 a requeue does not count against a delivery
//   limit (the leader queue has none); from 4.0, quorum queues have a default limit of 20 that
//   requeues count against, which would drop the token after 20 renewals: not supported there.
// - Threads: one thread of its own runs the connection; held() from any thread.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "rail/amqp.hpp"

namespace rail::detail::amqp {

class Leader {
 public:
  /// Leader(broker, queue, renew): connects, declares the leader queue and starts taking part
  /// (Error(broker) if the broker cannot be reached now; later failures are retried).
  Leader(rail::amqp::BrokerOptions broker, std::string queue,
         Duration renew = std::chrono::minutes(10));
  ~Leader();  // closes the connection: a held token goes to the next process
  Leader(const Leader&) = delete;
  Leader& operator=(const Leader&) = delete;

  /// held(): this process leads now (acquire: what the leader published before is visible).
  [[nodiscard]] bool held() const noexcept { return held_.load(std::memory_order_acquire); }

 private:
  struct State;
  std::unique_ptr<State> state_;
  std::atomic<bool> held_{false};  // written by the thread only
  std::thread thread_;
};

}  // namespace rail::detail::amqp
