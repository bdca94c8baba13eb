// Option validation: every message names the field, the value given and what is expected.
#include "rail/options.hpp"

#include <string>

#include "rail/backoff.hpp"
#include "rail/detail/fifo_groups.hpp"
#include "rail/detail/job_slot.hpp"
#include "rail/detail/ready_levels.hpp"
#include "rail/detail/validation.hpp"
#include "rail/downstream.hpp"
#include "rail/error.hpp"
#include "rail/schedule.hpp"

namespace rail {
namespace {

std::string ns(Duration d) {
  return std::to_string(d.count()) + " ns";
}

[[noreturn]] void bad(std::string_view where, std::string_view field, const std::string& value,
                      std::string_view expected) {
  throw Error(ErrorCode::invalid_option, std::string(where) + "." + std::string(field) + " is " +
                                             value + "; expected " + std::string(expected));
}

}  // namespace

namespace detail {
namespace {
/// quoted_start(name): the name's first 40 bytes in quotes, control characters shown as '?',
/// for a message about a bad name (a message must not carry a newline or a NUL itself).
std::string quoted_start(std::string_view name) {
  std::string out;
  out.reserve(44);
  out.append(1, '\'').append(name.substr(0, 40)).append(name.size() > 40 ? "...'" : "'");
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) c = '?';
  return out;
}
}  // namespace

void validate_name(std::string_view kind, std::string_view name) {
  const std::string where(kind);
  if (name.empty() || name.find_first_not_of(" \t\n\r\f\v") == std::string_view::npos)
    bad(where, "name", name.empty() ? std::string("empty") : "blank",
        "a name with a visible character");
  if (name.size() > kMaxNameBytes)
    bad(where, "name", quoted_start(name) + ", " + std::to_string(name.size()) + " bytes long",
        "at most " + std::to_string(kMaxNameBytes) + " bytes");
  for (const char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7F)
      bad(where, "name", quoted_start(name) + " with control character " + std::to_string(u),
          "printable characters only (names appear in events, logs and the DLQ journal)");
  }
}
}  // namespace detail

void validate(const Backoff& b, std::string_view where) {
  if (b.delay.count() < 0) bad(where, "backoff.delay", ns(b.delay), "a duration >= 0");
  if (b.cap.count() < 0) bad(where, "backoff.cap", ns(b.cap), "a duration >= 0");
  if ((b.kind == BackoffKind::fixed || b.kind == BackoffKind::exponential) &&
      b.delay.count() == 0 && b.jitter == Jitter::decorrelated)
    bad(where, "backoff.delay", "0 with decorrelated jitter",
        "a positive base delay (decorrelated jitter draws from [delay, 3 * previous])");
  if (b.kind == BackoffKind::none && b.jitter != Jitter::none)
    bad(where, "backoff.jitter", "set with backoff kind none",
        "a fixed or exponential backoff to apply jitter to");
}

