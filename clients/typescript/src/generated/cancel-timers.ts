// Generated from schema/cancel-timers.json by scripts/generate-types.mjs (json-schema-to-typescript).
// Do not edit: `npm run generate` writes it again, `npm run check:generated` finds drift.

/**
 * A correlation id: 1 to 256 characters, none a control character.
 */
export type CorrelationId = string;
/**
 * An instant a client writes: RFC 3339 with a zone, `Z` or an offset. The service also refuses years outside 0001–9999 once converted to UTC.
 */
export type ClientInstant = string;
/**
 * The state a `CancelTimers` selects in: only `Scheduled`. A timer claimed for firing fires, and fired, expired and cancelled timers stay as they are, so a filter by another state would select nothing; it is refused with its reason instead, and `state: "Scheduled"`, said for clarity, narrows nothing.
 */
export type CancellableState = "Scheduled";
/**
 * A tenant id: 1 to 64 characters of A-Z, a-z, 0-9, '_' and '-'. `_` alone is reserved: a command or request for it is rejected, and a TimerCommandRejected whose subject names no valid tenant has it.
 */
export type TenantId = string;

/**
 * Cancels many of a tenant's pending timers: published by a client to timer.cmd.cancel-many.<tenantId> (docs/CONTRACT.md §3), with a filter (correlationId, dueFrom, dueTo) or all: true. tenantId must be the same in the subject, the envelope and the payload.
 */
export interface CancelTimers {
  /**
   * In DueTimeReached, the serviceCallId.
   */
  aggregateId?: string | null;
  causationId?: string | null;
  /**
   * In a command, used when the payload has none; in an event, the timer's.
   */
  correlationId?: string | null;
  /**
   * A UUID; the envelopes the service publishes carry a UUID v7 (time-ordered).
   */
  id: string;
  payload: CancelTimersPayload;
  tenantId: TenantId;
  /**
   * When the message was written, in milliseconds since the Unix epoch.
   */
  timestampMs: number;
  /**
   * The message type.
   */
  type: "CancelTimers";
  [k: string]: unknown | undefined;
}
/**
 * `CancelTimers` payload as it appears on the wire, and the filter of the API's `cancelMany`.
 */
export interface CancelTimersPayload {
  /**
   * Every pending timer of the tenant; only without another field (`state` aside).
   */
  all?: boolean;
  /**
   * The timers of this correlation id.
   */
  correlationId?: CorrelationId | null;
  /**
   * The timers due at or after this instant.
   */
  dueFrom?: ClientInstant | null;
  /**
   * The timers due before this instant.
   */
  dueTo?: ClientInstant | null;
  /**
   * `Scheduled` only, the one state a cancel changes: said for clarity, it narrows nothing; any other state is refused.
   */
  state?: CancellableState | null;
  tenantId: TenantId;
  [k: string]: unknown | undefined;
}
