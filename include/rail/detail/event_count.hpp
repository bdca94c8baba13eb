// EventCount: lets idle workers sleep without a lock on the producer's path, without lost
// wake-ups, and without a system call per add while a woken worker is on its way (the weakness
// of a plain "bump an epoch and FUTEX_WAKE if anyone waits" event count, which our engine
// benchmark measured as a millisecond-scale add-to-start latency).
//
// Guarantee: if a producer publishes an item and then calls notify(), a consumer that failed to
// find the item and then calls wait() will not sleep through it.
// Algorithm: a counting semaphore in the style of moodycamel's LightweightSemaphore. c_ > 0 is
// the number of pending wake-up signals; c_ < 0 counts consumers asleep (or committed to
// sleeping). wait() takes a pending signal if there is one and returns at once; otherwise it
// parks on a futex until a post arrives. notify() leaves one pending signal if there is none
// (so a consumer about to wait returns and re-checks), or, if consumers sleep, hands one of them
// a post and wakes it — one system call per sleeper woken, none while a signal is pending.
// Memory ordering: c_ is touched only by read-modify-writes (acq_rel). They are totally ordered,
// so either the consumer's decrement comes first (the producer then sees a sleeper and posts to
// it), or the producer's RMW comes first and the decrement reads from it (or from a later RMW in
// its release sequence), acquiring everything the producer published — so the consumer's
// re-check finds the item. posts_ only parks and unparks; it orders nothing on its own. No
// standalone fences (TSan-friendly).
// Threading: any number of producers and consumers.
// Shutdown: set the stop flag, then notify_all(large); every consumer then returns from wait()
// and re-checks it.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdint>
#include <ctime>

#include "rail/detail/cpu_relax.hpp"
#include "rail/detail/deadline.hpp"

namespace rail::detail {

/// Points of wait_for at which a test's hooks may stop the calling thread.
enum class EventCountPoint { timed_out, looked_after_timeout };
/// NoEventCountHooks: production's hooks (none). A test substitutes a type whose static
/// at(point) stops the calling thread there, to force an interleaving.
struct NoEventCountHooks {
  static void at(EventCountPoint) noexcept {}
};

template <class Hooks = NoEventCountHooks>
class BasicEventCount {
 public:
  /// wait() returns when a signal is (or becomes) available: the caller re-checks its condition
  /// and may call wait() again. Spurious returns are possible and harmless.
  void wait() noexcept {
    // acq_rel: see the file comment; the acquire half makes the caller's re-check sound.
    if (c_.fetch_sub(1, std::memory_order_acq_rel) > 0) return;  // took a pending signal
    for (;;) {
      if (take_post()) return;
      sleep_while_no_post(nullptr);
    }
  }

  /// wait_for(ns): wait(), for at most about ns: true when it took a signal, false when it timed
  /// out (and then it holds no signal and counts no longer as a sleeper).
  /// A timed-out consumer leaves the count of sleepers with a CAS from c_ < 0, as moodycamel's
  /// semaphore does. If c_ >= 0 meanwhile, a notify() counted it among the sleepers it posts to
  /// (each post follows its CAS): it takes a post if one is there, else it waits kRecheckNs for
  /// one and looks at c_ again. Not without a timeout: the post is not addressed, and another
  /// consumer's wait may take it (then c_ < 0 again counts this one, and it leaves). (Leaving
  /// without either would leave c_ counting a signal and posts_ a post nobody is owed.)
  bool wait_for(std::int64_t ns) noexcept {
    // acq_rel: as in wait().
    if (c_.fetch_sub(1, std::memory_order_acq_rel) > 0) return true;
    const std::int64_t deadline = saturating_add(steady_ns(), std::chrono::nanoseconds{ns});
    for (;;) {
      if (take_post()) return true;
      const std::int64_t left = deadline - steady_ns();
      if (left <= 0) break;
      const timespec ts{static_cast<time_t>(left / 1'000'000'000),
                        static_cast<long>(left % 1'000'000'000)};
      sleep_while_no_post(&ts);
    }
    Hooks::at(EventCountPoint::timed_out);
    // relaxed load: the CAS below decides. acq_rel CAS: as wait()'s decrement, undone.
    std::int32_t c = c_.load(std::memory_order_relaxed);
    Hooks::at(EventCountPoint::looked_after_timeout);
    for (;;) {
      if (c < 0) {
        if (c_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel)) return false;
        continue;
      }
      if (take_post()) return true;
      const timespec recheck{0, kRecheckNs};
      sleep_while_no_post(&recheck);
      c = c_.load(std::memory_order_relaxed);
    }
  }
  /// How long a timed-out wait_for sleeps between looks at c_ while a notify counts it.
  static constexpr long kRecheckNs = 50'000;

  /// has_sleepers(): a hint: some consumer sleeps (or is about to).
  [[nodiscard]] bool has_sleepers() const noexcept {
    return c_.load(std::memory_order_relaxed) < 0;  // relaxed: a hint
  }

  /// notify() wakes one consumer, or leaves a signal for the next one to wait. Call after
  /// publishing.
  void notify() noexcept {
    // An RMW, not a load: a plain load could be satisfied before our publishing store becomes
    // visible (StoreLoad) and miss a consumer that decremented in between.
    std::int32_t old = c_.fetch_add(0, std::memory_order_acq_rel);
    for (;;) {
      if (old >= 1) return;  // a signal is pending already: whoever takes it re-checks
      if (c_.compare_exchange_weak(old, old + 1, std::memory_order_acq_rel)) break;
    }
    if (old < 0) post(1);
  }

  /// notify_all(pending) wakes every sleeper and leaves `pending` signals for consumers about to
  /// wait (the worker count for pause/resume; INT32_MAX / 2 for shutdown).
  void notify_all(std::int32_t pending) noexcept {
    std::int32_t old = c_.load(std::memory_order_relaxed);
    // acq_rel: as notify(); a CAS loop because producers and consumers move c_ meanwhile.
    while (old < pending && !c_.compare_exchange_weak(old, pending, std::memory_order_acq_rel)) {
    }
    if (old < 0) post(static_cast<std::uint32_t>(-old));
  }

 private:
  /// take_post(): takes one post if there is one.
  bool take_post() noexcept {
    std::uint32_t p = posts_.load(std::memory_order_acquire);
    while (p > 0) {
      // acq_rel: pairs with post()'s release.
      if (posts_.compare_exchange_weak(p, p - 1, std::memory_order_acq_rel)) return true;
    }
    return false;
  }
  /// sleep_while_no_post(timeout): parks until a post() wakes us, a signal interrupts, or
  /// `timeout` (relative; null: none) passes. FUTEX_WAIT sleeps only if posts_ is still 0, checked
  /// atomically by the kernel, so a post made before we park is never slept through.
  void sleep_while_no_post(const timespec* timeout) noexcept {
    syscall(SYS_futex, futex_word(), FUTEX_WAIT_PRIVATE, 0, timeout, nullptr, 0);
  }
  void post(std::uint32_t n) noexcept {
    posts_.fetch_add(n, std::memory_order_release);  // pairs with wait()'s acquire CAS
    syscall(SYS_futex, futex_word(), FUTEX_WAKE_PRIVATE, n >= INT32_MAX ? INT32_MAX : int(n),
            nullptr, nullptr, 0);
  }
  std::uint32_t* futex_word() noexcept {
    static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
    return reinterpret_cast<std::uint32_t*>(&posts_);
  }

  alignas(64) std::atomic<std::int32_t> c_{0};
  alignas(64) std::atomic<std::uint32_t> posts_{0};
};

using EventCount = BasicEventCount<>;

}  // namespace rail::detail
