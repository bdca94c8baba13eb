// DeadLetterBridge<T>: a typed queue's DLQ and the paths between it and the queue's slots:
// filing a dead-lettered job's entry, dead-lettering an add that found the queue full, redriving
// an entry as its job again, and answering for jobs that are in the DLQ. It also defines the
// members of DeadLetterQueue<T> that need the engine (its clock, events, alert and redrive).
//
// Contract: file() runs where a job ends, after its slot was given back (or left to a stale
// handler with a copy), and raises the job's dead_lettered event once the entry can be found
// (DeadLetterQueue::push). overflow() creates nothing in the queue: the entry gets a fresh id
// and the queue counts it added and dead-lettered. redrive() takes the entry's payload only once
// the queue has taken a slot for it (JobFlow::redrive_with): on queue_full, shutting_down or a
// throw the entry goes back to the DLQ where it was. Thread-safe as the DLQ is.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "rail/add_receipt.hpp"
#include "rail/dead_letter_queue.hpp"
#include "rail/detail/job_flow.hpp"
#include "rail/event.hpp"
#include "rail/options.hpp"

namespace rail::detail {

template <class T>
class DeadLetterBridge {
 public:
  DeadLetterBridge(JobFlow& flow, DlqOptions options)
      : flow_(flow), dlq_(*this, std::move(options)) {}
  DeadLetterBridge(const DeadLetterBridge&) = delete;
  DeadLetterBridge& operator=(const DeadLetterBridge&) = delete;

  [[nodiscard]] DeadLetterQueue<T>& dlq() noexcept { return dlq_; }
  [[nodiscard]] const std::string& name() const noexcept { return flow_.name(); }
  [[nodiscard]] EngineCore& core() const noexcept { return flow_.core(); }

  /// file(entry, event): into the DLQ, then the job's dead_lettered event (if any).
  void file(DeadLetter<T>&& entry, const Event* event) {
    dlq_.push(std::move(entry), [&] {
      if (event) flow_.core().emit(*event);
    });
  }

  /// overflow(job_name, data, o, forced): the queue is full: what its policy says (or the DLQ
  /// when `forced`).
  AddReceipt overflow(std::string_view job_name, T&& data, const JobOptions& o,
                      bool forced = false) {
    if (flow_.options().on_full != OnFull::dead_letter && !forced) return {0, AddStatus::full};
    const std::uint64_t id = flow_.core().next_ids(1);
    const TimePoint now{Duration{flow_.core().now_ns()}};
    DeadLetter<T> e{.id = id,
                    .name = std::string(job_name),
                    .data = std::move(data),
                    .reason = DeadLetterReason::overflow,
                    .failed_attempts = 0,
                    .max_attempts = o.max_attempts,
                    .added_at = now,
                    .dead_at = now,
                    .errors = {},
                    .deliveries = 0,
                    .stalls = 0,
                    .backoff = o.backoff,
                    .visibility_timeout = o.visibility_timeout,
                    .dedup_id = o.dedup.id,
                    .downstream = o.downstream};
    const std::uint32_t max_attempts = e.max_attempts;
    dlq_.push(std::move(e), [&] { flow_.note_overflow(id, job_name, max_attempts, now); });
    return {id, AddStatus::dead_lettered};
  }

  /// redrive(e, r): the entry's job again, with its own options (DeadLetterQueue::redrive).
  RedriveStatus redrive(DeadLetter<T>&& e, const RedriveOptions& r) {
    return flow_.redrive_with(e, r.reset_counters,
                              [&](void* cell) noexcept { ::new (cell) T(std::move(e.data)); });
  }

  /// contains(id) / end_of(id): JobQueries' DlqLookup answers.
  [[nodiscard]] bool contains(JobId id) const { return dlq_.contains(id); }
  [[nodiscard]] std::optional<EndRecord> end_of(JobId id) const {
    std::optional<EndRecord> end;
    (void)dlq_.inspect(id, [&](const DeadLetter<T>& e) {
      end.emplace();
      end->id = e.id;
      end->status = JobStatus::dead_lettered;
      end->reason = e.reason;
      end->errors = e.errors;
      if (!e.errors.empty()) end->error = e.errors.back().message;
      end->attempt = e.failed_attempts;
      end->ended_at = e.dead_at;
    });
    return end;
  }

  /// emit(kind, id, job_name, depth): the DLQ's own events (evicted, alert).
  void emit(EventKind kind, JobId id, std::string_view job_name, std::size_t depth) {
    flow_.emit_dlq(kind, id, job_name, depth);
  }

 private:
  JobFlow& flow_;
  mutable DeadLetterQueue<T> dlq_;  // contains() and inspect() lock it: const calls reach it
};

}  // namespace rail::detail

namespace rail {

template <class T>
RedriveStatus DeadLetterQueue<T>::redrive(JobId id, const RedriveOptions& options) {
  std::size_t position = 0;
  auto e = take(id, TombstoneCause::redriven, &position);
  if (!e) return RedriveStatus::not_found;
  RedriveStatus s;
  try {
    s = queue_.redrive(std::move(*e), options);
  } catch (...) {
    put_back(std::move(*e), position);  // the queue threw before it took the entry
    throw;
  }
  // Back where it was (its age order decides retention): redrive failed, nothing lost.
  if (s != RedriveStatus::redriven) put_back(std::move(*e), position);
  return s;
}

template <class T>
std::size_t DeadLetterQueue<T>::redrive_all(const RedriveOptions& options) {
  std::size_t n = 0;
  while (auto e = take_front(TombstoneCause::redriven)) {
    RedriveStatus s;
    try {
      s = queue_.redrive(std::move(*e), options);
    } catch (...) {
      put_back(std::move(*e));  // the queue threw before it took the entry
      throw;
    }
    if (s != RedriveStatus::redriven) {
      put_back(std::move(*e));
      break;
    }
    ++n;
  }
  return n;
}

template <class T>
TimePoint DeadLetterQueue<T>::clock_now() const {
  return queue_.core().clock().now();
}

template <class T>
void DeadLetterQueue<T>::report(const std::vector<Evicted>& evicted) {
  for (const auto& e : evicted)
    queue_.emit(EventKind::dlq_evicted, e.id, e.name, 0);
}

template <class T>
void DeadLetterQueue<T>::fire_alert(std::size_t depth) {
  queue_.emit(EventKind::dlq_alert, 0, {}, static_cast<std::uint32_t>(depth));
  // Never with the wheel held (a lapse on the timer thread can dead-letter): the callback may
  // call back into the engine.
  if (options_.on_alert) queue_.core().after_wheel([cb = options_.on_alert, depth] { cb(depth); });
}

}  // namespace rail
