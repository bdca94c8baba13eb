// rail::amqp::Consumer's untyped core: see include/rail/amqp.hpp.
//
// One I/O thread owns two connections (rabbitmq-c's are single-threaded): `in` consumes the
// broker queue, `out` publishes retries and dead letters with confirms. Observers hand local
// ends over through a locked inbox and wake the thread (an eventfd) when it was empty; the
// thread sleeps in poll(2) on that and both sockets. A message is acked only after what
// replaces it (its retry, its dead letter) was confirmed: a crash in between delivers it
// again. Those publishes are pipelined: each waits in `unconfirmed`, in publish order, until
// the broker's confirm (read as it comes) lets its message be acked.
// Heartbeats: rabbitmq-c sends them only from inside its calls, so the thread polls `out` every
// turn (`in` is read every turn anyway).
// Reconnects: a dead `out` is replaced alone (`in`'s tags stay valid); a dead `in` is replaced
// with a new generation: the broker requeued its unacked deliveries, whose local jobs still
// end: their settles find a stale generation and are skipped (the redelivery runs the job
// again: at-least-once). A settle that fails stays in the inbox and is tried again.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <iterator>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "rail/amqp.hpp"
#include "rail/backoff.hpp"
#include "rail/detail/amqp_headers.hpp"
#include "rail/detail/amqp_topology.hpp"
#include "rail/error.hpp"

namespace rail::amqp::detail {
namespace amqp = rail::detail::amqp;

namespace {

/// A delivery held while its local job runs.
struct Held {
  std::uint64_t tag = 0;
  std::uint64_t generation = 0;  // the `in` connection it came on
  amqp::Delivery message;
  // A dead-lettered job's local errors, taken from its local DLQ entry once (Bridged::forget).
  std::optional<std::vector<AttemptError>> local_errors;
};

}  // namespace

constexpr int kDeliveriesPerTurn = 256;

struct Relay::State {
  BrokerOptions broker;
  std::string queue;
  BrokerQueueOptions options;
  std::uint16_t prefetch;
  Bridged& bridged;
  amqp::Address address;
  // Given to each ungrouped job: its short retries stay here (null: none do).
  std::shared_ptr<rail::detail::RetryHere> retry_here;

  std::mutex mu;              // guards inbox
  std::vector<Settle> inbox;  // local ends not settled yet
  // Written by settle() when the inbox gets its first end, read (reset) by the I/O thread before
  // it drains the inbox: no end waits for a poll timeout. -1 (no eventfd): the 5 ms polls find
  // them.
  int wake = -1;
  // release by ~Relay, acquire by the thread's loop: the flag publishes nothing else (the join
  // orders everything after it).
  std::atomic<bool> stop{false};
  std::thread thread;

  // The I/O thread's own.
  std::optional<amqp::Connection> in, out;
  std::uint64_t generation = 0;
  std::unordered_map<JobId, Held> held;
  std::deque<amqp::Delivery> parked;  // delivered while the local queue had no room, in order
  std::chrono::steady_clock::time_point parked_tried{};
  bool local_closed = false;  // the local queue is shutting down: consume no more
  // drain's pipelining: a retry or dead letter published without waiting: its number.
  bool pipelining = false;
  std::uint64_t pipelined_upto = 0;
  /// A published retry or dead letter whose confirm has not come yet, and the end it settles.
  struct Unconfirmed {
    std::uint64_t number;  // on `out`
    Settle settle;
    std::chrono::steady_clock::time_point at;
  };
  // In publish order; the broker may confirm out of order, and an entry is settled once every
  // number up to its own is (Connection::confirmed_upto).
  std::deque<Unconfirmed> unconfirmed;
  std::vector<std::uint64_t> refused;  // numbers on `out` the broker refused, not handled yet
  bool careful = false;  // `out` died with publishes unconfirmed: settle one at a time
  // The broker refused a retry or dead letter and none of its publishes was confirmed since:
  // the thread's backoff keeps growing between turns (to 1 s) rather than starting over.
  bool refusing = false;

  State(BrokerOptions b, std::string q, BrokerQueueOptions o, std::uint16_t p, Bridged& br)
      : broker(std::move(b)), queue(std::move(q)), options(o), prefetch(p), bridged(br) {}
  ~State() {
    if (wake >= 0) ::close(wake);
  }
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  /// open_out(): the publishing connection, with the queue's broker objects declared.
  void open_out() {
    out.emplace(address, broker.heartbeat, broker.name + " relay of " + queue);
    amqp::declare_all(*out, topology());
    out->enable_confirms();
  }

