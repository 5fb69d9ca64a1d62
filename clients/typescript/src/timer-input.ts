/**
 * One timer as a caller gives it, and its fields as the wire carries them with the reason the
 * daemon would refuse them for: the same checks for a ScheduleTimer and for each timer of a
 * ScheduleTimers (§3), in the daemon's order.
 */
import { toInstant, type InstantInput } from "./instant.js";
import {
  checkCorrelationId,
  checkDataJson,
  checkExpireAfter,
  checkServiceCallId,
  dataText,
  type CommandLimits,
  type Refusal,
} from "./rules.js";

/** A timer to schedule; sending the same `serviceCallId` again reschedules it (§3). */
export interface ScheduleInput<D = unknown> {
  /** The key, with the tenant: 1 to 128 characters, no control character. */
  readonly serviceCallId: string;
  /** When it fires: a `Date`, RFC 3339 text with a zone, or epoch milliseconds. */
  readonly dueAt: InstantInput;
  /** Any JSON value, given back unchanged in its DueTimeReached. */
  readonly data?: D;
  readonly correlationId?: string;
  /** How late it may still fire (`"PT15M"`); later, TimerExpired comes instead. */
  readonly expireAfter?: string;
}

/** A timer's fields, in the order the wire carries them, and what is wrong with them. */
export interface PreparedTimer {
  /** `serviceCallId`, `dueAt` and the optional fields given (no `tenantId`). */
  readonly fields: Record<string, unknown>;
  /** `dueAt` as sent: UTC, to the millisecond, when it could be read. */
  readonly dueAt: string;
  /** `data` that has no JSON form: such a timer cannot even be written down. */
  readonly unsendable: Refusal;
  /** The first rule the timer breaks, in the daemon's order, or undefined. */
  readonly refusal: Refusal;
}

const prefixed = (prefix: string, refusal: Refusal): Refusal => (refusal === undefined ? undefined : prefix + refusal);

/** `input` checked by the contract's rules for one timer (its message's size aside). */
export function prepareTimer(input: ScheduleInput<unknown>, limits: CommandLimits): PreparedTimer {
  const hasData = input.data !== undefined && input.data !== null;
  const data = hasData ? dataText(input.data) : undefined;
  const due = toInstant("dueAt", input.dueAt);
  const dueAt = "reason" in due ? String(input.dueAt) : due.text;
  const fields: Record<string, unknown> = {
    serviceCallId: input.serviceCallId,
    dueAt,
    ...(input.correlationId === undefined ? {} : { correlationId: input.correlationId }),
    ...(hasData ? { data: input.data } : {}),
    ...(input.expireAfter === undefined ? {} : { expireAfter: input.expireAfter }),
  };
  const refusal =
    checkServiceCallId(input.serviceCallId) ??
    ("reason" in due ? due.reason : undefined) ??
    (data && "json" in data ? checkDataJson(data.json, limits) : undefined) ??
    (input.expireAfter === undefined ? undefined : checkExpireAfter(input.expireAfter)) ??
    (input.correlationId === undefined ? undefined : prefixed("payload ", checkCorrelationId(input.correlationId)));
  return { fields, dueAt, unsendable: data && "reason" in data ? data.reason : undefined, refusal };
}
