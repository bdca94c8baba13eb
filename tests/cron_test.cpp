// CronExpr: crontab(5)'s own examples give the expected schedules, the calendar's edges (month
// ends, leap days, 2000 and 2100, year ends, the ends of WallTime's range) pin the search, and a
// property test checks next_after() against a minute-by-minute search that shares no code with
// it. Expected times were worked out by hand and checked against Python's datetime.
#include "rail/cron.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "rail/error.hpp"

namespace rail {
namespace {

namespace chr = std::chrono;

/// utc(...): a UTC wall time.
WallTime utc(int y, unsigned mo, unsigned d, int h = 0, int mi = 0, int s = 0) {
  return WallTime{chr::sys_days{chr::year{y} / chr::month{mo} / chr::day{d}} + chr::hours{h} +
                  chr::minutes{mi} + chr::seconds{s}};
}

/// show(t): "2024-05-15 00:05 Wed", so a failure reads as a calendar date.
std::string show(std::optional<WallTime> t) {
  if (!t) return "none";
  const auto day = chr::floor<chr::days>(*t);
  const chr::year_month_day ymd{day};
  const chr::hh_mm_ss hms{chr::floor<chr::seconds>(*t - day)};
  static constexpr const char* kDays[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02u-%02u %02d:%02d%s %s", static_cast<int>(ymd.year()),
                static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()),
                static_cast<int>(hms.hours().count()), static_cast<int>(hms.minutes().count()),
                hms.seconds().count() != 0 ? ":ss" : "", kDays[chr::weekday{day}.c_encoding()]);
  return buf;
}

/// upcoming(expr, from, n): the next n due times, each found from the one before.
std::vector<std::string> upcoming(std::string_view expr, WallTime from, int n) {
  const CronExpr e = CronExpr::parse(expr);
  std::vector<std::string> out;
  std::optional<WallTime> t = from;
  for (int i = 0; i < n && t; ++i) {
    t = e.next_after(*t);
    out.push_back(show(t));
  }
  return out;
}

std::string next(std::string_view expr, WallTime from) {
  return show(CronExpr::parse(expr).next_after(from));
}

using Times = std::vector<std::string>;

// Tuesday 2024-05-14 10:20:30 UTC: the start of the man page examples.
const WallTime kStart = utc(2024, 5, 14, 10, 20, 30);

// --- crontab(5), "EXAMPLE CRON FILE" and the day-rule note ------------------------------------

TEST(CronManPage, FiveAfterMidnightEveryDay) {
  EXPECT_EQ(upcoming("5 0 * * *", kStart, 3),
            (Times{"2024-05-15 00:05 Wed", "2024-05-16 00:05 Thu", "2024-05-17 00:05 Fri"}));
}

TEST(CronManPage, TwoFifteenPmOnTheFirstOfEveryMonth) {
  EXPECT_EQ(upcoming("15 14 1 * *", kStart, 3),
            (Times{"2024-06-01 14:15 Sat", "2024-07-01 14:15 Mon", "2024-08-01 14:15 Thu"}));
}

TEST(CronManPage, TenPmOnWeekdaysSkipsTheWeekend) {
  EXPECT_EQ(upcoming("0 22 * * 1-5", kStart, 4),
            (Times{"2024-05-14 22:00 Tue", "2024-05-15 22:00 Wed", "2024-05-16 22:00 Thu",
                   "2024-05-17 22:00 Fri"}));
  EXPECT_EQ(next("0 22 * * 1-5", utc(2024, 5, 17, 22, 0)), "2024-05-20 22:00 Mon");
}

TEST(CronManPage, TwentyThreeMinutesAfterEveryEvenHour) {
  EXPECT_EQ(upcoming("23 0-23/2 * * *", kStart, 3),
            (Times{"2024-05-14 10:23 Tue", "2024-05-14 12:23 Tue", "2024-05-14 14:23 Tue"}));
  // After 22:23 the next even hour is midnight of the next day.
  EXPECT_EQ(next("23 0-23/2 * * *", utc(2024, 5, 14, 22, 23)), "2024-05-15 00:23 Wed");
}

TEST(CronManPage, FiveAfterFourEverySundayByName) {
  EXPECT_EQ(upcoming("5 4 * * sun", kStart, 3),
            (Times{"2024-05-19 04:05 Sun", "2024-05-26 04:05 Sun", "2024-06-02 04:05 Sun"}));
}

TEST(CronManPage, TwentyTwoThirtyThreeEveryDayTheWaxTheFloorLine) {
  // The "every 9th day" logic of that line is in its shell command; cron runs it daily.
  EXPECT_EQ(upcoming("33 22 * * *", kStart, 2),
            (Times{"2024-05-14 22:33 Tue", "2024-05-15 22:33 Wed"}));
}

TEST(CronManPage, NoteFirstAndFifteenthPlusEveryFriday) {
  EXPECT_EQ(upcoming("30 4 1,15 * 5", kStart, 5),
            (Times{"2024-05-15 04:30 Wed", "2024-05-17 04:30 Fri", "2024-05-24 04:30 Fri",
                   "2024-05-31 04:30 Fri", "2024-06-01 04:30 Sat"}));
}

// --- the search: strictly after, month ends, leap days, year ends ----------------------------

TEST(CronNextAfter, IsStrictlyAfterAndReturnsWholeMinutes) {
  const CronExpr e = CronExpr::parse("30 12 * * *");
  EXPECT_EQ(show(e.next_after(utc(2024, 5, 14, 12, 30))), "2024-05-15 12:30 Wed");
  EXPECT_EQ(show(e.next_after(utc(2024, 5, 14, 12, 30, 59))), "2024-05-15 12:30 Wed");
  EXPECT_EQ(show(e.next_after(utc(2024, 5, 14, 12, 29, 59))), "2024-05-14 12:30 Tue");
  EXPECT_EQ(e.next_after(utc(2024, 5, 14, 12, 30) - chr::nanoseconds{1}), utc(2024, 5, 14, 12, 30));
  EXPECT_EQ(show(CronExpr::parse("* * * * *").next_after(utc(2024, 5, 14, 12, 30, 1))),
            "2024-05-14 12:31 Tue");
}

TEST(CronNextAfter, ThirtyFirstSkipsMonthsWithoutOneInsteadOfClamping) {
  EXPECT_EQ(next("0 0 31 * *", utc(2025, 1, 31)), "2025-03-31 00:00 Mon");
  EXPECT_EQ(upcoming("0 0 31 * *", utc(2025, 3, 31), 6),
            (Times{"2025-05-31 00:00 Sat", "2025-07-31 00:00 Thu", "2025-08-31 00:00 Sun",
                   "2025-10-31 00:00 Fri", "2025-12-31 00:00 Wed", "2026-01-31 00:00 Sat"}));
  EXPECT_EQ(next("0 0 30 * *", utc(2025, 1, 30)), "2025-03-30 00:00 Sun");
}

TEST(CronNextAfter, FebruaryTwentyNinthWaitsForALeapYear) {
  EXPECT_EQ(next("0 0 29 2 *", utc(2025, 1, 1)), "2028-02-29 00:00 Tue");
  EXPECT_EQ(next("0 0 29 2 *", utc(1999, 3, 1)), "2000-02-29 00:00 Tue");  // 2000 is leap
  EXPECT_EQ(next("0 0 29 2 *", utc(2096, 3, 1)), "2104-02-29 00:00 Fri");  // 2100 is not
}

TEST(CronNextAfter, LastMinuteOfFebruaryRollsIntoMarchOrTheLeapDay) {
  EXPECT_EQ(upcoming("59 23 * * *", utc(2100, 2, 28), 2),
            (Times{"2100-02-28 23:59 Sun", "2100-03-01 23:59 Mon"}));
  EXPECT_EQ(upcoming("59 23 * * *", utc(2000, 2, 28), 2),
            (Times{"2000-02-28 23:59 Mon", "2000-02-29 23:59 Tue"}));
  EXPECT_EQ(upcoming("0 12 28-31 2 *", utc(2023, 2, 28, 12), 2),
            (Times{"2024-02-28 12:00 Wed", "2024-02-29 12:00 Thu"}));
}

TEST(CronNextAfter, RollsOverTheYearEnd) {
  EXPECT_EQ(next("0 0 1 1 *", utc(2024, 12, 31, 23, 59, 59)), "2025-01-01 00:00 Wed");
  EXPECT_EQ(next("59 23 31 12 *", utc(2024, 12, 31, 23, 59)), "2025-12-31 23:59 Wed");
  EXPECT_EQ(upcoming("*/15 * * * *", utc(2024, 12, 31, 23, 40), 2),
            (Times{"2024-12-31 23:45 Tue", "2025-01-01 00:00 Wed"}));
  EXPECT_EQ(next("0 0 * * *", utc(2024, 12, 31)), "2025-01-01 00:00 Wed");
}

TEST(CronNextAfter, FindsMatchesMoreThanTwentyEightYearsApart) {
  // "*/7" starts with '*', so the day rule is AND: a February 29th that is a Sunday. 2100 is not
  // a leap year, so after 2088 the next one is in 2128.
  EXPECT_EQ(next("0 0 29 2 */7", utc(2024, 1, 1)), "2032-02-29 00:00 Sun");
  EXPECT_EQ(next("0 0 29 2 */7", utc(2088, 3, 1)), "2128-02-29 00:00 Sun");
}

TEST(CronNextAfter, IsNulloptPastTheLastRepresentableTime) {
  // WallTime (int64 nanoseconds) ends on 2262-04-11.
  EXPECT_EQ(next("0 0 1 1 *", utc(2261, 6, 1)), "2262-01-01 00:00 Wed");
  EXPECT_EQ(next("0 0 1 1 *", utc(2262, 1, 2)), "none");
  EXPECT_EQ(next("* * * * *", WallTime::max()), "none");
  const WallTime near_end = WallTime::max() - chr::minutes{2};
  const auto last = CronExpr::parse("* * * * *").next_after(near_end);
  ASSERT_TRUE(last.has_value());
  EXPECT_GT(*last, near_end);
  EXPECT_LE(*last, WallTime::max());
}

TEST(CronNextAfter, WorksBeforeTheUnixEpoch) {
  EXPECT_EQ(next("0 0 1 1 *", utc(1969, 6, 1)), "1970-01-01 00:00 Thu");
  EXPECT_EQ(next("30 * * * *", utc(1969, 12, 31, 23, 45)), "1970-01-01 00:30 Thu");
  EXPECT_EQ(next("0 0 29 2 *", utc(1899, 1, 1)), "1904-02-29 00:00 Mon");  // 1900 is not leap
}

// --- the day rule --------------------------------------------------------------------------

TEST(CronDayRule, BothDayFieldsRestrictedMatchEither) {
  // Every Friday, plus the 13th (a Sunday in October 2024).
  EXPECT_EQ(upcoming("0 0 13 * fri", utc(2024, 10, 1), 4),
            (Times{"2024-10-04 00:00 Fri", "2024-10-11 00:00 Fri", "2024-10-13 00:00 Sun",
                   "2024-10-18 00:00 Fri"}));
  // The day of month never exists in February; the Mondays still match.
  EXPECT_EQ(upcoming("0 0 30 2 1", utc(2025, 1, 1), 5),
            (Times{"2025-02-03 00:00 Mon", "2025-02-10 00:00 Mon", "2025-02-17 00:00 Mon",
                   "2025-02-24 00:00 Mon", "2026-02-02 00:00 Mon"}));
}

TEST(CronDayRule, AStarDayOfWeekLeavesTheDayOfMonthToDecide) {
  EXPECT_EQ(upcoming("0 0 13 * *", utc(2024, 10, 1), 2),
            (Times{"2024-10-13 00:00 Sun", "2024-11-13 00:00 Wed"}));
}

TEST(CronDayRule, AStarDayOfMonthLeavesTheDayOfWeekToDecide) {
  EXPECT_EQ(upcoming("0 0 * * fri", utc(2024, 10, 1), 2),
            (Times{"2024-10-04 00:00 Fri", "2024-10-11 00:00 Fri"}));
}

TEST(CronDayRule, AFieldStartingWithStarCountsAsUnrestrictedEvenWithAStep) {
  // "*/2" (odd days) starts with '*': AND, odd days that are Mondays.
  EXPECT_EQ(upcoming("0 0 */2 * mon", utc(2024, 9, 1), 3),
            (Times{"2024-09-09 00:00 Mon", "2024-09-23 00:00 Mon", "2024-10-07 00:00 Mon"}));
  // The same days spelled "1-31/2" are restricted: OR, odd days or Mondays.
  EXPECT_EQ(upcoming("0 0 1-31/2 * mon", utc(2024, 9, 1), 4),
            (Times{"2024-09-02 00:00 Mon", "2024-09-03 00:00 Tue", "2024-09-05 00:00 Thu",
                   "2024-09-07 00:00 Sat"}));
  EXPECT_NE(CronExpr::parse("0 0 */2 * mon"), CronExpr::parse("0 0 1-31/2 * mon"));
}

// --- values: Sunday, names, steps, macros -----------------------------------------------------

TEST(CronValues, SundayIsBothZeroAndSeven) {
  for (const char* e : {"0 0 * * 0", "0 0 * * 7", "0 0 * * sun", "0 0 * * SUN", "0 0 * * 0,7"})
    EXPECT_EQ(next(e, kStart), "2024-05-19 00:00 Sun") << e;
  EXPECT_EQ(CronExpr::parse("0 0 * * 0"), CronExpr::parse("0 0 * * 7"));
  EXPECT_EQ(CronExpr::parse("0 0 * * */7"), CronExpr::parse("0 0 * * 0"));  // 0 and 7
  EXPECT_EQ(upcoming("0 0 * * 5-7", kStart, 4),
            (Times{"2024-05-17 00:00 Fri", "2024-05-18 00:00 Sat", "2024-05-19 00:00 Sun",
                   "2024-05-24 00:00 Fri"}));
  EXPECT_EQ(CronExpr::parse("0 0 * * fri-7"), CronExpr::parse("0 0 * * 0,5,6"));
}

TEST(CronValues, NamesAreCaseInsensitiveAndWorkInRangesAndLists) {
  EXPECT_EQ(CronExpr::parse("0 9 * * mon-fri"), CronExpr::parse("0 9 * * 1-5"));
  EXPECT_EQ(CronExpr::parse("0 9 * * MON-Fri"), CronExpr::parse("0 9 * * 1-5"));
  EXPECT_EQ(CronExpr::parse("0 0 1 jan,Jul *"), CronExpr::parse("0 0 1 1,7 *"));
  EXPECT_EQ(CronExpr::parse("0 0 1 * *"), CronExpr::parse("0 0 1 jan-DEC *"));
  EXPECT_EQ(CronExpr::parse("0 0 * * sun,mon,tue,wed,thu,fri,sat"), CronExpr::parse("0 0 * * *"));
  EXPECT_EQ(next("0 0 1 JUL *", kStart), "2024-07-01 00:00 Mon");
  EXPECT_EQ(upcoming("0 0 1 jan-dec/3 *", kStart, 3),
            (Times{"2024-07-01 00:00 Mon", "2024-10-01 00:00 Tue", "2025-01-01 00:00 Wed"}));
}

TEST(CronValues, StepsCountFromTheStartOfTheirRange) {
  EXPECT_EQ(CronExpr::parse("*/15 * * * *"), CronExpr::parse("0,15,30,45 * * * *"));
  EXPECT_EQ(CronExpr::parse("0-30/10 * * * *"), CronExpr::parse("0,10,20,30 * * * *"));
  EXPECT_EQ(CronExpr::parse("1-9/2 * * * *"), CronExpr::parse("1,3,5,7,9 * * * *"));  // man page
  EXPECT_EQ(CronExpr::parse("0 */5 * * *"), CronExpr::parse("0 0,5,10,15,20 * * *"));
  EXPECT_EQ(CronExpr::parse("0 0 */10 * *"), CronExpr::parse("0 0 1,11,21,31 * *"));
  EXPECT_EQ(CronExpr::parse("*/1 * * * *"), CronExpr::parse("* * * * *"));
  EXPECT_EQ(CronExpr::parse("*/60 * * * *"), CronExpr::parse("0 * * * *"));
  // A step that does not divide the hour restarts at :00.
  EXPECT_EQ(upcoming("*/7 * * * *", utc(2024, 5, 14, 10, 50), 2),
            (Times{"2024-05-14 10:56 Tue", "2024-05-14 11:00 Tue"}));
  EXPECT_EQ(next("0 */5 * * *", utc(2024, 5, 14, 20, 0)), "2024-05-15 00:00 Wed");
}

TEST(CronValues, ValueWithStepRunsToTheEndOfTheField) {
  // Extension: `a/n` is `a-max/n`.
  EXPECT_EQ(CronExpr::parse("5/15 * * * *"), CronExpr::parse("5-59/15 * * * *"));
  EXPECT_EQ(CronExpr::parse("5/15 * * * *"), CronExpr::parse("5,20,35,50 * * * *"));
  EXPECT_EQ(upcoming("5/20 1/6 * * 7", kStart, 4),
            (Times{"2024-05-19 01:05 Sun", "2024-05-19 01:25 Sun", "2024-05-19 01:45 Sun",
                   "2024-05-19 07:05 Sun"}));
}

TEST(CronValues, ListsMixValuesAndRanges) {
  EXPECT_EQ(CronExpr::parse("1-3,7-9 * * * *"), CronExpr::parse("1,2,3,7,8,9 * * * *"));
  EXPECT_EQ(CronExpr::parse("0-4,8-12 * * * *"), CronExpr::parse("0,1,2,3,4,8,9,10,11,12 * * * *"));
  EXPECT_EQ(CronExpr::parse("5,5,1-5 * * * *"), CronExpr::parse("1-5 * * * *"));
}

TEST(CronMacros, EachMacroIsItsFiveFieldExpression) {
  EXPECT_EQ(CronExpr::parse("@yearly"), CronExpr::parse("0 0 1 1 *"));
  EXPECT_EQ(CronExpr::parse("@annually"), CronExpr::parse("0 0 1 1 *"));
  EXPECT_EQ(CronExpr::parse("@monthly"), CronExpr::parse("0 0 1 * *"));
  EXPECT_EQ(CronExpr::parse("@weekly"), CronExpr::parse("0 0 * * 0"));
  EXPECT_EQ(CronExpr::parse("@daily"), CronExpr::parse("0 0 * * *"));
  EXPECT_EQ(CronExpr::parse("@midnight"), CronExpr::parse("0 0 * * *"));
  EXPECT_EQ(CronExpr::parse("@hourly"), CronExpr::parse("0 * * * *"));
  EXPECT_EQ(CronExpr::parse("@DAILY"), CronExpr::parse("@daily"));
}

TEST(CronMacros, MacrosScheduleLikeTheirExpansion) {
  EXPECT_EQ(next("@yearly", kStart), "2025-01-01 00:00 Wed");
  EXPECT_EQ(next("@monthly", kStart), "2024-06-01 00:00 Sat");
  EXPECT_EQ(next("@weekly", kStart), "2024-05-19 00:00 Sun");
  EXPECT_EQ(next("@daily", kStart), "2024-05-15 00:00 Wed");
  EXPECT_EQ(next("@hourly", kStart), "2024-05-14 11:00 Tue");
}

// --- text and equality -------------------------------------------------------------------------

TEST(CronText, KeepsTheExpressionTrimmedButOtherwiseAsGiven) {
  EXPECT_EQ(CronExpr::parse("  0 0 * * *\t\n").text(), "0 0 * * *");
  EXPECT_EQ(CronExpr::parse("0  0\t* * MON").text(), "0  0\t* * MON");
  EXPECT_EQ(CronExpr::parse(" @daily ").text(), "@daily");
}

TEST(CronEquality, ComparesFieldsNotText) {
  EXPECT_EQ(CronExpr::parse("0 0 * * *"), CronExpr::parse("@daily"));
  EXPECT_EQ(CronExpr::parse("0 0 * * *"), CronExpr::parse("0 0 1-31 * *"));
  // Both restricted, but one selects every day: every day matches, as with two stars.
  EXPECT_EQ(CronExpr::parse("0 0 * * *"), CronExpr::parse("0 0 1-31 * 0-6"));
  EXPECT_EQ(CronExpr::parse("0 0 * * *"), CronExpr::parse("0 0 1 * 0-7"));
  EXPECT_NE(CronExpr::parse("0 0 * * *"), CronExpr::parse("0 1 * * *"));
  EXPECT_NE(CronExpr::parse("0 0 1 * *"), CronExpr::parse("0 0 1 * 1"));
}

TEST(CronMatches, ChecksTheMinuteContainingTheTime) {
  const CronExpr e = CronExpr::parse("30 4 1,15 * 5");
  EXPECT_TRUE(e.matches(utc(2024, 5, 15, 4, 30)));
  EXPECT_TRUE(e.matches(utc(2024, 5, 15, 4, 30, 59)));
  EXPECT_TRUE(e.matches(utc(2024, 5, 17, 4, 30)));  // a Friday
  EXPECT_FALSE(e.matches(utc(2024, 5, 16, 4, 30)));
  EXPECT_FALSE(e.matches(utc(2024, 5, 15, 4, 31)));
  EXPECT_FALSE(e.matches(utc(2024, 5, 15, 5, 30)));
}

// --- bad expressions ----------------------------------------------------------------------------

/// trimmed(text): text without its leading and trailing blanks, as messages quote it.
std::string trimmed(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\n");
  if (first == std::string_view::npos) return {};
  return std::string(text.substr(first, text.find_last_not_of(" \t\n") - first + 1));
}

struct BadCase {
  const char* text;
  std::vector<std::string> says;  // fragments the message must contain
};

TEST(CronParse, RejectsBadExpressionsWithAMessageNamingTheProblem) {
  const std::vector<BadCase> cases = {
      {"61 * * * *", {"minute field '61' is out of range; expected 0-59"}},
      {"1,61 * * * *", {"minute field '1,61': '61' is out of range", "0-59"}},
      {"99999999999 * * * *", {"minute field", "out of range"}},
      {"* 24 * * *", {"hour field '24' is out of range", "0-23"}},
      {"* * 0 * *", {"day of month field '0' is out of range", "1-31"}},
      {"* * 32 * *", {"day of month field '32' is out of range", "1-31"}},
      {"* * * 0 *", {"month field '0' is out of range", "1-12"}},
      {"* * * 13 *", {"month field '13' is out of range", "1-12", "jan-dec"}},
      {"* * * * 8", {"day of week field '8' is out of range", "0-7", "sun-sat"}},
      {"", {"found 0 fields", "expected 5"}},
      {"   ", {"found 0 fields", "expected 5"}},
      {"* * * *", {"found 4 fields", "expected 5"}},
      {"*", {"found 1 field;", "expected 5"}},
      {"* * * * * *", {"found 6 fields", "expected 5"}},
      {"0 0 * * * /bin/true", {"found 6 fields", "expected 5"}},
      {"*/0 * * * *", {"minute field '*/0' has step 0", "1 to 60"}},
      {"0 0-23/0 * * *", {"hour field '0-23/0' has step 0", "1 to 24"}},
      {"*/61 * * * *", {"'*/61' has step 61, too large", "1 to 60"}},
      {"*/ * * * *", {"has no step after '/'"}},
      {"*/x * * * *", {"has step 'x', which is not a number"}},
      {"1/2/3 * * * *", {"has step '2/3', which is not a number"}},
      {"/5 * * * *", {"has no start before '/'"}},
      {"5-1 * * * *", {"minute field '5-1' is a range that runs backwards (5 > 1)", "low <= high"}},
      {"* * * dec-jan *", {"month field 'dec-jan'", "runs backwards (12 > 1)"}},
      {"* * * * sat-sun", {"day of week field 'sat-sun'", "runs backwards (6 > 0)", "5-7"}},
      {"1- * * * *", {"'1-' has no end after '-'"}},
      {"-1 * * * *", {"'-1' has no start before '-'"}},
      {"1-2-3 * * * *", {"'1-2-3' has more than one '-'"}},
      {"*-5 * * * *", {"'*-5' mixes '*' with other text"}},
      {"1,,2 * * * *", {"minute field '1,,2' has an empty list item"}},
      {"1, * * * *", {"minute field '1,' has an empty list item"}},
      {",1 * * * *", {"minute field ',1' has an empty list item"}},
      {"mon * * * *", {"minute field 'mon' is not a number", "0-59"}},
      {"? * * * *", {"minute field '?' is not a number"}},
      {"0 0 L * *", {"day of month field 'L' is not a number", "1-31"}},
      {"* * * foo *", {"month field 'foo' is not a number or a name", "jan-dec"}},
      {"* * * january *", {"month field 'january' is not a number or a name"}},
      {"* * * * monday", {"day of week field 'monday' is not a number or a name", "sun-sat"}},
      {"* * * * mon-xyz", {"day of week field 'mon-xyz': 'xyz' is not a number or a name"}},
      {"0 0 30 2 *", {"never matches", "'30'", "'2'", "February has at most 29"}},
      {"0 0 31 4,6,9,11 *", {"never matches"}},
      {"0 0 30,31 feb *", {"never matches"}},
      {"0 0 31 4 */2",
       {"never matches",
        "'*/2' starts with '*'"}},  // "*/2" starts with '*': AND, and April has no 31st
      {"@reboot", {"@reboot is not supported", "no boot", "@daily"}},
      {"@fortnightly", {"unknown macro '@fortnightly'", "@yearly", "@hourly"}},
      {"@", {"unknown macro '@'"}},
      {"@daily 5", {"extra text after @daily ('5')", "the macro alone"}},
  };
  for (const BadCase& c : cases) {
    try {
      (void)CronExpr::parse(c.text);
      ADD_FAILURE() << "parse accepted '" << c.text << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_option) << c.text;
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind("invalid_option: cron '" + trimmed(c.text) + "': ", 0), 0u) << msg;
      for (const std::string& s : c.says)
        EXPECT_NE(msg.find(s), std::string::npos)
            << "'" << c.text << "': " << msg << "\n  lacks: " << s;
    }
  }
}

