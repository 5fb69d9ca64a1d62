// Generated from schema/schedule-timers.json by scripts/generate-types.mjs (json-schema-to-typescript).
// Do not edit: `npm run generate` writes it again, `npm run check:generated` finds drift.

/**
 * A tenant id: 1 to 64 characters of A-Z, a-z, 0-9, '_' and '-'. `_` alone is reserved: a command or request for it is rejected, and a TimerCommandRejected whose subject names no valid tenant has it.
 */
export type TenantId = string;
/**
 * A correlation id: 1 to 256 characters, none a control character.
 */
export type CorrelationId = string;
/**
 * A timer's data: any JSON value, of at most `max_data_bytes` (16 KiB by default) as written, nested at most `max_data_depth` (64) deep, with numbers of at most `max_data_number_chars` (100) characters; in a ScheduleTimer, `null` is the same as none.
 */
export type Data = unknown;
/**
 * An instant a client writes: RFC 3339 with a zone, `Z` or an offset. The service also refuses years outside 0001–9999 once converted to UTC.
 */
export type ClientInstant = string;
/**
 * How late a timer may still fire: an ISO 8601 duration of whole days, hours, minutes and seconds, at least a second and at most 3650 days. Years, months and weeks are refused: a deadline must be one instant.
 */
export type ExpireAfter = string;
/**
 * A service call id: 1 to 128 characters, none a control character.
 */
export type ServiceCallId = string;

/**
 * Asks for many timers of one tenant at once: published by a client to timer.cmd.schedule-many.<tenantId> (docs/CONTRACT.md §3), 1 to 1000 timers, each key at most once. Each timer follows ScheduleTimer's rules; one bad timer rejects the whole message. tenantId must be the same in the subject, the envelope and the payload.
 */
export interface ScheduleTimers {
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
  payload: ScheduleTimersPayload;
  tenantId: TenantId;
  /**
   * When the message was written, in milliseconds since the Unix epoch.
   */
  timestampMs: number;
  /**
   * The message type.
   */
  type: "ScheduleTimers";
  [k: string]: unknown | undefined;
}
/**
 * `ScheduleTimers` payload as it appears on the wire.
 */
export interface ScheduleTimersPayload {
  tenantId: TenantId;
  /**
   * 1 to 1,000 timers, each key at most once.
   *
   * @minItems 1
   * @maxItems 1000
   */
  timers: [TimerSpec, ...TimerSpec[]];
  [k: string]: unknown | undefined;
}
/**
 * One timer of a `ScheduleTimers`: a ScheduleTimer's payload without the tenant.
 */
export interface TimerSpec {
  /**
   * This timer's; without it, the envelope's; without that, a new one for this timer.
   */
  correlationId?: CorrelationId | null;
  data?: Data | null;
  dueAt: ClientInstant;
  expireAfter?: ExpireAfter | null;
  serviceCallId: ServiceCallId;
  [k: string]: unknown | undefined;
}
