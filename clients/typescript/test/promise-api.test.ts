/**
 * The Promise API against a real nats-server and daemon: every method, the events of each
 * kind, and what the daemon still refuses arriving as a TimerCommandRejected.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { NatsConnection } from "@nats-io/nats-core";
import { TimerClient, TimerNotFoundError, TimerRejectedError, type DueEvent, type ExpiredEvent, type RejectedEvent } from "../src/index.js";
import { Inbox, eventually } from "./support/wait.js";
import { missing, startWorld, tenant, type World } from "./support/world.js";

const quotaTenant = `quota-${process.pid}`;

describe("the Promise API", { skip: missing() }, () => {
  let world: World;
  let nc: NatsConnection;

  before(async () => {
    world = await startWorld({ daemonEnv: { TIMER_QUOTAS_TENANTS: `${quotaTenant}:max_pending=1` } });
    nc = await world.connect();
  });
  after(async () => {
    await world?.stop();
  });

  const client = (name: string) => new TimerClient(nc, { tenantId: tenant(name) });

  it("schedules with a Date, RFC 3339 text or epoch ms, and get shows each as stored", async () => {
    const timers = client("schedule");
    const inAnHour = Date.now() + 3_600_000;
    const byDate = await timers.schedule({ serviceCallId: "by-date", dueAt: new Date(inAnHour) });
    const byText = await timers.schedule({ serviceCallId: "by-text", dueAt: "2030-01-02T04:05:06.0071+01:00", correlationId: "req-1" });
    const byMs = await timers.schedule({ serviceCallId: "by-ms", dueAt: inAnHour + 0.5, data: { order: 42, step: "remind" } });
    assert.ok(byDate.seq > 0 && byText.seq > byDate.seq && byMs.seq > byText.seq, "stored in order");
    assert.equal(byDate.stream, "TIMER_COMMANDS");
    assert.equal(byDate.dueAt, new Date(inAnHour).toISOString());

    // The PubAck says the broker stored the command; the daemon applies it a moment later.
    await eventually("the three commands applied", async () => (await timers.stats()).scheduled === 3);
    const date = await timers.get("by-date");
    assert.equal(date.state, "Scheduled");
    assert.equal(date.dueAt, new Date(inAnHour).toISOString());
    const text = await timers.get("by-text");
    assert.equal(text.dueAt, "2030-01-02T03:05:06.008Z", "converted to UTC and rounded up to the millisecond");
    assert.equal(text.correlationId, "req-1");
    const ms = await timers.get<{ order: number; step: string }>("by-ms");
    assert.equal(ms.dueAt, new Date(inAnHour + 1).toISOString(), "a fraction of a millisecond rounds up");
    assert.deepEqual(ms.data, { order: 42, step: "remind" });
    await assert.rejects(timers.get("never-scheduled"), TimerNotFoundError);
  });

  it("delivers DueTimeReached with its data to onDue, and the timer is then Reached", async () => {
    const timers = client("due");
    const seen = new Inbox<DueEvent<{ order: number }>>();
    const sub = await timers.onDue<{ order: number }>((event) => void seen.push(event), { consumer: "due-test" });
    const dueAt = new Date(Date.now() + 500);
    await timers.schedule({ serviceCallId: "sc-7", dueAt, data: { order: 7 }, correlationId: "req-7" });
    const event = await seen.nth(0, "the DueTimeReached");
    assert.equal(event.type, "DueTimeReached");
    assert.equal(event.tenantId, timers.tenantId);
    assert.equal(event.aggregateId, "sc-7");
    assert.equal(event.correlationId, "req-7");
    assert.equal(event.payload.serviceCallId, "sc-7");
    assert.equal(event.payload.dueAt, dueAt.toISOString());
    assert.ok(Date.parse(event.payload.reachedAt) >= dueAt.getTime(), "never early");
    assert.deepEqual(event.payload.data, { order: 7 });
    await eventually("the timer marked Reached", async () => (await timers.get("sc-7")).state === "Reached");
    await sub.stop();
  });

  it("lists every timer across pages, in dueAt order, with filters", async () => {
    const timers = client("list");
    const base = Date.now() + 3_600_000;
    for (let i = 0; i < 7; i++) {
      await timers.schedule({ serviceCallId: `t-${i}`, dueAt: base + i * 1000, correlationId: i % 2 === 0 ? "even" : "odd" });
    }
    await eventually("seven timers stored", async () => (await timers.stats()).scheduled === 7);
    const all = [];
    for await (const timer of timers.list({ pageSize: 2 })) all.push(timer.serviceCallId);
    assert.deepEqual(all, ["t-0", "t-1", "t-2", "t-3", "t-4", "t-5", "t-6"]);
    const firstPage = await timers.listPage({ pageSize: 3 });
    assert.equal(firstPage.timers.length, 3);
    assert.ok(firstPage.next, "a next cursor when more follow");
    const even = [];
    for await (const timer of timers.list({ correlationId: "even", pageSize: 1 })) even.push(timer.serviceCallId);
    assert.deepEqual(even, ["t-0", "t-2", "t-4", "t-6"]);
    const ranged = [];
    for await (const timer of timers.list({ dueFrom: new Date(base + 2000), dueTo: base + 4000, state: "Scheduled" })) {
      ranged.push(timer.serviceCallId);
    }
    assert.deepEqual(ranged, ["t-2", "t-3"]);
  });

  it("counts pending and overdue timers, with a forecast by minute", async () => {
    const timers = client("stats");
    const empty = await timers.stats();
    assert.deepEqual([empty.scheduled, empty.overdue, empty.nextDueAt], [0, 0, null]);
    assert.equal(empty.forecast, undefined);
    const soon = Date.now() + 90_000;
    await timers.schedule({ serviceCallId: "a", dueAt: soon });
    await timers.schedule({ serviceCallId: "b", dueAt: soon + 1 });
    const stats = await eventually("two pending", async () => {
      const s = await timers.stats({ forecastMinutes: 5 });
      return s.scheduled === 2 ? s : undefined;
    });
    assert.equal(stats.nextDueAt, new Date(soon).toISOString());
    assert.equal(stats.forecast?.length, 5);
    assert.equal(stats.forecast?.reduce((sum, m) => sum + m.due, 0), 2);
  });

  it("cancels one timer and says what happened each time", async () => {
    const timers = client("cancel");
    await timers.schedule({ serviceCallId: "c-1", dueAt: Date.now() + 3_600_000, data: { keep: true } });
    const first = await eventually("the cancel to find the timer", async () => {
      const reply = await timers.cancel("c-1");
      return reply.outcome === "not_found" ? undefined : reply;
    });
    assert.equal(first.outcome, "cancelled");
    assert.equal(first.timer?.state, "Cancelled");
    assert.deepEqual(first.timer?.data, { keep: true }, "a cancel keeps the data");
    assert.equal((await timers.cancel("c-1")).outcome, "already_cancelled");
    const missingOne = await timers.cancel("c-unknown");
    assert.equal(missingOne.outcome, "not_found");
    assert.equal((await timers.get("c-unknown")).dueAt, null, "a tombstone");

    const seen = new Inbox<DueEvent>();
    const sub = await timers.onDue((event) => void seen.push(event), { consumer: "cancel-test" });
    await timers.schedule({ serviceCallId: "c-fired", dueAt: Date.now() });
    await seen.nth(0, "c-fired to fire");
    assert.equal((await timers.cancel("c-fired")).outcome, "already_reached");
    await sub.stop();
  });

  it("cancels many by filter, counting first with dryRun", async () => {
    const timers = client("cancel-many");
    const base = Date.now() + 3_600_000;
    for (let i = 0; i < 6; i++) {
      await timers.schedule({ serviceCallId: `m-${i}`, dueAt: base + i * 60_000, correlationId: i < 4 ? "batch" : "other" });
    }
    await eventually("six pending", async () => (await timers.stats()).scheduled === 6);
    assert.deepEqual(await timers.cancelMany({ correlationId: "batch" }, { dryRun: true }), { count: 4, dryRun: true });
    assert.equal((await timers.stats()).scheduled, 6, "a dry run cancels nothing");
    assert.deepEqual(await timers.cancelMany({ correlationId: "batch", dueFrom: base + 60_000, dueTo: new Date(base + 180_000) }), {
      count: 2,
      dryRun: false,
    });
    assert.equal((await timers.get("m-1")).state, "Cancelled");
    assert.equal((await timers.get("m-0")).state, "Scheduled");
    assert.deepEqual(await timers.cancelMany({ all: true, state: "Scheduled" }), { count: 4, dryRun: false });
    assert.equal((await timers.stats()).scheduled, 0);
  });

  it("publishes a CancelTimer with cancelCommand, applied from the stream", async () => {
    const timers = client("cancel-command");
    await timers.schedule({ serviceCallId: "k", dueAt: Date.now() + 3_600_000 });
    const receipt = await timers.cancelCommand("k");
    assert.ok(receipt.seq > 0);
    await eventually("the cancel applied", async () => (await timers.get("k")).state === "Cancelled");
  });

  it("delivers TimerExpired to onExpired for a timer that can only fire past its deadline", async () => {
    const timers = client("expired");
    const seen = new Inbox<ExpiredEvent<string>>();
    const due = new Inbox<DueEvent>();
    const expiredSub = await timers.onExpired<string>((event) => void seen.push(event), { consumer: "expired-test" });
    const dueSub = await timers.onDue((event) => void due.push(event), { consumer: "expired-test-due" });
    const dueAt = new Date(Date.now() - 10_000);
    await timers.schedule({ serviceCallId: "late", dueAt, expireAfter: "PT1S", data: "payload" });
    const event = await seen.nth(0, "the TimerExpired");
    assert.equal(event.type, "TimerExpired");
    assert.equal(event.payload.expiresAt, new Date(dueAt.getTime() + 1000).toISOString());
    assert.equal(event.payload.data, "payload");
    // Published first, then marked (CONTRACT §5): the API shows it Expired a moment later.
    await eventually("the timer marked Expired", async () => (await timers.get("late")).state === "Expired");
    assert.equal(due.size, 0, "TimerExpired comes instead of DueTimeReached");
    await Promise.all([expiredSub.stop(), dueSub.stop()]);
  });

  it("refuses bad input before sending, and what only the daemon refuses arrives on onRejected", async () => {
    const timers = new TimerClient(nc, { tenantId: quotaTenant });
    const rejected = new Inbox<RejectedEvent>();
    const sub = await timers.onRejected((event) => void rejected.push(event), { consumer: "rejected-test" });
    await assert.rejects(timers.schedule({ serviceCallId: "", dueAt: Date.now() }), (error: unknown) => {
      assert.ok(error instanceof TimerRejectedError);
      assert.equal(error.reason, "serviceCallId must be 1–128 characters, got 0");
      assert.equal(error.source, "client");
      return true;
    });
    // max_pending 1 for this tenant: the second pending timer is the daemon's to refuse.
    await timers.schedule({ serviceCallId: "first", dueAt: Date.now() + 3_600_000 });
    await timers.schedule({ serviceCallId: "second", dueAt: Date.now() + 3_600_000 });
    const event = await rejected.nth(0, "the TimerCommandRejected");
    assert.equal(event.type, "TimerCommandRejected");
    assert.equal(event.payload.reason, `quota exceeded: max_pending 1 for tenant ${quotaTenant}`);
    assert.equal(event.payload.subject, `timer.cmd.schedule.${quotaTenant}`);
    assert.ok(event.payload.original.includes('"second"'));
    assert.equal(rejected.size, 1, "the refused empty id was never sent");
    await assert.rejects(timers.get("second"), TimerNotFoundError);
    await sub.stop();
  });
});
