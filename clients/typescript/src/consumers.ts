/**
 * The daemon's events on durable JetStream consumers (one per caller-given name on
 * `TIMER_EVENTS`, filtered to one tenant's subject), so a service that restarts resumes where
 * it stopped and nothing fires unseen. A message is acknowledged only once its handler
 * resolved; a handler that throws has it delivered again after a delay (a `nak` with delay),
 * and a long handler keeps it in progress so the broker does not redeliver it meanwhile.
 */
import {
  AckPolicy,
  DeliverPolicy,
  JetStreamApiError,
  type Consumer,
  type JetStreamClient,
  type JetStreamManager,
  type JsMsg,
} from "@nats-io/jetstream";
import { Match, nanos } from "@nats-io/nats-core";
import { BROKER_RETRY_MS, fromBroker } from "./broker-errors.js";
import { TimerServiceError, TimerUnavailableError } from "./errors.js";
import { withEventTrace, type TraceHeaders } from "./trace.js";

/** How a consumer behaves; only its name is required. */
export interface ConsumerOptions {
  /**
   * The durable consumer's name (letters, digits, `-`, `_`): the same name resumes where it
   * left off, across restarts; instances sharing a name share the work.
   */
  readonly consumer: string;
  /** Handlers running at once (default 1: in order). */
  readonly concurrency?: number;
  /**
   * Events pulled ahead of the handlers (default 4 per handler). More is faster; each waits its
   * turn inside the ack wait, so keep `batch` × a handler's time well under `ackWaitMs`.
   */
  readonly batch?: number;
  /** How long the broker waits for an acknowledgement before it delivers again (30 s). */
  readonly ackWaitMs?: number;
  /**
   * How long a message whose handler threw waits before it is delivered again, by attempt
   * (1 for the first failure): default 1 s, doubling, at most 60 s.
   */
  readonly retryDelayMs?: number | ((attempt: number) => number);
  /** Most deliveries of one message; default unlimited. */
  readonly maxDeliver?: number;
  /**
   * Where a consumer created now starts: `"all"` (the default) delivers every event the stream
   * still holds, so none that fired before the consumer existed is missed; `"new"` only later.
   */
  readonly deliverPolicy?: "all" | "new";
  /**
   * Told of a handler that threw, an event that could not be read, an ack that failed, the
   * consumer ending. By default a warning on the console.
   */
  readonly onError?: (error: unknown, delivery: DeliveryInfo | undefined) => void;
}

/** Where an event came from, for logs and idempotence. */
export interface DeliveryInfo {
  readonly subject: string;
  /** The event's sequence in the event stream. */
  readonly streamSequence: number;
  /** 1 on the first delivery, more on redeliveries. */
  readonly deliveryCount: number;
  /** The event's `Nats-Msg-Id`: the same for every publication of one firing (§3). */
  readonly msgId: string | undefined;
  readonly trace: TraceHeaders;
}

/** One event taken from a consumer, to settle exactly once. */
export interface Delivery<E> {
  readonly event: E;
  readonly info: DeliveryInfo;
  /** Acknowledges, and waits for the broker to confirm it. */
  ack(): Promise<void>;
  /** Has it delivered again after `delayMs`. */
  nak(delayMs: number): void;
  /** Resets the broker's ack wait: the handler is still at work. */
  working(): void;
}

/** A running handler; `stop()` ends it once the events in hand are settled. */
export interface EventSubscription {
  readonly consumer: string;
  /** Stops pulling, hands back what was pulled and not begun, waits for running handlers. */
  stop(): Promise<void>;
  /** Settles when the subscription ended, by `stop()` or because its consumer went away. */
  readonly done: Promise<void>;
}

/** Where a consumer reads, and the envelope `type` its events carry. */
export interface FeedSpec {
  readonly js: JetStreamClient;
  readonly jsm: JetStreamManager;
  readonly stream: string;
  readonly subject: string;
  readonly type: string;
  readonly options: ConsumerOptions;
  /** How long one request to the broker may take. */
  readonly timeoutMs: number;
}

/** A consumer's deliveries as an async iterable, and a way to close it. */
export interface Feed<E> extends AsyncIterable<Delivery<E>> {
  readonly consumer: string;
  /** Stops pulling; deliveries already pulled (within a second) are still iterated. */
  close(): Promise<void>;
}

const DEFAULT_ACK_WAIT_MS = 30_000;

/** What happens to a failure when the caller did not say: a warning, never silence. */
function warn(error: unknown, delivery: DeliveryInfo | undefined): void {
  const where = delivery ? ` (${delivery.subject}, event ${delivery.streamSequence}, delivery ${delivery.deliveryCount})` : "";
  console.warn(`timer-service-client: ${error instanceof Error ? error.message : String(error)}${where}`);
}

