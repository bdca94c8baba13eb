// The thread index allocator (thread_index.hpp): a bitmap of held indices under one mutex, a
// pthread key whose destructor frees a thread's index when the thread exits, and fork handlers
// that leave a child only its forking thread's index.
#include "rail/detail/thread_index.hpp"

#include <pthread.h>

#include <array>
#include <bit>
#include <cstdint>
#include <mutex>

namespace rail::detail {

namespace {

/// Held: which indices live threads hold, one bit each, and the key that frees them.
struct Held {
  std::mutex mu;
  std::array<std::uint64_t, kMaxThreadIndices / 64> bits{};
  std::uint32_t count = 0;
  pthread_key_t key{};
  bool keyed = false;  // the key exists: without it no index could be freed, so none is given
};

Held& held() noexcept;

/// free_locked(h, index): index goes back (under h.mu).
void free_locked(Held& h, std::uint32_t index) noexcept {
  h.bits[index / 64] &= ~(std::uint64_t{1} << (index % 64));
  --h.count;
}

/// release_at_exit(value): the key's destructor, run at the thread's exit after its C++
/// thread_local destructors (glibc: __call_tls_dtors, then the keys' destructors), so those
/// still hold the index. The value is the index + 1 (a key's destructor runs only for non-null).
void release_at_exit(void* value) noexcept {
  const auto index = static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(value) - 1);
  thread_index_detail::slot() = kNoThreadIndex;
  Held& h = held();
  const std::lock_guard lock(h.mu);
  free_locked(h, index);
}

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
    made->keyed = ::pthread_key_create(&made->key, &release_at_exit) == 0;
    (void)::pthread_atfork(&before_fork, &after_fork_in_parent, &after_fork_in_child);
    return made;
  }();
  return *h;
}

}  // namespace

std::uint32_t thread_index_detail::claim() noexcept {
  Held& h = held();
  std::uint32_t index = kNoThreadIndex;
  {
    const std::lock_guard lock(h.mu);
    for (std::uint32_t w = 0; h.keyed && w < h.bits.size(); ++w) {
      if (h.bits[w] == ~std::uint64_t{0}) continue;
      const auto bit = static_cast<std::uint32_t>(std::countr_one(h.bits[w]));
      h.bits[w] |= std::uint64_t{1} << bit;
      ++h.count;
      index = w * 64 + bit;
      break;
    }
  }
  // A pthread key, not a thread_local with a destructor: glibc allocates to register the latter
  // on a thread's first use, while it keeps a thread's values of its first 32 keys in the thread
  // itself (a later key's first value allocates a block once per thread). No index if the value
  // cannot be set: nothing would free it.
  if (index != kNoThreadIndex &&
      ::pthread_setspecific(h.key, reinterpret_cast<void*>(std::uintptr_t{index} + 1)) != 0) {
    const std::lock_guard lock(h.mu);
    free_locked(h, index);
    index = kNoThreadIndex;
  }
  slot() = index;
  return index;
}

std::uint32_t live_thread_indices() noexcept {
  Held& h = held();
  const std::lock_guard lock(h.mu);
  return h.count;
}

}  // namespace rail::detail
