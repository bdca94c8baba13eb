// Connection over rabbitmq-c: see include/rail/detail/amqp_connection.hpp.
#include "rail/detail/amqp_connection.hpp"

#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <sys/time.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "rail/error.hpp"

namespace rail::detail::amqp {
namespace {

amqp_bytes_t bytes(std::string_view s) noexcept {
  return amqp_bytes_t{s.size(), const_cast<char*>(s.data())};  // read only by the library
}

std::string text(amqp_bytes_t b) {
  return std::string(static_cast<const char*>(b.bytes), b.len);
}

timeval to_timeval(Duration d) noexcept {
  const auto us =
      std::max<std::int64_t>(0, std::chrono::duration_cast<std::chrono::microseconds>(d).count());
  return timeval{static_cast<time_t>(us / 1'000'000), static_cast<suseconds_t>(us % 1'000'000)};
}

/// Table: an amqp_table_t over Fields, valid while both live.
class Table {
 public:
  explicit Table(const Fields* fields) {
    if (fields == nullptr) return;
    entries_.reserve(fields->size());
    for (const auto& [key, value] : *fields) {
      amqp_table_entry_t e{};
      e.key = bytes(key);
      if (const auto* i = std::get_if<std::int64_t>(&value)) {
        e.value.kind = AMQP_FIELD_KIND_I64;
        e.value.value.i64 = *i;
      } else if (const auto* b = std::get_if<bool>(&value)) {
        e.value.kind = AMQP_FIELD_KIND_BOOLEAN;
        e.value.value.boolean = *b ? 1 : 0;
      } else {
        e.value.kind = AMQP_FIELD_KIND_UTF8;
        e.value.value.bytes = bytes(std::get<std::string>(value));
      }
      entries_.push_back(e);
    }
  }
  [[nodiscard]] amqp_table_t get() noexcept {
    return amqp_table_t{static_cast<int>(entries_.size()), entries_.data()};
  }

 private:
  std::vector<amqp_table_entry_t> entries_;
};

/// fields(table): the integer, string and boolean entries of a received table (others are
/// skipped: rail writes only these, and a broker's x-death is a nested array rail does not read).
Fields fields(const amqp_table_t& table) {
  Fields out;
  for (int i = 0; i < table.num_entries; ++i) {
    const amqp_table_entry_t& e = table.entries[i];
    const amqp_field_value_t& v = e.value;
    switch (v.kind) {
      case AMQP_FIELD_KIND_I8:
        out.emplace_back(text(e.key), std::int64_t{v.value.i8});
        break;
      case AMQP_FIELD_KIND_U8:
        out.emplace_back(text(e.key), std::int64_t{v.value.u8});
        break;
      case AMQP_FIELD_KIND_I16:
        out.emplace_back(text(e.key), std::int64_t{v.value.i16});
        break;
      case AMQP_FIELD_KIND_U16:
        out.emplace_back(text(e.key), std::int64_t{v.value.u16});
        break;
      case AMQP_FIELD_KIND_I32:
        out.emplace_back(text(e.key), std::int64_t{v.value.i32});
        break;
      case AMQP_FIELD_KIND_U32:
        out.emplace_back(text(e.key), std::int64_t{v.value.u32});
        break;
      case AMQP_FIELD_KIND_I64:
        out.emplace_back(text(e.key), static_cast<std::int64_t>(v.value.i64));
        break;
      case AMQP_FIELD_KIND_U64:
        out.emplace_back(text(e.key), static_cast<std::int64_t>(v.value.u64));
        break;
      case AMQP_FIELD_KIND_UTF8:
      case AMQP_FIELD_KIND_BYTES:
        out.emplace_back(text(e.key), text(v.value.bytes));
        break;
      case AMQP_FIELD_KIND_BOOLEAN:
        out.emplace_back(text(e.key), v.value.boolean != 0);
        break;
      default:
        break;
    }
  }
  return out;
}

constexpr amqp_channel_t kChannel = 1;

/// Failure: why a call failed, and the broker's reply code when it refused it (0: none).
struct Failure {
  std::string text;
  int reply = 0;
};

/// failure(r): why a synchronous call failed, or nullopt if it succeeded.
std::optional<Failure> failure(const amqp_rpc_reply_t& r) {
  switch (r.reply_type) {
    case AMQP_RESPONSE_NORMAL:
      return std::nullopt;
    case AMQP_RESPONSE_NONE:
      return Failure{"no reply from the broker"};
    case AMQP_RESPONSE_LIBRARY_EXCEPTION:
      return Failure{amqp_error_string2(r.library_error)};
    case AMQP_RESPONSE_SERVER_EXCEPTION:
      break;
  }
  if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
    const auto* c = static_cast<const amqp_channel_close_t*>(r.reply.decoded);
    return Failure{"the broker closed the channel: " + std::to_string(c->reply_code) + " " +
                       text(c->reply_text),
                   c->reply_code};
  }
  if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
    const auto* c = static_cast<const amqp_connection_close_t*>(r.reply.decoded);
    return Failure{"the broker closed the connection: " + std::to_string(c->reply_code) + " " +
                       text(c->reply_text),
                   c->reply_code};
  }
  return Failure{"unexpected reply method " + std::to_string(r.reply.id)};
}

}  // namespace

