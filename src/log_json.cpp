// format_event_json (log_observer.hpp): the log observer's JSON Lines form, one object per event
// with the fields the event carries. The engine takes no JSON dependency, so the object is written
// here: a fixed set of keys, numbers as integers or plain decimals, strings escaped per RFC 8259.
#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>

#include "rail/log_observer.hpp"

namespace rail {
namespace {

/// Json: an object written key by key.
class Json {
 public:
  Json() { out_ = "{"; }
  void str(std::string_view key, std::string_view value) {
    this->key(key);
    quote(value);
  }
  void num(std::string_view key, long long value) {
    this->key(key);
    out_ += std::to_string(value);
  }
  void num(std::string_view key, double value) {
    this->key(key);
    if (!std::isfinite(value)) {  // JSON has no NaN or infinity
      out_ += "null";
      return;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", value);
    out_ += buf;
  }
  void null(std::string_view key) {
    this->key(key);
    out_ += "null";
  }
  std::string done() && {
    out_ += '}';
    return std::move(out_);
  }

 private:
  void key(std::string_view k) {
    if (out_.size() > 1) out_ += ',';
    quote(k);
    out_ += ':';
  }
  /// quote(s): s as a JSON string: `"` and `\` escaped, control characters as \uXXXX (the
  /// common ones by name), valid UTF-8 as it is, and a byte that is not part of a valid UTF-8
  /// sequence as U+FFFD (JSON text is UTF-8: a job's name or error may be any bytes).
  void quote(std::string_view s) {
    out_ += '"';
    for (std::size_t i = 0; i < s.size();) {
      const auto c = static_cast<unsigned char>(s[i]);
      if (c >= 0x80) {
        const std::size_t n = utf8_length(s.substr(i));
        if (n == 0) {
          out_ += "\\ufffd";  // the replacement character, escaped
          ++i;
        } else {
          out_.append(s.substr(i, n));
          i += n;
        }
        continue;
      }
      switch (c) {
        case '"':
          out_ += "\\\"";
          break;
        case '\\':
          out_ += "\\\\";
          break;
        case '\n':
          out_ += "\\n";
          break;
        case '\r':
          out_ += "\\r";
          break;
        case '\t':
          out_ += "\\t";
          break;
        default:
          if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
            out_ += buf;
          } else {
            out_ += static_cast<char>(c);
          }
      }
      ++i;
    }
    out_ += '"';
  }
  /// utf8_length(s): the length of the valid UTF-8 sequence s starts with (its first byte is
  /// >= 0x80), or 0 if it is not one (a stray continuation byte, an overlong form, a surrogate,
  /// past U+10FFFF, or cut short).
  static std::size_t utf8_length(std::string_view s) noexcept {
    const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
    const unsigned char c = b(0);
    std::size_t n;
    unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
    if (c >= 0xC2 && c <= 0xDF) {
      n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 3;
      if (c == 0xE0) lo = 0xA0;  // no overlong forms
      if (c == 0xED) hi = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
    } else {
      return 0;
    }
    if (s.size() < n || b(1) < lo || b(1) > hi) return 0;
    for (std::size_t k = 2; k < n; ++k)
      if (b(k) < 0x80 || b(k) > 0xBF) return 0;
    return n;
  }
  std::string out_;
};

double ms(Duration d) {
  return static_cast<double>(d.count()) / 1e6;
}

/// of_attempt(kind): an event of one attempt, whose span is the attempt's (attempt_trace).
bool of_attempt(EventKind kind) noexcept {
  switch (kind) {
    case EventKind::started:
    case EventKind::attempt_failed:
    case EventKind::completed:
    case EventKind::discarded:
    case EventKind::stalled:
    case EventKind::timed_out:
    case EventKind::late_outcome:
    case EventKind::progress:
      return true;
    default:
      return false;
  }
}

}  // namespace

std::string format_event_json(const Event& e, const Clock& clock, const LogOptions& options) {
  Json j;
  std::string time = format_time(e.at, clock, options);  // "[HH:MM:SS.mmm]"
  j.str("time", std::string_view(time).substr(1, time.size() - 2));
  j.num("at_ns", static_cast<long long>(e.at.time_since_epoch().count()));
  j.str("event", rail::to_string(e.kind));
  j.str("queue", e.queue);
  if (e.job_id != 0) {
    j.num("job_id", static_cast<long long>(e.job_id));
    j.str("job", e.job_name);
  }
  if (e.attempt != 0) j.num("attempt", static_cast<long long>(e.attempt));
  if (e.max_attempts != 0) j.num("max_attempts", static_cast<long long>(e.max_attempts));
  if (e.deliveries != 0) j.num("deliveries", static_cast<long long>(e.deliveries));
  if (e.stalls != 0) j.num("stalls", static_cast<long long>(e.stalls));
  if (!e.error.empty()) j.str("error", e.error);
  if (e.reason != DeadLetterReason::none) j.str("reason", rail::to_string(e.reason));
  switch (e.kind) {
    case EventKind::added:
    case EventKind::attempt_failed:
    case EventKind::forwarded:
    case EventKind::throttled:
    case EventKind::stall_warning:  // the time left before the lease lapses
      // Negative: none (dead-lettered next, or a wait for a permit of unknown length).
      if (e.delay.count() < 0) {
        j.null("delay_ms");
      } else {
        j.num("delay_ms", ms(e.delay));
      }
      break;
    default:
      break;
  }
  if (e.elapsed.count() != 0) j.num("elapsed_ms", ms(e.elapsed));
  if (!e.dedup_id.empty()) j.str("dedup_id", e.dedup_id);
  if (e.kind == EventKind::dlq_alert || e.kind == EventKind::dlq_age_alert)
    j.num("depth", static_cast<long long>(e.depth));
  if (e.kind == EventKind::progress) j.num("progress", e.progress);
  if (e.throttle != Throttle::none) j.str("throttle", rail::to_string(e.throttle));
  if (!e.result.empty()) j.str("result", e.result);
  if (e.trace.valid()) {
    j.str("trace_id", e.trace.trace_id_hex());
    j.str("parent_span_id", e.trace.span_id_hex());
    if (of_attempt(e.kind) && e.attempt != 0)
      j.str("span_id", attempt_trace(e.trace, e.job_id, e.attempt).attempt.span_id_hex());
  }
  return std::move(j).done();
}

}  // namespace rail
