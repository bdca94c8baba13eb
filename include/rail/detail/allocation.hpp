// Allocation: where rail's own long-lived blocks come from (a queue's payload cells, a slot's
// error log and dedup key record), without touching the process's allocator.
//
// Guarantee: linking rail::rail never replaces malloc or operator new. rail's blocks come from
// mimalloc's `mi_` API, reached through a private dlopen(RTLD_LOCAL) of Debian's
// libmimalloc.so.2: a library opened RTLD_LOCAL does not enter the global symbol scope, so its
// exports of malloc/free/new do not interpose anybody's (tests/allocator_test.cpp).
// Where the library cannot be opened, rail falls back to aligned operator new, decided once per
// process; allocation_stats().backend says which.
// The process-wide override is an explicit opt-in: CMake option RAIL_MIMALLOC_OVERRIDE (README).
//
// Why not mimalloc's header-only `mi_` calls: they would make every consumer link
// libmimalloc.so, which Debian builds with MI_OVERRIDE, and put <mimalloc.h> in a public header.
// Debian ships no static libmimalloc.a to link the API alone.
//
// Threading: all functions may be called from any thread. Cost: one indirect call and two
// relaxed counter updates over the allocator's own; none of these blocks is per job.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rail::detail {

/// alloc_aligned(size, align): a block of `size` bytes aligned to `align` (a power of two).
/// Throws std::bad_alloc when the allocator has no memory.
[[nodiscard]] void* alloc_aligned(std::size_t size, std::size_t align);

/// free_aligned(p, size, align): frees a block from alloc_aligned with the same size and
/// alignment. Null does nothing.
void free_aligned(void* p, std::size_t size, std::size_t align) noexcept;

enum class AllocationBackend : std::uint8_t { mimalloc, operator_new };

/// AllocationStats: what alloc_aligned handed out, for tests and the memory benchmark.
struct AllocationStats {
  AllocationBackend backend = AllocationBackend::operator_new;
  std::uint64_t allocations = 0;  // alloc_aligned calls that returned a block
  std::int64_t live_bytes = 0;    // requested bytes not yet freed
};
[[nodiscard]] AllocationStats allocation_stats() noexcept;

}  // namespace rail::detail
