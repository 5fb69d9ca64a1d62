/**
 * `TimerClient`: one tenant's view of timer-service over a NATS connection the caller owns.
 * Commands go to the command stream and resolve on the broker's PubAck (stored, §1); queries
 * and cancels go to the API (§6); events come from durable consumers on the event stream.
 */
import { jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager } from "@nats-io/jetstream";
import { headers as natsHeaders, type NatsConnection } from "@nats-io/nats-core";
import { request } from "./api.js";
import { fromBroker } from "./broker-errors.js";
import {
  openFeed,
  runHandler,
  type ConsumerOptions,
  type DeliveryInfo,
  type EventSubscription,
  type Feed,
} from "./consumers.js";
import { envelope } from "./envelope.js";
import { TimerBadRequestError, TimerRejectedError } from "./errors.js";
import type { DueEvent, ExpiredEvent, RejectedEvent, Timer } from "./events.js";
import type {
  ApiCancelManyReply,
  ApiCancelReply,
  ApiListReply,
  ApiStatsReply,
  TimerState,
} from "./generated/index.js";
import { toInstant, type InstantInput } from "./instant.js";
import {
  DEFAULT_LIMITS,
  cancelFilterFields,
  checkForecastMinutes,
  checkListLimit,
  checkMessageSize,
  checkServiceCallId,
  checkTenantId,
  type CancelFilter,
  type CommandLimits,
} from "./rules.js";
import { planScheduleTimers, sendPlanned, type ScheduleManyReceipt } from "./schedule-many.js";
import { DEFAULT_EVENT_STREAM, DEFAULT_PREFIXES, Subjects, type EventKind, type SubjectPrefixes, type Verb } from "./subjects.js";
import { utf8Bytes } from "./text.js";
import { prepareTimer, type ScheduleInput } from "./timer-input.js";
import { activeTraceHeaders, type TraceHeaders } from "./trace.js";

export type { ScheduleInput } from "./timer-input.js";

export interface TimerClientOptions {
  /** The tenant every command, request and consumer of this client is for. */
  readonly tenantId: string;
  /** How long a request or a PubAck may take (5 s). */
  readonly timeoutMs?: number;
  /** The daemon's subject prefixes, when it does not use the defaults. */
  readonly prefixes?: Partial<SubjectPrefixes>;
  /** The event stream (`TIMER_EVENTS`). */
  readonly eventStream?: string;
  /** The daemon's command limits, when it does not use the defaults. */
  readonly limits?: Partial<CommandLimits>;
}

export interface CallOptions {
  /** This call's timeout, instead of the client's. */
  readonly timeoutMs?: number;
}

export interface CommandOptions extends CallOptions {
  /**
   * The trace context to carry; by default the active OpenTelemetry span's, when
   * `@opentelemetry/api` is installed. `false` carries none.
   */
  readonly trace?: TraceHeaders | false;
}

/** What the broker said when it stored a command. */
export interface CommandReceipt {
  /** The envelope's id, also its `Nats-Msg-Id`. */
  readonly id: string;
  readonly stream: string;
  /** Its place in the command stream, the order of a key's commands (§3). */
  readonly seq: number;
  /** True when the broker already had this very message (a retry within its window). */
  readonly duplicate: boolean;
}

export interface ScheduleReceipt extends CommandReceipt {
  /** `dueAt` as sent. */
  readonly dueAt: string;
}

/** What `list` selects; every field optional. */
export interface ListFilter {
  readonly state?: TimerState;
  readonly correlationId?: string;
  /** Due at or after. */
  readonly dueFrom?: InstantInput;
  /** Due before. */
  readonly dueTo?: InstantInput;
  /** Timers per page (1 to 1000; the daemon's default is 100). */
  readonly pageSize?: number;
}

export interface ListPageRequest extends ListFilter {
  /** The `next` of the page before. */
  readonly after?: string;
}

/** How long `cancelMany` may wait: the daemon answers within 25 s (§6). */
const CANCEL_MANY_TIMEOUT_MS = 30_000;

