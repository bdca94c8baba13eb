// JobBatch: a set of jobs, across any queues, whose completion is one event (Sidekiq's batches,
// Celery's chords, without their lost or early callbacks): `engine.batch(options)` returns a
// handle; jobs added through it join it; seal() closes it; on_complete (every member ended) and
// on_success (every member completed) each fire exactly once (job_batch_options.hpp).
//
// Guarantee: a callback never fires before seal(), nor while an add through the batch is still
// in flight, so it cannot run before the last member joined (sidekiq-batch#69's race); a member
// dead-lettered counts as ended, and redriven from the DLQ it is live again (on_success then
// fires once it completes; on_complete never fires twice). A nested batch (batch()) is one
// member of its parent. Batches whose on_complete has not fired at shutdown are listed in
// ShutdownReport::open_batches; an engine being destroyed fires no callback.
// Cost: each add through a batch is a tracked add (Queue::add_tracked) plus a map entry: cold
// compared with a plain add, and nothing for jobs outside batches.
// Threading: a handle is cheap to copy (shared); every call from any thread. Adding after
// seal() throws Error(sealed).
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>

#include "rail/add_receipt.hpp"
#include "rail/detail/batch_state.hpp"
#include "rail/job_batch_options.hpp"
#include "rail/job_handle.hpp"
#include "rail/options.hpp"
#include "rail/queue.hpp"

namespace rail {

class JobBatch {
 public:
  /// id(): engine-unique, from 1.
  [[nodiscard]] std::uint64_t id() const noexcept { return state_->id(); }

  /// add(queue, name, data[, options]): queue.add_tracked(name, data, options), and the job it
  /// names joins the batch: a new job, one filed to the DLQ for want of room, or the live job a
  /// duplicate merged into; an add that created nothing (full, dedup_full, shutting_down, kept:
  /// the kept job comes later, outside the batch) joins nothing. Throws Error(sealed) once
  /// the batch is sealed, and what add_tracked throws (then nothing joined).
  template <class T, class R>
  JobHandle<R> add(Queue<T, R>& queue, std::string_view job_name, T data,
                   const JobOptions& options) {
    return join([&] { return queue.add_tracked(job_name, std::move(data), options); });
  }
  /// add(queue, name, data): with the queue's QueueOptions::defaults.
  template <class T, class R>
  JobHandle<R> add(Queue<T, R>& queue, std::string_view job_name, T data) {
    return join([&] { return queue.add_tracked(job_name, std::move(data)); });
  }

  /// batch(options): a nested batch, one member of this one: it ends when its own on_complete
  /// condition holds (completed if all its members completed). Error(sealed) once sealed.
  [[nodiscard]] JobBatch batch(JobBatchOptions options = {}) {
    return JobBatch(state_->nest(std::move(options)));
  }

  /// seal(): no job joins from now on; the callbacks fire once their condition holds (at once
  /// for a batch whose members all ended). Idempotent.
  void seal() { state_->seal(); }

  /// summary(): the members by how they stand now.
  [[nodiscard]] JobBatchSummary summary() const { return state_->summary(); }

 private:
  friend class Engine;
  explicit JobBatch(std::shared_ptr<detail::BatchState> state) : state_(std::move(state)) {}

  /// join(add): runs add() (an add_tracked) as a reserved add of this batch, and the job its
  /// handle names joins it.
  template <class Add>
  auto join(Add&& add) -> decltype(add()) {
    state_->reserve();
    auto h = [&] {
      try {
        return add();
      } catch (...) {
        state_->unreserve();
        throw;
      }
    }();
    if (!joins(h.added().status)) {
      state_->unreserve();
      return h;
    }
    bool fresh;
    try {
      fresh = state_->joined(h.id(), h.watch_.waiter());
    } catch (...) {  // no memory to record it: the job runs, outside the batch
      state_->unreserve();
      throw;
    }
    // Through the handle's watch, which also finds an end that came before it (by id, in the
    // queue's history: an overflow filed to the DLQ, a job a duplicate merged into).
    if (fresh) state_->watch(h.id(), [&](auto cb) { h.watch_.on_end(std::move(cb)); });
    return h;
  }

  /// joins(status): whether an add with this status names a job (new, merged, or filed).
  static constexpr bool joins(AddStatus s) noexcept {
    // Not `kept`: its job comes later, with an id of its own, outside the batch.
    return s == AddStatus::added || s == AddStatus::duplicate || s == AddStatus::debounced ||
           s == AddStatus::dead_lettered;
  }

  std::shared_ptr<detail::BatchState> state_;
};

}  // namespace rail
