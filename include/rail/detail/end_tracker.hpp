// EndTracker: who hears of a job's end besides the observers: waiters on the job (JobHandle,
// Queue::wait) and the queue's retained ends (Queue::result). Cold path, simple and locked: the
// job flow calls record() only when wanted() (someone waits, or the queue retains ends), so a
// queue that uses neither pays one relaxed load per ended job.
//
// Lost wake-ups: a waiter registered before its job was published (add_tracked) is seen by the
// job's end, which happens after the publication it acquires. A waiter registered by id later
// may race the end; it then finds the end in the queue's history or retained ends, and waits
// by id re-check the history while they wait (Queue::wait), so a wait never hangs on a job that
// ended.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "rail/job_end.hpp"
#include "rail/options.hpp"

namespace rail::detail {

using EndRecord = JobEnd<void>;

/// EndWaiter: one watched job's end, shared by its handles. Resolved once.
class EndWaiter {
 public:
  using Callback = std::function<void(const EndRecord&)>;

  /// resolve(end): the job ended; wakes waiters and runs the callbacks on this thread. False if
  /// it was resolved already (the first end wins).
  bool resolve(const EndRecord& end);
  /// ended(): the end, once resolved.
  [[nodiscard]] std::optional<EndRecord> ended() const;
  /// wait_until(deadline): blocks until resolved (and its callbacks ran) or the real-time
  /// deadline passed.
  bool wait_until(std::chrono::steady_clock::time_point deadline) const;
  /// on_end(cb): cb(end) once the job ends, on the ending thread; at once on this one if ended.
  void on_end(Callback cb);

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::optional<EndRecord> end_;
  bool woken_ = false;  // set once the callbacks ran: waiters wake after them
  std::vector<Callback> callbacks_;
};

class EndTracker {
 public:
  /// configure(retention, has_result): the queue's retention (defaults per ResultRetention).
  void configure(const ResultRetention& retention, bool has_result);

  /// wanted(): someone waits or the queue retains ends: the flow builds a record for record().
  [[nodiscard]] bool wanted() const noexcept {
    // relaxed: see the header (a waiter by id re-checks; add_tracked registers before publish).
    return wanted_.load(std::memory_order_relaxed) != 0;
  }

  /// watch(id): the waiter of job `id`, registered (the same one for every handle of the job).
  std::shared_ptr<EndWaiter> watch(JobId id);
  /// record(end, retain): a job ended: resolve its waiter (callbacks run here, outside the
  /// lock) and, if `retain`, retain the end as the retention says. retain = false: an end read
  /// back from the queue's history for a waiter by id (nothing new to retain).
  void record(EndRecord&& end, bool retain = true);
  /// retained(id): the retained end of job `id`, if any.
  [[nodiscard]] std::optional<EndRecord> retained(JobId id) const;
  /// abandon(id, why): job `id` will not end (left unstarted at shutdown): its waiter, if any,
  /// hears `unknown` with `why`.
  void abandon(JobId id, std::string why);

 private:
  void retain(EndRecord&& end);      // under mu_
  void expire(std::int64_t now_ns);  // under mu_

  std::atomic<std::uint32_t> wanted_{0};  // waiters registered + 1 if ends are retained
  mutable std::mutex mu_;
  std::unordered_map<JobId, std::shared_ptr<EndWaiter>> waiters_;
  std::unordered_map<JobId, EndRecord> retained_;
  std::deque<std::pair<JobId, std::int64_t>> completed_;  // retained, oldest first (end time)
  std::deque<std::pair<JobId, std::int64_t>> failed_;
  std::size_t keep_completed_ = 0;
  std::size_t keep_failed_ = 0;
  Duration max_age_ = Duration::max();
};

}  // namespace rail::detail
