// Violations: what the soak's checks found, counted, with the first few described. Any thread
// adds; the run reads them once every thread is done.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace rail::soak {

struct Violations {
  std::atomic<std::uint64_t> count{0};
  std::mutex mu;
  std::vector<std::string> first;  // the first 10
  void add(std::string what) {
    count.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard lock(mu);
    if (first.size() < 10) first.push_back(std::move(what));
  }
};

}  // namespace rail::soak
