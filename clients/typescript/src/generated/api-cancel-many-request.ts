// Generated from schema/api-cancel-many-request.json by scripts/generate-types.mjs (json-schema-to-typescript).
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
 * The request on timer.api.cancel-many.<tenantId> (docs/CONTRACT.md §6): which pending timers of the tenant to cancel (a filter, or all: true), and dryRun to only count them.
 */
export interface ApiCancelManyRequest {
  /**
   * Every pending timer of the tenant; only without another field (`state` aside).
   */
  all?: boolean;
  /**
   * The timers of this correlation id.
   */
  correlationId?: CorrelationId | null;
  /**
   * Count the timers it would cancel now, and cancel none.
   */
  dryRun?: boolean;
  /**
   * The timers due at or after this instant.
   */
  dueFrom?: ClientInstant | null;
  /**
   * The timers due before this instant.
   */
  dueTo?: ClientInstant | null;
  /**
   * `Scheduled`, the one state a cancel changes: said for clarity, it narrows nothing, and any other state is refused.
   */
  state?: CancellableState | null;
}
