// Completions: see include/rail/detail/completions.hpp.
#include "rail/detail/completions.hpp"

#include <string>
#include <utility>

#include "rail/detail/deadline.hpp"
#include "rail/detail/job_flow.hpp"
#include "rail/error.hpp"

namespace rail::detail {

// A stale Completion keeps its delivery's pin: a job's pins add up to the queue's workers, its
// pending records and a canceller, within the slot's 16-bit count (slot_table.hpp).
static_assert(std::uint64_t{WorkerOptions::kMaxConcurrency} + WorkerOptions::kMaxPending + 1 <=
              0xFFFF);

Completion defer_job(JobFlow& flow, JobFields& job) {
  return flow.defer(job);
}

void Completions::open(LeaseTracker& leases, std::uint32_t max_pending,
                       std::uint32_t first_record) {
  if (max_pending > 0) pending_ = std::make_unique<PendingJobs>(*this, max_pending, first_record);
  leases_ = &leases;
}

Completion Completions::defer(JobFields& job) {
  if (job.deferral_ == nullptr)
    throw Error(ErrorCode::invalid_option,
                "Job::defer on queue '" + parts_.name +
                    "', whose WorkerOptions.max_pending is 0; expected process() with "
                    "max_pending >= 1 (the jobs that may await their Completion at once)");
  if (job.deferral_->taken)
    throw Error(ErrorCode::invalid_option,
                "Job::defer called twice for delivery " + std::to_string(job.deliveries_) +
                    " of job " + std::to_string(job.id_) + " on queue '" + parts_.name +
                    "'; expected one Completion per delivery");
  std::uint32_t r = 0;
  if (!pending_->take(r))
    throw Error(ErrorCode::capacity,
                "queue '" + parts_.name + "' has WorkerOptions.max_pending (" +
                    std::to_string(pending_->size()) +
                    ") jobs awaiting their Completion already; expected fewer in flight (bound "
                    "them with a downstream's concurrency) or a larger max_pending");
  PendingJob& p = pending_->job(r);
  p.idx = job.idx_;
  p.token = job.token_;
  p.delivery = job.deliveries_;
  p.permit = job.deferral_->permit;
  p.link = parts_.slot(job.idx_).downstream_link();  // the slot is this handler's (pinned, active)
  p.started_ns = job.started_at_.time_since_epoch().count();
  p.renewable = job.renewable_;
  p.lease = 0;
  if (job.record_ != nullptr) {
    LeaseRecord& worker = *job.record_;
    LeaseRecord& record = leases_->record(pending_->lease_record(r));
    // The lease moves with its deadline unchanged: granted here before the worker's record
    // lets go, so every sweep finds it in one record or both (a lease lapsed from both is
    // lapsed once: the second lapse CAS finds the delivery gone). relaxed: the worker's record
    // is this thread's own; the sweep's CAS is ordered by the word itself.
    LeaseTracker::hand_over(record, worker, job.lease_);
    std::uint64_t held = job.lease_;
    // acq_rel, like the sweep's CAS on the same word: exactly one of the two clears it.
    if (!worker.lease.compare_exchange_strong(held, 0, std::memory_order_acq_rel,
                                              std::memory_order_relaxed))
      LeaseTracker::release(record);  // the sweep lapsed it meanwhile: nothing left to watch
    else
      p.lease = job.lease_;
    // The record is the Completion's: once it completes, the record serves another delivery,
    // so the handler's view must not renew it (Job::extend_lease says false after defer()).
    job.record_ = nullptr;
  }
  // The Completion takes the delivery's pin; the handler, which may read the payload until it
  // returns (and its Completion may end the job before that), keeps one of its own, dropped by
  // deliver. Last: nothing above throws once the pin is taken.
  parts_.slot(job.idx_).ctl.pin();
  job.deferral_->taken = true;
  return Completion(pending_->hub(), r, job.id_);
}

bool Completions::complete(std::uint32_t r, Outcome&& out, std::type_index result_type) {
  const PendingJob p = pending_->job(r);
  if (p.lease != 0) {  // a lapse after this loses to finish()
    LeaseTracker::release(leases_->record(pending_->lease_record(r)));
  }
  const std::type_index own = flow_.result_type();
  if (out.kind() == Outcome::Kind::pending) {
    out = Outcome::retry(
        "Completion::complete was given the Outcome of Job::defer; expected the attempt's own "
        "outcome (done, retry, retry_in, fail, discard or pushback)");
  } else if (result_type != typeid(void) && result_type != own) {
    out = Outcome::fail(
        "Completion::complete(Result<R>) with R = " + std::string(result_type.name()) +
        " on queue '" + parts_.name + "', whose result type is " +
        (own == typeid(void) ? std::string("none (complete with an Outcome)")
                             : std::string(own.name())));
  } else if (result_type == typeid(void) && own != typeid(void) && out.ok()) {
    out = Outcome::fail("Completion::complete(Outcome::done()) on queue '" + parts_.name +
                        "', which has a result type; expected complete(rail::Result<R>(result))");
  }
  // The permit goes back after finish(), which gives the pending record back with the delivery's
  // pin: the job the freed permit admits may defer at once, and must find the record (else a
  // queue whose downstream's concurrency equals max_pending throws `capacity`:
  // CompletionThreads.APermitACompletionFreesNeverAdmitsADeferThatFindsNoRecord pins it). A
  // pushback pauses the downstream before, as return_permit does for a returning handler.
  DownstreamGate* const gate = p.permit ? &links_.link(p.link)->gate() : nullptr;
  if (gate && out.kind() == Outcome::Kind::pushback) [[unlikely]]
    gate->limits().pause_for(parts_.core.now_ns(), out.delay());
  // The completer's own context: no worker counters (the shared stripes count), its own
  // randomness for the retry's jitter, and a lease record that nothing uses (finish() grants
  // no lease): the delivery's pending record, lease record included, goes back inside finish(),
  // and only `p`, our copy of it, is read here. (A sweep that cleared the lease word first
  // lapses by the lease value it read, never by the record.)
  LeaseRecord unused;
  WorkerContext wc(unused, SplitMix64(parts_.core.seed() ^ (std::uint64_t{p.token} << 32 | p.idx)),
                   nullptr, nullptr);
  bool counted = false;
  try {
    counted = flow_.finish(p.idx, p.token, std::move(out), wc, TimePoint{Duration{p.started_ns}},
                           p.delivery, r);
  } catch (...) {  // no memory for the error log: the permit goes back all the same
    if (gate) gate->release(parts_.core.now_ns());
    throw;
  }
  if (gate) gate->release(parts_.core.now_ns());
  parts_.count(nullptr, kAttemptEnded);  // after finish(), as deliver counts it: see there
  return counted;
}

bool Completions::cancelled(std::uint32_t r) const noexcept {
  const PendingJob& p = pending_->job(r);
  return parts_.slot(p.idx).ctl.fenced(p.token);
}

std::stop_token Completions::stop_token(std::uint32_t r) {
  const PendingJob& p = pending_->job(r);
  const SlotControl<>& ctl = parts_.slot(p.idx).ctl;
  return parts_.stops.token(p.idx, p.token, [&ctl, t = p.token] { return ctl.fenced(t); });
}

bool Completions::extend(std::uint32_t r, Duration d) noexcept {
  const PendingJob& p = pending_->job(r);
  // Leases disabled, lapsed at the hand-off, or a timeout alone (not renewed).
  if (p.lease == 0 || !p.renewable) return !cancelled(r);
  LeaseRecord& record = leases_->record(pending_->lease_record(r));
  // Never past the attempt's timeout (Job::extend_lease). The slot is pinned by this delivery.
  const std::int64_t now = parts_.core.now_ns();
  const std::int64_t deadline =
      std::min(saturating_add(now, d),
               saturating_add(p.started_ns, Duration{parts_.slot(p.idx).timeout_ns}));
  // Only the Completion's holder renews this record (see Job::extend_lease).
  const std::int64_t before = LeaseTracker::next_check(record, now);
  if (!LeaseTracker::renew(record, p.lease, deadline, now)) return false;
  const std::int64_t after = LeaseTracker::next_check(record, now);
  if (after < before && parts_.core.mode() == Mode::threaded) timers_.request_sweep_by(after);
  return !cancelled(r);
}

}  // namespace rail::detail
