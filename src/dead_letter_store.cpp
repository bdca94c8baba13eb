// DeadLetterStore: the DLQ's entries, bound, retention, alert and journal; the contract is in
// include/rail/detail/dead_letter_store.hpp.
#include "rail/detail/dead_letter_store.hpp"

#include <algorithm>
#include <iterator>
#include <utility>

#include "rail/detail/dead_letter_bridge.hpp"
#include "rail/detail/deadline.hpp"
#include "rail/detail/dlq_journal_binding.hpp"
#include "rail/detail/payload_ops.hpp"
#include "rail/error.hpp"

namespace rail::detail {

void EntryDeleter::operator()(DeadLetterInfo* entry) const noexcept {
  ops->delete_entry(entry);
}

/// Visiting: marks this thread as running code under a store's lock (scan and find callbacks;
/// frames nest: a callback may visit another DLQ), so that a call back into a store whose lock
/// this thread holds throws instead of deadlocking (std::mutex is not recursive).
class DeadLetterStore::Visiting {
 public:
  explicit Visiting(const DeadLetterStore* store) noexcept : self_(store), outer_(top()) {
    top() = this;
  }
  ~Visiting() { top() = outer_; }
  Visiting(const Visiting&) = delete;
  Visiting& operator=(const Visiting&) = delete;

  /// inside(store): this thread runs a callback of `store` (whose lock it holds).
  static bool inside(const DeadLetterStore* store) noexcept {
    for (const Visiting* v = top(); v != nullptr; v = v->outer_)
      if (v->self_ == store) return true;
    return false;
  }

