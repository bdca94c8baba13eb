// calling(name): queue options whose jobs call downstream `name` (QueueOptions::downstream),
// the rest defaulted. limit_or_none(n): a fuzzed concurrency, where 0 draws "no limit".
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "rail/options.hpp"

namespace rail::test {

inline QueueOptions calling(const std::string& name) {
  QueueOptions o;
  o.downstream = name;
  return o;
}

/// limit_or_none(n): a downstream concurrency of n, or unset (unlimited) for n == 0, so that a
/// fuzzer's draw of 0..k covers the unlimited gate too.
inline std::optional<std::uint32_t> limit_or_none(std::uint32_t n) {
  return n == 0 ? std::nullopt : std::optional<std::uint32_t>(n);
}

}  // namespace rail::test
