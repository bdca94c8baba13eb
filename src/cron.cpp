// Cron expressions: parsing with messages a user can act on, and the next due minute.
//
// Each field becomes a bit set of the values it selects, so matching a minute is five bit tests.
// next_after() does not walk minute by minute (a yearly schedule would cost half a million
// steps): it walks the calendar from the largest unit down, and whenever a unit cannot match it
// jumps to the next value that can (the next chosen month, the next day, the next chosen hour)
// and restarts the smaller units at their first value. The work is a few steps per month
// searched, and a search is at most CronExpr::kSearchYears long because parse() has already
// rejected expressions that never match.
//
// Errors follow src/options.cpp: every message names the expression, the field and the token
// that is wrong, and says what was expected.
#include "rail/cron.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <span>
#include <string>

#include "rail/error.hpp"

namespace rail {
namespace {

namespace chr = std::chrono;
using Minutes = chr::sys_time<chr::minutes>;

constexpr std::array<std::string_view, 12> kMonthNames = {"jan", "feb", "mar", "apr", "may", "jun",
                                                          "jul", "aug", "sep", "oct", "nov", "dec"};
constexpr std::array<std::string_view, 7> kWeekdayNames = {"sun", "mon", "tue", "wed",
                                                           "thu", "fri", "sat"};

/// FieldSpec: what one of the five fields accepts.
struct FieldSpec {
  std::string_view name;                    // as messages call it: "day of month"
  int lo;                                   // smallest value accepted
  int hi;                                   // largest value accepted (7 for day of week)
  std::span<const std::string_view> names;  // names for lo, lo+1, ... (empty: numbers only)
  std::string_view expected;                // what a value must be, for messages
};

constexpr FieldSpec kMinute{"minute", 0, 59, {}, "0-59"};
constexpr FieldSpec kHour{"hour", 0, 23, {}, "0-23"};
constexpr FieldSpec kDayOfMonth{"day of month", 1, 31, {}, "1-31"};
constexpr FieldSpec kMonth{"month", 1, 12, kMonthNames, "1-12 or a name jan-dec"};
constexpr FieldSpec kDayOfWeek{"day of week", 0, 7, kWeekdayNames,
                               "0-7 (0 and 7 are Sunday) or a name sun-sat"};

constexpr std::uint32_t kAllDays = 0xFFFF'FFFEu;  // bits 1-31
constexpr std::uint8_t kAllWeekdays = 0x7F;       // bits 0-6

constexpr bool is_blank(char c) noexcept {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

constexpr char lower(char c) noexcept {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

bool equals_ignoring_case(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}

std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && is_blank(s.front()))
    s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back()))
    s.remove_suffix(1);
  return s;
}

std::string quoted(std::string_view s) {
  // Appended, not "'" + std::string(s): GCC 12 warns (-Wrestrict) about that form, wrongly.
  std::string q;
  q.reserve(s.size() + 2);
  q.append(1, '\'').append(s).append(1, '\'');
  return q;
}

[[noreturn]] void fail(std::string_view expr, const std::string& problem,
                       std::string_view expected) {
  throw Error(ErrorCode::invalid_option,
              "cron " + quoted(expr) + ": " + problem + "; expected " + std::string(expected));
}

/// FieldParser turns one field's text into the bit set of the values it selects.
class FieldParser {
 public:
  FieldParser(std::string_view expr, const FieldSpec& spec, std::string_view field)
      : expr_(expr), spec_(spec), field_(field) {}

