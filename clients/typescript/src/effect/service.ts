/**
 * timer-service as an Effect service: a `Context.Tag` with the same operations as the Promise
 * client (over the same core), tagged errors, and the events as `Stream`s. A service whose
 * timers ran in-process swaps to the daemon by providing `TimerService.layer`.
 */
import type { NatsConnection } from "@nats-io/nats-core";
import { Chunk, Context, Effect, Layer, Option, Runtime, Schema, Stream, Tracer } from "effect";
import {
  TimerClient,
  type CallOptions,
  type CommandReceipt,
  type ListFilter,
  type ScheduleInput,
  type ScheduleReceipt,
  type TimerClientOptions,
} from "../client.js";
import type { ScheduleManyReceipt } from "../schedule-many.js";
import type { ConsumerOptions, Delivery, DeliveryInfo, EventSubscription } from "../consumers.js";
import type { Timer } from "../events.js";
import type { ApiCancelManyReply, ApiCancelReply, ApiStatsReply } from "../generated/index.js";
import type { CancelFilter } from "../rules.js";
import type { EventKind } from "../subjects.js";
import { parseTraceparent, type TraceHeaders } from "../trace.js";
import { TimerServiceFailure, tagged, type TimerClientError } from "./errors.js";
import { DueTimeReached, TimerCommandRejected, TimerExpired } from "./schemas.js";

/** An event read and decoded, to settle: `ack` once handled, `nak` to have it again later. */
export interface TimerDelivery<A> {
  readonly event: A;
  readonly info: DeliveryInfo;
  readonly ack: Effect.Effect<void, TimerClientError>;
  readonly nak: (delayMs: number) => Effect.Effect<void>;
}

export interface TimerServiceShape {
  readonly tenantId: string;
  /** Schedules (or reschedules) a timer; succeeds once the broker stored it. */
  readonly schedule: <D = unknown>(input: ScheduleInput<D>) => Effect.Effect<ScheduleReceipt, TimerClientError>;
  /**
   * Schedules (or reschedules) many timers, as ScheduleTimers commands of up to 1000 timers
   * each; succeeds with each message's receipt once the broker stored them all. A bad timer or
   * a key named twice fails the whole list (TimerRejected) before anything is sent.
   */
  readonly scheduleTimers: <D = unknown>(
    inputs: readonly ScheduleInput<D>[],
  ) => Effect.Effect<ScheduleManyReceipt[], TimerClientError>;
  /** Publishes a CancelTimer; succeeds once the broker stored it. */
  readonly cancelCommand: (serviceCallId: string) => Effect.Effect<CommandReceipt, TimerClientError>;
  /** Cancels through the API and says what happened, once applied. */
  readonly cancel: (serviceCallId: string, options?: CallOptions) => Effect.Effect<ApiCancelReply, TimerClientError>;
  readonly cancelMany: (
    filter: CancelFilter,
    options?: CallOptions & { readonly dryRun?: boolean },
  ) => Effect.Effect<ApiCancelManyReply, TimerClientError>;
  readonly get: <D = unknown>(serviceCallId: string, options?: CallOptions) => Effect.Effect<Timer<D>, TimerClientError>;
  /** Every timer the filter selects, following the pages. */
  readonly list: <D = unknown>(filter?: ListFilter, options?: CallOptions) => Stream.Stream<Timer<D>, TimerClientError>;
  readonly stats: (
    request?: { readonly forecastMinutes?: number },
    options?: CallOptions,
  ) => Effect.Effect<ApiStatsReply, TimerClientError>;
  /** DueTimeReached events on a durable consumer, decoded, each to settle. */
  readonly dueEvents: (options: ConsumerOptions) => Stream.Stream<TimerDelivery<DueTimeReached>, TimerClientError>;
  readonly expiredEvents: (options: ConsumerOptions) => Stream.Stream<TimerDelivery<TimerExpired>, TimerClientError>;
  readonly rejectedEvents: (options: ConsumerOptions) => Stream.Stream<TimerDelivery<TimerCommandRejected>, TimerClientError>;
  /**
   * Runs `handler` on each DueTimeReached until interrupted: acknowledged when it succeeds,
   * delivered again after a delay when it fails. It runs as a child of the event's trace.
   */
  readonly consumeDue: <E, R>(
    options: ConsumerOptions,
    handler: (event: DueTimeReached) => Effect.Effect<void, E, R>,
  ) => Effect.Effect<never, TimerClientError, R>;
  readonly consumeExpired: <E, R>(
    options: ConsumerOptions,
    handler: (event: TimerExpired) => Effect.Effect<void, E, R>,
  ) => Effect.Effect<never, TimerClientError, R>;
  readonly consumeRejected: <E, R>(
    options: ConsumerOptions,
    handler: (event: TimerCommandRejected) => Effect.Effect<void, E, R>,
  ) => Effect.Effect<never, TimerClientError, R>;
}

