// Generated from schema/api-error-reply.json by scripts/generate-types.mjs (json-schema-to-typescript).
// Do not edit: `npm run generate` writes it again, `npm run check:generated` finds drift.

/**
 * The reply to an API request that was refused or failed (docs/CONTRACT.md §6): its headers Nats-Service-Error-Code (400, 404, 500 or 503) and Nats-Service-Error say the same as this body.
 */
export interface ApiErrorReply {
  /**
   * Why the request was refused or failed.
   */
  error: string;
  /**
   * On a 503 only: how many milliseconds to wait before asking again.
   */
  retryAfterMs?: number | null;
  [k: string]: unknown | undefined;
}
