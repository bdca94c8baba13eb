// A handler cannot declare its outcome pending without handing it to a Completion: Outcome has
// no public pending(), so Job::defer(start), which returns that Outcome, is the one way. The
// control defers.
#include "rail/rail.hpp"

rail::Outcome handle(rail::Job<int>& job) {
#ifdef RAIL_CONTROL_CODABLE
  return job.defer([](rail::Completion) {});
#else
  (void)job;
  return rail::Outcome::pending();
#endif
}
