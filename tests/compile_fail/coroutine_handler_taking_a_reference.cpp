// Compiled by check.sh, twice: as it is, a coroutine handler that takes its rail::AsyncJob by
// reference (RAIL_REFERENCE: `const&` by default, or `&&`), which must NOT compile (the
// coroutine would keep a reference to the temporary the handler call made) and whose diagnostic
// must say to take it by value; and with RAIL_CONTROL_CODABLE (the control), the same handler
// taking it by value, which must compile.
#include "rail/rail.hpp"

#ifdef RAIL_CONTROL_CODABLE
#undef RAIL_REFERENCE
#define RAIL_REFERENCE
#elif !defined(RAIL_REFERENCE)
#define RAIL_REFERENCE const&
#endif

int main() {
  rail::Engine engine;
  auto q = engine.declare_queue<int>("calls", {});
  q.process({.max_pending = 1}, [](rail::AsyncJob<int> RAIL_REFERENCE job) -> rail::Task {
    co_return job.data() > 0 ? rail::Outcome::done() : rail::Outcome::discard("zero");
  });
}
