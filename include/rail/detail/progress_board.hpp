// ProgressBoard: what a queue's running jobs last reported through Job::progress — one cell per
// slot, built on the queue's first report — and the `progress` events those reports raise, at
// most one per job per QueueOptions::progress_interval (the first report always raises one).
//
// Contract: a cell belongs to the job whose id it holds. report() is called by the job's live
// handler (a fenced delivery's report is refused), so a cell has one writer at a time; of() is a
// hint read beside the slot's counters: it returns the last value of the job in slot s, or
// nothing if that job never reported. A report that finds no memory for the cells is dropped.
// Memory ordering: the cells are published by LazyOwned (release/acquire). A cell's fields are
// relaxed: the writer is unique while its delivery counts, and readers validate the slot (a
// seqlock read, job_queries.hpp), never the cell.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

#include "rail/detail/flow_parts.hpp"
#include "rail/detail/lazy_owned.hpp"

namespace rail::detail {

class ProgressBoard {
 public:
  explicit ProgressBoard(FlowParts& parts) noexcept : parts_(parts) {}
  ProgressBoard(const ProgressBoard&) = delete;
  ProgressBoard& operator=(const ProgressBoard&) = delete;

  /// report(idx, token, value): delivery `token` of the job in slot idx reports `value`; false
  /// if the report was refused (NaN, a fenced delivery, no memory for the cells).
  bool report(std::uint32_t idx, std::uint32_t token, double value) noexcept;
  /// of(s): the last value reported by the job now in slot s, if it reported one.
  [[nodiscard]] std::optional<double> of(const JobSlot& s) const noexcept;

 private:
  struct Cell {
    std::atomic<JobId> id{0};
    std::atomic<std::uint64_t> bits{0};  // the value's double bits
    std::atomic<std::int64_t> last_event_ns{0};
  };
  struct Cells {
    explicit Cells(std::size_t n) : cells(std::make_unique<Cell[]>(n)) {}
    std::unique_ptr<Cell[]> cells;
  };

  FlowParts& parts_;
  LazyOwned<Cells> cells_;
};

}  // namespace rail::detail