  [[nodiscard]] amqp::QueueTopology topology() const {
    return amqp::QueueTopology{.queue = queue,
                               .max_length = options.max_length,
                               .delivery_limit = options.delivery_limit,
                               .partitions = options.partitions};
  }

  /// reconnect(): a new consuming connection (the dead one's deliveries were requeued by the
  /// broker, so theirs settle as stale) and, if it failed too, a new publishing one. A failed
  /// publishing connection alone leaves the consumer and its tags as they are.
  /// drop_in(): the consuming connection goes: the broker requeues its unacked deliveries and
  /// may hand them (a partition's among them) to another process at once. Their local jobs are
  /// cancelled here, so that none runs on beside its redelivery (a group's later job before an
  /// earlier one's retry, or two of a group at once); their ends then settle as stale.
  void drop_in() {
    in.reset();
    parked.clear();
    ++generation;
    for (const auto& [id, h] : held)
      if (h.generation != generation) bridged.cancel(id);
  }

  void reconnect() {
    if (!out || !out->ok()) {
      // Whatever was not confirmed is published again on the new connection (at-least-once):
      // one at a time, in case one of them is what the broker closed the channel for.
      careful = careful || !unconfirmed.empty();
      requeue_unconfirmed();
      out.reset();
      open_out();
    }
    if (local_closed || (in && in->ok())) return;
    drop_in();
    in.emplace(address, broker.heartbeat, broker.name + " consumer of " + queue);
    // Declared again (idempotent): a queue deleted under the consumer (its basic.cancel ended
    // the last connection) comes back before the subscription.
    amqp::declare_queue(*in, topology());
    in->consume(amqp::jobs_queue(queue), prefetch);
    for (std::uint32_t n = 0; n < options.partitions; ++n)  // the broker makes one process active
      in->consume(amqp::partition_queue(queue, n), prefetch);
  }

  void run() {
    auto backoff = std::chrono::milliseconds(50);
    while (!stop.load(std::memory_order_acquire)) {
      try {
        if (!out || !out->ok() || (!local_closed && (!in || !in->ok()))) reconnect();
        wait_for_work();
        out->poll();  // confirms, and its heartbeats while nothing is published
        settle_confirmed();
        if (in) {
          retry_parked();
          // What the broker delivered, a turn's worth at most, before the ends are settled.
          for (int n = 0; n < kDeliveriesPerTurn && in; ++n) {
            // A zero timeout still checks the broker's heartbeats (rabbitmq-c 0.11: it means
            // "now"; Debian 12 ships 0.11.0).
            std::optional<amqp::Delivery> d = in->next(Duration{0});
            if (!d) break;
            try {
              if (!parked.empty() || !deliver(*d)) parked.push_back(std::move(*d));
            } catch (...) {
              // Not held and not acked: parked, tried again in order (its dead letter failed).
              parked.push_back(std::move(*d));
              throw;
            }
          }
        }
        drain();
        if (!refusing) backoff = std::chrono::milliseconds(50);
      } catch (const std::exception&) {
        // A broker failure marked its connection dead (reconnect() replaces it); a refused
        // publish (capacity) left its settle in the inbox: either way, try again after a wait.
        std::this_thread::sleep_for(backoff);
        backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
      }
    }
    // The ends that came in, acked before the connections close once their publishes are
    // confirmed; whatever stays unsettled, the broker delivers again. Not on a publishing
    // connection that is gone or dead (a confirm timeout, a failed reconnect).
    if (!out || !out->ok()) return;
    try {
      drain();
    } catch (const std::exception&) {
    }
    try {
      if (!unconfirmed.empty() && out->ok()) {
        const std::vector<std::uint64_t> no =
            out->wait_confirms(unconfirmed.back().number, broker.confirm_timeout);
        refused.insert(refused.end(), no.begin(), no.end());
        settle_confirmed();
      }
    } catch (const std::exception&) {
    }
  }

