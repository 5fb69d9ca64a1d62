/**
 * The events and the API's views with a caller's type for `data` (a generic that defaults to
 * `unknown`): the daemon gives `data` back byte for byte, so the type the caller scheduled with
 * is the type it reads.
 */
import type {
  DueTimeReached,
  DueTimeReachedPayload,
  TimerCommandRejected,
  TimerExpired,
  TimerExpiredPayload,
  TimerView,
} from "./generated/index.js";

/** A `DueTimeReached` whose `data` is a `D`. */
export type DueEvent<D = unknown> = DueTimeReached & {
  readonly payload: DueTimeReachedPayload & { readonly data?: D | null };
};

/** A `TimerExpired` whose `data` is a `D`. */
export type ExpiredEvent<D = unknown> = TimerExpired & {
  readonly payload: TimerExpiredPayload & { readonly data?: D | null };
};

/** A `TimerCommandRejected`: the reason, the subject and the command as it came. */
export type RejectedEvent = TimerCommandRejected;

/** A timer as the API shows it, its `data` a `D`. */
export type Timer<D = unknown> = TimerView & { readonly data?: D | null };
