// EventCount: lets idle workers sleep without a lock on the producer's path, and without lost
// wake-ups (Dekker-style handshake, as in folly::EventCount, rebuilt on C++20 atomic wait).
//
// Guarantee: if a producer publishes an item and then calls notify(), a consumer that called
// prepare_wait() and then failed to find the item will not sleep through it.
// Algorithm: the consumer announces itself (waiters_ += 1), re-checks the queue, then waits on
// epoch_ while it still equals the value read at announcement. The producer, after publishing,
// performs an RMW on waiters_ and, if anyone waits, bumps epoch_ and wakes one.
// Memory ordering: both sides touch waiters_ only through read-modify-writes (acq_rel). RMWs on
// one atomic are totally ordered, so either the consumer's increment precedes the producer's RMW
// (the producer sees a waiter and wakes it), or the producer's RMW precedes the increment, which
// then reads-from it and acquires everything the producer published before it — including the
// item, which the consumer's re-check will find. No standalone fence is needed (TSan-friendly).
// Threading: any number of producers and consumers.
// Shutdown: set your stop flag, then notify_all(); waiters re-check it after waking.
//
// Sleeping is a raw Linux futex on epoch_, not std::atomic::wait: libstdc++ 12 implements
// atomic::wait with its own spin phase and a process-wide hashed waiter pool (another shared
// counter per notify), both redundant with waiters_ here. The futex only parks and unparks; all
// memory ordering is carried by the atomics above, so TSan needs to understand nothing about it.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace rail::detail {

class EventCount {
 public:
  /// prepare_wait() announces a waiter; returns the key for wait(). Follow with a re-check of
  /// the condition, then either cancel_wait() or wait(key).
  [[nodiscard]] std::uint32_t prepare_wait() noexcept {
    // acq_rel: see the file comment; the acquire half is what makes the re-check sound.
    waiters_.fetch_add(1, std::memory_order_acq_rel);
    // acquire: pairs with notify()'s release bump, so a bump we see is not from the "past".
    return epoch_.load(std::memory_order_acquire);
  }
  void cancel_wait() noexcept { waiters_.fetch_sub(1, std::memory_order_relaxed); }
  /// wait(key) sleeps until notified after prepare_wait() returned key.
  void wait(std::uint32_t key) noexcept {
    // FUTEX_WAIT sleeps only if epoch_ still equals key (checked atomically by the kernel), so a
    // notify between our epoch load and this call makes it return at once. Spurious returns are
    // fine: the caller loops and re-checks its condition.
    static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
    syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&epoch_), FUTEX_WAIT_PRIVATE, key, nullptr,
            nullptr, 0);
    waiters_.fetch_sub(1, std::memory_order_relaxed);
  }
  /// notify() wakes one waiter if there is one. Call after publishing.
  void notify() noexcept {
    // An RMW, not a load: a plain load could be satisfied before our publishing store becomes
    // visible (StoreLoad), missing a waiter that arrived in between. fetch_add(0) is ordered
    // with the consumer's fetch_add in waiters_'s modification order (see file comment).
    if (waiters_.fetch_add(0, std::memory_order_acq_rel) != 0) {
      epoch_.fetch_add(1, std::memory_order_release);
      syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&epoch_), FUTEX_WAKE_PRIVATE, 1, nullptr,
              nullptr, 0);
    }
  }
  /// notify_all() wakes every waiter (shutdown, pause/resume).
  void notify_all() noexcept {
    epoch_.fetch_add(1, std::memory_order_acq_rel);
    syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&epoch_), FUTEX_WAKE_PRIVATE, INT32_MAX,
            nullptr, nullptr, 0);
  }

 private:
  alignas(64) std::atomic<std::uint32_t> waiters_{0};
  alignas(64) std::atomic<std::uint32_t> epoch_{0};
};

}  // namespace rail::detail
