// Driver for the benchmark's peer section: the same three workloads the daemon is measured on,
// run against BullMQ delayed jobs (Redis) and pg-boss `startAfter` jobs (PostgreSQL).
//
//   node peers.mjs <bullmq|pgboss> <ingest|fire|lateness> [--flags]
//
// Exactly one line of JSON goes to stdout at the end; progress and diagnostics go to stderr.
// Exit 0 on success, non-zero with a message on stderr on failure. See README.md beside this file.

import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';

const USAGE = `usage:
  peers.mjs <bullmq|pgboss> ingest   --n N --mode backlog|live
  peers.mjs <bullmq|pgboss> fire     --n N [--lead-ms L]
  peers.mjs <bullmq|pgboss> lateness --rate R --secs S --lead-ms L
connection (one of):
  --redis-url redis://127.0.0.1:PORT                      (bullmq)
  --database-url postgres://postgres@127.0.0.1:5432/DB    (pgboss)
optional:
  --chunk K        jobs per bulk call (backlog, fire)                    default 1000
  --in-flight K    bulk calls in flight (backlog, fire) / single calls
                   in flight (live)                                       default 8 / 1000
  --timeout-s T    bound on each wait for the store                       default 300
  --burst          pgboss only: work() with burstWhenBatchFull: true (not the default)`;

const DAY_MS = 24 * 60 * 60 * 1000;
const FIRE_MARGIN_MS = 1000; // the bulk insert must finish at least this long before T

// ---------------------------------------------------------------------------------------------
// small helpers

function log(...args) {
  process.stderr.write(`[peers] ${args.join(' ')}\n`);
}

class UsageError extends Error {}

// `<peer> <workload>` are the two positional arguments, in that order; flags may stand before,
// between or after them (`bullmq --redis-url URL ingest --n 5`).
function parseArgs(argv) {
  const positional = [];
  const flags = {};
  const booleans = new Set(['burst']);
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (!arg.startsWith('--')) {
      positional.push(arg);
      continue;
    }
    let key = arg.slice(2);
    let value;
    const eq = key.indexOf('=');
    if (eq >= 0) {
      value = key.slice(eq + 1);
      key = key.slice(0, eq);
    } else if (booleans.has(key)) {
      value = 'true';
    } else {
      value = argv[++i];
      if (value === undefined) throw new UsageError(`--${key} needs a value`);
    }
    flags[key] = value;
  }
  if (positional.length !== 2) {
    throw new UsageError(`expected <peer> <workload>, got ${JSON.stringify(positional)}`);
  }
  const [peer, workload] = positional;
  return { peer, workload, flags };
}

function intFlag(flags, key, { def, min = 1 } = {}) {
  const raw = flags[key];
  if (raw === undefined) {
    if (def === undefined) throw new UsageError(`--${key} is required`);
    return def;
  }
  const v = Number(raw.replace(/_/g, ''));
  if (!Number.isInteger(v) || v < min) throw new UsageError(`--${key} must be an integer >= ${min}, got ${raw}`);
  return v;
}

function sleep(ms) {
  return new Promise(resolve => setTimeout(resolve, ms));
}

