// The distributed soak: one broker queue shared by several consumer processes, with faults, and
// an account of every job. The parent forks `workers` consumer processes (each an Engine whose
// local queue a rail::amqp::Consumer feeds), adds `jobs` jobs through a Producer, kills one
// worker with SIGKILL once a third of the jobs completed and starts another in its place, then
// stops the workers and checks, per job, from the workers' logs and the broker's DLQ:
// - each confirmed job ended: completed somewhere, or in the broker's DLQ, not both;
// - it ended as its plan says: completed on its planned attempt (the broker's count: failures
//   before it, a lapsed lease that costs none), or dead-lettered for its planned reason with
//   every attempt counted;
// - it completed more than once only if the killed worker had started it (at-least-once:
//   duplicates only after a fault), and each such duplicate is reported;
// - nothing is left in the broker queue.
// The plans, by job number modulo 6: done; fail once; fail twice; always fail (dead-lettered
// attempts_exhausted after 3); fail permanently; overrun the 1 s lease once (forwarded back to
// the broker, its late outcome fenced) and complete on the next delivery.
#pragma once

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace rail::soak {

struct BrokerSoakOptions {
  std::string url;                     // amqp://user:password@host:port
  std::string queue = "soak";          // the broker queue (declared if missing; must start empty)
  std::uint32_t jobs = 600;            // jobs to add
  std::uint32_t workers = 3;           // consumer processes
  std::uint32_t concurrency = 4;       // handlers per process
  bool kill_one = true;                // SIGKILL a worker once a third completed, start another
  std::string dir;                     // the workers' logs (a new temporary directory if empty)
  std::chrono::seconds deadline{300};  // the longest the jobs may take to end
};

struct BrokerSoakReport {
  std::uint64_t confirmed = 0;       // adds the broker confirmed
  std::uint64_t completed = 0;       // jobs completed (each counted once)
  std::uint64_t dead_lettered = 0;   // jobs in the broker's DLQ
  std::uint64_t forwarded = 0;       // retries and lapses handed back to the broker
  std::uint64_t lapses = 0;          // leases that lapsed, each handed back
  std::uint64_t duplicates = 0;      // completions past a job's first (all after the kill)
  std::uint64_t held_by_killed = 0;  // jobs the killed worker had started
  std::vector<std::string> violations;
  [[nodiscard]] bool ok() const noexcept { return violations.empty(); }
};

/// run_broker_soak(o, log): runs the soak (progress lines to `log` if not null). The calling
/// process must have no other thread: it forks the workers.
BrokerSoakReport run_broker_soak(const BrokerSoakOptions& o, std::ostream* log);

/// print(r, out): the report in a few lines, then each violation.
void print(const BrokerSoakReport& r, std::ostream& out);

}  // namespace rail::soak
