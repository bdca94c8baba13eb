// ShareWatch: the soak's priorities and fair shares. Contract: share_watch.hpp.
#include "soak/share_watch.hpp"

#include <string>

namespace rail::soak {

ShareWatch::ShareWatch(const Config& c, std::uint64_t max_id)
    : cfg_(c),
      max_id_(max_id),
      stamps_(c.priorities > 1 ? std::make_unique<Stamps[]>(max_id + 1) : nullptr) {}

std::uint32_t ShareWatch::level_of(std::uint64_t plan) const noexcept {
  return cfg_.priorities > 1 ? static_cast<std::uint32_t>((plan >> 40) % cfg_.priorities) : 0;
}

std::uint32_t ShareWatch::tenant_of(std::uint64_t plan) const noexcept {
  // Half the jobs are tenant 0's (the heavy one), the rest spread over the others.
  if (cfg_.tenants <= 1 || ((plan >> 48) & 1) == 0) return 0;
  return 1 + static_cast<std::uint32_t>((plan >> 49) % (cfg_.tenants - 1));
}

void ShareWatch::declare(QueueOptions& qo) const {
  qo.priorities = std::max<std::uint32_t>(1, cfg_.priorities);
  qo.priority_max_wait = cfg_.priority_max_wait;
  if (cfg_.tenants == 0) return;
  qo.tenant_window = 2;
  qo.tenants.push_back(
      TenantShare{.tenant = "tenant-0", .weight = 3, .max_active = cfg_.tenant_cap});
}

void ShareWatch::choose(JobOptions& o, std::uint64_t plan) const {
  o.priority = static_cast<std::uint8_t>(level_of(plan));
  if (cfg_.tenants > 0) o.tenant = std::string("tenant-").append(std::to_string(tenant_of(plan)));
}

void ShareWatch::note_added(JobId id, std::uint64_t plan, bool delayed) noexcept {
  if (!stamps_ || id > max_id_ || delayed) return;
  stamps_[id].level = static_cast<std::uint8_t>(level_of(plan));
}

bool ShareWatch::enter(std::uint64_t plan, bool first_life) noexcept {
  if (cfg_.tenants == 0 || !first_life || tenant_of(plan) != 0) return false;
  const std::uint32_t now = inside_.fetch_add(1) + 1;
  std::uint32_t m = most_inside_.load();
  while (now > m && !most_inside_.compare_exchange_weak(m, now)) {
  }
  return true;
}

void ShareWatch::leave(bool counted) noexcept {
  if (counted) inside_.fetch_sub(1);
}

void ShareWatch::on_event(const Event& e) noexcept {
  if (!stamps_ || e.job_id == 0 || e.job_id > max_id_) return;
  const std::int64_t at = e.at.time_since_epoch().count();
  std::int64_t none = 0;
  // relaxed: read once every thread is done (joined).
  if (e.kind == EventKind::added)
    stamps_[e.job_id].added.compare_exchange_strong(none, at, std::memory_order_relaxed);
  else if (e.kind == EventKind::started)
    stamps_[e.job_id].started.compare_exchange_strong(none, at, std::memory_order_relaxed);
}

void ShareWatch::report(Report& rep, Violations& v) const {
  rep.tenant_most_active = most_inside_.load();
  if (cfg_.tenants > 0 && !cfg_.leases && rep.tenant_most_active > cfg_.tenant_cap)
    v.add(std::to_string(rep.tenant_most_active) +
          " handlers of tenant-0 ran at once; its cap is " + std::to_string(cfg_.tenant_cap));
  if (!stamps_) return;
  std::array<double, 8> sum{};
  std::array<std::uint64_t, 8> n{};
  for (std::uint64_t id = 1; id <= max_id_; ++id) {
    const Stamps& s = stamps_[id];
    const std::int64_t a = s.added.load(std::memory_order_relaxed);
    const std::int64_t b = s.started.load(std::memory_order_relaxed);
    if (s.level >= sum.size() || a == 0 || b < a) continue;
    sum[s.level] += static_cast<double>(b - a) / 1e6;
    ++n[s.level];
  }
  for (std::size_t l = 0; l < sum.size(); ++l)
    rep.level_wait_ms[l] = n[l] ? sum[l] / static_cast<double>(n[l]) : 0;
}

}  // namespace rail::soak
