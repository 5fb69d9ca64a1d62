/**
 * The NATS libraries' failures as this client's typed errors: nothing answering, no answer in
 * time and a closed connection are "unavailable, try again"; a permissions violation is final.
 */
import { errors, RequestError } from "@nats-io/nats-core";
import { JetStreamApiError } from "@nats-io/jetstream";
import {
  TimerError,
  TimerPermissionError,
  TimerServiceError,
  TimerUnavailableError,
} from "./errors.js";

/** How long to wait before trying again when the broker, not the daemon, said nothing. */
export const BROKER_RETRY_MS = 1000;

function causes(error: unknown): unknown[] {
  const chain: unknown[] = [];
  for (let e = error; e !== undefined && chain.length < 5; e = (e as { cause?: unknown }).cause) {
    chain.push(e);
    if (!(e instanceof Error)) break;
  }
  return chain;
}

/** `error` from a request or publish on `subject` as a TimerError (kept as is if it is one). */
export function fromBroker(error: unknown, subject: string, timeoutMs: number): TimerError {
  if (error instanceof TimerError) return error;
  const chain = causes(error);
  const options = { source: "broker" as const, subject, cause: error };
  const has = (type: abstract new (...args: never[]) => unknown) => chain.some((e) => e instanceof type);
  const permission = chain.find((e) => e instanceof errors.PermissionViolationError);
  if (permission) {
    return new TimerPermissionError(`the broker refused: ${(permission as Error).message}`, options);
  }
  if (has(errors.NoRespondersError) || chain.some((e) => e instanceof RequestError && e.isNoResponders())) {
    return new TimerUnavailableError(
      `nothing answers on ${subject} (is timer-service running, and may this user publish there?)`,
      BROKER_RETRY_MS,
      undefined,
      options,
    );
  }
  // The library does not export this class; its name is stable.
  if (chain.some((e) => e instanceof Error && e.name === "JetStreamNotEnabled")) {
    return new TimerUnavailableError(
      `no stream takes ${subject} right now (JetStream not ready, or the command stream missing)`,
      BROKER_RETRY_MS,
      undefined,
      options,
    );
  }
  if (has(errors.TimeoutError)) {
    return new TimerUnavailableError(
      `no answer on ${subject} within ${timeoutMs} ms`,
      BROKER_RETRY_MS,
      undefined,
      options,
    );
  }
  if (has(errors.ClosedConnectionError) || has(errors.DrainingConnectionError) || has(errors.ConnectionError)) {
    return new TimerUnavailableError(
      `the connection to the broker is closed or draining: ${(error as Error).message}`,
      BROKER_RETRY_MS,
      undefined,
      options,
    );
  }
  if (has(JetStreamApiError)) {
    return new TimerServiceError(`the broker refused: ${(error as Error).message}`, undefined, options);
  }
  return new TimerServiceError(
    error instanceof Error ? error.message : String(error),
    undefined,
    options,
  );
}
