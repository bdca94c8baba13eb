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
//   broker's delay cascade, never less than asked, at most 0.8% more; up to 49.5 days). A
//   custom backoff is the consuming process's QueueOptions::custom_backoff (a consumer whose
//   local queue has none dead-letters the job, "refused", saying so). A group
//   sends the job to its group's partition queue (BrokerQueueOptions::partitions), where one
//   process at a time takes the group's jobs in add order (a group refuses a delay). The
//   options that need one process's view of every job (dedup, tenant, priority, after,
//   expire_after, downstream) are refused with Error(invalid_option) naming the option.
// - Threads: any; adds on one Producer share its connection one at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rail/add_receipt.hpp"
#include "rail/clock.hpp"
#include "rail/dead_letter.hpp"
#include "rail/detail/resumed.hpp"
#include "rail/engine.hpp"
#include "rail/journal_codec.hpp"
#include "rail/options.hpp"
#include "rail/queue.hpp"

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
  /// kills its process each time (rail counts attempts itself). 0: no guard. A partition's
  /// requeues keep their place only with a limit set (RabbitMQ 3.10's quorum queues).
  std::uint32_t delivery_limit = 20;
  /// FIFO groups' partition queues (JobOptions::group): each group's jobs go to one, by a hash
  /// of the group, and one process at a time takes a partition's jobs, in order. 0: no groups.
  /// Every process must declare the same count: another one is refused (Error(broker)); the
  /// broker keeps it in exchange rail.partitions.<queue>.
  std::uint32_t partitions = 8;
};

/// ConsumerOptions: how a Consumer takes from the broker.
struct ConsumerOptions {
  /// Messages held unsettled at once (waiting or running in the local queue), per subscribed
  /// queue: RabbitMQ's prefetch, given to the jobs queue and to each partition. Keep the local
  /// queue's capacity at prefetch x (1 + partitions) or more, or a group held up by its
  /// backoff can fill it and park every other delivery behind it.
  std::uint16_t prefetch = 64;
  /// A failed attempt whose retry is due within this retries here: its job waits out the
  /// backoff in the local queue, holding its delivery, as NServiceBus's immediate retries and
  /// MassTransit's in-memory retries do; a longer wait goes back to the broker through the
  /// delay cascade. A retry here costs the broker nothing, where each cascade hop costs it about
  /// what a delivery does; but if this process dies meanwhile, the broker delivers the message
  /// again with the counters it carried, so the attempts made here since are not counted.
  /// Lapsed leases always go back; a timed-out attempt's retry is a retry. The delivery stays
  /// unacked meanwhile: keep the broker's consumer_timeout above a job's attempts times its
  /// longest wait here plus its run time. 0: every retry goes back to the broker.
  Duration retry_here_within = std::chrono::seconds(1);
  /// At most this many deliveries hold a retry here at once (0: half the prefetch, at least
  /// one), so that retries waiting here never take the whole prefetch from fresh messages; a
  /// retry past the limit goes back to the broker.
  std::uint16_t retry_here_max = 0;
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

/// check_broker(o): refuses BrokerOptions out of range (Error(invalid_option) naming the field).
void check_broker(const BrokerOptions& o);

/// Taken: what the local queue made of a delivery (Bridged::add).
struct Taken {
  AddStatus status = AddStatus::added;  // the local add's; full or shutting_down: not taken
  JobId id = 0;
  std::string malformed;  // not empty: the codec could not read the body (why); nothing added
};

/// Settle: a bridged job's local end, which settles its broker message.
struct Settle {
  JobId local = 0;
  // completed, discarded, cancelled, dead_lettered, or forwarded (its next attempt goes back)
  EventKind kind = EventKind::completed;
  DeadLetterReason reason = DeadLetterReason::none;
  std::string error;
  std::uint32_t attempt = 0;     // the event's: forwarded: the next attempt; else the last one
  std::uint32_t deliveries = 0;  // handler starts so far
  std::uint32_t stalls = 0;      // forwarded: lapsed leases so far
  Duration delay{0};             // forwarded: the wait before the next attempt
};

/// Bridged: the typed side a Relay hands deliveries to (Consumer<T, R>).
class Bridged {
 public:
  /// add(name, body, o, r): decodes body and resumes it in the local queue with the counters
  /// r (QueueFront::resume). Throws what the local add throws (a bad name, say).
  virtual Taken add(std::string_view name, std::span<const std::byte> body, const JobOptions& o,
                    const rail::detail::Resumed& r) = 0;
  /// forget(id): takes the local DLQ entry of job id (its end is settled on the broker); its
  /// errors, every failed attempt's (none if there is no entry).
  virtual std::vector<AttemptError> forget(JobId id) = 0;
  /// cancel(id): cancels local job id (its delivery went back to the broker).
  virtual void cancel(JobId id) = 0;
  /// codec(): JournalCodec<T>::name().
  [[nodiscard]] virtual std::string codec() const = 0;

