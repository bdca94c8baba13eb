// AddReceipt: what Queue::add reports. A full queue or a duplicate is an expected outcome, not an
// exception: the status says which, and no job is ever dropped without one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "rail/event.hpp"

namespace rail {

enum class AddStatus : std::uint8_t {
  added,          // a new job was created; `id` is its id
  duplicate,      // merged into the live job `id` by its dedup id (nothing created)
  debounced,      // replaced the payload of the delayed job `id` (DedupMode::debounce also
                  // restarted its delay; DedupMode::replace kept it)
  full,           // the queue held `capacity` unfinished jobs; nothing was created
  dead_lettered,  // the queue was full and its policy sent the new job `id` to the DLQ
  dedup_full,     // the dedup window held its maximum of live ids; nothing was created
  kept,           // DedupOptions::keep_last_if_active: job `id` is running, and this add is kept
                  // (replacing one kept before) to be added as a new job once `id` ends
  shutting_down,  // Engine::shutdown() began: the queue takes no more jobs; nothing was created
};

std::string_view to_string(AddStatus status) noexcept;

/// AddReceipt: an add's status and the id of the job it names. [[nodiscard]]: an add that
/// returns `full`, `dedup_full` or `shutting_down` created no job, and one that returns
/// `dead_lettered` put it in the DLQ: ignoring the receipt would lose that silently.
struct [[nodiscard(
    "an add may create no job (full, dedup_full, shutting_down) or dead-letter it: check "
    "status")]] AddReceipt {
  JobId id = 0;
  AddStatus status = AddStatus::added;
  /// duplicate is true when the add was merged into an existing job (status duplicate or
  /// debounced): BullMQ's "first.id === second.id".
  [[nodiscard]] bool duplicate() const noexcept {
    return status == AddStatus::duplicate || status == AddStatus::debounced ||
           status == AddStatus::kept;
  }
  /// accepted is true when the job exists in the queue now (new or merged).
  [[nodiscard]] bool accepted() const noexcept {
    return status == AddStatus::added || duplicate();
  }
};

/// BulkAddReceipt: add_bulk is all-or-nothing under OnFull::reject and ::block; the jobs it
/// creates get the consecutive ids first_id .. first_id + count - 1.
struct [[nodiscard(
    "a bulk add may create no job (full, shutting_down): check status")]] BulkAddReceipt {
  AddStatus status = AddStatus::added;
  JobId first_id = 0;
  std::size_t count = 0;
};

/// QueueCounts: a snapshot of a queue's jobs by state, readable while workers run. Gauges
/// (waiting, delayed, active) are exact when the queue is quiescent and may be off by the jobs in
/// transit while it is not; totals only grow. `active` counts handlers running, including ones
/// whose lease lapsed and that have not returned yet.
struct QueueCounts {
  std::uint64_t waiting = 0;  // ready to start, or held back by its downstream (rate, pushback)
  std::uint64_t delayed = 0;  // waiting out a delay, a backoff or a debounce
  std::uint64_t waiting_children = 0;  // waiting for the jobs they depend on (JobOptions::after)
  std::uint64_t active = 0;
  std::uint64_t added = 0;
  std::uint64_t started = 0;  // attempts started (handler starts, redeliveries included)
  std::uint64_t completed = 0;
  std::uint64_t failed_attempts = 0;
  std::uint64_t dead_lettered = 0;
  std::uint64_t cancelled = 0;
  std::uint64_t discarded = 0;  // handlers returned Outcome::discard
  std::uint64_t forwarded = 0;  // resumed jobs whose next attempt went back to their broker
  std::uint64_t deduplicated = 0;
  std::uint64_t stalled = 0;         // lease lapses
  std::uint64_t stall_warnings = 0;  // handlers past QueueOptions::stall_warning of their lease
  std::uint64_t late_outcomes = 0;   // outcomes of lapsed or timed-out deliveries, ignored
  std::uint64_t timed_out = 0;       // attempts past their timeout (QueueOptions::timeout)
  std::uint64_t expired = 0;   // jobs dead-lettered unstarted past expire_after (in dead_lettered)
  std::uint64_t shed = 0;      // jobs dead-lettered by load shedding (QueueOptions::shed; likewise)
  std::uint64_t retried = 0;   // failed attempts followed by another (a retry scheduled)
  std::uint64_t redriven = 0;  // DLQ entries sent back to the queue (counted in added too)
  std::uint64_t rejected = 0;  // adds refused because the queue was full (AddStatus::full)
  std::uint64_t zombies = 0;   // handlers still running after their lease lapsed or their attempt
                               // timed out: asked to stop, they keep their thread (and permit)
  std::uint64_t groups = 0;    // FIFO groups with jobs now (JobOptions::group)
  std::uint64_t tenants = 0;   // tenants with jobs now (JobOptions::tenant)
  bool paused = false;
};

}  // namespace rail
