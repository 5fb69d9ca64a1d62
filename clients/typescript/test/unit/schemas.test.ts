/**
 * The Effect Schemas against the types generated from schema/ (checked when the tests
 * compile: each encoded form must be assignable to the generated type and back), and their
 * rules at run time: they refuse what the daemon refuses, with its reasons.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Either, Schema } from "effect";
import * as Effect from "../../src/effect/index.js";
import type * as Wire from "../../src/generated/index.js";

type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
const agree = <T extends true>(_: T): void => undefined;

agree<Same<Schema.Schema.Encoded<typeof Effect.ScheduleTimer>, Wire.ScheduleTimer>>(true);
agree<Same<Schema.Schema.Encoded<typeof Effect.DueTimeReached>, Wire.DueTimeReached>>(true);
agree<Same<Schema.Schema.Encoded<typeof Effect.TimerExpired>, Wire.TimerExpired>>(true);
agree<Same<Schema.Schema.Encoded<typeof Effect.TimerCommandRejected>, Wire.TimerCommandRejected>>(true);

const schedule = (payload: Record<string, unknown>) => ({
  id: "01935c2e-7c1a-7b53-a8e2-4f0b9c1d2e3f",
  type: "ScheduleTimer",
  tenantId: "acme",
  timestampMs: 1763798400000,
  payload: { tenantId: "acme", serviceCallId: "sc-7", dueAt: "2026-11-22T10:00:00.000Z", ...payload },
});

describe("Effect schemas", () => {
  it("decode the contract's examples", () => {
    const decoded = Schema.decodeUnknownEither(Effect.ScheduleTimer)(schedule({ correlationId: "req-42", data: { orderId: 42 }, expireAfter: "PT15M" }));
    assert.ok(Either.isRight(decoded));
    assert.ok(decoded.right instanceof Effect.ScheduleTimer);
    const due = Schema.decodeUnknownEither(Effect.DueTimeReached)({
      id: "01935c2e-7c1a-7b53-a8e2-4f0b9c1d2e3f",
      type: "DueTimeReached",
      tenantId: "acme",
      timestampMs: 1,
      correlationId: "req-42",
      causationId: null,
      aggregateId: "sc-7",
      payload: { tenantId: "acme", serviceCallId: "sc-7", dueAt: "2026-11-22T10:00:00.000Z", reachedAt: "2026-11-22T10:00:00.004Z", extra: 1 },
      extra: "events may gain fields",
    });
    assert.ok(Either.isRight(due));
    const envelope = Schema.decodeUnknownEither(Effect.MessageEnvelope("CancelTimer", Schema.Struct({ tenantId: Effect.TenantId, serviceCallId: Effect.ServiceCallId })))({
      ...schedule({}),
      type: "CancelTimer",
      payload: { tenantId: "acme", serviceCallId: "sc-7" },
    });
    assert.ok(Either.isRight(envelope));
  });

  it("refuse what the daemon refuses, with its reasons", () => {
    const reason = (payload: Record<string, unknown>) => {
      const result = Schema.decodeUnknownEither(Effect.ScheduleTimer)(schedule(payload));
      assert.ok(Either.isLeft(result), JSON.stringify(payload));
      return result.left.message;
    };
    assert.match(reason({ serviceCallId: "" }), /serviceCallId must be 1–128 characters, got 0/);
    assert.match(reason({ dueAt: "2026-11-22T10:00:00" }), /is not an RFC 3339 timestamp with a zone/);
    assert.match(reason({ expireAfter: "P1Y" }), /has the unit 'Y' out of place or unknown/);
    assert.match(reason({ tenantId: "_" }), /tenantId "_" is reserved/);
    assert.match(reason({ correlationId: "" }), /correlationId must be 1–256 characters, got 0/);
  });
});
