// handler_failure(): what an exception out of a handler means for its attempt, in the one place
// synchronous handlers (job_flow.cpp) and coroutine handlers (task.hpp) both read it from: a
// rail::UnrecoverableError fails the job permanently, also when it is wrapped (nested, at any
// depth, by std::throw_with_nested: asynq's errors.Is(err, SkipRetry)); anything else is a
// retryable failure. The reason is what() of the exception thrown, followed by what() of each
// exception nested in it, joined by ": " (Go's %w wrapping reads the same way).
#pragma once

#include <exception>
#include <string>

#include "rail/outcome.hpp"
#include "rail/unrecoverable_error.hpp"

namespace rail::detail {

/// kMaxNestedDepth: how deep handler_failure looks into nested exceptions; a chain deeper than
/// this is read as if it ended there.
inline constexpr int kMaxNestedDepth = 16;

/// read_failure(x, reason, depth): appends x's what() and those nested in it to `reason`;
/// returns whether any of them is an UnrecoverableError.
inline bool read_failure(const std::exception& x, std::string& reason, int depth = 0) {
  if (depth > 0) reason += ": ";
  reason += x.what();
  bool unrecoverable = dynamic_cast<const UnrecoverableError*>(&x) != nullptr;
  const auto* nested = dynamic_cast<const std::nested_exception*>(&x);
  if (nested == nullptr || !nested->nested_ptr() || depth + 1 >= kMaxNestedDepth)
    return unrecoverable;
  try {
    std::rethrow_exception(nested->nested_ptr());
  } catch (const std::exception& inner) {
    unrecoverable = read_failure(inner, reason, depth + 1) || unrecoverable;
  } catch (...) {
    reason += ": an exception not derived from std::exception";
  }
  return unrecoverable;
}

/// handler_failure(e): the Outcome of an attempt that threw e. Cold path (an exception was
/// thrown); may throw std::bad_alloc building the reason.
inline Outcome handler_failure(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    std::string reason;
    if (read_failure(x, reason)) return Outcome::fail(reason);
    return Outcome::retry(reason);
  } catch (...) {
    return Outcome::retry("handler threw a non-std::exception");
  }
}

}  // namespace rail::detail
