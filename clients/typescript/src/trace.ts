/**
 * W3C trace context across the daemon (§3 "Trace context"): a command carries the caller's
 * `traceparent` and `tracestate`, and its events come back with the same trace id. Uses
 * `@opentelemetry/api` when the application has it (an optional peer, loaded on first use);
 * without it nothing is injected and handlers run as they are.
 */
import type * as OtelApi from "@opentelemetry/api";

type Otel = typeof OtelApi;

/** The two headers the contract carries. */
export interface TraceHeaders {
  readonly traceparent?: string;
  readonly tracestate?: string;
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** A traceparent's parts, or `undefined` when it is not W3C's form (all-zero ids included). */
export function parseTraceparent(
  value: string | undefined,
): { traceId: string; spanId: string; flags: number } | undefined {
  const m = value === undefined ? null : TRACEPARENT.exec(value.trim().toLowerCase());
  if (!m || m[1] === "ff") return undefined;
  const [, , traceId = "", spanId = "", flags = "00"] = m;
  if (/^0+$/.test(traceId) || /^0+$/.test(spanId)) return undefined;
  return { traceId, spanId, flags: Number.parseInt(flags, 16) };
}

let loading: Promise<Otel | undefined> | undefined;

/** The OpenTelemetry API if the application installed it; looked for once. */
function otel(): Promise<Otel | undefined> {
  loading ??= import("@opentelemetry/api").then(
    (api) => api as Otel,
    () => undefined,
  );
  return loading;
}

/** The active span's context as headers; none when there is no API or no valid span. */
export async function activeTraceHeaders(): Promise<TraceHeaders> {
  const api = await otel();
  if (!api) return {};
  const span = api.trace.getSpanContext(api.context.active());
  if (!span || !api.isSpanContextValid(span)) return {};
  const flags = (span.traceFlags & 0xff).toString(16).padStart(2, "0");
  const tracestate = span.traceState?.serialize();
  return {
    traceparent: `00-${span.traceId}-${span.spanId}-${flags}`,
    ...(tracestate ? { tracestate } : {}),
  };
}

/**
 * Runs `work` inside the trace of an event's headers: a consumer span (recorded when the
 * application has a tracer provider) that is a child of the daemon's publish span, or of the
 * command's caller when the daemon records none.
 */
export async function withEventTrace<T>(
  headers: TraceHeaders,
  spanName: string,
  attributes: Record<string, string | number>,
  work: () => Promise<T>,
): Promise<T> {
  const parent = parseTraceparent(headers.traceparent);
  const api = parent ? await otel() : undefined;
  if (!api || !parent) return work();
  const remote: OtelApi.SpanContext = {
    traceId: parent.traceId,
    spanId: parent.spanId,
    traceFlags: parent.flags,
    isRemote: true,
    ...(headers.tracestate ? { traceState: api.createTraceState(headers.tracestate) } : {}),
  };
  const parentContext = api.trace.setSpanContext(api.context.active(), remote);
  const tracer = api.trace.getTracer("timer-service-client");
  return tracer.startActiveSpan(
    spanName,
    { kind: api.SpanKind.CONSUMER, attributes },
    parentContext,
    async (span) => {
      try {
        return await work();
      } catch (error) {
        span.recordException(error instanceof Error ? error : String(error));
        span.setStatus({ code: api.SpanStatusCode.ERROR });
        throw error;
      } finally {
        span.end();
      }
    },
  );
}