const FieldValue* field(const Fields& fields, std::string_view key) noexcept {
  for (const auto& [k, v] : fields)
    if (k == key) return &v;
  return nullptr;
}

Address parse_url(const std::string& url) {
  std::vector<char> copy(url.begin(), url.end());
  copy.push_back('\0');
  amqp_connection_info info{};
  if (amqp_parse_url(copy.data(), &info) != AMQP_STATUS_OK || info.ssl)
    throw Error(ErrorCode::invalid_option,
                "broker URL '" + url +
                    "' is not an AMQP URL; expected amqp://user:password@host:port/vhost "
                    "(amqps is not supported)");
  Address a;
  a.host = info.host;
  a.port = info.port;
  a.user = info.user;
  a.password = info.password;
  a.vhost = info.vhost;
  return a;
}

struct Connection::State {
  amqp_connection_state_t conn = nullptr;
  ~State() {
    if (conn != nullptr) amqp_destroy_connection(conn);
  }
};

Connection::Connection(const Address& address, Duration heartbeat, std::string_view name)
    : state_(std::make_unique<State>()), name_(name) {
  state_->conn = amqp_new_connection();
  if (state_->conn == nullptr) fail("connect", "no memory for a connection");
  amqp_socket_t* socket = amqp_tcp_socket_new(state_->conn);
  if (socket == nullptr) fail("connect", "no memory for a socket");
  const timeval connect_timeout = to_timeval(std::chrono::seconds(10));
  if (const int rc =
          amqp_socket_open_noblock(socket, address.host.c_str(), address.port, &connect_timeout);
      rc != AMQP_STATUS_OK)
    fail("connect",
         "to " + address.host + ":" + std::to_string(address.port) + ": " + amqp_error_string2(rc));
  const int beat = static_cast<int>(std::clamp<std::int64_t>(
      std::chrono::duration_cast<std::chrono::seconds>(heartbeat).count(), 0, 65535));
  Fields props{{"connection_name", std::string(name)}};
  Table client(&props);
  // capabilities.consumer_cancel_notify: the broker sends basic.cancel when a consumed queue
  // goes (deleted, or its node lost), instead of ending the deliveries in silence.
  amqp_table_entry_t capability{};
  capability.key = amqp_cstring_bytes("consumer_cancel_notify");
  capability.value.kind = AMQP_FIELD_KIND_BOOLEAN;
  capability.value.value.boolean = 1;
  amqp_table_entry_t entries[2] = {client.get().entries[0], {}};
  entries[1].key = amqp_cstring_bytes("capabilities");
  entries[1].value.kind = AMQP_FIELD_KIND_TABLE;
  entries[1].value.value.table = amqp_table_t{1, &capability};
  const amqp_table_t client_props{2, entries};
  const amqp_rpc_reply_t login = amqp_login_with_properties(
      state_->conn, address.vhost.c_str(), 0, 131072, beat, &client_props, AMQP_SASL_METHOD_PLAIN,
      address.user.c_str(), address.password.c_str());
  if (auto why = failure(login)) fail("log in as '" + address.user + "'", why->text, why->reply);
  amqp_channel_open(state_->conn, kChannel);
  check_reply("open a channel");
}

