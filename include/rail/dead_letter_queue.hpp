// DeadLetterQueue<T>: where a queue's jobs go when they cannot succeed (attempts exhausted, a
// permanent failure, a custom backoff that gave up, or an overflowing queue). Each entry
// (DeadLetter<T>, dead_letter.hpp) keeps everything needed to understand and replay the job: its
// id, name, payload, every attempt's error with its time, the attempt count and the timestamps.
//
// A handle, as Queue<T, R> is: cheap to copy, non-owning, valid while its Engine lives (the
// queue owns the DLQ; Queue::dlq() hands one out).
// Guarantee: an entry leaves the DLQ only by redrive, purge, remove, or by the bound/retention in
// DlqOptions — and each of those eviction paths emits a `dlq_evicted` event: never silently.
// Threading: every member is thread-safe. The DLQ is a cold path (a job gets here at most once
// per life), so it is a mutex around a list, deliberately simple. Alerts and events run after
// the lock is released so an observer may call back into the DLQ. visit() and inspect() are the
// exception: their callbacks run under the lock (that is how a move-only payload is read without
// a copy), and a call back into the same DLQ from one throws Error(would_deadlock).
// Journal (DlqOptions::journal, off by default): every change is also recorded in the journal
// file under the same lock, so the file's order is the DLQ's order; payloads are encoded before
// the lock and syncs run after it. Declaring a queue whose journal exists restores its entries
// here: same ids, errors and payloads, with times rebased onto this engine's clock by their
// wall-clock age. The entries live in detail::DeadLetterStore, compiled once for every payload
// type (detail/dead_letter_store.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rail/dead_letter.hpp"
#include "rail/detail/dead_letter_store.hpp"

namespace rail {

template <class T, class R>
class Queue;

template <class T>
class DeadLetterQueue {
 public:
  /// size() is the number of entries now (after applying retention).
  [[nodiscard]] std::size_t size() { return store_->size(); }

  /// list(offset, limit) copies up to `limit` entries starting at `offset`, oldest first (after
  /// applying retention). Requires a copy-constructible payload; a move-only one (a
  /// std::unique_ptr, say) inspects entries in place with visit().
  [[nodiscard]] std::vector<DeadLetter<T>> list(
      std::size_t offset = 0, std::size_t limit = SIZE_MAX) requires std::copy_constructible<T> {
    std::vector<DeadLetter<T>> out;
    visit([&](const DeadLetter<T>& e) { out.push_back(e); }, offset, limit);
    return out;
  }

  /// get(id) copies the entry of job `id`, if it is in the DLQ. Requires a copy-constructible
  /// payload; a move-only one uses inspect().
  [[nodiscard]] std::optional<DeadLetter<T>> get(JobId id) requires std::copy_constructible<T> {
    std::optional<DeadLetter<T>> out;
    (void)inspect(id, [&](const DeadLetter<T>& e) { out.emplace(e); });
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
    store_->scan(offset, limit,
                 [&](const DeadLetterInfo& e) { fn(static_cast<const DeadLetter<T>&>(e)); });
  }

  /// inspect(id, fn) calls fn(const DeadLetter<T>&) on the entry of job `id` in place and
  /// returns true, or returns false if it is not in the DLQ. The rules of visit() apply to fn.
  template <DeadLetterVisitor<T> F>
  bool inspect(JobId id, F&& fn) {
    return store_->find(id,
                        [&](const DeadLetterInfo& e) { fn(static_cast<const DeadLetter<T>&>(e)); });
  }

  /// contains(id) tells whether job `id` is in the DLQ (no copy: any payload type).
  [[nodiscard]] bool contains(JobId id) {
    return store_->find(id, [](const DeadLetterInfo&) {});
  }

  /// remove(id) takes the entry of job `id` out of the DLQ and returns it (no event: the caller
  /// now owns the job).
  std::optional<DeadLetter<T>> remove(JobId id) {
    detail::EntryPtr e = store_->remove(id);
    if (!e) return std::nullopt;
    return std::optional<DeadLetter<T>>(std::move(static_cast<DeadLetter<T>&>(*e)));
  }

  /// purge() drops every entry; returns how many. (An explicit operator action: no events.)
  std::size_t purge() { return store_->purge(); }

  /// journal_failure() is why the journal stopped writing (disk full...), or empty while it
  /// works or when there is no journal. After a failure the DLQ goes on in memory only.
  [[nodiscard]] std::string journal_failure() const { return store_->journal_failure(); }
  /// sync_journal() puts every journaled change on the disk now (fdatasync), whatever the sync
  /// policy; blocks for it. No-op without a journal.
  void sync_journal() { store_->sync_journal(); }

  /// redrive(id, options) sends the entry back to its queue as the same job: its id, name,
  /// attempts budget, backoff, visibility timeout and dedup id (it holds the id again unless
  /// another job has claimed it since); counters as `options` say (BullMQ job.retry(), SQS
  /// redrive). On queue_full the entry stays in the DLQ.
  RedriveStatus redrive(JobId id, const RedriveOptions& options = {}) {
    return store_->redrive(id, options);
  }
  /// redrive_all(options) redrives entries oldest first until the queue is full; returns how many.
  std::size_t redrive_all(const RedriveOptions& options = {}) {
    return store_->redrive_all(options);
  }

 private:
  template <class, class>
  friend class Queue;
  explicit DeadLetterQueue(detail::DeadLetterStore& store) noexcept : store_(&store) {}
  detail::DeadLetterStore* store_;
};

}  // namespace rail
