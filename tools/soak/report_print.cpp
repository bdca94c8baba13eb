// The soak's report in words: what ran, what it exercised, the checker's totals and the verdict
// (soak.hpp's print).
#include <algorithm>
#include <cstdio>
#include <string>

#include "soak/soak.hpp"

namespace rail::soak {

void print(const Report& r, const Config& c, std::ostream& out) {
  char line[512];
  std::snprintf(line, sizeof line,
                "soak: %llu jobs accepted in %.1f s (%s clock, %u producers, %u workers%s, seed "
                "%llu)\n",
                static_cast<unsigned long long>(r.accepted), r.seconds,
                c.manual_clock ? "manual" : "real", c.producers, c.workers,
                c.shared_pool ? " of the shared pool" : "",
                static_cast<unsigned long long>(c.seed));
  out << line;
  std::snprintf(
      line, sizeof line,
      "  ended: %llu completed, %llu dead-lettered, %llu cancelled, %llu discarded\n"
      "  deliveries %llu, failed attempts %llu, lease lapses %llu, late outcomes fenced "
      "%llu\n"
      "  duplicates merged %llu, re-adds after the window %llu, cancels accepted %llu, "
      "delayed %llu\n"
      "  pauses %llu (%llu holding back work, %llu starts already under way)\n",
      static_cast<unsigned long long>(r.completed),
      static_cast<unsigned long long>(r.dead_lettered),
      static_cast<unsigned long long>(r.cancelled), static_cast<unsigned long long>(r.discarded),
      static_cast<unsigned long long>(r.deliveries),
      static_cast<unsigned long long>(r.failed_attempts), static_cast<unsigned long long>(r.stalls),
      static_cast<unsigned long long>(r.late_outcomes),
      static_cast<unsigned long long>(r.duplicates_merged),
      static_cast<unsigned long long>(r.duplicates_new),
      static_cast<unsigned long long>(r.cancels_accepted),
      static_cast<unsigned long long>(r.delayed), static_cast<unsigned long long>(r.pauses),
      static_cast<unsigned long long>(r.pauses_with_work),
      static_cast<unsigned long long>(r.starts_while_paused));
  out << line;
  if (c.async > 0) {
    std::snprintf(line, sizeof line, "  async: %llu deliveries completed %s\n",
                  static_cast<unsigned long long>(r.deferred),
                  c.coroutines ? "by a resumed coroutine (rail::Task)" : "by a Completion");
    out << line;
  }
  if (c.groups > 0) {
    std::snprintf(line, sizeof line, "  FIFO groups: %llu grouped jobs started, in %u groups\n",
                  static_cast<unsigned long long>(r.grouped_started),
                  std::max<std::uint32_t>(1, c.groups / c.producers) * c.producers);
    out << line;
  }
  if (c.priorities > 1) {
    out << "  priorities: mean wait (ms) per level, 0 first:";
    for (std::uint32_t l = 0; l < c.priorities && l < r.level_wait_ms.size(); ++l) {
      std::snprintf(line, sizeof line, " %.2f", r.level_wait_ms[l]);
      out << line;
    }
    out << "\n";
  }
  if (c.tenants > 0) {
    std::snprintf(
        line, sizeof line,
        "  tenants: %u, tenant-0 (weight 3, cap %u) ran at most %llu handlers at once%s\n",
        c.tenants, c.tenant_cap, static_cast<unsigned long long>(r.tenant_most_active),
        c.leases ? " (not checked with leases on)" : "");
    out << line;
  }
  if (c.timeout != Duration::max()) {
    std::snprintf(line, sizeof line, "  timeouts: %llu attempts timed out (timeout %lld ms)\n",
                  static_cast<unsigned long long>(r.timed_out),
                  static_cast<long long>(c.timeout.count() / 1'000'000));
    out << line;
  }
  if (c.flow_every > 0) {
    std::snprintf(line, sizeof line,
                  "  flows: every %u-th job a parent; %llu parent starts, %llu dead-lettered for "
                  "a failed dependency, %llu refused (a child forgotten)\n",
                  c.flow_every, static_cast<unsigned long long>(r.parents_started),
                  static_cast<unsigned long long>(r.dependency_failed),
                  static_cast<unsigned long long>(r.parents_refused));
    out << line;
  }
  if (c.batch_size > 0) {
    std::snprintf(line, sizeof line, "  batches: %llu of %u jobs, %llu succeeded\n",
                  static_cast<unsigned long long>(r.batches), c.batch_size,
                  static_cast<unsigned long long>(r.batches_succeeded));
    out << line;
  }
  if (c.expire_after != Duration::max()) {
    std::snprintf(line, sizeof line,
                  "  expiry: %llu jobs expired unstarted (expire_after %lld ms)\n",
                  static_cast<unsigned long long>(r.expired),
                  static_cast<long long>(c.expire_after.count() / 1'000'000));
    out << line;
  }
  if (c.downstream) {
    std::snprintf(
        line, sizeof line,
        "  downstream: %llu pushbacks, %llu throttled, %llu limit changes, at most %llu "
        "handlers inside (concurrency %u)\n",
        static_cast<unsigned long long>(r.pushbacks), static_cast<unsigned long long>(r.throttled),
        static_cast<unsigned long long>(r.limit_changes),
        static_cast<unsigned long long>(r.most_inside), std::max<std::uint32_t>(1, c.workers / 2));
    out << line;
  }
  std::snprintf(
      line, sizeof line,
      "  debounced %llu, redriven %llu, delayed jobs cancelled at once %llu, handed "
      "back after shutdown %llu\n"
      "checker: ok %llu, lost %llu, duplicated %llu, late outcomes applied %llu\n",
      static_cast<unsigned long long>(r.debounced), static_cast<unsigned long long>(r.redriven),
      static_cast<unsigned long long>(r.delayed_cancelled),
      static_cast<unsigned long long>(r.handed_back), static_cast<unsigned long long>(r.ok_jobs),
      static_cast<unsigned long long>(r.lost), static_cast<unsigned long long>(r.duplicated),
      static_cast<unsigned long long>(r.late_applied));
  out << line;
  for (const auto& s : r.first_violations)
    out << "  VIOLATION " << s << "\n";
  out << (r.ok() ? "invariants: all hold\n"
                 : "invariants: " + std::to_string(r.violations) + " violations\n");
}

}  // namespace rail::soak
