// DeadLetterQueue<T>: where a queue's jobs go when they cannot succeed (attempts exhausted, a
// permanent failure, a custom backoff that gave up, or an overflowing queue). Each entry keeps
// everything needed to understand and replay the job: its id, name, payload, every attempt's
// error with its time, the attempt count and the timestamps.
//
// Guarantee: an entry leaves the DLQ only by redrive, purge, remove, or by the bound/retention in
// DlqOptions — and each of those eviction paths emits a `dlq_evicted` event: never silently.
// Threading: every member is thread-safe. The DLQ is a cold path (a job gets here at most once
// per life), so it is a mutex around a list, deliberately simple. Alerts and events run after
// the lock is released so an observer may call back into the DLQ. visit() and inspect() are the
// exception: their callbacks run under the lock (that is how a move-only payload is read without
// a copy), and a call back into the same DLQ from one throws Error(would_deadlock).
// Journal (DlqOptions::journal, off by default): every change is also recorded in the journal
// file (detail/dlq_journal_binding.hpp over detail/dlq_journal.hpp) under the same lock, so the
// file's order is the DLQ's order; payloads are encoded before the lock and syncs run after it.
// A queue without a journal pays one null-pointer test per DLQ operation. Declaring a queue
// whose journal exists restores its entries here, in the constructor: same ids, errors and
// payloads, with times rebased onto this engine's clock by their wall-clock age.
#pragma once

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <functional>
#include <iterator>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "rail/backoff.hpp"
#include "rail/clock.hpp"
#include "rail/detail/dlq_journal_binding.hpp"
#include "rail/error.hpp"
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
  std::uint32_t failed_attempts = 0;
  std::uint32_t max_attempts = 0;
  TimePoint added_at{};              // when the job was first added
  TimePoint dead_at{};               // when it entered the DLQ
  std::vector<AttemptError> errors;  // every failed attempt, oldest first
  std::uint32_t deliveries = 0;      // handler starts (SQS ApproximateReceiveCount)
  std::uint32_t stalls = 0;          // of them, deliveries whose lease lapsed
  // The job's own options, which a redrive keeps (an overflowed job's are those of its add).
  Backoff backoff{};
  std::optional<Duration> visibility_timeout{};  // unset: the queue's
  std::string dedup_id;                          // empty: none
  std::string downstream;                        // JobOptions::downstream; empty: the queue's
  [[nodiscard]] std::string_view last_error() const noexcept {
    return errors.empty() ? std::string_view{} : std::string_view{errors.back().message};
  }
};

/// DeadLetterVisitor<F, T>: a callable that DeadLetterQueue<T>::visit and ::inspect can hand
/// each entry to, in place.
template <class F, class T>
concept DeadLetterVisitor =
    (std::invocable<F&, const DeadLetter<T>&>);  // (): clang-format 14 misparses it bare

/// RedriveStatus: what a redrive did with an entry.
enum class RedriveStatus : std::uint8_t { redriven, not_found, queue_full, shutting_down };

/// RedriveOptions: how a redriven job starts over.
struct RedriveOptions {
  /// true (the default, as SQS, whose moved messages are received afresh): attempts, deliveries,
  /// stalls and the error log start from zero. false (BullMQ's job.retry() without
  /// resetAttemptsMade): they carry on, so a job that had exhausted its attempts gets one more
  /// delivery, and its next failure dead-letters it with every error so far.
  bool reset_counters = true;
};

namespace detail {
template <class T>
class DeadLetterBridge;
}

template <class T>
class DeadLetterQueue {
 public:
  /// size() is the number of entries now (after applying retention).
  [[nodiscard]] std::size_t size() {
    std::vector<Evicted> evicted;
    std::size_t n;
    std::uint64_t ticket;
    {
      auto lock = locked();
      ticket = expire_locked(evicted);
      n = entries_.size();
    }
    settle(ticket);
    report(evicted);
    return n;
  }

  /// list(offset, limit) copies up to `limit` entries starting at `offset`, oldest first (after
  /// applying retention). Requires a copy-constructible payload; a move-only one (a
  /// std::unique_ptr, say) inspects entries in place with visit().
  [[nodiscard]] std::vector<DeadLetter<T>> list(
      std::size_t offset = 0, std::size_t limit = SIZE_MAX) requires std::copy_constructible<T> {
    std::vector<DeadLetter<T>> out;
    scan(offset, limit, [&](const DeadLetter<T>& e) { out.push_back(e); });
    return out;
  }

