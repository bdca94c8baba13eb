// JobQueries: a queue's read-only answers about its jobs — one job's state (JobState) and end
// (EndRecord), and the live jobs in a status, oldest first — from the slots, the queue's history
// of ended jobs, its retained ends and, for a dead-lettered job, its DLQ entry.
//
// Contract: every answer is a snapshot that was true at some moment during the call; nothing is
// changed, nothing blocks. A live job is read in its slot as a seqlock: the fields, then the word
// and the id again; a slot that moved meanwhile is read again (state) or skipped (jobs: as if
// listed a moment later). Ended jobs are answered from the history (QueueStats::recall), the
// retained ends (EndTracker) and the DLQ (DlqLookup), in that order of trust.
// Memory ordering: slot words are loaded acquire (SlotControl) and an acquire fence keeps the
// re-reads after the field loads; ids and counters are relaxed hints that the re-read validates.
// Threading: any thread, including handlers and observers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <unordered_set>
#include <vector>

#include "rail/detail/end_tracker.hpp"
#include "rail/detail/flow_parts.hpp"
#include "rail/detail/progress_board.hpp"
#include "rail/job_state.hpp"

namespace rail::detail {

/// DlqLookup: what the typed layer's DLQ tells about a dead-lettered job.
class DlqLookup {
 public:
  /// in_dlq(id): the job is in the DLQ (for a dead-lettered job the history no longer recalls).
  [[nodiscard]] virtual bool in_dlq(JobId id) const = 0;
  /// dlq_end(id): job `id`'s end as its DLQ entry tells it (reason, errors), if it is there.
  [[nodiscard]] virtual std::optional<EndRecord> dlq_end(JobId id) const = 0;
  /// dlq_sweep(now): the DLQ's timed checks (its age alert) at the queue's sweep; when the next
  /// one is due (kNever: none).
  virtual std::int64_t dlq_sweep(std::int64_t now) noexcept = 0;

 protected:
  ~DlqLookup() = default;
};

class JobQueries {
 public:
  JobQueries(const FlowParts& parts, const EndTracker& ends, const ProgressBoard& progress,
             const DlqLookup& dlq) noexcept
      : parts_(parts), ends_(ends), progress_(progress), dlq_(dlq) {}
  JobQueries(const JobQueries&) = delete;
  JobQueries& operator=(const JobQueries&) = delete;

  /// state(id): job `id`'s state now (status unknown: never added here, or forgotten).
  [[nodiscard]] JobState state(JobId id) const;
  /// jobs(status, limit): up to `limit` live jobs in `status` (waiting, delayed or active),
  /// oldest id first.
  [[nodiscard]] std::vector<JobInfo> jobs(JobStatus status, std::size_t limit) const;
  /// oldest_due(bound): the earliest due time (JobSlot::due_ns) of the jobs waiting to start in
  /// slots [0, bound), or nullopt when none waits: Queue::metrics' lag.
  [[nodiscard]] std::optional<std::int64_t> oldest_due(std::size_t bound) const noexcept;
  /// end_of(id): job `id`'s end if it ended and is retained, or what its history says (no result
  /// or errors then), or nullopt while it is live (or unknown to the queue: status unknown).
  [[nodiscard]] std::optional<EndRecord> end_of(JobId id) const;
  /// Known: a job take_known found: in slot `slot`, or ended (kEnded: in the history or DLQ).
  struct Known {
    JobId id;
    std::uint32_t slot;
  };
  static constexpr std::uint32_t kEnded = ~std::uint32_t{0};
  /// take_known(ids): removes from `ids` and returns every job this queue knows (in a slot, or
  /// ended in its history or DLQ): one pass over the slots for any number of ids.
  std::vector<Known> take_known(std::unordered_set<JobId>& ids) const;
  /// Place: where job `id` stands in slot `slot` (place()): `live` (waiting, delayed, running,
  /// updating), `moving` (finishing or cancelled with its end not decided: a retry, or an end
  /// not noted yet), `decided` (its end noted, as `*kind` says: JobSlot::end_kind; the history
  /// has it unless a later end overwrote its entry), or `gone` (the slot no longer holds it: its
  /// end is complete). A caller that registered a waiter for the job and fenced since
  /// (EndTracker::watch) can trust `moving`: the end, when it comes, sees that waiter.
  enum class Place : std::uint8_t { live, moving, decided, gone };
  [[nodiscard]] Place place(std::uint32_t slot, JobId id, EndKind* kind = nullptr) const noexcept;
  /// ended_end(id): the end of job `id`, which is not live here: retained, else what its DLQ
  /// entry or its history says; status unknown (with why) if the history forgot it.
  [[nodiscard]] EndRecord ended_end(JobId id) const;

 private:
  /// status_of(s, st): the status of slot s in state st (unknown for a slot that holds no live
  /// job); a job held on the wheel for its downstream is waiting.
  static JobStatus status_of(const JobSlot& s, SlotState st) noexcept;
  /// live_state(s, c): the state of the job in slot s as its word c shows it (the caller
  /// validates c afterwards).
  [[nodiscard]] JobState live_state(const JobSlot& s, std::uint64_t c) const noexcept;

  const FlowParts& parts_;
  const EndTracker& ends_;
  const ProgressBoard& progress_;
  const DlqLookup& dlq_;
};

}  // namespace rail::detail
