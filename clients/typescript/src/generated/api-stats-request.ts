// Generated from schema/api-stats-request.json by scripts/generate-types.mjs (json-schema-to-typescript).
// Do not edit: `npm run generate` writes it again, `npm run check:generated` finds drift.

/**
 * The request on timer.api.stats.<tenantId> (docs/CONTRACT.md §6); an empty body counts as {}.
 */
export interface ApiStatsRequest {
  /**
   * How many minutes the forecast covers, from the current one. Read as any JSON value, so that a wrong one gets a reason of its own.
   */
  forecastMinutes?: number | null;
}
