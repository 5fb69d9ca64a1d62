/**
 * Trace context through the daemon: the active OpenTelemetry span's `traceparent` and
 * `tracestate` go out with the command and come back on its DueTimeReached, the handler runs
 * inside the event's trace, and the API shows the timer's trace id; a ScheduleTimers' trace
 * comes back on the event of each of its timers.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { context, createTraceState, trace, TraceFlags, type SpanContext } from "@opentelemetry/api";
import type { NatsConnection } from "@nats-io/nats-core";
import { TimerClient, type DeliveryInfo } from "../src/index.js";
import { registerContextManager } from "./support/otel.js";
import { Inbox } from "./support/wait.js";
import { missing, startWorld, tenant, type World } from "./support/world.js";

interface Seen {
  readonly info: DeliveryInfo;
  readonly active: SpanContext | undefined;
}

describe("trace context", { skip: missing() }, () => {
  let world: World;
  let nc: NatsConnection;

  before(async () => {
    registerContextManager();
    world = await startWorld();
    nc = await world.connect();
  });
  after(async () => {
    await world?.stop();
  });

  it("comes back on the event, and the handler runs in it", async () => {
    const timers = new TimerClient(nc, { tenantId: tenant("trace") });
    const seen = new Inbox<Seen>();
    const sub = await timers.onDue(
      async (_event, info) => {
        await Promise.resolve();
        seen.push({ info, active: trace.getSpanContext(context.active()) });
      },
      { consumer: "trace" },
    );
    const caller: SpanContext = {
      traceId: "4bf92f3577b34da6a3ce929d0e0e4736",
      spanId: "00f067aa0ba902b7",
      traceFlags: TraceFlags.SAMPLED,
      traceState: createTraceState("vendor=abc"),
    };
    await context.with(trace.setSpan(context.active(), trace.wrapSpanContext(caller)), () =>
      timers.schedule({ serviceCallId: "traced", dueAt: Date.now() + 200 }),
    );
    const { info, active } = await seen.nth(0, "the traced event");
    assert.match(info.trace.traceparent ?? "", new RegExp(`^00-${caller.traceId}-[0-9a-f]{16}-01$`));
    assert.equal(info.trace.tracestate, "vendor=abc");
    assert.equal(active?.traceId, caller.traceId, "the handler runs in the event's trace");
    assert.equal(active?.spanId, info.trace.traceparent?.split("-")[2], "as a child of the event's span");
    assert.equal((await timers.get("traced")).traceId, caller.traceId);
    await sub.stop();
  });

  it("carries none without an active span, or what the caller gives", async () => {
    const timers = new TimerClient(nc, { tenantId: tenant("untraced") });
    const seen = new Inbox<Seen>();
    const sub = await timers.onDue((_event, info) => void seen.push({ info, active: trace.getSpanContext(context.active()) }), {
      consumer: "untraced",
    });
    await timers.schedule({ serviceCallId: "plain", dueAt: Date.now() });
    const given = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    await timers.schedule({ serviceCallId: "given", dueAt: Date.now() + 100 }, { trace: { traceparent: given } });
    const plain = await seen.find((s) => s.info.trace.traceparent === undefined, "the untraced event");
    assert.equal(plain.active, undefined);
    const explicit = await seen.find((s) => s.info.trace.traceparent !== undefined, "the event with the given trace");
    assert.equal(explicit.info.trace.traceparent, given);
    assert.equal(explicit.active?.traceId, "0af7651916cd43dd8448eb211c80319c");
    assert.equal((await timers.get("plain")).traceId ?? undefined, undefined);
    await sub.stop();
  });

  it("comes back on the event of every timer of a scheduleTimers", async () => {
    const timers = new TimerClient(nc, { tenantId: tenant("trace-many") });
    const seen = new Inbox<Seen>();
    const sub = await timers.onDue((_event, info) => void seen.push({ info, active: trace.getSpanContext(context.active()) }), {
      consumer: "trace-many",
    });
    const traceId = "5bf92f3577b34da6a3ce929d0e0e4736";
    const inputs = ["a", "b", "c"].map((key) => ({ serviceCallId: key, dueAt: Date.now() + 200 }));
    await timers.scheduleTimers(inputs, { trace: { traceparent: `00-${traceId}-00f067aa0ba902b7-01` } });
    await seen.nth(inputs.length - 1, "the three events");
    for (const { info, active } of seen.all) {
      assert.match(info.trace.traceparent ?? "", new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`));
      assert.equal(active?.traceId, traceId);
    }
    assert.equal((await timers.get("c")).traceId, traceId);
    await sub.stop();
  });
});
