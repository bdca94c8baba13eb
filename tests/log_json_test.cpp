// The log observer's JSON Lines form (LogFormat::json): each line a JSON object a real parser
// reads back (nlohmann-json), with the event's fields, hostile strings escaped; the same events
// left out as in the text form. Inline under the manual clock.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "rail/rail.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

/// lines(out): the observer's output, a parsed object per line.
std::vector<json> lines(const std::string& out) {
  std::vector<json> all;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line))
    all.push_back(json::parse(line));  // throws on a line that is not JSON
  return all;
}

TEST(LogJson, EachStageIsOneObjectWithTheFieldsItCarries) {
  ManualClock clock;
  Engine engine{EngineOptions{.clock = &clock, .mode = Mode::inlined}};
  std::ostringstream out;
  engine.on_event(make_log_observer(out, clock, {.format = LogFormat::json}));
  auto q = engine.declare_queue<int>("payments", QueueOptions{});
  q.process({}, [](Job<int>& j) {
    if (j.attempt() == 1) return Outcome::retry_in(500ms, "gateway \"timeout\"\n\tline 2");
    return Outcome::fail("card declined");
  });
  const JobId id = q.add("charge-card", 1, JobOptions{.max_attempts = 3}).id;
  engine.run_until_idle();
  clock.advance(500ms);
  engine.run_until_idle();
  const std::vector<json> all = lines(out.str());
  std::vector<std::string> kinds;
  for (const json& o : all)
    kinds.push_back(o.at("event").get<std::string>());
  EXPECT_EQ(kinds, (std::vector<std::string>{"started", "attempt_failed", "started",
                                             "attempt_failed", "dead_lettered"}));
  const json& failed = all[1];
  EXPECT_EQ(failed.at("queue"), "payments");
  EXPECT_EQ(failed.at("job_id"), id);
  EXPECT_EQ(failed.at("job"), "charge-card");
  EXPECT_EQ(failed.at("attempt"), 1);
  EXPECT_EQ(failed.at("max_attempts"), 3);
  EXPECT_EQ(failed.at("error"), "gateway \"timeout\"\n\tline 2") << "escaped and read back";
  EXPECT_EQ(failed.at("delay_ms"), 500.0);
  EXPECT_EQ(failed.at("time"), "00:00:00.000");
  EXPECT_EQ(all[2].at("at_ns"), Duration{500ms}.count());
  EXPECT_TRUE(all[3].at("delay_ms").is_null()) << "no next attempt";
  EXPECT_EQ(all[4].at("reason"), "permanent_failure");
  EXPECT_EQ(all[4].at("error"), "card declined");
  EXPECT_FALSE(all[0].contains("error")) << "only the fields the event carries";
}

TEST(LogJson, HostileStringsStayValidJsonAndTheSameEventsAreLeftOut) {
  ManualClock clock;
  Event e;
  e.kind = EventKind::discarded;
  e.queue = "q";
  e.job_id = 7;
  e.job_name = "n";
  std::string hostile =
      "a\x01"
      "b\\c\x7f\xc3\xa9";  // a control byte, a backslash, DEL, UTF-8
  e.error = hostile;
  const std::string line = format_event(e, clock, {.format = LogFormat::json});
  EXPECT_NE(line.find("\\u0001"), std::string::npos) << line;
  EXPECT_EQ(json::parse(line).at("error").get<std::string>(), hostile);
  e.error = "bad \xff\xc3( \xed\xa0\x80 end";  // a stray byte, a cut sequence, a surrogate
  const json bad = json::parse(format_event(e, clock, {.format = LogFormat::json}));
  EXPECT_EQ(bad.at("error").get<std::string>(),
            "bad \xef\xbf\xbd\xef\xbf\xbd( \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd end")
      << "each byte that is not valid UTF-8 becomes U+FFFD";
  e.kind = EventKind::idle;
  EXPECT_EQ(format_event(e, clock, {.format = LogFormat::json}), "") << "verbose only, as text";
  EXPECT_FALSE(logs(EventKind::idle, {}));
  EXPECT_TRUE(logs(EventKind::idle, {.verbose = true}));
  EXPECT_TRUE(logs(EventKind::dead_lettered, {}));
  e.kind = EventKind::throttled;
  e.throttle = Throttle::rate_limited;
  e.delay = 30ms;
  const json throttled =
      json::parse(format_event(e, clock, {.verbose = true, .format = LogFormat::json}));
  EXPECT_EQ(throttled.at("throttle"), "rate_limited");
  EXPECT_EQ(throttled.at("delay_ms"), 30.0);
}

}  // namespace
}  // namespace rail