  /// wait_for_work(): up to 5 ms in poll(2) until a socket has frames or an end came in.
  void wait_for_work() {
    if ((in && in->buffered()) || out->buffered()) return;
    pollfd fds[3] = {{wake, POLLIN, 0}, {out->fd(), POLLIN, 0}, {in ? in->fd() : -1, POLLIN, 0}};
    if (::poll(fds, 3, 5) > 0 && (fds[0].revents & POLLIN) != 0) {
      std::uint64_t count;
      (void)!::read(wake, &count, sizeof count);  // reset: drain() below takes every end
    }
  }

  /// requeue_unconfirmed(): the ends whose publishes were not confirmed go back to the front of
  /// the inbox, to be published again (their connection is going).
  void requeue_unconfirmed() {
    if (!unconfirmed.empty()) {
      const std::lock_guard lock(mu);
      std::vector<Settle> again;
      again.reserve(unconfirmed.size() + inbox.size());
      for (Unconfirmed& u : unconfirmed)
        again.push_back(std::move(u.settle));
      std::move(inbox.begin(), inbox.end(), std::back_inserter(again));
      inbox.swap(again);
    }
    unconfirmed.clear();
    refused.clear();  // the next connection numbers its publishes from 1
  }

  /// settle_confirmed(): acks the messages whose retries and dead letters the broker confirmed.
  /// A refused one (a full queue) goes back to the inbox, and the throw makes the thread wait
  /// before it publishes again; one unconfirmed past confirm_timeout drops the publishing
  /// connection.
  void settle_confirmed() {
    if (unconfirmed.empty()) return;
    const std::uint64_t upto = out->confirmed_upto();
    const std::vector<std::uint64_t> no = out->take_refused(upto);
    refused.insert(refused.end(), no.begin(), no.end());
    std::vector<Settle> again;
    const auto hand_back = [&] {  // the refused ends, to be published again
      const std::lock_guard lock(mu);
      inbox.insert(inbox.begin(), std::make_move_iterator(again.begin()),
                   std::make_move_iterator(again.end()));
    };
    try {
      while (!unconfirmed.empty() && unconfirmed.front().number <= upto) {
        Unconfirmed u = std::move(unconfirmed.front());
        unconfirmed.pop_front();
        if (const auto r = std::find(refused.begin(), refused.end(), u.number);
            r != refused.end()) {
          refused.erase(r);
          again.push_back(std::move(u.settle));
        } else {
          refusing = false;  // the broker takes publishes again
          ack(u.settle.local);
        }
      }
    } catch (...) {
      hand_back();
      throw;
    }
    if (!again.empty()) {
      hand_back();
      refusing = true;
      throw Error(ErrorCode::capacity, "the broker refused a retry or dead letter of queue '" +
                                           queue + "' (no queue took it, or it was full)");
    }
    if (!unconfirmed.empty() &&
        std::chrono::steady_clock::now() - unconfirmed.front().at > broker.confirm_timeout) {
      careful = true;  // in case one of them is what keeps the broker from confirming
      requeue_unconfirmed();
      out.reset();  // replaced by the next turn
      throw Error(ErrorCode::broker, "the broker confirmed no retry or dead letter of queue '" +
                                         queue + "' within confirm_timeout");
    }
  }

  /// ack(id): acks the message of local job id, settled; a message of a connection that is gone
  /// is only forgotten (the broker delivers it again).
  void ack(JobId id) {
    const auto it = held.find(id);
    if (it == held.end()) return;
    const Held h = std::move(it->second);
    held.erase(it);  // first: a failing ack leaves the connection dead, and the broker has it
    if (h.generation == generation && in && in->ok()) in->ack(h.tag);
  }

  /// retry_parked(): every 20 ms, the parked deliveries into the local queue, in order, as far
  /// as it has room.
  void retry_parked() {
    if (parked.empty()) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - parked_tried < std::chrono::milliseconds(20)) return;
    parked_tried = now;
    // deliver() may drop the connection and with it every parked delivery (shutting_down).
    while (in && !parked.empty() && deliver(parked.front()))
      if (!parked.empty()) parked.pop_front();
  }

