// Explanation: why a job has not started (Queue::explain, Engine::explain): the first thing that
// holds it back, the figures that show it, and one sentence that says so. BullMQ, SQS and
// RabbitMQ show a job's state; none says what it waits for.
//
// Contract: a snapshot, as Queue::state: each figure was true at some moment during the call;
// nothing is changed, nothing blocks. Cold: it scans the queue's slots (O(capacity)).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "rail/clock.hpp"
#include "rail/job_state.hpp"

namespace rail {

/// Holdup: what holds a job back from starting, checked in this order (the first that applies
/// is the answer; the ones after it may hold it too once it is gone).
enum class Holdup : std::uint8_t {
  none,               // not waiting to start: running, ended or unknown (`state` says which)
  delayed,            // due at `until`: its delay, a retry's backoff or a debounce
  children,           // waits for the jobs it depends on to end (JobOptions::after)
  no_processor,       // its queue has no handler (Queue::process was not called)
  paused,             // its queue is paused (Queue::pause)
  group_turn,         // its FIFO group's turn is held by job `behind`; `ahead` more jobs of the
                      // group wait before it (JobOptions::group)
  tenant_share,       // its `tenant` holds `busy` of its `limit` jobs ready or running; `ahead`
                      // more of its jobs wait before it (JobOptions::tenant)
  downstream_paused,  // `downstream` admits nothing before `until` (a pushback, pause_for)
  downstream_full,    // every permit of `downstream` is in use: `busy` of `limit`
  downstream_rate,    // `downstream`'s rate limit has no token before `until`
  higher_priority,    // `ahead` waiting jobs of higher priority (QueueOptions::priorities),
                      // or of its own added before it with one of higher priority among
                      // them, start first
  workers_busy,       // each of the queue's `limit` workers runs one of its jobs (`busy`); on
                      // the shared pool `limit` is the queue's share, and workers busy with
                      // other queues' jobs are not counted (the job then reads `queued`)
  queued,             // ready: it starts once the `ahead` waiting jobs added before it have
};

/// to_string(h): the snake_case name, as logs use it.
std::string_view to_string(Holdup h) noexcept;

struct Explanation {
  JobState state;                // the job's state, as Queue::state answers
  Holdup holdup = Holdup::none;  // what holds it back
  TimePoint until{};             // delayed, downstream_paused, downstream_rate: when that ends
  std::string downstream;        // downstream_*: which downstream
  std::uint32_t busy = 0;        // downstream_full: permits in use; workers_busy: jobs running;
                                 // tenant_share: its jobs ready or running
  std::uint32_t limit = 0;       // downstream_full: its concurrency; workers_busy: its workers;
                                 // tenant_share: its share
  std::uint64_t ahead = 0;       // group_turn: its group's jobs waiting before it; else the
                                 // queue's waiting jobs that start before it: those of higher
                                 // priority, and of its own priority those with smaller ids
                                 // (added before it: ids rise in add order per producing thread)
  std::uint32_t priority = 0;    // its priority (JobOptions::priority)
  std::string group;             // group_turn: its group (JobOptions::group)
  std::string tenant;            // tenant_share: its tenant (JobOptions::tenant)
  std::uint64_t behind = 0;      // group_turn: the id of the job holding the group's turn
  std::string text;              // one sentence, e.g. "waiting: queue 'emails' is paused"
};

}  // namespace rail
