// Generated from schema/api-get-reply.json by scripts/generate-types.mjs (json-schema-to-typescript).
// Do not edit: `npm run generate` writes it again, `npm run check:generated` finds drift.

/**
 * An instant the service writes: UTC with millisecond precision, `YYYY-MM-DDTHH:MM:SS.sssZ`, so that text order is time order.
 */
export type UtcInstant = string;
/**
 * A correlation id: 1 to 256 characters, none a control character.
 */
export type CorrelationId = string;
/**
 * A timer's data: any JSON value, of at most `max_data_bytes` (16 KiB by default) as written, nested at most `max_data_depth` (64) deep, with numbers of at most `max_data_number_chars` (100) characters; in a ScheduleTimer, `null` is the same as none.
 */
export type Data = unknown;
/**
 * A service call id: 1 to 128 characters, none a control character.
 */
export type ServiceCallId = string;
/**
 * Lifecycle of a timer. `Reached` and `Expired` are final: a fired timer never fires again and cannot be cancelled. `Cancelled` is not: a newer `ScheduleTimer` schedules it again.  `Expired` is a `Reached` row whose firing came after its `expireAfter` deadline (`expiry`): the database stores both as `Reached`, and the state is read from the row's `reached_at` and `expires_at`, so that a release without expiry reads every fired row.
 */
export type TimerState = "Scheduled" | "Reached" | "Cancelled" | "Expired";
/**
 * A tenant id: 1 to 64 characters of A-Z, a-z, 0-9, '_' and '-'. `_` alone is reserved: a command or request for it is rejected, and a TimerCommandRejected whose subject names no valid tenant has it.
 */
export type TenantId = string;

/**
 * The reply to a request on timer.api.get.<tenantId> (docs/CONTRACT.md §6), when it succeeds.
 */
export interface ApiGetReply {
  timer: TimerView;
  [k: string]: unknown | undefined;
}
/**
 * A timer as the API shows it.
 */
export interface TimerView {
  cancelledAt: UtcInstant | null;
  correlationId: CorrelationId;
  /**
   * The timer's `data`; absent when it has none.
   */
  data?: Data | null;
  /**
   * Null only for a tombstone: a key cancelled before any ScheduleTimer.
   */
  dueAt: UtcInstant | null;
  /**
   * `dueAt + expireAfter`: fired after it, the timer is `Expired` (it published TimerExpired). Absent when its ScheduleTimer set no `expireAfter`.
   */
  expiresAt?: UtcInstant | null;
  reachedAt: UtcInstant | null;
  registeredAt: UtcInstant;
  serviceCallId: ServiceCallId;
  state: TimerState;
  tenantId: TenantId;
  /**
   * The trace id (32 hex digits) of the `traceparent` its ScheduleTimer carried, to find the trace in a tracing backend. Absent when it carried none.
   */
  traceId?: string | null;
  [k: string]: unknown | undefined;
}
