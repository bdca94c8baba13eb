// KeptAdds: the adds a queue keeps for after a running job that holds their dedup id
// (DedupOptions::keep_last_if_active): at most one per job, the newest replacing an older one,
// added when the job ends (PayloadHooks::run_deferred) or handed back at shutdown, with the trace
// context its producer had (the add runs on another thread, whose scope is not the producer's).
//
// Guarantee: a kept add is taken exactly once — by the end of its job (take), or by shutdown's
// take_leftovers (take_all) — never lost and never run twice. Whether an add may be kept at all
// is the job's keep gate's decision (DedupClaims::keep_while_active), made under this lock so
// that the record and the gate move together.
// Threading: every call takes the lock; cold (one entry per running job with a kept add).
// Payloads are held in PayloadBoxes of the queue's payload type (payload_ops.hpp).
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "rail/detail/payload_ops.hpp"
#include "rail/options.hpp"
#include "rail/shutdown_report.hpp"
#include "rail/trace_context.hpp"

namespace rail::detail {

class KeptAdds {
 public:
  explicit KeptAdds(const PayloadOps& ops) noexcept : ops_(ops) {}

  /// Kept: an add kept until the running job it duplicates ends.
  struct Kept {
    PayloadBox data;
    std::string name;
    JobOptions options;
  };

  /// keep(owner, name, data, o, gate): keeps the add of the payload at `data` for after job
  /// `owner`. Kept before and not taken yet, whatever the job's state now (a lapse may have put
  /// it back to waiting): the newest wins, in place. Else, under the lock, gate(keep, undo)
  /// decides (keep() records the add, undo() gives the payload back to `data`): false when
  /// nothing was kept.
  template <class Gate>
  bool keep(JobId owner, std::string_view name, void* data, const JobOptions& o, Gate&& gate) {
    const std::lock_guard lock(mu_);
    if (auto it = adds_.find(owner); it != adds_.end()) {
      ops_.replace(it->second.data.get(), data);
      it->second.name.assign(name);
      it->second.options = captured(o);
      return true;
    }
    return gate(
        [&] {
          adds_.emplace(owner, Kept{PayloadBox(ops_, data), std::string(name), captured(o)});
        },
        [&] {
          auto kept = adds_.find(owner);
          ops_.replace(data, kept->second.data.get());  // the caller owns it
          adds_.erase(kept);
        });
  }

  /// take(owner): the add kept for job `owner`, which ended; nullopt if none.
  std::optional<Kept> take(JobId owner) {
    const std::lock_guard lock(mu_);
    auto it = adds_.find(owner);
    if (it == adds_.end()) return std::nullopt;
    std::optional<Kept> out(std::move(it->second));
    adds_.erase(it);
    return out;
  }

  /// take_all(f): f(kept&&) for every kept add, which leaves (shutdown's take_leftovers).
  template <class F>
  void take_all(F&& f) {
    const std::lock_guard lock(mu_);
    for (auto& [owner, kept] : adds_)
      f(std::move(kept));
    adds_.clear();
  }

  /// list(report, queue): each kept add as a job that never started.
  void list(ShutdownReport& report, const std::string& queue) const {
    const std::lock_guard lock(mu_);
    for (const auto& [owner, kept] : adds_)
      report.not_started.push_back(LeftoverJob{queue, 0, kept.name, 0});
  }

 private:
  /// captured(o): o with the adding thread's trace context (TraceScope) made explicit, as the
  /// add itself would have taken it: the kept add runs later, on the thread that ends the job.
  static JobOptions captured(const JobOptions& o) {
    JobOptions out = o;
    if (!out.trace && current_trace().valid()) out.trace = current_trace();
    return out;
  }

  const PayloadOps& ops_;
  mutable std::mutex mu_;
  std::unordered_map<JobId, Kept> adds_;
};

}  // namespace rail::detail