TEST(CronParse, TheExampleMessageIsExact) {
  try {
    (void)CronExpr::parse("61 * * * *");
    FAIL() << "accepted";
  } catch (const Error& e) {
    // rail::Error puts the code in front of every message.
    EXPECT_STREQ(e.what(),
                 "invalid_option: cron '61 * * * *': minute field '61' is out of range; expected "
                 "0-59");
  }
}

TEST(CronParse, AcceptsDaysThatOnlySomeChosenMonthsHave) {
  // "never matches" looks at every chosen month, and not at all when the day rule is OR.
  EXPECT_EQ(next("0 0 31 2,3 *", utc(2025, 1, 1)), "2025-03-31 00:00 Mon");
  EXPECT_EQ(next("0 0 29 2 *", utc(2025, 1, 1)), "2028-02-29 00:00 Tue");
  EXPECT_EQ(next("0 0 31 4 mon", utc(2025, 1, 1)), "2025-04-07 00:00 Mon");  // OR: April Mondays
}

// --- property: next_after() equals a minute-by-minute search -----------------------------------

/// Tm: one civil minute, as the reference predicates read it.
struct Tm {
  int year;
  unsigned month, day;
  int hour, minute;
  unsigned weekday;  // 0 = Sunday
};

/// Reference: an expression and a predicate written straight from crontab(5), sharing no code
/// with CronExpr.
struct Reference {
  const char* text;
  bool (*matches)(const Tm&);
};

