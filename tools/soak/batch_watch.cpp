// BatchWatch: see batch_watch.hpp.
#include "soak/batch_watch.hpp"

namespace rail::soak {

AddReceipt BatchWatch::add(Engine& engine, Producer& p,
                           const std::function<AddReceipt(JobBatch&)>& add) {
  if (!p.open) {
    Record* r;
    std::size_t n;
    {
      const std::lock_guard lock(mu_);
      r = &records_.emplace_back();
      n = records_.size();
    }
    JobBatchOptions o;
    o.name = "soak-" + std::to_string(n);
    o.on_complete = [r](const JobBatchSummary&) { r->complete.fetch_add(1); };
    o.on_success = [r](const JobBatchSummary&) { r->success.fetch_add(1); };
    p.open = engine.batch(std::move(o));  // throws once shutdown began: the record stays unmade
    r->made = true;
    p.members = &r->members;
  }
  const AddReceipt receipt = add(*p.open);
  if (receipt.status == AddStatus::added) p.members->push_back(receipt.id);
  if (p.members->size() >= size_) finish(p);
  return receipt;
}

void BatchWatch::finish(Producer& p) {
  if (!p.open) return;
  p.open->seal();
  p.open.reset();
  p.members = nullptr;
}

BatchWatch::Totals BatchWatch::check(JobLedger& ledger,
                                     const std::function<void(std::string)>& fail) const {
  Totals t;
  const std::lock_guard lock(mu_);
  for (const Record& r : records_) {
    if (!r.made) continue;
    ++t.batches;
    bool handed_back = false, all_completed = true;
    for (JobId id : r.members) {
      const Track& k = ledger.track(id);
      handed_back |= k.taken.load() != 0;
      all_completed &= k.completed.load() != 0;  // a completed life is its last
    }
    const int complete = r.complete.load(), success = r.success.load();
    const std::string which =
        "batch of " + std::to_string(r.members.size()) + " jobs (first " +
        (r.members.empty() ? std::string("none") : std::to_string(r.members.front())) + "): ";
    if (handed_back) {
      // Its batch may have completed before (a member dead-lettered, then redriven and handed
      // back): at most once, and never a success.
      if (complete > 1 || success != 0)
        fail(which + "with a member handed back, on_complete fired " + std::to_string(complete) +
             " and on_success " + std::to_string(success) + " times");
      continue;
    }
    if (complete != 1)
      fail(which + "on_complete fired " + std::to_string(complete) + " times, expected once");
    if (success != (all_completed ? 1 : 0))
      fail(which + "on_success fired " + std::to_string(success) + " times with " +
           (all_completed ? "every member completed" : "a member not completed"));
    if (success == 1) ++t.succeeded;
  }
  return t;
}

}  // namespace rail::soak
