// rail: a lock-free, in-process job scheduler. Include this one header to use it.
#pragma once

#include "rail/add_result.hpp"
#include "rail/backoff.hpp"
#include "rail/clock.hpp"
#include "rail/dead_letter_queue.hpp"
#include "rail/engine.hpp"
#include "rail/error.hpp"
#include "rail/event.hpp"
#include "rail/job.hpp"
#include "rail/log_observer.hpp"
#include "rail/options.hpp"
#include "rail/outcome.hpp"
#include "rail/queue.hpp"
#include "rail/shutdown_report.hpp"
#include "rail/unrecoverable_error.hpp"