bool odd(unsigned d) {
  return d % 2 == 1;
}

const Reference kReferences[] = {
    {"* * * * *", [](const Tm&) { return true; }},
    {"*/7 */5 * * *", [](const Tm& t) { return t.minute % 7 == 0 && t.hour % 5 == 0; }},
    {"0 0 31 * *", [](const Tm& t) { return t.minute == 0 && t.hour == 0 && t.day == 31; }},
    {"59 23 28-31 2 *",
     [](const Tm& t) { return t.minute == 59 && t.hour == 23 && t.day >= 28 && t.month == 2; }},
    {"0 12 29 2 *",
     [](const Tm& t) { return t.minute == 0 && t.hour == 12 && t.day == 29 && t.month == 2; }},
    {"30 4 1,15 * 5",
     [](const Tm& t) {
       return t.minute == 30 && t.hour == 4 && (t.day == 1 || t.day == 15 || t.weekday == 5);
     }},
    {"0 0 */2 * mon",
     [](const Tm& t) { return t.minute == 0 && t.hour == 0 && odd(t.day) && t.weekday == 1; }},
    {"0 0 1-31/2 * mon",
     [](const Tm& t) { return t.minute == 0 && t.hour == 0 && (odd(t.day) || t.weekday == 1); }},
    {"15 9-17/2 * jan,jun-aug mon-fri",
     [](const Tm& t) {
       return t.minute == 15 && t.hour >= 9 && t.hour <= 17 && odd(static_cast<unsigned>(t.hour)) &&
              (t.month == 1 || (t.month >= 6 && t.month <= 8)) && t.weekday >= 1 && t.weekday <= 5;
     }},
    {"0 0 13 * fri",
     [](const Tm& t) { return t.minute == 0 && t.hour == 0 && (t.day == 13 || t.weekday == 5); }},
    {"5/20 1/6 * * 7",
     [](const Tm& t) { return t.minute % 20 == 5 && t.hour % 6 == 1 && t.weekday == 0; }},
    {"@weekly", [](const Tm& t) { return t.minute == 0 && t.hour == 0 && t.weekday == 0; }},
    {"@monthly", [](const Tm& t) { return t.minute == 0 && t.hour == 0 && t.day == 1; }},
    {"0 0 1 */3 *",
     [](const Tm& t) { return t.minute == 0 && t.hour == 0 && t.day == 1 && t.month % 3 == 1; }},
    {"0 0 29,30 * 0",
     [](const Tm& t) {
       return t.minute == 0 && t.hour == 0 && (t.day == 29 || t.day == 30 || t.weekday == 0);
     }},
    {"0 0 30 2 1",
     [](const Tm& t) { return t.minute == 0 && t.hour == 0 && t.month == 2 && t.weekday == 1; }},
    {"0-5,58 23 31 dec *",
     [](const Tm& t) {
       return (t.minute <= 5 || t.minute == 58) && t.hour == 23 && t.day == 31 && t.month == 12;
     }},
};

