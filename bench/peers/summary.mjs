// Turns bench/peers/run's raw runs (one driver JSON line each) into its one table, the targets'
// verdicts and, with --json, the file whose schema bench/peers/run documents. Exit status 0 when
// every target is met, 1 when one is missed, 2 when the runs are not what they should be.
//   node summary.mjs --raw RUNS.jsonl --versions JSON --config JSON [--json FILE]
import { readFileSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

// rail over RabbitMQ (peers_rail_amqp) and its like-for-like peer (amqplib on quorum queues
// with persistent messages) run where peers_rail_amqp was built: optional.
const REQUIRED = ['rail', 'bullmq', 'rabbitmq'];
const OPTIONAL = ['rail_amqp', 'rail_amqp_cascade', 'rabbitmq_quorum'];
// A system run on some workloads only: rail_amqp_cascade (every retry through the broker) is
// rail_amqp where nothing retries.
const ONLY = { rail_amqp_cascade: ['retry'] };
const runsOn = (system, workload) => !ONLY[system] || ONLY[system].includes(workload);
const WORKLOADS = ['orders', 'retry'];
const NAMES = {
  rail: 'rail',
  bullmq: 'BullMQ',
  rabbitmq: 'RabbitMQ',
  rail_amqp: 'rail over RabbitMQ',
  rail_amqp_cascade: 'rail over RabbitMQ, every retry via the broker',
  rabbitmq_quorum: 'RabbitMQ quorum',
};
// Issue 4 item 7: end-to-end jobs/s on the orders workload; issue 41: rail over RabbitMQ at least
// as fast as a hand-written amqplib consumer with the same durability (quorum, confirms).
const TARGETS = [
  { workload: 'orders', system: 'bullmq', target: 300 },
  { workload: 'orders', system: 'rabbitmq', target: 100 },
  { workload: 'orders', system: 'rabbitmq_quorum', contender: 'rail_amqp', target: 1 },
  { workload: 'retry', system: 'rabbitmq_quorum', contender: 'rail_amqp', target: 1 },
];

function die(message) {
  process.stderr.write(`bench/peers/summary.mjs: ${message}\n`);
  process.exit(2);
}

const { values } = parseArgs({
  options: {
    raw: { type: 'string' },
    versions: { type: 'string' },
    config: { type: 'string' },
    json: { type: 'string' },
  },
});
for (const required of ['raw', 'versions', 'config']) {
  if (values[required] === undefined) die(`--${required} is required`);
}
const runs = readFileSync(values.raw, 'utf8')
  .split('\n')
  .filter((line) => line.trim() !== '')
  .map((line) => JSON.parse(line));
const versions = JSON.parse(values.versions);
const config = JSON.parse(values.config);

/** The median of a figure over the runs (the mean of the middle two for an even count). */
function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
}

const SYSTEMS = [
  ...REQUIRED,
  ...OPTIONAL.filter((system) => runs.some((r) => r.system === system)),
];
const workloads = {};
for (const workload of WORKLOADS) {
  workloads[workload] = {};
  for (const system of SYSTEMS.filter((s) => runsOn(s, workload))) {
    const mine = runs.filter((r) => r.workload === workload && r.system === system);
    if (mine.length === 0) die(`no ${system} run of the ${workload} workload`);
    const figures = {
      jobs_per_s: median(mine.map((r) => r.jobs_per_s)),
      add_per_s: median(mine.map((r) => r.add_per_s)),
    };
    const quantiles = (key) =>
      Object.fromEntries(['p50', 'p99', 'max'].map((q) => [q, median(mine.map((r) => r[key][q]))]));
    if (workload === 'retry') figures.late_ms = quantiles('late_ms');
    if (mine.every((r) => r.start_ms)) figures.start_ms = quantiles('start_ms');
    workloads[workload][system] = { ...figures, runs: mine };
  }
}

