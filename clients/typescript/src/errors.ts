/**
 * What can go wrong, as classes a caller can tell apart with `instanceof` (or by `kind`): the
 * API's error codes (§6: 400, 404, 503, and any other as a generic service error), a command
 * refused by the contract's rules (§3), and the broker's refusals. A refusal made in the client
 * (`source: "client"`) carries the reason the daemon would have given.
 */

/** Who refused: the client before sending, the daemon, or the broker (NATS). */
export type ErrorSource = "client" | "service" | "broker";

export interface TimerErrorOptions {
  readonly source: ErrorSource;
  /** The subject the request or command went to. */
  readonly subject?: string;
  readonly cause?: unknown;
}

export abstract class TimerError extends Error {
  /** A stable name for the kind of failure, the same as the class's. */
  abstract readonly kind: string;
  /** The API's error code (`Nats-Service-Error-Code`) when the daemon answered with one. */
  readonly code: number | undefined;
  /** Why, in the daemon's words where it gave them. */
  readonly reason: string;
  readonly source: ErrorSource;
  readonly subject: string | undefined;

  constructor(reason: string, code: number | undefined, options: TimerErrorOptions) {
    super(code === undefined ? reason : `${code}: ${reason}`, options.cause === undefined ? {} : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.reason = reason;
    this.source = options.source;
    this.subject = options.subject;
  }
}

/** 400: the request breaks a rule of §6 (or would, checked in the client). */
export class TimerBadRequestError extends TimerError {
  readonly kind = "TimerBadRequestError";
  constructor(reason: string, options: TimerErrorOptions) {
    super(reason, 400, options);
  }
}

/** 404: no timer has that key in this tenant. */
export class TimerNotFoundError extends TimerError {
  readonly kind = "TimerNotFoundError";
  constructor(reason: string, options: TimerErrorOptions) {
    super(reason, 404, options);
  }
}

/**
 * Refused for now: the daemon answered 503, or nothing answered in time (no daemon listening,
 * the broker unreachable, a PubAck that never came). The same call may succeed after
 * `retryAfterMs`. For a command whose PubAck did not come, whether the broker stored it is
 * unknown: sending it again is safe (one timer per key).
 */
export class TimerUnavailableError extends TimerError {
  readonly kind = "TimerUnavailableError";
  readonly retryAfterMs: number;
  constructor(reason: string, retryAfterMs: number, code: number | undefined, options: TimerErrorOptions) {
    super(reason, code, options);
    this.retryAfterMs = retryAfterMs;
  }
}

/**
 * A command the contract refuses (§3): bad ids, sizes, `dueAt`, `expireAfter`. Refused in the
 * client before sending; what only the daemon can refuse (a quota, say) arrives as a
 * TimerCommandRejected event instead (`onRejected`).
 */
export class TimerRejectedError extends TimerError {
  readonly kind = "TimerRejectedError";
  constructor(reason: string, options: TimerErrorOptions) {
    super(reason, undefined, options);
  }
}

/** The broker refused for lack of permission: the user may not publish or read there. */
export class TimerPermissionError extends TimerError {
  readonly kind = "TimerPermissionError";
  constructor(reason: string, options: TimerErrorOptions) {
    super(reason, undefined, options);
  }
}

/** Any other failure: a 500 or an unknown code from the daemon, or a reply it cannot read. */
export class TimerServiceError extends TimerError {
  readonly kind = "TimerServiceError";
  constructor(reason: string, code: number | undefined, options: TimerErrorOptions) {
    super(reason, code, options);
  }
}
