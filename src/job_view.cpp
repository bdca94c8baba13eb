// Job<T>'s delivery controls that do not depend on T (Job::cancelled, Job::extend_lease),
// compiled once; the contract is in include/rail/job.hpp.
#include <algorithm>

#include "rail/detail/job_slot.hpp"
#include "rail/detail/lease_tracker.hpp"
#include "rail/job.hpp"

namespace rail::detail {

bool fenced(const JobFields& job) noexcept {
  return job.ctl_->fenced(job.token_);
}

bool extend_lease(JobFields& job, Duration d) noexcept {
  if (job.deferral_ != nullptr && job.deferral_->taken) return false;  // the Completion's lease
  // No lease (visibility max): nothing to renew; a timeout alone is not renewed.
  if (job.record_ == nullptr || !job.renewable_) return !fenced(job);
  // Never past the attempt's timeout: a heartbeat renews the lease, not the run time allowed.
  const std::int64_t now = job.clock_->now().time_since_epoch().count();
  const std::int64_t deadline = std::min(saturating_add(now, d), job.timeout_at_);
  // The record is this worker's own; only its deadline's order against the sweep matters, and
  // renew() publishes that.
  const std::int64_t before = LeaseTracker::next_check(*job.record_, now);
  if (!LeaseTracker::renew(*job.record_, job.lease_, deadline, now)) return false;
  // Shorter than before (SQS ChangeMessageVisibility to 0), or a warning due sooner: the sweep
  // may be armed at the old time, so ask for one by the new one.
  const std::int64_t after = LeaseTracker::next_check(*job.record_, now);
  if (after < before && job.timers_ != nullptr) sweep_no_later_than(*job.timers_, after);
  return !fenced(job);
}

}  // namespace rail::detail
