// Generated from schema/api-stats-reply.json by scripts/generate-types.mjs (json-schema-to-typescript).
// Do not edit: `npm run generate` writes it again, `npm run check:generated` finds drift.

/**
 * An instant the service writes: UTC with millisecond precision, `YYYY-MM-DDTHH:MM:SS.sssZ`, so that text order is time order.
 */
export type UtcInstant = string;

/**
 * The reply to a request on timer.api.stats.<tenantId> (docs/CONTRACT.md §6), when it succeeds.
 */
export interface ApiStatsReply {
  /**
   * Present when the request asked for a forecast: one entry per minute, in order.
   */
  forecast?: ForecastMinute[] | null;
  /**
   * The earliest `dueAt` of the pending timers; null when there is none.
   */
  nextDueAt: UtcInstant | null;
  /**
   * Pending timers whose `dueAt` passed more than a second ago: a stuck service shows here.
   */
  overdue: number;
  /**
   * The tenant's pending (`Scheduled`) timers.
   */
  scheduled: number;
  [k: string]: unknown | undefined;
}
/**
 * One minute of a forecast: timers due within it.
 */
export interface ForecastMinute {
  due: number;
  /**
   * The minute's first instant.
   */
  minute: string;
  [k: string]: unknown | undefined;
}
