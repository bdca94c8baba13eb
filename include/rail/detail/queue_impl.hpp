// QueueImpl: one named, bounded queue with its payload type erased: the part of a queue that
// touches payloads, through the type's PayloadOps (payload_ops.hpp). Where a job goes and who may
// change its state is the job flow's (job_flow.hpp); this layer keeps the payload cells' contents
// and the calls that carry a payload:
//   add / add_bulk   fill a slot's payload (JobFlow::add_with runs the rest of the add)
//   merges           a duplicate of a live job: debounce or replace a delayed job's payload
//                    (SlotControl::begin_update refuses while a stale handler still reads it),
//                    or keep it for after the running job (KeptAdds, kept_adds.hpp)
//   run_handler      the bound handler on a slot's payload (Queue::process binds it)
//   retire           a job's end: move the payload into its DLQ entry (filed by the bridge,
//                    dead_letter_bridge.hpp, which also owns overflow and redrive) or destroy it
//   take_leftovers   the payloads of jobs that never started, handed back after shutdown
//   batches          process_batch: each worker holds its deliveries open, then runs them together
// Compiled once in src/ (queue_impl.cpp, queue_merges.cpp, queue_batches.cpp, queue_front.cpp);
// Queue<T, R> reaches it through QueueFront. A trivially copyable payload is moved by memcpy and
// never destroyed, so its hot path makes no indirect call; any other pays one per add and one per
// end. Memory ordering: a payload is written by its slot's holder before the flow publishes the
// slot (a ring push or a ctl release) and read by the next holder after it acquired it; see
// job_flow.hpp. The debounce writes it inside begin_update/end_update (slot_table.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "rail/batch.hpp"
#include "rail/detail/dead_letter_bridge.hpp"
#include "rail/detail/job_flow.hpp"
#include "rail/detail/kept_adds.hpp"
#include "rail/detail/payload_ops.hpp"
#include "rail/detail/queue_front.hpp"

namespace rail::detail {

class QueueImpl final : public JobFlow, public QueueFront {
 public:
  QueueImpl(EngineCore& core, std::string name, QueueOptions options, const PayloadOps& ops);
  ~QueueImpl() override;

  // Both bases name these; inside the queue they are the flow's (QueueFront's forward to them).
  using JobFlow::core;
  using JobFlow::name;
  using JobFlow::options;
  using JobFlow::schedules;
  using RunHandler = QueueFront::RunHandler;  // the same type as JobFlow's
  using HandlerBox = QueueFront::HandlerBox;

  /// of(front): the queue behind a QueueFront (its only derived class is QueueImpl).
  static QueueImpl& of(QueueFront& front) noexcept { return static_cast<QueueImpl&>(front); }
  static const QueueImpl& of(const QueueFront& front) noexcept {
    return static_cast<const QueueImpl&>(front);
  }

  std::type_index payload_type() const noexcept override { return ops_.type; }
  [[nodiscard]] const PayloadOps& payload_ops() const noexcept { return ops_; }
  [[nodiscard]] DeadLetterBridge& bridge() noexcept { return bridge_; }

  /// Who adds: a producer; a producer's add tried once more (see merge_duplicate); an add that
  /// was kept until its running job ended (run_deferred); or a schedule's run. A kept add and a
  /// run may not wait for room: they run where another job ended or a timer fired, possibly on
  /// the timer thread.
  enum class AddFrom : std::uint8_t { producer, producer_again, kept, schedule };

  /// add_one(..., from, prior, watch): an add of the payload at `data` (moved from), for the
  /// adder `from`; a kept add takes the dedup id over from its ended job `prior`, which held it
  /// for it. `watch`: a new job's waiter is registered there before the job is published
  /// (add_tracked), so its end cannot be missed.
  AddReceipt add_one(std::string_view job_name, void* data, const JobOptions& o,
                     AddFrom from = AddFrom::producer, JobId prior = 0,
                     std::shared_ptr<EndWaiter>* watch = nullptr);
  /// resume_one(job_name, data, o, r): QueueFront::resume (JobFlow::add_resumed).
  AddReceipt resume_one(std::string_view job_name, void* data, const JobOptions& o,
                        const Resumed& r) {
    return add_resumed(job_name, o, r, [&](void* cell) noexcept { ops_.move(cell, data); });
  }
  QueueFront::TrackedAdd add_tracked(std::string_view job_name, void* data, const JobOptions& o);
  BulkAddReceipt add_bulk(std::string_view job_name, void* items, std::size_t n,
                          const JobOptions& o);
  ScheduleInfo schedule(std::string_view id, const Schedule& when, std::string_view job_name,
                        void* data, const ScheduleOptions& o);
  void check_processor(const WorkerOptions& w) const;
  void set_handler(RunHandler run, HandlerBox handler, const WorkerOptions& w);
  void take_leftovers(FunctionRef<void(LeftoverJob&&, bool, void*)> take);
  /// metrics(): Queue::metrics (queue_metrics.cpp).
  [[nodiscard]] QueueMetrics metrics() override;
  /// set_batch_handler(run, handler, w, b): Queue::process_batch (queue_batches.cpp).
  void set_batch_handler(BatchRun run, HandlerBox handler, const WorkerOptions& w,
                         const BatchOptions& b);

