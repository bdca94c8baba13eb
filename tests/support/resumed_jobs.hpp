// Resumed jobs for tests: resume(q, value, o, r) adds through QueueFront::resume (what
// rail::amqp::Consumer does with a broker's message), and after(failed, stalls) builds the
// counters of a job that failed `failed` times elsewhere ("error N" for attempt N).
#pragma once

#include <string>

#include "rail/detail/resumed.hpp"
#include "rail/rail.hpp"

namespace rail::test {

inline AddReceipt resume(Queue<int>& q, int value, const JobOptions& o, const detail::Resumed& r) {
  return detail::QueueAccess::front(q).resume("job", &value, o, r);
}

inline detail::Resumed after(std::uint32_t failed, std::uint32_t stalls = 0) {
  detail::Resumed r;
  r.failed_attempts = failed;
  r.deliveries = failed + stalls;
  r.stalls = stalls;
  for (std::uint32_t a = 1; a <= failed; ++a)
    r.errors.push_back(AttemptError{a, TimePoint{}, "error " + std::to_string(a)});
  return r;
}

}  // namespace rail::test
