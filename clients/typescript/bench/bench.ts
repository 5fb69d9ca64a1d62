/**
 * The client's own figures against a daemon it starts (not run by the tests), and, when
 * `RUST_SCHEDULE_EXAMPLE` names the Rust example client (`cargo build --release --example
 * schedule`), the same workloads sent by it to the same daemon in the same run:
 * - scheduling rate: N ScheduleTimers (20,000) as fast as one connection takes them, PubAcks
 *   pipelined (the TypeScript client keeps 2,000 awaiting their PubAck; the Rust example sends
 *   every one, then awaits them all), until every PubAck is in;
 * - lateness: 1,000 timers a second for 10 s, each due 2 s after it is sent; `received − dueAt`
 *   at p50, p99 and max as seen by an `onDue` handler (a durable consumer, acknowledged) and by
 *   a plain subscription to the due subject (how the Rust example receives them), and the
 *   daemon's own `reachedAt − dueAt`.
 * Each run starts its own nats-server and daemon; the two clients take turns at going first.
 * Prints one JSON object: every run, and the medians. `node build/bench/bench.js [runs] [N]
 * [rate] [seconds]`.
 */
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { TimerClient } from "../src/index.js";
import { eventually } from "../test/support/wait.js";
import { startWorld, tenant, type World } from "../test/support/world.js";

const [runs = 3, n = 20_000, rate = 1000, seconds = 10] = process.argv.slice(2).map(Number);
const WINDOW = 2000;
const rustExample = process.env.RUST_SCHEDULE_EXAMPLE;

interface Spread {
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? Number.NaN;
}

const spread = (values: number[]): Spread => {
  const sorted = [...values].sort((a, b) => a - b);
  const round = (v: number) => Number(v.toFixed(2));
  return { p50Ms: round(percentile(sorted, 50)), p99Ms: round(percentile(sorted, 99)), maxMs: round(sorted[sorted.length - 1] ?? Number.NaN) };
};

const median = (values: number[]) => percentile([...values].sort((a, b) => a - b), 50);

/** Wall-clock milliseconds with the fraction `Date.now()` drops. */
const nowMs = () => performance.timeOrigin + performance.now();

async function storedByDaemon(client: TimerClient, count: number): Promise<void> {
  await eventually(`every scheduled timer stored (${count})`, async () => (await client.stats()).scheduled === count, {
    timeoutMs: 120_000,
    everyMs: 200,
  });
}

async function typescriptRate(world: World, noAsyncTraces = false): Promise<number> {
  const nc = await world.connect({ noAsyncTraces });
  const bulk = new TimerClient(nc, { tenantId: tenant("ts-rate"), timeoutMs: 30_000 });
  const dueAt = Date.now() + 86_400_000;
  const started = performance.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: WINDOW }, async () => {
      while (next < n) {
        const i = next++;
        await bulk.schedule({ serviceCallId: `r-${i}`, dueAt });
      }
    }),
  );
  const perSecond = n / ((performance.now() - started) / 1000);
  await storedByDaemon(bulk, n);
  await bulk.cancelMany({ all: true });
  return perSecond;
}

async function rust(world: World, args: string[]): Promise<{ perSecond: number; receivedMinusDueAt: Spread; received: number }> {
  const { stdout } = await promisify(execFile)(rustExample as string, ["--url", world.server.url, ...args], {
    maxBuffer: 64 * 1024 * 1024,
    timeout: 180_000,
  });
  const last = stdout.trim().split("\n").pop() ?? "";
  return JSON.parse(last);
}

async function rustRate(world: World): Promise<number> {
  const tenantId = tenant("rust-rate");
  const figures = await rust(world, ["--tenant", tenantId, "--count", String(n), "--in-secs", "86400", "--no-wait", "--json"]);
  const nc = await world.connect();
  const bulk = new TimerClient(nc, { tenantId, timeoutMs: 30_000 });
  await storedByDaemon(bulk, n);
  await bulk.cancelMany({ all: true });
  return figures.perSecond;
}

