// Option validation (src/options.cpp): every check a declaration or an add makes of what the user
// passed, each failing with Error(invalid_option) whose message names the field, the value given
// and what is expected. Pure functions of their arguments; callable from any thread.
#pragma once

#include <cstddef>
#include <string_view>

#include "rail/batch.hpp"
#include "rail/options.hpp"
#include "rail/schedule.hpp"

namespace rail::detail {

/// validate_job_options(o, where): throws Error(invalid_option) naming the bad field.
void validate_job_options(const JobOptions& o, std::string_view where);
void validate_queue_options(const QueueOptions& o, std::string_view queue);
/// kMaxNameBytes / validate_name(kind, name): a queue's or downstream's name has a visible
/// character, at most kMaxNameBytes bytes and no control character (names appear in events, log
/// lines and the DLQ journal); else Error(invalid_option) naming `kind` (e.g. "QueueOptions").
inline constexpr std::size_t kMaxNameBytes = 255;
void validate_name(std::string_view kind, std::string_view name);
void validate_worker_options(const WorkerOptions& o, std::string_view queue);
/// validate_batch_options(b, queue): max in 1 .. BatchOptions::kMaxJobs, linger not negative.
void validate_batch_options(const BatchOptions& b, std::string_view queue);
/// validate_schedule_options(id, o, queue): Error(invalid_option) for a blank id or options a
/// schedule decides itself (delay, dedup) or cannot use.
void validate_schedule_options(std::string_view id, const ScheduleOptions& o,
                               std::string_view queue);
/// reject_job_name(name, queue): throws Error(invalid_option) for an empty or blank job name.
[[noreturn]] void reject_job_name(std::string_view name, std::string_view queue);

}  // namespace rail::detail
