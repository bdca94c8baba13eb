// ProgressBoard: Job::progress's cells and events. Contract and ordering: progress_board.hpp.
#include "rail/detail/progress_board.hpp"

#include <bit>
#include <cmath>

namespace rail::detail {

bool ProgressBoard::report(std::uint32_t idx, std::uint32_t token, double value) noexcept {
  JobSlot& s = parts_.slot(idx);
  if (std::isnan(value) || s.ctl.fenced(token)) return false;
  Cells* table = cells_.get();
  if (table == nullptr) [[unlikely]] {
    try {
      table = &cells_.get_or_make([&] { return std::make_unique<Cells>(parts_.capacity); });
    } catch (...) {  // no memory for the cells: the report is dropped
      return false;
    }
  }
  Cell& p = table->cells[idx];
  const JobId id = s.id.load(std::memory_order_relaxed);
  const std::int64_t now = parts_.core.now_ns();
  // relaxed: this handler is the cell's only writer while its delivery counts (see the contract).
  const bool first = p.id.load(std::memory_order_relaxed) != id;
  p.bits.store(std::bit_cast<std::uint64_t>(value), std::memory_order_relaxed);
  if (first) p.id.store(id, std::memory_order_relaxed);
  const std::int64_t last = p.last_event_ns.load(std::memory_order_relaxed);
  if (parts_.core.observed() && (first || now - last >= parts_.options.progress_interval.count())) {
    p.last_event_ns.store(now, std::memory_order_relaxed);
    Event e = parts_.event(EventKind::progress, s, now);
    e.progress = value;
    parts_.core.emit(e);
  }
  return true;
}

std::optional<double> ProgressBoard::of(const JobSlot& s) const noexcept {
  const Cells* table = cells_.get();  // acquire: pairs with the release that published the cells
  if (table == nullptr) return std::nullopt;
  const Cell& p = table->cells[parts_.index_of(s)];
  // relaxed: a hint read beside the slot's counters (the caller validates the slot, not this).
  if (p.id.load(std::memory_order_relaxed) != s.id.load(std::memory_order_relaxed))
    return std::nullopt;
  return std::bit_cast<double>(p.bits.load(std::memory_order_relaxed));
}

}  // namespace rail::detail
