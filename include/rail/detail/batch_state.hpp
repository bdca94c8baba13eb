// BatchState and BatchRegistry: the bookkeeping behind a JobBatch (job_batch.hpp) — its members
// and their ends, its seal, and the two callbacks, each fired exactly once — and the engine's
// table of batches, which finds a redriven member's batch and lists open batches at shutdown.
//
// Contract: a member is a job (keyed by its id) or a nested batch (keyed by its id with the top
// bit set). on_complete fires once the batch is sealed, no add to it is in flight, and every
// member has ended (completed, dead-lettered, cancelled or discarded: a member handed back or
// dropped at shutdown never ends, and its batch stays open); on_success once it is sealed and
// every member completed. Each fires at most
// once, on the thread that ended the last member (or that sealed the batch), after the member's
// job left its slot and with no lock held. A dead-lettered member that is redriven is live
// again: its next end counts instead (on_complete, if already fired, does not fire again;
// on_success may fire then). A nested batch is a member of its parent: it ends when its own
// on_complete condition holds (completed if every member of it completed), and it turns
// completed when its on_success fires later.
// Cost: a map entry and an end waiter per member (cold: batches are opt-in, and each add through
// one is a tracked add).
// Threading: every call from any thread; one mutex per batch and one for the registry, never
// held while user code (callbacks, add) runs. Lock order: a batch's, then the registry's.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "rail/detail/end_tracker.hpp"
#include "rail/job_batch_options.hpp"
#include "rail/job_state.hpp"

namespace rail::detail {

class EndWaiter;
class EndTracker;
class BatchRegistry;

class BatchState : public std::enable_shared_from_this<BatchState> {
 public:
  static constexpr std::uint64_t kNestedBit = std::uint64_t{1} << 63;

  BatchState(std::shared_ptr<BatchRegistry> registry, std::uint64_t id, JobBatchOptions options,
             std::shared_ptr<BatchState> parent);
  BatchState(const BatchState&) = delete;
  BatchState& operator=(const BatchState&) = delete;

  [[nodiscard]] std::uint64_t id() const noexcept { return id_; }

  /// reserve(): an add through the batch begins; throws Error(sealed) once it is sealed.
  void reserve();
  /// joined(id, watch): the add reserved before created (or merged into) job `id`, whose end
  /// `watch` reports (kept here: its callback lives as long as it is registered). True if the
  /// job is a new member: the caller then registers the end callback (watch(id, on_end)).
  /// unreserve(): the add created nothing.
  bool joined(std::uint64_t id, const std::shared_ptr<EndWaiter>& watch);
  void unreserve();
  /// watch(id, on_end): on_end(cb) registers cb for job `id`'s end (JobWatch::on_end); the
  /// callback ends the member. If it throws, the member never ends (the batch stays open).
  template <class OnEnd>
  void watch(std::uint64_t id, OnEnd&& on_end) {
    std::weak_ptr<BatchState> self = weak_from_this();
    on_end([self, id](const EndRecord& end) {
      if (auto b = self.lock()) b->ended(id, end.status);
    });
  }
  /// nest(options): a nested batch, a member of this one (reserve()'s errors).
  std::shared_ptr<BatchState> nest(JobBatchOptions options);
  /// seal(): no member joins from now on (idempotent).
  void seal();
  /// redriven(id, tracker): member `id`, dead-lettered, was redriven into `tracker`'s queue and
  /// is not published yet: it is live again and watched anew (BatchRegistry::redriven).
  void redriven(std::uint64_t id, EndTracker& tracker);
  [[nodiscard]] JobBatchSummary summary() const;

 private:
  struct Member {
    bool ended = false;
    JobStatus status = JobStatus::waiting;
    std::shared_ptr<EndWaiter> watch;  // until it ends (a redrive watches again)
    // Redriven before its dead-letter's end reached the batch (the entry is filed before the
    // end is recorded: an observer of `dead_lettered` may redrive at once): that end is the
    // earlier life's, and the next life is watched from there (ended()).
    EndTracker* redriven_early = nullptr;
  };
  /// Fire: the callbacks a change made due, decided under the lock and run after it.
  struct Fire {
    bool complete = false, success = false;
    JobBatchSummary summary{};
  };
  /// ended(key, status): member `key` ended as `status` (a job's end, a nested batch's).
  void ended(std::uint64_t key, JobStatus status);
  /// succeeded(key): nested batch `key`, ended before with failures, completed since.
  void succeeded(std::uint64_t key);
  [[nodiscard]] Fire due_locked();
  [[nodiscard]] JobBatchSummary summary_locked() const;
  void fire(Fire f);

  const std::shared_ptr<BatchRegistry> registry_;  // outlives the engine with the batch
  const std::uint64_t id_;
  const JobBatchOptions options_;
  const std::shared_ptr<BatchState> parent_;  // null: a top-level batch
  mutable std::mutex mu_;
  std::unordered_map<std::uint64_t, Member> members_;
  std::uint64_t in_flight_ = 0;  // reserved adds not resolved yet
  std::uint64_t ended_ = 0, completed_ = 0;
  std::uint64_t dead_lettered_ = 0, cancelled_ = 0, discarded_ = 0, unknown_ = 0;
  bool sealed_ = false, complete_fired_ = false, success_fired_ = false;
};

class BatchRegistry : public std::enable_shared_from_this<BatchRegistry> {
 public:
  /// close(): the engine is being destroyed: no callback runs from now on, and the registry
  /// lets its open batches go (JobBatch handles may still hold them).
  void close() noexcept;
  [[nodiscard]] bool closed() const noexcept { return closed_.load(std::memory_order_acquire); }
  /// create(options, parent): a new batch, kept by the registry until its on_complete fires.
  std::shared_ptr<BatchState> create(JobBatchOptions options, std::shared_ptr<BatchState> parent);
  /// member(id, batch): job `id` joined `batch` (found again if it is redriven).
  void member(std::uint64_t id, const std::shared_ptr<BatchState>& batch);
  /// settled(id): job `id` ended other than dead-lettered: no redrive brings it back.
  void settled(std::uint64_t id);
  /// completed(batch): its on_complete fired: it is no longer open. release(batch): nothing can
  /// fire any more (on_success fired, or no member can still complete): the registry lets it go.
  void completed(const BatchState& batch);
  void release(const BatchState& batch);
  /// redriven(id, tracker): job `id` was redriven into `tracker`'s queue, before it is
  /// published: if a live batch holds it, it is watched again (may throw bad_alloc).
  void redriven(std::uint64_t id, EndTracker& tracker);
  /// open(): the batches whose on_complete has not fired (ShutdownReport::open_batches).
  [[nodiscard]] std::vector<JobBatchSummary> open() const;

 private:
  mutable std::mutex mu_;
  std::atomic<bool> closed_{false};        // release/acquire: set once, read before a callback
  std::atomic<std::uint64_t> next_id_{1};  // relaxed: a unique number, publishes nothing
  std::vector<std::shared_ptr<BatchState>> open_;  // on_complete not fired yet
  // on_complete fired with dead-lettered members: kept until a redrive completes them all
  std::vector<std::shared_ptr<BatchState>> awaiting_;
  // job id -> the batches it joined (weak: a released batch's entries go lazily)
  std::unordered_map<std::uint64_t, std::vector<std::weak_ptr<BatchState>>> members_;
};

}  // namespace rail::detail