export class TimerClient {
  readonly tenantId: string;
  readonly subjects: Subjects;
  readonly timeoutMs: number;
  readonly limits: CommandLimits;
  readonly eventStream: string;
  private readonly js: JetStreamClient;
  private jsm: Promise<JetStreamManager> | undefined;
  private readonly subscriptions = new Set<EventSubscription>();

  constructor(
    readonly nc: NatsConnection,
    options: TimerClientOptions,
  ) {
    const refusal = checkTenantId(options.tenantId);
    if (refusal) throw new TimerBadRequestError(refusal, { source: "client" });
    this.tenantId = options.tenantId;
    this.subjects = new Subjects(options.tenantId, { ...DEFAULT_PREFIXES, ...options.prefixes });
    this.timeoutMs = options.timeoutMs ?? 5000;
    this.limits = { ...DEFAULT_LIMITS, ...options.limits };
    this.eventStream = options.eventStream ?? DEFAULT_EVENT_STREAM;
    this.js = jetstream(nc, { timeout: this.timeoutMs });
  }

  /**
   * Schedules (or reschedules) a timer; resolves once the broker stored the command. Input the
   * contract refuses is refused here (TimerRejectedError), checked in the daemon's order so the
   * reason is the one it would give.
   */
  async schedule<D = unknown>(input: ScheduleInput<D>, options: CommandOptions = {}): Promise<ScheduleReceipt> {
    const subject = this.subjects.schedule;
    const refuse = (reason: string) => new TimerRejectedError(reason, { source: "client", subject });
    const timer = prepareTimer(input, this.limits);
    if (timer.unsendable) throw refuse(timer.unsendable);
    const payload = { tenantId: this.tenantId, ...timer.fields };
    const command = envelope("ScheduleTimer", this.tenantId, payload, { aggregateId: input.serviceCallId });
    const json = JSON.stringify(command);
    const refusal = checkMessageSize(utf8Bytes(json), this.limits) ?? timer.refusal;
    if (refusal) throw refuse(refusal);
    const receipt = await this.publish(subject, command.id, json, options);
    return { ...receipt, dueAt: timer.dueAt };
  }

  /**
   * Schedules (or reschedules) many timers: sends them as ScheduleTimers commands of up to
   * 1000 timers and `limits.maxCommandBytes` each, in order, and resolves with each message's
   * receipt once the broker stored them all. The whole list is checked first, each timer as
   * `schedule` checks it and each key at most once, and refused (TimerRejectedError, the
   * timer's position in the reason: `timers[<i>]: …`) before anything is sent.
   */
  async scheduleTimers<D = unknown>(inputs: readonly ScheduleInput<D>[], options: CommandOptions = {}): Promise<ScheduleManyReceipt[]> {
    const subject = this.subjects.scheduleMany;
    const plan = planScheduleTimers(this.tenantId, inputs, this.limits);
    if ("reason" in plan) throw new TimerRejectedError(plan.reason, { source: "client", subject });
    // One trace context for every message of the list.
    const trace = options.trace === false ? {} : (options.trace ?? (await activeTraceHeaders()));
    return sendPlanned(plan.messages, (message) => this.publish(subject, message.id, message.json, { ...options, trace }));
  }

  /**
   * Publishes a CancelTimer and resolves once the broker stored it, without waiting for the
   * daemon to apply it (`cancel` waits, and says what it did).
   */
  async cancelCommand(serviceCallId: string, options: CommandOptions = {}): Promise<CommandReceipt> {
    const subject = this.subjects.cancel;
    const refusal = checkServiceCallId(serviceCallId);
    if (refusal) throw new TimerRejectedError(refusal, { source: "client", subject });
    const command = envelope(
      "CancelTimer",
      this.tenantId,
      { tenantId: this.tenantId, serviceCallId },
      { aggregateId: serviceCallId },
    );
    const json = JSON.stringify(command);
    const sizeRefusal = checkMessageSize(utf8Bytes(json), this.limits);
    if (sizeRefusal) throw new TimerRejectedError(sizeRefusal, { source: "client", subject });
    return this.publish(subject, command.id, json, options);
  }