Connection::~Connection() {
  if (!ok_) return;  // State's destructor frees what is left
  (void)amqp_channel_close(state_->conn, kChannel, AMQP_REPLY_SUCCESS);
  (void)amqp_connection_close(state_->conn, AMQP_REPLY_SUCCESS);
}

void Connection::fail(std::string_view what, const std::string& detail, int reply) {
  ok_ = false;
  const std::string message =
      "AMQP connection '" + name_ + "' could not " + std::string(what) + ": " + detail;
  if (reply != 0) throw Refused(reply, message);
  throw Error(ErrorCode::broker, message);
}

void Connection::check_reply(std::string_view what) {
  if (auto why = failure(amqp_get_rpc_reply(state_->conn))) fail(what, why->text, why->reply);
}

void Connection::declare_exchange(const std::string& name, const std::string& type,
                                  const Fields& arguments) {
  Table args(&arguments);
  amqp_exchange_declare(state_->conn, kChannel, bytes(name), bytes(type), 0, 1, 0, 0, args.get());
  check_reply("declare exchange '" + name + "'");
}

std::uint32_t Connection::declare_queue(const std::string& name, const Fields& arguments) {
  Table args(&arguments);
  const amqp_queue_declare_ok_t* ok =
      amqp_queue_declare(state_->conn, kChannel, bytes(name), 0, 1, 0, 0, args.get());
  check_reply("declare queue '" + name + "'");
  return ok->message_count;
}

std::uint32_t Connection::queue_depth(const std::string& name) {
  return queue_state(name).ready;
}

QueueState Connection::queue_state(const std::string& name) {
  const amqp_queue_declare_ok_t* ok =
      amqp_queue_declare(state_->conn, kChannel, bytes(name), 1, 0, 0, 0, amqp_empty_table);
  check_reply("find queue '" + name + "'");
  return QueueState{.ready = ok->message_count, .consumers = ok->consumer_count};
}

void Connection::bind(const std::string& queue, const std::string& exchange,
                      const std::string& key) {
  amqp_queue_bind(state_->conn, kChannel, bytes(queue), bytes(exchange), bytes(key),
                  amqp_empty_table);
  check_reply("bind queue '" + queue + "' to '" + exchange + "'");
}

void Connection::bind_exchange(const std::string& destination, const std::string& source,
                               const std::string& key) {
  amqp_exchange_bind(state_->conn, kChannel, bytes(destination), bytes(source), bytes(key),
                     amqp_empty_table);
  check_reply("bind exchange '" + destination + "' to '" + source + "'");
}

void Connection::delete_queue(const std::string& name) {
  amqp_queue_delete(state_->conn, kChannel, bytes(name), 0, 0);
  check_reply("delete queue '" + name + "'");
}

void Connection::enable_confirms() {
  if (confirms_) return;  // the broker's numbering goes on: so must ours
  amqp_confirm_select(state_->conn, kChannel);
  check_reply("turn publisher confirms on");
  published_ = settled_ = 0;
  confirms_ = true;
}

std::uint64_t Connection::publish(const std::string& exchange, const std::string& key,
                                  const Outgoing& m) {
  Table headers(m.headers);
  amqp_basic_properties_t p{};
  p._flags = AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_TIMESTAMP_FLAG;
  p.delivery_mode = 2;
  p.timestamp = static_cast<std::uint64_t>(m.timestamp);
  if (!m.type.empty()) {
    p._flags |= AMQP_BASIC_TYPE_FLAG;
    p.type = bytes(m.type);
  }
  if (!m.message_id.empty()) {
    p._flags |= AMQP_BASIC_MESSAGE_ID_FLAG;
    p.message_id = bytes(m.message_id);
  }
  // Its confirm number, so that a basic.return names the publish it returns: the broker may
  // send other publishes' acks between a return and the ack of the returned one.
  const std::string number = confirms_ ? std::to_string(published_ + 1) : std::string();
  if (confirms_) {
    p._flags |= AMQP_BASIC_CORRELATION_ID_FLAG;
    p.correlation_id = bytes(number);
  }
  if (m.headers != nullptr) {
    p._flags |= AMQP_BASIC_HEADERS_FLAG;
    p.headers = headers.get();
  }
  // mandatory: a message no queue takes comes back (basic.return) and counts as refused.
  const int rc = amqp_basic_publish(state_->conn, kChannel, bytes(exchange), bytes(key), 1, 0, &p,
                                    bytes(m.body));
  if (rc != AMQP_STATUS_OK) fail("publish to '" + exchange + "'", amqp_error_string2(rc));
  return ++published_;
}

