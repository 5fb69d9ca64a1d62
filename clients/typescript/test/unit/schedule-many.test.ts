/**
 * `scheduleTimers` without a daemon: how a list is checked (each timer as `schedule` checks
 * it, each key once, the position in the reason) and cut into ScheduleTimers messages of at
 * most 1000 timers and `maxCommandBytes` each, and what a failure part way says.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { TimerPermissionError, TimerUnavailableError, type ScheduleInput } from "../../src/index.js";
import { DEFAULT_LIMITS, type CommandLimits } from "../../src/rules.js";
import { MAX_TIMERS_PER_MESSAGE, planScheduleTimers, sendPlanned, type PlannedMessage } from "../../src/schedule-many.js";
import { utf8Bytes } from "../../src/text.js";
import { prepareTimer } from "../../src/timer-input.js";

const later = "2030-01-01T00:00:00Z";
const tenantId = "acme";

const plan = (inputs: readonly ScheduleInput[], limits: CommandLimits = DEFAULT_LIMITS): PlannedMessage[] => {
  const planned = planScheduleTimers(tenantId, inputs, limits);
  if ("reason" in planned) return assert.fail(planned.reason);
  return planned.messages;
};

const refusal = (inputs: readonly ScheduleInput[], limits: CommandLimits = DEFAULT_LIMITS): string => {
  const planned = planScheduleTimers(tenantId, inputs, limits);
  assert.ok("reason" in planned, "refused");
  return planned.reason;
};

interface Sent {
  id: string;
  type: string;
  tenantId: string;
  timestampMs: number;
  payload: { tenantId: string; timers: Array<Record<string, unknown>> };
}

/** The messages as the daemon reads them, each checked against its size bound. */
const read = (messages: PlannedMessage[], limits: CommandLimits = DEFAULT_LIMITS): Sent[] =>
  messages.map((message) => {
    assert.ok(utf8Bytes(message.json) <= limits.maxCommandBytes, `a message of ${utf8Bytes(message.json)} bytes`);
    const sent = JSON.parse(message.json) as Sent;
    assert.equal(sent.id, message.id);
    assert.equal(sent.type, "ScheduleTimers");
    assert.equal(sent.tenantId, tenantId);
    assert.equal(sent.payload.tenantId, tenantId);
    assert.equal(sent.payload.timers.length, message.count);
    assert.ok(message.count >= 1 && message.count <= MAX_TIMERS_PER_MESSAGE);
    return sent;
  });

describe("scheduleTimers' messages", () => {
  it("cut a long list at 1000 timers, in the list's order", () => {
    const inputs = Array.from({ length: 2500 }, (_, i) => ({ serviceCallId: `k-${i}`, dueAt: Date.UTC(2030, 0, 1) + i }));
    const messages = plan(inputs);
    assert.deepEqual(messages.map((m) => [m.first, m.count]), [[0, 1000], [1000, 1000], [2000, 500]]);
    const sent = read(messages);
    assert.equal(new Set(sent.map((m) => m.id)).size, 3, "each message its own id");
    const timers = sent.flatMap((m) => m.payload.timers);
    assert.deepEqual(timers.map((t) => t.serviceCallId), inputs.map((t) => t.serviceCallId));
    assert.deepEqual(timers[1], { serviceCallId: "k-1", dueAt: "2030-01-01T00:00:00.001Z" }, "as schedule writes it");
  });

  it("keep each message within maxCommandBytes, as full as it can be", () => {
    const data = "é".repeat(5000); // 10,000 bytes of JSON text
    const inputs = Array.from({ length: 20 }, (_, i) => ({ serviceCallId: `big-${i}`, dueAt: later, data, correlationId: `c-${i}` }));
    const messages = plan(inputs);
    const sent = read(messages);
    assert.deepEqual(messages.map((m) => m.count), [6, 6, 6, 2]);
    for (const [k, message] of messages.entries()) {
      const next = inputs[message.first + message.count];
      if (next === undefined) continue;
      const grown = utf8Bytes(message.json) + 1 + utf8Bytes(JSON.stringify(prepareTimer(next, DEFAULT_LIMITS).fields));
      assert.ok(grown > DEFAULT_LIMITS.maxCommandBytes, `message ${k} had room for one more`);
    }
    assert.deepEqual(sent[3]?.payload.timers[1], { serviceCallId: "big-19", dueAt: later, correlationId: "c-19", data });

    const small = { ...DEFAULT_LIMITS, maxCommandBytes: 1000 };
    const few = plan(inputs.map((t) => ({ serviceCallId: t.serviceCallId, dueAt: later })), small);
    read(few, small);
    assert.ok(few.length > 1);
    assert.equal(few.reduce((n, m) => n + m.count, 0), 20);
  });

  it("send one message for a short list", () => {
    const [only, ...rest] = plan([{ serviceCallId: "a", dueAt: later, data: null, expireAfter: "PT15M" }]);
    assert.equal(rest.length, 0);
    assert.ok(only);
    assert.deepEqual(JSON.parse(only.json).payload, { tenantId, timers: [{ serviceCallId: "a", dueAt: later, expireAfter: "PT15M" }] });
  });
});

