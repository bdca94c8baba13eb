// AmqpConnection: one AMQP 0-9-1 connection with one channel to a RabbitMQ broker, over the C
// client rabbitmq-c (librabbitmq), for the rail::amqp bridge. Built only into rail::amqp: the
// engine never includes it, and this header names nothing of librabbitmq (its state is opaque).
//
// Contract: every call is the owning thread's (rabbitmq-c's connections are single-threaded, and
// heartbeats are serviced only inside its read calls, so the owner keeps calling next() or
// wait_confirms() while the connection is idle). A call that fails because the broker refused
// it, closed the channel or connection, or the socket broke throws Error(ErrorCode::broker) with
// the broker's reply (`PRECONDITION_FAILED - inequivalent arg ...`) or the library's reason;
// after that the connection is dead (ok() is false) and the caller opens a new one.
// Confirms: after enable_confirms(), publish() numbers each message 1, 2, ... (its correlation
// id, so that a basic.return names it) and wait_confirms(n) reads the broker's basic.ack /
// basic.nack frames until every message up to n is settled, returning the numbers it nacked (a
// full queue with overflow reject-publish) or returned (unroutable). The broker may confirm
// publishes out of order; confirmed_upto() counts only the unbroken run from 1.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "rail/clock.hpp"
#include "rail/error.hpp"

namespace rail::detail::amqp {

/// Address: where a broker listens and how to log in, from an amqp:// URL.
struct Address {
  std::string host;
  int port = 5672;
  std::string user = "guest";
  std::string password = "guest";
  std::string vhost = "/";
};

/// parse_url(url): "amqp://user:password@host:port/vhost" (RabbitMQ's URI spec; the parts after
/// the scheme are optional). Throws Error(invalid_option) naming the URL and what was expected.
[[nodiscard]] Address parse_url(const std::string& url);

/// A header or argument value: AMQP's long-long integer, long string or boolean.
using FieldValue = std::variant<std::int64_t, std::string, bool>;
using Fields = std::vector<std::pair<std::string, FieldValue>>;

/// field(fields, key): the value under key, if any.
[[nodiscard]] const FieldValue* field(const Fields& fields, std::string_view key) noexcept;

/// Outgoing: a message to publish (persistent: delivery mode 2).
struct Outgoing {
  std::string_view body;
  std::string_view type;        // AMQP `type`: rail's job name
  std::string_view message_id;  // rail's job id
  std::int64_t timestamp = 0;   // seconds since the epoch (AMQP's resolution)
  const Fields* headers = nullptr;
};

/// QueueState: what a passive declare tells of a queue: its ready messages (not those delivered
/// and unacked: AMQP 0-9-1 does not count them) and its consumers.
struct QueueState {
  std::uint32_t ready = 0;
  std::uint32_t consumers = 0;
};

/// Delivery: a message the broker delivered to this connection's consumer.
struct Delivery {
  std::uint64_t tag = 0;  // the delivery tag, for ack/nack on this connection
  bool redelivered = false;
  std::string routing_key;
  std::string body;
  std::string type;
  std::string message_id;
  std::int64_t timestamp = 0;
  Fields headers;
};

/// Refused: the Error(broker) of a call the broker refused with a reply code (it closed the
/// channel or connection). 403 (access refused) and 406 (precondition failed: a queue declared
/// otherwise, a message too large) stay the same however often the call is made; a 404 (an
/// exchange deleted under us) is healed by the redeclaration of the next connection.
class Refused : public Error {
 public:
  Refused(int reply, const std::string& message)
      : Error(ErrorCode::broker, message), reply_(reply) {}
  [[nodiscard]] int reply() const noexcept { return reply_; }
  [[nodiscard]] bool permanent() const noexcept { return reply_ == 403 || reply_ == 406; }

 private:
  int reply_;
};

class Connection {
 public:
  /// Connection(address, heartbeat, name): logs in and opens channel 1; `name` is shown by the
  /// broker as the connection's name. Throws Error(broker) when the broker cannot be reached
  /// or refuses the login.
  Connection(const Address& address, Duration heartbeat, std::string_view name);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  /// ok(): no call has failed on this connection yet.
  [[nodiscard]] bool ok() const noexcept { return ok_; }