const ratios = {};
for (const workload of WORKLOADS) {
  ratios[workload] = {};
  for (const system of SYSTEMS.filter((s) => s !== 'rail' && runsOn(s, workload))) {
    const { rail, [system]: peer } = workloads[workload];
    ratios[workload][system] = rail.jobs_per_s / peer.jobs_per_s;
  }
}
// rail over RabbitMQ: against amqplib with the same durability, and the broker's cost against
// rail in one process.
const broker = {};
if (SYSTEMS.includes('rail_amqp') && SYSTEMS.includes('rabbitmq_quorum')) {
  for (const workload of WORKLOADS) {
    const w = workloads[workload];
    broker[workload] = {
      rail_amqp_over_amqplib_quorum: w.rail_amqp.jobs_per_s / w.rabbitmq_quorum.jobs_per_s,
      in_process_over_rail_amqp: w.rail.jobs_per_s / w.rail_amqp.jobs_per_s,
    };
    if (w.rail_amqp_cascade) {
      broker[workload].cascade_over_amqplib_quorum =
        w.rail_amqp_cascade.jobs_per_s / w.rabbitmq_quorum.jobs_per_s;
    }
  }
}
const targets = TARGETS.filter(
  ({ system, contender = 'rail' }) => SYSTEMS.includes(system) && SYSTEMS.includes(contender),
).map(({ workload, system, contender = 'rail', target }) => {
  const ratio = workloads[workload][contender].jobs_per_s / workloads[workload][system].jobs_per_s;
  return {
    name: `${workload}: ${NAMES[contender]} >= ${target}x ${NAMES[system]} in end-to-end jobs/s`,
    workload,
    system,
    ratio,
    target,
    met: ratio >= target,
  };
});

// --- the table ---------------------------------------------------------------------------------
const rate = (x) => Math.round(x).toLocaleString('en-US');
const ms = (x) => x.toFixed(2);
const rows = [
  [
    'workload',
    'system',
    'jobs/s (end-to-end)',
    'add/s',
    'rail/system',
    'late ms p50 / p99 / max',
    'add-to-start ms p50 / p99',
  ],
];
for (const workload of WORKLOADS) {
  for (const system of SYSTEMS.filter((s) => runsOn(s, workload))) {
    const f = workloads[workload][system];
    rows.push([
      workload,
      NAMES[system],
      rate(f.jobs_per_s),
      rate(f.add_per_s),
      system === 'rail' ? '-' : `${ratios[workload][system].toFixed(1)}x`,
      f.late_ms ? `${ms(f.late_ms.p50)} / ${ms(f.late_ms.p99)} / ${ms(f.late_ms.max)}` : '',
      f.start_ms ? `${ms(f.start_ms.p50)} / ${ms(f.start_ms.p99)}` : '',
    ]);
  }
}
const widths = rows[0].map((_, c) => Math.max(...rows.map((r) => r[c].length)));
const numeric = [false, false, true, true, true, false, false];
const line = (r) =>
  r
    .map((cell, c) => (numeric[c] ? cell.padStart(widths[c]) : cell.padEnd(widths[c])))
    .join('  ')
    .trimEnd();

const out = [];
out.push(
  `peers: orders ${rate(config.orders_jobs)} jobs, retry ${rate(config.retry_jobs)} jobs ` +
    `(attempts 2, fixed ${config.backoff_ms} ms backoff); median of ${config.runs} run(s) each; ` +
    `load average at start ${config.loadavg_at_start}`,
);
out.push(
  `concurrency: rail ${config.concurrency.rail} worker threads, ` +
    `BullMQ Worker ${config.concurrency.bullmq}, ` +
    `RabbitMQ prefetch ${config.concurrency.rabbitmq}; adds in batches of ${config.batch} ` +
    `(rail add_bulk, BullMQ addBulk, RabbitMQ ${config.rabbitmq_publish} waits per batch)`,
);
out.push('');
out.push(line(rows[0]));
out.push(line(widths.map((w) => '-'.repeat(w))));
for (const r of rows.slice(1)) out.push(line(r));
out.push(
  `late: a retry's second attempt start - its first attempt's failure - ${config.backoff_ms} ms; ` +
    'it includes the wait behind the jobs queued ahead of it',
);
for (const [workload, b] of Object.entries(broker)) {
  out.push(
    `rail over RabbitMQ, ${workload}: ${b.rail_amqp_over_amqplib_quorum.toFixed(2)}x amqplib ` +
      `on quorum queues with confirms (the same durability); rail in one process ` +
      `${b.in_process_over_rail_amqp.toFixed(1)}x faster than over the broker` +
      (b.cascade_over_amqplib_quorum === undefined
        ? ''
        : `; every retry via the broker: ${b.cascade_over_amqplib_quorum.toFixed(2)}x amqplib`),
  );
}
out.push('');
for (const t of targets) {
  const verdict = t.met ? 'MET' : 'MISSED';
  out.push(`target  ${t.name.padEnd(58)} ${t.ratio.toFixed(1).padStart(8)}x  ${verdict}`);
}
out.push('');
out.push(`versions: ${Object.entries(versions).map(([k, v]) => `${k} ${v}`).join(', ')}`);
process.stdout.write(`${out.join('\n')}\n`);

if (values.json) {
  const all = { workloads, ratios, broker, targets, versions, config };
  writeFileSync(values.json, `${JSON.stringify(all, null, 2)}\n`);
}
process.exit(targets.every((t) => t.met) ? 0 : 1);
