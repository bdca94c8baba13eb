// Reading a DLQ journal file: what rail-dlq, the tests and the fuzzer use, and where the file
// format is defined byte by byte. Reading never modifies the file and takes no lock.
//
// Guarantee: every byte read is untrusted. The reader checks each length, count and offset against
// the bytes that remain before using it, so any input (truncated, bit-flipped, zero-filled, or
// crafted) yields either a JournalScan listing the problems with their offsets or an Error(journal)
// saying why the file is not a readable journal; never a crash or an unbounded allocation.
//
// FILE FORMAT, version 3. All integers little-endian; "str" is a u32 byte count then the bytes.
// Version 2 added record type 3 (an entry with the job's details), version 3 type 4 (one with the
// downstream it named, too). A file keeps the format it was created with: this build appends
// type 1 entries to a version-1 file and type 3 to a version-2 one (an older build can still read
// it; a job's own downstream is then not kept: its redrive calls the queue's).
//
// Header, at offset 0, H bytes (H a multiple of 8, 32 <= H <= 4096):
//   0   u8[8]  magic "RAILDLQJ"
//   8   u32    format version (1 to 3; a reader refuses a larger one and never writes to it)
//   12  u32    H, the header length
//   16  u32    CRC32C (Castagnoli, as in iSCSI/ext4) of the H header bytes with this field zeroed
//   20  u16    Q, the queue name's length
//   22  u16    C, the payload codec name's length (JournalCodec<T>::name())
//   24  i64    creation time, nanoseconds since the Unix epoch
//   32  u8[Q]  queue name, then u8[C] codec name, then zero bytes up to H
//
// Records follow from offset H, each starting at a multiple of 8:
//   +0  u32    record magic 0x52454331 ("1CER" in file order)
//   +4  u32    CRC32C of bytes [+8, +16+L): the length, the type and the body
//   +8  u32    L, the body length (L <= 1 GiB and the record must fit in the file)
//   +12 u8     type: 1 entry, 2 tombstone, 3 entry with details (version 2 on), 4 entry with
//              details and downstream (version 3 on)
//   +13 u8[3]  zero
//   +16 u8[L]  body, then zero bytes up to the next multiple of 8
// A record header of 16 zero bytes followed only by zero bytes ends the log: the file grows in
// chunks (JournalOptions::grow_chunk) that the kernel fills with zeros.
//
// Entry body (type 1), one dead-lettered job:
//   u64 job id | u8 reason (DeadLetterReason) | u32 attempts made | u32 max attempts |
//   i64 added_at | i64 dead_at (both engine-clock nanoseconds) | i64 dead_at, Unix nanoseconds |
//   str job name | u32 error count E, then E times: u32 attempt, i64 at (engine clock), str text |
//   str payload (the codec's bytes)
// and nothing after it (trailing bytes make the record undecodable).
//
// Detailed entry body (type 3): the entry body above, then what a redrive needs to run the job as
// it was and what its deliveries were:
//   u32 deliveries | u32 stalls | u8 backoff kind (BackoffKind) | u8 jitter (Jitter) |
//   i64 backoff delay ns | i64 backoff cap ns | u8 has own visibility timeout (0 or 1) |
//   i64 visibility timeout ns | str dedup id (empty: none)
// and nothing after it. A type-1 entry restores with zero deliveries and stalls, no backoff, the
// queue's visibility timeout and no dedup id.
//
// Routed entry body (type 4): the detailed entry body above, then
//   str downstream (JobOptions::downstream; empty: the queue's)
// and nothing after it.
//
// Tombstone body (type 2), entries that left the DLQ:
//   u8 cause (1 redriven, 2 removed, 3 purged, 4 evicted) | u32 count N | N times u64 job id
// A "purged" tombstone with N = 0 removes every entry before it.
//
// Appends: the writer copies a record's length and type word (+8) and its body first, and its
// magic and CRC word (+0) last, as one aligned 8-byte store that commits it. A process killed
// during an append therefore leaves either nothing or a header that claims the record's extent
// (its length and type) with no magic yet: an uncommitted record.
//
// Recovery rules: a record that fails its magic, length, type or CRC check is followed by a
// search for a record that passes them all, from the end of the extent its header claims (when
// the header holds a known type and a length that fits: a torn append, a damaged body) or else
// from its next multiple of 8; a header met by the search that claims an extent but fails a check
// is stepped over whole. So recovery never takes bytes inside a record's claimed extent for a
// record (a payload that holds the bytes of a record is never read as one), and no byte is
// checksummed more than twice (recovery is linear in the file's size). If a record is found, the
// bad one is corruption in the middle (reported with its offset); if none is, it is a torn tail (a
// crash during the last append) and the log ends at its offset. A damaged last record is therefore
// indistinguishable from a torn one, and is truncated like it. A record lost in the middle that
// may have been a tombstone (its header claims type 2, or claims no type at all) may have removed
// any entry before it: those entries are withheld (JournalProblem::withheld), never restored, so
// a redriven job cannot run twice; they stay readable in the file until a compaction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "rail/backoff.hpp"
#include "rail/event.hpp"
#include "rail/journal_options.hpp"

