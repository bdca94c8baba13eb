// DeadLetterStore: a queue's dead-letter entries, whatever their payload type: the list, its
// bound and retention, the depth and age alerts, the journal, redrive, and the guard that refuses a
// call back into the DLQ from its own visit. Compiled once in src/; DeadLetterQueue<T> is the typed
// handle over it (dead_letter_queue.hpp), DeadLetterBridge the queue's side (filing, overflow,
// the clock and events, redrive into the slots).
//
// Guarantee: an entry leaves only by redrive, remove, purge, or the bound/retention of
// DlqOptions, each eviction reported by a `dlq_evicted` event; with a journal every change is
// also appended to it under the same lock, so the file's order is the DLQ's order.
// Threading: every member is thread-safe (a mutex around a list: a cold path, a job gets here at
// most once per life). Events, the alert and journal syncs run after the lock is released.
// scan() and find() call their function under the lock: a call back into this store from it
// throws Error(would_deadlock) (push, which the job flow calls, never throws that: visit's
// contract keeps callbacks from dead-lettering into their own DLQ).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "rail/dead_letter.hpp"
#include "rail/detail/dlq_age_alert.hpp"
#include "rail/detail/function_ref.hpp"
#include "rail/journal_file.hpp"
#include "rail/options.hpp"

namespace rail::detail {

struct PayloadOps;
class DeadLetterBridge;
class DlqJournalBinding;

/// EntryDeleter / EntryPtr: a DeadLetter<T> owned through its DeadLetterInfo base and its table.
struct EntryDeleter {
  const PayloadOps* ops = nullptr;
  void operator()(DeadLetterInfo* entry) const noexcept;
};
using EntryPtr = std::unique_ptr<DeadLetterInfo, EntryDeleter>;

class DeadLetterStore {
 public:
  /// DeadLetterStore(bridge, options, ops): with a journal, opens it; its live entries become
  /// this DLQ's, oldest first (past max_entries evicted as push() would), and the engine's id
  /// counter moves past their ids.
  DeadLetterStore(DeadLetterBridge& bridge, DlqOptions options, const PayloadOps& ops);
  ~DeadLetterStore();
  DeadLetterStore(const DeadLetterStore&) = delete;
  DeadLetterStore& operator=(const DeadLetterStore&) = delete;

  // --- what DeadLetterQueue<T> calls (dead_letter_queue.hpp documents each) --------------------
  [[nodiscard]] std::size_t size();
  /// scan(offset, limit, fn): fn on each entry in [offset, offset + limit), oldest first, under
  /// the lock, after applying retention.
  void scan(std::size_t offset, std::size_t limit, FunctionRef<void(const DeadLetterInfo&)> fn);
  /// find(id, fn): fn on entry `id` under the lock; false if there is none.
  bool find(JobId id, FunctionRef<void(const DeadLetterInfo&)> fn);
  [[nodiscard]] bool contains(JobId id) const;
  EntryPtr remove(JobId id) { return take(id, TombstoneCause::removed); }
  std::size_t purge();
  [[nodiscard]] std::string journal_failure() const;
  void sync_journal();
  RedriveStatus redrive(JobId id, const RedriveOptions& options);
  std::size_t redrive_all(const RedriveOptions& options);
  [[nodiscard]] const PayloadOps& ops() const noexcept { return ops_; }

  // --- what the bridge calls -------------------------------------------------------------------
  /// push(entry, filed): files an entry. With JournalSync::every_entry it returns once the entry
  /// is on the disk. filed() runs once the entry can be found (and is durable, as far as the
  /// sync policy says), outside the lock and before the evictions and the alert it caused are
  /// reported: the queue raises the job's dead_lettered event there, so events read in cause
  /// order.
  void push(EntryPtr entry, FunctionRef<void()> filed);
  /// sweep_alerts(now): the queue's sweep: applies retention and fires the age alert if the
  /// oldest entry reached DlqOptions::alert_age (dlq_age_alert.hpp); returns when the next
  /// check is due (kNever: none). Never throws: a check that failed (no memory) is tried again
  /// a second later.
  std::int64_t sweep_alerts(std::int64_t now) noexcept;

 private:
  struct Evicted {
    JobId id;
    std::string name;
  };
  class Visiting;

  std::lock_guard<std::mutex> locked() const;
  std::uint64_t expire_locked(std::vector<Evicted>& evicted);
  EntryPtr take(JobId id, TombstoneCause cause, std::size_t* position = nullptr);
  EntryPtr take_front(TombstoneCause cause);
  void put_back(EntryPtr entry, std::size_t position = 0);
  std::uint64_t tombstone_locked(TombstoneCause cause, const std::vector<Evicted>& evicted,
                                 std::size_t first);
  void settle(std::uint64_t ticket);
  bool encode(const DeadLetterInfo& e, std::string& out) const;
  void rearm_alert_locked();
  /// changed_locked(): the entries changed: the age alert's next check (kNever: none), which
  /// the caller passes to schedule_check() once the lock is released.
  std::int64_t changed_locked();
  void schedule_check(std::int64_t due) noexcept;
  void report(const std::vector<Evicted>& evicted);
  void fire_alert(std::size_t depth);
  RedriveStatus redrive_entry(EntryPtr& entry, const RedriveOptions& options);

  DeadLetterBridge& bridge_;
  const PayloadOps& ops_;
  DlqOptions options_;
  mutable std::mutex mu_;
  // A list: taking an entry from the middle (remove, redrive) and putting it back is O(1) and
  // keeps the others where they are.
  std::list<EntryPtr> entries_;
  bool alerted_ = false;
  DlqAgeAlert age_alert_;
  std::unique_ptr<DlqJournalBinding> journal_;  // null: no journal
};

}  // namespace rail::detail
