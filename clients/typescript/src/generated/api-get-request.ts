// Generated from schema/api-get-request.json by scripts/generate-types.mjs (json-schema-to-typescript).
// Do not edit: `npm run generate` writes it again, `npm run check:generated` finds drift.

/**
 * A service call id: 1 to 128 characters, none a control character.
 */
export type ServiceCallId = string;

/**
 * The request on timer.api.get.<tenantId> (docs/CONTRACT.md §6): the timer's key in the tenant of the subject.
 */
export interface ApiGetRequest {
  serviceCallId: ServiceCallId;
}