 private:
  [[nodiscard]] void* payload(std::uint32_t idx) const noexcept { return cell(idx); }
  void check_processor_locked(const WorkerOptions& w) const;  // under handler_mu_
  /// start_bound(run, handler, w): under handler_mu_, binds the handler and starts the workers;
  /// a failed start leaves the queue as before (process() may be called again).
  void start_bound(RunHandler run, HandlerBox handler, const WorkerOptions& w);

  // PayloadHooks, DlqLookup and the deferred adds (job_flow.hpp, job_ends.hpp)
  void retire(std::uint32_t idx, bool dead_letter, const Event* event) override;
  bool file_copy(std::uint32_t idx, const Event* event) override;
  bool in_dlq(JobId id) const override { return bridge_.contains(id); }
  std::optional<EndRecord> dlq_end(JobId id) const override { return bridge_.end_of(id); }
  std::int64_t dlq_sweep(std::int64_t now) noexcept override {
    return bridge_.store().sweep_alerts(now);
  }
  void collect_deferred(ShutdownReport& report) const override { kept_.list(report, name()); }
  void run_deferred(JobId id) noexcept override;
  /// entry_of(idx, payload, copy): the DLQ entry of the job ending in slot idx, its payload
  /// moved (or copied) from `payload`.
  EntryPtr entry_of(std::uint32_t idx, void* payload, bool copy) const;

  // Batches (queue_batches.cpp): each worker holds the deliveries it opened until its batch runs.
  /// WorkerBatch: one worker's batch, used by that worker's thread only; room for `max` jobs.
  /// A line of its own: each worker writes its batch's fields for every job it holds.
  struct alignas(64) WorkerBatch {
    std::vector<BatchEntry> entries;
    std::vector<Outcome> outcomes;
    std::vector<std::uint8_t> set;
    std::int64_t linger_end = 0;  // steady_ns() past which it waits no more (linger_until)
    bool running = false;         // its handler runs (run_batch): nothing may join it
  };
  /// hold: a delivery the flow opened joins its worker's batch, which runs when full.
  void hold(OpenDelivery&& d, const void* payload, WorkerContext& wc) override;
  [[nodiscard]] std::uint32_t next_held(std::uint32_t w) const noexcept override {
    // Running: only a run_until_idle nested in its handler delivers now (refuse_nested).
    return batches_[w].running ? kNotHeld : static_cast<std::uint32_t>(batches_[w].entries.size());
  }
  /// refuse_nested: a batch queue's RunHandler, for the deliveries no batch may hold.
  static Outcome refuse_nested(void* self, const void* payload, JobFields& job);
  /// run_batch(b, wc): the batch handler on b's jobs, then each job's outcome (close_delivery).
  void run_batch(WorkerBatch& b, WorkerContext& wc);
  void worker_idle(std::uint32_t w, WorkerContext& wc) override;
  [[nodiscard]] bool holds_batch(std::uint32_t w) const noexcept override {
    return w < batches_.size() && !batches_[w].entries.empty();
  }
  [[nodiscard]] std::int64_t linger_until(std::uint32_t w) const noexcept override;

  // The merges of a duplicate add (queue_merges.cpp).
  AddReceipt merge_duplicate(const DedupSet::Claim& claim, std::string_view job_name, void* data,
                             const JobOptions& o, std::int64_t now, AddFrom from,
                             std::shared_ptr<EndWaiter>* watch);
  bool try_replace(const DedupSet::Claim& claim, void* data, const JobOptions& o, std::int64_t now);
  bool still_queued(const DedupSet::Claim& claim) const noexcept;
  bool keep_last(const DedupSet::Claim& claim, std::string_view job_name, void* data,
                 const JobOptions& o);

  const PayloadOps& ops_;
  DeadLetterBridge bridge_;  // the DLQ, and the paths between it and the slots
  mutable std::mutex handler_mu_;
  HandlerBox handler_{nullptr, nullptr};  // the handler the flow runs (set_handler)
  KeptAdds kept_;                         // adds kept for after a running job (keep_last_if_active)
  // A batch queue's (process_batch), set before its workers start, which publishes them.
  BatchRun batch_run_ = nullptr;
  std::uint32_t batch_max_ = 0;
  std::int64_t batch_linger_ns_ = INT64_MIN;  // INT64_MIN: its workers do not linger
  std::vector<WorkerBatch> batches_;          // one per worker index
};

}  // namespace rail::detail
