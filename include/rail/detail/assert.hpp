// RAIL_INVARIANT(cond, msg): an internal invariant. Always checked (a broken one means a job could
// be lost or run twice, which is worse than stopping): prints where and why, then aborts.
#pragma once

namespace rail::detail {
[[noreturn]] void invariant_failed(const char* file, int line, const char* cond,
                                   const char* message) noexcept;
}  // namespace rail::detail

#define RAIL_INVARIANT(cond, message)                                         \
  do {                                                                        \
    if (!(cond)) [[unlikely]]                                                 \
      ::rail::detail::invariant_failed(__FILE__, __LINE__, #cond, (message)); \
  } while (false)
