/**
 * Restarts under a waiting consumer: the daemon killed and started again (the timer still
 * arrives), and the broker restarted on the same port and storage while commands are being
 * sent (each schedule resolves or fails with a typed error, and every one that resolved fires).
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { NatsConnection } from "@nats-io/nats-core";
import { TimerClient, TimerError, type DueEvent } from "../src/index.js";
import { Inbox, eventually } from "./support/wait.js";
import { missing, startWorld, tenant, type World } from "./support/world.js";

describe("restarts", { skip: missing() }, () => {
  let world: World;
  let nc: NatsConnection;

  before(async () => {
    world = await startWorld();
    nc = await world.connect();
  });
  after(async () => {
    await world?.stop();
  });

  it("a timer still arrives when the daemon is killed and started again while the consumer waits", async () => {
    const timers = new TimerClient(nc, { tenantId: tenant("daemon-restart") });
    const seen = new Inbox<DueEvent>();
    const sub = await timers.onDue((event) => void seen.push(event), { consumer: "daemon-restart" });
    const dueAt = Date.now() + 1500;
    await timers.schedule({ serviceCallId: "across-a-crash", dueAt });
    await eventually("the timer stored", async () => (await timers.get("across-a-crash")).state === "Scheduled");
    await world.daemon.stop("SIGKILL");
    await eventually("dueAt to pass while the daemon is down", () => Date.now() > dueAt + 200, { everyMs: 50 });
    assert.equal(seen.size, 0, "nothing fires while the daemon is down");
    await world.daemon.restart();
    const event = await seen.nth(0, "the timer after the restart", 20_000);
    assert.equal(event.payload.serviceCallId, "across-a-crash");
    assert.ok(Date.parse(event.payload.reachedAt) >= dueAt);
    await sub.stop();
  });

  it("schedules across a broker restart: each call resolves or fails typed, and what resolved fires", async (t) => {
    const timers = new TimerClient(nc, { tenantId: tenant("broker-restart"), timeoutMs: 2000 });
    const seen = new Inbox<DueEvent>();
    const sub = await timers.onDue((event) => void seen.push(event), { consumer: "broker-restart" });
    const resolved = new Set<string>();
    const failed: TimerError[] = [];
    let sending = true;
    const sender = (async () => {
      for (let i = 0; sending || i < 20; i++) {
        const id = `b-${i}`;
        try {
          await timers.schedule({ serviceCallId: id, dueAt: Date.now() + 1000 });
          resolved.add(id);
        } catch (error) {
          assert.ok(error instanceof TimerError, `a typed error, not ${String(error)}`);
          failed.push(error);
        }
      }
    })();
    await eventually("a few commands stored before the restart", () => resolved.size >= 5);
    // Down long enough that some calls outlive their 2 s timeout.
    await world.server.restart({ hard: true, downMs: 2500 });
    await eventually("commands stored again after the restart", () => resolved.size >= 25, { timeoutMs: 30_000 });
    sending = false;
    await sender;
    for (const error of failed) assert.equal(error.kind, "TimerUnavailableError", error.message);
    t.diagnostic(`${resolved.size} resolved, ${failed.length} failed: ${[...new Set(failed.map((e) => e.reason))].join("; ")}`);
    await eventually(
      `all ${resolved.size} stored timers to fire`,
      () => [...resolved].every((id) => seen.all.some((e) => e.payload.serviceCallId === id)),
      { timeoutMs: 45_000, everyMs: 200 },
    );
    await sub.stop();
  });
});
