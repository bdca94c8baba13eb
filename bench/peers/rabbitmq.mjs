// RabbitMQ's side of the peers benchmark (issue 4 item 7), with amqplib, against the broker
// bench/peers/run started. Producer and consumer each have their own connection (a publisher under
// flow control must not slow the consumer's acks down) in one process.
//   node rabbitmq.mjs --port P --workload orders|retry [--jobs N] [--batch B] [--concurrency C]
//                     [--backoff-ms D] [--timeout-s T]
// Prints one JSON line (see common.mjs). --durable runs it as rail::amqp stores its jobs: quorum
// queues and persistent messages (system "rabbitmq_quorum"). Settings, and why:
//   - a classic queue, not durable, messages not persistent: rail and the Redis under BullMQ
//     (no persistence) keep jobs in memory only, so the broker does too.
//   - publisher confirms: the producer publishes --batch messages, then waits for the broker to
//     confirm them all. An add counts once the system holds the job, as rail's add() and BullMQ's
//     addBulk() promise; a plain channel's publish only says the bytes were buffered.
//   - the consumer: prefetch --concurrency (100), a manual ack per message; a job counts as
//     completed when it is acked.
//   - retry: the usual retry-queue pattern. A failed first attempt is republished to a wait queue
//     with a per-message TTL of the backoff; the wait queue's dead-letter exchange (the default
//     exchange) routes expired messages back to the work queue. The consumer's channel is a
//     confirm channel too, and the original is acked only once the broker confirmed the copy, so
//     a failed attempt is never lost in between (BullMQ and rail move the job atomically).
import { once } from 'node:events';
import amqp from 'amqplib';

import { Completion, Lateness, Starts, fail, flags, now, payload, report } from './common.mjs';

const cfg = flags('rabbitmq');
// --durable: what rail::amqp always does, by hand: quorum queues, persistent messages.
if (cfg.durable) cfg.system = 'rabbitmq_quorum';
const queueArgs = cfg.durable ? { durable: true, arguments: { 'x-queue-type': 'quorum' } } : { durable: false };
const url = `amqp://guest:guest@127.0.0.1:${cfg.port}`;
// Queue names of their own per run: nothing from an earlier run can be picked up.
const work = `peers.${cfg.workload}.${process.pid}`;
const wait = `${work}.wait`;

const completion = new Completion(cfg);
const lateness = cfg.retry ? new Lateness(cfg) : null;
const starts = new Starts(cfg);

const [consumerConn, producerConn] = await Promise.all([amqp.connect(url), amqp.connect(url)]);
for (const [what, conn] of [['consumer', consumerConn], ['producer', producerConn]]) {
  conn.on('error', (err) => fail(cfg.system, `${what} connection error: ${err.message}`));
}

const consumer = await consumerConn.createConfirmChannel();
consumer.on('error', (err) => fail(cfg.system, `consumer channel error: ${err.message}`));
await consumer.assertQueue(work, queueArgs);
if (cfg.retry) {
  await consumer.assertQueue(wait, {
    ...queueArgs,
    deadLetterExchange: '',
    deadLetterRoutingKey: work,
  });
}
await consumer.prefetch(cfg.concurrency);
const { consumerTag } = await consumer.consume(
  work,
  (msg) => {
    // null: the broker cancelled the consumer (the queue went away) before the run ended.
    if (msg === null) fail(cfg.system, `the broker cancelled the consumer of ${work}`);
    const started = now();
    // BullMQ's Worker hands its processor the parsed job data; this consumer parses it too.
    const { order } = JSON.parse(msg.content);
    starts.started(order, started);
    if (lateness && (msg.properties.headers?.['x-attempt'] ?? 1) === 1) {
      lateness.failed(order);
      const retry = {
        persistent: cfg.durable,
        expiration: String(cfg.backoffMs),
        headers: { 'x-attempt': 2 },
      };
      consumer.publish('', wait, msg.content, retry, (err) => {
        if (err) fail(cfg.system, `the broker refused a retry: ${err.message ?? err}`);
        consumer.ack(msg);
      });
      return;
    }
    if (lateness) lateness.retried(order, started);
    consumer.ack(msg);
    completion.hit();
  },
  { noAck: false },
);

const producer = await producerConn.createConfirmChannel();
producer.on('error', (err) => fail(cfg.system, `producer channel error: ${err.message}`));

const t0 = now();
for (let i = 0; i < cfg.jobs; ) {
  const at = now();
  for (const end = Math.min(i + cfg.batch, cfg.jobs); i < end; ++i) {
    const body = Buffer.from(JSON.stringify(payload(i)));
    starts.added(i, at);
    // false: the socket's buffer is full; wait for it to drain rather than buffer without bound.
    if (!producer.sendToQueue(work, body, { persistent: cfg.durable })) {
      await once(producer, 'drain');
    }
  }
  await producer.waitForConfirms();
}
const tAdded = now();
const tDone = await completion.done;

await consumer.cancel(consumerTag);
await consumer.deleteQueue(work);
if (cfg.retry) await consumer.deleteQueue(wait);
await Promise.all([consumerConn.close(), producerConn.close()]);
report(cfg, { t0, tAdded, tDone, lateness, starts });