export function retryDelay(options: ConsumerOptions, attempt: number): number {
  const setting = options.retryDelayMs;
  if (typeof setting === "number") return setting;
  if (typeof setting === "function") return Math.max(0, setting(attempt));
  return Math.min(1000 * 2 ** Math.max(0, attempt - 1), 60_000);
}

function header(m: JsMsg, name: string): string | undefined {
  const value = m.headers?.get(name, Match.IgnoreCase);
  return value === undefined || value === "" ? undefined : value;
}

const CONSUMER_NOT_FOUND = 10014;
const STREAM_NOT_FOUND = 10059;

const isApiError = (error: unknown, code: number) => error instanceof JetStreamApiError && error.code === code;

/**
 * Creates the durable consumer if it is missing; refuses one that reads another subject. The
 * event stream is the daemon's to create: a consumer opened while the daemon is still starting
 * waits for it, up to the timeout.
 */
async function ensureConsumer(spec: FeedSpec): Promise<void> {
  const { jsm, stream, subject, options } = spec;
  const deadline = Date.now() + spec.timeoutMs;
  for (;;) {
    try {
      await ensureConsumerOnce();
      return;
    } catch (error) {
      if (!isApiError(error, STREAM_NOT_FOUND)) throw error;
      if (Date.now() >= deadline) {
        throw new TimerUnavailableError(
          `the event stream ${stream} does not exist (is timer-service running on this broker?)`,
          BROKER_RETRY_MS,
          undefined,
          { source: "broker", subject, cause: error },
        );
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  async function ensureConsumerOnce(): Promise<void> {
    try {
      const info = await jsm.consumers.info(stream, options.consumer);
      const filters = info.config.filter_subjects ?? (info.config.filter_subject ? [info.config.filter_subject] : []);
      if (filters.length !== 1 || filters[0] !== subject) {
        throw new TimerServiceError(
          `consumer ${options.consumer} on ${stream} reads ${filters.join(", ") || "every subject"}, not ${subject}: give this handler a consumer name of its own`,
          undefined,
          { source: "client", subject },
        );
      }
      return;
    } catch (error) {
      if (!isApiError(error, CONSUMER_NOT_FOUND)) throw error;
    }
    await jsm.consumers.add(stream, {
      durable_name: options.consumer,
      filter_subject: subject,
      ack_policy: AckPolicy.Explicit,
      ack_wait: nanos(options.ackWaitMs ?? DEFAULT_ACK_WAIT_MS),
      deliver_policy: options.deliverPolicy === "new" ? DeliverPolicy.New : DeliverPolicy.All,
      max_deliver: options.maxDeliver ?? -1,
    });
  }
}

/**
 * How long one pull waits for events. Pulls are bounded batches, one after the other, rather
 * than a subscription that is cut on close: every event the broker sent arrives and is either
 * handled or handed back, so closing takes at most this long.
 */
const PULL_EXPIRES_MS = 1000;

/** Reads one delivery, or says why it cannot be read. */
function read<E>(m: JsMsg, type: string): { delivery: Omit<Delivery<E>, "event">; event: E } | { info: DeliveryInfo; why: string } {
  const info: DeliveryInfo = {
    subject: m.subject,
    streamSequence: m.seq,
    deliveryCount: m.info.deliveryCount,
    msgId: header(m, "Nats-Msg-Id"),
    trace: {
      ...optional("traceparent", header(m, "traceparent")),
      ...optional("tracestate", header(m, "tracestate")),
    },
  };
  let event: E;
  try {
    event = m.json<E>();
  } catch (error) {
    return { info, why: (error as Error).message };
  }
  const found = (event as { type?: unknown } | null)?.type;
  if (found !== type) return { info, why: `type ${JSON.stringify(found)}, expected ${type}` };
  return {
    event,
    delivery: {
      info,
      ack: async () => {
        await m.ackAck();
      },
      // Both only speed things up: if the connection is gone, the ack wait brings it back.
      nak: (delayMs) => {
        try {
          m.nak(delayMs);
        } catch {
          // delivered again after the ack wait
        }
      },
      working: () => {
        try {
          m.working();
        } catch {
          // the ack wait may run out: a duplicate, never a loss
        }
      },
    },
  };
}

/** Opens the consumer (creating it if needed) and returns its deliveries. */
export async function openFeed<E>(spec: FeedSpec): Promise<Feed<E>> {
  const { js, stream, options } = spec;
  let consumer: Consumer;
  try {
    await ensureConsumer(spec);
    consumer = await js.consumers.get(stream, options.consumer);
  } catch (error) {
    throw fromBroker(error, spec.subject, spec.timeoutMs);
  }
  const batch = Math.max(1, options.batch ?? Math.max(4, (options.concurrency ?? 1) * 4));
  const report = options.onError ?? warn;
  let closing = false;
  let wake: (() => void) | undefined;

  async function* deliveries(): AsyncGenerator<Delivery<E>> {
    let failures = 0;
    while (!closing) {
      try {
        const messages = await consumer.fetch({ max_messages: batch, expires: PULL_EXPIRES_MS });
        for await (const m of messages) {
          const read_ = read<E>(m, spec.type);
          if ("why" in read_) {
            // Delivering it again cannot make it readable: it is taken off the consumer.
            m.term(`not a ${spec.type}`);
            report(
              new TimerServiceError(`event ${m.seq} on ${m.subject} is not a ${spec.type}: ${read_.why}`, undefined, {
                source: "service",
                subject: m.subject,
              }),
              read_.info,
            );
            continue;
          }
          yield { ...read_.delivery, event: read_.event };
        }
        failures = 0;
      } catch (error) {
        if (closing) break;
        // The broker away or restarting: pull again, a little later each time; the consumer
        // is durable, so nothing is missed meanwhile. Said once per outage.
        failures += 1;
        if (failures === 1) report(fromBroker(error, spec.subject, PULL_EXPIRES_MS), undefined);
        if (isApiError(error, CONSUMER_NOT_FOUND)) await ensureConsumer(spec).catch(() => undefined);
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, Math.min(100 * 2 ** failures, 2000));
          wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
      }
    }
  }
  return {
    consumer: options.consumer,
    close: async () => {
      closing = true;
      wake?.();
    },
    [Symbol.asyncIterator]: deliveries,
  };
}

function optional<K extends string>(key: K, value: string | undefined): { [P in K]?: string } {
  return (value === undefined ? {} : { [key]: value }) as { [P in K]?: string };
}

/** The span a handler runs in: `process timer.evt.due.<tenantId>`. */
export interface HandlerTrace {
  readonly spanName: string;
  readonly attributes: Record<string, string | number>;
}

/**
 * Runs `handler` on every delivery of `feed`, at most `concurrency` at once: acknowledged when
 * it resolved, delivered again after a delay when it threw.
 */
export function runHandler<E>(
  feed: Feed<E>,
  handler: (event: E, info: DeliveryInfo) => unknown,
  options: ConsumerOptions,
  trace: HandlerTrace,
): EventSubscription {
  const concurrency = Math.max(1, options.concurrency ?? 1);
  const keepAliveMs = Math.max(500, Math.floor((options.ackWaitMs ?? DEFAULT_ACK_WAIT_MS) / 2));
  const report = options.onError ?? warn;
  const running = new Set<Promise<void>>();
  let stopping = false;

  const settle = async (delivery: Delivery<E>): Promise<void> => {
    const keepAlive = setInterval(() => delivery.working(), keepAliveMs);
    let failed: unknown;
    let threw = false;
    try {
      const attributes = delivery.info.msgId ? { ...trace.attributes, "messaging.message.id": delivery.info.msgId } : trace.attributes;
      await withEventTrace(delivery.info.trace, trace.spanName, attributes, async () => {
        await handler(delivery.event, delivery.info);
      });
    } catch (error) {
      threw = true;
      failed = error;
    } finally {
      clearInterval(keepAlive);
    }
    if (threw) {
      delivery.nak(retryDelay(options, delivery.info.deliveryCount));
      report(failed, delivery.info);
      return;
    }
    try {
      await delivery.ack();
    } catch (error) {
      // The broker delivers it again after the ack wait: a duplicate, never a loss.
      report(error, delivery.info);
    }
  };

  const done = (async () => {
    try {
      for await (const delivery of feed) {
        if (stopping) {
          // Pulled but not begun: handed back at once, for another instance or the next start.
          delivery.nak(0);
          continue;
        }
        const task: Promise<void> = settle(delivery).finally(() => running.delete(task));
        running.add(task);
        if (running.size >= concurrency) await Promise.race(running);
      }
    } catch (error) {
      // The consumer went away or the connection closed for good: this subscription ends.
      report(error, undefined);
    }
    await Promise.all(running);
  })();

  return {
    consumer: feed.consumer,
    done,
    stop: async () => {
      stopping = true;
      await feed.close();
      await done;
    },
  };
}
