// What bench/peers/bullmq.mjs and bench/peers/rabbitmq.mjs share with each other and, in meaning,
// with bench/peers/rail_orders.cpp: the flags, the payload, the clock, the completion count and the
// JSON line each run prints. Keeping one definition of each is what makes the three like for like.
import { parseArgs } from 'node:util';
import { performance } from 'node:perf_hooks';

/** flags() parses the drivers' common flags; every one has the rail driver's default. */
export function flags(system) {
  const { values } = parseArgs({
    options: {
      workload: { type: 'string', default: 'orders' },
      jobs: { type: 'string', default: '50000' },
      batch: { type: 'string', default: '1000' },
      concurrency: { type: 'string', default: '100' },
      'backoff-ms': { type: 'string', default: '10' },
      port: { type: 'string' },
      'timeout-s': { type: 'string', default: '300' },
      durable: { type: 'boolean', default: false },
    },
  });
  const int = (name, min) => {
    const v = Number(values[name]);
    if (!Number.isInteger(v) || v < min) {
      fail(system, `--${name} expects an integer >= ${min}, got '${values[name]}'`);
    }
    return v;
  };
  if (!['orders', 'retry'].includes(values.workload)) {
    fail(system, `--workload expects orders or retry, got '${values.workload}'`);
  }
  if (values.port === undefined) {
    fail(system, '--port is required (the server bench/peers/run started)');
  }
  return {
    system,
    workload: values.workload,
    retry: values.workload === 'retry',
    jobs: int('jobs', 1),
    batch: int('batch', 1),
    concurrency: int('concurrency', 1),
    backoffMs: int('backoff-ms', 0),
    port: int('port', 1),
    timeoutS: int('timeout-s', 1),
    durable: values.durable,
  };
}

/** fail() ends the run with exit status 2 and a message naming the system; run reports it. */
export function fail(system, message) {
  process.stderr.write(`${system}: ${message}\n`);
  process.exit(2);
}

/** now() is a monotonic clock in milliseconds with sub-millisecond resolution. */
export const now = () => performance.now();

/** payload(i) is the job body every system carries: {"order":i} once serialised. */
export const payload = (i) => ({ order: i });

/**
 * Completion counts finished jobs; done resolves with the time of the last one. A run that does
 * not finish within the timeout fails with how far it got, instead of hanging bench/peers/run.
 */
export class Completion {
  constructor(cfg) {
    this.target = cfg.jobs;
    this.count = 0;
    this.done = new Promise((resolve) => {
      this.resolve = resolve;
    });
    this.timer = setTimeout(() => {
      const done = `${this.count} of ${this.target} jobs completed`;
      fail(cfg.system, `${cfg.workload}: ${done} after ${cfg.timeoutS} s`);
    }, cfg.timeoutS * 1000);
  }

  hit() {
    if (++this.count === this.target) {
      const t = now();
      clearTimeout(this.timer);
      this.resolve(t);
    }
  }
}

/**
 * Lateness records, per job, when its first attempt failed and how late its second one started
 * after the backoff: started - failed - backoff (ms).
 */
export class Lateness {
  constructor(cfg) {
    this.backoffMs = cfg.backoffMs;
    this.failedAt = new Float64Array(cfg.jobs);
    this.lateMs = new Float64Array(cfg.jobs);
  }

  failed(k) {
    this.failedAt[k] = now();
  }

  retried(k, started) {
    this.lateMs[k] = started - this.failedAt[k] - this.backoffMs;
  }

  summary() {
    return quantiles(this.lateMs);
  }
}

/** Nearest-rank quantiles p50 / p99 / max, the same definition as peers_common.hpp. */
export function quantiles(values) {
  const sorted = Float64Array.from(values).sort();
  const n = sorted.length;
  const q = (p) => sorted[Math.min(Math.max(Math.ceil(p * n - 1e-6), 1), n) - 1];
  return { p50: q(0.5), p99: q(0.99), max: q(1) };
}

/**
 * Starts records, per job, the time from its add (its batch's start) to its first handler
 * start (ms): start_ms in the JSON line.
 */
export class Starts {
  constructor(cfg) {
    this.addedAt = new Float64Array(cfg.jobs);
    this.startMs = new Float64Array(cfg.jobs);
    this.seen = new Uint8Array(cfg.jobs);
  }
  added(k, at) {
    this.addedAt[k] = at;
  }
  started(k, at) {
    if (this.seen[k]) return;
    this.seen[k] = 1;
    this.startMs[k] = at - this.addedAt[k];
  }
  summary() {
    return quantiles(this.startMs);
  }
}

/** report() prints the run's JSON line, the same fields as rail_orders.cpp prints. */
export function report(cfg, { t0, tAdded, tDone, lateness, starts }) {
  const out = {
    system: cfg.system,
    workload: cfg.workload,
    jobs: cfg.jobs,
    batch: cfg.batch,
    concurrency: cfg.concurrency,
    add_s: (tAdded - t0) / 1e3,
    total_s: (tDone - t0) / 1e3,
    add_per_s: (cfg.jobs * 1e3) / (tAdded - t0),
    jobs_per_s: (cfg.jobs * 1e3) / (tDone - t0),
  };
  if (starts) out.start_ms = starts.summary();
  if (lateness) {
    out.backoff_ms = cfg.backoffMs;
    out.late_ms = lateness.summary();
  }
  process.stdout.write(`${JSON.stringify(out)}\n`);
}
