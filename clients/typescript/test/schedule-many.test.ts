/**
 * `scheduleTimers` against a real nats-server and daemon: a list longer than one message is
 * sent as several and every timer fires once, never early, with its own data and correlation
 * id; a list cut by size is stored whole; a bad timer or a key named twice is refused before
 * anything reaches the broker.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import { TimerClient, TimerRejectedError, type DueEvent, type ScheduleInput } from "../src/index.js";
import { eventually } from "./support/wait.js";
import { missing, startWorld, tenant, type World } from "./support/world.js";

describe("scheduleTimers", { skip: missing() }, () => {
  let world: World;
  let nc: NatsConnection;

  before(async () => {
    world = await startWorld();
    nc = await world.connect();
  });
  after(async () => {
    await world?.stop();
  });

  const client = (name: string) => new TimerClient(nc, { tenantId: tenant(name) });

  /** The command stream's last sequence: unchanged when nothing was published. */
  const lastCommand = async () => (await (await jetstreamManager(nc)).streams.info("TIMER_COMMANDS")).state.last_seq;

  it("sends 2,500 timers as several messages, and each timer fires once, never early", async () => {
    const timers = client("many");
    const count = 2500;
    // Spread over a second, starting once every message is surely stored.
    const base = Date.now() + 3000;
    const inputs: ScheduleInput<{ i: number }>[] = Array.from({ length: count }, (_, i) => ({
      serviceCallId: `sc-${i}`,
      dueAt: base + (i % 100) * 10,
      data: { i },
      ...(i % 2 === 0 ? { correlationId: `corr-${i}` } : {}),
    }));
    const receipts = await timers.scheduleTimers(inputs);
    // At most 1000 a message, and fewer where 1000 of these would pass 64 KiB.
    assert.ok(receipts.length >= 3, `${receipts.length} messages`);
    let next = 0;
    for (const [k, receipt] of receipts.entries()) {
      assert.equal(receipt.first, next, "in the list's order, none left out");
      assert.ok(receipt.count >= 1 && receipt.count <= 1000);
      assert.equal(receipt.stream, "TIMER_COMMANDS");
      assert.equal(receipt.duplicate, false);
      assert.ok(k === 0 || receipt.seq > (receipts[k - 1]?.seq ?? 0), "stored in order");
      next += receipt.count;
    }
    assert.equal(next, count);

    // A new consumer starts with every event the stream holds: none is missed.
    const fired = new Map<string, Array<{ event: DueEvent<{ i: number }>; at: number }>>();
    const sub = await timers.onDue<{ i: number }>(
      (event) => {
        const key = event.payload.serviceCallId;
        fired.set(key, [...(fired.get(key) ?? []), { event, at: Date.now() }]);
      },
      { consumer: "many-due", batch: 256 },
    );
    try {
      await eventually("every timer to fire", () => fired.size === count, { timeoutMs: 90_000, everyMs: 200 });
    } finally {
      await sub.stop();
    }
    const generated = new Set<string>();
    for (const [i, input] of inputs.entries()) {
      const dueAt = input.dueAt as number;
      const seen = fired.get(input.serviceCallId) ?? [];
      assert.equal(seen.length, 1, `${input.serviceCallId} fired once`);
      const [{ event, at }] = seen as [{ event: DueEvent<{ i: number }>; at: number }];
      assert.equal(event.payload.dueAt, new Date(dueAt).toISOString());
      assert.ok(Date.parse(event.payload.reachedAt) >= dueAt, `${input.serviceCallId} reached no earlier than due`);
      assert.ok(at >= dueAt, `${input.serviceCallId} received no earlier than due`);
      assert.deepEqual(event.payload.data, { i });
      if (input.correlationId) {
        assert.equal(event.correlationId, input.correlationId, "the timer's own correlation id");
      } else {
        assert.ok(event.correlationId, "one generated when the timer and the envelope have none");
        generated.add(event.correlationId);
      }
    }
    assert.equal(generated.size, count / 2, "a new correlation id for each timer that had none");
    assert.equal([...fired.values()].flat().length, count, "no other event");
  });

  it("cuts a list by size and the daemon stores every message of it", async () => {
    const timers = client("by-size");
    const data = { note: "x".repeat(10_000) };
    const inputs = Array.from({ length: 14 }, (_, i) => ({ serviceCallId: `big-${i}`, dueAt: Date.now() + 3_600_000 + i, data }));
    const receipts = await timers.scheduleTimers(inputs);
    assert.deepEqual(receipts.map((r) => r.count), [6, 6, 2], "at most 64 KiB a message");
    await eventually("every timer stored", async () => (await timers.stats()).scheduled === inputs.length);
    assert.deepEqual((await timers.get<typeof data>("big-13")).data, data);
  });

  it("refuses a list with a bad timer before sending any of it, naming the timer's position", async () => {
    const timers = client("bad");
    const inputs: ScheduleInput[] = Array.from({ length: 1500 }, (_, i) => ({ serviceCallId: `sc-${i}`, dueAt: Date.now() + 60_000 }));
    inputs[1234] = { serviceCallId: "sc-1234", dueAt: "2026-11-22T10:00:00" };
    const before = await lastCommand();
    await assert.rejects(timers.scheduleTimers(inputs), (error: unknown) => {
      assert.ok(error instanceof TimerRejectedError);
      assert.equal(error.source, "client");
      assert.equal(error.subject, `timer.cmd.schedule-many.${timers.tenantId}`);
      assert.equal(
        error.reason,
        'timers[1234]: dueAt "2026-11-22T10:00:00" is not an RFC 3339 timestamp with a zone (Z or ±HH:MM): premature end of input',
      );
      return true;
    });
    assert.equal(await lastCommand(), before, "nothing published, not even the good timers before it");
    assert.equal((await timers.stats()).scheduled, 0);
    await assert.rejects(timers.scheduleTimers([]), /timers is empty/);
  });

  it("refuses a key named twice", async () => {
    const timers = client("twice");
    const inputs = Array.from({ length: 1100 }, (_, i) => ({ serviceCallId: `sc-${i}`, dueAt: Date.now() + 60_000 }));
    inputs.push({ serviceCallId: "sc-7", dueAt: Date.now() + 120_000 });
    const before = await lastCommand();
    await assert.rejects(timers.scheduleTimers(inputs), (error: unknown) => {
      assert.ok(error instanceof TimerRejectedError);
      assert.equal(error.reason, 'timers[1100]: serviceCallId "sc-7" is named twice: a ScheduleTimers holds each key at most once');
      return true;
    });
    assert.equal(await lastCommand(), before, "nothing published");
  });
});
