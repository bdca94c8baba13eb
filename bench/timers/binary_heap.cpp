// bench_timers contender: std::priority_queue of (deadline, id) pairs, a min-heap on std::vector,
// with tombstones for cancel: the timer queue most schedulers start with. (Java's
// ScheduledThreadPoolExecutor is this design: a binary heap that by default leaves cancelled tasks
// in place until they come due.)
//
// Like-for-like: schedule is push (O(log n)), with the vector reserved to N beforehand so no
// reallocation is timed, as the wheel's nodes are preallocated. Cancel is O(1), a byte store into
// a tombstone array indexed by id, since a binary heap cannot remove an arbitrary entry cheaply;
// the price is paid at expiry, where cancelled entries are still popped (O(log n) each) and
// skipped. Expiry pops while top.deadline <= now and calls the same callback as the wheel.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <queue>
#include <utility>
#include <vector>

#include "timers/timers_harness.hpp"

namespace rail_bench::timers {
namespace {

class BinaryHeap {
 public:
  explicit BinaryHeap(std::size_t timers) : cancelled_(timers, 0) {
    heap_.storage().reserve(timers);
  }

  void reset() {
    heap_.storage().clear();  // keeps the capacity reserved in the constructor
    std::fill(cancelled_.begin(), cancelled_.end(), 0);
  }

  void schedule(std::uint32_t id, std::int64_t deadline_ns) noexcept {
    heap_.push({deadline_ns, id});
  }

  void cancel(std::uint32_t id) noexcept { cancelled_[id] = 1; }

  void advance(std::int64_t now_ns, Fired& fired) noexcept {
    while (!heap_.empty() && heap_.top().first <= now_ns) {
      const std::uint32_t id = heap_.top().second;
      heap_.pop();
      if (cancelled_[id] != 0) continue;  // tombstone: cancelled while queued
      fired.add(id);
    }
  }

 private:
  using Entry = std::pair<std::int64_t, std::uint32_t>;
  // std::priority_queue keeps its vector in the protected member `c`; this exposes it so the
  // benchmark can reserve and clear it without reallocating between iterations.
  class Heap : public std::priority_queue<Entry, std::vector<Entry>, std::greater<>> {
   public:
    std::vector<Entry>& storage() noexcept { return c; }
  };

  Heap heap_;
  std::vector<std::uint8_t> cancelled_;  // tombstones, by id
};

}  // namespace

void register_binary_heap() {
  register_contender<BinaryHeap>("binary_heap");
}

}  // namespace rail_bench::timers
