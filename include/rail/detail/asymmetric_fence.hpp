// Asymmetric fences: a Dekker handshake whose one side runs for every job and whose other side
// is rare (a waiter registering by id, EndTracker). Each side stores its flag, fences, then
// loads the other's flag; with a seq_cst fence on both sides at least one of them sees the
// other's store. A full fence costs the hot side tens of nanoseconds per job, mostly waiting
// for its store buffer to drain (the slot lines it just wrote miss in cache).
//
// Algorithm: Linux's membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) makes every thread of the
// process that is running at the time execute a full memory barrier (by IPI) before the call
// returns, and a thread that is not running passes one when it is scheduled again. So the rare
// side's heavy_fence() supplies the barrier for both sides, and the hot side's light_fence()
// need only keep the compiler from moving its store below its load (a signal fence): the
// standard's fence-fence rule then holds as if both had a seq_cst fence (the same argument as
// folly::asymmetricHeavyBarrier and the kernel's sys_membarrier documentation).
//
// Contract: light_fence() pairs only with heavy_fence(). init_asymmetric_fence() must have
// returned before any thread calls either (EndTracker's constructor calls it, so it precedes
// every job of the queue that fences). When the kernel refuses the registration (no membarrier,
// a seccomp filter, not Linux), both functions are full seq_cst fences: correct, only slower.
// Memory ordering of the switch itself: `expedited` is written once, with release, after the
// registration returned, before any job exists; a light side that reads true therefore runs
// after the registration, and the heavy side, which reads it with acquire on a thread that was
// handed the queue after its construction, reads true too. A heavy side that reads true while
// a light side read false is harmless: membarrier is also a full fence for its caller.
// Once registered, the light sides rely on every heavy fence being a membarrier: heavy_fence()
// retries one the kernel fails for a moment (ENOMEM, EINTR, EAGAIN) and aborts, saying why, on
// any other failure rather than go on unfenced.
#pragma once

#include <atomic>

namespace rail::detail {

/// true once the process registered for expedited private membarriers (never reset).
inline std::atomic<bool> g_membarrier_expedited{false};

/// init_asymmetric_fence(): registers the process once (thread-safe, idempotent, cheap after
/// the first call).
void init_asymmetric_fence() noexcept;

/// light_fence(): the hot side of the handshake (per job): a compiler barrier when the heavy
/// side is a membarrier, else a full fence.
inline void light_fence() noexcept {
  // relaxed: see the header; the flag changes once, before any light side runs.
  if (g_membarrier_expedited.load(std::memory_order_relaxed)) [[likely]] {
    std::atomic_signal_fence(std::memory_order_seq_cst);
  } else {
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
}

/// heavy_fence(): the rare side: a barrier on every running thread of the process (a few
/// microseconds), or a full fence when membarrier is not available.
void heavy_fence() noexcept;

}  // namespace rail::detail