/// brute_force(ref, after, days): the first matching minute strictly after `after` within `days`
/// days, found by testing every minute.
std::optional<WallTime> brute_force(const Reference& ref, WallTime after, int days) {
  const auto first = chr::floor<chr::minutes>(after) + chr::minutes{1};
  const auto end = first + chr::days{days};
  auto day = chr::floor<chr::days>(first);
  auto minute = first;
  while (minute < end) {
    const chr::year_month_day ymd{day};
    Tm tm{static_cast<int>(ymd.year()),
          static_cast<unsigned>(ymd.month()),
          static_cast<unsigned>(ymd.day()),
          0,
          0,
          chr::weekday{day}.c_encoding()};
    const auto next_day = day + chr::days{1};
    for (; minute < next_day && minute < end; minute += chr::minutes{1}) {
      const auto since_midnight = (minute - day).count();
      tm.hour = static_cast<int>(since_midnight / 60);
      tm.minute = static_cast<int>(since_midnight % 60);
      if (ref.matches(tm)) return WallTime{minute};
    }
    day = next_day;
  }
  return std::nullopt;
}

/// random_start(rng): a time in 1900..2199, half of them in the last days of a month (month and
/// year ends, February in leap and century years) and a quarter in the years around 1900, 2000
/// and 2100.
WallTime random_start(std::mt19937_64& rng) {
  auto pick = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  static constexpr int kCenturyYears[] = {1900, 1904, 2000, 2096, 2100, 2104};
  const int year = pick(0, 3) == 0 ? kCenturyYears[pick(0, 5)] : pick(1900, 2199);
  const unsigned month = static_cast<unsigned>(pick(1, 12));
  const unsigned length =
      static_cast<unsigned>((chr::year{year} / chr::month{month} / chr::last).day());
  const bool month_end = pick(0, 1) == 0;
  const unsigned day = month_end ? length - static_cast<unsigned>(pick(0, 2))
                                 : static_cast<unsigned>(pick(1, static_cast<int>(length)));
  const int hour = month_end ? pick(22, 23) : pick(0, 23);
  return utc(year, month, day, hour, pick(0, 59), pick(0, 59)) + chr::nanoseconds{pick(0, 999)};
}

