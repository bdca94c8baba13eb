// rail::Error: the one exception type rail throws, always on a cold path (configuration, queue
// declaration, shutdown, journal I/O). Hot-path operations report full/duplicate/rejected through
// return values instead; see AddStatus in queue.hpp.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace rail {

enum class ErrorCode {
  invalid_option,      // an option is out of range or inconsistent with another
  unknown_queue,       // a queue name that was never declared
  unknown_downstream,  // a downstream name that was never declared (Engine::declare_downstream)
  queue_exists,        // a queue name declared a second time (look it up with queue<T>(name))
  type_mismatch,       // a queue looked up with a payload type other than its own
  shutting_down,       // an operation after Engine::shutdown() began
  capacity,            // a fixed-size table (queues, dedup window) is full, or a queue's
                       // capacity needs more memory than the machine has (detail/footprint.hpp)
  wrong_mode,          // an inline-only call on a threaded engine, or the reverse
  journal,             // the DLQ journal could not be opened, written or read
  would_deadlock,      // a call from a handler or observer that would wait for the caller itself
  resources,           // the system refused what a call needs from it (a worker thread)
  sealed,              // an add to a JobBatch after its seal()
  broker,              // rail::amqp: the broker could not be reached, refused a call, or closed
                       // the connection (the message carries its reply)
  internal,            // a broken invariant inside rail: always a bug, please report it
};

/// to_string(code) names the code as it is spelled in the enum, for messages and logs.
[[nodiscard]] std::string_view to_string(ErrorCode code) noexcept;

/// Error carries a code a program can branch on and a message a human can act on: the message
/// says what was wrong and what was expected, e.g.
/// "invalid_option: JobOptions.max_attempts is 0; expected 1 or more".
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message);

  /// code() is the machine-readable class of the failure.
  [[nodiscard]] ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace rail