  /// deliver(d): a message into the local queue (taken from d), or straight to the DLQ if it
  /// cannot be read or added; false when the local queue is full now: the caller parks it.
  /// Parked, not handed back: a requeue would come straight back (a hot loop, and each one
  /// counts against the queue's x-delivery-limit). A local queue shutting down closes the
  /// consumer: the broker gives its deliveries to other processes.
  bool deliver(amqp::Delivery& d) {
    const std::string codec = amqp::header_text(d.headers, amqp::kCodecHeader);
    if (codec != bridged.codec()) {
      dead_letter(d, "codec_mismatch",
                  "the message was encoded by codec '" + codec + "'; this consumer reads '" +
                      bridged.codec() + "'");
      in->ack(d.tag);
      return true;
    }
    JobOptions o;
    o.max_attempts =
        std::max<std::uint32_t>(amqp::header_count(d.headers, amqp::kMaxAttemptsHeader, 1), 1);
    o.backoff = amqp::parse_backoff(amqp::header_text(d.headers, amqp::kBackoffHeader));
    if (const std::int64_t v = amqp::header_int(d.headers, amqp::kVisibilityHeader, -1); v > 0)
      o.visibility_timeout = std::chrono::milliseconds(v);
    if (const std::int64_t t = amqp::header_int(d.headers, amqp::kTimeoutHeader, -1); t > 0)
      o.timeout = std::chrono::milliseconds(t);
    rail::detail::Resumed r;
    r.failed_attempts = amqp::header_count(d.headers, amqp::kAttemptHeader, 0);
    r.deliveries = amqp::header_count(d.headers, amqp::kDeliveriesHeader, 0);
    r.stalls = amqp::header_count(d.headers, amqp::kStallsHeader, 0);
    r.previous_delay = Duration{
        std::max<std::int64_t>(0, amqp::header_int(d.headers, amqp::kPreviousDelayHeader, 0))};
    r.errors = amqp::header_errors(d.headers, r.failed_attempts);
    // A group's job retries here, holding its delivery and its group's turn: its next attempt
    // comes before the group's later jobs, which wait here or in its partition behind it.
    o.group = amqp::header_text(d.headers, amqp::kGroupHeader);
    r.forward = o.group.empty();
    if (r.forward) r.retry_here = retry_here;
    Taken taken;
    try {
      taken = bridged.add(d.type, std::as_bytes(std::span(d.body.data(), d.body.size())), o, r);
    } catch (const std::exception& e) {
      dead_letter(d, "refused", std::string("the local queue refused the job: ") + e.what());
      in->ack(d.tag);
      return true;
    }
    if (!taken.malformed.empty()) {
      dead_letter(d, "malformed", "its codec could not read the body: " + taken.malformed);
      in->ack(d.tag);
      return true;
    }
    switch (taken.status) {
      case AddStatus::full:
        return false;
      case AddStatus::shutting_down:
        local_closed = true;
        drop_in();  // every unsettled delivery goes back to the broker
        return true;
      default:  // added, or dead_lettered by the local queue's OnFull: its end settles it
        break;
    }
    const std::uint64_t tag = d.tag;
    held.emplace(taken.id, Held{tag, generation, std::move(d), std::nullopt});
    return true;
  }

  /// drain(): settles the local ends that came in: a completion's message is acked now; a
  /// retry's or dead letter's once its publish is confirmed (unconfirmed; careful: before the
  /// next end). One that fails (and those after it) waits in the inbox for the next turn.
  void drain() {
    std::vector<Settle> ends;
    {
      const std::lock_guard lock(mu);
      ends.swap(inbox);
    }
    for (std::size_t i = 0; i < ends.size(); ++i) {
      try {
        // A permanent refusal (careful mode) closed the channel: the rest waits for the next
        // connection rather than for confirms that cannot come.
        if (!out->ok()) throw Error(ErrorCode::broker, "the publishing connection closed");
        pipelined_upto = 0;
        if (!settle(ends[i], !careful)) continue;
        if (pipelined_upto == 0) {
          ack(ends[i].local);
        } else {
          unconfirmed.push_back(
              {pipelined_upto, std::move(ends[i]), std::chrono::steady_clock::now()});
        }
      } catch (...) {
        const std::lock_guard lock(mu);
        inbox.insert(inbox.begin(), std::make_move_iterator(ends.begin() + static_cast<long>(i)),
                     std::make_move_iterator(ends.end()));
        throw;
      }
    }
    careful = false;
  }

