// Generated from schema/due-time-reached.json by scripts/generate-types.mjs (json-schema-to-typescript).
// Do not edit: `npm run generate` writes it again, `npm run check:generated` finds drift.

/**
 * A timer's data: any JSON value, of at most `max_data_bytes` (16 KiB by default) as written, nested at most `max_data_depth` (64) deep, with numbers of at most `max_data_number_chars` (100) characters; in a ScheduleTimer, `null` is the same as none.
 */
export type Data = unknown;
/**
 * An instant the service writes: UTC with millisecond precision, `YYYY-MM-DDTHH:MM:SS.sssZ`, so that text order is time order.
 */
export type UtcInstant = string;
/**
 * A service call id: 1 to 128 characters, none a control character.
 */
export type ServiceCallId = string;
/**
 * A tenant id: 1 to 64 characters of A-Z, a-z, 0-9, '_' and '-'. `_` alone is reserved: a command or request for it is rejected, and a TimerCommandRejected whose subject names no valid tenant has it.
 */
export type TenantId = string;

/**
 * A timer fired: published by the service to timer.evt.due.<tenantId> on the TIMER_EVENTS stream once dueAt has passed, at least once per firing (docs/CONTRACT.md §3). The envelope's aggregateId is the serviceCallId.
 */
export interface DueTimeReached {
  /**
   * In DueTimeReached, the serviceCallId.
   */
  aggregateId: string | null;
  causationId: string | null;
  /**
   * In a command, used when the payload has none; in an event, the timer's.
   */
  correlationId: string | null;
  /**
   * A UUID; the envelopes the service publishes carry a UUID v7 (time-ordered).
   */
  id: string;
  payload: DueTimeReachedPayload;
  tenantId: TenantId;
  /**
   * When the message was written, in milliseconds since the Unix epoch.
   */
  timestampMs: number;
  /**
   * The message type.
   */
  type: "DueTimeReached";
  [k: string]: unknown | undefined;
}
/**
 * The payload of DueTimeReached: the timer that fired, its dueAt, and when it fired (never before dueAt).
 */
export interface DueTimeReachedPayload {
  /**
   * The timer's `data`, as its ScheduleTimer carried it; absent when it had none.
   */
  data?: Data | null;
  dueAt: UtcInstant;
  reachedAt: UtcInstant;
  serviceCallId: ServiceCallId;
  tenantId: TenantId;
  [k: string]: unknown | undefined;
}