 protected:
  ~Bridged() = default;
};

/// Relay: Consumer's untyped core (src/amqp_relay.cpp): its I/O thread consumes the broker
/// queue into the local one and settles each message by its job's local end.
class Relay {
 public:
  /// Throws Error(invalid_option) for a negative consumer.retry_here_within.
  Relay(BrokerOptions broker, std::string queue, BrokerQueueOptions options,
        const ConsumerOptions& consumer, Bridged& bridged);
  ~Relay();  // stops the thread; unsettled messages go back to the broker queue
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  /// start(): subscribes (before it returns: see Consumer) and starts the I/O thread, once the
  /// caller observes the local ends. Throws Error(broker) if the subscription fails.
  void start();

  /// settle(s): a local end (an observer's call: never blocks).
  void settle(Settle s);

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

  /// check(o): refuses the JobOptions a broker queue cannot carry (Error(invalid_option) naming
  /// the option), as add() does.
  void check(const JobOptions& o) const { core_.check(o); }

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

/// BrokerDeadLetter: one dead letter of a broker queue, as DeadLetters::list reads it.
struct BrokerDeadLetter {
  JobId id = 0;      // the producer's id (the message id)
  std::string name;  // the job's name
  // to_string(DeadLetterReason), or what the consumer met before running it: codec_mismatch,
  // malformed (its codec could not read it), refused (the local queue refused the add); or the
  // broker's own: crash_loop (past BrokerQueueOptions::delivery_limit deliveries: a job that
  // ended every process that took it), rejected (a retry or dead letter the broker refused for
  // good sent the message on as it was)
  std::string reason;
  std::uint32_t failed_attempts = 0;
  std::uint32_t max_attempts = 0;
  std::vector<AttemptError> errors;  // each failed attempt's error, oldest first (`at` unset)
  std::string error;                 // why, when no failed attempt says it (codec_mismatch, ...)
  std::string body;                  // the payload, in its JournalCodec<T> bytes
  /// payload<T>(): the body decoded (throws what JournalCodec<T>::decode throws).
  template <JournalCodable T>
  [[nodiscard]] T payload() const {
    return JournalCodec<T>::decode(std::as_bytes(std::span(body.data(), body.size())));
  }
};

/// DeadLetters: a broker queue's dead letters (rail.dlq.<queue>), from any process: its depth,
/// list (the inspector: reads without taking), and redrive_all, which sends every one back to the
/// queue with its attempts and errors restarted (BullMQ's retry of a failed job), each acked off
/// the DLQ only once the broker confirmed it back (a crash in between leaves it in both:
/// at-least-once). redrive_all throws Error(capacity) if the queue is full, leaving the rest where
/// they were. Threads: one call at a time.
class DeadLetters {
 public:
  /// DeadLetters(broker, queue, options): options as the queue's processes declare it (a
  /// redriven group's job goes back to its partition).
  DeadLetters(BrokerOptions broker, std::string queue, BrokerQueueOptions options = {});
  ~DeadLetters();
  DeadLetters(const DeadLetters&) = delete;
  DeadLetters& operator=(const DeadLetters&) = delete;

