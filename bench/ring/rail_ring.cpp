// bench_ring contender: rail::detail::MpmcRing<std::uint64_t>, the engine's ready queue, per item
// (try_push/try_pop) and in batches of 64 (try_push_bulk/try_pop_bulk).
//
// Like-for-like: bounded at ring_harness.hpp's kCapacity (65536 cells, allocated once in the
// constructor), no per-thread handle, the shared harness's retry policy on full/empty. The bulk
// variant is compared with moodycamel's bulk API (moodycamel.cpp), not with the per-item
// contenders.
#include <cstddef>
#include <cstdint>

#include "rail/detail/mpmc_ring.hpp"
#include "ring/ring_harness.hpp"

namespace rail_bench::ring {
namespace {

template <std::size_t Batch>
class RailRing {
 public:
  static constexpr std::size_t kBatch = Batch;
  struct Handle {};
  using Producer = Handle;
  using Consumer = Handle;

  explicit RailRing(std::size_t capacity) : ring_(capacity) {}

  Producer make_producer() noexcept { return {}; }
  Consumer make_consumer() noexcept { return {}; }

  std::size_t push(Producer&, const std::uint64_t* values, std::size_t n) noexcept {
    if constexpr (Batch == 1) {
      return ring_.try_push(values[0]) ? 1 : 0;
    } else {
      return ring_.try_push_bulk(values, n);
    }
  }

  std::size_t pop(Consumer&, std::uint64_t* out, std::size_t max) noexcept {
    if constexpr (Batch == 1) {
      return ring_.try_pop(out[0]) ? 1 : 0;
    } else {
      return ring_.try_pop_bulk(out, max);
    }
  }

 private:
  rail::detail::MpmcRing<std::uint64_t> ring_;
};

}  // namespace

void register_rail() {
  register_contender<RailRing<1>>("rail");
  register_contender<RailRing<64>>("rail_bulk64");
}

}  // namespace rail_bench::ring
