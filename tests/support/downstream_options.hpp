// calling(name): queue options whose jobs call downstream `name` (QueueOptions::downstream),
// the rest defaulted.
#pragma once

#include <string>

#include "rail/options.hpp"

namespace rail::test {

inline QueueOptions calling(const std::string& name) {
  QueueOptions o;
  o.downstream = name;
  return o;
}

}  // namespace rail::test
