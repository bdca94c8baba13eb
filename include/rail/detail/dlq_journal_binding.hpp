// DlqJournalBinding: a DLQ's journal seen from its entries, whatever their payload type: opening
// the file and decoding its live entries through the payload's table (payload_ops.hpp), encoding
// an entry for it, and the append, settle and sync calls. A DLQ without a journal has none.
//
// Contract: open() restores what the file holds — same ids, errors and payloads — with times
// rebased onto the engine's clock by their wall-clock age (an entry that died an hour ago has
// dead_at one hour before the engine's now), so retention keeps counting across restarts. An
// entry whose payload does not decode is refused (JournalOnCorruption::refuse: Error(journal))
// or skipped and reported (on_problem, undecodable). encode() never throws: a codec that throws
// is reported (on_problem, unencodable) and the entry stays in memory only, since it runs where
// a job ends. A payload type without a JournalCodec can hold no journal: open() refuses it with
// Error(invalid_option). Threads: the DLQ calls append_* under its lock, settle and sync after.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "rail/dead_letter.hpp"
#include "rail/detail/dead_letter_store.hpp"
#include "rail/journal_file.hpp"
#include "rail/journal_options.hpp"

namespace rail::detail {

class DlqJournal;

class DlqJournalBinding {
 public:
  /// DlqJournalBinding(options, ops): `options` outlives the binding (the DLQ's own).
  DlqJournalBinding(const JournalOptions& options, const PayloadOps& ops) noexcept;
  ~DlqJournalBinding();
  DlqJournalBinding(const DlqJournalBinding&) = delete;
  DlqJournalBinding& operator=(const DlqJournalBinding&) = delete;

  /// open(queue, now_ns): opens the journal at options.path and returns its live entries,
  /// oldest first, their times rebased onto `now_ns` of the engine's clock.
  std::vector<EntryPtr> open(const std::string& queue, std::int64_t now_ns);
  /// encode(e, now_ns, out): e's record for the journal (`now_ns` on the engine's clock dates
  /// it on the wall clock); false when the payload's codec threw (reported, not journaled).
  bool encode(const DeadLetterInfo& e, std::int64_t now_ns, std::string& out) const;

  /// append_entry / append_tombstone: a change, under the DLQ's lock; the ticket to settle.
  std::uint64_t append_entry(const std::string& record, JobId id) noexcept;
  std::uint64_t append_tombstone(TombstoneCause cause, std::span<const JobId> ids) noexcept;
  /// settle(ticket): after the lock: the change is as durable as the sync policy says.
  void settle(std::uint64_t ticket) noexcept;
  void sync() noexcept;
  [[nodiscard]] std::string failure() const;

 private:
  void report_unencodable(JobId id, const char* what) const noexcept;

  const JournalOptions& options_;
  const PayloadOps& ops_;
  std::unique_ptr<DlqJournal> journal_;  // set by open()
};

}  // namespace rail::detail
