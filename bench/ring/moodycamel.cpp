// bench_ring contender: moodycamel::ConcurrentQueue<std::uint64_t> (Debian libconcurrentqueue-dev),
// the queue the targets are set against, in the three ways people use it:
//   moodycamel         enqueue/try_dequeue with implicit (per-thread, hashed) producer queues
//   moodycamel_tokens  enqueue/try_dequeue with a ProducerToken/ConsumerToken per thread
//   moodycamel_bulk64  enqueue_bulk/try_dequeue_bulk of 64 with tokens (compare with rail_bulk64)
//
// Like-for-like, with one deliberate difference: moodycamel is unbounded, and enqueue() allocates
// a block when it runs out rather than reporting full. It is constructed with kCapacity as its
// initial capacity (blocks pre-allocated) and used through enqueue(), its ordinary API, so a
// producer that runs ahead never waits; blocks freed by consumers are recycled, so allocation
// happens almost only in the harness's untimed warm-up iteration. That favours moodycamel slightly
// against the bounded rings, which is the right direction for a baseline. Tokens are created on
// the thread that uses them.
#include <concurrentqueue/concurrentqueue.h>

#include <cstddef>
#include <cstdint>

#include "ring/ring_harness.hpp"

namespace rail_bench::ring {
namespace {

using Queue = moodycamel::ConcurrentQueue<std::uint64_t>;

class MoodycamelPlain {
 public:
  static constexpr std::size_t kBatch = 1;
  struct Handle {};
  using Producer = Handle;
  using Consumer = Handle;

  explicit MoodycamelPlain(std::size_t capacity) : queue_(capacity) {}

  Producer make_producer() noexcept { return {}; }
  Consumer make_consumer() noexcept { return {}; }

  std::size_t push(Producer&, const std::uint64_t* values, std::size_t) noexcept {
    return queue_.enqueue(values[0]) ? 1 : 0;
  }
  std::size_t pop(Consumer&, std::uint64_t* out, std::size_t) noexcept {
    return queue_.try_dequeue(out[0]) ? 1 : 0;
  }

 private:
  Queue queue_;
};

template <std::size_t Batch>
class MoodycamelTokens {
 public:
  static constexpr std::size_t kBatch = Batch;
  using Producer = moodycamel::ProducerToken;
  using Consumer = moodycamel::ConsumerToken;

  explicit MoodycamelTokens(std::size_t capacity) : queue_(capacity) {}

  Producer make_producer() { return Producer(queue_); }
  Consumer make_consumer() { return Consumer(queue_); }

  std::size_t push(Producer& token, const std::uint64_t* values, std::size_t n) noexcept {
    if constexpr (Batch == 1) {
      return queue_.enqueue(token, values[0]) ? 1 : 0;
    } else {
      return queue_.enqueue_bulk(token, values, n) ? n : 0;
    }
  }
  std::size_t pop(Consumer& token, std::uint64_t* out, std::size_t max) noexcept {
    if constexpr (Batch == 1) {
      return queue_.try_dequeue(token, out[0]) ? 1 : 0;
    } else {
      return queue_.try_dequeue_bulk(token, out, max);
    }
  }

 private:
  Queue queue_;
};

}  // namespace

void register_moodycamel() {
  register_contender<MoodycamelPlain>("moodycamel");
  register_contender<MoodycamelTokens<1>>("moodycamel_tokens");
  register_contender<MoodycamelTokens<64>>("moodycamel_bulk64");
}

}  // namespace rail_bench::ring
