// eventually(pred, limit): polls pred until it holds or `limit` (real time) passes. For threaded
// tests waiting for an end state: it bounds the wait, it never decides the outcome (the caller
// asserts on what it returns and on the state it waited for).
#pragma once

#include <chrono>
#include <thread>

namespace rail::test {

template <class Pred>
bool eventually(Pred pred, std::chrono::seconds limit = std::chrono::seconds(30)) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace rail::test
