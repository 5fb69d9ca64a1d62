/**
 * Durable consumers: an event is acknowledged only once its handler resolved, delivered again
 * (after the delay asked for) when the handler threw, kept in progress while a handler is
 * slow, handed back at once on stop, and resumed under the same name.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import { TimerClient, TimerServiceError, type DeliveryInfo, type DueEvent } from "../src/index.js";
import { Inbox, eventually } from "./support/wait.js";
import { missing, startWorld, tenant, type World } from "./support/world.js";

describe("event consumers", { skip: missing() }, () => {
  let world: World;
  let nc: NatsConnection;
  let jsm: JetStreamManager;

  before(async () => {
    world = await startWorld();
    nc = await world.connect();
    jsm = await jetstreamManager(nc);
  });
  after(async () => {
    await world?.stop();
  });

  const client = (name: string) => new TimerClient(nc, { tenantId: tenant(name) });
  const settled = (consumer: string) =>
    eventually(`consumer ${consumer} to have nothing pending`, async () => {
      const info = await jsm.consumers.info("TIMER_EVENTS", consumer);
      return info.num_ack_pending === 0 && info.num_pending === 0 ? info : undefined;
    });

  it("delivers again after the delay when the handler throws, and acks once it resolves", async () => {
    const timers = client("retry");
    const attempts = new Inbox<{ info: DeliveryInfo; at: number }>();
    const errors = new Inbox<unknown>();
    const sub = await timers.onDue(
      (_event, info) => {
        attempts.push({ info, at: Date.now() });
        if (info.deliveryCount < 3) throw new Error(`attempt ${info.deliveryCount} fails`);
      },
      { consumer: "retry", retryDelayMs: (attempt) => attempt * 300, onError: (error) => errors.push(error) },
    );
    await timers.schedule({ serviceCallId: "flaky", dueAt: Date.now() });
    const third = await attempts.nth(2, "the third delivery");
    const [first, second] = [attempts.all[0], attempts.all[1]];
    assert.deepEqual(attempts.all.map((a) => a.info.deliveryCount), [1, 2, 3]);
    assert.ok(second && first && second.at - first.at >= 250, "the first retry waited its 300 ms");
    assert.ok(second && third.at - second.at >= 550, "the second retry waited its 600 ms");
    assert.equal(first?.info.msgId, third.info.msgId, "the same event each time");
    assert.equal(errors.size, 2);
    const info = await settled("retry");
    assert.equal(info.delivered.stream_seq, third.info.streamSequence);
    assert.equal(attempts.size, 3, "acknowledged: not delivered a fourth time");
    await sub.stop();
  });

  it("stops delivering an event whose handler always throws after maxDeliver deliveries", async () => {
    const timers = client("max-deliver");
    const attempts = new Inbox<number>();
    const advisories = new Inbox<string>();
    // The broker's own word that it gave up on the event, rather than a wait that sees nothing.
    const advisory = nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.TIMER_EVENTS.max-deliver", {
      callback: (_error, message) => advisories.push(message.subject),
    });
    const sub = await timers.onDue(
      (_event, info) => {
        attempts.push(info.deliveryCount);
        throw new Error("this handler always fails");
      },
      { consumer: "max-deliver", maxDeliver: 2, retryDelayMs: 100, onError: () => undefined },
    );
    await timers.schedule({ serviceCallId: "poison", dueAt: Date.now() });
    await advisories.nth(0, "the broker's max-deliveries advisory");
    await nc.flush();
    assert.deepEqual(attempts.all, [1, 2], "delivered twice, not a third time");
    const info = await jsm.consumers.info("TIMER_EVENTS", "max-deliver");
    assert.equal(info.config.max_deliver, 2);
    advisory.unsubscribe();
    await sub.stop();
  });

  it("acknowledges only after the handler resolved, and keeps a slow handler's event in progress", async () => {
    const timers = client("slow");
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const deliveries = new Inbox<DeliveryInfo>();
    const sub = await timers.onDue(
      async (_event, info) => {
        deliveries.push(info);
        await gate;
      },
      { consumer: "slow", ackWaitMs: 1000 },
    );
    await timers.schedule({ serviceCallId: "slow-1", dueAt: Date.now() });
    await deliveries.nth(0, "the delivery");
    const held = await jsm.consumers.info("TIMER_EVENTS", "slow");
    assert.equal(held.num_ack_pending, 1, "not acknowledged while the handler runs");
    // Three ack waits pass while the handler is at work: it is reported in progress, not redelivered.
    const since = Date.now();
    await eventually("three ack waits to pass", () => Date.now() - since >= 3000, { timeoutMs: 5000, everyMs: 100 });
    const during = await jsm.consumers.info("TIMER_EVENTS", "slow");
    assert.equal(during.num_redelivered, 0, "kept in progress");
    assert.equal(deliveries.size, 1);
    release();
    await settled("slow");
    assert.equal(deliveries.size, 1);
    await sub.stop();
  });

  it("hands back what was pulled and not begun on stop, and resumes under the same name", async () => {
    const timers = client("resume");
    for (let i = 0; i < 5; i++) await timers.schedule({ serviceCallId: `r-${i}`, dueAt: Date.now() });
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const first = new Inbox<string>();
    const sub = await timers.onDue(
      async (event) => {
        first.push(event.payload.serviceCallId);
        await gate;
      },
      { consumer: "resume" },
    );
    await first.nth(0, "the first event");
    const stopped = sub.stop();
    release();
    await stopped;
    assert.equal(first.size, 1, "nothing new begun after stop");
    await timers.schedule({ serviceCallId: "r-while-stopped", dueAt: Date.now() });
    await eventually("the event fired while stopped", async () => (await timers.get("r-while-stopped")).state === "Reached");

    const second = new Inbox<string>();
    const resumed = await timers.onDue((event) => void second.push(event.payload.serviceCallId), { consumer: "resume", ackWaitMs: 30_000 });
    // Handed back, not left to the 30 s ack wait: they come within seconds.
    await second.nth(4, "the rest, and the one fired while stopped", 10_000);
    assert.deepEqual(new Set([...first.all, ...second.all]), new Set(["r-0", "r-1", "r-2", "r-3", "r-4", "r-while-stopped"]));
    assert.ok(!second.all.includes(first.all[0] ?? ""), "the acknowledged one is not delivered again");
    await settled("resume");
    await resumed.stop();
  });

  it("runs handlers side by side up to its concurrency", async () => {
    const timers = client("parallel");
    let running = 0;
    let most = 0;
    const done = new Inbox<string>();
    const sub = await timers.onDue(
      async (event: DueEvent) => {
        running += 1;
        most = Math.max(most, running);
        await eventually("a moment of overlap", () => most >= 3 || done.size >= 5, { timeoutMs: 2000 }).catch(() => undefined);
        running -= 1;
        done.push(event.payload.serviceCallId);
      },
      { consumer: "parallel", concurrency: 3 },
    );
    for (let i = 0; i < 6; i++) await timers.schedule({ serviceCallId: `p-${i}`, dueAt: Date.now() });
    await done.nth(5, "six events handled");
    assert.equal(most, 3);
    await sub.stop();
  });

  it("takes an unreadable event off the consumer, says so, and goes on", async () => {
    const timers = client("garbage");
    const errors = new Inbox<unknown>();
    const seen = new Inbox<string>();
    const sub = await timers.onDue((event) => void seen.push(event.payload.serviceCallId), {
      consumer: "garbage",
      onError: (error) => errors.push(error),
    });
    await nc.request(timers.subjects.event("due"), "not json", { timeout: 5000 });
    await timers.schedule({ serviceCallId: "after-garbage", dueAt: Date.now() });
    assert.equal(await seen.nth(0, "the real event"), "after-garbage");
    const error = await errors.nth(0, "the unreadable event reported");
    assert.ok(error instanceof TimerServiceError);
    await settled("garbage");
    await sub.stop();
  });

  it("stops every handler of a client with close()", async () => {
    const timers = client("close");
    const due = await timers.onDue(() => undefined, { consumer: "close-due" });
    const expired = await timers.onExpired(() => undefined, { consumer: "close-expired" });
    let ended = 0;
    void due.done.then(() => (ended += 1));
    void expired.done.then(() => (ended += 1));
    await timers.close();
    assert.equal(ended, 2);
  });

  it("refuses a consumer name that already reads another subject", async () => {
    const timers = client("names");
    const sub = await timers.onDue(() => undefined, { consumer: "names-shared" });
    await assert.rejects(timers.onExpired(() => undefined, { consumer: "names-shared" }), (error: unknown) => {
      assert.ok(error instanceof TimerServiceError);
      assert.match(error.reason, /reads timer\.evt\.due\..*, not timer\.evt\.expired\./);
      return true;
    });
    await sub.stop();
  });
});
