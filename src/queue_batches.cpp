// QueueImpl's batches (Queue::process_batch): each worker holds the deliveries it opens (each
// activated, leased in a record of its own, with its permit) in its batch; the batch handler
// runs once the batch is full, or when the worker runs out of jobs (after its linger), ends its
// turn or exits, and then each job's outcome closes its delivery as a handler's return would
// (close_delivery). The semantics are in include/rail/batch.hpp.
//
// Contract: a worker's batch is touched only by that worker's thread (worker index w: the
// dispatcher's own workers, a shared-pool worker in its turn, or the run_until_idle caller,
// w = 0), so it needs no lock. A held delivery is an open delivery like a running handler's:
// its slot is pinned and active, a lapsed lease or a cancel fences its outcome (the sweep scans
// the held records with the workers'), and it is closed exactly once, by run_batch. Nothing here
// allocates per job: each batch's vectors hold `max` from the start.
#include <algorithm>
#include <exception>
#include <utility>

#include "rail/detail/assert.hpp"
#include "rail/detail/handler_failure.hpp"
#include "rail/detail/queue_impl.hpp"
#include "rail/detail/scoped_value.hpp"
#include "rail/detail/validation.hpp"
#include "rail/detail/worker_pool.hpp"
#include "rail/error.hpp"