 private:
  static Visiting*& top() noexcept {
    thread_local Visiting* frame = nullptr;
    return frame;
  }
  const DeadLetterStore* self_;
  Visiting* outer_;
};

DeadLetterStore::DeadLetterStore(DeadLetterBridge& bridge, DlqOptions options,
                                 const PayloadOps& ops)
    : bridge_(bridge), ops_(ops), options_(std::move(options)), age_alert_(options_.alert_age) {
  if (options_.journal.path.empty()) return;
  journal_ = std::make_unique<DlqJournalBinding>(options_.journal, ops_);
  JobId max_id = 0;
  for (EntryPtr& e : journal_->open(bridge_.name(), bridge_.now_ns())) {
    max_id = std::max(max_id, e->id);
    entries_.push_back(std::move(e));
  }
  // Restored ids keep their numbers: move the engine's id counter past them so no new job can
  // be given one (redrive keeps an entry's id).
  if (max_id != 0) bridge_.skip_ids_past(max_id);
  std::vector<Evicted> evicted;
  std::uint64_t ticket = 0;
  std::int64_t due = kNever;
  {
    std::lock_guard lock(mu_);
    while (entries_.size() > options_.max_entries) {
      evicted.push_back({entries_.front()->id, entries_.front()->name});
      entries_.pop_front();
    }
    ticket = tombstone_locked(TombstoneCause::evicted, evicted, 0);
    due = changed_locked();  // restored entries may be old already
  }
  settle(ticket);
  report(evicted);
  schedule_check(due);
}

DeadLetterStore::~DeadLetterStore() = default;

std::lock_guard<std::mutex> DeadLetterStore::locked() const {
  if (Visiting::inside(this))
    throw Error(ErrorCode::would_deadlock,
                "dlq() of queue '" + bridge_.name() +
                    "' was called from inside its own visit() or inspect() callback, which "
                    "holds its lock; expected the callback to keep what it needs (an id, a "
                    "copy) and act after visit() or inspect() returns");
  return std::lock_guard<std::mutex>(mu_);
}

std::size_t DeadLetterStore::size() {
  std::vector<Evicted> evicted;
  std::size_t n;
  std::uint64_t ticket;
  {
    auto lock = locked();
    ticket = expire_locked(evicted);
    n = entries_.size();
  }
  settle(ticket);
  report(evicted);
  return n;
}

void DeadLetterStore::scan(std::size_t offset, std::size_t limit,
                           FunctionRef<void(const DeadLetterInfo&)> fn) {
  std::vector<Evicted> evicted;
  std::uint64_t ticket;
  {
    auto lock = locked();
    ticket = expire_locked(evicted);
    Visiting visiting(this);  // after locked(): from here on a call back in is refused
    auto it =
        std::next(entries_.begin(), static_cast<std::ptrdiff_t>(std::min(offset, entries_.size())));
    for (std::size_t n = 0; it != entries_.end() && n < limit; ++it, ++n)
      fn(**it);
  }
  settle(ticket);
  report(evicted);
}

bool DeadLetterStore::find(JobId id, FunctionRef<void(const DeadLetterInfo&)> fn) {
  auto lock = locked();
  Visiting visiting(this);
  for (const auto& e : entries_) {
    if (e->id == id) {
      fn(*e);
      return true;
    }
  }
  return false;
}

bool DeadLetterStore::contains(JobId id) const {
  auto lock = locked();
  return std::any_of(entries_.begin(), entries_.end(),
                     [&](const EntryPtr& e) { return e->id == id; });
}

std::size_t DeadLetterStore::purge() {
  std::size_t n;
  std::uint64_t ticket = 0;
  {
    auto lock = locked();
    n = entries_.size();
    entries_.clear();
    if (journal_) ticket = journal_->append_tombstone(TombstoneCause::purged, {});
    rearm_alert_locked();
    (void)changed_locked();  // empty: the age alert re-arms, nothing to check
  }
  settle(ticket);
  return n;
}

std::string DeadLetterStore::journal_failure() const {
  return journal_ ? journal_->failure() : std::string{};
}

void DeadLetterStore::sync_journal() {
  if (journal_) journal_->sync();
}

void DeadLetterStore::push(EntryPtr entry, FunctionRef<void()> filed) {
  std::vector<Evicted> evicted;
  bool alert = false;
  std::size_t depth;
  std::string record;
  // Before the lock: other dead-letterings go on. A codec that throws costs the entry its place
  // in the file, never its place in the DLQ (this runs where a job ends).
  const bool journaled = journal_ && encode(*entry, record);
  std::uint64_t ticket = 0;
  std::int64_t due = kNever;
  {
    // Not locked(): the job flow files entries here, and a throw would lose one.
    std::lock_guard lock(mu_);
    ticket = expire_locked(evicted);
    const std::size_t first_bound = evicted.size();
    while (!entries_.empty() && entries_.size() >= options_.max_entries) {
      evicted.push_back({entries_.front()->id, entries_.front()->name});
      entries_.pop_front();
    }
    ticket = std::max(ticket, tombstone_locked(TombstoneCause::evicted, evicted, first_bound));
    if (journaled) ticket = std::max(ticket, journal_->append_entry(record, entry->id));
    entries_.push_back(std::move(entry));
    depth = entries_.size();
    if (options_.alert_depth && depth >= *options_.alert_depth && !alerted_) {
      alerted_ = true;
      alert = true;
    }
    due = changed_locked();
  }
  settle(ticket);
  filed();
  report(evicted);
  if (alert) fire_alert(depth);
  schedule_check(due);
}

std::uint64_t DeadLetterStore::expire_locked(std::vector<Evicted>& evicted) {
  if (!options_.retention) return 0;
  const std::int64_t now = bridge_.now_ns();
  const std::size_t first = evicted.size();
  while (!entries_.empty() &&
         aged_out(entries_.front()->dead_at.time_since_epoch().count(), *options_.retention, now)) {
    evicted.push_back({entries_.front()->id, entries_.front()->name});
    entries_.pop_front();
  }
  rearm_alert_locked();
  return tombstone_locked(TombstoneCause::evicted, evicted, first);
}

EntryPtr DeadLetterStore::take(JobId id, TombstoneCause cause, std::size_t* position) {
  EntryPtr out;
  std::uint64_t ticket = 0;
  std::int64_t due = kNever;
  {
    auto lock = locked();
    std::size_t at = 0;
    for (auto it = entries_.begin(); it != entries_.end(); ++it, ++at) {
      if ((*it)->id == id) {
        if (position) *position = at;
        out = std::move(*it);
        entries_.erase(it);
        if (journal_) ticket = journal_->append_tombstone(cause, {&id, 1});
        rearm_alert_locked();
        due = changed_locked();
        break;
      }
    }
  }
  settle(ticket);
  schedule_check(due);
  return out;
}

EntryPtr DeadLetterStore::take_front(TombstoneCause cause) {
  EntryPtr out;
  std::uint64_t ticket = 0;
  std::int64_t due = kNever;
  {
    auto lock = locked();
    if (entries_.empty()) return out;
    out = std::move(entries_.front());
    entries_.pop_front();
    if (journal_) ticket = journal_->append_tombstone(cause, {&out->id, 1});
    rearm_alert_locked();
    due = changed_locked();
  }
  settle(ticket);
  schedule_check(due);
  return out;
}

void DeadLetterStore::put_back(EntryPtr entry, std::size_t position) {
  std::string record;
  const bool journaled = journal_ && encode(*entry, record);
  std::uint64_t ticket = 0;
  std::int64_t due = kNever;
  {
    std::lock_guard lock(mu_);
    if (journaled) ticket = journal_->append_entry(record, entry->id);
    entries_.insert(std::next(entries_.begin(),
                              static_cast<std::ptrdiff_t>(std::min(position, entries_.size()))),
                    std::move(entry));
    due = changed_locked();
  }
  settle(ticket);
  schedule_check(due);
}

std::uint64_t DeadLetterStore::tombstone_locked(TombstoneCause cause,
                                                const std::vector<Evicted>& evicted,
                                                std::size_t first) {
  if (!journal_ || first == evicted.size()) return 0;
  std::vector<JobId> ids;
  ids.reserve(evicted.size() - first);
  for (std::size_t i = first; i < evicted.size(); ++i)
    ids.push_back(evicted[i].id);
  return journal_->append_tombstone(cause, ids);
}

void DeadLetterStore::settle(std::uint64_t ticket) {
  if (journal_) journal_->settle(ticket);
}

bool DeadLetterStore::encode(const DeadLetterInfo& e, std::string& out) const {
  return journal_->encode(e, bridge_.now_ns(), out);
}

void DeadLetterStore::rearm_alert_locked() {
  if (alerted_ && options_.alert_depth &&
      entries_.size() <= options_.alert_rearm_depth.value_or(*options_.alert_depth - 1))
    alerted_ = false;
}

std::int64_t DeadLetterStore::changed_locked() {
  if (!age_alert_.enabled()) return kNever;
  return age_alert_.changed(
      entries_.empty() ? std::nullopt
                       : std::optional(entries_.front()->dead_at.time_since_epoch().count()),
      bridge_.now_ns());
}

void DeadLetterStore::schedule_check(std::int64_t due) noexcept {
  if (!is_never(due)) bridge_.check_by(due);
}

std::int64_t DeadLetterStore::sweep_alerts(std::int64_t now) noexcept {
  if (!age_alert_.enabled()) return kNever;
  try {
    std::vector<Evicted> evicted;
    std::uint64_t ticket;
    std::int64_t next = kNever;
    bool fire = false;
    JobId oldest = 0;
    std::string name;
    std::int64_t age = 0;
    std::size_t depth = 0;
    {
      std::lock_guard lock(mu_);  // the timer's own call: never from inside a visit
      ticket = expire_locked(evicted);
      const std::optional<std::int64_t> filed =
          entries_.empty() ? std::nullopt
                           : std::optional(entries_.front()->dead_at.time_since_epoch().count());
      fire = age_alert_.check(filed, now, &next);
      if (fire) {
        oldest = entries_.front()->id;
        name = entries_.front()->name;
        age = now - *filed;
        depth = entries_.size();
      }
    }
    settle(ticket);
    report(evicted);
    if (fire) {
      bridge_.emit(EventKind::dlq_age_alert, oldest, name, depth, Duration{age});
      // As the depth alert's: never with the wheel held (the sweep holds it here).
      if (options_.on_age_alert)
        bridge_.after_wheel([cb = options_.on_age_alert, age] { cb(Duration{age}); });
    }
    return next;
  } catch (...) {  // no memory for the evicted list or the event's strings: again in a second
    return saturating_add(now, std::chrono::seconds(1));
  }
}

void DeadLetterStore::report(const std::vector<Evicted>& evicted) {
  for (const auto& e : evicted)
    bridge_.emit(EventKind::dlq_evicted, e.id, e.name, 0);
}

void DeadLetterStore::fire_alert(std::size_t depth) {
  bridge_.emit(EventKind::dlq_alert, 0, {}, depth);
  // Never with the wheel held (a lapse on the timer thread can dead-letter): the callback may
  // call back into the engine.
  if (options_.on_alert) bridge_.after_wheel([cb = options_.on_alert, depth] { cb(depth); });
}

RedriveStatus DeadLetterStore::redrive_entry(EntryPtr& entry, const RedriveOptions& options) {
  // The bridge takes the payload only once the queue has taken a slot for it: on any other
  // status, or a throw, the entry is whole and goes back.
  return bridge_.redrive(*entry, options);
}

RedriveStatus DeadLetterStore::redrive(JobId id, const RedriveOptions& options) {
  std::size_t position = 0;
  EntryPtr e = take(id, TombstoneCause::redriven, &position);
  if (!e) return RedriveStatus::not_found;
  RedriveStatus s;
  try {
    s = redrive_entry(e, options);
  } catch (...) {
    put_back(std::move(e), position);  // the queue threw before it took the entry
    throw;
  }
  // Back where it was (its age order decides retention): redrive failed, nothing lost.
  if (s != RedriveStatus::redriven) put_back(std::move(e), position);
  return s;
}

std::size_t DeadLetterStore::redrive_all(const RedriveOptions& options) {
  std::size_t n = 0;
  while (EntryPtr e = take_front(TombstoneCause::redriven)) {
    RedriveStatus s;
    try {
      s = redrive_entry(e, options);
    } catch (...) {
      put_back(std::move(e));  // the queue threw before it took the entry
      throw;
    }
    if (s != RedriveStatus::redriven) {
      put_back(std::move(e));
      break;
    }
    ++n;
  }
  return n;
}

}  // namespace rail::detail
