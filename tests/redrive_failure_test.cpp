// A redrive that fails after it took a slot (no memory for the job's restored error log) leaves
// nothing behind: the job stays in the dead-letter queue, and its dedup id is not held by a job
// that does not exist. Allocations fail on request through a replaced global operator new, which
// the sanitizer runtimes define themselves, so this binary is built only outside them.
#include <gtest/gtest.h>

#include <new>

#include "rail/detail/job_slot.hpp"
#include "rail/rail.hpp"
#include "support/inline_engine.hpp"
#include "support/replaced_new.hpp"

namespace rail {
namespace {

using RedriveFailure = test::InlineEngine;

TEST_F(RedriveFailure, ARedriveWithNoMemoryLeavesTheJobDeadLetteredAndItsDedupIdFree) {
  // One slot: the redrive takes the slot the job had, with the job's id, so its first life's
  // claim on the id looks alive again until the failed redrive clears the slot.
  auto q = engine.declare_queue<int>("charges", QueueOptions{.capacity = 1});
  q.process({}, [](Job<int>&) { return Outcome::retry("declined"); });
  JobOptions o;
  o.dedup.id = "order-5";
  const JobId id = q.add("charge", 1, o).id;
  engine.run_until_idle();
  ASSERT_EQ(q.state(id).status, JobStatus::dead_lettered);

  // Keeping the counters restores the error log, which reserves room for every attempt so far,
  // the next ones and one more: 3 records here.
  test::fail_next_of_size(3 * sizeof(detail::AttemptRecord));
  EXPECT_THROW((void)q.dlq().redrive(id, RedriveOptions{.reset_counters = false}), std::bad_alloc);
  ASSERT_FALSE(test::failure_pending()) << "the log's reservation is the allocation that failed";
  EXPECT_EQ(q.dlq().size(), 1u);
  EXPECT_EQ(q.state(id).status, JobStatus::dead_lettered);

  const AddReceipt again = q.add("charge", 2, o);
  EXPECT_EQ(again.status, AddStatus::added) << "no job holds the id";
  EXPECT_NE(again.id, id);
  engine.run_until_idle();
  EXPECT_EQ(q.dlq().size(), 2u);
}

}  // namespace
}  // namespace rail
