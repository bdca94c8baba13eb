// The moodycamel BlockingConcurrentQueue pool (engine/moodycamel_pool.hpp) in the engine
// throughput workload. Variants:
//   fn               std::function<void()> tasks, enqueue + wait_dequeue: the pool "running the
//                    bare callable" that issue 4's targets are stated against
//   fn+tokens        the same with a consumer token per worker, as a competent user writes it
//   fn+ptokens       the same with a producer token per producer thread as well (a sub-queue
//                    each) and a consumer token per worker: the pool at its best with several
//                    producers; bench/run judges rail against the best of fn, fn+tokens and
//                    fn+ptokens
//   struct+deqbulk   PlainTask (function pointer + context), enqueue + wait_dequeue_bulk(64)
//   struct+bulk:B    PlainTask, enqueue_bulk of B + wait_dequeue_bulk(B): like for like with
//                    rail's add_bulk
//   fn:busy          fn with a CPU-bound thread per core running throughout (BackgroundLoad):
//                    the baseline of rail's oversubscription rows
#include <optional>
#include <string>
#include <vector>

#include "engine/moodycamel_pool.hpp"
#include "engine/workload.hpp"

namespace bench {
namespace {

void hit_latch(void* latch) {
  static_cast<CompletionLatch*>(latch)->hit();
}

enum class Tokens { none, consumer, producer_and_consumer };

void moodycamel_fn(benchmark::State& state, const std::string& name, int producers, int workers,
                   Tokens tokens, bool busy = false) {
  std::optional<BackgroundLoad> load;
  if (busy) load.emplace();
  CompletionLatch latch;
  MoodycamelPool<std::function<void()>> pool(workers, 1, tokens != Tokens::none);
  timed_batches(
      state, name, latch,
      [&] {
        run_producers(producers, config().jobs, [&](std::uint64_t begin, std::uint64_t end) {
          if (tokens != Tokens::producer_and_consumer) {
            for (std::uint64_t i = begin; i < end; ++i)
              pool.submit([&latch] { latch.hit(); });
            return;
          }
          // A producer thread lives for one iteration here, so its token does too: moodycamel
          // hands a released token's sub-queue to the next token, as a server's long-lived
          // request threads would keep theirs.
          auto token = pool.make_producer_token();
          for (std::uint64_t i = begin; i < end; ++i)
            pool.submit(token, [&latch] { latch.hit(); });
        });
      },
      load ? &*load : nullptr);
}

void moodycamel_struct(benchmark::State& state, const std::string& name, int producers, int workers,
                       std::size_t enqueue_batch, std::size_t dequeue_batch) {
  CompletionLatch latch;
  MoodycamelPool<PlainTask> pool(workers, dequeue_batch);
  timed_batches(state, name, latch, [&] {
    run_producers(producers, config().jobs, [&](std::uint64_t begin, std::uint64_t end) {
      if (enqueue_batch <= 1) {
        for (std::uint64_t i = begin; i < end; ++i)
          pool.submit(PlainTask{&hit_latch, &latch});
        return;
      }
      std::vector<PlainTask> batch(enqueue_batch);
      for (std::uint64_t i = begin; i < end; i += enqueue_batch) {
        std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(enqueue_batch, end - i));
        for (std::size_t k = 0; k < n; ++k)
          batch[k] = PlainTask{&hit_latch, &latch};
        pool.submit_bulk(batch.data(), n);
      }
    });
  });
}

}  // namespace

void register_moodycamel(int p, int w) {
  for (auto [variant, tokens] :
       {std::pair{"fn", Tokens::none}, std::pair{"fn+tokens", Tokens::consumer},
        std::pair{"fn+ptokens", Tokens::producer_and_consumer}})
    register_case(case_name("moodycamel", variant, p, w),
                  [p, w, tokens](benchmark::State& s, const std::string& n) {
                    moodycamel_fn(s, n, p, w, tokens);
                  });
  register_case(
      case_name("moodycamel", "struct+bulk:64", p, w),
      [p, w](benchmark::State& s, const std::string& n) { moodycamel_struct(s, n, p, w, 64, 64); });
}

void register_moodycamel_extras() {
  register_case(case_name("moodycamel", "fn:busy", 1, 2),
                [](benchmark::State& s, const std::string& n) {
                  moodycamel_fn(s, n, 1, 2, Tokens::none, true);
                });
  register_case(
      case_name("moodycamel", "struct+deqbulk", 1, 2),
      [](benchmark::State& s, const std::string& n) { moodycamel_struct(s, n, 1, 2, 1, 64); });
  register_case(
      case_name("moodycamel", "struct+bulk:256", 1, 2),
      [](benchmark::State& s, const std::string& n) { moodycamel_struct(s, n, 1, 2, 256, 256); });
}

}  // namespace bench
