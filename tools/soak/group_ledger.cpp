// GroupLedger: the soak's account of its FIFO groups. Contract: group_ledger.hpp.
#include "soak/group_ledger.hpp"

#include <algorithm>
#include <vector>

namespace rail::soak {

GroupLedger::GroupLedger(std::uint64_t max_id, std::uint32_t groups)
    : max_id_(max_id),
      groups_(groups),
      entries_(groups != 0 ? std::make_unique<Entry[]>(max_id + 1) : nullptr) {}

std::string GroupLedger::group_name(std::uint32_t g) {
  return std::string("group-").append(std::to_string(g));
}

void GroupLedger::note_added(std::uint64_t id, std::uint32_t g, bool ordered) noexcept {
  if (!on() || id > max_id_) return;
  entries_[id].group = g;
  entries_[id].ordered = ordered;
}

void GroupLedger::on_start(std::uint64_t id) noexcept {
  if (!on() || id > max_id_) return;
  Entry& e = entries_[id];
  if (e.end.load(std::memory_order_relaxed) != 0) return;  // a later life's start
  // relaxed: the stamps' order is the counter's modification order, which follows the events'
  // causal order (an end raised before a hand-off, a start after the pop that followed it).
  const std::uint64_t stamp = clock_.fetch_add(1, std::memory_order_relaxed) + 1;
  std::uint64_t none = 0;
  e.start.compare_exchange_strong(none, stamp, std::memory_order_relaxed);
}

void GroupLedger::on_end(std::uint64_t id) noexcept {
  if (!on() || id > max_id_) return;
  const std::uint64_t stamp = clock_.fetch_add(1, std::memory_order_relaxed) + 1;
  std::uint64_t none = 0;
  entries_[id].end.compare_exchange_strong(none, stamp, std::memory_order_relaxed);
}

std::uint64_t GroupLedger::check(const std::function<void(std::string)>& violation) const {
  if (!on()) return 0;
  struct Started {
    std::uint64_t id, start, end;
    bool ordered;
  };
  std::vector<std::vector<Started>> by_group(groups_);
  std::uint64_t started = 0;
  for (std::uint64_t id = 1; id <= max_id_; ++id) {
    const Entry& e = entries_[id];
    const std::uint64_t start = e.start.load(std::memory_order_relaxed);
    if (e.group == kNoGroup || e.group >= groups_ || start == 0) continue;
    by_group[e.group].push_back({id, start, e.end.load(std::memory_order_relaxed), e.ordered});
    ++started;
  }
  for (std::uint32_t g = 0; g < groups_; ++g) {
    std::vector<Started>& jobs = by_group[g];  // in id order: add order
    std::uint64_t last_ordered = 0, last_id = 0;
    for (const Started& j : jobs) {
      if (!j.ordered) continue;
      if (j.start < last_ordered)
        violation(group_name(g) + ": job " + std::to_string(j.id) + " started before job " +
                  std::to_string(last_id) + ", which was added before it");
      last_ordered = j.start;
      last_id = j.id;
    }
    std::sort(jobs.begin(), jobs.end(),
              [](const Started& a, const Started& b) { return a.start < b.start; });
    for (std::size_t k = 1; k < jobs.size(); ++k)
      if (jobs[k - 1].end == 0 || jobs[k].start < jobs[k - 1].end)
        violation(group_name(g) + ": job " + std::to_string(jobs[k].id) + " started (stamp " +
                  std::to_string(jobs[k].start) + ") while job " + std::to_string(jobs[k - 1].id) +
                  " of its group had not ended (started " + std::to_string(jobs[k - 1].start) +
                  ", ended " + std::to_string(jobs[k - 1].end) + ")");
  }
  return started;
}

}  // namespace rail::soak
