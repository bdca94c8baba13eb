// soak: runs a fault-injecting mix against one engine and checks that no job is lost, none ends
// twice, no late outcome counts, and counts agree with events. Exit status 1 on any violation.
#include <CLI/CLI.hpp>
#include <iostream>

#include "progress_line.hpp"
#include "soak/soak.hpp"

int main(int argc, char** argv) {
  rail::soak::Config c;
  CLI::App app{"rail soak: fault-injecting load with a full account of every job"};
  app.add_option("--jobs", c.jobs, "jobs to add")->check(CLI::PositiveNumber);
  app.add_option("--producers", c.producers)->check(CLI::Range(1u, 256u));
  app.add_option("--workers", c.workers)->check(CLI::Range(1u, 1024u));
  app.add_flag("--manual-clock", c.manual_clock, "drive a ManualClock from a driver thread");
  app.add_option("--seed", c.seed);
  app.add_option("--fail", c.fail, "per-delivery retryable failure rate")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--throw", c.throw_, "per-delivery exception rate")->check(CLI::Range(0.0, 1.0));
  app.add_option("--discard", c.discard, "per-delivery Outcome::discard rate")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--permanent", c.permanent, "per-delivery permanent failure rate")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--hang", c.hang, "per-delivery hang-past-lease rate")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--duplicate", c.duplicate, "per-add duplicate rate")->check(CLI::Range(0.0, 1.0));
  app.add_option("--delayed", c.delayed, "per-add delayed-job rate")->check(CLI::Range(0.0, 1.0));
  app.add_option("--cancel", c.cancel, "per-add cancel rate")->check(CLI::Range(0.0, 1.0));
  app.add_option("--debounce", c.debounce, "of the duplicate adds: the debounce-mode share")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--cancel-delayed", c.cancel_delayed, "of the delayed adds: cancelled at once")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--shutdown-at", c.shutdown_at,
                 "shut down once this fraction of the jobs is accepted (0: drain at the end)")
      ->check(CLI::Range(0.0, 1.0));
  bool no_redrives = false;
  app.add_flag("--no-redrives", no_redrives, "do not redrive DLQ entries while workers run");
  bool no_pauses = false;
  app.add_flag("--no-pauses", no_pauses, "do not pause and resume the queue");
  bool no_downstream = false;
  app.add_flag("--no-downstream", no_downstream,
               "the queue calls no downstream (no limits, no pushbacks)");
  app.add_option("--pushback", c.pushback, "per-delivery Outcome::pushback rate")
      ->check(CLI::Range(0.0, 1.0));
  int visibility_ms = 50;
  app.add_option("--visibility-ms", visibility_ms, "lease length")->check(CLI::Range(1, 3'600'000));
  app.add_option("--capacity", c.capacity)->check(CLI::Range(1u, 1u << 24));
  app.add_option("--async", c.async,
                 "per-delivery rate of async handlers (Job::defer, completed by another thread)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--groups", c.groups,
                 "FIFO groups the producers' jobs go to (0: none); checks per-group order")
      ->check(CLI::Range(0u, 1u << 20));
  app.add_option("--priorities", c.priorities,
                 "priority levels (1: none); each job gets one from its plan")
      ->check(CLI::Range(1u, 8u));
  int aging_ms = 0;
  app.add_option("--priority-max-wait-ms", aging_ms,
                 "aging: a waiting job ranks a level higher per this many ms (0: no aging)")
      ->check(CLI::Range(0, 3'600'000));
  app.add_option("--tenants", c.tenants,
                 "tenants the jobs go to (0: none); tenant-0 takes half, weight 3, capped")
      ->check(CLI::Range(0u, 1u << 16));
  app.add_option("--tenant-cap", c.tenant_cap, "tenant-0's most jobs at once")
      ->check(CLI::Range(1u, 1u << 16));
  int timeout_ms = 0;
  app.add_option("--timeout-ms", timeout_ms,
                 "QueueOptions::timeout: an attempt past it fails (0: none); below the lease, "
                 "hangs time out rather than stall")
      ->check(CLI::Range(0, 3'600'000));
  app.add_option("--batch-size", c.batch_size,
                 "fresh jobs join batches of this many (Engine::batch; 0: none); checks their "
                 "callbacks fire exactly once")
      ->check(CLI::Range(0u, 1u << 20));
  app.add_option("--flow-every", c.flow_every,
                 "every n-th fresh job of a producer waits for its last 3 jobs (JobOptions::after; "
                 "0: none); checks no parent starts early or after a failed child")
      ->check(CLI::Range(0u, 1u << 20));
  int expire_ms = 0;
  app.add_option("--expire-ms", expire_ms,
                 "QueueOptions::expire_after: a job not started this long after its add is "
                 "dead-lettered unstarted (0: none); above the 5 ms of the longest delay")
      ->check(CLI::Range(0, 3'600'000));
  bool no_leases = false;
  app.add_flag("--no-leases", no_leases,
               "no visibility timeout, and no hangs (checks the tenant's cap: invariant 8)");
  app.add_flag("--coroutines", c.coroutines,
               "the handler is a coroutine (rail::Task): the --async share co_awaits its call");
  app.add_flag("--rate-only-downstream", c.rate_only_downstream,
               "the downstream has a rate (flipped down to 1,000/s, burst 1) and no concurrency "
               "limit");
  app.add_flag("--side-queue", c.side_queue,
               "a second queue on the other kind of pool calls the same downstream");
  app.add_flag("--shared-pool", c.shared_pool,
               "the queue runs on the engine's shared pool of --workers threads");
  bool sqs_stalls = false;
  app.add_flag("--sqs-stalls", sqs_stalls,
               "a lapsed lease is a failed attempt (StallPolicy::count_as_attempt, SQS) instead "
               "of using the stall budget (BullMQ, the default)");
  bool quiet = false;
  app.add_flag("--quiet", quiet, "no live progress line while the run goes");
  CLI11_PARSE(app, argc, argv);
  c.pauses = !no_pauses;
  if (aging_ms > 0) c.priority_max_wait = std::chrono::milliseconds(aging_ms);
  if (timeout_ms > 0) c.timeout = std::chrono::milliseconds(timeout_ms);
  if (expire_ms > 0) c.expire_after = std::chrono::milliseconds(expire_ms);
  if (no_leases) {
    c.leases = false;
    c.hang = 0;
  }
  c.downstream = !no_downstream;
  c.redrives = !no_redrives;
  if (sqs_stalls) c.stall_policy = rail::StallPolicy::count_as_attempt;
  c.visibility = std::chrono::milliseconds(visibility_ms);
  if (c.fail + c.throw_ + c.permanent + c.discard + c.hang > 1.0) {
    std::cerr << "soak: --fail + --throw + --permanent + --discard + --hang is above 1; expected a "
                 "total "
                 "probability of at most 1\n";
    return 2;
  }
  // On a terminal one line rewritten in place; in a log, a line every 5 s (ProgressLine).
  rail::tools::ProgressLine line("soak", stderr);
  if (!quiet)
    c.progress = [&line](std::uint64_t ended, std::uint64_t jobs, std::uint64_t dlq) {
      line.update(ended, jobs, dlq);
    };
  auto report = rail::soak::run(c);
  line.finish();
  rail::soak::print(report, c, std::cout);
  return report.ok() ? 0 : 1;
}
