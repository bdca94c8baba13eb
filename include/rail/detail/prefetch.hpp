// prefetch_for_write(p) and prefetch_for_read(p): start fetching p's cache line ahead of a
// write or a read, so that the miss overlaps other work instead of stalling it.
//
// Why: a job's slot and payload lines are written by the producer that adds it and then by the
// worker that runs it, on another core: each side finds them in the other's cache (or evicted,
// as the free slots are reused a few MB apart). A store that misses waits in the store buffer,
// and the next locked instruction (a counter, a ring's CAS) waits for it; a load that misses
// stalls at once. Both sides know which lines they will touch a little before they touch them
// (a popped batch, a reserved bulk, the next free slot), which is when these are issued.
// A prefetch is only a hint: it never faults, and a wrong guess costs a wasted line fetch.
#pragma once

namespace rail::detail {

/// prefetch_for_write(p): fetches p's line in exclusive state, so the write (or CAS) that follows
/// does not pay a second trip to upgrade a shared copy. __builtin_prefetch(p, 1) emits PREFETCHW
/// only when the target flags allow it (not for generic x86-64), so it is spelled out; CPUs
/// without the instruction execute it as a no-op (its opcode space was reserved as NOP).
inline void prefetch_for_write(const void* p) noexcept {
#if defined(__x86_64__)
  asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p, 1);
#endif
}

/// prefetch_for_read(p): fetches p's line for reading.
inline void prefetch_for_read(const void* p) noexcept {
  __builtin_prefetch(p, 0);
}

}  // namespace rail::detail
