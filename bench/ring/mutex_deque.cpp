// bench_ring contender: std::mutex + std::deque<std::uint64_t>, the queue a team writes first.
//
// Like-for-like: bounded at kCapacity (push reports full at that size), per item, one lock per
// operation. It waits the way every contender waits here, through the harness's spin-then-yield
// retry on full/empty, not on a condition variable: a condvar would measure OS wake-ups (1-5 us
// each) rather than the queue, and no other contender gets one. libstdc++'s deque does not recycle
// its 512-byte nodes, so used as a FIFO it also allocates and frees one node per 64 items; that is
// part of what this baseline is.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>

#include "ring/ring_harness.hpp"

namespace rail_bench::ring {
namespace {

class MutexDeque {
 public:
  static constexpr std::size_t kBatch = 1;
  struct Handle {};
  using Producer = Handle;
  using Consumer = Handle;

  explicit MutexDeque(std::size_t capacity) : capacity_(capacity) {}

  Producer make_producer() noexcept { return {}; }
  Consumer make_consumer() noexcept { return {}; }

  std::size_t push(Producer&, const std::uint64_t* values, std::size_t) noexcept {
    const std::lock_guard lock(mutex_);
    if (items_.size() >= capacity_) return 0;
    items_.push_back(values[0]);  // std::bad_alloc here terminates: acceptable in a benchmark
    return 1;
  }
  std::size_t pop(Consumer&, std::uint64_t* out, std::size_t) noexcept {
    const std::lock_guard lock(mutex_);
    if (items_.empty()) return 0;
    out[0] = items_.front();
    items_.pop_front();
    return 1;
  }

 private:
  std::mutex mutex_;
  std::deque<std::uint64_t> items_;
  const std::size_t capacity_;
};

}  // namespace

void register_mutex_deque() {
  register_contender<MutexDeque>("mutex_deque");
}

}  // namespace rail_bench::ring
