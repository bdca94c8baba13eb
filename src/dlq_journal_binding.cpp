// DlqJournalBinding: entries to records and back through the payload's table; the contract is in
// include/rail/detail/dlq_journal_binding.hpp.
#include "rail/detail/dlq_journal_binding.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <new>
#include <optional>
#include <utility>

#include "rail/detail/dlq_journal.hpp"
#include "rail/detail/journal_format.hpp"
#include "rail/detail/payload_ops.hpp"
#include "rail/error.hpp"

namespace rail::detail {

namespace {
std::int64_t unix_now_ns() {
  return std::chrono::duration_cast<Duration>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

DlqJournalBinding::DlqJournalBinding(const JournalOptions& options, const PayloadOps& ops) noexcept
    : options_(options), ops_(ops) {}

DlqJournalBinding::~DlqJournalBinding() = default;

std::vector<EntryPtr> DlqJournalBinding::open(const std::string& queue, std::int64_t now_ns) {
  if (ops_.codec_name == nullptr)
    throw Error(ErrorCode::invalid_option,
                "QueueOptions('" + queue + "').dlq.journal.path is set but payload type " +
                    type_name(ops_.type) +
                    " has no rail::JournalCodec; expected a specialisation of "
                    "rail::JournalCodec for it (see rail/journal_codec.hpp; declaring the "
                    "queue with Engine::declare_journaled_queue makes this a compile error)");
  const std::string codec = ops_.codec_name();
  std::vector<StoredDeadLetter> stored;
  journal_ = std::make_unique<DlqJournal>(options_, queue, codec, stored);
  const std::int64_t unix_now = unix_now_ns();
  std::vector<EntryPtr> out;
  out.reserve(stored.size());
  for (auto& s : stored) {
    // Saturating: a checksum-valid record may hold any time at all.
    const std::int64_t age =
        std::max<std::int64_t>(0, journal::difference(unix_now, s.dead_at_unix_ns));
    const std::int64_t shift = journal::difference(journal::difference(now_ns, age), s.dead_at_ns);
    DeadLetterInfo info{
        .id = s.id,
        .name = std::move(s.name),
        .reason = s.reason,
        .failed_attempts = s.failed_attempts,
        .max_attempts = s.max_attempts,
        .added_at = TimePoint{Duration{journal::shifted(s.added_at_ns, shift)}},
        .dead_at = TimePoint{Duration{journal::shifted(s.dead_at_ns, shift)}},
        .errors = {},
        .deliveries = s.deliveries,
        .stalls = s.stalls,
        .backoff = s.backoff,
        .visibility_timeout = s.visibility_timeout,
        .dedup_id = std::move(s.dedup_id),
        .downstream = std::move(s.downstream),
    };
    info.errors.reserve(s.errors.size());
    for (auto& err : s.errors)
      info.errors.push_back({err.attempt, TimePoint{Duration{journal::shifted(err.at_ns, shift)}},
                             std::move(err.message)});
    try {
      out.emplace_back(
          ops_.decode_entry(std::move(info), {reinterpret_cast<const std::byte*>(s.payload.data()),
                                              s.payload.size()}),
          EntryDeleter{&ops_});
    } catch (const std::bad_alloc&) {
      throw;  // no memory for the entry: not the codec's fault, and nothing to skip
    } catch (const std::exception& ex) {
      std::string what = "entry of job " + std::to_string(s.id) + " at offset " +
                         std::to_string(s.offset) + ": its payload does not decode with codec '" +
                         codec + "': " + ex.what();
      if (options_.on_corruption == JournalOnCorruption::refuse)
        throw Error(ErrorCode::journal, "journal '" + options_.path + "': " + what +
                                            "; refusing to open (JournalOnCorruption::refuse)");
      if (options_.on_problem)
        options_.on_problem({JournalProblem::Kind::undecodable, s.offset, what});
    }
  }
  return out;
}

bool DlqJournalBinding::encode(const DeadLetterInfo& e, std::int64_t now_ns,
                               std::string& out) const {
  try {
    StoredDeadLetter s;
    s.id = e.id;
    s.name = e.name;
    ops_.encode(ops_.entry_payload(const_cast<DeadLetterInfo&>(e)), s.payload);
    s.reason = e.reason;
    s.failed_attempts = e.failed_attempts;
    s.max_attempts = e.max_attempts;
    s.added_at_ns = e.added_at.time_since_epoch().count();
    s.dead_at_ns = e.dead_at.time_since_epoch().count();
    // Its wall-clock time, by its age on the engine clock.
    s.dead_at_unix_ns =
        journal::difference(unix_now_ns(), journal::difference(now_ns, s.dead_at_ns));
    s.errors.reserve(e.errors.size());
    for (const auto& err : e.errors)
      s.errors.push_back({err.attempt, err.at.time_since_epoch().count(), err.message});
    s.deliveries = e.deliveries;
    s.stalls = e.stalls;
    s.backoff = e.backoff;
    s.visibility_timeout = e.visibility_timeout;
    s.dedup_id = e.dedup_id;
    s.downstream = e.downstream;
    out = journal::encode_entry(s, journal_->version());
    return true;
  } catch (const std::exception& ex) {
    report_unencodable(e.id, ex.what());
  } catch (...) {
    report_unencodable(e.id, "an exception not derived from std::exception");
  }
  return false;
}

std::uint64_t DlqJournalBinding::append_entry(const std::string& record, JobId id) noexcept {
  return journal_->append_entry(record, id);
}

std::uint64_t DlqJournalBinding::append_tombstone(TombstoneCause cause,
                                                  std::span<const JobId> ids) noexcept {
  return journal_->append_tombstone(cause, ids);
}

void DlqJournalBinding::settle(std::uint64_t ticket) noexcept {
  journal_->settle(ticket);
}

void DlqJournalBinding::sync() noexcept {
  journal_->sync();
}

std::string DlqJournalBinding::failure() const {
  return journal_->failure();
}

void DlqJournalBinding::report_unencodable(JobId id, const char* what) const noexcept {
  if (!options_.on_problem) return;
  try {
    options_.on_problem({JournalProblem::Kind::unencodable, 0,
                         "entry " + std::to_string(id) + ": the payload codec threw (" + what +
                             "); the entry is kept in memory only, not journaled"});
  } catch (...) {  // an observer of problems must not end a job either
  }
}

}  // namespace rail::detail
