// EndTracker: who hears of a job's end besides the observers: waiters on the job (JobHandle,
// Queue::wait) and the queue's retained ends (Queue::end_of). Cold path, simple and locked: the
// job flow calls record() only when wanted() (someone waits, or the queue retains ends), so a
// queue that uses neither pays one relaxed load per ended job.
//
// Lost wake-ups: a waiter registered before its job was published (add_tracked) is seen by the
// job's end, which happens after the publication it acquires. A waiter registered by id later
// may race the end; it then finds the end in the queue's history or retained ends, and waits
// by id re-check the history while they wait (Queue::wait), so a wait never hangs on a job that
// ended.
//
// Outliving the engine: a waiter reaches its tracker only through a shared TrackerLink, which
// holds the tracker's lock. close() (the engine's destructor, before the queue goes) resolves
// every registered waiter with status unknown and an error that says so, then cuts the link, so
// a JobHandle kept past its engine reports that end and touches nothing of the queue. A handle's
// own calls into the queue run inside a Visit, which close() waits out: a Visit entered after
// close begins is refused. visitors/closed are seq_cst, a Dekker: either the visit sees closed,
// or close sees the visitor and waits for it to leave.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "rail/detail/asymmetric_fence.hpp"
#include "rail/job_end.hpp"
#include "rail/options.hpp"

namespace rail::detail {

using EndRecord = JobEnd<void>;

class EndTracker;

/// TrackerLink: what the waiters of a tracker share with it (see the header).
struct TrackerLink {
  std::mutex mu;                  // the tracker's lock
  EndTracker* tracker = nullptr;  // under mu; null once the tracker closed
  std::atomic<std::uint32_t> visitors{0};
  std::atomic<bool> closed{false};
};

/// EndWaiter: one watched job's end, shared by its handles. Resolved once. When its last handle
/// is dropped before the end, it leaves the tracker (so an id that never ends costs nothing).
class EndWaiter {
 public:
  using Callback = std::function<void(const EndRecord&)>;

  EndWaiter() = default;
  EndWaiter(std::shared_ptr<TrackerLink> link, JobId id) : link_(std::move(link)), id_(id) {}
  ~EndWaiter();
  EndWaiter(const EndWaiter&) = delete;
  EndWaiter& operator=(const EndWaiter&) = delete;

  /// resolve(end): the job ended; runs the callbacks on this thread, then wakes waiters. False
  /// if it was resolved already (the first end wins).
  bool resolve(const EndRecord& end);
  /// ended(): the end, once resolved.
  [[nodiscard]] std::optional<EndRecord> ended() const;
  /// wait_until(deadline): blocks until resolved (and its callbacks ran) or the real-time
  /// deadline passed.
  bool wait_until(std::chrono::steady_clock::time_point deadline) const;
  /// on_end(cb): cb(end) once the job ends, on the ending thread; at once on this one if ended.
  void on_end(Callback cb);
  /// sure(): registered before its job was published (add_tracked): its end will be recorded,
  /// so the queue's history (status only) must not answer for it.
  // relaxed: set under the tracker's lock in watch(), before the job is published; a by-id
  // handle got this waiter from watch() under the same lock, so it reads the flag as set.
  [[nodiscard]] bool sure() const noexcept { return sure_.load(std::memory_order_relaxed); }
  void make_sure() noexcept { sure_.store(true, std::memory_order_relaxed); }
  [[nodiscard]] JobId id() const noexcept { return id_; }

  /// Visit: while it is true, the queue this waiter's job belongs to may be called (a handle
  /// reads its history, checks where it may wait); false once the tracker closed (the engine is
  /// going or gone), and then the waiter is resolved. Short: close() waits for it.
  class Visit {
   public:
    explicit Visit(TrackerLink* link) noexcept;
    ~Visit();
    Visit(const Visit&) = delete;
    Visit& operator=(const Visit&) = delete;
    explicit operator bool() const noexcept { return link_ != nullptr; }

   private:
    TrackerLink* link_;  // null: refused
  };
  [[nodiscard]] Visit visit() const noexcept { return Visit(link_.get()); }

