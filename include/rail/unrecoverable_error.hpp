// UnrecoverableError: thrown from anywhere in a handler (deep in a client library, say), it fails
// the job permanently, as returning Outcome::fail(what()) would: the remaining attempts are
// skipped and the job is dead-lettered with reason permanent_failure. Wrapped by
// std::throw_with_nested (at any depth), it still does: the wrapper's what() and the nested
// ones, joined by ": ", are the job's error. Any other exception is a retryable failure.
// BullMQ's UnrecoverableError; asynq's SkipRetry (errors.Is looks through wrapping).
#pragma once

#include <stdexcept>
#include <string>

namespace rail {

class UnrecoverableError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace rail
