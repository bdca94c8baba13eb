// JournalOptions: how a queue's DLQ keeps its optional journal file (DlqOptions::journal). The
// journal itself is rail::detail::DlqJournal (src/dlq_journal.cpp); its file format is written
// down byte by byte in include/rail/journal_file.hpp.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "rail/clock.hpp"
#include "rail/event.hpp"

namespace rail {

/// JournalSync: when the journal asks the kernel to put appended entries on the disk.
///
/// Every policy survives a process crash (kill -9, abort) for an entry whose dead-lettering call
/// returned: the entry was copied into a MAP_SHARED mapping, i.e. into the kernel's page cache,
/// which outlives the process. The policies differ against a power loss or a kernel crash, where
/// only what fdatasync(2) flushed is safe:
enum class JournalSync : std::uint8_t {
  every_entry,  // fdatasync before the dead-lettering call returns: nothing reported is lost
  every_n,      // fdatasync once `sync_every_n` entries are pending: at most n-1 entries lost
  interval,     // a journal thread calls fdatasync every `sync_interval`: at most one interval
  none,         // never: the kernel writes back when it likes (Linux: ~30 s); nothing reported
};

/// JournalOnCorruption: what opening does with a damaged record in the middle of the file (a
/// torn record at the tail, the mark of a crash during an append, is always truncated).
enum class JournalOnCorruption : std::uint8_t {
  refuse,           // throw Error(journal) naming the offset; the file is not modified
  skip_and_report,  // drop the damaged record, report it through on_problem, and go on
};

/// JournalProblem: something opening (or compaction) found and dealt with.
struct JournalProblem {
  enum class Kind : std::uint8_t {
    torn_tail,        // a partial last record (crash mid-append); truncated at `offset`
    corrupt_record,   // a checksum or framing failure at `offset`; skipped
    undecodable,      // a record whose checksum held but whose fields did not; skipped
    stale_temporary,  // a compaction's temporary file left by a crash; removed
    write_failed,     // an append, sync or compaction failed (disk full...): see the message
    unencodable,      // the payload codec threw on an entry: kept in memory, not journaled
    withheld,         // entries before a lost record that may have been a tombstone: not
                      // restored (JournalScan::withheld names them), so none runs twice
  };
  Kind kind = Kind::torn_tail;
  std::uint64_t offset = 0;  // byte offset in the journal file
  std::string message;       // what was wrong and what was done about it
};

/// JournalOptions: `DlqOptions.journal = {.path = "/var/lib/app/orders.dlq"}`.
struct JournalOptions {
  std::string path{};  // empty: no journal (the default; nothing of the journal is paid)
  JournalSync sync = JournalSync::every_entry;
  std::uint32_t sync_every_n = 64;                          // for JournalSync::every_n
  Duration sync_interval = std::chrono::milliseconds(100);  // for JournalSync::interval
  JournalOnCorruption on_corruption = JournalOnCorruption::refuse;
  /// Permission bits of a created file (payloads may be secrets); write permission for others is
  /// refused. An existing file is opened only if this process's user owns it and others cannot
  /// write it (else Error(journal)): another user's file could plant entries or read payloads.
  std::uint32_t file_mode = 0600;
  std::uint64_t grow_chunk = std::uint64_t{1} << 20;  // the file and its mapping grow by this
  /// Compaction rewrites the file once its dead bytes (tombstoned entries and the tombstones)
  /// exceed both compact_min_dead_bytes and compact_dead_ratio of the used bytes.
  std::uint64_t compact_min_dead_bytes = std::uint64_t{1} << 20;
  double compact_dead_ratio = 0.5;
  /// on_durable(id) is called once entry `id` is on the disk as the sync policy promises (after
  /// its fdatasync), on the thread that ran the sync; never under JournalSync::none.
  std::function<void(JobId id)> on_durable{};
  /// on_problem(p) is called for each problem opening or compaction found and dealt with, and
  /// once if writing fails. It may run under the DLQ's lock: it must not call back into the DLQ.
  std::function<void(const JournalProblem& problem)> on_problem{};
};

}  // namespace rail
