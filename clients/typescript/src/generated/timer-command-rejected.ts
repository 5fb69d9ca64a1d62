// Generated from schema/timer-command-rejected.json by scripts/generate-types.mjs (json-schema-to-typescript).
// Do not edit: `npm run generate` writes it again, `npm run check:generated` finds drift.

/**
 * A tenant id: 1 to 64 characters of A-Z, a-z, 0-9, '_' and '-'. `_` alone is reserved: a command or request for it is rejected, and a TimerCommandRejected whose subject names no valid tenant has it.
 */
export type TenantId = string;

/**
 * A command was refused: published by the service to timer.evt.rejected.<tenantId>, or timer.evt.rejected._ when the subject names no readable tenant (docs/CONTRACT.md §3).
 */
export interface TimerCommandRejected {
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
  payload: TimerCommandRejectedPayload;
  tenantId: TenantId;
  /**
   * When the message was written, in milliseconds since the Unix epoch.
   */
  timestampMs: number;
  /**
   * The message type.
   */
  type: "TimerCommandRejected";
  [k: string]: unknown | undefined;
}
/**
 * The payload of TimerCommandRejected.
 */
export interface TimerCommandRejectedPayload {
  /**
   * The command as UTF-8 (lossy): at most its first 4,096 bytes, cut at a character boundary.
   */
  original: string;
  /**
   * Why the command was refused.
   */
  reason: string;
  /**
   * The subject the command came on.
   */
  subject: string;
  /**
   * Present, and true, when `original` holds only the start of the command.
   */
  truncated?: true;
  [k: string]: unknown | undefined;
}
