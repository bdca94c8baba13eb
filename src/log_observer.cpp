// make_log_observer (log_observer.hpp): one line per event in the seed document's log style.
#include "rail/log_observer.hpp"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <mutex>

namespace rail {
namespace {

std::string human(Duration d) {
  using namespace std::chrono;
  auto ns = d.count();
  char buf[48];
  if (ns % 1'000'000'000 == 0)
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(ns / 1'000'000'000));
  else if (ns % 1'000'000 == 0)
    std::snprintf(buf, sizeof buf, "%lldms", static_cast<long long>(ns / 1'000'000));
  else if (ns >= 1'000'000)
    std::snprintf(buf, sizeof buf, "%.1fms", static_cast<double>(ns) / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%lldus", static_cast<long long>(ns / 1000));
  return buf;
}

// The offset that maps the engine's steady timeline onto the wall clock, taken once.
std::chrono::nanoseconds wall_offset(const Clock& clock) {
  auto wall = std::chrono::system_clock::now().time_since_epoch();
  auto steady = clock.now().time_since_epoch();
  return std::chrono::duration_cast<std::chrono::nanoseconds>(wall) - steady;
}

}  // namespace

std::string format_time(TimePoint t, const Clock& clock, const LogOptions& options) {
  std::int64_t ns = t.time_since_epoch().count();
  bool wall = options.wall_clock && !clock.is_manual();
  if (wall) {
    static const std::chrono::nanoseconds offset = wall_offset(SteadyClock::instance());
    ns += offset.count();
  }
  std::int64_t ms_total = ns / 1'000'000;
  int ms = static_cast<int>(ms_total % 1000);
  std::time_t secs = static_cast<std::time_t>(ms_total / 1000);
  int h, m, s;
  if (wall) {
    std::tm tm{};
    localtime_r(&secs, &tm);
    h = tm.tm_hour;
    m = tm.tm_min;
    s = tm.tm_sec;
  } else {
    h = static_cast<int>(secs / 3600);
    m = static_cast<int>(secs / 60 % 60);
    s = static_cast<int>(secs % 60);
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "[%02d:%02d:%02d.%03d]", h, m, s, ms);
  return buf;
}

bool logs(EventKind kind, const LogOptions& o) noexcept {
  switch (kind) {
    case EventKind::added:
    case EventKind::retry_due:
    case EventKind::progress:
    case EventKind::throttled:  // once per refusal: a saturated downstream refuses per start
    case EventKind::idle:       // once per transition to idle: per job, for a trickle of jobs
      return o.verbose;
    default:
      return true;
  }
}

std::string format_event(const Event& e, const Clock& clock, const LogOptions& o) {
  if (!logs(e.kind, o)) return {};
  if (o.format == LogFormat::json) return format_event_json(e, clock, o);
  std::string id = std::to_string(e.job_id);
  std::string name(e.job_name);
  std::string line = format_time(e.at, clock, o) + " ";
  auto icon = [&](const char* emoji) { return o.emoji ? std::string(emoji) + " " : std::string(); };
  switch (e.kind) {
    case EventKind::added:
      line += "ADDED job " + id + " (" + name + ") to " + std::string(e.queue);
      if (e.delay.count() > 0) line += ", delayed " + human(e.delay);
      break;
    case EventKind::deduplicated:
      line += icon("🔁") + "DEDUP: add of " + name + " with dedup id=" + std::string(e.dedup_id) +
              " merged into job " + id + " - dropping duplicate";
      break;
    case EventKind::debounced:
      line += icon("🔁") + "DEBOUNCE: add with dedup id=" + std::string(e.dedup_id) +
              " replaced the payload of job " + id + " and restarted its delay";
      break;
    case EventKind::started:
      line +=
          "WORKER picked up job " + id + " (" + name + ") - attempt #" + std::to_string(e.attempt);
      break;
    case EventKind::attempt_failed:
      line += icon("❌") + "FAILED job " + id + " attempt " + std::to_string(e.attempt) + "/" +
              std::to_string(e.max_attempts) + ": " + std::string(e.error);
      if (e.delay.count() > 0)
        line += " - retry in " + human(e.delay);
      else if (e.delay.count() == 0)
        line += " - retry now";
      break;
    case EventKind::retry_due:
      line +=
          "DUE job " + id + " (" + name + ") is ready for attempt #" + std::to_string(e.attempt);
      break;
    case EventKind::completed:
      line += icon("✅") + "COMPLETED job " + id + " (" + name + ") after " +
              std::to_string(e.attempt) + " attempt(s)";
      if (!e.result.empty()) line += ": " + std::string(e.result);
      break;
    case EventKind::dead_lettered:
      if (e.reason == DeadLetterReason::attempts_exhausted)
        line += icon("💀") + "Job " + id + " exhausted all " + std::to_string(e.max_attempts) +
                " attempts -> moving to DLQ";
      else
        line += icon("💀") + "Job " + id + " (" + name +
                ") -> DLQ: " + std::string(to_string(e.reason)) +
                (e.error.empty() ? std::string() : " (" + std::string(e.error) + ")");
      break;
    case EventKind::redriven:
      line += "REDRIVE job " + id + " (" + name + ") from the DLQ back to " + std::string(e.queue);
      break;
    case EventKind::dlq_evicted:
      line += icon("🗑") + "DLQ of " + std::string(e.queue) + " evicted job " + id + " (" + name +
              ")";
      break;
    case EventKind::dlq_alert:
      line += icon("🚨") + "DLQ of " + std::string(e.queue) + " reached depth " +
              std::to_string(e.depth);
      break;
    case EventKind::dlq_age_alert:
      line += icon("🚨") + "DLQ of " + std::string(e.queue) + ": its oldest entry, job " + id +
              " (" + name + "), has waited " + human(e.elapsed) + " (depth " +
              std::to_string(e.depth) + ")";
      break;
    case EventKind::stall_warning:
      line += icon("🐢") + "SLOW job " + id + (name.empty() ? "" : " (" + name + ")") +
              " delivery #" + std::to_string(e.deliveries) + ": " + human(e.elapsed) +
              " in the handler, " + human(e.delay) + " left of its lease (or timeout)";
      break;
    case EventKind::stalled:
      line += icon("⏰") + "STALLED job " + id + " (" + name + ") delivery #" +
              std::to_string(e.deliveries) + ": lease lapsed after " + human(e.elapsed) +
              " in the handler";
      break;
    case EventKind::late_outcome:
      line += icon("🚧") + "LATE outcome of job " + id + " delivery #" +
              std::to_string(e.deliveries) + " after " + human(e.elapsed) +
              " ignored (its lease had lapsed or its attempt timed out)";
      break;
    case EventKind::timed_out:
      line += icon("⌛") + "TIMED OUT job " + id + " (" + name + ") attempt " +
              std::to_string(e.attempt) + " after " + human(e.elapsed) +
              ": asked to stop, its outcome will be ignored";
      break;
    case EventKind::cancelled:
      line += icon("🛑") + "CANCELLED job " + id + " (" + name + ")";
      break;
    case EventKind::progress: {
      char value[32];
      std::snprintf(value, sizeof value, "%g", e.progress);
      line += "PROGRESS job " + id + " (" + name + "): " + value;
      break;
    }
    case EventKind::throttled:
      line += "THROTTLED job " + id + " (" + name + "): " + std::string(e.error) +
              (e.delay.count() >= 0 ? "; waits " + human(e.delay) : "; waits for a permit");
      break;
    case EventKind::discarded:
      line += icon("🗑") + "DISCARDED job " + id + " (" + name + ") on attempt " +
              std::to_string(e.attempt) + ": " + std::string(e.error);
      break;
    case EventKind::forwarded:
      line += icon("↪") + "FORWARDED job " + id + " (" + name + ") to its broker: attempt " +
              std::to_string(e.attempt) + "/" + std::to_string(e.max_attempts) +
              (e.delay.count() > 0 ? " in " + human(e.delay) : std::string(" now"));
      if (!e.error.empty()) line += " after: " + std::string(e.error);
      break;
    case EventKind::paused:
      line += icon("⏸") + "PAUSED queue " + std::string(e.queue) + ": no new job starts";
      break;
    case EventKind::resumed:
      line += icon("▶") + "RESUMED queue " + std::string(e.queue);
      break;
    case EventKind::idle:
      line += "IDLE queue " + std::string(e.queue) + ": nothing waiting, delayed or running";
      break;
  }
  return line;
}

Observer make_log_observer(std::ostream& out, const Clock& clock, LogOptions options) {
  auto mu = std::make_shared<std::mutex>();
  return [&out, &clock, options, mu](const Event& e) {
    std::string line = format_event(e, clock, options);
    if (line.empty()) return;
    std::lock_guard lock(*mu);
    out << line << '\n' << std::flush;
  };
}

}  // namespace rail
