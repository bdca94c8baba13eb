// BatchWatch: the soak's batches of jobs (Config::batch_size, Engine::batch). Each producer adds
// its fresh jobs through a JobBatch of batch_size members, sealed once full (and its last,
// partial one when production ends). Invariant 9: each batch's on_complete fired exactly once
// and its on_success exactly once if every member completed, never otherwise, against the
// ledger's account of each member (after a mid-run shutdown, a batch with a member handed back
// never succeeded, and completed at most once: before that member's redrive).
// Threading: a Producer per producer thread; callbacks from any thread (atomic counts, records
// at stable addresses); check() after the run has settled.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "rail/rail.hpp"
#include "soak/job_ledger.hpp"

namespace rail::soak {

class BatchWatch {
 public:
  explicit BatchWatch(std::uint32_t size) noexcept : size_(size) {}
  [[nodiscard]] bool on() const noexcept { return size_ > 0; }

  /// Producer: one producer thread's open batch.
  struct Producer {
    std::optional<JobBatch> open;
    std::vector<JobId>* members = nullptr;  // the open batch's record's
  };
  /// add(engine, p, add): adds through p's open batch (a new one if none): add(batch) makes the
  /// add and returns its receipt; a job it names joins, and a full batch is sealed.
  AddReceipt add(Engine& engine, Producer& p, const std::function<AddReceipt(JobBatch&)>& add);
  /// finish(p): production ended: p's partial batch is sealed.
  void finish(Producer& p);
  /// check(ledger, report, fail): invariant 9 for every batch; returns how many batches there
  /// were and how many succeeded.
  struct Totals {
    std::uint64_t batches = 0, succeeded = 0;
  };
  Totals check(JobLedger& ledger, const std::function<void(std::string)>& fail) const;

 private:
  struct Record {
    std::vector<JobId> members;  // the producer's alone until the run settled
    bool made = false;           // Engine::batch returned it (else shutdown refused it)
    std::atomic<int> complete{0}, success{0};
  };
  const std::uint32_t size_;
  mutable std::mutex mu_;  // guards records_'s growth (records never move: a deque)
  std::deque<Record> records_;
};

}  // namespace rail::soak
