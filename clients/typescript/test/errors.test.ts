/**
 * Every error code of the API as its typed error, from the real daemon: 400 (a request only
 * the daemon can judge), 404, 500 (the command stream refusing the cancel's command) and 503
 * (a tenant's flood of requests past what it may have waiting, with retryAfterMs); and a
 * subject nothing answers as "unavailable", from the broker.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { DiscardPolicy, jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import {
  TimerBadRequestError,
  TimerClient,
  TimerNotFoundError,
  TimerServiceError,
  TimerUnavailableError,
} from "../src/index.js";
import { eventually } from "./support/wait.js";
import { missing, startWorld, tenant, type World } from "./support/world.js";

describe("typed errors", { skip: missing() }, () => {
  let world: World;
  let nc: NatsConnection;

  before(async () => {
    // One request of a tenant at a time, so a burst fills its 1,024 places quickly.
    world = await startWorld({ daemonEnv: { TIMER_API_MAX_IN_FLIGHT_PER_TENANT: "1" } });
    nc = await world.connect();
  });
  after(async () => {
    await world?.stop();
  });

  it("400 from the daemon: a cursor list never gave", async () => {
    const timers = new TimerClient(nc, { tenantId: tenant("bad") });
    await assert.rejects(timers.listPage({ after: "not-a-cursor" }), (error: unknown) => {
      assert.ok(error instanceof TimerBadRequestError);
      assert.equal(error.code, 400);
      assert.equal(error.source, "service");
      assert.equal(error.reason, 'after "not-a-cursor" is not a cursor returned as next by list');
      return true;
    });
  });

  it("404: no timer by that key", async () => {
    const timers = new TimerClient(nc, { tenantId: tenant("missing") });
    await assert.rejects(timers.get("nothing-here"), (error: unknown) => {
      assert.ok(error instanceof TimerNotFoundError);
      assert.equal(error.code, 404);
      assert.match(error.reason, /^no timer "nothing-here" for tenant /);
      return true;
    });
  });

  it("500: the cancel's command cannot be stored", async () => {
    const timers = new TimerClient(nc, { tenantId: tenant("internal") });
    const jsm = await jetstreamManager(nc);
    const before = (await jsm.streams.info("TIMER_COMMANDS")).config;
    await jsm.streams.update("TIMER_COMMANDS", { max_bytes: 1, discard: DiscardPolicy.New });
    try {
      await assert.rejects(timers.cancel("k"), (error: unknown) => {
        assert.ok(error instanceof TimerServiceError, String(error));
        assert.equal(error.code, 500);
        assert.match(error.reason, /^cancel not accepted: the command stream did not store it/);
        return true;
      });
    } finally {
      await jsm.streams.update("TIMER_COMMANDS", { max_bytes: before.max_bytes, discard: before.discard });
    }
    assert.equal((await timers.cancel("k")).outcome, "not_found", "works again once the stream takes it");
  });

  it("503 with retryAfterMs: a tenant's flood past what may wait", async () => {
    const timers = new TimerClient(nc, { tenantId: tenant("flood"), timeoutMs: 20_000 });
    // 1,500 at once, one handled at a time: past 1,024 waiting, the rest are refused for now.
    const results = await Promise.allSettled(Array.from({ length: 1500 }, () => timers.stats()));
    const refused = results.flatMap((r) => (r.status === "rejected" ? [r.reason as unknown] : []));
    assert.ok(refused.length > 0, "some refused");
    for (const error of refused) {
      assert.ok(error instanceof TimerUnavailableError, String(error));
      assert.equal(error.code, 503);
      assert.equal(error.source, "service");
      assert.ok(error.retryAfterMs > 0);
      assert.match(error.reason, /requests waiting or in flight/);
    }
    // Asked again after retryAfterMs, it is answered.
    const first = refused[0] as TimerUnavailableError;
    await eventually("an answer after the flood", () => timers.stats(), { timeoutMs: 10_000, everyMs: first.retryAfterMs });
  });

  it("unavailable from the broker: nothing answers on the subject", async () => {
    const timers = new TimerClient(nc, { tenantId: tenant("nobody"), prefixes: { api: "timer.nobody" }, timeoutMs: 1000 });
    await assert.rejects(timers.stats(), (error: unknown) => {
      assert.ok(error instanceof TimerUnavailableError);
      assert.equal(error.code, undefined);
      assert.equal(error.source, "broker");
      assert.match(error.reason, /^nothing answers on timer\.nobody\.stats\./);
      return true;
    });
  });
});
