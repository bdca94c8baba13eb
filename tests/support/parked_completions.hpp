// ParkedCompletions: the Completions that handlers handed over (Job::defer), kept under a lock
// until a test or a completer thread takes them to answer.
#pragma once

#include <cstddef>
#include <mutex>
#include <utility>
#include <vector>

#include "rail/completion.hpp"

namespace rail::test {

struct ParkedCompletions {
  void put(Completion c) {
    const std::lock_guard lock(mu);
    all.push_back(std::move(c));
  }
  /// take(): every Completion parked so far; the store is empty afterwards.
  std::vector<Completion> take() {
    const std::lock_guard lock(mu);
    return std::exchange(all, {});
  }
  std::size_t size() {
    const std::lock_guard lock(mu);
    return all.size();
  }

  std::mutex mu;
  std::vector<Completion> all;
};

}  // namespace rail::test
