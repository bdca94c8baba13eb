// ShutdownReport: what Engine::shutdown() found unfinished, so the caller can persist or replay it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rail/event.hpp"
#include "rail/job_batch_options.hpp"

namespace rail {

/// LeftoverJob: a job that shutdown() found unfinished. An add kept for after a running job
/// (DedupOptions::keep_last_if_active) that never became a job has id 0.
struct LeftoverJob {
  std::string queue;
  JobId id = 0;
  std::string name;
  std::uint32_t failed_attempts = 0;
};

/// Leftover<T>: a job that never started, taken out of a queue after shutdown with its payload
/// (Queue::take_leftovers), so the caller can persist it or hand it to another engine. An add
/// kept for after a running job (keep_last_if_active) that never became a job has id 0.
template <class T>
struct Leftover {
  JobId id = 0;
  std::string name;
  T data;
  std::uint32_t failed_attempts = 0;
  bool was_delayed = false;
};

/// ShutdownReport: jobs that never started (waiting or delayed) and jobs whose handler was still
/// running when the grace period ended.
struct ShutdownReport {
  std::vector<LeftoverJob> not_started;
  std::vector<LeftoverJob> still_running;
  /// Of still_running, the jobs with a zombie: a handler still running though its delivery no
  /// longer counts (its lease lapsed or its attempt timed out), whatever became of the job.
  std::vector<LeftoverJob> zombies;
  /// Of not_started, the parents still waiting for their children (JobOptions::after).
  std::vector<LeftoverJob> waiting_children;
  /// The batches (Engine::batch) whose on_complete had not fired: unsealed, or with members not
  /// ended (among the jobs above, or in the DLQ awaiting a redrive never made).
  std::vector<JobBatchSummary> open_batches;
  [[nodiscard]] bool clean() const noexcept { return not_started.empty() && still_running.empty(); }
};

}  // namespace rail
