// TraceCells: the trace contexts of a queue's jobs (rail/trace_context.hpp), one cell per slot,
// in an array allocated at the queue's first add that carries a context, so a queue that never
// sees one keeps no array and pays a pointer test per add.
//
// Ownership: a slot's cell follows the slot's (job_slot.hpp): the holder of the index writes it
// at the add, before the job is published, and whoever reads the slot's plain fields afterwards
// (the deliverer, an event's builder, the DLQ's entry) reads it, published by the same hand-off.
// The array: installed once by a CAS (release), loaded acquire; the loser of the CAS frees its
// copy; it lives as long as the queue. Before it exists every slot's context is none.
// Threading: set() by the index's holder; of() by a holder or a reader the slot's word validates.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "rail/trace_context.hpp"

namespace rail::detail {

class TraceCells {
 public:
  explicit TraceCells(std::size_t capacity) noexcept : capacity_(capacity) {}
  ~TraceCells() { delete[] cells_.load(std::memory_order_acquire); }
  TraceCells(const TraceCells&) = delete;
  TraceCells& operator=(const TraceCells&) = delete;

  /// any(): some add carried a context (the array exists).
  [[nodiscard]] bool any() const noexcept {
    return cells_.load(std::memory_order_acquire) != nullptr;
  }
  /// reserve(): the array exists from now on (a no-op once it does). May throw bad_alloc.
  void reserve() {
    if (!any()) (void)install();
  }
  /// set(idx, c): slot idx's new job carries c (invalid: none). A valid c needs the array
  /// (reserve); an invalid one without it is what every cell already says.
  void set(std::uint32_t idx, const TraceContext& c) noexcept {
    TraceContext* cells = cells_.load(std::memory_order_acquire);
    if (cells != nullptr) cells[idx] = c;
  }
  /// of(idx): slot idx's job's context (invalid: none).
  [[nodiscard]] TraceContext of(std::uint32_t idx) const noexcept {
    const TraceContext* cells = cells_.load(std::memory_order_acquire);
    return cells ? cells[idx] : TraceContext{};
  }
  /// bytes(): what the array takes (0 before the first context).
  [[nodiscard]] std::size_t bytes() const noexcept {
    return any() ? capacity_ * sizeof(TraceContext) : 0;
  }

 private:
  /// install(): the array, allocated and published by this call or a racing one.
  TraceContext* install() {
    auto fresh = std::make_unique<TraceContext[]>(capacity_);
    TraceContext* expected = nullptr;
    // acq_rel: release publishes the zeroed cells; acquire, on failure, the winner's.
    if (cells_.compare_exchange_strong(expected, fresh.get(), std::memory_order_acq_rel))
      return fresh.release();
    return expected;
  }

  const std::size_t capacity_;
  std::atomic<TraceContext*> cells_{nullptr};
};

}  // namespace rail::detail
