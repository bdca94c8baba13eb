// FlowParts: what every part of one queue's job flow shares — the engine, the queue's name and
// options, its counters and its job slots — and the helpers each part uses to name a job, raise
// its events and count.
//
// Contract: built first in a JobFlow and destroyed last, so every part holding a reference to it
// (job ends, dedup claims, downstream links, completions) may use it for its whole life. The
// slots are preallocated here and never move; SlotExtra records hang off them until FlowParts is
// destroyed. Who may write a slot's fields is job_slot.hpp's ownership invariant, not this
// struct's: the helpers below only read a slot its caller holds (or one that cannot change).
// Threading: the members are set at construction and constant after (the counters and slots are
// concurrent objects with their own contracts).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "rail/detail/deadline.hpp"
#include "rail/detail/dispatcher.hpp"
#include "rail/detail/engine_core.hpp"
#include "rail/detail/job_slot.hpp"
#include "rail/detail/queue_stats.hpp"
#include "rail/detail/stop_cells.hpp"
#include "rail/detail/trace_cells.hpp"
#include "rail/event.hpp"
#include "rail/options.hpp"

namespace rail::detail {

struct FlowParts {
  FlowParts(EngineCore& engine, std::string queue, QueueOptions opts);
  ~FlowParts();
  FlowParts(const FlowParts&) = delete;
  FlowParts& operator=(const FlowParts&) = delete;

  EngineCore& core;
  const std::string name;  // the queue's
  const QueueOptions options;
  QueueStats stats;
  const std::size_t capacity;
  const std::unique_ptr<JobSlot[]> slots;  // [capacity]
  StopCells stops;                         // the running deliveries' stop tokens
  TraceCells traces;                       // the jobs' trace contexts (trace_cells.hpp)

  [[nodiscard]] JobSlot& slot(std::uint32_t idx) const noexcept { return slots[idx]; }
  [[nodiscard]] std::uint32_t index_of(const JobSlot& s) const noexcept {
    return static_cast<std::uint32_t>(&s - slots.get());
  }
  /// job_name(s): the name of the job in s (read by its holder, or while it cannot change).
  [[nodiscard]] std::string_view job_name(const JobSlot& s) const noexcept {
    const std::uint16_t id = s.name_id();
    if (id == NameTable::kOwnName) [[unlikely]]
      return s.extra->rare->own_name;
    return core.names().name(id);
  }
  /// extra(s): s's cold record (error log, dedup id, own name), allocated on first use;
  /// rare(s): its rare part, likewise.
  SlotExtra& extra(JobSlot& s);
  SlotRare& rare(JobSlot& s);
  /// event(kind, s, now): the event of kind `kind` for the job in s, its fields filled from s.
  [[nodiscard]] Event event(EventKind kind, const JobSlot& s, std::int64_t now) const noexcept;
  void emit(EventKind kind, const JobSlot& s, std::int64_t now) const noexcept {
    core.emit(event(kind, s, now));
  }
  /// count(wc, c, n): a worker bumps its own counters; anyone else (wc null) the shared stripes.
  void count(WorkerContext* wc, Counter c, std::uint64_t n = 1) noexcept {
    if (wc && wc->counters) {
      wc->counters->add(c, n);
    } else {
      stats.add(c, n);
    }
  }
  /// timed(): the queue records latency histograms (QueueOptions::histograms).
  [[nodiscard]] bool timed() const noexcept { return options.histograms; }
  /// record(wc, kind, ns): a latency sample, into the worker's own histograms (wc null, or
  /// inline: the shared ones). Only when timed().
  void record(const WorkerContext* wc, Latency kind, std::int64_t ns) noexcept {
    stats.latency().record(wc ? wc->latency : nullptr, kind, ns);
  }
  /// record_start(wc, s, now): the job in s, which the caller holds, was counted started at
  /// now: its wait since it was due, and for a retry (JobSlot::kRetry, taken here) its
  /// lateness. Only when timed().
  void record_start(WorkerContext& wc, JobSlot& s, std::int64_t now) noexcept {
    const std::int64_t waited = now - s.due_ns.load(std::memory_order_relaxed);
    record(&wc, Latency::wait, waited);
    if (s.take_mark(JobSlot::kRetry)) record(&wc, Latency::retry_lateness, waited);
  }
  /// stamp_end(wc, now): the last job wc's worker completed without reading the clock
  /// (JobFlow::finish) ended at `now`, the worker's next reading: its run and end-to-end times
  /// are recorded. Nothing when none waits.
  void stamp_end(WorkerContext& wc, std::int64_t now) noexcept {
    if (!wc.unstamped) return;
    record(&wc, Latency::run, now - wc.unstamped_start);
    record(&wc, Latency::end_to_end, now - wc.unstamped_add);
    wc.unstamped = false;
  }
  /// leases_enabled(): deliveries may have a deadline: a lease, or an attempt's timeout (the
  /// queue's, or a job's: job_timeouts, set by the first add that gives one, before its job is
  /// published).
  [[nodiscard]] bool leases_enabled() const noexcept {
    return options.visibility_timeout != Duration::max() || options.timeout != Duration::max() ||
           job_timeouts.load(std::memory_order_relaxed);  // relaxed: published with the job
  }
  std::atomic<bool> job_timeouts{false};
  /// parents_waiting: parents in state waiting_children (QueueCounts::waiting_children), counted
  /// in while they carry JobSlot::kWaitingChildren. relaxed: a gauge, ordering nothing.
  std::atomic<std::uint64_t> parents_waiting{0};
  /// leave_children_wait(s): the job in s leaves waiting_children (released, or ending), if it
  /// was there; the mark's RMW makes it count out once.
  void leave_children_wait(JobSlot& s) noexcept {
    if (s.marked(JobSlot::kWaitingChildren) && s.take_mark(JobSlot::kWaitingChildren)) [[unlikely]]
      parents_waiting.fetch_sub(1, std::memory_order_relaxed);
  }
  /// leave_retry_here(s): the job in s ends: if it was resumed from a broker (kForward), it
  /// gives back the RetryHere place it holds, if any, and forgets its RetryHere (resumed.hpp).
  /// Every end calls it (JobEnds::settle and complete, take_leftovers).
  void leave_retry_here(JobSlot& s) noexcept {
    if (s.marked(JobSlot::kForward)) [[unlikely]]
      drop_retry_here(s);
  }
  /// drop_retry_here(s): the same, whatever the marks (begin_resumed, before it sets its own).
  void drop_retry_here(JobSlot& s) noexcept;
  /// ask_to_stop(idx, delivery): delivery `delivery` of slot idx was fenced or its job flagged
  /// cancelled: its handler's stop token is stopped (StopCells::request), after the wheel is
  /// released when this thread holds it (a stop_callback is user code).
  void ask_to_stop(std::uint32_t idx, std::uint32_t delivery) noexcept;
  /// aging_ns(): QueueOptions::priority_max_wait as ReadyLevels takes it (0: no aging).
  [[nodiscard]] std::int64_t aging_ns() const noexcept {
    return is_never(options.priority_max_wait.count()) ? 0 : options.priority_max_wait.count();
  }
};

}  // namespace rail::detail
