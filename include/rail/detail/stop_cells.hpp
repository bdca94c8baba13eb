// StopCells: the stop requests of a queue's running deliveries (Job::stop_token): a
// std::stop_source per slot, made the first time a handler of the slot asks for a token and
// kept for the slot's next deliveries until a request takes it (then the next delivery that asks
// gets a fresh one). So a source serves deliveries that were never stopped, one after another: a
// handler that keeps its token past its return may see a later delivery's stop.
//
// Contract:
// * token(idx, delivery, fenced): for the handler of delivery `delivery` (its ctl token) of
//   slot idx, which holds the slot while it runs: that delivery's stop token. If fenced()
//   (the slot's ctl says the delivery no longer counts: lapsed, timed out or cancelled), the
//   token comes stopped and the cell is left as it is (a later delivery may own it).
// * take(idx, delivery): whoever fenced delivery `delivery` of slot idx (a lapse, a timeout) or
//   flagged its job cancelled, after changing the ctl word: the source of that delivery's
//   token, taken out of the cell, for the caller to stop (request_stop runs the token's
//   stop_callbacks: the caller picks the thread and the moment); none if its handler took no
//   token (it will see the ctl change and get a stopped one).
//
// Algorithm and invariant: a cell (under its spin lock) names the delivery whose handler last
// took a token from it and not yet stopped, and holds that token's source. token() reads the
// ctl word under the lock before it names the delivery, take() takes the source under it after
// the ctl change: either take() finds the delivery named (and takes its source, so the next
// delivery cannot inherit it) or token() sees the change and hands out a stopped token without
// naming anything. A zombie asking late therefore never renames a cell a newer delivery owns.
// Memory ordering: the cell's lock orders everything within a cell (SpinLock: acquire/release);
// the ctl word is read with SlotControl's acquire. The cells are built once (LazyOwned:
// release/acquire); whether they exist is the other side of a store-load hand-off with the ctl
// change (a fence on each side: cells built, fence, ctl read / ctl changed, fence, cells read).
// Threading: any thread; no callback runs under a cell's lock.
// Memory: nothing until a handler of the queue asks for a token; then capacity x 16 bytes, and
// one stop state (a heap block) per slot that used one, plus one per stopped delivery.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stop_token>
#include <utility>

#include "rail/detail/lazy_owned.hpp"
#include "rail/detail/spin_lock.hpp"

namespace rail::detail {

class StopCells {
 public:
  explicit StopCells(std::size_t capacity) noexcept : capacity_(capacity) {}
  StopCells(const StopCells&) = delete;
  StopCells& operator=(const StopCells&) = delete;

  /// token(idx, delivery, fenced): see the header. Throws bad_alloc (a first token, or the one
  /// after a stop), as any allocation the handler makes would.
  template <class Fenced>
  [[nodiscard]] std::stop_token token(std::uint32_t idx, std::uint32_t delivery, Fenced&& fenced) {
    Cell& c = cells_.get_or_make([this] { return std::make_unique<Cells>(capacity_); }).cell[idx];
    // seq_cst: the cells exist before the ctl word is read (see the header).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    std::stop_source fresh{std::nostopstate};  // made outside the lock when one is needed
    for (;;) {
      {
        const std::lock_guard<SpinLock<>> guard(c.lock);
        if (fenced()) return stopped();  // the cell stays as it is
        if (c.delivery == delivery || c.source.stop_possible()) {
          c.delivery = delivery;  // a source no request took serves the next delivery too
          return c.source.get_token();
        }
        if (fresh.stop_possible()) {
          c.source = std::move(fresh);
          c.delivery = delivery;
          return c.source.get_token();
        }
      }
      fresh = std::stop_source();
    }
  }

  /// take(idx, delivery): see the header.
  [[nodiscard]] std::stop_source take(std::uint32_t idx, std::uint32_t delivery) noexcept {
    // seq_cst: the ctl change (the caller's) before the read of whether the cells exist.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    Cells* cells = cells_.get();
    if (cells == nullptr) return std::stop_source(std::nostopstate);  // no handler asked
    Cell& c = cells->cell[idx];
    const std::lock_guard<SpinLock<>> guard(c.lock);
    if (c.delivery != delivery) return std::stop_source(std::nostopstate);
    c.delivery = 0;
    return std::exchange(c.source, std::stop_source(std::nostopstate));
  }

  /// stopped(): a token that is stopped (for a delivery that no longer counts, or a Completion
  /// that is empty or outlived its engine). Its state is made on the first call and never freed,
  /// so a zombie may ask during a static engine's destruction.
  [[nodiscard]] static std::stop_token stopped();

 private:
  struct Cell {
    SpinLock<> lock;
    std::uint32_t delivery = 0;  // the delivery whose handler holds the source (0: none)
    std::stop_source source{std::nostopstate};
  };
  struct Cells {
    explicit Cells(std::size_t n) : cell(std::make_unique<Cell[]>(n)) {}
    std::unique_ptr<Cell[]> cell;
  };
  const std::size_t capacity_;
  LazyOwned<Cells> cells_;
};

}  // namespace rail::detail