// Rejects with a message naming what was awaited when `promise` has not settled within `ms`.
function bounded(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${(ms / 1000).toFixed(0)} s waiting for ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

// A promise with its resolve function, for "all jobs seen".
function signal() {
  let resolve;
  const promise = new Promise(r => { resolve = r; });
  return { promise, resolve };
}

function round(x, digits) {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}

// Nearest-rank percentile over an ascending array: the value at rank ceil(p/100 * n).
function nearestRank(sorted, p) {
  const rank = Math.max(1, Math.ceil((p / 100) * sorted.length));
  return sorted[rank - 1];
}

function queueName() {
  return `bench-peers-${Date.now().toString(36)}-${randomBytes(4).toString('hex')}`;
}

// Runs `count` tasks, `task(i)` for i in [0, count), at most `limit` at once; resolves when all
// have resolved, rejects on the first failure.
async function pool(count, limit, task) {
  let next = 0;
  let failed = null;
  async function lane() {
    while (failed === null && next < count) {
      const i = next++;
      try {
        await task(i);
      } catch (err) {
        failed = failed ?? err;
      }
    }
  }
  await Promise.all(Array.from({ length: Math.min(limit, count) }, lane));
  if (failed) throw failed;
}

// ---------------------------------------------------------------------------------------------
// peers: each offers the same small surface to the workloads

async function bullmqPeer(opts) {
  const { Queue, Worker } = await import('bullmq');
  const url = opts.flags['redis-url'];
  if (!url) throw new UsageError('bullmq needs --redis-url redis://127.0.0.1:PORT');
  const name = queueName();
  // The producer keeps ioredis' defaults (a command fails after its retries instead of waiting
  // forever). Workers need maxRetriesPerRequest: null, as BullMQ asks of a blocking connection.
  const queue = new Queue(name, { connection: { url } });
  queue.on('error', err => log(`bullmq queue error: ${err.message}`));
  await bounded(queue.waitUntilReady(), opts.timeoutMs, `Redis at ${url}`);
  log(`bullmq queue ${name} on ${url}`);
  let worker = null;

  return {
    name,
    async addBulk(dueAts) {
      const now = Date.now();
      await queue.addBulk(dueAts.map(dueAt => ({ name: 'timer', data: { dueAt }, opts: { delay: Math.max(0, dueAt - now) } })));
    },
    async addOne(dueAt) {
      await queue.add('timer', { dueAt }, { delay: Math.max(0, dueAt - Date.now()) });
    },
    // onJobs(list of {id, dueAt}, handlerTime) is called for every job the worker runs.
    async startWorkers(onJobs) {
      worker = new Worker(name, async job => {
        onJobs([{ id: job.id, dueAt: job.data.dueAt }], Date.now());
      }, { connection: { url, maxRetriesPerRequest: null }, concurrency: 50 });
      worker.on('error', err => log(`bullmq worker error: ${err.message}`));
      worker.on('failed', (job, err) => log(`bullmq job ${job?.id} failed: ${err.message}`));
      await bounded(worker.waitUntilReady(), opts.timeoutMs, 'the BullMQ worker to connect');
      log('bullmq worker running, concurrency 50');
    },
    async cleanup() {
      if (worker) {
        await bounded(worker.close(), 60_000, 'the BullMQ worker to close');
        worker = null;
      }
      await bounded(queue.obliterate({ force: true }), opts.timeoutMs, 'the BullMQ queue to be obliterated');
      await bounded(queue.close(), 30_000, 'the BullMQ queue to close');
      log(`bullmq queue ${name} obliterated`);
    },
  };
}

async function pgbossPeer(opts) {
  const { PgBoss } = await import('pg-boss');
  const connectionString = opts.flags['database-url'];
  if (!connectionString) throw new UsageError('pgboss needs --database-url postgres://postgres@127.0.0.1:5432/DBNAME');
  const name = queueName();
  const boss = new PgBoss({ connectionString, application_name: 'bench-peers' });
  boss.on('error', err => log(`pg-boss error: ${err.message}`));
  const warned = new Set();
  boss.on('warning', w => {
    const key = w?.message ?? String(w);
    if (!warned.has(key)) {
      warned.add(key);
      log(`pg-boss warning: ${key}`);
    }
  });
  await bounded(boss.start(), opts.timeoutMs, `pg-boss to start (install its schema) on ${connectionString}`);
  await bounded(boss.createQueue(name), opts.timeoutMs, 'pg-boss createQueue');
  log(`pg-boss queue ${name} on ${connectionString}`);
  const workOptions = { batchSize: 500, pollingIntervalSeconds: 0.5 };
  if (opts.flags.burst === 'true') workOptions.burstWhenBatchFull = true;
  let working = false;

  return {
    name,
    async addBulk(dueAts) {
      await boss.insert(name, dueAts.map(dueAt => ({ data: { dueAt }, startAfter: new Date(dueAt) })));
    },
    async addOne(dueAt) {
      await boss.send(name, { dueAt }, { startAfter: new Date(dueAt) });
    },
    async startWorkers(onJobs) {
      await boss.work(name, workOptions, async jobs => {
        const now = Date.now();
        onJobs(jobs.map(job => ({ id: job.id, dueAt: job.data.dueAt })), now);
      });
      working = true;
      log(`pg-boss worker running, ${JSON.stringify(workOptions)}`);
    },
    async cleanup() {
      if (working) {
        await bounded(boss.offWork(name, { wait: true }), 60_000, 'the pg-boss worker to stop');
        working = false;
      }
      await bounded(boss.deleteQueue(name), opts.timeoutMs, 'pg-boss deleteQueue');
      await bounded(boss.stop({ graceful: true, close: true, timeout: 30_000 }), 60_000, 'pg-boss to stop');
      log(`pg-boss queue ${name} deleted, pg-boss stopped`);
    },
  };
}

const PEERS = { bullmq: bullmqPeer, pgboss: pgbossPeer };

// ---------------------------------------------------------------------------------------------
// workloads

// Hands `n` jobs, all due at dueAtOf(), to the store in bulk calls of `chunk`, `inFlight` at once.
async function bulkAdd(peer, n, chunk, inFlight, dueAtOf, timeoutMs) {
  const calls = Math.ceil(n / chunk);
  let done = 0;
  let lastReport = performance.now();
  await bounded(pool(calls, inFlight, async c => {
    const size = Math.min(chunk, n - c * chunk);
    await peer.addBulk(Array.from({ length: size }, dueAtOf));
    done += size;
    if (performance.now() - lastReport > 2000) {
      lastReport = performance.now();
      log(`  ${done}/${n} stored`);
    }
  }), timeoutMs, `${n} jobs to be stored in bulk`);
}

async function ingest(peer, o) {
  const n = intFlag(o.flags, 'n');
  const mode = o.flags.mode;
  if (mode !== 'backlog' && mode !== 'live') throw new UsageError('--mode must be backlog or live');
  const dueAt = () => Date.now() + DAY_MS;
  let seconds;
  if (mode === 'backlog') {
    const chunk = intFlag(o.flags, 'chunk', { def: 1000 });
    const inFlight = intFlag(o.flags, 'in-flight', { def: 8 });
    log(`ingest backlog: ${n} jobs due in a day, bulk calls of ${chunk}, ${inFlight} in flight`);
    const t0 = performance.now();
    await bulkAdd(peer, n, chunk, inFlight, dueAt, o.timeoutMs);
    seconds = (performance.now() - t0) / 1000;
  } else {
    const inFlight = intFlag(o.flags, 'in-flight', { def: 1000 });
    log(`ingest live: ${n} jobs due in a day, one per call, ${inFlight} calls in flight`);
    const t0 = performance.now();
    let done = 0;
    let lastReport = t0;
    await bounded(pool(n, inFlight, async () => {
      await peer.addOne(dueAt());
      if (++done % 1000 === 0 && performance.now() - lastReport > 2000) {
        lastReport = performance.now();
        log(`  ${done}/${n} stored`);
      }
    }), o.timeoutMs, `${n} single adds`);
    seconds = (performance.now() - t0) / 1000;
  }
  log(`ingest ${mode}: ${n} in ${seconds.toFixed(3)} s`);
  return { peer: o.peer, workload: 'ingest', mode, n, seconds: round(seconds, 3), perSecond: round(n / seconds, 1) };
}

// Tracks the jobs the workers run: distinct ids, first and last handler time, `done` once `target`
// distinct jobs were seen.
function tracker(target) {
  const seen = new Set();
  const all = signal();
  const t = { seen, duplicates: 0, first: Infinity, last: -Infinity, all: all.promise };
  t.record = (jobs, now, each) => {
    for (const job of jobs) {
      if (seen.has(job.id)) {
        t.duplicates++;
        continue;
      }
      seen.add(job.id);
      if (now < t.first) t.first = now;
      if (now > t.last) t.last = now;
      each?.(job, now);
    }
    if (seen.size >= target) all.resolve();
  };
  return t;
}

async function fire(peer, o) {
  const n = intFlag(o.flags, 'n');
  const chunk = intFlag(o.flags, 'chunk', { def: 1000 });
  const inFlight = intFlag(o.flags, 'in-flight', { def: 8 });
  const leadMs = intFlag(o.flags, 'lead-ms', { def: Math.max(3000, Math.ceil(n / 10)) });
  const T = Date.now() + leadMs;
  log(`fire: ${n} jobs due at one instant T = now + ${leadMs} ms`);
  const t0 = performance.now();
  await bulkAdd(peer, n, chunk, inFlight, () => T, o.timeoutMs);
  const insertDone = Date.now();
  log(`fire: stored in ${((performance.now() - t0) / 1000).toFixed(3)} s, ${T - insertDone} ms before T`);
  if (insertDone > T - FIRE_MARGIN_MS) {
    throw new Error(`fire: the lead was too short: the insert finished ${insertDone - (T - FIRE_MARGIN_MS)} ms ` +
      `after T - ${FIRE_MARGIN_MS} ms (lead ${leadMs} ms); pass a longer --lead-ms`);
  }
  let early = 0;
  const t = tracker(n);
  await peer.startWorkers((jobs, now) => t.record(jobs, now, () => { if (now < T) early++; }));
  if (Date.now() >= T) log('fire: warning: the workers were ready only after T');
  const waitMs = Math.max(0, T - Date.now()) + o.timeoutMs;
  try {
    await bounded(t.all, waitMs, `all ${n} jobs to fire`);
  } catch (err) {
    throw new Error(`${err.message} (${t.seen.size} fired)`);
  }
  if (t.duplicates) log(`fire: ${t.duplicates} handler calls for jobs already seen (not counted)`);
  const lastMs = t.last - T;
  log(`fire: first ${t.first - T} ms, last ${lastMs} ms after T, early ${early}`);
  return {
    peer: o.peer, workload: 'fire', n,
    perSecond: round(n / (Math.max(1, lastMs) / 1000), 1),
    firstMs: t.first - T, lastMs, early,
  };
}

async function lateness(peer, o) {
  const rate = intFlag(o.flags, 'rate');
  const secs = intFlag(o.flags, 'secs');
  const leadMs = intFlag(o.flags, 'lead-ms', { min: 0 });
  const total = rate * secs;
  const samples = [];
  const t = tracker(total);
  await peer.startWorkers((jobs, now) => t.record(jobs, now, job => samples.push(now - job.dueAt)));
  log(`lateness: ${rate}/s for ${secs} s, each due ${leadMs} ms after it is sent`);

  let sent = 0;
  let failed = 0;
  let firstError = null;
  const pending = new Set();
  const start = performance.now();
  let i = 0;
  while (i < total) {
    const elapsed = performance.now() - start;
    const due = Math.min(total, Math.floor((elapsed * rate) / 1000) + 1);
    while (i < due) {
      i++;
      const p = peer.addOne(Date.now() + leadMs).then(
        () => { sent++; },
        err => { failed++; firstError = firstError ?? err; },
      );
      pending.add(p);
      p.finally(() => pending.delete(p));
    }
    if (i < total) await sleep(Math.max(1, start + (i * 1000) / rate - performance.now()));
  }
  const waitMs = (secs + leadMs / 1000 + 60) * 1000 - (performance.now() - start);
  await bounded(Promise.all(pending), Math.max(1000, waitMs), 'the sends to be acknowledged');
  log(`lateness: ${sent} sent in ${((performance.now() - start) / 1000).toFixed(3)} s`);
  if (failed) throw new Error(`lateness: ${failed} sends failed, the first: ${firstError?.message}`);
  try {
    await bounded(t.all, Math.max(1000, (secs + leadMs / 1000 + 60) * 1000 - (performance.now() - start)),
      `all ${total} jobs to run`);
  } catch (err) {
    throw new Error(`${err.message} (${t.seen.size} ran)`);
  }
  if (t.duplicates) log(`lateness: ${t.duplicates} handler calls for jobs already seen (not counted)`);
  samples.sort((a, b) => a - b);
  const early = samples.filter(x => x < 0).length;
  const out = {
    peer: o.peer, workload: 'lateness', rate, secs, sent, received: samples.length, early,
    p50Ms: nearestRank(samples, 50), p99Ms: nearestRank(samples, 99), p999Ms: nearestRank(samples, 99.9),
    maxMs: samples[samples.length - 1],
  };
  log(`lateness: p50 ${out.p50Ms} ms, p99 ${out.p99Ms} ms, p99.9 ${out.p999Ms} ms, max ${out.maxMs} ms, early ${early}`);
  return out;
}

const WORKLOADS = { ingest, fire, lateness };

// ---------------------------------------------------------------------------------------------

// The last line on stderr is always the outcome: the caller may show only the tail.
async function main() {
  let args;
  try {
    args = parseArgs(process.argv.slice(2));
  } catch (err) {
    log(USAGE);
    log(err.message);
    process.exit(2);
  }
  const { peer: peerName, workload, flags } = args;
  const makePeer = PEERS[peerName];
  const run = WORKLOADS[workload];
  if (!makePeer || !run) {
    log(USAGE);
    log(`unknown ${makePeer ? 'workload' : 'peer'} ${JSON.stringify(makePeer ? workload : peerName)}`);
    process.exit(2);
  }
  const o = { peer: peerName, flags, timeoutMs: 0 };
  let peer = null;
  let failure = null;
  let code = 0;
  let line = null;
  try {
    o.timeoutMs = intFlag(flags, 'timeout-s', { def: 300 }) * 1000;
    // A TERM or Ctrl-C still cleans up, within a bound; a second one leaves at once.
    const onSignal = sig => {
      const status = sig === 'SIGINT' ? 130 : 143;
      log(`${sig}: cleaning up`);
      process.removeAllListeners(sig);
      process.on(sig, () => process.exit(status));
      (peer ? bounded(peer.cleanup(), 15_000, 'cleanup') : Promise.resolve())
        .catch(err => log(`cleanup failed: ${err.message}`))
        .finally(() => {
          log(`${peerName} ${workload} failed: stopped by ${sig}`);
          process.exit(status);
        });
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
    peer = await makePeer(o);
    const result = await run(peer, o);
    line = JSON.stringify(result);
  } catch (err) {
    code = err instanceof UsageError ? 2 : 1;
    failure = err?.message ?? String(err);
    if (err instanceof UsageError) {
      log(USAGE);
    } else if (err?.stack) {
      process.stderr.write(`${err.stack}\n`);
    }
  }
  if (peer) {
    try {
      await peer.cleanup();
    } catch (err) {
      // The figure stands; what is left behind is only the store's business.
      log(`cleanup failed${failure ? '' : ' (the result stands)'}: ${err.message}`);
    }
  }
  if (failure === null && line !== null) {
    log(`${peerName} ${workload}: done`);
    process.stdout.write(`${line}\n`, () => process.exit(0));
  } else {
    log(`${peerName} ${workload} failed: ${failure}`);
    process.exit(code || 1);
  }
}

main();
