// The DLQ journal's encoding and its reader. The format and the recovery rules are in
// include/rail/journal_file.hpp. The reader is pure (bytes in, JournalScan out) so that the
// engine, rail-dlq and the fuzzer run the same code; it trusts no length, count or offset it has
// not checked against the bytes that remain.
#include "rail/detail/journal_format.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/crc.hpp>
#include <cerrno>
#include <cstring>
#include <exception>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

#include "rail/error.hpp"

namespace rail::detail::journal {

std::uint32_t crc32c(std::span<const std::byte> bytes, std::uint32_t seed) {
  // Boost's table-driven CRC: ~1 GB/s, far above the rate anything is dead-lettered at.
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc(seed ^ 0xFFFFFFFFu);
  crc.process_bytes(bytes.data(), bytes.size());
  return crc.checksum();
}

namespace {

void put_u8(std::string& out, std::uint8_t v) {
  out.push_back(static_cast<char>(v));
}
template <class U>
void put_le(std::string& out, U v) {
  for (std::size_t i = 0; i < sizeof(U); ++i)
    out.push_back(static_cast<char>(static_cast<std::uint64_t>(v) >> (8 * i)));
}
void put_str(std::string& out, std::string_view s) {
  put_le<std::uint32_t>(out, static_cast<std::uint32_t>(s.size()));
  out.append(s);
}
template <class U>
U get_le(const std::byte* p) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < sizeof(U); ++i)
    v |= std::uint64_t(std::to_integer<std::uint8_t>(p[i])) << (8 * i);
  return static_cast<U>(v);
}
void set_u32(std::string& s, std::size_t at, std::uint32_t v) {
  for (std::size_t i = 0; i < 4; ++i)
    s[at + i] = static_cast<char>(v >> (8 * i));
}
std::span<const std::byte> bytes_of(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

std::string frame(std::uint8_t type, const std::string& body) {
  std::string rec;
  rec.reserve(padded(kRecordHeader + body.size()));
  put_le<std::uint32_t>(rec, kRecordMagic);
  put_le<std::uint32_t>(rec, 0);  // CRC, set below
  put_le<std::uint32_t>(rec, static_cast<std::uint32_t>(body.size()));
  put_u8(rec, type);
  rec.append(3, '\0');
  rec.append(body);
  set_u32(rec, 4, crc32c(bytes_of(std::string_view(rec).substr(8))));
  rec.resize(padded(rec.size()), '\0');
  return rec;
}

// Reader: a cursor over untrusted bytes. Every take checks what remains first.
class Cursor {
 public:
  explicit Cursor(std::span<const std::byte> b) : b_(b) {}
  template <class U>
  bool take(U& v) {
    if (b_.size() - pos_ < sizeof(U)) return false;
    v = get_le<U>(b_.data() + pos_);
    pos_ += sizeof(U);
    return true;
  }
  bool take_str(std::string& s) {
    std::uint32_t n;
    if (!take(n) || n > b_.size() - pos_) return false;
    s.assign(reinterpret_cast<const char*>(b_.data() + pos_), n);
    pos_ += n;
    return true;
  }
  [[nodiscard]] std::size_t left() const noexcept { return b_.size() - pos_; }

 private:
  std::span<const std::byte> b_;
  std::size_t pos_ = 0;
};

bool decode_entry(std::span<const std::byte> body, StoredDeadLetter& e, std::uint8_t type) {
  const bool detailed = type != kTypeEntry;
  Cursor c(body);
  std::uint8_t reason;
  std::uint32_t n_errors;
  if (!c.take(e.id) || !c.take(reason) || !c.take(e.failed_attempts) || !c.take(e.max_attempts) ||
      !c.take(e.added_at_ns) || !c.take(e.dead_at_ns) || !c.take(e.dead_at_unix_ns) ||
      !c.take_str(e.name) || !c.take(n_errors))
    return false;
  if (reason > static_cast<std::uint8_t>(DeadLetterReason::dependency_failed)) return false;
  e.reason = static_cast<DeadLetterReason>(reason);
  // Each error takes at least 16 bytes: a count larger than that allows is a lie, caught before
  // it can size an allocation.
  if (n_errors > c.left() / 16) return false;
  e.errors.resize(n_errors);
  for (auto& err : e.errors)
    if (!c.take(err.attempt) || !c.take(err.at_ns) || !c.take_str(err.message)) return false;
  if (!c.take_str(e.payload)) return false;
  if (detailed) {
    std::uint8_t kind, jitter, has_visibility;
    std::int64_t delay, cap, visibility;
    if (!c.take(e.deliveries) || !c.take(e.stalls) || !c.take(kind) || !c.take(jitter) ||
        !c.take(delay) || !c.take(cap) || !c.take(has_visibility) || !c.take(visibility) ||
        !c.take_str(e.dedup_id))
      return false;
    // Enumerations and flags take only the values the writer writes.
    if (kind > static_cast<std::uint8_t>(BackoffKind::custom) ||
        jitter > static_cast<std::uint8_t>(Jitter::decorrelated) || has_visibility > 1)
      return false;
    e.backoff = Backoff{static_cast<BackoffKind>(kind), Duration{delay},
                        static_cast<Jitter>(jitter), Duration{cap}};
    if (has_visibility) e.visibility_timeout = Duration{visibility};
  }
  if (type == kTypeRoutedEntry && !c.take_str(e.downstream)) return false;
  return c.left() == 0;
}

struct Tombstone {
  TombstoneCause cause;
  std::vector<JobId> ids;
};
bool decode_tombstone(std::span<const std::byte> body, Tombstone& t) {
  Cursor c(body);
  std::uint8_t cause;
  std::uint32_t n;
  if (!c.take(cause) || cause < 1 || cause > 4 || !c.take(n) || n != c.left() / 8 ||
      c.left() % 8 != 0)
    return false;
  t.cause = static_cast<TombstoneCause>(cause);
  t.ids.resize(n);
  for (auto& id : t.ids)
    c.take(id);
  return true;
}

// One record's frame. `size` is the extent its header claims (padded): set when the header holds
// a known type, zero padding and a length that fits in the file, whether or not its magic and CRC
// check out (a torn append, a damaged body), else 0; `body` is set only when the frame is ok.
struct Frame {
  std::uint8_t type;  // set with `size`: the type the header claims
  std::span<const std::byte> body;
  std::uint64_t size;
};
enum class FrameCheck { ok, zero, uncommitted, bad_magic, bad_length, bad_type, bad_crc };
FrameCheck check_frame(std::span<const std::byte> b, std::uint64_t off, Frame& f,
                       std::uint64_t& checked) {
  f = {};
  const std::byte* p = b.data() + off;
  const std::uint64_t room = b.size() - off;
  if (room < kRecordHeader) return FrameCheck::bad_length;
  const std::uint64_t commit = get_le<std::uint64_t>(p);  // magic and CRC: written last
  if (commit == 0 && get_le<std::uint64_t>(p + 8) == 0) return FrameCheck::zero;
  const std::uint32_t len = get_le<std::uint32_t>(p + 8);
  const auto type = std::to_integer<std::uint8_t>(p[12]);
  // The padding counts: the writer always writes it, and the next offset must stay in the file.
  const bool fits = len <= kMaxBody && padded(std::uint64_t{kRecordHeader} + len) <= room;
  const bool typed = (type == kTypeEntry || type == kTypeTombstone || type == kTypeDetailedEntry ||
                      type == kTypeRoutedEntry) &&
                     p[13] == std::byte{0} && p[14] == std::byte{0} && p[15] == std::byte{0};
  if (fits && typed) {
    f.size = padded(std::uint64_t{kRecordHeader} + len);
    f.type = type;
  }
  if (commit == 0 && f.size != 0) return FrameCheck::uncommitted;
  if (get_le<std::uint32_t>(p) != kRecordMagic) return FrameCheck::bad_magic;
  if (!fits) return FrameCheck::bad_length;
  if (!typed) return FrameCheck::bad_type;
  checked += std::uint64_t{len} + 8;
  if (crc32c({p + 8, std::size_t{len} + 8}) != get_le<std::uint32_t>(p + 4))
    return FrameCheck::bad_crc;
  f.body = {p + kRecordHeader, len};
  return FrameCheck::ok;
}

const char* describe(FrameCheck c) {
  switch (c) {
    case FrameCheck::zero:
      return "a zero-filled record header followed by non-zero bytes";
    case FrameCheck::uncommitted:
      return "a record whose append never finished (no magic and CRC yet)";
    case FrameCheck::bad_magic:
      return "no record magic (expected 0x52454331)";
    case FrameCheck::bad_length:
      return "a body length that runs past the end of the file";
    case FrameCheck::bad_type:
      return "an unknown record type (expected 1 entry or 2 tombstone)";
    case FrameCheck::bad_crc:
      return "a CRC32C mismatch";
    case FrameCheck::ok:
      break;
  }
  return "no problem";
}

// content_end(b): one past the last non-zero byte (0 if there is none): from there on the file is
// the zeros of its last chunk.
std::uint64_t content_end(std::span<const std::byte> b) {
  std::uint64_t n = b.size();
  while (n > 0 && b[n - 1] == std::byte{0})
    --n;
  return n;
}

// next_record(b, from, end, checked): the first offset at or after `from` (a multiple of 8, below
// `end`) that holds an intact record. A header that claims an extent but fails its checks (a
// damaged or unfinished record) is stepped over whole: recovery never takes bytes inside a
// record's claimed extent for a record, and the searches checksum disjoint ranges (linear).
std::optional<std::uint64_t> next_record(std::span<const std::byte> b, std::uint64_t from,
                                         std::uint64_t end, std::uint64_t& checked) {
  for (std::uint64_t p = from; p < end && p + kRecordHeader <= b.size();) {
    Frame g{};
    if (check_frame(b, p, g, checked) == FrameCheck::ok) return p;
    p += g.size != 0 ? g.size : 8;
  }
  return std::nullopt;
}

[[noreturn]] void not_a_journal(const std::string& why) {
  throw Error(ErrorCode::journal, "not a readable rail DLQ journal: " + why);
}

JournalHeader read_header(std::span<const std::byte> b) {
  if (b.size() < kMinHeader)
    not_a_journal("the file holds " + std::to_string(b.size()) +
                  " bytes; a journal starts with a header of at least 32 bytes");
  if (std::memcmp(b.data(), kMagic, sizeof(kMagic)) != 0)
    not_a_journal("its first 8 bytes are not the magic \"RAILDLQJ\"");
  JournalHeader h;
  h.version = get_le<std::uint32_t>(b.data() + 8);
  h.header_bytes = get_le<std::uint32_t>(b.data() + 12);
  if (h.version == 0 || h.version > kVersion)
    not_a_journal("format version " + std::to_string(h.version) + "; this build reads version " +
                  std::to_string(kVersion) +
                  (h.version > kVersion ? " (written by a newer rail)" : ""));
  const std::uint32_t H = h.header_bytes;
  if (H < kMinHeader || H > kMaxHeader || H % 8 != 0 || H > b.size())
    not_a_journal("header length " + std::to_string(H) +
                  "; expected a multiple of 8 in 32..4096 within the file");
  std::string copy(reinterpret_cast<const char*>(b.data()), H);
  const std::uint32_t stored = get_le<std::uint32_t>(b.data() + 16);
  set_u32(copy, 16, 0);
  if (crc32c(bytes_of(copy)) != stored) not_a_journal("the header's CRC32C does not match");
  const std::uint16_t q = get_le<std::uint16_t>(b.data() + 20);
  const std::uint16_t c = get_le<std::uint16_t>(b.data() + 22);
  if (std::uint32_t{32} + q + c > H)
    not_a_journal("header names of " + std::to_string(q) + " + " + std::to_string(c) +
                  " bytes do not fit a header of " + std::to_string(H));
  h.created_unix_ns = get_le<std::int64_t>(b.data() + 24);
  h.queue.assign(copy, 32, q);
  h.codec.assign(copy, 32 + q, c);
  return h;
}

}  // namespace

