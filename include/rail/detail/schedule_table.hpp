// ScheduleTable: one queue's repeatable jobs (schedule.hpp). Cold path, simple and locked: a
// schedule costs a lock per due time and per run's end, never per job of the queue.
//
// Each schedule owns a TimerNode on the engine's wheel, tagged (queue, kTagBit | index) so that
// the queue's fire() routes it here. The wheel is single-owner (engine_core.hpp): upsert and
// remove only mark the entry (rearm) under mu_ and ask for a drain; the wheel's owner links or
// unlinks the node in drain(), which every timer pass runs before it fires anything, so a removed
// schedule never fires. fire() (the wheel's owner) counts the due times that passed, decides by
// the entry's options how many runs start, re-links the node at the next due time and hands the
// adds to after_wheel: a run's add may raise events or file a DLQ entry, user code that must not
// run with the wheel held.
//
// Runs: each run is a job added with a copy of the payload (the typed queue's RunAdder, which
// never waits for room: it may run on the timer thread), watched by an EndWaiter registered
// before the job is published, so its end is never missed. `live` counts runs added and not
// ended; a run that ends starts an owed run (MissedRuns) when the options allow. The entry keeps
// its live runs' waiters (a waiter whose last owner drops it leaves the tracker); their callbacks
// hold the entry weakly, so a removed schedule is freed once the wheel let go of its node.
// Invariants (under mu_; counts in an entry's tally): live = runs being added + runs added whose
// end was not yet handled; owed <= max_catch_up; an entry is in by_id_ iff !removed; slots_[i]
// holds an entry until the wheel's owner has unlinked a removed one's node.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "rail/add_receipt.hpp"
#include "rail/detail/end_tracker.hpp"
#include "rail/detail/engine_core.hpp"
#include "rail/schedule.hpp"

namespace rail::detail {

class ScheduleTable {
 public:
  /// RunAdder(watch): adds one run's job without waiting for room, registering its waiter in
  /// *watch before the job is published; throws as Queue::add does.
  using RunAdder = std::function<AddReceipt(std::shared_ptr<EndWaiter>* watch)>;
  /// Definition: what a schedule runs and when; replaced whole by an upsert.
  struct Definition {
    Schedule when;
    ScheduleOptions options;
    std::string job_name;
    RunAdder add;
  };

  /// A wheel tag's low 32 bits name a slot index (< 2^29), the lease sweep (all ones) or, with
  /// this bit, a schedule.
  static constexpr std::uint32_t kTagBit = 0x4000'0000u;
  [[nodiscard]] static constexpr bool owns_tag(std::uint32_t tag) noexcept {
    return (tag & kTagBit) != 0 && tag != 0xFFFF'FFFFu;
  }

  ScheduleTable(EngineCore& core, std::uint16_t queue_index, std::string queue_name);
  ~ScheduleTable();
  ScheduleTable(const ScheduleTable&) = delete;
  ScheduleTable& operator=(const ScheduleTable&) = delete;

  /// upsert(id, def): declares schedule `id`, or replaces its definition (see schedule.hpp).
  ScheduleInfo upsert(std::string_view id, Definition def);
  /// remove(id): no further due times; owed runs are dropped, live runs go on. False if none.
  bool remove(std::string_view id);
  [[nodiscard]] std::optional<ScheduleInfo> info(std::string_view id) const;
  /// list(): every schedule, by id.
  [[nodiscard]] std::vector<ScheduleInfo> list() const;

  // --- the wheel's owner ------------------------------------------------------------------------
  /// drain(wheel): (re)link or unlink the nodes of entries upsert/remove changed.
  void drain(Wheel& wheel) noexcept;
  /// fire(tag, now, wheel): schedule `tag`'s due time came.
  void fire(std::uint32_t tag, std::int64_t now, Wheel& wheel) noexcept;

 private:
  struct Entry;
  /// sync(): link what changed now (cold callers), or let the wheel's owner do it.
  void sync();
  /// first_due(e, now, wall): the entry's first due time from now (under mu_).
  void first_due(Entry& e, std::int64_t now, WallTime wall) const;
  /// add_runs(e, n): adds n runs that `live` already counts (outside mu_ and the wheel).
  void add_runs(const std::shared_ptr<Entry>& e, std::uint64_t n);
  void run_ended(const std::weak_ptr<Entry>& weak, JobId id);
  /// failure_text(id, what): the error of a run of schedule `id` whose add threw `what`.
  [[nodiscard]] std::string failure_text(const std::string& id, const char* what) const;
  /// start_later(e, n): add_runs once the wheel is released (at once when it is not held).
  void start_later(std::shared_ptr<Entry> e, std::uint64_t n);
  [[nodiscard]] static ScheduleInfo info_of(const Entry& e);
  /// owe(tally, o, missed): `missed` due times passed while no run could start for them (a run
  /// of the schedule is live, no overlap): skipped, or owed for when it ends, as o.missed says.
  static void owe(ScheduleInfo& tally, const ScheduleOptions& o, std::uint64_t missed);

  EngineCore& core_;
  const std::uint16_t queue_index_;
  const std::string queue_name_;
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<Entry>> slots_;  // by tag index
  std::vector<std::uint32_t> free_;            // unused indices of slots_
  std::map<std::string, std::uint32_t, std::less<>> by_id_;
  bool dirty_ = false;  // some entry needs drain(); under mu_
};

}  // namespace rail::detail
