// Replacements of the global allocation functions for memory_bench; see alloc_counter.hpp.
//
// Every replacement forwards to the process's underlying allocator through the __libc_* entry
// points (glibc exports them for exactly this use; see t_depth for who answers them in a rail
// process), so memory from any entry point can be freed through any other, as in an unmodified
// program. Nothing here allocates, locks or calls back into the allocator, so the
// counters cannot recurse; dlsym (resolved once per mimalloc entry point) may call calloc, which
// lands in our calloc and is merely counted.
#include "memory/alloc_counter.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <malloc.h>
#include <mimalloc.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "rail/detail/allocation.hpp"

extern "C" {
void* __libc_malloc(std::size_t size);
void* __libc_calloc(std::size_t n, std::size_t size);
void* __libc_realloc(void* p, std::size_t size);
void* __libc_memalign(std::size_t alignment, std::size_t size);
void __libc_free(void* p);
}

namespace {

// Each counter on its own line: allocating threads should not slow each other through the
// counters more than through the allocator itself.
struct alignas(64) Counter {
  std::atomic<std::uint64_t> v{0};
};
struct alignas(64) Gauge {
  std::atomic<std::int64_t> v{0};
};
Counter g_new_calls;
Counter g_malloc_calls;
Counter g_mi_calls;
Gauge g_live_bytes;

// In a process linked with rail, the __libc_* names below resolve to libmimalloc's: Debian builds
// libmimalloc.so with MI_OVERRIDE, so it exports malloc, free, operator new and __libc_malloc &
// co., and being loaded before libc it becomes the whole process's allocator (the baselines'
// too). Its aligned entry points call mi_malloc_aligned through the PLT, i.e. our interposer
// below; `t_depth` marks that we are already inside a counted call, so such nested calls are not
// counted twice. (initial-exec TLS in the executable: reading it never allocates.)
thread_local int t_depth = 0;
struct Nested {
  Nested() noexcept { ++t_depth; }
  ~Nested() { --t_depth; }
  Nested(const Nested&) = delete;
  Nested& operator=(const Nested&) = delete;
};

void note_alloc(Counter& calls, void* p) noexcept {
  if (p == nullptr) return;
  calls.v.fetch_add(1, std::memory_order_relaxed);
  g_live_bytes.v.fetch_add(static_cast<std::int64_t>(malloc_usable_size(p)),
                           std::memory_order_relaxed);
}
void note_free(void* p) noexcept {
  if (p == nullptr) return;
  g_live_bytes.v.fetch_sub(static_cast<std::int64_t>(malloc_usable_size(p)),
                           std::memory_order_relaxed);
}

void* new_impl(std::size_t size) {
  Nested nested;
  void* p = __libc_malloc(size == 0 ? 1 : size);
  if (p == nullptr) throw std::bad_alloc();
  note_alloc(g_new_calls, p);
  return p;
}
void* new_aligned_impl(std::size_t size, std::align_val_t align) {
  Nested nested;
  void* p = __libc_memalign(static_cast<std::size_t>(align), size == 0 ? 1 : size);
  if (p == nullptr) throw std::bad_alloc();
  note_alloc(g_new_calls, p);
  return p;
}
void delete_impl(void* p) noexcept {
  Nested nested;
  note_free(p);
  __libc_free(p);
}

template <class Fn>
Fn real_mimalloc(const char* name) noexcept {
  void* f = dlsym(RTLD_NEXT, name);
  if (f == nullptr) {
    std::fprintf(stderr, "memory_bench: dlsym(RTLD_NEXT, %s) failed\n", name);
    std::abort();
  }
  return reinterpret_cast<Fn>(f);
}

}  // namespace