void Connection::settle(std::uint64_t tag, bool multiple, bool nacked) {
  // A returned publish is refused whatever its ack says (its number leaves `returned_` here).
  const auto refused = [&](std::uint64_t n) { return returned_.erase(n) != 0 || nacked; };
  if (multiple) {
    for (std::uint64_t n = settled_ + 1; n <= tag; ++n) {
      auto it = settled_above_.find(n);
      if (it == settled_above_.end() ? refused(n) : it->second) nacked_.push_back(n);
    }
    settled_above_.erase(settled_above_.begin(), settled_above_.upper_bound(tag));
    settled_ = std::max(settled_, tag);
  } else if (tag > settled_) {
    settled_above_.emplace(tag, refused(tag));
  }
  for (auto it = settled_above_.begin(); it != settled_above_.end() && it->first == settled_ + 1;
       it = settled_above_.erase(it)) {
    if (it->second) nacked_.push_back(it->first);
    ++settled_;
  }
}

void Connection::on_frame(const void* f, std::string_view what) {
  const auto& frame = *static_cast<const amqp_frame_t*>(f);
  if (frame.frame_type != AMQP_FRAME_METHOD) return;
  switch (frame.payload.method.id) {
    case AMQP_BASIC_ACK_METHOD: {
      const auto* a = static_cast<const amqp_basic_ack_t*>(frame.payload.method.decoded);
      settle(a->delivery_tag, a->multiple != 0, false);
      break;
    }
    case AMQP_BASIC_NACK_METHOD: {
      const auto* n = static_cast<const amqp_basic_nack_t*>(frame.payload.method.decoded);
      settle(n->delivery_tag, n->multiple != 0, true);
      break;
    }
    case AMQP_BASIC_RETURN_METHOD: {
      // The message follows (a header and body frames): its correlation id is its confirm
      // number (publish() sets it), whose ack then counts as a refusal: no queue took it.
      amqp_message_t message;
      const amqp_rpc_reply_t r = amqp_read_message(state_->conn, kChannel, &message, 0);
      if (r.reply_type != AMQP_RESPONSE_NORMAL) fail(what, "the connection broke");
      std::uint64_t number = 0;
      if ((message.properties._flags & AMQP_BASIC_CORRELATION_ID_FLAG) != 0) {
        const std::string id = text(message.properties.correlation_id);
        std::from_chars(id.data(), id.data() + id.size(), number);
      }
      amqp_destroy_message(&message);
      if (number > settled_) returned_.insert(number);
      break;
    }
    case AMQP_BASIC_CANCEL_METHOD:
      // consumer_cancel_notify: the queue this connection consumes went away.
      fail(what, "the broker cancelled the consumer: its queue was deleted or became unavailable");
    case AMQP_CHANNEL_CLOSE_METHOD: {
      const auto* c = static_cast<const amqp_channel_close_t*>(frame.payload.method.decoded);
      fail(what,
           "the broker closed the channel: " + std::to_string(c->reply_code) + " " +
               text(c->reply_text),
           c->reply_code);
    }
    case AMQP_CONNECTION_CLOSE_METHOD: {
      const auto* c = static_cast<const amqp_connection_close_t*>(frame.payload.method.decoded);
      fail(what,
           "the broker closed the connection: " + std::to_string(c->reply_code) + " " +
               text(c->reply_text),
           c->reply_code);
    }
    default:
      break;
  }
}

void Connection::poll() {
  for (;;) {
    amqp_frame_t frame;
    timeval none{0, 0};
    const int rc = amqp_simple_wait_frame_noblock(state_->conn, &frame, &none);
    if (rc == AMQP_STATUS_TIMEOUT) break;
    if (rc != AMQP_STATUS_OK) fail("keep its connection", amqp_error_string2(rc));
    on_frame(&frame, "keep its connection");
  }
  amqp_maybe_release_buffers(state_->conn);
}

