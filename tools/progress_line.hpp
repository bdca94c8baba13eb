// ProgressLine: a long run's live status for people: on a terminal, one line rewritten in place
// ("soak: 812,345 / 1,000,000 jobs ended (81%)  54,120/s  DLQ 1,203  ETA 3 s"); on anything else
// (a CI log, a pipe) a plain line every `plain_every`, so logs stay readable. Header-only, for
// the tools.
// Threading: one thread calls update() and finish().
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace rail::tools {

class ProgressLine {
 public:
  /// ProgressLine(label, out, plain_every): writes to `out` (a C stream: isatty needs its fd).
  explicit ProgressLine(std::string label, std::FILE* out = stdout,
                        std::chrono::seconds plain_every = std::chrono::seconds(5))
      : label_(std::move(label)),
        out_(out),
        tty_(isatty(fileno(out)) != 0),
        plain_every_(plain_every),
        start_(std::chrono::steady_clock::now()),
        last_plain_(start_) {}
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;
  ~ProgressLine() { finish(); }

  /// terminal(): the line is rewritten in place (out is a terminal).
  [[nodiscard]] bool terminal() const noexcept { return tty_; }

  /// update(done, total, dlq): `done` of `total` units ended, the DLQ holds `dlq`.
  void update(std::uint64_t done, std::uint64_t total, std::uint64_t dlq) {
    const auto now = std::chrono::steady_clock::now();
    if (!tty_ && now - last_plain_ < plain_every_) return;
    last_plain_ = now;
    const double seconds = std::chrono::duration<double>(now - start_).count();
    const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0;
    std::string eta = "-";
    if (rate > 0 && done < total)
      eta = std::to_string(static_cast<long long>(static_cast<double>(total - done) / rate)) + " s";
    const int percent = total ? static_cast<int>(100 * done / total) : 0;
    std::fprintf(out_, "%s%s: %s / %s jobs ended (%d%%)  %s/s  DLQ %s  ETA %s%s",
                 tty_ ? "\r\x1b[2K" : "", label_.c_str(), grouped(done).c_str(),
                 grouped(total).c_str(), percent, grouped(static_cast<std::uint64_t>(rate)).c_str(),
                 grouped(dlq).c_str(), eta.c_str(), tty_ ? "" : "\n");
    std::fflush(out_);
    drawn_ = true;
  }
  /// finish(): ends the rewritten line (a newline on a terminal), once.
  void finish() {
    if (tty_ && drawn_) std::fputc('\n', out_);
    drawn_ = false;
  }

  /// grouped(n): n with thousands separators ("1,234,567").
  [[nodiscard]] static std::string grouped(std::uint64_t n) {
    std::string digits = std::to_string(n), out;
    for (std::size_t i = 0; i < digits.size(); ++i) {
      if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
      out += digits[i];
    }
    return out;
  }

 private:
  std::string label_;
  std::FILE* out_;
  bool tty_;
  std::chrono::seconds plain_every_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_plain_;
  bool drawn_ = false;
};

}  // namespace rail::tools
