// The thread index allocator (thread_index.hpp): a bitmap of held indices under one mutex, a
// thread_local releaser per thread that frees its index when the thread exits, and fork handlers
// that leave a child only its forking thread's index.
#include "rail/detail/thread_index.hpp"

#include <pthread.h>

#include <array>
#include <bit>
#include <mutex>

namespace rail::detail {

namespace {

/// Held: which indices live threads hold, one bit each.
struct Held {
  std::mutex mu;
  std::array<std::uint64_t, kMaxThreadIndices / 64> bits{};
  std::uint32_t count = 0;
};

Held& held() noexcept;

// fork(): the child has only the forking thread: it keeps that thread's index (if any) and
// frees the others' (their threads are gone), under a mutex the forking thread held through the
// fork, so no other thread can have left it locked.
void before_fork() noexcept {
  held().mu.lock();
}
void after_fork_in_parent() noexcept {
  held().mu.unlock();
}
void after_fork_in_child() noexcept {
  Held& h = held();
  h.bits.fill(0);
  h.count = 0;
  const std::uint32_t mine = thread_index_detail::slot();
  if (mine < kMaxThreadIndices) {
    h.bits[mine / 64] |= std::uint64_t{1} << (mine % 64);
    h.count = 1;
  }
  h.mu.unlock();
}

Held& held() noexcept {
  // Never destroyed: threads may exit (and free their index) after static destruction began.
  static Held* const h = [] {
    auto* made = new Held;
    (void)::pthread_atfork(&before_fork, &after_fork_in_parent, &after_fork_in_child);
    return made;
  }();
  return *h;
}

/// Releaser: frees its thread's index at thread exit, after which this_thread_index() answers
/// kNoThreadIndex on that thread (a later thread_local destructor that still asks).
struct Releaser {
  std::uint32_t index;
  ~Releaser() {
    thread_index_detail::slot() = kNoThreadIndex;
    Held& h = held();
    const std::lock_guard lock(h.mu);
    h.bits[index / 64] &= ~(std::uint64_t{1} << (index % 64));
    --h.count;
  }
};

}  // namespace

std::uint32_t thread_index_detail::claim() noexcept {
  Held& h = held();
  std::uint32_t index = kNoThreadIndex;
  {
    const std::lock_guard lock(h.mu);
    for (std::uint32_t w = 0; w < h.bits.size(); ++w) {
      if (h.bits[w] == ~std::uint64_t{0}) continue;
      const auto bit = static_cast<std::uint32_t>(std::countr_one(h.bits[w]));
      h.bits[w] |= std::uint64_t{1} << bit;
      ++h.count;
      index = w * 64 + bit;
      break;
    }
  }
  slot() = index;
  // Constructed on the first pass only, which is this one (slot() is claimed from now on), and
  // destroyed at this thread's exit. All indices held: nothing to free, and the thread uses the
  // shared cells for good.
  if (index != kNoThreadIndex) {
    thread_local Releaser releaser{index};
  }
  return index;
}

std::uint32_t live_thread_indices() noexcept {
  Held& h = held();
  const std::lock_guard lock(h.mu);
  return h.count;
}

}  // namespace rail::detail
