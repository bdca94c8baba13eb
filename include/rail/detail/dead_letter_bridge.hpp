// DeadLetterBridge: a queue's DLQ and the paths between it and the queue's slots: filing a
// dead-lettered job's entry, dead-lettering an add that found the queue full, redriving an entry
// as its job again, answering for jobs that are in the DLQ, and what the store needs of the
// engine (its clock, events, the id counter, callbacks after the wheel).
//
// Contract: file() runs where a job ends, after its slot was given back (or left to a stale
// handler with a copy), and raises the job's dead_lettered event once the entry can be found
// (DeadLetterStore::push). overflow() creates nothing in the queue: the entry gets a fresh id and
// the queue counts it added and dead-lettered. redrive() takes the entry's payload only once the
// queue has taken a slot for it (JobFlow::redrive_with): on queue_full, shutting_down or a throw
// the entry is left whole. Thread-safe as the store is. Compiled once in src/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "rail/add_receipt.hpp"
#include "rail/dead_letter.hpp"
#include "rail/detail/dead_letter_store.hpp"
#include "rail/detail/end_tracker.hpp"
#include "rail/event.hpp"
#include "rail/options.hpp"

namespace rail::detail {

class JobFlow;

class DeadLetterBridge {
 public:
  DeadLetterBridge(JobFlow& flow, DlqOptions options, const PayloadOps& ops);
  DeadLetterBridge(const DeadLetterBridge&) = delete;
  DeadLetterBridge& operator=(const DeadLetterBridge&) = delete;

  [[nodiscard]] DeadLetterStore& store() noexcept { return store_; }

  /// file(entry, event): into the DLQ, then the job's dead_lettered event (if any).
  void file(EntryPtr entry, const Event* event);
  /// overflow(job_name, data, o, forced): the queue is full: what its policy says (or the DLQ
  /// when `forced`); `data` is moved into the entry.
  AddReceipt overflow(std::string_view job_name, void* data, const JobOptions& o,
                      bool forced = false);
  /// redrive(e, r): the entry's job again, with its own options (DeadLetterQueue::redrive).
  RedriveStatus redrive(DeadLetterInfo& e, const RedriveOptions& r);

  /// contains(id) / end_of(id): JobQueries' DlqLookup answers.
  [[nodiscard]] bool contains(JobId id) const { return store_.contains(id); }
  [[nodiscard]] std::optional<EndRecord> end_of(JobId id) const;

  // --- for the store -----------------------------------------------------------------------------
  [[nodiscard]] const std::string& name() const noexcept;
  [[nodiscard]] std::int64_t now_ns() const;
  void skip_ids_past(JobId id);
  /// emit(kind, id, job_name, depth, elapsed): the DLQ's own events (evicted, the alerts).
  void emit(EventKind kind, JobId id, std::string_view job_name, std::size_t depth,
            Duration elapsed = {});
  /// check_by(due): the store's next timed check is due then (the queue's sweep runs by then).
  void check_by(std::int64_t due) noexcept;
  /// after_wheel(f): f runs where no timer callback holds the wheel (EngineCore::after_wheel).
  void after_wheel(std::function<void()> f);

 private:
  JobFlow& flow_;
  const PayloadOps& ops_;
  mutable DeadLetterStore store_;  // contains() and find() lock it: const calls reach it
};

}  // namespace rail::detail
