// FlowWatch: see flow_watch.hpp.
#include "soak/flow_watch.hpp"

namespace rail::soak {

bool FlowWatch::make_parent(Producer& p, JobOptions& o) const {
  if (!on() || ++p.fresh % every_ != 0 || p.recent.empty()) return false;
  o.after.clear();
  for (std::size_t k = 0; k < p.recent.size(); ++k) {
    // fail, ignore, cancel, by the edge's place (the first edge fails: BullMQ's default).
    static constexpr ChildFailure kPolicies[] = {ChildFailure::fail, ChildFailure::ignore,
                                                 ChildFailure::cancel};
    o.after.emplace_back(p.recent[k], kPolicies[(p.fresh / every_ + k) % 3]);
  }
  o.delay = Duration{0};
  return true;
}

void FlowWatch::accepted(Producer& p, JobId id) {
  p.recent.push_back(id);
  if (p.recent.size() > kChildren) p.recent.pop_front();
}

void FlowWatch::on_start(JobId id, const std::vector<ChildEnd>& children, Violations& v) noexcept {
  if (children.empty()) return;
  started_.fetch_add(1);
  for (const ChildEnd& c : children) {
    const bool forgotten = c.end.error.find("no longer says how") != std::string::npos;
    if (c.end.status == JobStatus::unknown && !forgotten)
      v.add("parent " + std::to_string(id) + " started before its child " +
            std::to_string(c.end.id) + " ended");
    else if (!c.end.completed() && c.on_failure != ChildFailure::ignore && !forgotten)
      v.add("parent " + std::to_string(id) + " started though its child " +
            std::to_string(c.end.id) + " ended " + std::string(to_string(c.end.status)) +
            " on an edge that does not ignore it");
  }
}

void FlowWatch::on_event(const Event& e, JobLedger& ledger, Violations& v) noexcept {
  if (e.kind != EventKind::dead_lettered || e.reason != DeadLetterReason::dependency_failed) return;
  failed_.fetch_add(1);
  // A parent waits only in its first life (a redriven one waits for nothing); once redriven
  // (its entry is filed before this event), its next life's starts may come first.
  if (!ledger.in_range(e.job_id)) return;
  const Track& t = ledger.track(e.job_id);
  if (t.started.load() != 0 && t.redriven.load() == 0 && t.redrive_tried.load() == 0)
    v.add("parent " + std::to_string(e.job_id) +
          " was dead-lettered for a failed dependency after it had started");
}

}  // namespace rail::soak
