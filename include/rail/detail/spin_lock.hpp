// SpinLock: a test-and-test-and-set lock for critical sections of about a hundred nanoseconds
// (one probe of a sharded hash table), where a futex's system call would cost more than the wait.
//
// Contract: lock() returns once this thread holds the lock; unlock() by the holder releases it.
// Not re-entrant, not fair. A waiter spins kSpinsBeforeYield times, then yields between tries:
// after some microseconds the holder has most likely been preempted, and on an oversubscribed
// machine spinning on would burn the quantum the holder needs to finish.
// Memory ordering: lock()'s winning exchange is acquire and unlock()'s store release, so every
// write made under the lock happens-before the next holder's reads.
// The Atom seam (STYLE rule 5) lets a test substitute a deterministic atomic and run this exact
// kernel; the code that uses the lock is plain sequential code under it.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

#include "rail/detail/cpu_relax.hpp"

namespace rail::detail {

template <template <class> class Atom = std::atomic>
class SpinLock {
 public:
  static constexpr std::uint32_t kSpinsBeforeYield = 64;

  void lock() noexcept {
    for (std::uint32_t spins = 0;;) {
      // acquire: pairs with unlock()'s release, so the previous holder's writes happen-before
      // our reads of them.
      if (!locked_.exchange(true, std::memory_order_acquire)) return;
      // relaxed: this load only decides when to retry the exchange and publishes nothing. The
      // exchange above re-establishes order. Spinning on a load keeps the line Shared among
      // waiters, instead of passing it around in Modified state on every attempt.
      while (locked_.load(std::memory_order_relaxed)) {
        if (spins < kSpinsBeforeYield) {
          ++spins;
          cpu_relax();
        } else {
          std::this_thread::yield();
        }
      }
    }
  }
  // release: publishes every write made under the lock to the next acquirer.
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  Atom<bool> locked_{false};
};

/// SpinGuard: holds a SpinLock for its scope.
class SpinGuard {
 public:
  explicit SpinGuard(SpinLock<>& lock) noexcept : lock_(lock) { lock_.lock(); }
  ~SpinGuard() { lock_.unlock(); }
  SpinGuard(const SpinGuard&) = delete;
  SpinGuard& operator=(const SpinGuard&) = delete;

 private:
  SpinLock<>& lock_;
};

}  // namespace rail::detail
