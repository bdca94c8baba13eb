// The steps the inline downstream fuzzes share (downstream_wakeup_races_test, job_downstream_races_test):
// each takes its randomness from the run's generator, so a seed replays the run.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "rail/rail.hpp"

namespace rail::test {

using FuzzRng = std::mt19937_64;
/// FuzzJobs: the (queue index, id) of each job a run added.
using FuzzJobs = std::vector<std::pair<int, JobId>>;

/// fuzz_job(rng, o): `o` with attempts enough never to dead-letter, and at random a delay (a
/// quarter of the adds) and a dedup id of four, merged or debounced, with a ttl (a quarter).
inline JobOptions fuzz_job(FuzzRng& rng, JobOptions o = {}) {
  o.max_attempts = 1000;
  if (rng() % 4 == 0) o.delay = std::chrono::milliseconds(rng() % 500);
  if (rng() % 4 == 0) {
    o.dedup.id = std::string("k").append(std::to_string(rng() % 4));
    o.dedup.ttl = std::chrono::milliseconds(1 + rng() % 1000);
    o.dedup.mode = rng() % 2 ? DedupMode::debounce : DedupMode::merge;
  }
  return o;
}

/// fuzz_cancel: cancels a job the run made, at random (ended or not).
inline void fuzz_cancel(FuzzRng& rng, std::vector<Queue<int>>& queues, const FuzzJobs& jobs) {
  if (jobs.empty()) return;
  const auto& [q, id] = jobs[rng() % jobs.size()];
  (void)queues[q].cancel(id);
}

/// fuzz_retime: promotes a job the run made, or moves its due time within 700 ms.
inline void fuzz_retime(FuzzRng& rng, std::vector<Queue<int>>& queues, const FuzzJobs& jobs) {
  if (jobs.empty()) return;
  const auto& [q, id] = jobs[rng() % jobs.size()];
  if (rng() % 2) {
    (void)queues[q].promote(id);
  } else {
    (void)queues[q].change_delay(id, std::chrono::milliseconds(rng() % 700));
  }
}

/// fuzz_rate(rng): 1-20 starts per 100 ms: a window, or half the time a token bucket with a
/// burst of 1-5.
inline RateLimit fuzz_rate(FuzzRng& rng) {
  const std::uint64_t max = 1 + rng() % 20;
  if (rng() % 2 == 0) return RateLimit{.max = max, .per = std::chrono::milliseconds(100)};
  return RateLimit::token_bucket(max, std::chrono::milliseconds(100), 1 + rng() % 5);
}

/// fuzz_set_rate: a new rate for `gate`, or (a quarter of the time) none.
inline void fuzz_set_rate(FuzzRng& rng, Downstream& gate) {
  if (rng() % 4 == 0) {
    gate.set_rate(std::nullopt);
  } else {
    gate.set_rate(fuzz_rate(rng));
  }
}

/// expect_all_ended(queues, made): after a run: nothing waits, is delayed or runs (a job left in
/// a blocked ring would count as waiting), and the queues ended exactly the `made` jobs.
inline void expect_all_ended(std::vector<Queue<int>>& queues, std::size_t made) {
  std::uint64_t ended = 0;
  for (auto& q : queues) {
    const auto n = q.counts();
    EXPECT_EQ(n.waiting, 0u) << q.name() << ": stranded";
    EXPECT_EQ(n.delayed, 0u) << q.name();
    EXPECT_EQ(n.active, 0u) << q.name();
    ended += n.completed + n.cancelled + n.dead_lettered;
  }
  EXPECT_EQ(ended, made);
}

}  // namespace rail::test
