// MoodycamelPool<Task>: the baseline thread pool of issue 4 — a moodycamel
// BlockingConcurrentQueue of tasks drained by N worker threads, as people build it. Used by the
// throughput, latency and memory benchmarks so all three measure the same pool.
//
// Task is std::function<void()> ("the bare callable") or PlainTask (a function pointer and a
// context: no type erasure, trivially copyable). An empty task (operator bool false) is the stop
// signal. Workers take one task at a time (wait_dequeue) or up to `dequeue_batch`
// (wait_dequeue_bulk), with or without a consumer token (a competent user gives each long-lived
// worker one: it remembers which producer's sub-queue to try first); producers use enqueue or
// enqueue_bulk, without a token or through a moodycamel::ProducerToken of their own
// (make_producer_token()): an explicit sub-queue per producer thread, which no other producer
// touches, the pool at its best with many producers. rail's add() takes no token.
// The queue is unbounded: it never makes a producer wait, and grows instead.
//
// Shutdown: the destructor enqueues one stop task per worker and joins them. A bulk-dequeuing
// worker that takes several stop tasks in one batch puts the extra ones back, so every worker
// gets one.
#pragma once

#include <concurrentqueue/blockingconcurrentqueue.h>

#include <cstddef>
#include <functional>
#include <iterator>
#include <thread>
#include <vector>

namespace bench {

/// PlainTask: a task without type erasure (what "plain struct tasks" means in the issue).
struct PlainTask {
  void (*fn)(void*) = nullptr;
  void* ctx = nullptr;
  explicit operator bool() const noexcept { return fn != nullptr; }
  void operator()() const { fn(ctx); }
};

template <class Task>
class MoodycamelPool {
 public:
  /// MoodycamelPool(workers, dequeue_batch, tokens): dequeue_batch 1 uses wait_dequeue, more
  /// uses wait_dequeue_bulk with that many tasks per call; tokens: each worker dequeues through
  /// its own moodycamel::ConsumerToken.
  MoodycamelPool(int workers, std::size_t dequeue_batch, bool tokens = false) {
    for (int i = 0; i < workers; ++i)
      workers_.emplace_back([this, dequeue_batch, tokens] {
        if (tokens) {
          moodycamel::ConsumerToken token(queue_);
          run(dequeue_batch, [&](auto&&... args) { return dequeue(token, args...); });
        } else {
          run(dequeue_batch, [&](auto&&... args) { return dequeue(args...); });
        }
      });
  }
  ~MoodycamelPool() {
    for (std::size_t i = 0; i < workers_.size(); ++i)
      queue_.enqueue(Task{});
    for (auto& t : workers_)
      t.join();
  }
  MoodycamelPool(const MoodycamelPool&) = delete;
  MoodycamelPool& operator=(const MoodycamelPool&) = delete;

  void submit(Task task) { queue_.enqueue(std::move(task)); }
  /// submit(token, task): through the calling producer thread's own token (one per thread).
  void submit(moodycamel::ProducerToken& token, Task task) {
    queue_.enqueue(token, std::move(task));
  }
  [[nodiscard]] moodycamel::ProducerToken make_producer_token() {
    return moodycamel::ProducerToken(queue_);
  }
  /// submit_bulk(tasks, n) moves n tasks in with one enqueue_bulk.
  void submit_bulk(Task* tasks, std::size_t n) {
    queue_.enqueue_bulk(std::make_move_iterator(tasks), n);
  }

  [[nodiscard]] moodycamel::BlockingConcurrentQueue<Task>& queue() noexcept { return queue_; }

 private:
  // dequeue(...): one blocking dequeue of up to `max` tasks into `out`, with or without a token.
  std::size_t dequeue(moodycamel::ConsumerToken& token, Task* out, std::size_t max) {
    if (max == 1) {
      queue_.wait_dequeue(token, *out);
      return 1;
    }
    return queue_.wait_dequeue_bulk(token, out, max);
  }
  std::size_t dequeue(Task* out, std::size_t max) {
    if (max == 1) {
      queue_.wait_dequeue(*out);
      return 1;
    }
    return queue_.wait_dequeue_bulk(out, max);
  }

  /// run(max, take): a worker's loop; take(out, max) is one of the dequeues above.
  template <class Take>
  void run(std::size_t max, Take take) {
    std::vector<Task> batch(max);
    for (;;) {
      std::size_t n = take(batch.data(), max);
      std::size_t stops = 0;
      for (std::size_t i = 0; i < n; ++i) {
        if (batch[i]) {
          batch[i]();
        } else {
          ++stops;
        }
      }
      if (stops == 0) continue;
      for (std::size_t i = 1; i < stops; ++i)
        queue_.enqueue(Task{});  // another worker's stop signal
      return;
    }
  }

  moodycamel::BlockingConcurrentQueue<Task> queue_;
  std::vector<std::thread> workers_;
};

}  // namespace bench
