// blank<T>(): a value-initialised T to copy from, for the large aggregates the hot path builds per
// job (Event, JobFields). GCC at -O2 with generic tuning zeroes a value-initialised aggregate of
// 160 bytes with `rep stos`, whose start-up costs tens of cycles per event and per delivery
// (perf annotate: half of FlowParts::event's samples, a fifth of JobFlow::deliver's); a copy of
// a constant-initialised blank compiles to vector moves instead.
#pragma once

#include <type_traits>

namespace rail::detail {

template <class T>
[[nodiscard]] const T& blank() noexcept {
  static_assert(std::is_trivially_copyable_v<T>, "blank<T>: a copy must be a plain memory copy");
  static const T value{};  // constant-initialised: no guard on the hot path
  return value;
}

}  // namespace rail::detail
