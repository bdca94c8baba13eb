// GroupLedger: the soak's account of its FIFO groups (Config::groups), checked after the run as
// invariant 7: within each group, (a) the jobs added without a delay or a dedup id (nothing can
// move them in their line) start for the first time in add order, and (b) a job's first start
// comes after the end of the job that started before it (one job of a group at a time: its end
// is reported before the turn goes on).
//
// How: every `started` and end event of a job's first life is stamped from one counter, in the
// observer, on the thread that raises the event. The engine raises an end before it hands the
// group's turn on and a start after a worker took the job, so for two jobs of one group the
// stamps order as the engine did. Producers note each accepted job's group after its add
// returns (the job may have run by then: the stamps are by id, the groups are read after the
// run). Each group belongs to one producer, whose ids rise in its add order (one thread's ids
// do), so a group's add order is its id order.
// Threading: note_added from producers (each id once), on_start / on_end from observers, check
// once every thread is done. Memory: 32 bytes per job id.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace rail::soak {

class GroupLedger {
 public:
  /// GroupLedger(max_id, groups): ids 1 .. max_id, groups 0 .. groups-1 (0 groups: a no-op).
  GroupLedger(std::uint64_t max_id, std::uint32_t groups);

  [[nodiscard]] bool on() const noexcept { return groups_ != 0; }
  /// group_name(g): the JobOptions::group of group g.
  [[nodiscard]] static std::string group_name(std::uint32_t g);
  /// note_added(id, g, ordered): job id was added in group g; ordered: without a delay or a
  /// dedup id, so its line keeps it in add order.
  void note_added(std::uint64_t id, std::uint32_t g, bool ordered) noexcept;
  /// on_start(id) / on_end(id): a `started` event / an end event (completed, dead_lettered,
  /// cancelled, discarded) of job id. Only the first life counts: a redriven job is in no group.
  void on_start(std::uint64_t id) noexcept;
  void on_end(std::uint64_t id) noexcept;
  /// check(violation): invariant 7 over every group; violation(text) for each breach. Returns
  /// the grouped jobs that started.
  std::uint64_t check(const std::function<void(std::string)>& violation) const;

 private:
  static constexpr std::uint32_t kNoGroup = 0xFFFF'FFFF;
  struct Entry {
    std::atomic<std::uint64_t> start{0};  // stamp of the first start (0: none)
    std::atomic<std::uint64_t> end{0};    // stamp of the first end (0: none)
    std::uint32_t group = kNoGroup;       // set by its producer
    bool ordered = false;
  };
  std::uint64_t max_id_;
  std::uint32_t groups_;
  std::unique_ptr<Entry[]> entries_;
  std::atomic<std::uint64_t> clock_{0};
};

}  // namespace rail::soak
