// rail::amqp: rail's queues over RabbitMQ quorum queues, when one process is not enough (the
// optional rail::amqp target, built where Debian's librabbitmq-dev is installed).
//
// Producer<T> is the adding half: add() publishes a job to the broker queue of a rail queue and
// returns once the broker confirmed it (durable on a quorum of its nodes), so a confirmed add
// survives a crash of this process or of the broker. Payloads travel in their JournalCodec<T>
// bytes, the job's name, id and attempt budget in the message's properties and headers.
//
// Ids: a job's id is 24 random bits of its Producer and a 40-bit count of its adds, so ids from
// different processes differ with high probability, not certainty; the message id carries it.
// Contract:
// - add() answers `added` (confirmed) or `full` (the broker queue held max_length ready
//   messages: RabbitMQ nacked the publish; a quorum queue takes one message past it at most),
//   or throws Error(broker) when no confirm came within BrokerOptions::confirm_timeout, after
//   reconnecting with backoff meanwhile (the add may then have been stored: at-least-once).
// - JobOptions: max_attempts, backoff and delay travel with the job (a delay waits in the
//   broker's delay cascade, never less than asked, at most 0.8% more; up to 49.5 days). The
//   options that need one process's view of every job (dedup, group, tenant, priority, after,
//   expire_after, downstream) are refused with Error(invalid_option) naming the option.
// - Threads: any; adds on one Producer share its connection one at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "rail/add_receipt.hpp"
#include "rail/clock.hpp"
#include "rail/journal_codec.hpp"
#include "rail/options.hpp"

namespace rail::amqp {

/// BrokerOptions: where the broker is and how long to wait for it.
struct BrokerOptions {
  std::string url;  // amqp://user:password@host:port/vhost (RabbitMQ's URI spec)
  Duration heartbeat = std::chrono::seconds(10);  // a silent broker is dead after 2
  Duration confirm_timeout =
      std::chrono::seconds(10);  // an add's longest wait, reconnects included
  std::string name = "rail";     // shown by the broker for the connection
};

/// BrokerQueueOptions: the broker queue's arguments. Every process must declare the same:
/// RabbitMQ refuses a queue redeclared otherwise (Error(broker) names it).
struct BrokerQueueOptions {
  std::uint32_t max_length = 65'536;  // ready messages before adds answer `full`; 0: no bound
  /// Deliveries before the broker itself dead-letters a message: a guard against a job that
  /// kills its process each time (rail counts attempts itself). 0: no guard.
  std::uint32_t delivery_limit = 20;
};

namespace detail {

/// Publisher: Producer's untyped core (src/amqp_publisher.cpp).
class Publisher {
 public:
  Publisher(BrokerOptions broker, std::string queue, BrokerQueueOptions options);
  ~Publisher();
  Publisher(const Publisher&) = delete;
  Publisher& operator=(const Publisher&) = delete;

  /// check(o): refuses the JobOptions a broker queue cannot honour (Error(invalid_option)).
  void check(const JobOptions& o) const;
  /// publish(name, bodies, o, codec): publishes each encoded body as a job and waits for the
  /// confirms: ids first_id .. first_id + n - 1; status full when the broker refused some
  /// (`count` were stored).
  BulkAddReceipt publish(std::string_view name, std::span<const std::string> bodies,
                         const JobOptions& o, const std::string& codec);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace detail

template <JournalCodable T>
class Producer {
 public:
  /// Producer(broker, queue, options): connects and declares the queue's broker objects
  /// (Error(broker) if the broker is unreachable or holds them with other arguments).
  Producer(BrokerOptions broker, std::string queue, BrokerQueueOptions options = {})
      : core_(std::move(broker), std::move(queue), options) {}

  AddReceipt add(std::string_view name, const T& payload, const JobOptions& o = {}) {
    core_.check(o);
    std::string body;
    JournalCodec<T>::encode(payload, body);
    const BulkAddReceipt r =
        core_.publish(name, std::span<const std::string>(&body, 1), o, JournalCodec<T>::name());
    return AddReceipt{r.first_id, r.status};
  }

  /// add_bulk(name, payloads, o): publishes them all, then waits for every confirm (one round
  /// trip for the lot); ids from first_id on. `full`: the broker refused some, and `count` of
  /// them were stored (a quorum queue's overshoot makes which ones unspecified).
  BulkAddReceipt add_bulk(std::string_view name, std::span<const T> payloads,
                          const JobOptions& o = {}) {
    core_.check(o);
    std::vector<std::string> bodies(payloads.size());
    for (std::size_t i = 0; i < payloads.size(); ++i)
      JournalCodec<T>::encode(payloads[i], bodies[i]);
    return core_.publish(name, bodies, o, JournalCodec<T>::name());
  }

 private:
  detail::Publisher core_;
};

}  // namespace rail::amqp