  /** Publishes a command its caller has checked (its size included), once per call. */
  private async publish(subject: string, id: string, json: string, options: CommandOptions): Promise<CommandReceipt> {
    const trace = options.trace === false ? {} : (options.trace ?? (await activeTraceHeaders()));
    const h = natsHeaders();
    if (trace.traceparent) h.set("traceparent", trace.traceparent);
    if (trace.tracestate) h.set("tracestate", trace.tracestate);
    const timeout = options.timeoutMs ?? this.timeoutMs;
    try {
      // The envelope id as Nats-Msg-Id: the broker stores one copy of a command sent twice.
      const ack = await this.js.publish(subject, json, { msgID: id, headers: h, timeout });
      return { id, stream: ack.stream, seq: ack.seq, duplicate: ack.duplicate };
    } catch (error) {
      throw fromBroker(error, subject, timeout);
    }
  }

  private request<R>(verb: Verb, body: object, timeoutMs: number | undefined): Promise<R> {
    return request<R>(this.nc, this.subjects.api(verb), body, timeoutMs ?? this.timeoutMs);
  }

  private badRequest(verb: Verb, reason: string): TimerBadRequestError {
    return new TimerBadRequestError(reason, { source: "client", subject: this.subjects.api(verb) });
  }

  /** Cancels a timer and says what happened (`cancelled`, `already_reached`…), once applied. */
  async cancel<D = unknown>(serviceCallId: string, options: CallOptions = {}): Promise<ApiCancelReply & { timer?: Timer<D> | null }> {
    const refusal = checkServiceCallId(serviceCallId);
    if (refusal) throw this.badRequest("cancel", refusal);
    return this.request("cancel", { serviceCallId }, options.timeoutMs);
  }

  /**
   * Cancels the pending timers `filter` selects (or, with `dryRun`, only counts them) and
   * resolves with how many, once applied.
   */
  async cancelMany(filter: CancelFilter, options: CallOptions & { readonly dryRun?: boolean } = {}): Promise<ApiCancelManyReply> {
    const checked = cancelFilterFields(filter);
    if ("reason" in checked) throw this.badRequest("cancel-many", checked.reason);
    const body = { ...checked.fields, ...(options.dryRun ? { dryRun: true } : {}) };
    return this.request("cancel-many", body, options.timeoutMs ?? Math.max(this.timeoutMs, CANCEL_MANY_TIMEOUT_MS));
  }

  /** One timer; throws TimerNotFoundError when the tenant has none by that key. */
  async get<D = unknown>(serviceCallId: string, options: CallOptions = {}): Promise<Timer<D>> {
    const refusal = checkServiceCallId(serviceCallId);
    if (refusal) throw this.badRequest("get", refusal);
    const reply = await this.request<{ timer: Timer<D> }>("get", { serviceCallId }, options.timeoutMs);
    return reply.timer;
  }

  /** One page of `list`; `list` follows the pages for you. */
  async listPage<D = unknown>(page: ListPageRequest = {}, options: CallOptions = {}): Promise<ApiListReply & { timers: Timer<D>[] }> {
    const body: Record<string, unknown> = {};
    if (page.pageSize !== undefined) {
      const refusal = checkListLimit(page.pageSize);
      if (refusal) throw this.badRequest("list", refusal);
      body.limit = page.pageSize;
    }
    for (const field of ["dueFrom", "dueTo"] as const) {
      const value = page[field];
      if (value === undefined) continue;
      const instant = toInstant(field, value);
      if ("reason" in instant) throw this.badRequest("list", instant.reason);
      body[field] = instant.text;
    }
    if (page.state !== undefined) body.state = page.state;
    if (page.correlationId !== undefined) body.correlationId = page.correlationId;
    if (page.after !== undefined) body.after = page.after;
    return this.request("list", body, options.timeoutMs);
  }

