// this_thread_index(): a small number naming the calling thread among the live threads that asked
// for one, so that a per-thread cell of a lock-free structure has exactly one writer (and that
// writer may use a plain store where a shared cell needs a locked read-modify-write).
//
// Contract: while a thread lives, its index never changes and no other live thread holds it.
// When the thread exits, its index is freed and may go to a thread that asks later (the lowest
// free index first, so indices stay dense). It is freed by a pthread key's destructor, which
// glibc runs after the thread's C++ thread_local destructors: those still hold it. kNoThreadIndex
// when kMaxThreadIndices live threads hold one already, or when asked after the index was freed
// (another key's destructor that runs later): the caller then uses a cell shared with other
// threads. A user of an index must leave its cell as it found it before the thread exits (every
// cell a reader increments, it decrements before returning), since the next holder inherits it.
// Cost: the first call on a thread takes a process-wide mutex and allocates nothing (glibc keeps
// a thread's values of the process's first 32 keys in the thread itself); every later call reads
// one constant-initialised thread_local.
// Fork: the child keeps the forking thread's index and frees every other (pthread_atfork).
// Threading: any thread, also during static initialisation and thread exit; not from a signal
// handler (the first call takes a mutex).
#pragma once

#include <cstdint>

namespace rail::detail {

inline constexpr std::uint32_t kNoThreadIndex = 0xFFFF'FFFF;
inline constexpr std::uint32_t kMaxThreadIndices = 4096;

namespace thread_index_detail {
/// The calling thread's index; kUnclaimed until its first this_thread_index().
inline constexpr std::uint32_t kUnclaimed = 0xFFFF'FFFE;
inline std::uint32_t& slot() noexcept {
  // Trivially destructible and constant-initialised: no guard on access, and readable for the
  // whole of the thread's life, its thread_local destructors included.
  thread_local std::uint32_t index = kUnclaimed;
  return index;
}
/// claim(): the calling thread's first call: takes the lowest free index (or kNoThreadIndex),
/// stores it in slot() and sets the key that frees it at thread exit (thread_index.cpp).
std::uint32_t claim() noexcept;
}  // namespace thread_index_detail

/// this_thread_index(): see the file comment.
inline std::uint32_t this_thread_index() noexcept {
  const std::uint32_t i = thread_index_detail::slot();
  if (i != thread_index_detail::kUnclaimed) [[likely]]
    return i;
  return thread_index_detail::claim();
}

/// live_thread_indices(): how many indices are held now (tests, diagnostics).
std::uint32_t live_thread_indices() noexcept;

}  // namespace rail::detail
