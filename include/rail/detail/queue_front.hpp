// QueueFront: what a typed Queue<T, R> calls on its queue, with payloads passed as untyped
// pointers described by the queue's PayloadOps. Declared here, light, for every user
// translation unit; defined in src/queue_front.cpp, where QueueImpl (queue_impl.hpp, which
// derives from it) does the work. A queue is compiled once for every payload type.
//
// Contract: a `void* data` argument points to a live T of the queue's payload type; the call
// moves from it (the caller still destroys it). A handler is bound as a RunHandler, one plain
// function per handler type that casts the payload back (Queue::process builds it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rail/add_receipt.hpp"
#include "rail/clock.hpp"
#include "rail/detail/function_ref.hpp"
#include "rail/event.hpp"
#include "rail/explanation.hpp"
#include "rail/job_end.hpp"
#include "rail/job_state.hpp"
#include "rail/metrics.hpp"
#include "rail/options.hpp"
#include "rail/outcome.hpp"
#include "rail/schedule.hpp"
#include "rail/shutdown_report.hpp"

namespace rail {
struct BatchOptions;
}

namespace rail::detail {

struct PayloadOps;
struct BatchEntry;
struct JobFields;
class DeadLetterStore;
class EngineCore;
class EndWaiter;
struct Resumed;

class QueueFront {
 public:
  QueueFront(const QueueFront&) = delete;
  QueueFront& operator=(const QueueFront&) = delete;

  [[nodiscard]] const std::string& name() const noexcept;
  [[nodiscard]] const QueueOptions& options() const noexcept;
  [[nodiscard]] const PayloadOps& ops() const noexcept;
  [[nodiscard]] EngineCore& core() const noexcept;

  // --- adding ------------------------------------------------------------------------------------
  AddReceipt add(std::string_view job_name, void* data, const JobOptions& o);
  /// TrackedAdd: an add and the waiter of the job it names (Queue::add_tracked).
  struct TrackedAdd {
    AddReceipt added;
    std::shared_ptr<EndWaiter> waiter;
    bool sure = false;  // registered before the job was published
  };
  TrackedAdd add_tracked(std::string_view job_name, void* data, const JobOptions& o);
  /// add_bulk(job_name, items, n, o): n payloads at `items`, ops().size bytes apart.
  BulkAddReceipt add_bulk(std::string_view job_name, void* items, std::size_t n,
                          const JobOptions& o);
  /// resume(job_name, data, o, r): a job that began elsewhere runs its next attempt here
  /// (resumed.hpp; JobFlow::add_resumed): added, full (never waits, never overflows) or
  /// shutting_down.
  AddReceipt resume(std::string_view job_name, void* data, const JobOptions& o, const Resumed& r);

  // --- schedules ---------------------------------------------------------------------------------
  ScheduleInfo schedule(std::string_view id, const Schedule& when, std::string_view job_name,
                        void* data, const ScheduleOptions& o);
  bool unschedule(std::string_view id);
  [[nodiscard]] std::optional<ScheduleInfo> schedule_info(std::string_view id) const;
  [[nodiscard]] std::vector<ScheduleInfo> schedules() const;

  // --- workers -----------------------------------------------------------------------------------
  /// RunHandler: runs the handler `handler` on `payload` (Job<T> built from `job`).
  using RunHandler = Outcome (*)(void* handler, const void* payload, JobFields& job);
  /// BatchRun: runs the batch handler `handler` on n jobs; it records job i's outcome in
  /// outcomes[i] and sets set[i] when it gives one (process_batch).
  using BatchRun = void (*)(void* handler, BatchEntry* entries, std::size_t n, Outcome* outcomes,
                            std::uint8_t* set);
  using HandlerBox = std::unique_ptr<void, void (*)(void*)>;
  /// check_processor(w): throws what set_handler would for `w` or for a queue that already has
  /// a processor, before Queue::process takes the user's handler (set_handler checks again).
  void check_processor(const WorkerOptions& w) const;
  /// set_handler(run, handler, w): binds the handler and starts the workers (Queue::process).
  void set_handler(RunHandler run, HandlerBox handler, const WorkerOptions& w);
  /// set_batch_handler(run, handler, w, b): binds a batch handler (Queue::process_batch).
  void set_batch_handler(BatchRun run, HandlerBox handler, const WorkerOptions& w,
                         const BatchOptions& b);

  // --- lifecycle and admin (see Queue) -----------------------------------------------------------
  void pause() noexcept;
  void resume() noexcept;
  [[nodiscard]] bool paused() const noexcept;
  bool pause_and_wait(Duration timeout);
  bool wait_idle(Duration timeout);
  bool cancel(JobId id);
  [[nodiscard]] JobState state(JobId id) const;
  [[nodiscard]] Explanation explain(JobId id) const;
  bool promote(JobId id);
  bool change_delay(JobId id, Duration d);
  [[nodiscard]] std::vector<JobInfo> jobs(JobStatus status, std::size_t limit) const;
  [[nodiscard]] QueueCounts counts() const noexcept;
  [[nodiscard]] QueueMetrics metrics();
  [[nodiscard]] std::vector<Duration> oldest_waits() const;
  /// take_leftovers(take): after shutdown, take(job, was_delayed, payload) for every job that
  /// never started (Queue::take_leftovers); the payload is destroyed once take returns.
  void take_leftovers(FunctionRef<void(LeftoverJob&&, bool, void*)> take);
  [[nodiscard]] DeadLetterStore& dlq() noexcept;

  // --- ends (JobHandle) --------------------------------------------------------------------------
  /// watch(id): a waiter for job `id`'s end (Queue::track).
  [[nodiscard]] std::shared_ptr<EndWaiter> watch(JobId id);
  /// retained(id): job `id`'s end if it is retained (Queue::end_of).
  [[nodiscard]] std::optional<JobEnd<void>> retained(JobId id) const;

 protected:
  QueueFront() = default;
  ~QueueFront() = default;
};

}  // namespace rail::detail
