// Job<T>: what a handler sees of the job it is running. A view: valid only during the handler
// call; copy out what you need to keep.
#pragma once

#include <cstdint>
#include <string_view>

#include "rail/clock.hpp"
#include "rail/event.hpp"

namespace rail {

namespace detail {
template <class T>
class QueueImpl;
}

template <class T>
class Job {
 public:
  /// id() is the job's engine-unique id (the one add() returned).
  [[nodiscard]] JobId id() const noexcept { return id_; }
  /// name() is the job kind given to add(), e.g. "charge-card".
  [[nodiscard]] std::string_view name() const noexcept { return name_; }
  /// queue() is the queue's name.
  [[nodiscard]] std::string_view queue() const noexcept { return queue_; }
  /// data() is the payload.
  [[nodiscard]] const T& data() const noexcept { return *data_; }
  /// attempt() is this attempt's number, 1-based (BullMQ's attemptsMade + 1).
  [[nodiscard]] std::uint32_t attempt() const noexcept { return attempts_made_ + 1; }
  /// attempts_made() counts the failed attempts before this one (BullMQ's attemptsMade).
  [[nodiscard]] std::uint32_t attempts_made() const noexcept { return attempts_made_; }
  /// max_attempts() is JobOptions::attempts.
  [[nodiscard]] std::uint32_t max_attempts() const noexcept { return max_attempts_; }
  /// added_at() / started_at(): when the job was added and when this attempt began.
  [[nodiscard]] TimePoint added_at() const noexcept { return added_at_; }
  [[nodiscard]] TimePoint started_at() const noexcept { return started_at_; }
  /// last_error() is the previous attempt's failure, empty on a first attempt.
  [[nodiscard]] std::string_view last_error() const noexcept { return last_error_; }

 private:
  friend class detail::QueueImpl<T>;
  Job() = default;
  JobId id_ = 0;
  std::string_view name_;
  std::string_view queue_;
  const T* data_ = nullptr;
  std::uint32_t attempts_made_ = 0;
  std::uint32_t max_attempts_ = 0;
  TimePoint added_at_{};
  TimePoint started_at_{};
  std::string_view last_error_;
};

}  // namespace rail
