// Compiled by check.sh, twice: as it is, a coroutine handler that takes its rail::AsyncJob by
// const reference, which must NOT compile (the reference would outlive the handler call across
// the first co_await) and whose diagnostic must say to take it by value; and with
// RAIL_CONTROL_CODABLE (the control), the same handler taking it by value, which must compile.
#include "rail/rail.hpp"

int main() {
  rail::Engine engine;
  auto q = engine.queue<int>("calls", {});
#ifdef RAIL_CONTROL_CODABLE
  q.process({.max_pending = 1}, [](rail::AsyncJob<int> job) -> rail::Task {
    co_return job.data() > 0 ? rail::Outcome::done() : rail::Outcome::discard("zero");
  });
#else
  q.process({.max_pending = 1}, [](const rail::AsyncJob<int>& job) -> rail::Task {
    co_return job.data() > 0 ? rail::Outcome::done() : rail::Outcome::discard("zero");
  });
#endif
}
