// Generated from schema/cancel-timer.json by scripts/generate-types.mjs (json-schema-to-typescript).
// Do not edit: `npm run generate` writes it again, `npm run check:generated` finds drift.

/**
 * A service call id: 1 to 128 characters, none a control character.
 */
export type ServiceCallId = string;
/**
 * A tenant id: 1 to 64 characters of A-Z, a-z, 0-9, '_' and '-'. `_` alone is reserved: a command or request for it is rejected, and a TimerCommandRejected whose subject names no valid tenant has it.
 */
export type TenantId = string;

/**
 * Cancels a timer: published by a client to timer.cmd.cancel.<tenantId> (docs/CONTRACT.md §3). tenantId must be the same in the subject, the envelope and the payload.
 */
export interface CancelTimer {
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
  payload: CancelTimerPayload;
  tenantId: TenantId;
  /**
   * When the message was written, in milliseconds since the Unix epoch.
   */
  timestampMs: number;
  /**
   * The message type.
   */
  type: "CancelTimer";
  [k: string]: unknown | undefined;
}
/**
 * `CancelTimer` payload as it appears on the wire.
 */
export interface CancelTimerPayload {
  serviceCallId: ServiceCallId;
  tenantId: TenantId;
  [k: string]: unknown | undefined;
}
