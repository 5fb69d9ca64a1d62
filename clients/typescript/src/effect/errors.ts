/**
 * The client's failures as tagged errors, for `Effect.catchTag`: one tag per kind of
 * TimerError (errors.ts), with the same fields.
 */
import { Data } from "effect";
import {
  TimerBadRequestError,
  TimerError,
  TimerNotFoundError,
  TimerPermissionError,
  TimerRejectedError,
  TimerUnavailableError,
  type ErrorSource,
} from "../errors.js";

interface Fields {
  readonly reason: string;
  readonly source: ErrorSource;
  readonly subject: string | undefined;
  readonly cause: unknown;
}

/** 400: the request breaks a rule of the API. */
export class TimerBadRequest extends Data.TaggedError("TimerBadRequest")<Fields> {}

/** 404: no timer by that key. */
export class TimerNotFound extends Data.TaggedError("TimerNotFound")<Fields> {}

/** Refused for now (503, or nothing answered in time): try again after `retryAfterMs`. */
export class TimerUnavailable extends Data.TaggedError("TimerUnavailable")<Fields & { readonly retryAfterMs: number }> {}

/** A command the contract refuses, refused before sending. */
export class TimerRejected extends Data.TaggedError("TimerRejected")<Fields> {}

/** The broker refused for lack of permission. */
export class TimerPermissionDenied extends Data.TaggedError("TimerPermissionDenied")<Fields> {}

/** Any other failure: a 500 or an unknown code, a reply or event that cannot be read. */
export class TimerServiceFailure extends Data.TaggedError("TimerServiceFailure")<Fields & { readonly code: number | undefined }> {}

export type TimerClientError =
  | TimerBadRequest
  | TimerNotFound
  | TimerUnavailable
  | TimerRejected
  | TimerPermissionDenied
  | TimerServiceFailure;

/** A failure of the Promise client as its tagged error. */
export function tagged(error: unknown): TimerClientError {
  if (!(error instanceof TimerError)) {
    return new TimerServiceFailure({
      reason: error instanceof Error ? error.message : String(error),
      source: "client",
      subject: undefined,
      cause: error,
      code: undefined,
    });
  }
  const fields: Fields = { reason: error.reason, source: error.source, subject: error.subject, cause: error };
  if (error instanceof TimerBadRequestError) return new TimerBadRequest(fields);
  if (error instanceof TimerNotFoundError) return new TimerNotFound(fields);
  if (error instanceof TimerUnavailableError) return new TimerUnavailable({ ...fields, retryAfterMs: error.retryAfterMs });
  if (error instanceof TimerRejectedError) return new TimerRejected(fields);
  if (error instanceof TimerPermissionError) return new TimerPermissionDenied(fields);
  return new TimerServiceFailure({ ...fields, code: error.code });
}