namespace rail {

/// TombstoneCause: why entries left the DLQ, as a tombstone records it.
enum class TombstoneCause : std::uint8_t { redriven = 1, removed = 2, purged = 3, evicted = 4 };

/// StoredError: one attempt's failure as the journal holds it.
struct StoredError {
  std::uint32_t attempt = 0;
  std::int64_t at_ns = 0;  // engine clock
  std::string message;
};

/// StoredDeadLetter: one DLQ entry as the journal holds it; `payload` is the codec's bytes.
struct StoredDeadLetter {
  JobId id = 0;
  std::string name;
  std::string payload;
  DeadLetterReason reason = DeadLetterReason::none;
  std::uint32_t failed_attempts = 0;
  std::uint32_t max_attempts = 0;
  std::int64_t added_at_ns = 0;      // engine clock
  std::int64_t dead_at_ns = 0;       // engine clock
  std::int64_t dead_at_unix_ns = 0;  // wall clock, for people and for rebasing on restore
  std::vector<StoredError> errors;   // oldest first
  // Type 3 only (see the format above); a type-1 entry leaves the defaults.
  std::uint32_t deliveries = 0;
  std::uint32_t stalls = 0;
  Backoff backoff{};
  std::optional<Duration> visibility_timeout{};
  std::string dedup_id;
  std::string downstream;          // format 3 on (JobOptions::downstream); empty: the queue's
  std::uint64_t offset = 0;        // where its record starts in the file (set by the reader)
  std::uint64_t record_bytes = 0;  // its record's size, padding included (set by the reader)
};

/// JournalHeader: the file header's fields.
struct JournalHeader {
  std::uint32_t version = 0;
  std::uint32_t header_bytes = 0;
  std::string queue;
  std::string codec;
  std::int64_t created_unix_ns = 0;
};

/// JournalScan: everything a read of the file found.
struct JournalScan {
  JournalHeader header;
  std::vector<StoredDeadLetter> live;  // entries no tombstone removed, in file order
  std::uint64_t entry_records = 0;
  std::uint64_t tombstone_records = 0;
  std::uint64_t used_bytes = 0;  // end of the last record kept (where the next append goes)
  std::uint64_t file_bytes = 0;
  std::uint64_t dead_bytes = 0;     // bytes of tombstoned entries and of tombstones
  std::uint64_t bytes_checked = 0;  // bytes checksummed: at most 2 x file_bytes (linear)
  std::vector<JobId> withheld;      // entries not restored: a lost record may have removed them
  std::vector<JournalProblem> problems;  // in file order; a torn tail is the last one
  [[nodiscard]] bool healthy() const noexcept { return problems.empty(); }
};

/// scan_journal(bytes) reads a journal image held in memory. Throws Error(journal) if the bytes
/// are not a journal (magic, header length or header checksum) or of a newer format version.
[[nodiscard]] JournalScan scan_journal(std::span<const std::byte> bytes);

/// read_journal(path) maps the file read-only and scans it (no lock, no write, no symlink
/// followed). Throws Error(journal) as scan_journal does, or when the file cannot be opened.
[[nodiscard]] JournalScan read_journal(const std::string& path);

}  // namespace rail