  /// bits() parses the whole field: a comma list of items.
  std::uint64_t bits() const {
    std::uint64_t bits = 0;
    std::string_view rest = field_;
    while (true) {
      const std::size_t comma = rest.find(',');
      const std::string_view item = rest.substr(0, comma);
      if (item.empty())
        fail_field("has an empty list item",
                   "values or ranges separated by single commas, e.g. 1,15 or 1-5,10");
      bits |= item_bits(item);
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
    // Day of week 7 is Sunday, like 0: keep one bit per day.
    if (spec_.hi == 7 && (bits >> 7 & 1u)) bits = (bits & ~(std::uint64_t{1} << 7)) | 1u;
    return bits;
  }

 private:
  /// item_bits(item) parses `*`, `n`, `a-b`, each optionally followed by `/step`.
  std::uint64_t item_bits(std::string_view item) const {
    std::string_view base = item;
    int step = 1;
    if (const std::size_t slash = item.find('/'); slash != std::string_view::npos) {
      base = item.substr(0, slash);
      step = parse_step(item, item.substr(slash + 1));
      if (base.empty()) fail_item(item, "has no start before '/'", "*/step, a-b/step or a/step");
    }
    int first = spec_.lo;
    int last = spec_.hi;
    if (base == "*") {
      // the whole range
    } else if (base.find('*') != std::string_view::npos) {
      fail_item(item, "mixes '*' with other text", "'*' alone, a value or a range such as 1-5");
    } else if (const std::size_t dash = base.find('-'); dash != std::string_view::npos) {
      const std::string_view from = base.substr(0, dash);
      const std::string_view to = base.substr(dash + 1);
      if (from.empty()) fail_item(item, "has no start before '-'", "a range low-high");
      if (to.empty()) fail_item(item, "has no end after '-'", "a range low-high");
      if (to.find('-') != std::string_view::npos)
        fail_item(item, "has more than one '-'", "a range low-high");
      first = value(from);
      last = value(to);
      if (first > last)
        fail_item(item,
                  "is a range that runs backwards (" + std::to_string(first) + " > " +
                      std::to_string(last) + ")",
                  spec_.hi == 7 ? "low-high with low <= high (Sunday ends a range as 7, e.g. 5-7)"
                                : "low-high with low <= high");
    } else {
      first = value(base);
      // `a/step` is `a-max/step`; a lone value is just itself.
      last = item.size() != base.size() ? spec_.hi : first;
    }
    std::uint64_t bits = 0;
    for (int v = first; v <= last; v += step)
      bits |= std::uint64_t{1} << v;
    return bits;
  }

  /// parse_step(item, text): the step after '/', 1 .. the number of values the field has.
  int parse_step(std::string_view item, std::string_view text) const {
    const int span = spec_.hi - spec_.lo + 1;
    const std::string expected = "a step from 1 to " + std::to_string(span);
    if (text.empty()) fail_item(item, "has no step after '/'", expected);
    const std::optional<int> step = number(text);
    if (!step) fail_item(item, "has step " + quoted(text) + ", which is not a number", expected);
    if (*step == 0) fail_item(item, "has step 0", expected);
    if (*step > span) fail_item(item, "has step " + std::string(text) + ", too large", expected);
    return *step;
  }

  /// value(token): a number or (month, day of week) a name, within the field's range.
  int value(std::string_view token) const {
    if (const std::optional<int> n = number(token)) {
      if (*n < spec_.lo || *n > spec_.hi) fail_item(token, "is out of range", spec_.expected);
      return *n;
    }
    for (std::size_t i = 0; i < spec_.names.size(); ++i)
      if (equals_ignoring_case(token, spec_.names[i])) return spec_.lo + static_cast<int>(i);
    fail_item(token, spec_.names.empty() ? "is not a number" : "is not a number or a name",
              spec_.expected);
  }

  /// number(text): digits only; nullopt otherwise. Saturates so "99999999999" stays out of range.
  static std::optional<int> number(std::string_view text) noexcept {
    if (text.empty()) return std::nullopt;
    int n = 0;
    for (const char c : text) {
      if (c < '0' || c > '9') return std::nullopt;
      n = std::min(n * 10 + (c - '0'), 1'000'000);
    }
    return n;
  }

  /// fail_field: the whole field is wrong.
  [[noreturn]] void fail_field(const std::string& problem, std::string_view expected) const {
    fail(expr_, std::string(spec_.name) + " field " + quoted(field_) + " " + problem, expected);
  }

  /// fail_item: one token of the field is wrong; the message quotes it unless it is the field.
  [[noreturn]] void fail_item(std::string_view token, const std::string& problem,
                              std::string_view expected) const {
    if (token == field_) fail_field(problem, expected);
    fail(
        expr_,
        std::string(spec_.name) + " field " + quoted(field_) + ": " + quoted(token) + " " + problem,
        expected);
  }

  std::string_view expr_;
  const FieldSpec& spec_;
  std::string_view field_;
};

/// Macro: a crontab(5) `@name` and the five fields it stands for.
struct Macro {
  std::string_view name;
  std::string_view fields;
};

constexpr std::array<Macro, 7> kMacros = {{{"@yearly", "0 0 1 1 *"},
                                           {"@annually", "0 0 1 1 *"},
                                           {"@monthly", "0 0 1 * *"},
                                           {"@weekly", "0 0 * * 0"},
                                           {"@daily", "0 0 * * *"},
                                           {"@midnight", "0 0 * * *"},
                                           {"@hourly", "0 * * * *"}}};

constexpr std::string_view kMacroList =
    "@yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly";

/// first_set(bits, from): the smallest value >= from whose bit is set, or -1.
int first_set(std::uint64_t bits, int from) noexcept {
  if (from >= 64) return -1;
  const std::uint64_t rest = bits >> from;
  return rest == 0 ? -1 : from + std::countr_zero(rest);
}

/// days_in(y, m): the length of month m of year y (Gregorian: 2000 is leap, 2100 is not).
unsigned days_in(int y, unsigned m) noexcept {
  return static_cast<unsigned>((chr::year{y} / chr::month{m} / chr::last).day());
}

}  // namespace

