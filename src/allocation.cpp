// rail's private mimalloc: see include/rail/detail/allocation.hpp for the contract.
#include "rail/detail/allocation.hpp"

#include <dlfcn.h>

#include <atomic>
#include <new>

#ifndef RAIL_MIMALLOC_LIBRARY
#define RAIL_MIMALLOC_LIBRARY "libmimalloc.so.2"
#endif

namespace rail::detail {
namespace {

using AlignedAlloc = void* (*)(std::size_t, std::size_t) noexcept;
using Free = void (*)(void*) noexcept;

struct Backend {
  AlignedAlloc alloc = nullptr;  // null: operator new
  Free free = nullptr;
};

Backend resolve() noexcept {
  // RTLD_LOCAL keeps the library's malloc/new out of the global scope: nothing binds to them.
  // If the process already loaded libmimalloc globally (RAIL_MIMALLOC_OVERRIDE, or the
  // application links it), dlopen returns that copy, whose heap then serves everyone alike.
  // The handle is never closed: blocks may be freed during static destruction.
  void* lib = ::dlopen(RAIL_MIMALLOC_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return {};
  auto alloc = reinterpret_cast<AlignedAlloc>(::dlsym(lib, "mi_malloc_aligned"));
  auto free = reinterpret_cast<Free>(::dlsym(lib, "mi_free"));
  if (alloc == nullptr || free == nullptr) return {};
  return {alloc, free};
}

const Backend& backend() noexcept {
  static const Backend b = resolve();  // once per process, thread-safe (magic static)
  return b;
}

// relaxed: tallies for tests and benchmarks; they order nothing.
std::atomic<std::uint64_t> g_allocations{0};
std::atomic<std::int64_t> g_live_bytes{0};

}  // namespace

void* alloc_aligned(std::size_t size, std::size_t align) {
  const Backend& b = backend();
  void* p = b.alloc ? b.alloc(size, align) : ::operator new (size, std::align_val_t{align});
  if (p == nullptr) throw std::bad_alloc();
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  g_live_bytes.fetch_add(static_cast<std::int64_t>(size), std::memory_order_relaxed);
  return p;
}

void free_aligned(void* p, std::size_t size, std::size_t align) noexcept {
  if (p == nullptr) return;
  g_live_bytes.fetch_sub(static_cast<std::int64_t>(size), std::memory_order_relaxed);
  const Backend& b = backend();
  if (b.free) {
    b.free(p);
  } else {
    ::operator delete (p, std::align_val_t{align});
  }
}

AllocationStats allocation_stats() noexcept {
  return {backend().alloc ? AllocationBackend::mimalloc : AllocationBackend::operator_new,
          g_allocations.load(std::memory_order_relaxed),
          g_live_bytes.load(std::memory_order_relaxed)};
}

}  // namespace rail::detail
