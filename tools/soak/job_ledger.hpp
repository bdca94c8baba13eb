// JobLedger: the soak's account of every job id, for invariants 1-4 of soak.hpp: what the events
// said about each job (its starts, numbered, its failures, lapses, late outcomes, pushbacks,
// ends and redrives), what its producer, its canceller and take_leftovers were told, and the
// check of each job against its DLQ entry once the run is over.
//
// Delivery numbers are tracked as bit sets of kMaxDelivery bits (the soak's jobs have 3 attempts
// and, under StallPolicy::own_budget, one stall to spare, so at most 4 deliveries); a number
// outside them is a violation of its own.
// Threading: on_event from the engine's observers (any thread), the Track fields the run sets
// (accepted, cancel_accepted, taken, redrive_tried) from its producers, canceller, redriver;
// account once every thread is done. Memory: 56 bytes per job id.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <unordered_map>

#include "rail/event.hpp"
#include "soak/soak.hpp"
#include "soak/violations.hpp"

namespace rail::soak {

/// Everything the events said about one job id.
struct Track {
  // cancel_accepted: 1 once a cancel() of it was accepted; 2 for a parent (FlowWatch) whose
  // edges may cancel it, which may end cancelled or not.
  std::atomic<std::uint8_t> accepted{0}, cancel_accepted{0}, delayed{0};
  std::atomic<std::uint16_t> started{0}, failed{0}, stalled{0}, late{0}, pushed{0};
  std::atomic<std::uint16_t> completed{0}, dead{0}, cancelled{0}, discarded{0};
  std::atomic<std::uint16_t> stalled_out{0};  // lives dead-lettered by a lapse (lease_expired)
  std::atomic<std::uint16_t> timed_out{0};    // attempts past their timeout
  std::atomic<std::uint16_t> expired{0};      // lives dead-lettered unstarted (expire_after)
  std::atomic<std::uint16_t> completed_delivery{0};
  // bit d-1: delivery d started / was fenced (its lease lapsed or its attempt timed out)
  std::atomic<std::uint16_t> started_mask{0}, stalled_mask{0};
  std::atomic<std::uint16_t> redriven{0};  // lives beyond the first (a redrive restarts it)
  // When the latest redrive happened (engine clock, ns): a delivery that started before it
  // belongs to an earlier life.
  std::atomic<std::int64_t> redriven_at{INT64_MIN};
  std::atomic<std::uint8_t> taken{0};  // handed back by take_leftovers after a shutdown
  // Set by the redriver before it redrives the job: a redriven job holds its dedup id again, so
  // a re-add after the first life's window may rightly merge into it.
  std::atomic<std::uint8_t> redrive_tried{0};
};

/// DlqFiled: what a job's DLQ entry says (DeadLetter's attempts, deliveries and stalls).
struct DlqFiled {
  std::uint32_t attempts, deliveries, stalls;
};

class JobLedger {
 public:
  static constexpr std::uint32_t kMaxDelivery = 16;

  /// JobLedger(max_id): ids 1 .. max_id.
  explicit JobLedger(std::uint64_t max_id)
      : max_id_(max_id), track_(std::make_unique<Track[]>(max_id + 1)) {}

  [[nodiscard]] std::uint64_t max_id() const noexcept { return max_id_; }
  /// in_range(id): an id the soak could have added.
  [[nodiscard]] bool in_range(JobId id) const noexcept { return id >= 1 && id <= max_id_; }
  /// track(id): id's record (in_range(id)).
  [[nodiscard]] Track& track(JobId id) noexcept { return track_[id]; }

  /// on_event(e, v): records a job's event; a start numbered outside 1..kMaxDelivery or twice,
  /// and an event for an id out of range, are violations at once.
  void on_event(const Event& e, Violations& v) noexcept;

  /// account(cfg, dlq, rep, v): after the run: each accepted job's lives against its ends, its
  /// starts, failures, stalls and pushbacks against each other and against its DLQ entry (dlq:
  /// by id); rep gets the checker's totals (ok_jobs, lost, duplicated, late_applied) and the
  /// sums of what the jobs went through.
  void account(const Config& cfg, const std::unordered_map<JobId, DlqFiled>& dlq, Report& rep,
               Violations& v) const;

 private:
  std::uint64_t max_id_;
  std::unique_ptr<Track[]> track_;
};

}  // namespace rail::soak