  /// settle(s, pipelined): the message of local job s.local, by its end; true when it is to be
  /// acked (its retry or dead letter published and, unless `pipelined`, confirmed; pipelined:
  /// its number is pipelined_upto). Its held record goes only once the message is acked, so a
  /// failure leaves everything to try again.
  bool settle(const Settle& s, bool pipelined) {
    auto it = held.find(s.local);
    if (it == held.end()) return false;  // not a bridged job (a local add), or settled already
    // No local copy stays; its errors are every attempt's, here and before (taken once).
    if (s.kind == EventKind::dead_lettered && !it->second.local_errors)
      it->second.local_errors = bridged.forget(s.local);
    if (it->second.generation != generation || !in || !in->ok()) {
      held.erase(it);  // its connection is gone: the broker redelivers it
      return false;
    }
    const Held& h = it->second;
    if (s.kind == EventKind::dead_lettered || s.kind == EventKind::forwarded) {
      pipelining = pipelined;
      try {
        if (s.kind == EventKind::forwarded) {
          retry(h.message, s);
        } else {
          dead_letter(h.message, std::string(to_string(s.reason)), s.error, s.attempt,
                      *h.local_errors);
        }
        pipelining = false;
      } catch (const amqp::Refused& r) {
        pipelining = false;
        if (!r.permanent() || pipelined) throw;
        // The broker will never take this publish (a message too large, say): the message
        // itself goes to the queue's dead-letter exchange as it was, without rail's headers.
        in->nack(h.tag, false);
        held.erase(it);
        return false;
      } catch (...) {
        pipelining = false;
        throw;
      }
    }
    return true;
  }

  /// with_error(headers, attempt, error): the headers with attempt `attempt`'s error added,
  /// cut to kMaxErrorBytes so that a long log stays within the broker's frame size.
  static amqp::Fields with_error(amqp::Fields headers, std::uint32_t attempt,
                                 const std::string& error) {
    constexpr std::size_t kMaxErrorBytes = 1024;
    amqp::set_header(headers, amqp::error_key(attempt),
                     error.size() <= kMaxErrorBytes ? error : error.substr(0, kMaxErrorBytes));
    return headers;
  }

  void publish_confirmed(const std::string& exchange, const std::string& key,
                         const amqp::Delivery& m, const amqp::Fields& headers) {
    const std::uint64_t n = out->publish(exchange, key,
                                         {.body = m.body,
                                          .type = m.type,
                                          .message_id = m.message_id,
                                          .timestamp = m.timestamp,
                                          .headers = &headers});
    if (pipelining) {
      pipelined_upto = n;  // drain waits for it with the rest
      return;
    }
    confirmed(n);
  }

  /// confirmed(n): waits for the confirm of publish n (and of every one before it: the refusals
  /// of those stay in `refused` for settle_confirmed); throws Error(capacity) if the broker
  /// refused n.
  void confirmed(std::uint64_t n) {
    const std::vector<std::uint64_t> no = out->wait_confirms(n, broker.confirm_timeout);
    refused.insert(refused.end(), no.begin(), no.end());
    if (const auto r = std::find(refused.begin(), refused.end(), n); r != refused.end()) {
      refused.erase(r);
      throw Error(ErrorCode::capacity, "the broker refused a retry or dead letter of queue '" +
                                           queue + "' (no queue took it, or it was full)");
    }
  }

  /// retry(m, s): message m again, as the local queue forwarded its job (s): its counters and
  /// the new error in its headers, through the cascade after s.delay.
  void retry(const amqp::Delivery& m, const Settle& s) {
    const std::uint32_t failed = s.attempt > 0 ? s.attempt - 1 : 0;
    // A failure logs its error under its attempt, and its wait is the one decorrelated jitter
    // goes on from; a lapse that cost no attempt changes neither.
    const bool new_failure = failed > amqp::header_count(m.headers, amqp::kAttemptHeader, 0);
    amqp::Fields headers = new_failure ? with_error(m.headers, failed, s.error) : m.headers;
    amqp::set_header(headers, amqp::kAttemptHeader, std::int64_t{failed});
    amqp::set_header(headers, amqp::kDeliveriesHeader, std::int64_t{s.deliveries});
    amqp::set_header(headers, amqp::kStallsHeader, std::int64_t{s.stalls});
    if (new_failure)
      amqp::set_header(headers, amqp::kPreviousDelayHeader, std::int64_t{s.delay.count()});
    // Through the cascade even for no delay (1 ms): its at-least-once dead-lettering waits for
    // room in a full queue, where a publish straight to it would be refused.
    const auto ms = std::max<std::uint64_t>(
        1,
        static_cast<std::uint64_t>(std::chrono::ceil<std::chrono::milliseconds>(s.delay).count()));
    if (ms > amqp::kMaxDelayMs) {
      // The cascade would deliver it early (a retry_in or a backoff past its longest wait): the
      // job dies instead, saying so, as a backoff that stops does.
      amqp::Delivery last = m;
      last.headers = std::move(headers);
      dead_letter(last, std::string(to_string(DeadLetterReason::backoff_stopped)),
                  "the retry's delay of " + std::to_string(ms) +
                      " ms is longer than a broker queue's longest, " +
                      std::to_string(amqp::kMaxDelayMs) + " ms (49.5 days)",
                  failed);
      return;
    }
    publish_confirmed(amqp::delay_entry(ms), amqp::delay_route(ms, queue), m, headers);
  }

