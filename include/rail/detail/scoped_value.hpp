// ScopedValue: sets a variable for a scope and puts its old value back however the scope is left.
//
// The engine marks what a thread is doing in thread_local variables (the queue it delivers for,
// the wheel it owns, a sweep in progress) so that a call made from inside, by a handler, an
// observer or a payload's destructor, can refuse what would wait for the caller itself. A mark
// left set by an exception would refuse that thread's calls forever; restoring the old value
// rather than clearing it keeps an outer mark right when scopes nest.
#pragma once

#include <utility>

namespace rail::detail {

template <class T>
class [[nodiscard]] ScopedValue {
 public:
  ScopedValue(T& at, T value) noexcept : at_(at), old_(std::exchange(at, std::move(value))) {}
  ~ScopedValue() { at_ = std::move(old_); }
  ScopedValue(const ScopedValue&) = delete;
  ScopedValue& operator=(const ScopedValue&) = delete;

  /// old(): the value the scope replaced.
  [[nodiscard]] const T& old() const noexcept { return old_; }

 private:
  T& at_;
  T old_;
};

}  // namespace rail::detail
