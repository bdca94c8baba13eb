// Trace context (include/rail/trace_context.hpp): the traceparent format, the thread's current
// context and the attempts' derived span ids.
#include "rail/trace_context.hpp"


namespace rail {
namespace {

constexpr char kHex[] = "0123456789abcdef";

template <std::size_t N>
std::string hex(const std::array<std::uint8_t, N>& bytes) {
  std::string out(2 * N, '0');
  for (std::size_t i = 0; i < N; ++i) {
    out[2 * i] = kHex[bytes[i] >> 4];
    out[2 * i + 1] = kHex[bytes[i] & 0xF];
  }
  return out;
}

int nibble(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // uppercase is invalid in a traceparent
}

/// read_hex(text, out): text is exactly 2 * out.size() lowercase hex digits.
template <std::size_t N>
bool read_hex(std::string_view text, std::array<std::uint8_t, N>& out) noexcept {
  if (text.size() != 2 * N) return false;
  for (std::size_t i = 0; i < N; ++i) {
    const int hi = nibble(text[2 * i]), lo = nibble(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  return true;
}

/// mix(x): SplitMix64's finalizer: a bijection that spreads every input bit.
std::uint64_t mix(std::uint64_t x) noexcept {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::uint64_t load64(const std::uint8_t* p) noexcept {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v = v << 8 | p[i];
  return v;
}

/// span_of(producer, job, attempt): attempt's span id, never zero.
std::array<std::uint8_t, 8> span_of(const TraceContext& producer, std::uint64_t job,
                                    std::uint32_t attempt) noexcept {
  std::uint64_t v =
      mix(load64(producer.trace_id.data()) ^
          mix(load64(producer.span_id.data()) ^ mix(job ^ (std::uint64_t{attempt} << 48))));
  if (v == 0) v = 1;
  std::array<std::uint8_t, 8> out{};
  for (int i = 7; i >= 0; --i, v >>= 8)
    out[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(v);
  return out;
}

}  // namespace

std::optional<TraceContext> TraceContext::parse(std::string_view t) noexcept {
  // version "-" trace-id "-" parent-id "-" flags: 2 + 1 + 32 + 1 + 16 + 1 + 2 = 55 characters.
  if (t.size() < 55 || t[2] != '-' || t[35] != '-' || t[52] != '-') return std::nullopt;
  std::array<std::uint8_t, 1> version{}, flags{};
  TraceContext c;
  if (!read_hex(t.substr(0, 2), version) || version[0] == 0xFF ||
      !read_hex(t.substr(3, 32), c.trace_id) || !read_hex(t.substr(36, 16), c.span_id) ||
      !read_hex(t.substr(53, 2), flags))
    return std::nullopt;
  // Version 00 is exactly 55 characters; a later version may append "-..." fields.
  if (t.size() > 55 && (version[0] == 0 || t[55] != '-')) return std::nullopt;
  c.flags = flags[0];
  if (!c.valid()) return std::nullopt;
  return c;
}

std::string TraceContext::traceparent() const {
  return "00-" + hex(trace_id) + "-" + hex(span_id) + "-" + hex(std::array<std::uint8_t, 1>{flags});
}
std::string TraceContext::trace_id_hex() const {
  return hex(trace_id);
}
std::string TraceContext::span_id_hex() const {
  return hex(span_id);
}

JobTrace attempt_trace(const TraceContext& producer, std::uint64_t job,
                       std::uint32_t attempt) noexcept {
  JobTrace t;
  if (!producer.valid()) return t;
  t.producer = producer;
  t.attempt = producer;
  t.attempt.span_id = span_of(producer, job, attempt);
  if (attempt > 1) {
    t.first_attempt = producer;
    t.first_attempt->span_id = span_of(producer, job, 1);
  }
  return t;
}

TraceScope::TraceScope(const TraceContext& context) noexcept : previous_(detail::thread_trace()) {
  detail::thread_trace() = context;
}
TraceScope::~TraceScope() {
  detail::thread_trace() = previous_;
}

}  // namespace rail