CronExpr CronExpr::parse(std::string_view text) {
  const std::string_view trimmed = trim(text);
  std::string_view fields_text = trimmed;
  if (!trimmed.empty() && trimmed.front() == '@') {
    std::size_t end = 0;
    while (end < trimmed.size() && !is_blank(trimmed[end]))
      ++end;
    const std::string_view name = trimmed.substr(0, end);
    if (equals_ignoring_case(name, "@reboot"))
      fail(trimmed, "@reboot is not supported: a rail schedule has no boot to run at",
           "a time schedule: five fields or " + std::string(kMacroList));
    fields_text = {};
    for (const Macro& m : kMacros)
      if (equals_ignoring_case(name, m.name)) fields_text = m.fields;
    if (fields_text.empty())
      fail(trimmed, "unknown macro " + quoted(name), std::string(kMacroList));
    if (end != trimmed.size())
      fail(trimmed,
           "extra text after " + std::string(name) + " (" + quoted(trim(trimmed.substr(end))) + ")",
           "the macro alone");
  }

  std::array<std::string_view, 5> fields;
  std::size_t count = 0;
  for (std::size_t i = 0; i < fields_text.size();) {
    if (is_blank(fields_text[i])) {
      ++i;
      continue;
    }
    std::size_t end = i;
    while (end < fields_text.size() && !is_blank(fields_text[end]))
      ++end;
    if (count < fields.size()) fields[count] = fields_text.substr(i, end - i);
    ++count;
    i = end;
  }
  if (count != fields.size())
    fail(trimmed, "found " + std::to_string(count) + (count == 1 ? " field" : " fields"),
         "5 fields (minute hour day-of-month month day-of-week) or a macro such as @daily");

  CronExpr e;
  e.text_ = std::string(trimmed);
  e.minutes_ = FieldParser(trimmed, kMinute, fields[0]).bits();
  e.hours_ = static_cast<std::uint32_t>(FieldParser(trimmed, kHour, fields[1]).bits());
  e.days_ = static_cast<std::uint32_t>(FieldParser(trimmed, kDayOfMonth, fields[2]).bits());
  e.months_ = static_cast<std::uint16_t>(FieldParser(trimmed, kMonth, fields[3]).bits());
  e.weekdays_ = static_cast<std::uint8_t>(FieldParser(trimmed, kDayOfWeek, fields[4]).bits());

  // crontab(5): a day field is "restricted" unless its text starts with '*'; with both
  // restricted, either may match.
  e.day_or_ = fields[2].front() != '*' && fields[4].front() != '*';
  // Either one selecting every day makes every day match: store that as "both all, AND", so
  // equal schedules of days compare equal.
  if (e.day_or_ && (e.days_ == kAllDays || e.weekdays_ == kAllWeekdays)) {
    e.days_ = kAllDays;
    e.weekdays_ = kAllWeekdays;
    e.day_or_ = false;
  }

  // With OR every chosen weekday matches, and every weekday occurs in every month. With AND, a
  // chosen (month, day) that exists falls on every weekday within a 400-year cycle (February 29th
  // included), so the expression matches exactly when some chosen month has a chosen day.
  if (!e.day_or_) {
    bool some_day_exists = false;
    for (unsigned m = 1; m <= 12; ++m) {
      if (!(e.months_ >> m & 1u)) continue;
      const unsigned longest = m == 2 ? 29 : days_in(2001, m);  // any year; February aside
      const std::uint32_t exists =
          static_cast<std::uint32_t>((std::uint64_t{1} << (longest + 1)) - 2);
      if (e.days_ & exists) some_day_exists = true;
    }
    // A day of week such as "*/2" counts as unrestricted (it starts with '*'), so it cannot
    // rescue the missing days: say so, since it looks as if it should.
    const std::string star_note = fields[2].front() != '*' && fields[4] != "*"
                                      ? " (day of week field " + quoted(fields[4]) +
                                            " starts with '*', so a day must match both day fields)"
                                      : "";
    if (!some_day_exists)
      fail(trimmed,
           "never matches: no month in month field " + quoted(fields[3]) +
               " has a day in day of month field " + quoted(fields[2]) + star_note,
           "a day that a chosen month has (February has at most 29 days; April, June, September "
           "and November have 30)");
  }
  return e;
}

