/**
 * A daemon configured with subject prefixes and stream names of its own: a client given the
 * same names schedules, queries, cancels and consumes through them, and nothing goes to the
 * default subjects.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { NatsConnection } from "@nats-io/nats-core";
import { TimerClient, type DueEvent } from "../src/index.js";
import { Inbox, eventually } from "./support/wait.js";
import { missing, startWorld, tenant, type World } from "./support/world.js";

const prefixes = { commands: "ops.timers.cmd", events: "ops.timers.evt", api: "ops.timers.api" };
const eventStream = "OPS_TIMER_EVENTS";

describe("a daemon with subjects of its own", { skip: missing() }, () => {
  let world: World;
  let nc: NatsConnection;

  before(async () => {
    world = await startWorld({
      daemonEnv: {
        TIMER_NATS_COMMAND_SUBJECT_PREFIX: prefixes.commands,
        TIMER_NATS_EVENT_SUBJECT_PREFIX: prefixes.events,
        TIMER_NATS_API_SUBJECT_PREFIX: prefixes.api,
        TIMER_NATS_COMMAND_STREAM: "OPS_TIMER_COMMANDS",
        TIMER_NATS_EVENT_STREAM: eventStream,
      },
    });
    nc = await world.connect();
  });
  after(async () => {
    await world?.stop();
  });

  it("schedules, queries, cancels and consumes through the configured names", async () => {
    const timers = new TimerClient(nc, { tenantId: tenant("ops"), prefixes, eventStream });
    const onDefault = new Inbox<string>();
    const spy = nc.subscribe("timer.>", { callback: (_error, message) => onDefault.push(message.subject) });
    const seen = new Inbox<DueEvent>();
    const sub = await timers.onDue((event) => void seen.push(event), { consumer: "ops-due" });

    const receipt = await timers.schedule({ serviceCallId: "fires", dueAt: Date.now() + 300 });
    assert.equal(receipt.stream, "OPS_TIMER_COMMANDS");
    await timers.schedule({ serviceCallId: "cancelled", dueAt: Date.now() + 3_600_000 });
    const [many] = await timers.scheduleTimers([
      { serviceCallId: "many-1", dueAt: Date.now() + 3_600_000, correlationId: "batch" },
      { serviceCallId: "many-2", dueAt: Date.now() + 3_600_000, correlationId: "batch" },
    ]);
    assert.equal(many?.stream, "OPS_TIMER_COMMANDS");

    const event = await seen.nth(0, "the DueTimeReached on the configured event subject");
    assert.equal(event.payload.serviceCallId, "fires");
    // The mark that makes it Reached lands a moment after the event is published.
    await eventually("the fired timer marked", async () => (await timers.get("fires")).state === "Reached");
    assert.equal((await timers.stats()).scheduled, 3);
    assert.equal((await timers.cancel("cancelled")).outcome, "cancelled");
    assert.equal((await timers.cancelMany({ correlationId: "batch" }, { dryRun: true })).count, 2);
    assert.equal((await timers.cancelMany({ correlationId: "batch" })).count, 2);
    assert.equal((await timers.get("many-1")).state, "Cancelled");
    const listed = [];
    for await (const timer of timers.list()) listed.push(`${timer.serviceCallId}:${timer.state}`);
    assert.deepEqual(listed.sort(), ["cancelled:Cancelled", "fires:Reached", "many-1:Cancelled", "many-2:Cancelled"]);

    await sub.stop();
    await nc.flush();
    spy.unsubscribe();
    assert.deepEqual(onDefault.all, [], "nothing on the default subjects");
  });
});
