// Leader: see include/rail/detail/amqp_leader.hpp.
#include "rail/detail/amqp_leader.hpp"

#include <chrono>
#include <optional>

#include "rail/detail/amqp_connection.hpp"
#include "rail/detail/amqp_topology.hpp"
#include "rail/error.hpp"

namespace rail::detail::amqp {

/// kReturn: how long a renewed token may take to come back before this process stops leading.
constexpr auto kReturn = std::chrono::seconds(5);

struct Leader::State {
  rail::amqp::BrokerOptions broker;
  std::string queue;
  Duration renew;
  Address address;
  // release by ~Leader, acquire by the thread's loop: the flag publishes nothing else.
  std::atomic<bool> stop{false};
  std::optional<Connection> connection;

  /// connect(): a new connection that declares the leader queue, leaves a token there if none
  /// is ready, and subscribes with prefetch 1.
  void connect() {
    connection.reset();
    connection.emplace(address, broker.heartbeat, broker.name + " leader of " + queue);
    declare_leader(*connection, queue);
    const std::string name = leader_queue(queue);
    if (connection->queue_depth(name) == 0)
      (void)connection->publish(
          "", name,
          Outgoing{
              .body = "token", .type = {}, .message_id = {}, .timestamp = 0, .headers = nullptr});
    connection->consume(name, 1);
  }
};

Leader::Leader(rail::amqp::BrokerOptions broker, std::string queue, Duration renew)
    : state_(std::make_unique<State>()) {
  rail::amqp::detail::check_broker(broker);
  state_->broker = std::move(broker);
  state_->queue = std::move(queue);
  state_->renew = renew;
  state_->address = parse_url(state_->broker.url);
  state_->connect();  // the constructor's error if the broker cannot be reached
  thread_ = std::thread([this] {
    State& s = *state_;
    std::uint64_t tag = 0;  // the held token's delivery (0: none)
    auto taken_at = std::chrono::steady_clock::now();
    auto backoff = std::chrono::milliseconds(50);
    while (!s.stop.load(std::memory_order_acquire)) {
      try {
        if (!s.connection || !s.connection->ok()) s.connect();
        if (std::optional<Delivery> d = s.connection->next(std::chrono::milliseconds(100))) {
          tag = d->tag;
          taken_at = std::chrono::steady_clock::now();
          held_.store(true, std::memory_order_release);
        } else if (tag != 0 && std::chrono::steady_clock::now() - taken_at > s.renew) {
          // Handed back and taken again at once while this is still the active consumer.
          s.connection->nack(tag, true);
          tag = 0;
          taken_at = std::chrono::steady_clock::now();
        } else if (tag == 0 && held_.load(std::memory_order_relaxed) &&
                   std::chrono::steady_clock::now() - taken_at > kReturn) {
          // The token did not come back: another consumer is active now (the broker moved
          // it without closing this connection). Not the leader until one comes.
          held_.store(false, std::memory_order_release);
        }
        backoff = std::chrono::milliseconds(50);
      } catch (const std::exception&) {
        // The connection died (its deliveries went back to the broker): not the leader now.
        held_.store(false, std::memory_order_release);
        tag = 0;
        s.connection.reset();
        std::this_thread::sleep_for(backoff);
        backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
      }
    }
    held_.store(false, std::memory_order_release);
    s.connection.reset();  // the token goes back to the broker, for the next process
  });
}

Leader::~Leader() {
  state_->stop.store(true, std::memory_order_release);
  thread_.join();
}

}  // namespace rail::detail::amqp