 private:
  std::shared_ptr<TrackerLink> link_;  // null: never registered (an add that made nothing)
  JobId id_ = 0;
  std::atomic<bool> sure_{false};
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::optional<EndRecord> end_;
  bool woken_ = false;  // set once the callbacks ran: waiters wake after them
  std::vector<Callback> callbacks_;
};

class EndTracker {
 public:
  EndTracker();
  ~EndTracker();
  EndTracker(const EndTracker&) = delete;
  EndTracker& operator=(const EndTracker&) = delete;
  /// configure(retention, has_result): the queue's retention (defaults per EndRetention).
  void configure(const EndRetention& retention, bool has_result);

  /// wanted(): someone waits or the queue retains ends: the flow builds a record for record().
  /// The flow reads it after a light fence that follows the job's history entry; watch() raises
  /// it before the heavy fence that precedes its caller's read of the history: either the end
  /// is recorded, or the watcher finds the job ended in its slot (JobSlot::end_kind, while the
  /// job is still there) or in the history (Dekker, with the cost on the waiter's side:
  /// asymmetric_fence.hpp).
  [[nodiscard]] bool wanted() const noexcept {
    return wanted_.load(std::memory_order_relaxed) != 0;
  }

  /// watch(id, sure, fence): the waiter of job `id`, registered (the same one for every handle
  /// of the job); `sure`: registered before the job was published. Fences (see wanted()), unless
  /// `fence` is Fence::caller: the caller then runs heavy_fence() itself after its last watch and
  /// before it reads the history (one fence for many waiters: a parent's children by id).
  enum class Fence : std::uint8_t { now, caller };
  std::shared_ptr<EndWaiter> watch(JobId id, bool sure, Fence fence = Fence::now);
  /// record(end, retain): a job ended: resolve its waiter (callbacks run here, outside the
  /// lock) and, if `retain`, retain the end as the retention says. retain = false: an end read
  /// back from the queue's history for a waiter by id (nothing new to retain).
  void record(EndRecord&& end, bool retain = true);
  /// retained(id): the retained end of job `id`, if any.
  [[nodiscard]] std::optional<EndRecord> retained(JobId id) const;
  /// forget(id): job `id` runs again (redriven): its retained end is no longer its end.
  void forget(JobId id);
  /// abandon(id, why): job `id` will not end (left unstarted at shutdown): its waiter, if any,
  /// hears `unknown` with `why`.
  void abandon(JobId id, std::string why);
  /// close(why): the queue is about to be destroyed: every waiter still registered hears
  /// `unknown` with `why`, visits in progress are waited out, later ones refused, and no waiter
  /// touches this tracker again. Idempotent; watch() after it returns a resolved waiter.
  void close(std::string_view why) noexcept;
  /// take(id): unregisters job `id`'s waiter and hands it over (null if none is registered),
  /// for a caller that resolves it itself, outside whatever it holds.
  [[nodiscard]] std::shared_ptr<EndWaiter> take(JobId id);

 private:
  friend class EndWaiter;
  void unwatch(JobId id) noexcept;   // under mu: its last handle went
  void retain(EndRecord&& end);      // under mu_
  void expire(std::int64_t now_ns);  // under mu_

  struct Order;
  void drop(const Order& o);  // under mu_: the retained end `o` named, unless retained again
  struct Kept {
    EndRecord end;
    std::uint64_t seq;  // which retain() put it there (a redriven job's id is retained again)
  };
  struct Order {
    JobId id;
    std::int64_t at;
    std::uint64_t seq;
  };

  std::atomic<std::uint32_t> wanted_{0};     // waiters registered + 1 if ends are retained
  const std::shared_ptr<TrackerLink> link_;  // its mu is this tracker's lock (mu_)
  std::mutex& mu_;
  std::unordered_map<JobId, std::weak_ptr<EndWaiter>> waiters_;
  std::unordered_map<JobId, Kept> retained_;
  std::deque<Order> completed_;  // retained, oldest first (end time)
  std::deque<Order> failed_;
  std::uint64_t seq_ = 0;
  std::size_t keep_completed_ = 0;
  std::size_t keep_failed_ = 0;
  Duration max_age_ = Duration::max();
};

}  // namespace rail::detail