std::string encode_header(std::string_view queue, std::string_view codec,
                          std::int64_t created_unix_ns) {
  std::string h(kMagic, sizeof(kMagic));
  put_le<std::uint32_t>(h, kVersion);
  put_le<std::uint32_t>(h, 0);  // length, set below
  put_le<std::uint32_t>(h, 0);  // CRC, set below
  put_le<std::uint16_t>(h, static_cast<std::uint16_t>(queue.size()));
  put_le<std::uint16_t>(h, static_cast<std::uint16_t>(codec.size()));
  put_le<std::int64_t>(h, created_unix_ns);
  h.append(queue);
  h.append(codec);
  h.resize(padded(h.size()), '\0');
  set_u32(h, 12, static_cast<std::uint32_t>(h.size()));
  set_u32(h, 16, crc32c(bytes_of(h)));
  return h;
}

std::string encode_entry(const StoredDeadLetter& e, std::uint32_t version) {
  const bool detailed = version >= 2;
  std::string body;
  body.reserve(64 + e.name.size() + e.payload.size());
  put_le<std::uint64_t>(body, e.id);
  put_u8(body, static_cast<std::uint8_t>(e.reason));
  put_le<std::uint32_t>(body, e.failed_attempts);
  put_le<std::uint32_t>(body, e.max_attempts);
  put_le<std::int64_t>(body, e.added_at_ns);
  put_le<std::int64_t>(body, e.dead_at_ns);
  put_le<std::int64_t>(body, e.dead_at_unix_ns);
  put_str(body, e.name);
  put_le<std::uint32_t>(body, static_cast<std::uint32_t>(e.errors.size()));
  for (const auto& err : e.errors) {
    put_le<std::uint32_t>(body, err.attempt);
    put_le<std::int64_t>(body, err.at_ns);
    put_str(body, err.message);
  }
  put_str(body, e.payload);
  if (!detailed) return frame(kTypeEntry, body);
  put_le<std::uint32_t>(body, e.deliveries);
  put_le<std::uint32_t>(body, e.stalls);
  put_u8(body, static_cast<std::uint8_t>(e.backoff.kind));
  put_u8(body, static_cast<std::uint8_t>(e.backoff.jitter));
  put_le<std::int64_t>(body, e.backoff.delay.count());
  put_le<std::int64_t>(body, e.backoff.cap.count());
  put_u8(body, e.visibility_timeout ? 1 : 0);
  put_le<std::int64_t>(body, e.visibility_timeout.value_or(Duration{0}).count());
  put_str(body, e.dedup_id);
  if (version < 3) return frame(kTypeDetailedEntry, body);
  put_str(body, e.downstream);
  return frame(kTypeRoutedEntry, body);
}

