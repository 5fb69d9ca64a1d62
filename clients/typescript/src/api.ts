/**
 * One request on the query and cancel API (§6): `timer.api.<verb>.<tenantId>` over NATS
 * request/reply, its error reply (the micro protocol's `Nats-Service-Error-Code` and
 * `Nats-Service-Error` headers, the reason and `retryAfterMs` in the body) as a typed error.
 */
import type { Msg, NatsConnection } from "@nats-io/nats-core";
import { fromBroker, BROKER_RETRY_MS } from "./broker-errors.js";
import {
  TimerBadRequestError,
  TimerNotFoundError,
  TimerServiceError,
  TimerUnavailableError,
  type TimerError,
} from "./errors.js";

const ERROR_CODE = "Nats-Service-Error-Code";
const ERROR_REASON = "Nats-Service-Error";

/** The typed error of an error reply, or `undefined` for a success. */
export function errorOfReply(reply: Msg, subject: string): TimerError | undefined {
  const codeText = reply.headers?.get(ERROR_CODE);
  if (!codeText) return undefined;
  const code = Number.parseInt(codeText, 10);
  let body: { error?: unknown; retryAfterMs?: unknown } = {};
  try {
    body = reply.data.length > 0 ? (reply.json() as typeof body) : {};
  } catch {
    // The header alone says enough.
  }
  // The body keeps the whole reason; the header has a copy made safe for a header.
  const reason = typeof body.error === "string" ? body.error : (reply.headers?.get(ERROR_REASON) ?? "");
  const options = { source: "service" as const, subject };
  switch (code) {
    case 400:
      return new TimerBadRequestError(reason, options);
    case 404:
      return new TimerNotFoundError(reason, options);
    case 503: {
      const after = typeof body.retryAfterMs === "number" ? body.retryAfterMs : BROKER_RETRY_MS;
      return new TimerUnavailableError(reason, after, 503, options);
    }
    default:
      return new TimerServiceError(reason, Number.isNaN(code) ? undefined : code, options);
  }
}

/** Sends `body` to `subject` and returns the decoded reply, or throws a TimerError. */
export async function request<R>(
  nc: NatsConnection,
  subject: string,
  body: object,
  timeoutMs: number,
): Promise<R> {
  let reply: Msg;
  try {
    reply = await nc.request(subject, JSON.stringify(body), { timeout: timeoutMs });
  } catch (error) {
    throw fromBroker(error, subject, timeoutMs);
  }
  const failure = errorOfReply(reply, subject);
  if (failure) throw failure;
  try {
    return reply.json() as R;
  } catch (error) {
    throw new TimerServiceError(`the reply on ${subject} is not JSON`, undefined, {
      source: "service",
      subject,
      cause: error,
    });
  }
}