namespace {

/// Civil: a minute of the UTC calendar, as the search walks it.
struct Civil {
  int year;
  unsigned month;  // 1-12
  unsigned day;    // 1-31
  int hour;        // 0-23
  int minute;      // 0-59
};

}  // namespace

std::optional<WallTime> CronExpr::next_after(WallTime t) const {
  // Whole minutes from here on: the minute type has room for any WallTime plus a day.
  const Minutes start = chr::floor<chr::minutes>(t) + chr::minutes{1};
  const chr::sys_days start_day = chr::floor<chr::days>(start);
  const chr::year_month_day ymd{start_day};
  const auto since_midnight = chr::duration_cast<chr::minutes>(start - start_day).count();
  Civil c{static_cast<int>(ymd.year()), static_cast<unsigned>(ymd.month()),
          static_cast<unsigned>(ymd.day()), static_cast<int>(since_midnight / 60),
          static_cast<int>(since_midnight % 60)};
  const int last_year = c.year + kSearchYears;

  auto next_month = [&c] {
    if (++c.month > 12) {
      c.month = 1;
      ++c.year;
    }
    c.day = 1;
    c.hour = 0;
    c.minute = 0;
  };
  auto next_day = [&c] {
    ++c.day;  // may pass the month's end: the day step below moves on to the next month
    c.hour = 0;
    c.minute = 0;
  };

  while (c.year <= last_year) {
    if (!(months_ >> c.month & 1u)) {
      const int m = first_set(months_, static_cast<int>(c.month) + 1);
      if (m < 0) {
        ++c.year;
        c.month = static_cast<unsigned>(first_set(months_, 1));
      } else {
        c.month = static_cast<unsigned>(m);
      }
      c.day = 1;
      c.hour = 0;
      c.minute = 0;
      continue;
    }
    const unsigned month_length = days_in(c.year, c.month);
    while (c.day <= month_length && !day_matches(c.year, c.month, c.day))
      next_day();
    if (c.day > month_length) {  // "31" in a 30-day month is skipped, never clamped
      next_month();
      continue;
    }
    const int hour = first_set(hours_, c.hour);
    if (hour < 0) {
      next_day();
      continue;
    }
    if (hour != c.hour) {
      c.hour = hour;
      c.minute = 0;
    }
    const int minute = first_set(minutes_, c.minute);
    if (minute < 0) {
      c.minute = 0;
      if (++c.hour == 24) next_day();
      continue;
    }
    const Minutes found = chr::sys_days{chr::year{c.year} / chr::month{c.month} / chr::day{c.day}} +
                          chr::hours{c.hour} + chr::minutes{minute};
    if (found > chr::floor<chr::minutes>(WallTime::max())) return std::nullopt;
    return chr::time_point_cast<Duration>(found);
  }
  return std::nullopt;  // unreachable for a parsed expression: parse() rejects "never"
}

bool CronExpr::matches(WallTime t) const {
  const Minutes minute = chr::floor<chr::minutes>(t);
  const chr::sys_days day = chr::floor<chr::days>(minute);
  const chr::year_month_day ymd{day};
  const auto since_midnight = chr::duration_cast<chr::minutes>(minute - day).count();
  return (minutes_ >> (since_midnight % 60) & 1u) && (hours_ >> (since_midnight / 60) & 1u) &&
         (months_ >> static_cast<unsigned>(ymd.month()) & 1u) &&
         day_matches(static_cast<int>(ymd.year()), static_cast<unsigned>(ymd.month()),
                     static_cast<unsigned>(ymd.day()));
}

bool CronExpr::day_matches(int year, unsigned month, unsigned day) const noexcept {
  const bool dom = days_ >> day & 1u;
  const unsigned weekday =
      chr::weekday{chr::sys_days{chr::year{year} / chr::month{month} / chr::day{day}}}.c_encoding();
  const bool dow = weekdays_ >> weekday & 1u;
  return day_or_ ? (dom || dow) : (dom && dow);
}

}  // namespace rail
