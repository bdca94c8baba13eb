// Reporter: the soak's live progress (Config::progress): a thread of its own that, every
// Config::progress_every until it is destroyed, tells the callback how many jobs have ended
// (completed, dead-lettered, cancelled, discarded; at most Config::jobs, though redriven lives
// end again), how many the run adds, and the DLQ's depth.
// Threading: the callback runs on the reporter's thread; the reporter must go before the queue.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "soak/soak.hpp"

namespace rail::soak {

template <class Q>
class Reporter {
 public:
  Reporter(const Config& cfg, Q& q) {
    if (!cfg.progress) return;
    thread_ = std::thread([this, &cfg, &q] {
      std::unique_lock lock(mu_);
      for (;;) {
        const QueueCounts c = q.counts();
        const std::uint64_t ended = c.completed + c.dead_lettered + c.cancelled + c.discarded;
        cfg.progress(std::min(ended, cfg.jobs), cfg.jobs, q.dlq().size());
        if (cv_.wait_for(lock, cfg.progress_every, [this] { return stop_; })) return;
      }
    });
  }
  ~Reporter() {
    {
      const std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  Reporter(const Reporter&) = delete;
  Reporter& operator=(const Reporter&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace rail::soak
