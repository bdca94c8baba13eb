// Runs one job through an inline engine: proves the headers, the library and its dependencies
// arrive through the package.
#include <rail/rail.hpp>

int main() {
  rail::ManualClock clock;
  rail::Engine engine({.clock = &clock, .mode = rail::Mode::inlined});
  auto q = engine.queue<int>("q", {});
  int seen = 0;
  q.process({}, [&](rail::Job<int>& j) { seen = j.data(); });
  (void)q.add("job", 42);
  engine.run_until_idle();
  return seen == 42 ? 0 : 1;
}
