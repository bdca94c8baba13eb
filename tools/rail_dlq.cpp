// rail-dlq: reads a DLQ journal file (read-only: no lock taken, nothing written) and lists,
// shows, counts, verifies or exports its entries. Exit status: 0 done (verify: healthy), 1 the
// journal is damaged (verify, or any command on a file that is not a readable journal), 2 usage
// or I/O error. Errors go to stderr.
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "rail/detail/journal_format.hpp"
#include "rail/error.hpp"
#include "rail/journal_file.hpp"
#include "terminal_text.hpp"

namespace {

using rail::Backoff;
using rail::BackoffKind;
using rail::Duration;
using rail::Jitter;
using rail::JournalScan;
using rail::StoredDeadLetter;
using rail::tools::for_terminal;

constexpr int kDamaged = 1;
constexpr int kUsage = 2;

// Times in the file are engine-clock nanoseconds plus the entry's wall-clock death; the other
// wall-clock times are the death's minus their engine-clock distance to it.
// Saturating: a checksum-valid record may hold any time at all.
std::int64_t wall(const StoredDeadLetter& e, std::int64_t engine_ns) {
  using rail::detail::journal::difference;
  return difference(e.dead_at_unix_ns, difference(e.dead_at_ns, engine_ns));
}

std::string utc(std::int64_t unix_ns) {
  std::time_t secs = static_cast<std::time_t>(unix_ns / 1'000'000'000);
  auto ms = static_cast<int>((unix_ns % 1'000'000'000) / 1'000'000);
  if (ms < 0) {
    secs -= 1;
    ms += 1000;
  }
  std::tm tm{};
  if (gmtime_r(&secs, &tm) == nullptr || tm.tm_year > 9999 - 1900 || tm.tm_year < -1900)
    return std::to_string(unix_ns) + " ns since 1970 (outside the calendar)";
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  return buf;
}

bool printable(const std::string& s) {
  for (unsigned char c : s)
    if (!std::isprint(c) && c != '\n' && c != '\t') return false;
  return true;
}

std::string hex(const std::string& s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() * 2);
  for (unsigned char c : s) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

void hexdump(std::ostream& out, const std::string& s) {
  for (std::size_t row = 0; row < s.size(); row += 16) {
    char off[32];
    std::snprintf(off, sizeof off, "  %08zx  ", row);
    out << off;
    std::string text;
    for (std::size_t i = row; i < row + 16; ++i) {
      if (i < s.size()) {
        out << hex(s.substr(i, 1)) << ' ';
        auto c = static_cast<unsigned char>(s[i]);
        text.push_back(std::isprint(c) ? static_cast<char>(c) : '.');
      } else {
        out << "   ";
      }
    }
    out << " |" << text << "|\n";
  }
}

// preview(payload): its printable runs of 4 or more characters (what strings(1) would show),
// so a binary payload still names its order or user in a list.
std::string preview(const std::string& payload, std::size_t width = 32) {
  std::string out, run;
  auto flush = [&] {
    if (run.size() >= 4) out += (out.empty() ? "" : " ") + run;
    run.clear();
  };
  for (unsigned char c : payload) {
    if (std::isprint(c))
      run.push_back(static_cast<char>(c));
    else
      flush();
  }
  flush();
  if (out.size() > width) out = out.substr(0, width - 3) + "...";
  return out;
}

std::string_view reason(rail::DeadLetterReason r) {
  return rail::to_string(r);
}

// Reads the journal or says why not: nullopt with the exit status in `status`.
// Only a regular file is read: a FIFO or a device would block the reader or feed it for ever.
// A file the process cannot open is an I/O error (2), not a damaged journal (1).
std::optional<JournalScan> load(const std::string& path, int& status) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || ::access(path.c_str(), R_OK) != 0) {
    std::cerr << "rail-dlq: cannot open '" << path << "': " << std::strerror(errno) << "\n";
    status = kUsage;
    return std::nullopt;
  }
  if (!S_ISREG(st.st_mode)) {
    std::cerr << "rail-dlq: cannot open '" << path
              << "': not a regular file (a journal is one; FIFOs and devices are not read)\n";
    status = kUsage;
    return std::nullopt;
  }
  // Empty: its creator stopped before writing the header. The library adopts such a file as a
  // new journal, so it holds nothing and is not damaged.
  if (st.st_size == 0) return JournalScan{};
  try {
    return rail::read_journal(path);
  } catch (const rail::Error& e) {
    std::cerr << "rail-dlq: " << path << ": " << e.what() << "\n";
    status = kDamaged;
    return std::nullopt;
  }
}

void warn_problems(const std::string& path, const JournalScan& s) {
  for (const auto& p : s.problems)
    std::cerr << "rail-dlq: " << path << ": warning at offset " << p.offset << ": " << p.message
              << "\n";
}

/// span(d): a duration in the largest unit that divides it ("500ms", "5s").
std::string span(Duration d) {
  const std::int64_t n = d.count();
  if (n != 0 && n % 1'000'000'000 == 0) return std::to_string(n / 1'000'000'000) + "s";
  if (n != 0 && n % 1'000'000 == 0) return std::to_string(n / 1'000'000) + "ms";
  if (n != 0 && n % 1'000 == 0) return std::to_string(n / 1'000) + "us";
  return std::to_string(n) + "ns";
}

/// backoff(b): a job's own backoff as its builder would read ("exponential 5s, jitter full").
std::string backoff(const Backoff& b) {
  static constexpr const char* kKinds[] = {"none", "fixed", "exponential", "custom"};
  static constexpr const char* kJitters[] = {"none", "full", "equal", "decorrelated"};
  std::string s = kKinds[static_cast<int>(b.kind)];  // the reader admits only these values
  if (b.kind == BackoffKind::fixed || b.kind == BackoffKind::exponential) s += " " + span(b.delay);
  if (b.jitter != Jitter::none)
    s += std::string(", jitter ") + kJitters[static_cast<int>(b.jitter)];
  if (b.cap != Duration::max()) s += ", cap " + span(b.cap);
  return s;
}

// put(j, key, s): a string from the file as JSON needs it: as it is when it is UTF-8, else as
// for_terminal escapes it, with its exact bytes in key + "_hex".
void put(nlohmann::json& j, const std::string& key, const std::string& s) {
  if (rail::tools::valid_utf8(s)) {
    j[key] = s;
    return;
  }
  j[key] = for_terminal(s);
  j[key + "_hex"] = hex(s);
}

nlohmann::json to_json(const StoredDeadLetter& e) {
  nlohmann::json errors = nlohmann::json::array();
  for (const auto& err : e.errors) {
    nlohmann::json one = {{"attempt", err.attempt}, {"at", utc(wall(e, err.at_ns))}};
    put(one, "message", err.message);
    errors.push_back(std::move(one));
  }
  nlohmann::json j = {{"id", e.id},
                      {"reason", reason(e.reason)},
                      {"failed_attempts", e.failed_attempts},
                      {"max_attempts", e.max_attempts},
                      {"added_at", utc(wall(e, e.added_at_ns))},
                      {"dead_at", utc(e.dead_at_unix_ns)},
                      {"errors", errors},
                      {"deliveries", e.deliveries},
                      {"stalls", e.stalls},
                      {"backoff", backoff(e.backoff)},
                      {"payload_hex", hex(e.payload)},
                      {"offset", e.offset}};
  put(j, "name", e.name);
  put(j, "dedup_id", e.dedup_id);
  put(j, "downstream", e.downstream);
  // nlohmann::json requires UTF-8; printable ASCII is, anything else is left to payload_hex.
  if (printable(e.payload)) j["payload_text"] = e.payload;
  if (e.visibility_timeout) j["visibility_timeout_ns"] = e.visibility_timeout->count();
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Inspects a rail DLQ journal file, read-only.\nExit status: 0 ok, 1 damaged "
      "journal, 2 usage or I/O error."};
  app.require_subcommand(1);
  std::string path;
  rail::JobId id = 0;
  bool json = false;

  auto* list =
      app.add_subcommand("list", "One line per entry: id, name, attempts, time, last error");
  auto* show = app.add_subcommand("show", "Every field of one entry; the payload as hex and text");
  auto* stats = app.add_subcommand("stats", "Header, sizes and record counts");
  auto* verify = app.add_subcommand(
      "verify", "Check every record; print the first problem with its offset (exit 1 if any)");
  auto* exp = app.add_subcommand("export", "Every live entry, as JSON on stdout");
  for (auto* sub : {list, show, stats, verify, exp})
    sub->add_option("FILE", path, "the journal file")->required();
  show->add_option("ID", id, "the job id of the entry")->required();
  exp->add_flag("--json", json, "JSON output (the only format so far)")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);  // prints help to stdout, errors to stderr
    return code == 0 ? 0 : kUsage;
  }

  int status = 0;
  auto scan = load(path, status);
  if (!scan) return status;

  if (*verify) {
    if (scan->header.version == 0) {
      std::cout << "ok: " << path
                << ": empty (its creator stopped before writing the header); no entries, and "
                   "the queue that opens it writes a header\n";
      return 0;
    }
    if (scan->healthy()) {
      std::cout << "ok: " << path << ": " << scan->entry_records << " entry records, "
                << scan->tombstone_records << " tombstones, " << scan->live.size()
                << " live entries, every checksum holds\n";
      return 0;
    }
    const auto& p = scan->problems.front();
    std::cout << "damaged: " << path << ": offset " << p.offset << ": " << p.message << "\n";
    if (scan->problems.size() > 1)
      std::cout << "(" << scan->problems.size() - 1 << " more problem"
                << (scan->problems.size() > 2 ? "s" : "") << " after it)\n";
    return kDamaged;
  }
  warn_problems(path, *scan);

  if (*list) {
    std::printf("%-8s %-16s %-20s %-8s %-6s %-24s %s\n", "ID", "NAME", "PAYLOAD", "ATTEMPTS",
                "ERRORS", "DEAD AT (UTC)", "LAST ERROR");
    for (const auto& e : scan->live) {
      std::string attempts =
          std::to_string(e.failed_attempts) + "/" + std::to_string(e.max_attempts);
      std::string last =
          e.errors.empty() ? "(" + std::string(reason(e.reason)) + ")" : e.errors.back().message;
      std::printf("%-8llu %-16s %-20s %-8s %-6zu %-24s %s\n", static_cast<unsigned long long>(e.id),
                  for_terminal(e.name).c_str(), preview(e.payload, 20).c_str(), attempts.c_str(),
                  e.errors.size(), utc(e.dead_at_unix_ns).c_str(), for_terminal(last).c_str());
    }
  } else if (*show) {
    for (const auto& e : scan->live) {
      if (e.id != id) continue;
      std::cout << "id:        " << e.id << "\nname:      " << for_terminal(e.name)
                << "\nreason:    " << reason(e.reason) << "\nattempts:  " << e.failed_attempts
                << " of " << e.max_attempts << "\ndelivered: " << e.deliveries << " times ("
                << e.stalls << " stalled)\nbackoff:   " << backoff(e.backoff)
                << (e.dedup_id.empty() ? "" : "\ndedup id:  " + for_terminal(e.dedup_id))
                << (e.downstream.empty() ? "" : "\ndownstream: " + for_terminal(e.downstream))
                << "\nadded at:  " << utc(wall(e, e.added_at_ns))
                << "\ndead at:   " << utc(e.dead_at_unix_ns) << "\noffset:    " << e.offset
                << "\nerrors:\n";
      for (const auto& err : e.errors)
        std::cout << "  attempt " << err.attempt << " at " << utc(wall(e, err.at_ns)) << ": "
                  << for_terminal(err.message) << "\n";
      std::cout << "payload (" << e.payload.size() << " bytes):\n";
      hexdump(std::cout, e.payload);
      if (printable(e.payload)) std::cout << "payload as text:\n  " << e.payload << "\n";
      return 0;
    }
    std::cerr << "rail-dlq: " << path << ": no live entry with id " << id << "\n";
    return kUsage;
  } else if (*stats) {
    std::cout << "file:            " << path << "\nformat version:  " << scan->header.version
              << "\nqueue:           " << for_terminal(scan->header.queue)
              << "\npayload codec:   " << for_terminal(scan->header.codec)
              << "\ncreated:         " << utc(scan->header.created_unix_ns)
              << "\nfile bytes:      " << scan->file_bytes
              << "\nused bytes:      " << scan->used_bytes
              << "\ndead bytes:      " << scan->dead_bytes
              << "\nlive entries:    " << scan->live.size()
              << "\nentry records:   " << scan->entry_records
              << "\ntombstones:      " << scan->tombstone_records
              << "\nproblems:        " << scan->problems.size() << "\n";
  } else if (*exp) {
    nlohmann::json out = {{"format_version", scan->header.version},
                          {"entries", nlohmann::json::array()}};
    put(out, "queue", scan->header.queue);
    put(out, "codec", scan->header.codec);
    for (const auto& e : scan->live)
      out["entries"].push_back(to_json(e));
    // ASCII only (\uXXXX for the rest), so no control character reaches a terminal; every
    // string went through put(), so `replace` is a guard that never fires.
    std::cout << out.dump(2, ' ', true, nlohmann::json::error_handler_t::replace) << "\n";
  }
  return 0;
}