async function typescriptLateness(world: World) {
  const nc = await world.connect();
  const tenantId = tenant("ts-lateness");
  const steady = new TimerClient(nc, { tenantId, timeoutMs: 30_000 });
  const handler: number[] = [];
  const plain: number[] = [];
  const daemon: number[] = [];
  const sub = await steady.onDue(
    (event) => {
      handler.push(nowMs() - Date.parse(event.payload.dueAt));
      daemon.push(Date.parse(event.payload.reachedAt) - Date.parse(event.payload.dueAt));
    },
    { consumer: "bench-lateness", concurrency: 16, batch: 256 },
  );
  const listener = await world.connect();
  const subscription = listener.subscribe(`timer.evt.due.${tenantId}`, {
    callback: (error, message) => {
      if (error) return;
      const received = nowMs();
      plain.push(received - Date.parse(message.json<{ payload: { dueAt: string } }>().payload.dueAt));
    },
  });
  const total = rate * seconds;
  const begin = Date.now();
  const sends: Promise<unknown>[] = [];
  for (let i = 0; i < total; i++) {
    const at = begin + (i * 1000) / rate;
    const wait = at - Date.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    sends.push(steady.schedule({ serviceCallId: `l-${i}`, dueAt: Date.now() + 2000 }));
  }
  await Promise.all(sends);
  await eventually(`all ${total} timers received`, () => handler.length >= total && plain.length >= total, { timeoutMs: 60_000, everyMs: 200 });
  await sub.stop();
  subscription.unsubscribe();
  return { handler: spread(handler), plainSubscription: spread(plain), daemonReachedAtMinusDueAt: spread(daemon) };
}

async function rustLateness(world: World): Promise<Spread> {
  const total = rate * seconds;
  const figures = await rust(world, ["--tenant", tenant("rust-lateness"), "--count", String(total), "--rate", String(rate), "--in-secs", "2", "--json"]);
  if (figures.received < total) throw new Error(`the Rust example received ${figures.received} of ${total} timers`);
  return figures.receivedMinusDueAt;
}

async function oneRun(index: number) {
  const world = await startWorld();
  try {
    const rustFirst = index % 2 === 1;
    const both = async <T, U>(ts: () => Promise<T>, rs: () => Promise<U>): Promise<[T, U | undefined]> => {
      if (!rustExample) return [await ts(), undefined];
      if (rustFirst) {
        const r = await rs();
        return [await ts(), r];
      }
      const t = await ts();
      return [t, await rs()];
    };
    const [tsRate, rsRate] = await both(
      () => typescriptRate(world),
      () => rustRate(world),
    );
    // nats.js makes an Error per request for its stack trace unless told not to.
    const tsRateNoTraces = await typescriptRate(world, true);
    const [tsLate, rsLate] = await both(
      () => typescriptLateness(world),
      () => rustLateness(world),
    );
    return {
      rustFirst: rustExample ? rustFirst : undefined,
      schedulePerSecond: {
        typescript: Math.round(tsRate),
        typescriptNoAsyncTraces: Math.round(tsRateNoTraces),
        rust: rsRate === undefined ? undefined : Math.round(rsRate),
      },
      lateness: { typescript: tsLate, rust: rsLate },
    };
  } finally {
    await world.stop();
  }
}

const results: Awaited<ReturnType<typeof oneRun>>[] = [];
for (let i = 0; i < runs; i++) results.push(await oneRun(i));

const pick = (f: (r: (typeof results)[number]) => number | undefined) => {
  const values = results.map(f).filter((v): v is number => v !== undefined);
  return values.length ? median(values) : undefined;
};
console.log(
  JSON.stringify(
    {
      timers: n,
      inFlight: WINDOW,
      ratePerSecond: rate,
      seconds,
      runs: results,
      medians: {
        schedulePerSecond: {
          typescript: pick((r) => r.schedulePerSecond.typescript),
          typescriptNoAsyncTraces: pick((r) => r.schedulePerSecond.typescriptNoAsyncTraces),
          rust: pick((r) => r.schedulePerSecond.rust),
        },
        scheduleRatioTypescriptToRust: pick((r) => (r.schedulePerSecond.rust ? r.schedulePerSecond.typescript / r.schedulePerSecond.rust : undefined)),
        latenessP99Ms: {
          typescriptHandler: pick((r) => r.lateness.typescript.handler.p99Ms),
          typescriptPlainSubscription: pick((r) => r.lateness.typescript.plainSubscription.p99Ms),
          daemon: pick((r) => r.lateness.typescript.daemonReachedAtMinusDueAt.p99Ms),
          rust: pick((r) => r.lateness.rust?.p99Ms),
        },
        latenessP50Ms: {
          typescriptHandler: pick((r) => r.lateness.typescript.handler.p50Ms),
          typescriptPlainSubscription: pick((r) => r.lateness.typescript.plainSubscription.p50Ms),
          rust: pick((r) => r.lateness.rust?.p50Ms),
        },
      },
    },
    null,
    2,
  ),
);