  /// depth(): the dead letters waiting now.
  [[nodiscard]] std::uint32_t depth();
  /// list(max): up to `max` of the dead letters waiting now, oldest first, read and handed
  /// back to the DLQ untaken (their order there may change).
  [[nodiscard]] std::vector<BrokerDeadLetter> list(std::size_t max = 1000);
  /// redrive_all(): redrives the dead letters there when it began; how many it sent back.
  std::size_t redrive_all();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/// BrokerCounts: a broker queue's jobs as the broker holds them now, read from any process
/// (broker_counts). The counts of what ran (completed, retried, dead-lettered, forwarded, ...)
/// are each process's local queue's (Queue::counts, rail_* metrics): summed across processes by
/// whatever collects the metrics (Prometheus' sum()). What the broker cannot tell: the jobs
/// delivered and running (AMQP 0-9-1 counts only ready messages) and the delayed ones (the delay
/// cascade is shared by every queue of a vhost).
struct BrokerCounts {
  std::uint64_t waiting = 0;        // ready in the jobs queue and its partitions
  std::uint64_t dead_lettered = 0;  // in its DLQ (rail.dlq.<queue>)
  std::uint32_t consumers = 0;      // subscribed to its jobs queue: one per Consumer
};

/// broker_counts(broker, queue, options): BrokerCounts of `queue` (declared with `options`:
/// their partitions are counted). Throws Error(broker) if the broker cannot be reached or the
/// queue does not exist.
BrokerCounts broker_counts(const BrokerOptions& broker, const std::string& queue,
                           const BrokerQueueOptions& options = {});

/// Consumer<T, R>: bridges a broker queue into a local Queue<T, R> of the same name, whose
/// handlers and workers run the jobs as any local job (leases, timeouts, downstream limits,
/// events and counts are the local queue's). Each message becomes a local job that resumes
/// the broker job where it stands: its handler sees the job's own attempt(), max_attempts(),
/// last_error(), deliveries() and stalls(), and the local queue decides what follows, with its
/// backoff (custom_backoff and Outcome::retry_in included) and stall policy. Each job's local
/// end settles its message: completed, discarded or cancelled: acked. A failure with attempts
/// left whose retry is due within ConsumerOptions::retry_here_within retries here, as a local
/// job's does. Forwarded (a longer wait, or a lapsed lease: EventKind::forwarded): the job goes
/// back to the broker through the delay cascade, due after the local queue's delay, its
/// counters and error in the message, and any process may run its next attempt.
/// Dead-lettered (the last attempt, a permanent failure), or a body its codec cannot read: to
/// the broker DLQ (rail.dlq.<queue>) with its reason and every error; the local DLQ keeps no
/// copy. The message is acked only
/// after that publish was confirmed, so a crash in between runs the job again (at-least-once).
/// The local job has its own id; the producer's is the message id.
/// FIFO groups: the consumer also takes the partition queues; the broker makes one consumer
/// (process) active per partition, the first to subscribe (a Consumer has subscribed when its
/// constructor returns), and the next when it goes, so one
/// process may take every group while others take the ungrouped jobs. A group's job runs as a
/// local grouped job: its retries and lapses stay here, holding its delivery and its group's
/// turn, so a group's jobs start one at a time in add order across processes; when its process
/// goes, the broker hands the partition on with the unsettled jobs in their places.
template <JournalCodable T, class R = void>
class Consumer final : private detail::Bridged {
 public:
  Consumer(BrokerOptions broker, Engine& engine, Queue<T, R> local, BrokerQueueOptions options = {},
           ConsumerOptions consumer = {})
      : engine_(engine),
        local_(local),
        relay_(std::make_unique<detail::Relay>(std::move(broker), local_.name(), options, consumer,
                                               static_cast<detail::Bridged&>(*this))) {
    // Before the relay consumes: every bridged job's end reaches it.
    observer_ = engine_.on_event([relay = relay_.get(), name = local_.name()](const Event& e) {
      if (e.queue != name) return;
      switch (e.kind) {
        case EventKind::completed:
        case EventKind::discarded:
        case EventKind::cancelled:
        case EventKind::dead_lettered:
        case EventKind::forwarded:
          relay->settle(detail::Settle{.local = e.job_id,
                                       .kind = e.kind,
                                       .reason = e.reason,
                                       .error = std::string(e.error),
                                       .attempt = e.attempt,
                                       .deliveries = e.deliveries,
                                       .stalls = e.stalls,
                                       .delay = e.delay});
          break;
        default:
          break;
      }
    });
    try {
      relay_->start();
    } catch (...) {
      engine_.remove_observer(observer_);  // it points at relay_, which goes with this throw
      throw;
    }
  }
  ~Consumer() {
    engine_.remove_observer(observer_);  // waits for calls in progress: none uses relay_ after
    relay_.reset();
  }
  Consumer(const Consumer&) = delete;
  Consumer& operator=(const Consumer&) = delete;

 private:
  detail::Taken add(std::string_view name, std::span<const std::byte> body, const JobOptions& o,
                    const rail::detail::Resumed& r) override {
    std::optional<T> value;
    try {
      value.emplace(JournalCodec<T>::decode(body));
    } catch (const std::exception& e) {
      return detail::Taken{.status = AddStatus::added, .id = 0, .malformed = e.what()};
    }
    const AddReceipt added = rail::detail::QueueAccess::front(local_).resume(name, &*value, o, r);
    return detail::Taken{.status = added.status, .id = added.id, .malformed = {}};
  }
  void cancel(JobId id) override { (void)local_.cancel(id); }
  std::vector<AttemptError> forget(JobId id) override {
    auto entry = local_.dlq().remove(id);
    return entry ? std::move(entry->errors) : std::vector<AttemptError>{};
  }
  [[nodiscard]] std::string codec() const override { return JournalCodec<T>::name(); }

  Engine& engine_;
  Queue<T, R> local_;
  ObserverId observer_ = ObserverId::none;
  std::unique_ptr<detail::Relay> relay_;
};

}  // namespace rail::amqp
