// DlqJournal: one queue's DLQ journal file (JournalOptions; format in rail/journal_file.hpp). An
// append-only log of entry and tombstone records in a MAP_SHARED mapping, grown in chunks, synced
// by policy, compacted when its dead bytes pass a threshold.
//
// Guarantee: an entry whose append returned survives a crash of the process (the mapping's pages
// belong to the kernel's page cache); one reported through on_durable also survived fdatasync,
// and with it a power loss. At every instant the path names either the old file or the whole
// compacted one.
// Algorithm: group commit. Appends copy a record into the mapping under `mu_` (a memcpy: the
// DLQ calls them under its own lock so file order is DLQ order); syncs run outside it, one at a
// time under `sync_mu_`, each covering every record appended before it started, so concurrent
// dead-letterings share an fdatasync instead of queueing for one each.
// Threading: append_* may be called from any thread, serialised by the caller (the DLQ's lock);
// settle() and sync() from any thread without it. Lock order: DLQ lock -> mu_; sync_mu_ -> mu_.
// Healthy jobs never reach this class: only dead-lettering and DLQ operations do.
// Failure: an I/O error while appending (disk full...) never throws into a worker: the journal
// stops writing, keeps the error (failure()) and reports it through on_problem; the in-memory
// DLQ keeps working.
// Shutdown: the destructor stops the interval thread, syncs (unless JournalSync::none) and
// releases the file's lock.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <typeinfo>
#include <unordered_map>
#include <vector>

#include "rail/detail/journal_format.hpp"
#include "rail/journal_file.hpp"
#include "rail/journal_options.hpp"

namespace rail::detail {

/// type_name(type): the demangled name of a type, for messages.
[[nodiscard]] std::string type_name(const std::type_info& type);

class DlqJournal {
 public:
  /// DlqJournal(options, queue, codec, restored) opens the journal at options.path, creating it
  /// when absent, and fills `restored` with its live entries, oldest first. Throws
  /// Error(journal) when the file is locked by another opener, is not a journal, is of a newer
  /// version, belongs to another queue or codec, or (JournalOnCorruption::refuse) is damaged in
  /// the middle; in each of those cases the file is left as it was.
  DlqJournal(JournalOptions options, std::string_view queue, std::string codec,
             std::vector<StoredDeadLetter>& restored);
  ~DlqJournal();
  DlqJournal(const DlqJournal&) = delete;
  DlqJournal& operator=(const DlqJournal&) = delete;

  /// append_entry(record, id) copies an encoded entry record (journal::encode_entry) into the
  /// file. append_tombstone(cause, ids) records that entries left the DLQ. Both return a ticket
  /// for settle(), or 0 once the journal has failed. Caller serialises them.
  std::uint64_t append_entry(std::string_view record, JobId id) noexcept;
  std::uint64_t append_tombstone(TombstoneCause cause, std::span<const JobId> ids) noexcept;

  /// settle(ticket) runs, after the caller released its lock, what the sync policy asks for
  /// the append behind `ticket` (an fdatasync under every_entry, possibly one under every_n),
  /// reports the entries that became durable, and compacts the file when it is due. Blocks for
  /// the sync and the compaction.
  void settle(std::uint64_t ticket) noexcept;
  /// sync() flushes every record appended so far; blocks for the fdatasync.
  void sync() noexcept;

  /// version(): the file's format, in which its entries are encoded (journal::encode_entry): a
  /// file written by an older build keeps its format so that build still reads it.
  [[nodiscard]] std::uint32_t version() const noexcept { return version_; }
  /// failure() is the I/O error that stopped the journal, empty while it works.
  [[nodiscard]] std::string failure() const;
  /// live_entries() / used_bytes() / dead_bytes(): the journal's size accounting.
  [[nodiscard]] std::size_t live_entries() const;
  [[nodiscard]] std::uint64_t used_bytes() const;
  [[nodiscard]] std::uint64_t dead_bytes() const;
  /// compact() rewrites the file now, whatever its dead bytes (settle() calls it when due).
  void compact() noexcept;

 private:
  struct Fd;
  void open(std::vector<StoredDeadLetter>& restored);
  void open_existing(Fd& f, std::uint64_t size, std::vector<StoredDeadLetter>& restored);
  /// refuse_foreign(fd): throws Error(journal) unless the file is this user's and not writable by
  /// others (a planted file would have its entries restored and its payloads read by its owner).
  void refuse_foreign(int fd) const;
  struct Place {
    std::uint64_t offset;
    std::uint64_t size;
  };
  std::uint64_t append_locked(std::string_view record, JobId entry_id) noexcept;
  bool grow_locked(std::uint64_t need) noexcept;
  void fail_locked(std::string message) noexcept;
  void sync_through(std::uint64_t ticket) noexcept;
  bool compaction_due() const;
  void compact_locked();
  void map_file(int fd, std::uint64_t size);
  void interval_loop();
  void report(const JournalProblem& p) const noexcept;

  JournalOptions options_;
  std::string queue_;
  std::string codec_;
  std::int64_t created_unix_ns_ = 0;
  std::uint32_t version_ = journal::kVersion;  // the file's format (a new file: this build's)

  mutable std::mutex mu_;  // the file, the mapping and the accounting below
  int fd_ = -1;
  std::byte* map_ = nullptr;
  std::uint64_t map_size_ = 0;
  std::uint64_t used_ = 0;
  std::uint64_t dead_ = 0;
  std::unordered_map<JobId, Place> live_;
  std::uint64_t appended_seq_ = 0;
  std::deque<std::pair<std::uint64_t, JobId>> not_durable_;  // entries appended, not yet synced
  std::string failure_;

  std::mutex sync_mu_;            // one fdatasync (or compaction) at a time
  std::uint64_t synced_seq_ = 0;  // written under sync_mu_ and mu_; read under either
  std::mutex interval_mu_;        // the interval thread's sleep
  std::condition_variable interval_cv_;
  bool interval_stop_ = false;
  std::thread interval_thread_;
};

}  // namespace rail::detail
