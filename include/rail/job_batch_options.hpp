// JobBatchOptions and JobBatchSummary: what a JobBatch (job_batch.hpp) is told and what it reports.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace rail {

/// JobBatchSummary: a batch's members by how they stand (JobBatch::summary, its callbacks, and
/// ShutdownReport::open_batches). A nested batch counts as one member of its parent.
struct JobBatchSummary {
  std::uint64_t id = 0;       // engine-unique, from 1
  std::string name;           // JobBatchOptions::name
  std::uint64_t members = 0;  // joined so far (adds in flight not included)
  std::uint64_t ended = 0;    // members that have ended (a redriven one is live again)
  std::uint64_t completed = 0, dead_lettered = 0, cancelled = 0, discarded = 0;
  std::uint64_t unknown = 0;  // handed back or dropped at shutdown: not ended, the batch open
  bool sealed = false;
  bool complete_fired = false;  // on_complete has run (or was due with none set)
  bool success_fired = false;   // on_success likewise
};

/// JobBatchOptions: `engine.batch({.name = "order-42", .on_complete = ..., .on_success = ...})`.
/// Each callback runs at most once, on the thread that ended the batch's last member (or that
/// sealed it), with no lock held, like an observer: fast, and it must not throw (an exception it
/// throws is dropped).
struct JobBatchOptions {
  std::string name{};  // for summaries and the shutdown report
  /// Every member ended (completed, dead-lettered, cancelled, discarded), the batch sealed.
  std::function<void(const JobBatchSummary&)> on_complete{};
  /// Every member completed, the batch sealed: at once with on_complete, or later, when the last
  /// failed member, redriven from the DLQ, completes.
  std::function<void(const JobBatchSummary&)> on_success{};
};

}  // namespace rail
