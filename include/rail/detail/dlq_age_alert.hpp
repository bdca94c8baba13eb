// DlqAgeAlert: DlqOptions::alert_age for one DLQ: the alert "the oldest entry has waited
// alert_age", with hysteresis: it fires once when the oldest entry reaches that age, and re-arms
// only once the DLQ is empty or its oldest entry is younger than that (a redrive, a purge, a
// removal or the retention took the old ones), so a DLQ that stays old alerts once, not at every
// check.
//
// Timing: after every change of its entries the store tells the queue when the next check is
// due, and the queue's sweep checks then (DeadLetterStore::sweep_alerts): while armed, when the
// oldest entry reaches the age, so the alert fires then (within a timer tick; under a
// ManualClock at the advance that reaches it), whether or not anyone reads the DLQ; once fired,
// every alert_age while entries remain, to re-arm after a change no check saw (the retention
// evicting entries during a read).
// Threading: the store's lock guards every call.
#pragma once

#include <cstdint>
#include <optional>

#include "rail/clock.hpp"
#include "rail/detail/deadline.hpp"

namespace rail::detail {

class DlqAgeAlert {
 public:
  explicit DlqAgeAlert(std::optional<Duration> age) noexcept
      : age_ns_(age ? age->count() : kNever) {}

  [[nodiscard]] bool enabled() const noexcept { return !is_never(age_ns_); }

  /// changed(oldest, now): the entries changed; oldest is the oldest entry's filing time
  /// (nullopt: empty). Re-arms a fired alert the change made young again; returns when the next
  /// check is due (kNever: none).
  std::int64_t changed(std::optional<std::int64_t> oldest, std::int64_t now) noexcept {
    if (!enabled()) return kNever;
    if (!oldest || now - *oldest < age_ns_) armed_ = true;
    return next(oldest, now);
  }
  /// check(oldest, now): true once, when an armed alert's oldest entry has reached the age (the
  /// caller fires it); else false. *next: when the next check is due.
  bool check(std::optional<std::int64_t> oldest, std::int64_t now, std::int64_t* next) noexcept {
    changed(oldest, now);
    const bool fire = armed_ && oldest && now - *oldest >= age_ns_;
    if (fire) armed_ = false;
    *next = this->next(oldest, now);
    return fire;
  }

 private:
  [[nodiscard]] std::int64_t next(std::optional<std::int64_t> oldest,
                                  std::int64_t now) const noexcept {
    if (!oldest) return kNever;
    return saturating_add(armed_ ? *oldest : now, Duration{age_ns_});
  }

  std::int64_t age_ns_;
  bool armed_ = true;
};

}  // namespace rail::detail
