// BullMQ's side of the peers benchmark (issue 4 item 7), against the Redis server bench/peers/run
// started. One process holds the Queue (producer) and the Worker, as a small BullMQ service does.
//   node bullmq.mjs --port P --workload orders|retry [--jobs N] [--batch B] [--concurrency C]
//                   [--backoff-ms D] [--timeout-s T]
// Prints one JSON line (see common.mjs). Settings, and why:
//   - Queue.addBulk of --batch jobs per call: BullMQ's fastest way in (one round trip per chunk).
//   - removeOnComplete: finished jobs are deleted rather than kept in Redis (BullMQ's default
//     keeps them all). It is BullMQ's cheapest setting, so the ratios err in BullMQ's favour.
//   - retry: attempts 2, backoff {type: 'fixed', delay}; the first attempt throws.
//   - a job counts as completed at the Worker's 'completed' event, i.e. once Redis has moved it
//     to completed (the processor's return alone is not yet a completion).
import { Queue, Worker } from 'bullmq';

import { Completion, Lateness, fail, flags, now, payload, report } from './common.mjs';

const cfg = flags('bullmq');
const connection = { host: '127.0.0.1', port: cfg.port };
// A queue name of its own per run: nothing from an earlier run can be picked up.
const name = `peers-${cfg.workload}-${process.pid}`;
const jobOpts = cfg.retry
  ? { attempts: 2, backoff: { type: 'fixed', delay: cfg.backoffMs }, removeOnComplete: true }
  : { removeOnComplete: true };

const completion = new Completion(cfg);
const lateness = cfg.retry ? new Lateness(cfg) : null;

const queue = new Queue(name, { connection });
const worker = new Worker(
  name,
  async (job) => {
    if (!lateness) return;
    const started = now();
    if (job.attemptsMade === 0) {
      lateness.failed(job.data.order);
      throw new Error('first attempt fails by design');
    }
    lateness.retried(job.data.order, started);
  },
  { connection, concurrency: cfg.concurrency },
);
worker.on('completed', () => completion.hit());
for (const [what, emitter] of [['queue', queue], ['worker', worker]]) {
  emitter.on('error', (err) => fail(cfg.system, `${what} error: ${err.message}`));
}
await Promise.all([queue.waitUntilReady(), worker.waitUntilReady()]);

const t0 = now();
for (let i = 0; i < cfg.jobs; ) {
  const chunk = [];
  for (; i < cfg.jobs && chunk.length < cfg.batch; ++i) {
    chunk.push({ name: 'order', data: payload(i), opts: jobOpts });
  }
  await queue.addBulk(chunk);
}
const tAdded = now();
const tDone = await completion.done;

await worker.close();
await queue.obliterate({ force: true });
await queue.close();
report(cfg, { t0, tAdded, tDone, lateness });