void validate(const DownstreamOptions& o, std::string_view name) {
  const std::string where = "DownstreamOptions('" + std::string(name) + "')";
  if (o.concurrency == 0u)
    bad(where, "concurrency", "0", "1 or more jobs at once (leave it unset for no limit)");
  if (!o.rate) return;
  const RateLimit& r = *o.rate;
  const std::string limit = std::to_string(RateLimit::kMaxTokens);
  if (r.per.count() <= 0) bad(where, "rate.per", ns(r.per), "a positive period");
  if (r.per == Duration::max())
    bad(where, "rate.per", "Duration::max()", "a finite period (leave rate unset for no limit)");
  if (r.max == 0) bad(where, "rate.max", "0", "1 or more starts per rate.per");
  if (r.max > RateLimit::kMaxTokens)
    bad(where, "rate.max", std::to_string(r.max), "at most RateLimit::kMaxTokens (" + limit + ")");
  // One token per nanosecond at most: the refill count then grows no faster than the clock and
  // reaches its clamp (2^61) only after 73 years (detail/downstream_limits.hpp, "Bounds").
  if (r.max > static_cast<std::uint64_t>(r.per.count()))
    bad(where, "rate.max", std::to_string(r.max) + " per " + ns(r.per),
        "at most one start per nanosecond (rate.max <= rate.per in ns)");
  if (r.kind == RateLimit::Kind::window) {
    if (r.max > RateLimit::kMaxWindowStarts)
      bad(where, "rate.max", std::to_string(r.max) + " for a window",
          "at most RateLimit::kMaxWindowStarts (" + std::to_string(RateLimit::kMaxWindowStarts) +
              ") starts per window, whose times it keeps; for more, a token bucket "
              "(RateLimit::token_bucket)");
    if (r.burst)
      bad(where, "rate.burst", std::to_string(*r.burst) + " for a window",
          "unset: a burst is a token bucket's (RateLimit::token_bucket(max, per, burst)); a window "
          "allows `max` starts at once and none more within `per`");
    return;
  }
  if (r.kind != RateLimit::Kind::token_bucket)
    bad(where, "rate.kind", std::to_string(static_cast<int>(r.kind)),
        "RateLimit::Kind::window or RateLimit::Kind::token_bucket");
  if (r.burst && (*r.burst == 0 || *r.burst > RateLimit::kMaxTokens))
    bad(where, "rate.burst", std::to_string(*r.burst),
        "1 .. RateLimit::kMaxTokens (" + limit + "), or unset for the same as rate.max");
}