  /// get(id) copies the entry of job `id`, if it is in the DLQ. Requires a copy-constructible
  /// payload; a move-only one uses inspect().
  [[nodiscard]] std::optional<DeadLetter<T>> get(JobId id) requires std::copy_constructible<T> {
    std::optional<DeadLetter<T>> out;
    (void)find(id, [&](const DeadLetter<T>& e) { out.emplace(e); });
    return out;
  }

  /// visit(fn, offset, limit) calls fn(const DeadLetter<T>&) on up to `limit` entries starting
  /// at `offset`, oldest first (after applying retention), without copying them: any payload
  /// type. fn runs on this thread with the DLQ locked, so it must be short and must not call
  /// back into this DLQ (its members throw Error(would_deadlock) when it does) nor into its
  /// queue (whose add, state and dead-lettering reach the DLQ), nor shut the engine down (which
  /// waits for a timer firing that may be dead-lettering into this DLQ): keep what it needs (an
  /// id, a copy of a field) and act after visit() returns. An exception from fn propagates.
  template <DeadLetterVisitor<T> F>
  void visit(F&& fn, std::size_t offset = 0, std::size_t limit = SIZE_MAX) {
    scan(offset, limit, fn);
  }

  /// inspect(id, fn) calls fn(const DeadLetter<T>&) on the entry of job `id` in place and
  /// returns true, or returns false if it is not in the DLQ. The rules of visit() apply to fn.
  template <DeadLetterVisitor<T> F>
  bool inspect(JobId id, F&& fn) {
    return find(id, fn);
  }

  /// contains(id) tells whether job `id` is in the DLQ (no copy: any payload type).
  [[nodiscard]] bool contains(JobId id) {
    return find(id, [](const DeadLetter<T>&) {});
  }

  /// remove(id) takes the entry of job `id` out of the DLQ and returns it (no event: the caller
  /// now owns the job).
  std::optional<DeadLetter<T>> remove(JobId id) { return take(id, TombstoneCause::removed); }

  /// purge() drops every entry; returns how many. (An explicit operator action: no events.)
  std::size_t purge() {
    std::size_t n;
    std::uint64_t ticket = 0;
    {
      auto lock = locked();
      n = entries_.size();
      entries_.clear();
      ticket = journal_.append_tombstone(TombstoneCause::purged, {});
      rearm_alert_locked();
    }
    settle(ticket);
    return n;
  }

  /// journal_failure() is why the journal stopped writing (disk full...), or empty while it
  /// works or when there is no journal. After a failure the DLQ goes on in memory only.
  [[nodiscard]] std::string journal_failure() const { return journal_.failure(); }
  /// sync_journal() puts every journaled change on the disk now (fdatasync), whatever the sync
  /// policy; blocks for it. No-op without a journal.
  void sync_journal() { journal_.sync(); }

  /// redrive(id, options) sends the entry back to its queue as the same job: its id, name,
  /// attempts budget, backoff, visibility timeout and dedup id (it holds the id again unless
  /// another job has claimed it since); counters as `options` say (BullMQ job.retry(), SQS
  /// redrive). On queue_full the entry stays in the DLQ.
  RedriveStatus redrive(JobId id, const RedriveOptions& options = {});
  /// redrive_all(options) redrives entries oldest first until the queue is full; returns how many.
  std::size_t redrive_all(const RedriveOptions& options = {});

 private:
  friend class detail::DeadLetterBridge<T>;
  struct Evicted {
    JobId id;
    std::string name;
  };

  /// Visiting: marks this thread as running code under `dlq`'s lock (visit and inspect
  /// callbacks, the copies list and get make; frames nest: a callback may visit another DLQ),
  /// so that a call back into a DLQ whose lock this thread holds throws instead of deadlocking.
  struct Visiting {
    explicit Visiting(const DeadLetterQueue* dlq) noexcept : self(dlq), outer(top()) {
      top() = this;
    }
    ~Visiting() { top() = outer; }
    Visiting(const Visiting&) = delete;
    Visiting& operator=(const Visiting&) = delete;
    static Visiting*& top() noexcept {
      thread_local Visiting* frame = nullptr;
      return frame;
    }
    const DeadLetterQueue* self;
    Visiting* outer;
  };

