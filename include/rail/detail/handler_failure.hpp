// handler_failure(): what an exception out of a handler means for its attempt, in the one place
// synchronous handlers (job_flow.cpp) and coroutine handlers (task.hpp) both read it from: a
// rail::UnrecoverableError fails the job permanently, anything else is a retryable failure
// carrying what().
#pragma once

#include <exception>

#include "rail/outcome.hpp"
#include "rail/unrecoverable_error.hpp"

namespace rail::detail {

/// handler_failure(e): the Outcome of an attempt that threw e. Cold path (an exception was
/// thrown); may throw std::bad_alloc building the reason.
inline Outcome handler_failure(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const UnrecoverableError& u) {
    return Outcome::fail(u.what());
  } catch (const std::exception& x) {
    return Outcome::retry(x.what());
  } catch (...) {
    return Outcome::retry("handler threw a non-std::exception");
  }
}

}  // namespace rail::detail
