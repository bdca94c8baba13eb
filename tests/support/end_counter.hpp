// EndCounter: how many times each job ended (completed, dead-lettered, cancelled, discarded or
// forwarded),
// as observers saw it. Attach it with engine.on_event(counter.observer()); read it once the
// engine is quiet (after drain or shutdown).
#pragma once

#include <mutex>
#include <unordered_map>

#include "rail/event.hpp"

namespace rail::test {

struct EndCounter {
  [[nodiscard]] static bool is_end(EventKind kind) noexcept {
    return kind == EventKind::completed || kind == EventKind::dead_lettered ||
           kind == EventKind::cancelled || kind == EventKind::discarded ||
           kind == EventKind::forwarded;
  }
  void on(const Event& e) {
    if (!is_end(e.kind)) return;
    const std::lock_guard lock(mu);
    ++ends[e.job_id];
  }
  /// observer(): a callable for Engine::on_event; the counter must outlive the engine.
  [[nodiscard]] Observer observer() {
    return [this](const Event& e) { on(e); };
  }
  /// of(id): the ends seen for job `id` so far.
  [[nodiscard]] int of(JobId id) {
    const std::lock_guard lock(mu);
    const auto it = ends.find(id);
    return it == ends.end() ? 0 : it->second;
  }

  std::mutex mu;
  std::unordered_map<JobId, int> ends;
};

}  // namespace rail::test