// --- C++ operator new / delete -------------------------------------------------------------------
void* operator new(std::size_t size) {
  return new_impl(size);
}
void* operator new[](std::size_t size) {
  return new_impl(size);
}
void* operator new(std::size_t size, std::align_val_t align) {
  return new_aligned_impl(size, align);
}
void* operator new[](std::size_t size, std::align_val_t align) {
  return new_aligned_impl(size, align);
}
void operator delete(void* p) noexcept {
  delete_impl(p);
}
void operator delete[](void* p) noexcept {
  delete_impl(p);
}
void operator delete(void* p, std::size_t) noexcept {
  delete_impl(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  delete_impl(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  delete_impl(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  delete_impl(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  delete_impl(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  delete_impl(p);
}

// --- the C allocator -----------------------------------------------------------------------------
extern "C" {

void* malloc(std::size_t size) {
  Nested nested;
  void* p = __libc_malloc(size);
  note_alloc(g_malloc_calls, p);
  return p;
}
void* calloc(std::size_t n, std::size_t size) {
  Nested nested;
  void* p = __libc_calloc(n, size);
  note_alloc(g_malloc_calls, p);
  return p;
}
void* realloc(void* old, std::size_t size) {
  Nested nested;
  if (old != nullptr) note_free(old);
  void* p = __libc_realloc(old, size);
  if (p != nullptr) {
    note_alloc(g_malloc_calls, p);
  } else if (old != nullptr && size != 0) {
    // realloc failed and left `old` allocated: restore its bytes (no call counted).
    g_live_bytes.v.fetch_add(static_cast<std::int64_t>(malloc_usable_size(old)),
                             std::memory_order_relaxed);
  }
  return p;
}
void free(void* p) {
  Nested nested;
  note_free(p);
  __libc_free(p);
}
void* memalign(std::size_t alignment, std::size_t size) {
  Nested nested;
  void* p = __libc_memalign(alignment, size);
  note_alloc(g_malloc_calls, p);
  return p;
}
void* aligned_alloc(std::size_t alignment, std::size_t size) {
  return memalign(alignment, size);
}
int posix_memalign(void** out, std::size_t alignment, std::size_t size) {
  if (alignment < sizeof(void*) || (alignment & (alignment - 1)) != 0) return EINVAL;
  void* p = memalign(alignment, size);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}

// --- mimalloc (its API, called by this binary; rail's own calls are counted by rail)
// ---------------------------------------------
void* mi_malloc_aligned(std::size_t size, std::size_t alignment) noexcept {
  using Fn = void* (*)(std::size_t, std::size_t);
  static const Fn real = real_mimalloc<Fn>("mi_malloc_aligned");
  void* p = real(size, alignment);
  if (p != nullptr && t_depth == 0) {
    g_mi_calls.v.fetch_add(1, std::memory_order_relaxed);
    g_live_bytes.v.fetch_add(static_cast<std::int64_t>(mi_usable_size(p)),
                             std::memory_order_relaxed);
  }
  return p;
}
void mi_free(void* p) noexcept {
  using Fn = void (*)(void*);
  static const Fn real = real_mimalloc<Fn>("mi_free");
  if (p != nullptr && t_depth == 0)
    g_live_bytes.v.fetch_sub(static_cast<std::int64_t>(mi_usable_size(p)),
                             std::memory_order_relaxed);
  real(p);
}

}  // extern "C"

namespace bench {

AllocSnapshot snapshot() noexcept {
  AllocSnapshot s;
  s.new_calls = g_new_calls.v.load(std::memory_order_relaxed);
  s.malloc_calls = g_malloc_calls.v.load(std::memory_order_relaxed);
  // rail's own blocks reach mimalloc through a private handle (rail/detail/allocation.hpp), past
  // the interposers above: rail counts them itself (requested bytes, not usable size).
  const rail::detail::AllocationStats rail_blocks = rail::detail::allocation_stats();
  s.mi_calls = g_mi_calls.v.load(std::memory_order_relaxed) + rail_blocks.allocations;
  s.live_bytes = g_live_bytes.v.load(std::memory_order_relaxed) + rail_blocks.live_bytes;
  // /proc/self/statm: size resident shared text lib data dt, in pages. Read with the raw
  // syscalls: stdio would allocate a FILE buffer inside the measurement.
  if (int fd = ::open("/proc/self/statm", O_RDONLY); fd >= 0) {
    char buf[128];
    ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
    ::close(fd);
    if (n > 0) {
      buf[n] = '\0';
      unsigned long long size = 0, resident = 0;
      if (std::sscanf(buf, "%llu %llu", &size, &resident) == 2)
        s.rss_bytes = static_cast<std::int64_t>(resident) * ::sysconf(_SC_PAGESIZE);
    }
  }
  return s;
}

}  // namespace bench
