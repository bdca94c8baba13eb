// FlowWatch: the soak's flows (Config::flow_every, JobOptions::after). Every flow_every-th fresh
// add of a producer is a parent that waits for the producer's last kChildren accepted jobs (by
// id; a parent may itself be a child of a later one, so the flows are graphs), each edge failing,
// ignoring or cancelling by its place. Invariant 10: a parent's handler starts only once each of
// its children ended (Job::children(): none unknown), and only if each child of a `fail` or
// `cancel` edge completed; a parent dead-lettered with reason dependency_failed never started in
// that life (the ledger's starts when its event came). That every parent ends (or is handed back)
// is the ledger's invariant 1 (a parent may end cancelled by its `cancel` edges). A child that
// ended and was forgotten by its queue's history since (the soak's queue is small) shows in
// children() as unknown with an error that says so: an end, though not how.
// Threading: a Producer per producer thread; on_start from the workers, on_event from the
// observers (atomic counts); counts after the run.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "rail/rail.hpp"
#include "soak/job_ledger.hpp"
#include "soak/violations.hpp"

namespace rail::soak {

class FlowWatch {
 public:
  static constexpr std::size_t kChildren = 3;
  explicit FlowWatch(std::uint32_t every) noexcept : every_(every) {}
  [[nodiscard]] bool on() const noexcept { return every_ > 0; }

  /// Producer: one producer thread's recent jobs and its count of fresh adds.
  struct Producer {
    std::deque<JobId> recent;
    std::uint64_t fresh = 0;
  };
  /// make_parent(p, o): whether this fresh add is a parent; if so, o waits for p's recent jobs
  /// (and has no delay: a parent cannot).
  bool make_parent(Producer& p, JobOptions& o) const;
  /// accepted(p, id): p's fresh add of job id was accepted: a child for a later parent.
  static void accepted(Producer& p, JobId id);

  /// on_start(id, children, v): the handler of job `id` starts; `children` its Job::children().
  void on_start(JobId id, const std::vector<ChildEnd>& children, Violations& v) noexcept;
  /// on_event(e, ledger, v): a parent dead-lettered for a failed dependency never started.
  void on_event(const Event& e, JobLedger& ledger, Violations& v) noexcept;

  /// refused(): a parent's add was refused: a child was forgotten by its queue's history.
  void refused() noexcept { refused_.fetch_add(1); }

  [[nodiscard]] std::uint64_t parents_started() const noexcept { return started_.load(); }
  [[nodiscard]] std::uint64_t parents_refused() const noexcept { return refused_.load(); }
  [[nodiscard]] std::uint64_t dependency_failed() const noexcept { return failed_.load(); }

 private:
  const std::uint32_t every_;
  std::atomic<std::uint64_t> started_{0}, failed_{0}, refused_{0};
};

}  // namespace rail::soak