namespace rail::detail {

void QueueImpl::set_batch_handler(BatchRun run, HandlerBox handler, const WorkerOptions& w,
                                  const BatchOptions& b) {
  validate_batch_options(b, name());
  std::lock_guard lock(handler_mu_);
  check_processor_locked(w);
  // The worker indices (the queue's lease records come first: make_leases) and how many of them
  // may hold a batch at once (a shared-pool worker holds one only within its turn).
  const bool threaded = core().mode() == Mode::threaded;
  const bool shared = threaded && w.pool == Pool::shared;
  std::uint32_t workers = 1;
  std::uint32_t holding = 1;
  if (shared) {
    workers = core().shared_pool().size();  // may start the pool; nothing else is done yet
    holding = std::min(workers, w.concurrency.value_or(workers));
  } else if (threaded) {
    workers = holding = w.concurrency.value_or(1);
  }
  const std::uint64_t held = std::uint64_t{b.max} * holding;
  if (held > WorkerOptions::kMaxPending)
    throw Error(ErrorCode::invalid_option,
                "process_batch on queue '" + name() + "': BatchOptions.max (" +
                    std::to_string(b.max) + ") x " + std::to_string(holding) +
                    " workers = " + std::to_string(held) +
                    " open deliveries; expected at most WorkerOptions::kMaxPending (" +
                    std::to_string(WorkerOptions::kMaxPending) + "): lower max or the concurrency");
  std::vector<WorkerBatch> batches(workers);
  for (WorkerBatch& wb : batches) {
    wb.entries.reserve(b.max);
    wb.outcomes.resize(b.max);
    wb.set.resize(b.max);
  }
  batches_ = std::move(batches);
  batch_run_ = run;
  batch_max_ = b.max;
  // Lingering keeps a worker from the queue's other jobs only on the queue's own pool; a shared
  // pool's worker runs what it holds when its turn ends.
  batch_linger_ns_ = threaded && !shared && b.linger.count() > 0 ? b.linger.count() : INT64_MIN;
  hold_deliveries(b.max);
  start_bound(&refuse_nested, std::move(handler), w);
}

Outcome QueueImpl::refuse_nested(void* self, const void*, JobFields&) {
  // Only a nested run_until_idle from the batch handler itself delivers while its batch runs:
  // the job's attempt fails with why, instead of the handler's batch changing under it.
  throw Error(ErrorCode::would_deadlock,
              "queue '" + static_cast<QueueImpl*>(self)->name() +
                  "': a batch handler ran this queue's jobs (Engine::run_until_idle inside it); "
                  "run_until_idle does not nest: return from the handler instead");
}

void QueueImpl::hold(OpenDelivery&& d, const void* payload, WorkerContext& wc) {
  RAIL_INVARIANT(d.job.worker_ < batches_.size(), "a delivering worker is one of the queue's");
  WorkerBatch& b = batches_[d.job.worker_];
  // The linger: from the batch's first job, cut short by half the shortest lease it holds (a
  // held job's lease keeps running) and ended by any downstream permit it holds (the permits
  // would keep the next jobs out of the batch it waits to fill). The clock is read only where
  // the worker may linger.
  if (batch_linger_ns_ != INT64_MIN) {
    // This delivery's start, read by deliver on steady_ns()'s timeline moments ago.
    const std::int64_t now = wc.last_wall_ns;
    // Read after the grant: only the add writes it, and the delivery's pin keeps the slot from
    // being reused meanwhile.
    // The delivery's deadline: its lease, or its attempt's timeout if sooner.
    const JobSlot& s = slot(d.job.idx_);
    const std::int64_t lease_ns =
        std::min(d.job.renewable_ ? s.visibility_ns : kNever, s.timeout_ns);
    if (b.entries.empty()) b.linger_end = saturating_add(now, Duration{batch_linger_ns_});
    if (d.leased && lease_ns != kNever)
      b.linger_end = std::min(b.linger_end, saturating_add(now, Duration{lease_ns / 2}));
    if (d.permit) b.linger_end = INT64_MIN;
  }
  b.entries.push_back(BatchEntry{std::move(d), payload});
  if (b.entries.size() >= batch_max_) run_batch(b, wc);
}

namespace {
/// How many closes ahead run_batch fetches a held job's slot header.
constexpr std::size_t kCloseAhead = 4;
}  // namespace

void QueueImpl::run_batch(WorkerBatch& b, WorkerContext& wc) {
  // Running until every delivery is closed: an end's observer or waiter (called by finish) may
  // run_until_idle, and a delivery it makes must not join this batch (refuse_nested).
  const ScopedValue<bool> running(b.running, true);
  wc.fresh_ns = INT64_MIN;  // the handler runs: the next start reads the clock again
  const std::size_t n = b.entries.size();
  for (std::size_t i = 0; i < n; ++i) {
    b.outcomes[i] = Outcome::done();
    b.set[i] = 0;
  }
  try {
    batch_run_(handler_.get(), b.entries.data(), n, b.outcomes.data(), b.set.data());
  } catch (...) {
    // As a single handler's throw: every job the handler gave no outcome fails with it.
    const Outcome failed = handler_failure(std::current_exception());
    for (std::size_t i = 0; i < n; ++i)
      if (b.set[i] == 0) b.outcomes[i] = failed;
  }
  // In the order the worker took them, as a handler's returns would come. Each is closed even if
  // an earlier close threw (finish: no memory for a DLQ entry); the first throw goes on after.
  // Each ends when the handler returned: one clock reading for the batch.
  const ScopedValue<std::int64_t> closing(wc.closing_ns, core().now_ns());
  // The batch's slots left this core's first-level cache while the rest of it was delivered and
  // its handler ran: the first kCloseAhead slot headers are fetched now, and each close fetches
  // the one kCloseAhead behind it.
  const auto fetch = [&](std::size_t i) noexcept {
    prefetch_slot(slot(b.entries[i].open.job.idx_));
  };
  for (std::size_t i = 0; i < std::min(n, kCloseAhead); ++i)
    fetch(i);
  std::exception_ptr thrown;
  for (std::size_t i = 0; i < n; ++i) {
    if (i + kCloseAhead < n) fetch(i + kCloseAhead);
    try {
      close_delivery(b.entries[i].open, std::move(b.outcomes[i]), wc);
    } catch (...) {
      if (!thrown) thrown = std::current_exception();
    }
  }
  b.entries.clear();
  if (thrown) std::rethrow_exception(thrown);
}

void QueueImpl::worker_idle(std::uint32_t w, WorkerContext& wc) {
  // Running already: a run_until_idle nested in its own handler ends here; the batch is the
  // outer call's to finish.
  if (batch_run_ != nullptr && w < batches_.size() && !batches_[w].entries.empty() &&
      !batches_[w].running) {
    // As a handler: calls from it that would wait for this worker are refused
    // (would_deadlock).
    const ScopedValue<const QueueBase*> delivering(current_delivery(), this);
    run_batch(batches_[w], wc);
  }
  stamp_end(wc);  // before the worker waits, its last completion's end gets its time
}

std::int64_t QueueImpl::linger_until(std::uint32_t w) const noexcept {
  if (batch_linger_ns_ == INT64_MIN || w >= batches_.size() || batches_[w].entries.empty())
    return INT64_MIN;
  return batches_[w].linger_end;
}

}  // namespace rail::detail
