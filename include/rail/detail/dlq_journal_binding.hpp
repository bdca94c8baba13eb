// DlqJournalBinding<T>: a DLQ's optional journal seen from its typed entries: opening the file
// and decoding its live entries with JournalCodec<T>, encoding an entry for it, and the append,
// settle and sync calls, each a no-op (one null-pointer test) when the DLQ has no journal.
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

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "rail/detail/dlq_journal.hpp"
#include "rail/detail/journal_format.hpp"
#include "rail/error.hpp"
#include "rail/journal_codec.hpp"
#include "rail/options.hpp"

namespace rail {
template <class T>
struct DeadLetter;
}

namespace rail::detail {

template <class T>
class DlqJournalBinding {
 public:
  /// DlqJournalBinding(options): `options` outlives the binding (the DLQ's own).
  explicit DlqJournalBinding(const JournalOptions& options) noexcept : options_(options) {}

  [[nodiscard]] bool on() const noexcept { return journal_ != nullptr; }

  /// open(queue, now_ns): opens the journal at options.path and returns its live entries,
  /// oldest first, their times rebased onto `now_ns` of the engine's clock.
  std::vector<DeadLetter<T>> open(const std::string& queue, std::int64_t now_ns) {
    if constexpr (JournalCodecFor<T>::value) {
      std::vector<StoredDeadLetter> stored;
      journal_ = std::make_unique<DlqJournal>(options_, queue, JournalCodec<T>::name(), stored);
      return decode_all(stored, now_ns);
    } else {
      throw Error(ErrorCode::invalid_option,
                  "QueueOptions('" + queue + "').dlq.journal.path is set but payload type " +
                      type_name(typeid(T)) +
                      " has no rail::JournalCodec; expected a specialisation of "
                      "rail::JournalCodec for it (see rail/journal_codec.hpp; declaring the "
                      "queue with Engine::declare_journaled_queue makes this a compile error)");
    }
  }

  /// encode(e, now_ns, out): e's record for the journal (`now_ns` on the engine's clock dates
  /// it on the wall clock); false when the payload's codec threw (reported, not journaled).
  bool encode(const DeadLetter<T>& e, std::int64_t now_ns, std::string& out) const {
    try {
      out = encode_entry(e, now_ns);
      return true;
    } catch (const std::exception& ex) {
      report_unencodable(e.id, ex.what());
    } catch (...) {
      report_unencodable(e.id, "an exception not derived from std::exception");
    }
    return false;
  }

  /// append_entry / append_tombstone: a change, under the DLQ's lock; the ticket to settle.
  std::uint64_t append_entry(const std::string& record, JobId id) noexcept {
    return journal_->append_entry(record, id);
  }
  std::uint64_t append_tombstone(TombstoneCause cause, std::span<const JobId> ids) noexcept {
    return journal_ ? journal_->append_tombstone(cause, ids) : 0;
  }
  /// settle(ticket): after the lock: the change is as durable as the sync policy says.
  void settle(std::uint64_t ticket) noexcept {
    if (journal_) journal_->settle(ticket);
  }
  void sync() noexcept {
    if (journal_) journal_->sync();
  }
  [[nodiscard]] std::string failure() const {
    return journal_ ? journal_->failure() : std::string{};
  }

 private:
  static std::int64_t unix_now_ns() {
    return std::chrono::duration_cast<Duration>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  std::string encode_entry(const DeadLetter<T>& e, std::int64_t now_ns) const {
    if constexpr (JournalCodecFor<T>::value) {
      StoredDeadLetter s;
      s.id = e.id;
      s.name = e.name;
      JournalCodec<T>::encode(e.data, s.payload);
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
      return journal::encode_entry(s, journal_->version());
    } else {
      (void)e;
      (void)now_ns;
      return {};  // unreachable: open() refused a journal for this payload type
    }
  }

  void report_unencodable(JobId id, const char* what) const noexcept {
    if (!options_.on_problem) return;
    try {
      options_.on_problem({JournalProblem::Kind::unencodable, 0,
                           "entry " + std::to_string(id) + ": the payload codec threw (" + what +
                               "); the entry is kept in memory only, not journaled"});
    } catch (...) {  // an observer of problems must not end a job either
    }
  }

  std::vector<DeadLetter<T>> decode_all(std::vector<StoredDeadLetter>& stored,
                                        std::int64_t now_ns) {
    const std::int64_t unix_now = unix_now_ns();
    std::vector<DeadLetter<T>> out;
    out.reserve(stored.size());
    for (auto& s : stored) {
      std::optional<T> data;
      try {
        data.emplace(JournalCodec<T>::decode(
            {reinterpret_cast<const std::byte*>(s.payload.data()), s.payload.size()}));
      } catch (const std::exception& ex) {
        std::string what = "entry of job " + std::to_string(s.id) + " at offset " +
                           std::to_string(s.offset) + ": its payload does not decode with codec '" +
                           JournalCodec<T>::name() + "': " + ex.what();
        if (options_.on_corruption == JournalOnCorruption::refuse)
          throw Error(ErrorCode::journal, "journal '" + options_.path + "': " + what +
                                              "; refusing to open (JournalOnCorruption::refuse)");
        if (options_.on_problem)
          options_.on_problem({JournalProblem::Kind::undecodable, s.offset, what});
        continue;
      }
      // Saturating: a checksum-valid record may hold any time at all.
      const std::int64_t age =
          std::max<std::int64_t>(0, journal::difference(unix_now, s.dead_at_unix_ns));
      const std::int64_t shift =
          journal::difference(journal::difference(now_ns, age), s.dead_at_ns);
      DeadLetter<T>& e = out.emplace_back(DeadLetter<T>{
          .id = s.id,
          .name = std::move(s.name),
          .data = std::move(*data),
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
      });
      e.errors.reserve(s.errors.size());
      for (auto& err : s.errors)
        e.errors.push_back({err.attempt, TimePoint{Duration{journal::shifted(err.at_ns, shift)}},
                            std::move(err.message)});
    }
    return out;
  }

  const JournalOptions& options_;
  std::unique_ptr<DlqJournal> journal_;  // null: no journal
};

}  // namespace rail::detail