std::vector<std::uint64_t> Connection::wait_confirms(std::uint64_t upto, Duration timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (settled_ < upto) {
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= decltype(left)::zero())
      fail("confirm its messages", "no confirm for message " + std::to_string(settled_ + 1) +
                                       " within " + std::to_string(timeout.count() / 1'000'000) +
                                       " ms");
    amqp_frame_t frame;
    timeval tv = to_timeval(std::chrono::duration_cast<Duration>(left));
    const int rc = amqp_simple_wait_frame_noblock(state_->conn, &frame, &tv);
    if (rc == AMQP_STATUS_TIMEOUT) continue;
    if (rc != AMQP_STATUS_OK) fail("confirm its messages", amqp_error_string2(rc));
    on_frame(&frame, "confirm its messages");
  }
  amqp_maybe_release_buffers(state_->conn);
  return take_refused(upto);
}

std::vector<std::uint64_t> Connection::take_refused(std::uint64_t upto) {
  std::vector<std::uint64_t> out;
  auto mid =
      std::partition(nacked_.begin(), nacked_.end(), [upto](std::uint64_t n) { return n > upto; });
  out.assign(mid, nacked_.end());
  nacked_.erase(mid, nacked_.end());
  return out;
}

void Connection::consume(const std::string& queue, std::uint16_t prefetch) {
  amqp_basic_qos(state_->conn, kChannel, 0, prefetch, 0);
  check_reply("set the prefetch of '" + queue + "'");
  amqp_basic_consume(state_->conn, kChannel, bytes(queue), amqp_empty_bytes, 0, 0, 0,
                     amqp_empty_table);
  check_reply("consume from '" + queue + "'");
}

std::optional<Delivery> Connection::next(Duration timeout) {
  amqp_maybe_release_buffers(state_->conn);
  amqp_envelope_t envelope;
  timeval tv = to_timeval(timeout);
  const amqp_rpc_reply_t r = amqp_consume_message(state_->conn, &envelope, &tv, 0);
  if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_TIMEOUT)
    return std::nullopt;
  if (r.reply_type != AMQP_RESPONSE_NORMAL) {
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
        r.library_error == AMQP_STATUS_UNEXPECTED_STATE) {
      // A frame other than a delivery: on_frame fails on a close with the broker's code and
      // reason (consumer_timeout's, say); anything else is read and dropped.
      amqp_frame_t frame;
      if (amqp_simple_wait_frame(state_->conn, &frame) != AMQP_STATUS_OK)
        fail("receive", "the connection broke");
      on_frame(&frame, "receive");
      return std::nullopt;
    }
    fail("receive", r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION
                        ? amqp_error_string2(r.library_error)
                        : "the broker refused");
  }
  Delivery d;
  d.tag = envelope.delivery_tag;
  d.redelivered = envelope.redelivered != 0;
  d.routing_key = text(envelope.routing_key);
  d.body = text(envelope.message.body);
  const amqp_basic_properties_t& p = envelope.message.properties;
  if (p._flags & AMQP_BASIC_TYPE_FLAG) d.type = text(p.type);
  if (p._flags & AMQP_BASIC_MESSAGE_ID_FLAG) d.message_id = text(p.message_id);
  if (p._flags & AMQP_BASIC_TIMESTAMP_FLAG) d.timestamp = static_cast<std::int64_t>(p.timestamp);
  if (p._flags & AMQP_BASIC_HEADERS_FLAG) d.headers = fields(p.headers);
  amqp_destroy_envelope(&envelope);
  return d;
}

void Connection::ack(std::uint64_t tag) {
  if (const int rc = amqp_basic_ack(state_->conn, kChannel, tag, 0); rc != AMQP_STATUS_OK)
    fail("ack delivery " + std::to_string(tag), amqp_error_string2(rc));
}

int Connection::fd() const noexcept {
  return amqp_get_sockfd(state_->conn);
}

bool Connection::buffered() const noexcept {
  return amqp_frames_enqueued(state_->conn) != 0 || amqp_data_in_buffer(state_->conn) != 0;
}

void Connection::nack(std::uint64_t tag, bool requeue) {
  if (const int rc = amqp_basic_nack(state_->conn, kChannel, tag, 0, requeue ? 1 : 0);
      rc != AMQP_STATUS_OK)
    fail("nack delivery " + std::to_string(tag), amqp_error_string2(rc));
}

}  // namespace rail::detail::amqp