  /// locked(): the DLQ's lock for a member a user calls, refused from inside one of this DLQ's
  /// own visit()/inspect() callbacks on this thread (std::mutex is not recursive).
  [[nodiscard]] std::lock_guard<std::mutex> locked() {
    for (const Visiting* v = Visiting::top(); v != nullptr; v = v->outer)
      if (v->self == this)
        throw Error(ErrorCode::would_deadlock,
                    "dlq() of queue '" + queue_.name() +
                        "' was called from inside its own visit() or inspect() callback, which "
                        "holds its lock; expected the callback to keep what it needs (an id, a "
                        "copy) and act after visit() or inspect() returns");
    return std::lock_guard<std::mutex>(mu_);
  }

  /// scan(offset, limit, fn): fn on each entry in [offset, offset + limit), under the lock,
  /// after applying retention (whose evictions are reported once the lock is released).
  template <class F>
  void scan(std::size_t offset, std::size_t limit, F&& fn) {
    std::vector<Evicted> evicted;
    std::uint64_t ticket;
    {
      auto lock = locked();
      ticket = expire_locked(evicted);
      Visiting visiting(this);  // after locked(): from here on a call back in is refused
      auto it = std::next(entries_.begin(),
                          static_cast<std::ptrdiff_t>(std::min(offset, entries_.size())));
      for (std::size_t n = 0; it != entries_.end() && n < limit; ++it, ++n)
        fn(std::as_const(*it));
    }
    settle(ticket);
    report(evicted);
  }

  /// find(id, fn): fn on the entry of job `id` under the lock; false if there is none.
  template <class F>
  bool find(JobId id, F&& fn) {
    auto lock = locked();
    Visiting visiting(this);
    for (const auto& e : entries_) {
      if (e.id == id) {
        fn(e);
        return true;
      }
    }
    return false;
  }

  DeadLetterQueue(detail::DeadLetterBridge<T>& queue, DlqOptions options)
      : queue_(queue), options_(std::move(options)), journal_(options_.journal) {
    if (!options_.journal.path.empty()) restore();
  }

  /// push(entry, filed) is called by the queue. With a journal under JournalSync::every_entry it
  /// returns once the entry is on the disk (JournalOptions::on_durable has been called).
  /// filed() runs once the entry can be found (and is durable, as far as the sync policy says),
  /// outside the lock and before the evictions and the alert it caused are reported: the queue
  /// raises the job's dead_lettered event there, so events read in cause order.
  template <class Filed = void (*)()>
  void push(
      DeadLetter<T>&& entry, Filed&& filed = [] {}) {
    std::vector<Evicted> evicted;
    bool alert = false;
    std::size_t depth;
    std::string record;
    // Before the lock: other dead-letterings go on. A codec that throws costs the entry its
    // place in the file, never its place in the DLQ (this runs where a job ends: see encode_kept).
    const bool journaled = journal_.on() && encode(entry, record);
    std::uint64_t ticket = 0;
    {
      // Not locked(): the job flow files entries here, and a throw would lose one (visit()'s
      // contract keeps its callbacks from dead-lettering into this DLQ).
      std::lock_guard lock(mu_);
      ticket = expire_locked(evicted);
      std::size_t first_bound = evicted.size();
      while (!entries_.empty() && entries_.size() >= options_.max_entries) {
        evicted.push_back({entries_.front().id, entries_.front().name});
        entries_.pop_front();
      }
      ticket = std::max(ticket, tombstone_locked(TombstoneCause::evicted, evicted, first_bound));
      if (journaled) ticket = std::max(ticket, journal_.append_entry(record, entry.id));
      entries_.push_back(std::move(entry));
      depth = entries_.size();
      if (options_.alert_depth && depth >= *options_.alert_depth && !alerted_) {
        alerted_ = true;
        alert = true;
      }
    }
    settle(ticket);
    filed();
    report(evicted);
    if (alert) fire_alert(depth);
  }

  /// expire_locked(evicted) drops the entries past retention; returns the journal ticket of
  /// their tombstone (0: none). The tombstone is synced with the next change's settle().
  std::uint64_t expire_locked(std::vector<Evicted>& evicted) {
    if (!options_.retention) return 0;
    const std::int64_t now = clock_now().time_since_epoch().count();
    const std::size_t first = evicted.size();
    while (!entries_.empty() &&
           detail::aged_out(entries_.front().dead_at.time_since_epoch().count(),
                            *options_.retention, now)) {
      evicted.push_back({entries_.front().id, entries_.front().name});
      entries_.pop_front();
    }
    rearm_alert_locked();
    return tombstone_locked(TombstoneCause::evicted, evicted, first);
  }

