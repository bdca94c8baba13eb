// rail::Error (error.hpp): the error codes' names and the message "code: what was wrong".
#include "rail/error.hpp"

namespace rail {

std::string_view to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::invalid_option:
      return "invalid_option";
    case ErrorCode::unknown_queue:
      return "unknown_queue";
    case ErrorCode::unknown_downstream:
      return "unknown_downstream";
    case ErrorCode::queue_exists:
      return "queue_exists";
    case ErrorCode::type_mismatch:
      return "type_mismatch";
    case ErrorCode::shutting_down:
      return "shutting_down";
    case ErrorCode::capacity:
      return "capacity";
    case ErrorCode::wrong_mode:
      return "wrong_mode";
    case ErrorCode::journal:
      return "journal";
    case ErrorCode::would_deadlock:
      return "would_deadlock";
    case ErrorCode::resources:
      return "resources";
    case ErrorCode::sealed:
      return "sealed";
    case ErrorCode::broker:
      return "broker";
    case ErrorCode::internal:
      return "internal";
  }
  return "unknown_error";
}

Error::Error(ErrorCode code, const std::string& message)
    : std::runtime_error(std::string(to_string(code)) + ": " + message), code_(code) {}

}  // namespace rail

#include <cstdio>
#include <cstdlib>

#include "rail/detail/assert.hpp"

namespace rail::detail {

void invariant_failed(const char* file, int line, const char* cond, const char* message) noexcept {
  std::fprintf(stderr, "rail: internal invariant broken at %s:%d: %s (%s). Please report this.\n",
               file, line, message, cond);
  std::abort();
}

}  // namespace rail::detail
