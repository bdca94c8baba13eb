// MutexPool: the textbook thread pool — one std::mutex, one std::condition_variable and a
// std::deque<std::function<void()>> — as the floor every scheduler should clear. submit() locks,
// appends and notifies one worker; a worker waits on the condvar, pops under the lock and runs
// the task after unlocking. Unbounded, like the moodycamel pool.
// Shutdown: the destructor sets the stop flag under the lock, wakes everyone and joins; workers
// finish what is queued first.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace bench {

class MutexPool {
 public:
  explicit MutexPool(int workers) {
    for (int i = 0; i < workers; ++i)
      workers_.emplace_back([this] { loop(); });
  }
  ~MutexPool() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_)
      t.join();
  }
  MutexPool(const MutexPool&) = delete;
  MutexPool& operator=(const MutexPool&) = delete;

  void submit(std::function<void()> task) {
    {
      std::lock_guard lock(mu_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
        if (tasks_.empty()) return;  // stop_ and drained
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace bench