std::string encode_tombstone(TombstoneCause cause, std::span<const JobId> ids) {
  std::string body;
  body.reserve(5 + 8 * ids.size());
  put_u8(body, static_cast<std::uint8_t>(cause));
  put_le<std::uint32_t>(body, static_cast<std::uint32_t>(ids.size()));
  for (JobId id : ids)
    put_le<std::uint64_t>(body, id);
  return frame(kTypeTombstone, body);
}

}  // namespace rail::detail::journal

namespace rail {

using namespace detail::journal;

JournalScan scan_journal(std::span<const std::byte> b) {
  JournalScan s;
  s.header = read_header(b);
  s.file_bytes = b.size();
  // Live entries in file order, and where each id's live entry is.
  std::map<std::uint64_t, StoredDeadLetter> live;
  std::unordered_map<JobId, std::pair<std::uint64_t, std::uint64_t>> where;  // offset, size
  auto drop = [&](JobId id) {
    auto it = where.find(id);
    if (it == where.end()) return;
    s.dead_bytes += it->second.second;
    live.erase(it->second.first);
    where.erase(it);
  };
  auto problem = [&](JournalProblem::Kind kind, std::uint64_t off, std::string msg) {
    s.problems.push_back({kind, off, std::move(msg)});
  };
  // A record that is lost may have been a tombstone: the entries before it that it may have
  // removed are withheld rather than brought back (a redriven job would run twice).
  auto withhold_before = [&](std::uint64_t off) {
    if (where.empty()) return;
    std::vector<JobId> ids;
    ids.reserve(live.size());
    for (const auto& [o, e] : live)
      ids.push_back(e.id);
    std::string list;
    for (std::size_t i = 0; i < ids.size() && i < 20; ++i)
      list += (i ? ", " : "") + std::to_string(ids[i]);
    if (ids.size() > 20) list += ", ...";
    for (JobId id : ids)
      drop(id);
    s.withheld.insert(s.withheld.end(), ids.begin(), ids.end());
    problem(JournalProblem::Kind::withheld, off,
            std::to_string(ids.size()) + " entries before offset " + std::to_string(off) +
                " are not restored (ids " + list +
                "): the record lost there may be a tombstone that removed them, and restoring "
                "them could run a redriven job twice");
  };

  std::uint64_t off = s.header.header_bytes;
  s.used_bytes = off;
  const std::uint64_t end = content_end(b);
  while (off < b.size()) {
    Frame f{};
    FrameCheck check = check_frame(b, off, f, s.bytes_checked);
    if (check != FrameCheck::ok) {
      if (off >= end) break;  // the clean end: the zeros of the last chunk
      // Find the next whole record after this one's claimed extent (or, when its header claims
      // none, after its first 8 bytes): if there is one, this is damage in the middle.
      const std::optional<std::uint64_t> next =
          next_record(b, off + (f.size != 0 ? f.size : 8), end, s.bytes_checked);
      if (!next) {
        problem(JournalProblem::Kind::torn_tail, off,
                std::string("the last record is incomplete (") + describe(check) +
                    "): a crash during an append; the log ends at offset " + std::to_string(off));
        break;
      }
      problem(JournalProblem::Kind::corrupt_record, off,
              std::string("damaged record at offset ") + std::to_string(off) + ": " +
                  describe(check) + "; the next intact record is at offset " +
                  std::to_string(*next));
      // Certainly an entry only when its header claims an entry's type and extent.
      if (f.size == 0 || f.type == kTypeTombstone) withhold_before(off);
      off = *next;
      continue;
    }
    if (f.type == kTypeEntry || f.type == kTypeDetailedEntry || f.type == kTypeRoutedEntry) {
      StoredDeadLetter e;
      // The first format that holds each type: 1, 2 and 3.
      const std::uint32_t since = f.type == kTypeEntry ? 1 : f.type == kTypeDetailedEntry ? 2 : 3;
      if (s.header.version < since) {
        problem(JournalProblem::Kind::undecodable, off,
                "entry record at offset " + std::to_string(off) + " has type " +
                    std::to_string(f.type) + ", which a version-" +
                    std::to_string(s.header.version) + " file never holds; skipped");
      } else if (!decode_entry(f.body, e, f.type)) {
        problem(JournalProblem::Kind::undecodable, off,
                "entry record at offset " + std::to_string(off) +
                    " passed its CRC32C but its fields do not add up to its length; skipped");
      } else {
        ++s.entry_records;
        drop(e.id);  // a redriven job that failed again: the newer entry replaces the older
        e.offset = off;
        e.record_bytes = f.size;
        where[e.id] = {off, f.size};
        live.emplace(off, std::move(e));
      }
    } else {
      Tombstone t;
      if (!decode_tombstone(f.body, t)) {
        problem(JournalProblem::Kind::undecodable, off,
                "tombstone record at offset " + std::to_string(off) +
                    " passed its CRC32C but its fields do not add up to its length; skipped");
        withhold_before(off);
      } else {
        ++s.tombstone_records;
        s.dead_bytes += f.size;
        if (t.cause == TombstoneCause::purged && t.ids.empty()) {
          while (!where.empty())
            drop(where.begin()->first);
        }
        for (JobId id : t.ids)
          drop(id);
      }
    }
    off += f.size;
    s.used_bytes = off;
  }
  s.live.reserve(live.size());
  for (auto& [o, e] : live)
    s.live.push_back(std::move(e));
  return s;
}

namespace {
// data_end(fd, size): the end of the file's last data region (SEEK_DATA/SEEK_HOLE), or `size`
// where the file system cannot say.
std::uint64_t data_end(int fd, std::uint64_t size) {
  std::uint64_t end = 0;
  for (off_t pos = 0;;) {
    const off_t data = ::lseek(fd, pos, SEEK_DATA);
    if (data < 0) return errno == ENXIO ? end : size;  // ENXIO: no data after pos
    const off_t hole = ::lseek(fd, data, SEEK_HOLE);
    if (hole < 0) return size;
    end = static_cast<std::uint64_t>(hole);
    if (end >= size) return size;
    pos = hole;
  }
}
}  // namespace

JournalScan read_journal(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    throw Error(ErrorCode::journal,
                "cannot open journal '" + path + "': " + std::strerror(errno) +
                    (errno == ELOOP ? " (a symbolic link is never followed)" : ""));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(ErrorCode::journal, "journal '" + path + "' is not a regular file");
  }
  // Read, not mapped: a mapping would raise SIGBUS if the owning engine shrank the file (torn
  // tail recovery) while we read it. Only up to the end of its last data: what follows is a hole
  // (zeros, the log's clean end), so a sparse file of any size costs what it holds.
  const std::uint64_t data = data_end(fd, static_cast<std::uint64_t>(st.st_size));
  std::vector<std::byte> bytes;
  try {
    bytes.resize(static_cast<std::size_t>(data));
  } catch (const std::exception&) {
    ::close(fd);
    throw Error(ErrorCode::journal, "journal '" + path + "' holds " + std::to_string(data) +
                                        " bytes of data; not enough memory to read it");
  }
  std::size_t got = 0;
  while (got < bytes.size()) {
    ssize_t n = ::pread(fd, bytes.data() + got, bytes.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      throw Error(ErrorCode::journal, "cannot read journal '" + path + "': " + std::strerror(err));
    }
    if (n == 0) break;  // shrunk while we read: scan what we have
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  bytes.resize(got);
  JournalScan scan = scan_journal(bytes);
  scan.file_bytes = static_cast<std::uint64_t>(st.st_size);
  return scan;
}

}  // namespace rail
