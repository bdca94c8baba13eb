// CronExpr: a five-field cron expression as crontab(5) defines it (Vixie cron, as Debian's cron
// and cronie read it), so a schedule a user already wrote for cron means the same thing to rail.
// It is evaluated in UTC: rail carries no time zone database, and UTC has no daylight-saving
// gaps or repeats, so "the next matching minute" is always unique and always exists.
//
// Syntax (fields separated by spaces or tabs; leading and trailing blanks ignored):
//   minute 0-59   hour 0-23   day of month 1-31   month 1-12 or jan-dec   day of week 0-7 or
//   sun-sat (0 and 7 are both Sunday). Names are three letters, case-insensitive.
//   Each field is a comma list of items; an item is `*`, `n`, or `a-b`, optionally followed by
//   `/step` (every step-th value from the start). Names may appear in ranges and lists
//   (`mon-fri`, `jan,jul`), as cronie allows.
//   Extension (cronie and most schedulers accept it): `a/step` means `a-max/step`, e.g. minute
//   `5/15` is 5,20,35,50.
//   Macros: @yearly (= @annually), @monthly, @weekly, @daily (= @midnight), @hourly, the
//   five-field expressions crontab(5) gives them. @reboot is rejected: a rail schedule has no
//   boot to run at.
//
// The day rule is crontab(5)'s, including its quirk: a field counts as restricted unless its text
// starts with `*`. When both day of month and day of week are restricted, a day matches when
// EITHER matches ("30 4 1,15 * 5" runs on the 1st, the 15th and every Friday); otherwise both must
// match, which makes the restricted one (if any) decide. So "0 0 */2 * mon" means odd days that
// are Mondays, because "*/2" starts with `*`.
//
// A day of month that a month lacks is skipped, never clamped: "0 0 31 * *" runs in the seven
// months with a 31st. parse() rejects an expression that can never match ("0 0 30 2 *").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "rail/clock.hpp"

namespace rail {

/// CronExpr is a parsed five-field cron expression (crontab(5)), evaluated in UTC. A value type:
/// cheap to copy, immutable after parse(), safe to share between threads.
class CronExpr {
 public:
  /// kSearchYears bounds next_after()'s search. The Gregorian calendar repeats every 400 years,
  /// so a search this long is exact: a shorter one (28 years) misses e.g. "0 0 29 2 */7" (a
  /// February 29th that is a Sunday), which after 2088 next occurs in 2128 because 2100 is not
  /// a leap year.
  static constexpr int kSearchYears = 400;

  /// parse(text) reads a five-field expression or a macro. It throws
  /// Error(ErrorCode::invalid_option, msg) for bad text; msg names the expression, the field, the
  /// bad token and what is expected, e.g.
  ///   "cron '61 * * * *': minute field '61' is out of range; expected 0-59".
  /// An expression no date can satisfy ("0 0 30 2 *") is rejected with a message saying it
  /// never matches.
  static CronExpr parse(std::string_view text);

  /// next_after(t) is the first whole minute strictly after t whose fields match, or nullopt when
  /// that minute lies past the last one WallTime can represent (year 2262).
  [[nodiscard]] std::optional<WallTime> next_after(WallTime t) const;

  /// matches(t) says whether the minute containing t (seconds ignored) matches every field.
  [[nodiscard]] bool matches(WallTime t) const;

  /// text() is the expression as given to parse(), without leading and trailing blanks.
  [[nodiscard]] const std::string& text() const noexcept { return text_; }

  /// Equal when the fields select the same values after expansion (names, ranges, steps, 0 and 7
  /// for Sunday) and the day rule combines them the same way; the texts may differ, e.g.
  /// "0 0 * * *" == "0 0 1-31 * 0-6" == "@daily".
  friend bool operator==(const CronExpr& a, const CronExpr& b) noexcept {
    return a.minutes_ == b.minutes_ && a.hours_ == b.hours_ && a.days_ == b.days_ &&
           a.months_ == b.months_ && a.weekdays_ == b.weekdays_ && a.day_or_ == b.day_or_;
  }

 private:
  CronExpr() = default;
  /// day_matches: the day rule (day of month and day of week, OR or AND) for one date.
  [[nodiscard]] bool day_matches(int year, unsigned month, unsigned day) const noexcept;

  std::string text_;
  std::uint64_t minutes_ = 0;  // bit m: minute m (0-59)
  std::uint32_t hours_ = 0;    // bit h: hour h (0-23)
  std::uint32_t days_ = 0;     // bit d: day of month d (1-31)
  std::uint16_t months_ = 0;   // bit m: month m (1-12)
  std::uint8_t weekdays_ = 0;  // bit w: weekday w (0 = Sunday .. 6; 7 is stored as 0)
  bool day_or_ = false;        // both day fields restricted: a day matches when either does
};

}  // namespace rail
