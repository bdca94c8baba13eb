// most_in_a_window(times, per): the most of `times` (clock readings, any order) that fall in
// one half-open window [s, s + per): what a rate of "at most max per `per`" bounds.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace rail::test {

inline std::size_t most_in_a_window(std::vector<std::int64_t> times, std::int64_t per) {
  std::sort(times.begin(), times.end());
  std::size_t most = 0;
  for (std::size_t lo = 0, hi = 0; hi < times.size(); ++hi) {
    while (times[hi] - times[lo] >= per)
      ++lo;
    most = std::max(most, hi - lo + 1);
  }
  return most;
}

}  // namespace rail::test
