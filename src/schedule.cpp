// Schedule (schedule.hpp): every(interval) and cron(expression) due-time rules, validated.
#include "rail/schedule.hpp"

#include <string>

#include "rail/error.hpp"

namespace rail {

namespace {
/// duration_text(d): "1h30m", "5m", "250ms", "1s500ms": the largest units first, zeros left out.
std::string duration_text(Duration d) {
  using namespace std::chrono;
  static constexpr struct {
    Duration unit;
    const char* name;
  } kUnits[] = {{hours(1), "h"},         {minutes(1), "m"},       {seconds(1), "s"},
                {milliseconds(1), "ms"}, {microseconds(1), "us"}, {nanoseconds(1), "ns"}};
  std::string out;
  for (const auto& u : kUnits) {
    const auto n = d / u.unit;
    if (n == 0) continue;
    out += std::to_string(n) + u.name;
    d -= n * u.unit;
  }
  return out;
}
}  // namespace

Schedule Schedule::every(Duration interval) {
  if (interval.count() <= 0)
    throw Error(ErrorCode::invalid_option, "Schedule::every: the interval is " +
                                               std::to_string(interval.count()) +
                                               " ns; expected a duration > 0");
  return Schedule(interval);
}

std::string Schedule::describe() const {
  if (cron_) return "cron '" + cron_->text() + "' UTC";
  return "every " + duration_text(interval_);
}

}  // namespace rail
