// The soak harness's short run, in the normal suite (>= 200,000 jobs) and under the sanitizers
// (>= 60,000: their 3-10x slowdown kept the CI stage near its time limit):
// with every fault kind (failures, throws, permanent failures, hangs past the lease), duplicate
// adds (merged and debounced), delayed jobs and cancels of them, cancels, pauses and resumes,
// redrives, and a shutdown in the middle of a run, on the real and on a manual clock, on a queue's
// own threads and on the engine's shared pool, with callback (Completion) and coroutine handlers,
// with every job in a FIFO group, with priorities and tenants (a capped one's cap checked with
// leases off), and with attempt timeouts.
#include "soak/soak.hpp"

#include <gtest/gtest.h>

#include <sstream>

#include "support/sanitized.hpp"

namespace rail::soak {
namespace {

#ifdef RAIL_SANITIZED
constexpr std::uint64_t kJobs = 60'000;
#else
constexpr std::uint64_t kJobs = 200'000;
#endif

Report expect_clean(const Config& c) {
  Report r = run(c);
  std::ostringstream out;
  print(r, c, out);
  EXPECT_TRUE(r.ok()) << out.str();
  // The checker's totals: every job accounted for exactly.
  EXPECT_EQ(r.ok_jobs, r.accepted) << out.str();
  EXPECT_EQ(r.lost + r.duplicated + r.late_applied, 0u) << out.str();
  EXPECT_GT(r.redriven, 0u) << out.str();           // redrives while workers ran
  EXPECT_GT(r.delayed_cancelled, 0u) << out.str();  // delayed jobs cancelled at once
  EXPECT_GT(r.debounced, 0u) << out.str();
  if (c.shutdown_at > 0) {
    EXPECT_GT(r.handed_back, 0u) << out.str();  // the shutdown left jobs to take back
    EXPECT_GE(r.accepted, static_cast<std::uint64_t>(c.shutdown_at * c.jobs)) << out.str();
  } else {
    EXPECT_GE(r.accepted, c.jobs) << out.str();
  }
  // Every fault kind actually happened (a soak that injects nothing proves nothing).
  EXPECT_GT(r.dead_lettered, 0u) << out.str();
  if (c.leases && c.timeout == Duration::max()) {
    EXPECT_GT(r.stalls, 0u) << out.str();
  }
  if (c.timeout != Duration::max()) {
    EXPECT_GT(r.timed_out, 0u) << out.str();  // hangs ran into their timeout
  }
  if (c.expire_after != Duration::max()) {
    EXPECT_GT(r.expired, 0u) << out.str();  // a backlog behind pauses and hangs outlived it
  }
  EXPECT_GT(r.cancelled, 0u) << out.str();
  EXPECT_GT(r.discarded, 0u) << out.str();
  EXPECT_GT(r.duplicates_merged, 0u) << out.str();
  EXPECT_GT(r.failed_attempts, r.stalls) << out.str();
  EXPECT_GT(r.cancels_accepted, 0u) << out.str();
  EXPECT_GT(r.duplicates_new, 0u) << out.str();  // ids re-added after their window
  EXPECT_GT(r.delayed, 0u) << out.str();
  EXPECT_GT(r.pauses, 0u) << out.str();
  EXPECT_GT(r.pauses_with_work, 0u) << out.str();  // a pause that had something to hold back
  if (c.async > 0) {
    EXPECT_GT(r.deferred, 0u) << out.str();  // async handlers' completions
  }
  if (c.groups > 0) {
    EXPECT_GT(r.grouped_started, r.accepted / 2) << out.str();
  }
  if (c.tenants > 0) {
    EXPECT_GT(r.tenant_most_active, 0u) << out.str();  // the capped tenant's jobs ran
  }
  std::cout << out.str();
  return r;
}

TEST(Soak, InvariantsHoldOnTheRealClock) {
  Config c;
  c.jobs = kJobs;
  c.seed = 11;
  expect_clean(c);
}

TEST(Soak, InvariantsHoldWithFifoGroups) {
  Config c;
  c.jobs = kJobs;
  c.groups = 64;
  c.seed = 13;
  expect_clean(c);
}

TEST(Soak, InvariantsHoldWithPrioritiesTenantsAndGroups) {
  Config c;
  c.jobs = kJobs;
  c.priorities = 4;
  c.priority_max_wait = std::chrono::milliseconds(20);
  c.tenants = 4;
  c.groups = 64;
  c.seed = 17;
  expect_clean(c);
}

TEST(Soak, ACappedTenantNeverRunsMoreThanItsCapWithLeasesOff) {
  Config c;
  c.jobs = kJobs;
  c.priorities = 3;
  c.tenants = 5;
  c.tenant_cap = 2;
  c.leases = false;
  c.hang = 0;
  c.seed = 19;
  expect_clean(c);
}

TEST(Soak, InvariantsHoldWithAttemptTimeoutsShorterThanTheLease) {
  Config c;
  c.jobs = kJobs;
  c.timeout = std::chrono::milliseconds(20);  // hangs time out (the lease is 50 ms)
  c.seed = 23;
  expect_clean(c);
}

TEST(Soak, InvariantsHoldWhenJobsExpireUnstarted) {
  Config c;
  c.jobs = kJobs;
  c.expire_after = std::chrono::milliseconds(8);  // above the longest delay (5 ms)
  c.seed = 29;
  expect_clean(c);
}

TEST(Soak, ParentsStartOnlyAfterTheirChildrenThroughFaultsCancelsAndRedrives) {
  Config c;
  c.jobs = kJobs;
  c.flow_every = 4;
  c.seed = 37;
  const Report r = expect_clean(c);
  EXPECT_GT(r.parents_started, 0u);
  EXPECT_GT(r.dependency_failed, 0u) << "no child ever failed its parent";
}

TEST(Soak, BatchCallbacksFireExactlyOnceThroughFaultsAndRedrives) {
  Config c;
  c.jobs = kJobs;
  c.batch_size = 8;
  c.seed = 31;
  const Report r = expect_clean(c);
  EXPECT_GT(r.batches, 0u);
  EXPECT_GT(r.batches_succeeded, 0u);
  EXPECT_LT(r.batches_succeeded, r.batches) << "some batch had a member that failed for good";
}

TEST(Soak, InvariantsHoldOnAManualClock) {
  Config c;
  c.jobs = kJobs;
  c.manual_clock = true;
  c.visibility = std::chrono::milliseconds(20);
  c.seed = 12;
  expect_clean(c);
}

TEST(Soak, EveryJobIsAccountedForAfterAShutdownInTheMiddleOfTheRunOnEitherPool) {
  // Seed 21: the queue's own 8 threads, real clock. Seed 22: the engine's shared pool of 6
  // threads (with 4 producers, oversubscribed on 2 cores), manual clock.
  for (std::uint64_t seed : {21u, 22u}) {
    Config c;
    c.jobs = kJobs;
    c.shutdown_at = 0.5;
    c.manual_clock = seed % 2 == 0;
    c.shared_pool = seed % 2 == 0;
    if (c.shared_pool) c.workers = 6;
    c.visibility = std::chrono::milliseconds(20);
    c.seed = seed;
    expect_clean(c);
  }
}

TEST(Soak, ARateOnlyDownstreamSharedByTwoPoolsNeverStalls) {
  // A rate and no concurrency limit, flipped down to 1,000/s with burst 1 while jobs run, called
  // by the soak's queue and a side queue on the other kind of pool: the wake-up chain must leave
  // no job of either waiting with tokens free (the run would not settle). Seed 31: the soak's
  // queue on its own threads, the side queue on the shared pool; seed 32 the other way round.
  for (std::uint64_t seed : {31u, 32u}) {
    Config c;
    c.jobs = kJobs / 4;
    c.rate_only_downstream = true;
    c.side_queue = true;  // a second queue at the same gate, from the other kind of pool
    c.shared_pool = seed == 32;
    if (c.shared_pool) c.workers = 6;
    c.visibility = std::chrono::milliseconds(50);
    c.seed = seed;
    expect_clean(c);
  }
}

TEST(Soak, InvariantsHoldWithCoroutineHandlers) {
  // The handler is a rail::Task coroutine: a fifth of the deliveries co_await a simulated call
  // that two completer threads resume (and which then throws, fails, hangs past its lease...);
  // the rest co_return at once. On the shared pool, with a mid-run shutdown: parked coroutines
  // are then freed uncompleted.
  for (std::uint64_t seed : {15u, 16u}) {
    Config c;
    c.jobs = kJobs;
    c.coroutines = true;
    c.async = 0.2;
    c.shared_pool = seed == 16;
    c.shutdown_at = seed == 16 ? 0.5 : 0;
    c.visibility = std::chrono::milliseconds(20);
    c.seed = seed;
    expect_clean(c);
  }
}

TEST(Soak, InvariantsHoldWhenEveryStallCostsAnAttempt) {
  Config c;
  c.jobs = kJobs;
  c.manual_clock = true;
  c.visibility = std::chrono::milliseconds(20);
  c.stall_policy = StallPolicy::count_as_attempt;
  c.seed = 14;
  expect_clean(c);
}

TEST(Soak, InvariantsHoldWithFewWorkersAndATinyQueue) {
  Config c;
  c.jobs = kJobs;
  c.workers = 1;
  c.producers = 8;
  c.capacity = 64;
  // Each hang holds the one worker until its lease lapses: a shorter lease keeps the run at a
  // few seconds (it took 27-30 s in each CI stage at 50 ms) with the same fault mix.
  c.visibility = std::chrono::milliseconds(20);
  c.seed = 13;
  expect_clean(c);
}

}  // namespace
}  // namespace rail::soak