  /** Every timer `filter` selects, in `(dueAt, serviceCallId)` order, page after page. */
  async *list<D = unknown>(filter: ListFilter = {}, options: CallOptions = {}): AsyncGenerator<Timer<D>, void, undefined> {
    let after: string | undefined;
    do {
      const page: ApiListReply & { timers: Timer<D>[] } = await this.listPage<D>(
        after === undefined ? filter : { ...filter, after },
        options,
      );
      yield* page.timers;
      after = page.next ?? undefined;
    } while (after !== undefined);
  }

  /** The tenant's pending and overdue counts, and with `forecastMinutes` a forecast by minute. */
  async stats(request: { readonly forecastMinutes?: number } = {}, options: CallOptions = {}): Promise<ApiStatsReply> {
    if (request.forecastMinutes !== undefined) {
      const refusal = checkForecastMinutes(request.forecastMinutes);
      if (refusal) throw this.badRequest("stats", refusal);
      return this.request("stats", { forecastMinutes: request.forecastMinutes }, options.timeoutMs);
    }
    return this.request("stats", {}, options.timeoutMs);
  }

  private manager(): Promise<JetStreamManager> {
    this.jsm ??= jetstreamManager(this.nc, { timeout: this.timeoutMs, checkAPI: false });
    return this.jsm;
  }

  /** The deliveries of one kind of event, to settle yourself (the Effect API uses this). */
  async openEvents<E>(kind: EventKind, options: ConsumerOptions): Promise<Feed<E>> {
    const type = { due: "DueTimeReached", expired: "TimerExpired", rejected: "TimerCommandRejected" }[kind];
    return openFeed<E>({
      js: this.js,
      jsm: await this.manager(),
      stream: this.eventStream,
      subject: this.subjects.event(kind),
      type,
      options,
      timeoutMs: this.timeoutMs,
    });
  }

  private async on<E>(kind: EventKind, handler: (event: E, info: DeliveryInfo) => unknown, options: ConsumerOptions): Promise<EventSubscription> {
    const feed = await this.openEvents<E>(kind, options);
    const subject = this.subjects.event(kind);
    const running = runHandler(feed, handler, options, {
      spanName: `process ${subject}`,
      attributes: {
        "messaging.system": "nats",
        "messaging.operation.type": "process",
        "messaging.destination.name": subject,
        "messaging.consumer.group.name": options.consumer,
      },
    });
    this.subscriptions.add(running);
    void running.done.finally(() => this.subscriptions.delete(running));
    return running;
  }

  /**
   * Runs `handler` for each DueTimeReached of the tenant, on the durable consumer
   * `options.consumer`, inside the event's trace context. Acknowledged once the handler
   * resolved; delivered again after a delay when it throws. Events may come twice (§3): make
   * the handler idempotent (by `serviceCallId` and `dueAt`, or `info.msgId`).
   */
  onDue<D = unknown>(handler: (event: DueEvent<D>, info: DeliveryInfo) => unknown, options: ConsumerOptions): Promise<EventSubscription> {
    return this.on("due", handler, options);
  }

  /** The same for TimerExpired: timers that fired past `dueAt + expireAfter`. */
  onExpired<D = unknown>(handler: (event: ExpiredEvent<D>, info: DeliveryInfo) => unknown, options: ConsumerOptions): Promise<EventSubscription> {
    return this.on("expired", handler, options);
  }

  /** The same for TimerCommandRejected: this tenant's commands the daemon refused. */
  onRejected(handler: (event: RejectedEvent, info: DeliveryInfo) => unknown, options: ConsumerOptions): Promise<EventSubscription> {
    return this.on("rejected", handler, options);
  }

  /** Stops every handler this client started; the connection stays the caller's. */
  async close(): Promise<void> {
    await Promise.all([...this.subscriptions].map((s) => s.stop()));
  }
}
