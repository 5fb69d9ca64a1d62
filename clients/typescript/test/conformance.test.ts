/**
 * The client refuses with the daemon's own words: each bad command is refused by the client,
 * then sent raw (past the client's checks) so the daemon rejects it, and the two reasons must
 * be equal. The same for the API's 400s.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { jetstream } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import { TimerBadRequestError, TimerClient, TimerRejectedError, type RejectedEvent, type ScheduleInput } from "../src/index.js";
import { uuidv7 } from "../src/envelope.js";
import { DEFAULT_LIMITS, checkDataJson } from "../src/rules.js";
import { Inbox } from "./support/wait.js";
import { missing, startWorld, tenant, type World } from "./support/world.js";

describe("the client's refusals match the daemon's", { skip: missing() }, () => {
  let world: World;
  let nc: NatsConnection;

  before(async () => {
    world = await startWorld();
    nc = await world.connect();
  });
  after(async () => {
    await world?.stop();
  });

  it("for commands", async () => {
    const timers = new TimerClient(nc, { tenantId: tenant("conformance") });
    const rejected = new Inbox<RejectedEvent>();
    const sub = await timers.onRejected((event) => void rejected.push(event), { consumer: "conformance" });
    const js = jetstream(nc);
    const later = "2030-01-01T00:00:00Z";
    let deep: unknown = 0;
    for (let i = 0; i < 65; i++) deep = { d: deep };
    const cases: Array<[string, ScheduleInput]> = [
      ["an empty id", { serviceCallId: "", dueAt: later }],
      ["a long id", { serviceCallId: "é".repeat(129), dueAt: later }],
      ["a control character", { serviceCallId: "a\u0007b", dueAt: later }],
      ["no zone", { serviceCallId: "k", dueAt: "2026-11-22T10:00:00" }],
      ["year 0", { serviceCallId: "k", dueAt: "0000-01-01T00:30:00+01:00" }],
      ["no such day", { serviceCallId: "k", dueAt: "2026-02-30T00:00:00Z" }],
      ["not a date", { serviceCallId: "k", dueAt: "next tuesday at noon" }],
      ["years", { serviceCallId: "k", dueAt: later, expireAfter: "P1Y" }],
      ["too short", { serviceCallId: "k", dueAt: later, expireAfter: "PT0S" }],
      ["too long", { serviceCallId: "k", dueAt: later, expireAfter: "P3651D" }],
      ["big data", { serviceCallId: "k", dueAt: later, data: "x".repeat(16 * 1024) }],
      ["deep data", { serviceCallId: "k", dueAt: later, data: deep }],
      ["a long correlation id", { serviceCallId: "k", dueAt: later, correlationId: "c".repeat(257) }],
      ["a huge message", { serviceCallId: "k", dueAt: later, data: "y".repeat(70 * 1024) }],
      ["two faults: the daemon's order", { serviceCallId: "", dueAt: "never", expireAfter: "P1Y" }],
    ];
    const expected = new Map<string, [string, string]>();
    for (const [name, input] of cases) {
      const refusal = await timers.schedule(input).then(
        () => assert.fail(`the client sent ${name}`),
        (error: unknown) => {
          assert.ok(error instanceof TimerRejectedError, `${name}: ${String(error)}`);
          return error.reason;
        },
      );
      const id = uuidv7();
      const payload = { tenantId: timers.tenantId, ...input };
      // The envelope the client would have sent, byte for byte in size.
      const command = { id, type: "ScheduleTimer", tenantId: timers.tenantId, timestampMs: Date.now(), aggregateId: input.serviceCallId, payload };
      await js.publish(timers.subjects.schedule, JSON.stringify(command));
      expected.set(id, [name, refusal]);
    }
    // A number of 101 characters cannot come from a JavaScript value; its text can be sent.
    const longNumber = `[${"9".repeat(101)}]`;
    const rawId = uuidv7();
    await js.publish(
      timers.subjects.schedule,
      `{"id":"${rawId}","type":"ScheduleTimer","tenantId":"${timers.tenantId}","timestampMs":1,"payload":{"tenantId":"${timers.tenantId}","serviceCallId":"k","dueAt":"${later}","data":${longNumber}}}`,
    );
    expected.set(rawId, ["a long number", checkDataJson(longNumber, DEFAULT_LIMITS) ?? "accepted"]);

    await rejected.nth(expected.size - 1, "a rejection of every case", 30_000);
    for (const event of rejected.all) {
      const id = /"id":"([0-9a-f-]{36})"/.exec(event.payload.original)?.[1] ?? "";
      const [name, reason] = expected.get(id) ?? ["?", "?"];
      assert.equal(reason, event.payload.reason, `${name}: the client and the daemon give the same reason`);
    }
    assert.equal(rejected.size, expected.size);
    await sub.stop();
  });

  it("for ScheduleTimers, naming the bad timer's position", async () => {
    const timers = new TimerClient(nc, { tenantId: tenant("conformance-many") });
    const rejected = new Inbox<RejectedEvent>();
    const sub = await timers.onRejected((event) => void rejected.push(event), { consumer: "conformance-many" });
    const js = jetstream(nc);
    const later = "2030-01-01T00:00:00Z";
    const good = (n: number): ScheduleInput[] => Array.from({ length: n }, (_, i) => ({ serviceCallId: `ok-${i}`, dueAt: later }));
    const cases: Array<[string, ScheduleInput[]]> = [
      ["an empty id", [...good(3), { serviceCallId: "", dueAt: later }]],
      ["a key named twice", [...good(5), { serviceCallId: "ok-2", dueAt: later }]],
      ["a key named twice, the second one bad otherwise", [...good(2), { serviceCallId: "ok-0", dueAt: "never" }]],
      ["no zone", [{ serviceCallId: "k", dueAt: "2026-11-22T10:00:00" }]],
      ["years", [...good(1), { serviceCallId: "k", dueAt: later, expireAfter: "P1Y" }]],
      ["big data", [...good(2), { serviceCallId: "k", dueAt: later, data: "x".repeat(16 * 1024) }]],
      ["a long correlation id", [...good(4), { serviceCallId: "k", dueAt: later, correlationId: "c".repeat(257) }]],
      ["two bad timers: the first", [...good(1), { serviceCallId: "a\u0007", dueAt: later }, { serviceCallId: "", dueAt: later }]],
    ];
    const expected = new Map<string, [string, string]>();
    for (const [name, inputs] of cases) {
      const refusal = await timers.scheduleTimers(inputs).then(
        () => assert.fail(`the client sent ${name}`),
        (error: unknown) => {
          assert.ok(error instanceof TimerRejectedError, `${name}: ${String(error)}`);
          return error.reason;
        },
      );
      const id = uuidv7();
      const payload = { tenantId: timers.tenantId, timers: inputs };
      const command = { id, type: "ScheduleTimers", tenantId: timers.tenantId, timestampMs: Date.now(), payload };
      await js.publish(timers.subjects.scheduleMany, JSON.stringify(command));
      expected.set(id, [name, refusal]);
    }
    await rejected.nth(expected.size - 1, "a rejection of every case", 30_000);
    for (const event of rejected.all) {
      const id = /"id":"([0-9a-f-]{36})"/.exec(event.payload.original)?.[1] ?? "";
      const [name, reason] = expected.get(id) ?? ["?", "?"];
      assert.equal(reason, event.payload.reason, `${name}: the client and the daemon give the same reason`);
    }
    assert.equal(rejected.size, expected.size);
    assert.equal((await timers.stats()).scheduled, 0, "none of the good timers of a refused message stored");
    await sub.stop();
  });

  it("for API requests", async () => {
    const timers = new TimerClient(nc, { tenantId: tenant("conformance-api") });
    const requests: Array<[string, object, () => Promise<unknown>]> = [
      ["get", { serviceCallId: "" }, () => timers.get("")],
      ["cancel", { serviceCallId: "x".repeat(129) }, () => timers.cancel("x".repeat(129))],
      ["list", { limit: 0 }, () => timers.listPage({ pageSize: 0 })],
      ["list", { dueFrom: "soon" }, () => timers.listPage({ dueFrom: "soon" })],
      ["list", { limit: 5000, dueTo: "soon" }, () => timers.listPage({ pageSize: 5000, dueTo: "soon" })],
      ["stats", { forecastMinutes: 0 }, () => timers.stats({ forecastMinutes: 0 })],
      ["stats", { forecastMinutes: 2.5 }, () => timers.stats({ forecastMinutes: 2.5 })],
      ["cancel-many", {}, () => timers.cancelMany({})],
      ["cancel-many", { all: true, correlationId: "x" }, () => timers.cancelMany({ all: true, correlationId: "x" })],
      ["cancel-many", { dueFrom: "2026-01-02T00:00:00Z", dueTo: "2026-01-01T00:00:00.250Z" }, () =>
        timers.cancelMany({ dueFrom: "2026-01-02T00:00:00Z", dueTo: "2026-01-01T00:00:00.250Z" })],
      ["cancel-many", { dueFrom: "2026-01-02" }, () => timers.cancelMany({ dueFrom: "2026-01-02" })],
    ];
    for (const [verb, body, call] of requests) {
      const client = await call().then(
        () => assert.fail(`the client sent ${verb} ${JSON.stringify(body)}`),
        (error: unknown) => {
          assert.ok(error instanceof TimerBadRequestError, String(error));
          assert.equal(error.source, "client");
          return error.reason;
        },
      );
      const reply = await nc.request(`timer.api.${verb}.${timers.tenantId}`, JSON.stringify(body), { timeout: 5000 });
      assert.equal(reply.headers?.get("Nats-Service-Error-Code"), "400", `${verb} ${JSON.stringify(body)}`);
      assert.equal(client, (reply.json() as { error: string }).error, `${verb} ${JSON.stringify(body)}`);
    }
  });
});
