// Completions: a queue's deliveries that handlers handed to a Completion (Job::defer) — taking a
// pending record and moving the delivery's lease into it, and applying, cancelling or extending
// it when the Completion says so (rail::Completion reaches these through the queue's hub).
//
// Guarantee: a deferred delivery counts exactly once, as a handler's would: its outcome goes
// through JobFlow::finish, fenced by the delivery's token like a returning handler's; a lease
// that lapses first wins instead (exactly one of the lapse and the completion clears the lease
// word). A pending record goes back inside finish(), with the delivery's pin, so a retry that is
// redelivered and deferred at once finds it (else a queue with max_pending equal to its
// downstream's concurrency throws `capacity`: pinned by
// CompletionThreads.ARetriedJobsNextDeferFindsTheRecordItsCompletionGaveBack). Deferring
// allocates nothing: the records are preallocated (pending_jobs.hpp).
// Preconditions: defer() runs on the delivering handler's thread while its delivery is live;
// complete/cancelled/extend run inside the hub (CompletionHub::enter), so the queue is alive.
// Memory ordering: a pending record is written by the deferring thread before the Completion
// leaves it and read by the completer after it got the Completion (the user's hand-off orders
// them). The lease moves by a grant into the record and an acq_rel CAS clearing the worker's
// word, the same RMW the sweep makes on it (lease_tracker.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <stop_token>
#include <typeindex>

#include "rail/completion.hpp"
#include "rail/detail/downstream_links.hpp"
#include "rail/detail/flow_parts.hpp"
#include "rail/detail/lease_tracker.hpp"
#include "rail/detail/pending_jobs.hpp"
#include "rail/detail/timer_port.hpp"
#include "rail/job.hpp"
#include "rail/outcome.hpp"

namespace rail::detail {

class JobFlow;

class Completions {
 public:
  Completions(FlowParts& parts, JobFlow& flow, DownstreamLinks& links, TimerPort& timers) noexcept
      : parts_(parts), flow_(flow), links_(links), timers_(timers) {}
  Completions(const Completions&) = delete;
  Completions& operator=(const Completions&) = delete;

  /// open(leases, max_pending, first_record): before the workers start: room for max_pending
  /// deferred deliveries, whose lease records are leases' first_record onwards (none: 0).
  void open(LeaseTracker& leases, std::uint32_t max_pending, std::uint32_t first_record);
  /// drop(): the workers failed to start: as before open().
  void drop() noexcept {
    pending_.reset();
    leases_ = nullptr;
  }
  /// close(): the engine's teardown, once no worker runs: Completions still out complete nothing
  /// from now on (CompletionHub::close).
  void close() noexcept {
    if (pending_) pending_->hub()->close();
  }
  /// enabled(): the queue lets handlers defer (WorkerOptions::max_pending > 0).
  [[nodiscard]] bool enabled() const noexcept { return pending_ != nullptr; }

  /// defer(job): the handler of `job` hands its delivery to a Completion (Job::defer's throws:
  /// Error(invalid_option) when the queue allows none or twice per delivery, Error(capacity)
  /// when max_pending are pending already).
  Completion defer(JobFields& job);
  /// give_back(r): finish() applied pending record r's outcome (see the header).
  void give_back(std::uint32_t r) noexcept { pending_->give_back(r); }

  // --- inside the hub (rail::Completion) ------------------------------------------------------
  /// complete(r, out, result_type): record r's Completion delivers `out` (of a Result<R> with
  /// R = result_type, or void), applied as the handler's outcome. True if it counted.
  bool complete(std::uint32_t r, Outcome&& out, std::type_index result_type);
  /// cancelled(r) / extend(r, d) / stop_token(r): Completion::cancelled / extend_lease /
  /// stop_token.
  [[nodiscard]] bool cancelled(std::uint32_t r) const noexcept;
  bool extend(std::uint32_t r, Duration d) noexcept;
  [[nodiscard]] std::stop_token stop_token(std::uint32_t r);

 private:
  FlowParts& parts_;
  JobFlow& flow_;
  DownstreamLinks& links_;
  TimerPort& timers_;
  LeaseTracker* leases_ = nullptr;        // the queue's, from open()
  std::unique_ptr<PendingJobs> pending_;  // null: max_pending 0
};

}  // namespace rail::detail
