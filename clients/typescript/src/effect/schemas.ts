/**
 * Effect `Schema`s of the messages a service exchanges with timer-service (§3): the
 * `MessageEnvelope`, ScheduleTimer, DueTimeReached, TimerExpired and TimerCommandRejected. They
 * hold the same rules as the client's checks (same reasons), and their encoded types are held
 * to the types generated from schema/ by the type tests, so the two cannot drift apart.
 */
import { Schema } from "effect";
import { parseClientInstant } from "../instant.js";
import {
  checkCorrelationId,
  checkExpireAfter,
  checkServiceCallId,
  checkTenantId,
} from "../rules.js";

/** A field that may be left out, but is never `undefined` when present (as on the wire). */
const optional = <S extends Schema.Schema.All>(schema: S) => Schema.optionalWith(schema, { exact: true });

const rule = (check: (value: string) => string | undefined) => (value: string) => check(value) ?? true;

/** 1 to 64 of `[A-Za-z0-9_-]`, not `_` alone. */
export const TenantId = Schema.String.pipe(Schema.filter(rule(checkTenantId)), Schema.annotations({ identifier: "TenantId" }));

/** 1 to 128 characters, no control character. */
export const ServiceCallId = Schema.String.pipe(
  Schema.filter(rule(checkServiceCallId)),
  Schema.annotations({ identifier: "ServiceCallId" }),
);

/** 1 to 256 characters, no control character. */
export const CorrelationId = Schema.String.pipe(
  Schema.filter(rule(checkCorrelationId)),
  Schema.annotations({ identifier: "CorrelationId" }),
);

/** RFC 3339 with a zone, years 0001–9999 once in UTC: what a client may write as `dueAt`. */
export const ClientInstant = Schema.String.pipe(
  Schema.filter((text) => {
    const parsed = parseClientInstant("dueAt", text);
    return typeof parsed === "number" || parsed.reason;
  }),
  Schema.annotations({ identifier: "ClientInstant" }),
);

/** `YYYY-MM-DDTHH:MM:SS.sssZ`: what the daemon writes. */
export const UtcInstant = Schema.String.pipe(
  Schema.pattern(/^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$/),
  Schema.annotations({ identifier: "UtcInstant" }),
);

/** An ISO 8601 duration of days, hours, minutes and seconds, 1 s to 3650 days. */
export const ExpireAfter = Schema.String.pipe(Schema.filter(rule(checkExpireAfter)), Schema.annotations({ identifier: "ExpireAfter" }));

/** Any JSON value; its size and shape are checked where it is sent. */
export const Data = Schema.Unknown;

/** The envelope's fields, its `type` and `payload` aside. */
export const envelopeFields = {
  id: Schema.UUID,
  tenantId: TenantId,
  timestampMs: Schema.Int,
  correlationId: optional(Schema.NullOr(Schema.String)),
  causationId: optional(Schema.NullOr(Schema.String)),
  aggregateId: optional(Schema.NullOr(Schema.String)),
};

/** The envelope of the events the daemon writes: it always writes the three ids, maybe null. */
const eventEnvelopeFields = {
  ...envelopeFields,
  correlationId: Schema.NullOr(Schema.String),
  causationId: Schema.NullOr(Schema.String),
  aggregateId: Schema.NullOr(Schema.String),
};

/** A `MessageEnvelope` of `type` around `payload`. */
export const MessageEnvelope = <T extends string, P extends Schema.Schema.Any>(type: T, payload: P) =>
  Schema.Struct({ ...envelopeFields, type: Schema.Literal(type), payload });

/** Any envelope, its payload not yet read. */
export const AnyEnvelope = Schema.Struct({ ...envelopeFields, type: Schema.String, payload: Schema.Unknown });

export class ScheduleTimerPayload extends Schema.Class<ScheduleTimerPayload>("ScheduleTimerPayload")({
  tenantId: TenantId,
  serviceCallId: ServiceCallId,
  dueAt: ClientInstant,
  correlationId: optional(Schema.NullOr(CorrelationId)),
  data: optional(Data),
  expireAfter: optional(Schema.NullOr(ExpireAfter)),
}) {}

export class ScheduleTimer extends Schema.Class<ScheduleTimer>("ScheduleTimer")({
  ...envelopeFields,
  type: Schema.Literal("ScheduleTimer"),
  payload: ScheduleTimerPayload,
}) {}

export class DueTimeReachedPayload extends Schema.Class<DueTimeReachedPayload>("DueTimeReachedPayload")({
  tenantId: TenantId,
  serviceCallId: ServiceCallId,
  dueAt: UtcInstant,
  reachedAt: UtcInstant,
  data: optional(Data),
}) {}

export class DueTimeReached extends Schema.Class<DueTimeReached>("DueTimeReached")({
  ...eventEnvelopeFields,
  type: Schema.Literal("DueTimeReached"),
  payload: DueTimeReachedPayload,
}) {}

export class TimerExpiredPayload extends Schema.Class<TimerExpiredPayload>("TimerExpiredPayload")({
  tenantId: TenantId,
  serviceCallId: ServiceCallId,
  dueAt: UtcInstant,
  reachedAt: UtcInstant,
  expiresAt: UtcInstant,
  data: optional(Data),
}) {}

export class TimerExpired extends Schema.Class<TimerExpired>("TimerExpired")({
  ...eventEnvelopeFields,
  type: Schema.Literal("TimerExpired"),
  payload: TimerExpiredPayload,
}) {}

export class TimerCommandRejectedPayload extends Schema.Class<TimerCommandRejectedPayload>("TimerCommandRejectedPayload")({
  reason: Schema.String,
  subject: Schema.String,
  original: Schema.String,
  truncated: optional(Schema.Literal(true)),
}) {}

export class TimerCommandRejected extends Schema.Class<TimerCommandRejected>("TimerCommandRejected")({
  ...eventEnvelopeFields,
  type: Schema.Literal("TimerCommandRejected"),
  payload: TimerCommandRejectedPayload,
}) {}