  /// dead_letter(m, reason, error, failed): message m to the queue's DLQ, its job's `failed`
  /// attempts counted; an error that no new failed attempt logs is its x-rail-error.
  void dead_letter(const amqp::Delivery& m, const std::string& reason, const std::string& error,
                   std::uint32_t failed = 0, const std::vector<AttemptError>& errors = {}) {
    const bool new_failure = failed > amqp::header_count(m.headers, amqp::kAttemptHeader, 0);
    amqp::Fields headers = new_failure ? with_error(m.headers, failed, error) : m.headers;
    // The local log: the attempts that failed here too; the last kMaxErrorHeaders of them, so
    // that the headers stay within the broker's frame (each error is cut to 1 KiB too).
    constexpr std::size_t kMaxErrorHeaders = 32;
    const std::size_t skip =
        errors.size() > kMaxErrorHeaders ? errors.size() - kMaxErrorHeaders : 0;
    for (std::size_t i = skip; i < errors.size(); ++i)
      headers = with_error(std::move(headers), errors[i].attempt, errors[i].message);
    amqp::set_header(headers, amqp::kReasonHeader, reason);
    if (!new_failure) amqp::set_header(headers, amqp::kErrorHeader, error);
    amqp::set_header(
        headers, amqp::kAttemptHeader,
        std::int64_t{std::max(failed, amqp::header_count(m.headers, amqp::kAttemptHeader, 0))});
    publish_confirmed(std::string(amqp::kDeadLetters), queue, m, headers);
  }
};

Relay::Relay(BrokerOptions broker, std::string queue, BrokerQueueOptions options,
             const ConsumerOptions& consumer, Bridged& bridged) {
  check_broker(broker);
  if (consumer.retry_here_within < Duration{0})
    throw Error(ErrorCode::invalid_option,
                "ConsumerOptions.retry_here_within is " +
                    std::to_string(consumer.retry_here_within.count()) +
                    " ns; expected 0 (every retry goes back to the broker) or more");
  const std::uint16_t prefetch = std::max<std::uint16_t>(consumer.prefetch, 1);
  state_ = std::make_unique<State>(std::move(broker), std::move(queue), options, prefetch, bridged);
  if (consumer.retry_here_within > Duration{0}) {
    const int places =
        consumer.retry_here_max != 0 ? consumer.retry_here_max : std::max(prefetch / 2, 1);
    state_->retry_here =
        std::make_shared<rail::detail::RetryHere>(consumer.retry_here_within, places);
  }
  state_->address = amqp::parse_url(state_->broker.url);
  state_->wake = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);  // -1: polled every 5 ms instead
  // The first connection here, so that a broker that cannot be reached or a queue declared
  // otherwise is the constructor's error; later ones are the I/O thread's.
  state_->open_out();
  state_->out.reset();
}

Relay::~Relay() {
  state_->stop.store(true, std::memory_order_release);
  if (state_->thread.joinable()) state_->thread.join();
}

void Relay::start() {
  // Subscribed before the constructor returns (its thread owns the connections from its start
  // on): a consumer created after this one is behind it for every single-active-consumer
  // partition, and a broker that refuses the subscription is the constructor's error.
  state_->reconnect();
  state_->thread = std::thread([s = state_.get()] { s->run(); });
}

void Relay::settle(Settle s) {
  const std::lock_guard lock(state_->mu);
  state_->inbox.push_back(std::move(s));
  if (state_->inbox.size() == 1 && state_->wake >= 0) {
    const std::uint64_t one = 1;
    (void)!::write(state_->wake, &one, sizeof one);  // the I/O thread drains the inbox
  }
}

}  // namespace rail::amqp::detail