/** The NATS connection the layer builds on; the application provides and owns it. */
export class NatsConnectionTag extends Context.Tag("timer-service-client/NatsConnection")<NatsConnectionTag, NatsConnection>() {}

const attempt = <A>(run: () => Promise<A>): Effect.Effect<A, TimerClientError> =>
  Effect.tryPromise({ try: run, catch: tagged });

/** The current Effect span as trace headers, when there is one with W3C-shaped ids. */
const effectTrace: Effect.Effect<TraceHeaders | undefined> = Effect.map(Effect.option(Effect.currentSpan), (span) => {
  if (Option.isNone(span)) return undefined;
  const { traceId, spanId, sampled } = span.value;
  const traceparent = `00-${traceId}-${spanId}-${sampled ? "01" : "00"}`;
  return parseTraceparent(traceparent) ? { traceparent } : undefined;
});

/** Runs `effect` as a child of the event's trace in Effect's own tracer. */
const inEventTrace = <A, E, R>(info: DeliveryInfo, effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> => {
  const parent = parseTraceparent(info.trace.traceparent);
  if (!parent) return effect;
  const span = Tracer.externalSpan({ traceId: parent.traceId, spanId: parent.spanId, sampled: (parent.flags & 1) === 1 });
  return Effect.withParentSpan(effect, span);
};

const schemas = { due: DueTimeReached, expired: TimerExpired, rejected: TimerCommandRejected } as const;
type EventOf<K extends EventKind> = Schema.Schema.Type<(typeof schemas)[K]>;

/** The service on a client. */
export function makeTimerService(client: TimerClient): TimerServiceShape {
  const events = <K extends EventKind>(kind: K, options: ConsumerOptions): Stream.Stream<TimerDelivery<EventOf<K>>, TimerClientError> => {
    const decode = Schema.decodeUnknown(schemas[kind] as unknown as Schema.Schema<EventOf<K>, unknown>);
    const feed = Effect.acquireRelease(
      attempt(() => client.openEvents<unknown>(kind, options)),
      (feed) => Effect.promise(() => feed.close()),
    );
    return Stream.unwrapScoped(
      Effect.map(feed, (feed) =>
        Stream.fromAsyncIterable(feed, tagged).pipe(
          Stream.mapEffect((delivery: Delivery<unknown>) =>
            decode(delivery.event).pipe(
              Effect.map(
                (event): Option.Option<TimerDelivery<EventOf<K>>> =>
                  Option.some({
                    event,
                    info: delivery.info,
                    ack: attempt(() => delivery.ack()),
                    nak: (delayMs: number) => Effect.sync(() => delivery.nak(delayMs)),
                  }),
              ),
              // An event that does not decode never will: acknowledged so it does not come
              // back, and said so.
              Effect.catchAll((error) =>
                Effect.as(
                  Effect.zipRight(
                    Effect.promise(() => delivery.ack()).pipe(Effect.ignore),
                    Effect.logWarning(`event ${delivery.info.streamSequence} on ${delivery.info.subject} skipped: ${error.message}`),
                  ),
                  Option.none(),
                ),
              ),
            ),
          ),
          Stream.filterMap((x) => x),
        ),
      ),
    );
  };

  const consume = <K extends EventKind, E, R>(
    kind: K,
    options: ConsumerOptions,
    handler: (event: EventOf<K>) => Effect.Effect<void, E, R>,
  ): Effect.Effect<never, TimerClientError, R> =>
    Effect.scoped(
      Effect.gen(function* () {
        const runtime = yield* Effect.runtime<R>();
        const run = Runtime.runPromise(runtime);
        const decode = Schema.decodeUnknown(schemas[kind] as unknown as Schema.Schema<EventOf<K>, unknown>);
        const onEvent = (raw: unknown, info: DeliveryInfo) =>
          run(
            Effect.matchEffect(decode(raw), {
              // It never will decode: taken as handled (acknowledged), and said so.
              onFailure: (error) => Effect.logWarning(`event ${info.streamSequence} on ${info.subject} skipped: ${error.message}`),
              onSuccess: (event) => inEventTrace(info, handler(event)),
            }),
          );
        const on = { due: client.onDue.bind(client), expired: client.onExpired.bind(client), rejected: client.onRejected.bind(client) }[kind] as (
          handler: (event: unknown, info: DeliveryInfo) => unknown,
          options: ConsumerOptions,
        ) => Promise<EventSubscription>;
        // A failed handler is told through Effect's logger unless the caller listens.
        const onError =
          options.onError ??
          ((error: unknown, info: DeliveryInfo | undefined) =>
            void run(
              Effect.logWarning(`handler failed; the event is delivered again`).pipe(
                Effect.annotateLogs({ subject: info?.subject, delivery: info?.deliveryCount, error: String(error) }),
              ),
            ));
        const subscription = yield* Effect.acquireRelease(
          attempt(() => on(onEvent, { ...options, onError })),
          (s) => Effect.promise(() => s.stop()),
        );
        yield* Effect.promise(() => subscription.done);
        return yield* Effect.fail(
          new TimerServiceFailure({
            reason: `consumer ${options.consumer} ended`,
            source: "broker",
            subject: client.subjects.event(kind),
            cause: undefined,
            code: undefined,
          }),
        );
      }),
    );

  return {
    tenantId: client.tenantId,
    schedule: (input) =>
      Effect.flatMap(effectTrace, (trace) => attempt(() => client.schedule(input, trace ? { trace } : {}))),
    scheduleTimers: (inputs) =>
      Effect.flatMap(effectTrace, (trace) => attempt(() => client.scheduleTimers(inputs, trace ? { trace } : {}))),
    cancelCommand: (id) => Effect.flatMap(effectTrace, (trace) => attempt(() => client.cancelCommand(id, trace ? { trace } : {}))),
    cancel: (id, options) => attempt(() => client.cancel(id, options)),
    cancelMany: (filter, options) => attempt(() => client.cancelMany(filter, options)),
    get: (id, options) => attempt(() => client.get(id, options)),
    list: <D>(filter: ListFilter = {}, options: CallOptions = {}) =>
      Stream.paginateChunkEffect<string | undefined, Timer<D>, TimerClientError, never>(undefined, (after) =>
        Effect.map(
          attempt(() => client.listPage<D>(after === undefined ? filter : { ...filter, after }, options)),
          (page) => [Chunk.fromIterable(page.timers), Option.fromNullable(page.next ?? undefined)] as const,
        ),
      ),
    stats: (request, options) => attempt(() => client.stats(request, options)),
    dueEvents: (options) => events("due", options),
    expiredEvents: (options) => events("expired", options),
    rejectedEvents: (options) => events("rejected", options),
    consumeDue: (options, handler) => consume("due", options, handler),
    consumeExpired: (options, handler) => consume("expired", options, handler),
    consumeRejected: (options, handler) => consume("rejected", options, handler),
  };
}

/** timer-service for one tenant. */
export class TimerService extends Context.Tag("timer-service-client/TimerService")<TimerService, TimerServiceShape>() {
  /** The service on the connection the layer's environment provides (`NatsConnectionTag`). */
  static readonly layer = (options: TimerClientOptions): Layer.Layer<TimerService, never, NatsConnectionTag> =>
    Layer.scoped(
      TimerService,
      Effect.gen(function* () {
        const nc = yield* NatsConnectionTag;
        const client = yield* Effect.acquireRelease(
          Effect.sync(() => new TimerClient(nc, options)),
          (client) => Effect.promise(() => client.close()),
        );
        return makeTimerService(client);
      }),
    );

  /** The service on a connection the caller already has. */
  static readonly fromConnection = (nc: NatsConnection, options: TimerClientOptions): Layer.Layer<TimerService> =>
    TimerService.layer(options).pipe(Layer.provide(Layer.succeed(NatsConnectionTag, nc)));
}
