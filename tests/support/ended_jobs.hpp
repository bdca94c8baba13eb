// ended_jobs(counts): the jobs a queue's counts show ended, however they ended (completed,
// dead-lettered, cancelled, discarded or forwarded): what a threaded test waits for, so that a job that
// ended otherwise than expected fails the test's expectations instead of hanging it.
#pragma once

#include <cstdint>

#include "rail/add_receipt.hpp"

namespace rail::test {

[[nodiscard]] inline std::uint64_t ended_jobs(const QueueCounts& c) noexcept {
  return c.completed + c.dead_lettered + c.cancelled + c.discarded + c.forwarded;
}

}  // namespace rail::test