namespace detail {

void validate_job_options(const JobOptions& o, std::string_view where) {
  // The common case (defaults) must cost a few compares: this runs on every add.
  if (o.max_attempts < 1) [[unlikely]]
    bad(where, "max_attempts", std::to_string(o.max_attempts),
        "1 or more (max_attempts counts every try, including the first)");
  // The slot keeps attempt and delivery counts in 16 bits (job_slot.hpp): one bound, one place.
  if (o.max_attempts > detail::kMaxAttempts) [[unlikely]]
    bad(where, "max_attempts", std::to_string(o.max_attempts),
        "at most " + std::to_string(detail::kMaxAttempts) + " (SQS allows 1000)");
  if (o.visibility_timeout && o.visibility_timeout->count() <= 0) [[unlikely]]
    bad(where, "visibility_timeout", ns(*o.visibility_timeout),
        "a positive lease length (Duration::max() for none)");
  if (o.timeout && o.timeout->count() <= 0) [[unlikely]]
    bad(where, "timeout", ns(*o.timeout), "a positive run time (Duration::max() for none)");
  if (o.delay.count() < 0) [[unlikely]]
    bad(where, "delay", ns(o.delay), "a duration >= 0");
  if (o.expire_after && o.expire_after->count() <= 0) [[unlikely]]
    bad(where, "expire_after", ns(*o.expire_after), "a positive wait (Duration::max() for none)");
  if (o.backoff.kind != BackoffKind::none || o.backoff.jitter != Jitter::none) [[unlikely]]
    validate(o.backoff, where);
  if (o.group.size() > detail::FifoGroups::kMaxKeyBytes) [[unlikely]]
    bad(where, "group", std::to_string(o.group.size()) + " bytes",
        "at most " + std::to_string(detail::FifoGroups::kMaxKeyBytes) + " bytes");
  if (o.tenant.size() > detail::FifoGroups::kMaxKeyBytes) [[unlikely]]
    bad(where, "tenant", std::to_string(o.tenant.size()) + " bytes",
        "at most " + std::to_string(detail::FifoGroups::kMaxKeyBytes) + " bytes");
  if (!o.dedup.id.empty()) {
    if (o.dedup.ttl && o.dedup.ttl->count() <= 0)
      bad(where, "dedup.ttl", ns(*o.dedup.ttl), "a positive window, or no ttl");
    if (o.dedup.mode == DedupMode::debounce && !o.dedup.ttl)
      bad(where, "dedup.ttl", "unset with mode debounce",
          "a ttl: debounce restarts a window, so it needs one");
    if (o.dedup.extend && !o.dedup.ttl)
      bad(where, "dedup.ttl", "unset with dedup.extend",
          "a ttl: extend restarts a window, so it needs one");
    if (o.dedup.ttl_from_due && !o.dedup.ttl)
      bad(where, "dedup.ttl", "unset with dedup.ttl_from_due",
          "a ttl: ttl_from_due says where a window starts, so it needs one");
  } else if (o.dedup.ttl || o.dedup.mode != DedupMode::merge || o.dedup.extend ||
             o.dedup.keep_last_if_active || o.dedup.ttl_from_due) [[unlikely]] {
    bad(where, "dedup.id", "empty while dedup.ttl or dedup.mode is set",
        "a dedup id to deduplicate on");
  }
}

void validate_worker_options(const WorkerOptions& o, std::string_view queue) {
  const std::string where = "WorkerOptions('" + std::string(queue) + "')";
  if (o.pool != Pool::dedicated && o.pool != Pool::shared)
    bad(where, "pool", std::to_string(static_cast<int>(o.pool)), "Pool::dedicated or Pool::shared");
  if (o.concurrency == 0u)
    bad(where, "concurrency", "0",
        std::string("1 or more handler calls at once (leave it unset for ") +
            (o.pool == Pool::dedicated ? "one thread)" : "the whole pool)"));
  if (o.concurrency > WorkerOptions::kMaxConcurrency)
    bad(where, "concurrency", std::to_string(*o.concurrency),
        "at most WorkerOptions::kMaxConcurrency (" +
            std::to_string(WorkerOptions::kMaxConcurrency) + ") " +
            (o.pool == Pool::dedicated ? "worker threads per queue" : "workers of the pool"));
  if (o.max_pending > WorkerOptions::kMaxPending)
    bad(where, "max_pending", std::to_string(o.max_pending),
        "at most WorkerOptions::kMaxPending (" + std::to_string(WorkerOptions::kMaxPending) +
            ") jobs awaiting their Completion");
}

void validate_batch_options(const BatchOptions& b, std::string_view queue) {
  const std::string where = "BatchOptions('" + std::string(queue) + "')";
  if (b.max == 0 || b.max > BatchOptions::kMaxJobs)
    bad(where, "max", std::to_string(b.max),
        "1 .. BatchOptions::kMaxJobs (" + std::to_string(BatchOptions::kMaxJobs) +
            ") jobs per handler call");
  if (b.linger.count() < 0)
    bad(where, "linger", std::to_string(b.linger.count()) + " ns",
        "a duration >= 0 (0: run what is ready; Duration::max(): until the batch is full)");
}

void reject_job_name(std::string_view name, std::string_view queue) {
  bad("add('" + std::string(queue) + "')", "job name",
      name.empty() ? std::string("empty") : "blank ('" + std::string(name) + "')",
      "a job kind such as \"charge-card\" (a name with a visible character)");
}

void validate_queue_options(const QueueOptions& o, std::string_view queue) {
  validate_name("QueueOptions", queue);
  std::string where = "QueueOptions('" + std::string(queue) + "')";
  if (o.capacity == 0 || o.capacity > (std::uint32_t{1} << 29))
    bad(where, "capacity", std::to_string(o.capacity), "1 .. 2^29 unfinished jobs");
  if (o.visibility_timeout.count() <= 0)
    bad(where, "visibility_timeout", ns(o.visibility_timeout),
        "a positive lease length (Duration::max() for none)");
  if (o.timeout.count() <= 0)
    bad(where, "timeout", ns(o.timeout), "a positive run time (Duration::max() for none)");
  if (o.block_timeout.count() < 0) bad(where, "block_timeout", ns(o.block_timeout), ">= 0");
  if (o.expire_after.count() <= 0)
    bad(where, "expire_after", ns(o.expire_after), "a positive wait (Duration::max() for none)");
  if (o.shed.target && o.shed.target->count() <= 0)
    bad(where, "shed.target", ns(*o.shed.target), "a positive wait (unset: no shedding)");
  if (o.shed.interval.count() <= 0)
    bad(where, "shed.interval", ns(o.shed.interval), "a positive interval, e.g. 100 ms");
  if (o.max_stalls > 0xFFFF)
    bad(where, "max_stalls", std::to_string(o.max_stalls),
        "0 .. 65535 stalls a job survives before it is dead-lettered");
  if (!(o.stall_warning >= 0 && o.stall_warning < 1))
    bad(where, "stall_warning", std::to_string(o.stall_warning),
        "a fraction of the lease, 0 <= f < 1 (0: no warnings; e.g. 0.8)");
  if (o.priorities == 0 || o.priorities > detail::ReadyLevels::kMaxLevels)
    bad(where, "priorities", std::to_string(o.priorities),
        "1 .. " + std::to_string(detail::ReadyLevels::kMaxLevels) + " levels (1: none)");
  if (o.priority_max_wait.count() <= 0)
    bad(where, "priority_max_wait", ns(o.priority_max_wait),
        "a positive wait per level (Duration::max() for no aging)");
  if (o.tenant_window > (1u << 20))
    bad(where, "tenant_window", std::to_string(o.tenant_window),
        "0 (no fair shares) or 1 .. 2^20 jobs per unit of a tenant's weight");
  if (o.tenant_window == 0 && !o.tenants.empty())
    bad(where, "tenant_window", "0 with tenants listed",
        "a window (e.g. 64 jobs per unit of weight) to turn fair shares on");
  for (std::size_t i = 0; i < o.tenants.size(); ++i) {
    const TenantShare& t = o.tenants[i];
    const std::string at = "tenants[" + std::to_string(i) + "]";
    if (t.tenant.empty() || t.tenant.size() > detail::FifoGroups::kMaxKeyBytes)
      bad(where, at + ".tenant", "'" + t.tenant + "'", "a name of 1 to 256 bytes");
    if (t.weight == 0 || t.weight > (1u << 16))
      bad(where, at + ".weight", std::to_string(t.weight), "1 .. 65536");
    if (t.max_active == 0u)
      bad(where, at + ".max_active", "0", "1 or more jobs ready or running (unset: no cap)");
    for (std::size_t k = 0; k < i; ++k)
      if (o.tenants[k].tenant == t.tenant)
        bad(where, at + ".tenant", "'" + t.tenant + "'", "each tenant listed once");
  }
  if (o.defaults.priority >= o.priorities)
    bad(where, "defaults.priority", std::to_string(o.defaults.priority),
        "0 .. priorities - 1 (" + std::to_string(o.priorities - 1) + ")");
  if (o.dlq.alert_depth == 0u) bad(where, "dlq.alert_depth", "0", "1 or more (unset: no alert)");
  if (o.dlq.alert_age && o.dlq.alert_age->count() <= 0)
    bad(where, "dlq.alert_age", std::to_string(o.dlq.alert_age->count()) + " ns",
        "a positive duration (unset: no age alert)");
  if (o.dlq.alert_rearm_depth &&
      (!o.dlq.alert_depth || *o.dlq.alert_rearm_depth >= *o.dlq.alert_depth))
    bad(where, "dlq.alert_rearm_depth", std::to_string(*o.dlq.alert_rearm_depth),
        o.dlq.alert_depth ? "below dlq.alert_depth (" + std::to_string(*o.dlq.alert_depth) + ")"
                          : std::string("unset, as dlq.alert_depth is (no alert)"));
  if (o.dedup_capacity == 0u)
    bad(where, "dedup_capacity", "0", "1 or more live dedup ids (unset: max(capacity, 4096))");
  if (o.dlq.max_entries == 0)
    bad(where, "dlq.max_entries", "0", "1 or more (a DLQ that holds nothing loses jobs)");
  if (o.dlq.retention && o.dlq.retention->count() <= 0)
    bad(where, "dlq.retention", ns(*o.dlq.retention), "a positive duration, or none");
  const JournalOptions& j = o.dlq.journal;
  if (!j.path.empty()) {
    if (j.sync == JournalSync::every_n && j.sync_every_n == 0)
      bad(where, "dlq.journal.sync_every_n", "0", "1 or more entries between syncs");
    if (j.sync == JournalSync::interval && j.sync_interval.count() <= 0)
      bad(where, "dlq.journal.sync_interval", ns(j.sync_interval), "a positive interval");
    if (j.grow_chunk < 4096 || j.grow_chunk > (std::uint64_t{1} << 30))
      bad(where, "dlq.journal.grow_chunk", std::to_string(j.grow_chunk), "4096 .. 2^30 bytes");
    if (!(j.compact_dead_ratio > 0 && j.compact_dead_ratio <= 1))
      bad(where, "dlq.journal.compact_dead_ratio", std::to_string(j.compact_dead_ratio),
          "a ratio in (0, 1]");
    if ((j.file_mode & ~0777u) != 0 || (j.file_mode & 0002u) != 0)
      bad(where, "dlq.journal.file_mode", std::to_string(j.file_mode),
          "permission bits (0 .. 0777) without write permission for others (a journal anyone "
          "can write is refused when opened)");
  }
  if (o.progress_interval.count() < 0)
    bad(where, "progress_interval", ns(o.progress_interval), ">= 0 between two progress events");
  if (o.keep_ended.max_age.count() <= 0)
    bad(where, "keep_ended.max_age", ns(o.keep_ended.max_age),
        "a positive age (Duration::max() to keep ended jobs until the counts push them out)");
  constexpr std::uint32_t kMaxRetained = std::uint32_t{1} << 24;
  for (const auto& [field, keep] :
       {std::pair{"keep_ended.keep_completed", o.keep_ended.keep_completed},
        std::pair{"keep_ended.keep_failed", o.keep_ended.keep_failed}})
    if (keep && *keep > kMaxRetained)
      bad(where, field, std::to_string(*keep), "0 .. 16777216 ended jobs to keep");
  validate_job_options(o.defaults, where + ".defaults");
  if (o.defaults.backoff.kind == BackoffKind::custom && !o.custom_backoff)
    bad(where, "custom_backoff", "empty while defaults.backoff is custom",
        "a function computing the delay");
}

void validate_schedule_options(std::string_view id, const ScheduleOptions& o,
                               std::string_view queue) {
  const std::string q(queue);
  if (id.empty() || id.find_first_not_of(" \t\n\r\f\v") == std::string_view::npos)
    throw Error(ErrorCode::invalid_option,
                "schedule on queue '" + q + "': the id is blank; expected a name to upsert by");
  const std::string where = "schedule '" + std::string(id) + "' on queue '" + q + "': ";
  if (o.job.delay.count() != 0)
    throw Error(ErrorCode::invalid_option,
                where +
                    "ScheduleOptions.job.delay is set; expected 0 (the schedule decides when "
                    "each run starts)");
  if (!o.job.dedup.id.empty())
    throw Error(ErrorCode::invalid_option,
                where + "ScheduleOptions.job.dedup.id is '" + o.job.dedup.id +
                    "'; expected none (each run is a job of its own; overlap decides whether runs "
                    "may share time)");
  if (!o.job.after.empty())
    throw Error(ErrorCode::invalid_option,
                where + "ScheduleOptions.job.after names " + std::to_string(o.job.after.size()) +
                    " children; expected none (every run would wait for the same jobs)");
  if (o.max_catch_up == 0)
    throw Error(ErrorCode::invalid_option,
                where + "ScheduleOptions.max_catch_up is 0; expected 1 or more");
}

}  // namespace detail
}  // namespace rail
