// Fates: what each delivery of a soak job does, fixed by a seeded plan the job carries in its
// payload, so that a delivery's fault does not depend on which thread runs it or when.
#pragma once

#include <cstdint>

#include "rail/rail.hpp"
#include "soak/soak.hpp"

namespace rail::soak {

struct Payload {
  std::uint64_t plan = 0;  // seeds the fate of every delivery, its priority and its tenant
};

enum class Fate { ok, fail, throw_, permanent, discard, hang, pushback };

/// unit(plan, delivery): a number in [0, 1) fixed by the job's plan and the delivery.
inline double unit(std::uint64_t plan, std::uint32_t delivery) {
  SplitMix64 r(plan ^ (std::uint64_t{delivery} * 0x9E3779B97F4A7C15ULL));
  return static_cast<double>(r.next() >> 11) / 9007199254740992.0;
}

/// fate(c, plan, delivery): the fault of a delivery, at the rates c gives.
inline Fate fate(const Config& c, std::uint64_t plan, std::uint32_t delivery) {
  double x = unit(plan, delivery);
  if ((x -= c.hang) < 0) return Fate::hang;
  if ((x -= c.permanent) < 0) return Fate::permanent;
  if ((x -= c.discard) < 0) return Fate::discard;
  if ((x -= c.throw_) < 0) return Fate::throw_;
  if ((x -= c.fail) < 0) return Fate::fail;
  if (c.downstream && (x -= c.pushback) < 0) return Fate::pushback;
  return Fate::ok;
}

/// async_outcome(f): the fate of an async call as the outcome its completion applies (a throw
/// is the caller's to apply).
inline Outcome async_outcome(Fate f) {
  switch (f) {
    case Fate::fail:
      return Outcome::retry("flaky downstream, async");
    case Fate::permanent:
      return Outcome::fail("permanent failure, async");
    case Fate::discard:
      return Outcome::discard("not worth doing any more");
    case Fate::pushback:
      return Outcome::pushback(std::chrono::milliseconds(1),
                               "429 from the soak's downstream, async");
    default:  // ok, or a hang whose delivery was fenced: the engine must ignore it
      return Outcome::done();
  }
}

}  // namespace rail::soak