  /// take(id, cause, position) removes entry `id`, journaling why; the redrive paths pass
  /// `redriven` and keep its position for put_back.
  std::optional<DeadLetter<T>> take(JobId id, TombstoneCause cause,
                                    std::size_t* position = nullptr) {
    std::optional<DeadLetter<T>> out;
    std::uint64_t ticket = 0;
    {
      auto lock = locked();
      std::size_t at = 0;
      for (auto it = entries_.begin(); it != entries_.end(); ++it, ++at) {
        if (it->id == id) {
          if (position) *position = at;
          out.emplace(std::move(*it));
          entries_.erase(it);
          ticket = journal_.append_tombstone(cause, {&id, 1});
          rearm_alert_locked();
          break;
        }
      }
    }
    settle(ticket);
    return out;
  }
  /// take_front(cause) removes the oldest entry, journaling why (redrive_all).
  std::optional<DeadLetter<T>> take_front(TombstoneCause cause) {
    std::optional<DeadLetter<T>> out;
    std::uint64_t ticket = 0;
    {
      auto lock = locked();
      if (entries_.empty()) return out;
      out.emplace(std::move(entries_.front()));
      entries_.pop_front();
      ticket = journal_.append_tombstone(cause, {&out->id, 1});
      rearm_alert_locked();
    }
    settle(ticket);
    return out;
  }
  /// put_back(entry, position) returns an entry whose redrive failed to where it was (its age
  /// order decides retention), journaling it again (its tombstone is already in the file).
  void put_back(DeadLetter<T>&& entry, std::size_t position = 0) {
    std::string record;
    const bool journaled = journal_.on() && encode(entry, record);
    std::uint64_t ticket = 0;
    {
      std::lock_guard lock(mu_);
      if (journaled) ticket = journal_.append_entry(record, entry.id);
      entries_.insert(std::next(entries_.begin(),
                                static_cast<std::ptrdiff_t>(std::min(position, entries_.size()))),
                      std::move(entry));
    }
    settle(ticket);
  }

  std::uint64_t tombstone_locked(TombstoneCause cause, const std::vector<Evicted>& evicted,
                                 std::size_t first) {
    if (!journal_.on() || first == evicted.size()) return 0;
    std::vector<JobId> ids;
    ids.reserve(evicted.size() - first);
    for (std::size_t i = first; i < evicted.size(); ++i)
      ids.push_back(evicted[i].id);
    return journal_.append_tombstone(cause, ids);
  }

  void settle(std::uint64_t ticket) { journal_.settle(ticket); }

  /// encode(e, out): e's journal record (DlqJournalBinding::encode: false when its codec threw).
  bool encode(const DeadLetter<T>& e, std::string& out) const {
    return journal_.encode(e, clock_now().time_since_epoch().count(), out);
  }

  /// restore(): opens the journal; its live entries become this DLQ's, oldest first (the
  /// binding rebases their times), past max_entries evicted as push() would.
  void restore() {
    JobId max_id = 0;
    for (DeadLetter<T>& e : journal_.open(queue_.name(), clock_now().time_since_epoch().count())) {
      max_id = std::max(max_id, e.id);
      entries_.push_back(std::move(e));
    }
    // Restored ids keep their numbers: move the engine's id counter past them so no new job
    // can be given one (redrive keeps an entry's id).
    if (max_id != 0) queue_.core().skip_ids_past(max_id);
    std::vector<Evicted> evicted;
    std::uint64_t ticket = 0;
    {
      std::lock_guard lock(mu_);
      while (entries_.size() > options_.max_entries) {
        evicted.push_back({entries_.front().id, entries_.front().name});
        entries_.pop_front();
      }
      ticket = tombstone_locked(TombstoneCause::evicted, evicted, 0);
    }
    settle(ticket);
    report(evicted);
  }
  void rearm_alert_locked() {
    if (alerted_ && options_.alert_depth && entries_.size() < *options_.alert_depth)
      alerted_ = false;
  }

  // Defined by DeadLetterBridge (they need the engine): the clock, eviction and alert events.
  TimePoint clock_now() const;
  void report(const std::vector<Evicted>& evicted);
  void fire_alert(std::size_t depth);

  detail::DeadLetterBridge<T>& queue_;
  DlqOptions options_;
  std::mutex mu_;
  // A list, not a deque: taking an entry from the middle (remove, redrive) and putting one back
  // must not move-assign the others, so payloads without an assignment (a const member) work.
  std::list<DeadLetter<T>> entries_;
  bool alerted_ = false;
  detail::DlqJournalBinding<T> journal_;  // after options_, whose journal options it reads
};

}  // namespace rail
