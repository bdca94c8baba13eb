// Linking rail::rail leaves the process's allocator alone (issue 10): this binary links rail and
// nothing of mimalloc, as a consumer would. malloc and operator new stay glibc's and libstdc++'s,
// mimalloc's exports never enter the global symbol scope, and yet rail's own blocks (a queue's
// payload cells, a slot's error log) come from mimalloc, opened privately (RTLD_LOCAL).
// Under a sanitizer malloc is the sanitizer's: the glibc identity checks are skipped there.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>

#include "rail/detail/allocation.hpp"
#include "rail/rail.hpp"
#include "support/sanitized.hpp"

namespace rail {
namespace {

// Runs rail the way an application does, so that its allocation unit has opened mimalloc.
void use_rail() {
  ManualClock clock;
  Engine engine({.clock = &clock, .mode = Mode::inlined});
  auto q = engine.declare_queue<std::string>("q", {.capacity = 64});
  q.process({}, [](Job<std::string>& job) {
    return job.attempt() == 1 ? Outcome::retry("once") : Outcome::done();  // an error log
  });
  (void)q.add("j", std::string(100, 'x'), {.max_attempts = 2});
  engine.run_until_idle();
}

[[maybe_unused]] std::string library_of(const void* fn) {
  Dl_info info{};
  if (::dladdr(fn, &info) == 0 || info.dli_fname == nullptr) return "?";
  return info.dli_fname;
}

void* volatile g_sink = nullptr;

TEST(Allocator, ConsumerLinkingRailKeepsGlibcMalloc) {
#ifdef RAIL_SANITIZED
  GTEST_SKIP() << "malloc is the sanitizer's here";
#else
  use_rail();
  EXPECT_NE(library_of(reinterpret_cast<const void*>(&::malloc)).find("libc.so"),
            std::string::npos);
  // glibc's arena statistics see a small block: mimalloc's malloc would not touch them.
  const std::size_t before = mallinfo2().uordblks;
  void* p = std::malloc(4000);
  g_sink = p;
  const std::size_t during = mallinfo2().uordblks;
  std::free(p);
  EXPECT_GE(during, before + 4000);
#endif
}

TEST(Allocator, ConsumerLinkingRailKeepsItsOperatorNew) {
#ifdef RAIL_SANITIZED
  GTEST_SKIP() << "operator new is the sanitizer's here";
#else
  use_rail();
  using New = void* (*)(std::size_t);
  const New plain_new = &::operator new;
  EXPECT_NE(library_of(reinterpret_cast<const void*>(plain_new)).find("libstdc++"),
            std::string::npos);
  // A failed new throws (a mimalloc override may abort instead).
  EXPECT_THROW(g_sink = ::operator new(SIZE_MAX / 2), std::bad_alloc);
#endif
}

TEST(Allocator, MimallocNeverEntersTheGlobalSymbolScope) {
  use_rail();
  EXPECT_EQ(::dlsym(RTLD_DEFAULT, "mi_malloc"), nullptr);
  EXPECT_EQ(::dlsym(RTLD_DEFAULT, "mi_version"), nullptr);
}

TEST(Allocator, RailsOwnBlocksComeFromMimalloc) {
  const auto before = detail::allocation_stats();
  use_rail();
  const auto after = detail::allocation_stats();
  ASSERT_EQ(after.backend, detail::AllocationBackend::mimalloc)
      << "libmimalloc.so.2 could not be opened (Debian: libmimalloc2.0)";
  // The payload cells, and the error log of the job that failed once.
  EXPECT_GE(after.allocations - before.allocations, 2u);
  EXPECT_EQ(after.live_bytes, before.live_bytes);  // the engine gave every block back

  // The library is loaded (privately), and it owns what alloc_aligned returns.
  void* lib = ::dlopen("libmimalloc.so.2", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  ASSERT_NE(lib, nullptr);
  using Owned = bool (*)(const void*);
  // mi_check_owned walks the default heap's pages; mi_is_in_heap_region consults a map of the
  // low 40 TiB only, which misses blocks where ASan places mmap.
  auto in_heap = reinterpret_cast<Owned>(::dlsym(lib, "mi_check_owned"));
  ASSERT_NE(in_heap, nullptr);
  void* mine = detail::alloc_aligned(256, 64);
  void* theirs = std::malloc(256);
  EXPECT_TRUE(in_heap(mine));
  EXPECT_FALSE(in_heap(theirs));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(mine) % 64, 0u);
  std::free(theirs);
  detail::free_aligned(mine, 256, 64);
  ::dlclose(lib);  // drops the NOLOAD reference only
}

TEST(Allocator, AnImpossibleBlockThrowsBadAlloc) {
  EXPECT_THROW(g_sink = detail::alloc_aligned(SIZE_MAX / 2, 64), std::bad_alloc);
}

}  // namespace
}  // namespace rail
