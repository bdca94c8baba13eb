// Events: every stage of a job, delivered to observers with the job's id, name and attempt, so one
// job can be traced from add to its end (the seed's "log the job id at every stage"), and the
// queue-level moments (paused, resumed, idle) with job_id 0.
//
// Observers run synchronously on the thread where the stage happened (a producer for `added`, a
// worker for `started`/`completed`, the timer thread for `retry_due`...), never with an engine
// lock held, so an observer may call back into the engine (state, cancel, next_timer_in,
// on_event, remove_observer; a call that would wait for the calling thread itself, such as
// wait_idle() from a handler, from the queue's own `added` event (the job is published when its
// observers return) or from a timer event, throws Error(would_deadlock)). Stages found while
// timers fire (`retry_due`, `stalled` and the failure or dead-lettering of a lapsed delivery)
// are delivered right after the timer releases the wheel: a worker may already have started
// (even finished) the job by then, so such an event can arrive after later events of the same
// job. Observers must be fast and must not throw: a throw is caught (the job's transition and
// the other observers go on), counted in Engine::observer_errors(), and the engine's first one
// is reported on stderr. Views in Event are valid only during the call.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

#include "rail/clock.hpp"
#include "rail/trace_context.hpp"

namespace rail {

/// JobId is unique per engine, assigned in add order starting at 1; 0 means "no job".
using JobId = std::uint64_t;

/// Throttle: what held a job back, in its `throttled` event.
enum class Throttle : std::uint8_t {
  none,          // not a throttled event
  no_permit,     // every permit of its downstream was in use (concurrency)
  rate_limited,  // no token before its downstream's rate refills
  paused,        // its downstream was paused by a pushback (or Downstream::pause_for)
  pushed_back,   // its own handler pushed back (Outcome::pushback): it waits the pause
};

enum class EventKind : std::uint8_t {
  added,           // a job was created (delay > 0: it waits on the timing wheel first)
  deduplicated,    // an add was merged into job_id (dedup_id names the window; no job created)
  debounced,       // an add replaced job_id's payload (debounce mode: and restarted its delay)
  started,         // a worker began attempt `attempt`
  attempt_failed,  // attempt `attempt` failed with `error`; `delay` is the wait before the
                   // next attempt, or negative when there is none (dead-lettered next)
  retry_due,       // a delayed job or a retry's backoff elapsed, or a parent's children all
                   // ended (JobOptions::after); the job is ready again
  completed,       // attempt `attempt` succeeded; the job is finished
  dead_lettered,   // the job moved to the DLQ for `reason`: its entry is there already (also
                   // when an overrunning handler still runs; a move-only payload's entry is
                   // filed when that handler returns), before dlq_evicted / dlq_alert it caused
  redriven,        // a DLQ entry was sent back to its queue (RedriveOptions say what restarts)
  dlq_evicted,     // a DLQ entry was dropped by the DLQ's bound or retention
  dlq_alert,       // the DLQ reached DlqOptions::alert_depth (`depth` holds it)
  dlq_age_alert,   // the DLQ's oldest entry (job_id) reached DlqOptions::alert_age (`elapsed`:
                   // its age; `depth`: the DLQ's)
  stall_warning,   // delivery `deliveries`' handler has run `elapsed` without renewing its lease,
                   // past QueueOptions::stall_warning of it; `delay` is the time left before
                   // it lapses. Once per lease period (a renewal starts one); may follow the
                   // delivery's outcome when the two race; carries no trace, nor a name the
                   // name table had no room for
  stalled,         // delivery `deliveries`' lease lapsed after `elapsed` in the handler; the
                   // job is delivered again, or dead-lettered (QueueOptions::stall_policy)
  late_outcome,    // a handler whose lease had lapsed (or attempt had timed out) returned;
                   // its outcome was ignored
  timed_out,       // attempt `attempt` ran past its timeout (QueueOptions::timeout) after
                   // `elapsed`: its handler is asked to stop, and the attempt fails (its
                   // attempt_failed follows); the handler is a zombie until it returns
  cancelled,       // cancel() removed the job (or its running handler's outcome was discarded)
  discarded,       // the handler dropped the job (Outcome::discard): ended, no retry, no DLQ;
                   // `error` holds the reason it gave
  forwarded,       // a job resumed from a broker (rail::amqp::Consumer) failed an attempt (or
                   // its lease lapsed) with attempts left: it leaves this process, and its next
                   // attempt, `attempt`, is the broker's to deliver after `delay`, anywhere;
                   // `error` says why (the failure, or the lapse); `stalls` counts the lapses.
                   // A lapse or timeout raises its attempt_failed on the timer thread after
                   // the job was forwarded: a cancel from that observer finds it ended
  progress,        // the handler reported `progress` (Job::progress), at most once per
                   // QueueOptions::progress_interval per job
  throttled,       // the job's downstream refused it a start (every permit in use, no token
                   // yet, paused) or its handler pushed back (Outcome::pushback): it waits, with
                   // no attempt used; `throttle` says which, `delay` is the wait when known
                   // (negative: until a permit frees), `error` says why in words
  // Queue-level (job_id 0, `queue` set):
  paused,   // pause() (or pause_and_wait) paused a running queue; once per pause, not per call
  resumed,  // resume() resumed a paused queue
  idle,     // the queue became idle: nothing waiting, delayed or running (stale handlers
            // included) after work entered it since the last `idle`: raised by the worker
            // that ran out of jobs (inline: run_until_idle) or the cancel() that emptied it,
            // once per transition to idle, and only while someone observes. wait_idle() would
            // return true at that moment. (Not BullMQ's `drained`, which fires when the waiting
            // list empties with delayed jobs possibly left: rail's waits for those too.)
};

enum class DeadLetterReason : std::uint8_t {
  none,
  attempts_exhausted,  // every allowed attempt failed
  permanent_failure,   // the handler returned Outcome::fail
  backoff_stopped,     // a custom backoff returned a negative delay
  overflow,            // the queue was full and its policy is OnFull::dead_letter
  lease_expired,       // the last allowed delivery's lease lapsed (SQS maxReceiveCount)
  timeout,             // the last allowed attempt ran past its timeout (QueueOptions::timeout)
  expired,             // not started within its expire_after (QueueOptions::expire_after)
  shed,                // waited too long while the queue was overloaded (QueueOptions::shed)
  dependency_failed,   // a child it waited for failed (JobOptions::after, ChildFailure::fail)
};

/// to_string(kind) / to_string(reason) are the snake_case names used in logs.
std::string_view to_string(EventKind kind) noexcept;
std::string_view to_string(DeadLetterReason reason) noexcept;
std::string_view to_string(Throttle throttle) noexcept;

struct Event {
  EventKind kind = EventKind::added;
  TimePoint at{};  // engine clock time of the stage
  std::string_view queue;
  JobId job_id = 0;
  std::string_view job_name;
  std::uint32_t attempt = 0;  // 1-based attempt the stage belongs to (0: not started yet)
  std::uint32_t max_attempts = 0;
  std::uint32_t deliveries = 0;  // handler starts so far (SQS ApproximateReceiveCount)
  std::uint32_t stalls = 0;      // forwarded: the job's lapsed leases so far
  std::size_t depth = 0;         // dlq_alert, dlq_age_alert: the DLQ's depth
  Duration elapsed{0};           // stalled / late_outcome: how long the handler had been running
  Duration delay{0};             // added: initial delay; attempt_failed, forwarded: the next delay
  std::string_view error;  // attempt_failed / dead_lettered: the (last) failure; forwarded: why
  DeadLetterReason reason = DeadLetterReason::none;
  std::string_view dedup_id;  // deduplicated / debounced: the window's id
  double progress = 0;        // progress: the value the handler reported
  std::string_view result;    // completed, on a queue with a result type R that can be printed
                              // (operator<< or std::formatter): the result as text
  Throttle throttle = Throttle::none;  // throttled: what held the job back
  /// The job's trace context (JobOptions::trace; invalid: none): the producer's span. The
  /// attempt's own span is attempt_trace(trace, job_id, attempt).attempt.
  TraceContext trace{};
};

/// Observer: a callable receiving each event.
using Observer = std::function<void(const Event&)>;

/// ObserverId names an observer added with Engine::on_event, for Engine::remove_observer.
/// Engine-unique, never reused; ObserverId::none names no observer.
enum class ObserverId : std::uint64_t { none = 0 };

}  // namespace rail
