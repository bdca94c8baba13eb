// bench_ring contender: boost::lockfree::queue<std::uint64_t> (Boost 1.74, Michael & Scott queue
// on a tagged-pointer node freelist).
//
// Like-for-like: constructed with kCapacity nodes and used through bounded_push(), which never
// allocates and reports full when the freelist is empty, so it is bounded like rail's ring. No
// bulk API exists; it is compared with the per-item contenders.
#include <boost/lockfree/queue.hpp>
#include <cstddef>
#include <cstdint>

#include "ring/ring_harness.hpp"

namespace rail_bench::ring {
namespace {

class BoostLockfree {
 public:
  static constexpr std::size_t kBatch = 1;
  struct Handle {};
  using Producer = Handle;
  using Consumer = Handle;

  explicit BoostLockfree(std::size_t capacity) : queue_(capacity) {}

  Producer make_producer() noexcept { return {}; }
  Consumer make_consumer() noexcept { return {}; }

  std::size_t push(Producer&, const std::uint64_t* values, std::size_t) noexcept {
    return queue_.bounded_push(values[0]) ? 1 : 0;
  }
  std::size_t pop(Consumer&, std::uint64_t* out, std::size_t) noexcept {
    return queue_.pop(out[0]) ? 1 : 0;
  }

 private:
  boost::lockfree::queue<std::uint64_t> queue_;
};

}  // namespace

void register_boost_lockfree() {
  register_contender<BoostLockfree>("boost_lockfree");
}

}  // namespace rail_bench::ring
