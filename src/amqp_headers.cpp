// rail's message headers on the broker: see include/rail/detail/amqp_headers.hpp.
#include "rail/detail/amqp_headers.hpp"

#include <algorithm>
#include <cstdio>
#include <variant>

#include "rail/detail/slot_table.hpp"

namespace rail::detail::amqp {

std::int64_t header_int(const Fields& h, std::string_view key, std::int64_t otherwise) {
  const FieldValue* v = field(h, key);
  if (v == nullptr) return otherwise;
  if (const auto* i = std::get_if<std::int64_t>(v)) return *i;
  return otherwise;
}

std::string header_text(const Fields& h, std::string_view key) {
  const FieldValue* v = field(h, key);
  if (v == nullptr) return {};
  if (const auto* s = std::get_if<std::string>(v)) return *s;
  return {};
}

std::uint32_t header_count(const Fields& h, std::string_view key, std::uint32_t otherwise) {
  const std::int64_t v = header_int(h, key, otherwise);
  return static_cast<std::uint32_t>(std::clamp<std::int64_t>(v, 0, kMaxAttempts));
}

void set_header(Fields& h, std::string_view key, FieldValue value) {
  for (auto& [k, v] : h)
    if (k == key) {
      v = std::move(value);
      return;
    }
  h.emplace_back(key, std::move(value));
}

std::string error_key(std::uint32_t attempt) {
  return "x-rail-error-" + std::to_string(attempt);
}

std::vector<AttemptError> header_errors(const Fields& h, std::uint32_t failed) {
  std::vector<AttemptError> out;
  for (std::uint32_t a = 1; a <= failed; ++a)  // an error may be empty; a missing one is left out
    if (field(h, error_key(a)) != nullptr)
      out.push_back(AttemptError{a, TimePoint{}, header_text(h, error_key(a))});
  return out;
}

std::string backoff_header(const Backoff& b) {
  return std::to_string(static_cast<int>(b.kind)) + ":" + std::to_string(b.delay.count()) + ":" +
         std::to_string(static_cast<int>(b.jitter)) + ":" + std::to_string(b.cap.count());
}

Backoff parse_backoff(const std::string& text) {
  Backoff b;
  long long kind = 0, delay = 0, jitter = 0, cap = 0;
  if (std::sscanf(text.c_str(), "%lld:%lld:%lld:%lld", &kind, &delay, &jitter, &cap) != 4) return b;
  if (kind < 0 || kind > static_cast<int>(BackoffKind::custom) || jitter < 0 ||
      jitter > static_cast<int>(Jitter::decorrelated) || delay < 0 || cap < 0)
    return b;
  b.kind = static_cast<BackoffKind>(kind);
  b.delay = Duration{delay};
  b.jitter = static_cast<Jitter>(jitter);
  b.cap = Duration{cap};
  return b;
}

}  // namespace rail::detail::amqp
