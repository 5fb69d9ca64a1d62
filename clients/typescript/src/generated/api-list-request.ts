// Generated from schema/api-list-request.json by scripts/generate-types.mjs (json-schema-to-typescript).
// Do not edit: `npm run generate` writes it again, `npm run check:generated` finds drift.

/**
 * An instant a client writes: RFC 3339 with a zone, `Z` or an offset. The service also refuses years outside 0001–9999 once converted to UTC.
 */
export type ClientInstant = string;
/**
 * Lifecycle of a timer. `Reached` and `Expired` are final: a fired timer never fires again and cannot be cancelled. `Cancelled` is not: a newer `ScheduleTimer` schedules it again.  `Expired` is a `Reached` row whose firing came after its `expireAfter` deadline (`expiry`): the database stores both as `Reached`, and the state is read from the row's `reached_at` and `expires_at`, so that a release without expiry reads every fired row.
 */
export type TimerState = "Scheduled" | "Reached" | "Cancelled" | "Expired";

/**
 * The request on timer.api.list.<tenantId> (docs/CONTRACT.md §6); an empty body counts as {}.
 */
export interface ApiListRequest {
  /**
   * The `next` of the previous page: this page starts after it.
   */
  after?: string | null;
  /**
   * Only the timers of this correlation id.
   */
  correlationId?: string | null;
  /**
   * Only timers due at or after this instant.
   */
  dueFrom?: ClientInstant | null;
  /**
   * Only timers due before this instant.
   */
  dueTo?: ClientInstant | null;
  /**
   * The most timers in the page (default 100).
   */
  limit?: number | null;
  /**
   * Only timers in this state.
   */
  state?: TimerState | null;
}
