// The asymmetric fence (asymmetric_fence.hpp): registering the process for expedited private
// membarriers once, and the heavy side (a membarrier, or a full fence where none is offered).
#include "rail/detail/asymmetric_fence.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#if defined(__linux__)
#include <linux/membarrier.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace rail::detail {

namespace {

#if defined(__linux__) && defined(__NR_membarrier)
long membarrier(int cmd) noexcept {
  return ::syscall(__NR_membarrier, cmd, 0, 0);
}

bool register_expedited() noexcept {
  const long supported = membarrier(MEMBARRIER_CMD_QUERY);
  if (supported < 0 || (supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return false;
  return membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
}
#else
bool register_expedited() noexcept {
  return false;
}
#endif

}  // namespace

void init_asymmetric_fence() noexcept {
  // A function-local static: every caller returns after the one registration completed.
  static const bool registered = [] {
    const bool ok = register_expedited();
    // release: a thread that reads true runs after the registration (see the header).
    if (ok) g_membarrier_expedited.store(true, std::memory_order_release);
    return ok;
  }();
  (void)registered;
}

void heavy_fence() noexcept {
#if defined(__linux__) && defined(__NR_membarrier)
  // acquire: pairs with the registration's release store.
  if (g_membarrier_expedited.load(std::memory_order_acquire)) {
    // The light sides have fenced only the compiler since the registration: a full fence here
    // alone would leave the handshake unfenced, so the barrier must happen. A kernel may fail it
    // for a moment (ENOMEM while it builds the CPU mask; EINTR, EAGAIN): try again. Any other
    // failure is undocumented after a successful registration, and no answer is safe.
    for (;;) {
      if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return;
      const int err = errno;
      if (err != ENOMEM && err != EINTR && err != EAGAIN) {
        std::fprintf(stderr,
                     "rail: membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) failed after a "
                     "successful registration (errno %d): the asymmetric fence cannot be "
                     "kept; aborting\n",
                     err);
        std::abort();
      }
      sched_yield();
    }
  }
#endif
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

}  // namespace rail::detail
