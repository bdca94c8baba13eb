// UnrecoverableError: thrown from anywhere in a handler (deep in a client library, say), it fails
// the job permanently, as returning Outcome::fail(what()) would: the remaining attempts are
// skipped and the job is dead-lettered with reason permanent_failure. Any other exception is a
// retryable failure. BullMQ's UnrecoverableError; asynq's SkipRetry.
#pragma once

#include <stdexcept>
#include <string>

namespace rail {

class UnrecoverableError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace rail
