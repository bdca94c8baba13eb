// rail::amqp::Schedules<T>: repeatable and cron schedules of a broker queue that fire once per
// due time across every process that declares them, not once per process (asynq#1013, #371):
// each process declares the same schedules; the leader among them publishes each run to the
// broker queue, as Producer::add does, and the others' runs are discarded. Leadership is a lease
// message held in a single-active-consumer queue (detail/amqp_leader.hpp): when the leader's
// process dies or its connection breaks, the next process leads within the broker's notice.
//
// Contract:
// - schedule()/unschedule()/schedules() mean what Queue's do (schedule.hpp: upsert by id,
//   overlap, missed runs), with each run published to the broker queue instead of added
//   locally. ScheduleOptions::job travels with each run as a Producer add's options would, and
//   is refused as the Producer refuses them (Error(invalid_option) naming the option).
// - The due times are each process's own clock's: cron schedules agree across processes (wall
//   time); an every() schedule's phase is its leader's (a handover may shorten one interval).
// - Once per due time while one process leads. A handover may skip the runs due within it (the
//   broker's notice of the old leader's end), or run one twice when a partition left the old
//   leader unaware for up to two heartbeats.
// - The runs go through a local queue, `rail.schedules.<queue>`, declared on the engine: its
//   events and counts show every due time (a follower's runs are discarded, "not the leader"),
//   and a publish the broker refuses or does not confirm is retried there with backoff.
// - Destroying it ends its schedules and hands the leadership to another process; the engine
//   must outlive it.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rail/amqp.hpp"
#include "rail/detail/amqp_leader.hpp"
#include "rail/schedule.hpp"

namespace rail::amqp {

template <JournalCodable T>
class Schedules {
 public:
  /// Fired: a due time's run on the local queue: which schedule, and its payload.
  struct Fired {
    std::string schedule;
    T payload;
  };

  Schedules(BrokerOptions broker, Engine& engine, std::string queue,
            BrokerQueueOptions options = {})
      : state_(std::make_shared<State>(broker, queue, options)),
        local_(engine.declare_queue<Fired>("rail.schedules." + queue, local_options())) {
    local_.process({.concurrency = 1},
                   [state = state_](Job<Fired>& run) -> Outcome { return state->publish(run); });
  }
  ~Schedules() {
    for (const ScheduleInfo& s : local_.schedules())
      (void)local_.unschedule(s.id);
    std::unique_ptr<rail::detail::amqp::Leader> leader;
    {
      const std::lock_guard lock(state_->mu);
      leader = std::move(state_->leader);  // runs left here are discarded from now on
    }
    leader.reset();  // outside the lock: the token goes to another process
  }
  Schedules(const Schedules&) = delete;
  Schedules& operator=(const Schedules&) = delete;

  /// schedule(id, when, job_name, payload, o): declares (or replaces) schedule `id`.
  ScheduleInfo schedule(std::string_view id, const Schedule& when, std::string_view job_name,
                        T payload, const ScheduleOptions& o = {}) {
    state_->producer.check(o.job);
    {
      const std::lock_guard lock(state_->mu);
      state_->options[std::string(id)] = o.job;
    }
    ScheduleOptions local = o;
    local.job = publishing();
    return local_.schedule(id, when, job_name, Fired{std::string(id), std::move(payload)}, local);
  }
  /// unschedule(id): ends schedule `id` here (each process declares and ends its own).
  bool unschedule(std::string_view id) {
    const bool ended = local_.unschedule(id);
    const std::lock_guard lock(state_->mu);
    state_->options.erase(std::string(id));
    return ended;
  }
  /// schedules(): this process's schedules, with the runs each fired here.
  [[nodiscard]] std::vector<ScheduleInfo> schedules() const { return local_.schedules(); }
  /// counts(): the local queue of the runs: `completed` runs this process published,
  /// `discarded` due times it followed another's lead.
  [[nodiscard]] QueueCounts counts() const { return local_.counts(); }
  /// leader(): this process publishes the runs now.
  [[nodiscard]] bool leader() const {
    const std::lock_guard lock(state_->mu);
    return state_->leader && state_->leader->held();
  }

 private:
  struct State {
    State(const BrokerOptions& broker, const std::string& queue, BrokerQueueOptions o)
        : producer(broker, queue, o),
          leader(std::make_unique<rail::detail::amqp::Leader>(broker, queue)) {}
    /// publish(run): the leader publishes the run; a follower discards it.
    Outcome publish(Job<Fired>& run) {
      JobOptions o;
      {
        const std::lock_guard lock(mu);
        if (!leader || !leader->held())
          return Outcome::discard("not the leader: another process publishes this run");
        const auto it = options.find(run.data().schedule);
        if (it == options.end()) return Outcome::discard("its schedule was ended");
        o = it->second;
      }
      const AddReceipt r = producer.add(run.name(), run.data().payload, o);  // throws: retried
      if (r.status != AddStatus::added)
        return Outcome::retry("the broker queue refused the run: " +
                              std::string(to_string(r.status)));
      return Outcome::done();
    }
    Producer<T> producer;
    mutable std::mutex mu;  // guards leader and options
    std::unique_ptr<rail::detail::amqp::Leader> leader;
    std::map<std::string, JobOptions> options;  // each schedule's ScheduleOptions::job
  };
  /// local_options(): the local queue of the runs: room for a backlog while the broker is away.
  static QueueOptions local_options() {
    QueueOptions q;
    q.capacity = 1024;
    return q;
  }
  /// publishing(): a run's local job: its publish is tried again while the broker is away.
  static JobOptions publishing() {
    JobOptions o;
    o.max_attempts = 10;
    o.backoff = Backoff::exponential(std::chrono::milliseconds(500));
    return o;
  }

  std::shared_ptr<State> state_;  // shared with the local handler, which may outlive this
  Queue<Fired> local_;
};

}  // namespace rail::amqp