describe("scheduleTimers' refusals", () => {
  it("name the position of the first bad timer, with schedule's reason", () => {
    const good = Array.from({ length: 1500 }, (_, i) => ({ serviceCallId: `k-${i}`, dueAt: later }));
    const cases: ScheduleInput[] = [
      { serviceCallId: "", dueAt: later },
      { serviceCallId: "k", dueAt: "2026-11-22T10:00:00" },
      { serviceCallId: "k", dueAt: later, expireAfter: "P1Y" },
      { serviceCallId: "k", dueAt: later, data: "x".repeat(16 * 1024) },
      { serviceCallId: "k", dueAt: later, correlationId: "" },
      { serviceCallId: "", dueAt: "never", expireAfter: "P1Y" },
    ];
    for (const bad of cases) {
      const reason = prepareTimer(bad, DEFAULT_LIMITS).refusal;
      assert.ok(reason, JSON.stringify(bad));
      assert.equal(refusal([...good.slice(0, 1234), bad, ...good.slice(1234)]), `timers[1234]: ${reason}`);
    }
    assert.equal(
      refusal([{ serviceCallId: "k", dueAt: later, data: 10n }]),
      "timers[0]: data is not JSON: Do not know how to serialize a BigInt",
    );
  });

  it("refuse a key named twice, at its second place", () => {
    const inputs = Array.from({ length: 1200 }, (_, i) => ({ serviceCallId: `k-${i}`, dueAt: later }));
    assert.equal(
      refusal([...inputs, { serviceCallId: "k-3", dueAt: later }]),
      'timers[1200]: serviceCallId "k-3" is named twice: a ScheduleTimers holds each key at most once',
    );
    // A bad key is refused for what it is, before it could be a duplicate.
    assert.equal(refusal([{ serviceCallId: "", dueAt: later }, { serviceCallId: "", dueAt: later }]), "timers[0]: serviceCallId must be 1–128 characters, got 0");
  });

  it("refuse an empty list, and a timer too big for any message", () => {
    assert.equal(refusal([]), "timers is empty: scheduleTimers needs at least one timer");
    const limits = { ...DEFAULT_LIMITS, maxCommandBytes: 4096, maxDataBytes: 8192 };
    assert.match(
      refusal([{ serviceCallId: "a", dueAt: later }, { serviceCallId: "b", dueAt: later, data: "x".repeat(5000) }], limits),
      /^timers\[1\]: message is \d+ bytes, more than the 4096-byte limit, even with this timer alone$/,
    );
  });
});

describe("sending scheduleTimers' messages", () => {
  const messages = plan(Array.from({ length: 2500 }, (_, i) => ({ serviceCallId: `k-${i}`, dueAt: later })));

  it("sends them in order and gives each one's receipt", async () => {
    const sent: string[] = [];
    const receipts = await sendPlanned(messages, async (m) => {
      sent.push(m.id);
      return { id: m.id, stream: "TIMER_COMMANDS", seq: sent.length, duplicate: false };
    });
    assert.deepEqual(sent, messages.map((m) => m.id));
    assert.deepEqual(receipts.map((r) => [r.seq, r.first, r.count]), [[1, 0, 1000], [2, 1000, 1000], [3, 2000, 500]]);
  });

  it("stops at the first failure and says what was stored", async () => {
    let calls = 0;
    const failing = sendPlanned(messages, async (m) => {
      calls += 1;
      if (calls === 2) throw new TimerUnavailableError("no answer on timer.cmd.schedule-many.acme within 5000 ms", 1000, undefined, { source: "broker", subject: "timer.cmd.schedule-many.acme" });
      return { id: m.id, stream: "TIMER_COMMANDS", seq: calls, duplicate: false };
    });
    await assert.rejects(failing, (error: unknown) => {
      assert.ok(error instanceof TimerUnavailableError);
      assert.equal(error.retryAfterMs, 1000);
      assert.equal(error.subject, "timer.cmd.schedule-many.acme");
      assert.equal(
        error.reason,
        "message 2 of 3 (timers[1000] to timers[1999]): no answer on timer.cmd.schedule-many.acme within 5000 ms (timers[0] to timers[999] were stored; timers[2000] on were not sent)",
      );
      assert.ok(error.cause instanceof TimerUnavailableError);
      return true;
    });
    assert.equal(calls, 2, "nothing sent after the failure");

    const refused = sendPlanned(messages, async () => {
      throw new TimerPermissionError("the broker refused: Permissions Violation", { source: "broker" });
    });
    await assert.rejects(refused, (error: unknown) => {
      assert.ok(error instanceof TimerPermissionError);
      assert.match(error.message, /^message 1 of 3 \(timers\[0\] to timers\[999\]\): the broker refused: .* \(nothing was sent before it; timers\[1000\] on were not sent\)$/);
      return true;
    });
  });
});