  // --- topology (durable; a declaration that differs from the broker's throws) ---------------
  /// declare_exchange(name, type, arguments): RabbitMQ compares only `alternate-exchange` of
  /// an existing exchange's arguments (a different value: Refused 406).
  void declare_exchange(const std::string& name, const std::string& type,
                        const Fields& arguments = {});
  /// declare_queue(name, arguments): the queue's ready message count.
  std::uint32_t declare_queue(const std::string& name, const Fields& arguments);
  /// queue_depth(name): its ready messages (a passive declare); throws if it does not exist.
  std::uint32_t queue_depth(const std::string& name);
  /// queue_state(name): its ready messages and its consumers (as queue_depth).
  QueueState queue_state(const std::string& name);
  void bind(const std::string& queue, const std::string& exchange, const std::string& key);
  /// bind_exchange(destination, source, key): source's messages matching key go on to
  /// exchange destination.
  void bind_exchange(const std::string& destination, const std::string& source,
                     const std::string& key);
  void delete_queue(const std::string& name);

  // --- publishing ----------------------------------------------------------------------------
  /// enable_confirms(): publisher confirms from now on (a second call changes nothing).
  void enable_confirms();
  /// publish(exchange, key, message): its sequence number (0 before enable_confirms()).
  std::uint64_t publish(const std::string& exchange, const std::string& key,
                        const Outgoing& message);
  /// wait_confirms(upto, timeout): waits until every message published up to `upto` is settled;
  /// returns those the broker refused: nacked, or returned unroutable (publishes are mandatory).
  /// Throws Error(broker) on timeout (real time) or failure.
  std::vector<std::uint64_t> wait_confirms(std::uint64_t upto, Duration timeout);

  /// confirmed_upto(): every message published up to this number is settled (acked, nacked or
  /// returned) as far as the frames read so far tell (wait_confirms() or poll() read them).
  [[nodiscard]] std::uint64_t confirmed_upto() const noexcept { return settled_; }
  /// take_refused(upto): the settled numbers up to `upto` the broker refused (nacked, or
  /// returned unroutable), reported once.
  std::vector<std::uint64_t> take_refused(std::uint64_t upto);

  /// poll(): reads what the broker sent meanwhile without waiting (confirms, a close) and sends
  /// a heartbeat if one is due: rabbitmq-c sends them only from inside its calls, so an idle
  /// connection's owner calls this at least once per heartbeat interval, or the broker closes it.
  void poll();

  // --- consuming -----------------------------------------------------------------------------
  /// consume(queue, prefetch): starts a consumer with at most `prefetch` unacked deliveries.
  void consume(const std::string& queue, std::uint16_t prefetch);
  /// next(timeout): the next delivery, or nullopt when none came within timeout (real time).
  std::optional<Delivery> next(Duration timeout);
  void ack(std::uint64_t tag);
  /// fd(): the socket, for the owner's poll(2) (-1 if it has none).
  [[nodiscard]] int fd() const noexcept;
  /// buffered(): frames or bytes already read from the socket and not taken yet: poll(2) on
  /// fd() would not show them.
  [[nodiscard]] bool buffered() const noexcept;
  /// nack(tag, requeue): requeue true returns it to the queue, false dead-letters it.
  void nack(std::uint64_t tag, bool requeue);

 private:
  struct State;
  /// fail(what, detail, reply): marks the connection dead and throws Error(broker), or Refused
  /// when the broker refused with a reply code.
  [[noreturn]] void fail(std::string_view what, const std::string& detail, int reply = 0);
  /// check_reply(what): throws unless the last synchronous call succeeded.
  void check_reply(std::string_view what);
  /// settle(tag, multiple, nacked): a basic.ack or basic.nack of the publisher confirms.
  void settle(std::uint64_t tag, bool multiple, bool nacked);
  /// on_frame(frame, what): a frame read outside a synchronous call (an amqp_frame_t).
  void on_frame(const void* frame, std::string_view what);

  std::unique_ptr<State> state_;
  bool ok_ = true;
  std::string name_;
  std::uint64_t published_ = 0;                  // the last sequence number given out
  std::uint64_t settled_ = 0;                    // every number up to this one is settled
  std::map<std::uint64_t, bool> settled_above_;  // settled numbers past settled_: nacked?
  std::vector<std::uint64_t> nacked_;            // nacks not reported yet
  std::set<std::uint64_t> returned_;             // returned publishes whose ack has not come
  bool confirms_ = false;                        // enable_confirms() was called
};

}  // namespace rail::detail::amqp
