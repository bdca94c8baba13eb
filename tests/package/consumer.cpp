// Runs one job through an inline engine: proves the headers, the library and its dependencies
// arrive through the package, and that the consumer's malloc is still the one it linked
// (RAIL_CONSUMER_MALLOC_FROM: glibc's, or jemalloc's) after rail ran and allocated.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <rail/rail.hpp>
#include <string>

namespace {
// The shared object that defines malloc as this process resolves it.
const char* malloc_library() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<const void*>(&::malloc), &info) == 0 || !info.dli_fname) return "?";
  return info.dli_fname;
}
}  // namespace

int main() {
  rail::ManualClock clock;
  rail::Engine engine({.clock = &clock, .mode = rail::Mode::inlined});
  auto q = engine.declare_queue<std::string>("q", {});
  std::string seen;
  q.process({}, [&](rail::Job<std::string>& j) {
    if (j.attempt() == 1) return rail::Outcome::retry("once");  // rail allocates an error log
    seen = j.data();
    return rail::Outcome::done();
  });
  (void)q.add("job", std::string(64, 'x'), {.max_attempts = 2});
  engine.run_until_idle();
  if (seen != std::string(64, 'x')) {
    std::fprintf(stderr, "consumer: the job did not run\n");
    return 1;
  }
  const char* lib = malloc_library();
  if (std::strstr(lib, RAIL_CONSUMER_MALLOC_FROM) == nullptr) {
    std::fprintf(stderr, "consumer: malloc comes from %s; expected %s (rail replaced it)\n", lib,
                 RAIL_CONSUMER_MALLOC_FROM);
    return 1;
  }
  std::printf("consumer: malloc from %s\n", lib);
  return 0;
}
