// DeadLetterQueue<T>: where a queue's jobs go when they cannot succeed (attempts exhausted, a
// permanent failure, a custom backoff that gave up, or an overflowing queue). Each entry keeps
// everything needed to understand and replay the job: its id, name, payload, every attempt's
// error with its time, the attempt count and the timestamps.
//
// Guarantee: an entry leaves the DLQ only by redrive, purge, remove, or by the bound/retention in
// DlqOptions — and each of those eviction paths emits a `dlq_evicted` event: never silently.
// Threading: every member is thread-safe. The DLQ is a cold path (a job gets here at most once
// per life), so it is a mutex around a deque, deliberately simple. Alerts and events run after
// the lock is released so an observer may call back into the DLQ.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "rail/clock.hpp"
#include "rail/event.hpp"
#include "rail/options.hpp"

namespace rail {

/// AttemptError: one failed attempt.
struct AttemptError {
  std::uint32_t attempt = 0;
  TimePoint at{};
  std::string message;
};

/// DeadLetter<T>: one DLQ entry.
template <class T>
struct DeadLetter {
  JobId id = 0;
  std::string name;
  T data;
  DeadLetterReason reason = DeadLetterReason::none;
  std::uint32_t attempts_made = 0;
  std::uint32_t max_attempts = 0;
  TimePoint added_at{};              // when the job was first added
  TimePoint dead_at{};               // when it entered the DLQ
  std::vector<AttemptError> errors;  // every failed attempt, oldest first
  [[nodiscard]] std::string_view last_error() const noexcept {
    return errors.empty() ? std::string_view{} : std::string_view{errors.back().message};
  }
};

/// RedriveStatus: what a redrive did with an entry.
enum class RedriveStatus : std::uint8_t { redriven, not_found, queue_full, shutting_down };

namespace detail {
template <class T>
class QueueImpl;
}

template <class T>
class DeadLetterQueue {
 public:
  /// size() is the number of entries now (after applying retention).
  [[nodiscard]] std::size_t size() {
    std::vector<Evicted> evicted;
    std::size_t n;
    {
      std::lock_guard lock(mu_);
      expire_locked(evicted);
      n = entries_.size();
    }
    report(evicted);
    return n;
  }

  /// list(offset, limit) copies up to `limit` entries starting at `offset`, oldest first.
  [[nodiscard]] std::vector<DeadLetter<T>> list(std::size_t offset = 0,
                                                std::size_t limit = SIZE_MAX) {
    std::vector<Evicted> evicted;
    std::vector<DeadLetter<T>> out;
    {
      std::lock_guard lock(mu_);
      expire_locked(evicted);
      for (std::size_t i = offset; i < entries_.size() && out.size() < limit; ++i)
        out.push_back(entries_[i]);
    }
    report(evicted);
    return out;
  }

  /// get(id) copies the entry of job `id`, if it is in the DLQ.
  [[nodiscard]] std::optional<DeadLetter<T>> get(JobId id) {
    std::lock_guard lock(mu_);
    for (const auto& e : entries_)
      if (e.id == id) return e;
    return std::nullopt;
  }

  /// contains(id) tells whether job `id` is in the DLQ (no copy: any payload type).
  [[nodiscard]] bool contains(JobId id) {
    std::lock_guard lock(mu_);
    for (const auto& e : entries_)
      if (e.id == id) return true;
    return false;
  }

  /// remove(id) takes the entry of job `id` out of the DLQ and returns it (no event: the caller
  /// now owns the job).
  std::optional<DeadLetter<T>> remove(JobId id) {
    std::lock_guard lock(mu_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->id == id) {
        DeadLetter<T> e = std::move(*it);
        entries_.erase(it);
        rearm_alert_locked();
        return e;
      }
    }
    return std::nullopt;
  }

  /// purge() drops every entry; returns how many. (An explicit operator action: no events.)
  std::size_t purge() {
    std::lock_guard lock(mu_);
    std::size_t n = entries_.size();
    entries_.clear();
    rearm_alert_locked();
    return n;
  }

  /// redrive(id) sends the entry back to its queue with attempts reset, keeping its job id
  /// (BullMQ job.retry(), SQS redrive). On queue_full the entry stays in the DLQ.
  RedriveStatus redrive(JobId id);
  /// redrive_all() redrives entries oldest first until the queue is full; returns how many.
  std::size_t redrive_all();

 private:
  friend class detail::QueueImpl<T>;
  struct Evicted {
    JobId id;
    std::string name;
  };

  DeadLetterQueue(detail::QueueImpl<T>& queue, DlqOptions options)
      : queue_(queue), options_(std::move(options)) {}

  /// push(entry) is called by the queue; returns the depth after the push.
  void push(DeadLetter<T>&& entry) {
    std::vector<Evicted> evicted;
    bool alert = false;
    std::size_t depth;
    {
      std::lock_guard lock(mu_);
      expire_locked(evicted);
      while (!entries_.empty() && entries_.size() >= options_.max_entries) {
        evicted.push_back({entries_.front().id, entries_.front().name});
        entries_.pop_front();
      }
      entries_.push_back(std::move(entry));
      depth = entries_.size();
      if (options_.alert_depth != 0 && depth >= options_.alert_depth && !alerted_) {
        alerted_ = true;
        alert = true;
      }
    }
    report(evicted);
    if (alert) fire_alert(depth);
  }

  void expire_locked(std::vector<Evicted>& evicted) {
    if (!options_.retention) return;
    TimePoint now = clock_now();
    while (!entries_.empty() && entries_.front().dead_at + *options_.retention <= now) {
      evicted.push_back({entries_.front().id, entries_.front().name});
      entries_.pop_front();
    }
    rearm_alert_locked();
  }
  void rearm_alert_locked() {
    if (alerted_ && entries_.size() < options_.alert_depth) alerted_ = false;
  }

  // Defined by QueueImpl (they need the engine): the clock, eviction events, the alert event.
  TimePoint clock_now() const;
  void report(const std::vector<Evicted>& evicted);
  void fire_alert(std::size_t depth);

  detail::QueueImpl<T>& queue_;
  DlqOptions options_;
  std::mutex mu_;
  std::deque<DeadLetter<T>> entries_;
  bool alerted_ = false;
};

}  // namespace rail
