// Generated from schema/api-cancel-many-reply.json by scripts/generate-types.mjs (json-schema-to-typescript).
// Do not edit: `npm run generate` writes it again, `npm run check:generated` finds drift.

/**
 * The reply to a request on timer.api.cancel-many.<tenantId> (docs/CONTRACT.md §6), when it succeeds.
 */
export interface ApiCancelManyReply {
  /**
   * Timers cancelled (and not scheduled again by a newer command since); with `dryRun`, those that would be cancelled now.
   */
  count: number;
  dryRun: boolean;
  [k: string]: unknown | undefined;
}