TEST(CronProperty, NextAfterEqualsAMinuteByMinuteSearch) {
  constexpr int kHorizonDays = 92;  // the brute force's reach: about three months
  std::mt19937_64 rng(20240514);
  for (const Reference& ref : kReferences) {
    const CronExpr e = CronExpr::parse(ref.text);
    for (int i = 0; i < 40; ++i) {
      const WallTime start = random_start(rng);
      const std::optional<WallTime> got = e.next_after(start);
      const std::optional<WallTime> want = brute_force(ref, start, kHorizonDays);
      ASSERT_TRUE(got.has_value()) << ref.text << " from " << show(start);
      if (want) {
        ASSERT_EQ(show(got), show(want)) << ref.text << " from " << show(start);
      } else {
        ASSERT_GE(*got, chr::floor<chr::minutes>(start) + chr::minutes{1} + chr::days{kHorizonDays})
            << ref.text << " from " << show(start) << ": next_after found " << show(got)
            << ", which the brute force missed";
      }
    }
  }
}

TEST(CronProperty, MatchesAgreesWithTheReferenceAndEveryDueTimeMatches) {
  std::mt19937_64 rng(7);
  for (const Reference& ref : kReferences) {
    const CronExpr e = CronExpr::parse(ref.text);
    for (int i = 0; i < 200; ++i) {
      const WallTime probe = random_start(rng);
      const auto day = chr::floor<chr::days>(probe);
      const chr::year_month_day ymd{day};
      const auto since_midnight = chr::floor<chr::minutes>(probe - day).count();
      const Tm tm{static_cast<int>(ymd.year()),          static_cast<unsigned>(ymd.month()),
                  static_cast<unsigned>(ymd.day()),      static_cast<int>(since_midnight / 60),
                  static_cast<int>(since_midnight % 60), chr::weekday{day}.c_encoding()};
      ASSERT_EQ(e.matches(probe), ref.matches(tm)) << ref.text << " at " << show(probe);
    }
    // 20 due times in a row (the sparsest, February 29th, stays within 1950..2040).
    std::optional<WallTime> t = utc(1950, 3, 1);
    for (int i = 0; i < 20; ++i) {
      const WallTime before = *t;
      t = e.next_after(before);
      ASSERT_TRUE(t.has_value()) << ref.text;
      ASSERT_GT(*t, before);
      ASSERT_TRUE(e.matches(*t)) << ref.text << " at " << show(t);
    }
  }
}

}  // namespace
}  // namespace rail
