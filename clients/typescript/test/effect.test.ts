/**
 * The Effect API against the real daemon: every operation of `TimerService`, its tagged
 * errors, the events as Streams and as a consuming handler (acknowledged on success, again
 * after a failure), trace context from Effect's own spans, and a service built on an
 * EventBusPort swapping its in-process timers for the daemon by a layer.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { NatsConnection } from "@nats-io/nats-core";
import { Chunk, Context, Duration, Effect, Fiber, Layer, Queue, Ref, Schema, Stream } from "effect";
import {
  DueTimeReached,
  DueTimeReachedPayload,
  ScheduleTimer,
  TimerCommandRejected,
  TimerExpired,
  TimerService,
  type TimerClientError,
} from "../src/effect/index.js";
import { eventually } from "./support/wait.js";
import { missing, startWorld, tenant, type World } from "./support/world.js";

describe("the Effect API", { skip: missing() }, () => {
  let world: World;
  let nc: NatsConnection;
  const quotaTenant = `effect-quota-${process.pid}`;

  before(async () => {
    world = await startWorld({ daemonEnv: { TIMER_QUOTAS_TENANTS: `${quotaTenant}:max_pending=1` } });
    nc = await world.connect();
  });
  after(async () => {
    await world?.stop();
  });

  const run = <A, E>(tenantId: string, program: Effect.Effect<A, E, TimerService>): Promise<A> =>
    Effect.runPromise(Effect.provide(program, TimerService.fromConnection(nc, { tenantId })).pipe(Effect.timeout("60 seconds")));

  it("schedules, reads, lists, counts and cancels", async () => {
    await run(
      tenant("effect-ops"),
      Effect.gen(function* () {
        const timers = yield* TimerService;
        const inAnHour = Date.now() + 3_600_000;
        const receipt = yield* timers.schedule({ serviceCallId: "e-1", dueAt: new Date(inAnHour), data: { n: 1 }, correlationId: "grp" });
        assert.ok(receipt.seq > 0);
        yield* timers.schedule({ serviceCallId: "e-2", dueAt: inAnHour + 1000, correlationId: "grp" });
        yield* timers.schedule({ serviceCallId: "e-3", dueAt: inAnHour + 2000 });
        yield* Effect.promise(() => eventually("three stored", () => Effect.runPromise(Effect.map(Effect.either(timers.get("e-3")), (e) => e._tag === "Right"))));
        const one = yield* timers.get<{ n: number }>("e-1");
        assert.deepEqual(one.data, { n: 1 });
        const listed = yield* Stream.runCollect(timers.list({ pageSize: 1 }));
        assert.deepEqual(Chunk.toArray(listed).map((t) => t.serviceCallId), ["e-1", "e-2", "e-3"]);
        const stats = yield* timers.stats({ forecastMinutes: 2 });
        assert.equal(stats.scheduled, 3);
        assert.equal(stats.forecast?.length, 2);
        assert.deepEqual(yield* timers.cancelMany({ correlationId: "grp" }, { dryRun: true }), { count: 2, dryRun: true });
        assert.equal((yield* timers.cancel("e-1")).outcome, "cancelled");
        assert.deepEqual(yield* timers.cancelMany({ correlationId: "grp" }), { count: 1, dryRun: false });
        yield* timers.cancelCommand("e-3");
        yield* Effect.promise(() =>
          eventually("e-3 cancelled from the stream", () => Effect.runPromise(Effect.map(timers.get("e-3"), (t) => t.state === "Cancelled"))),
        );
      }),
    );
  });

  it("schedules many timers at once, and refuses a bad list whole", async () => {
    await run(
      tenant("effect-many"),
      Effect.gen(function* () {
        const timers = yield* TimerService;
        const inAnHour = Date.now() + 3_600_000;
        const inputs = Array.from({ length: 1500 }, (_, i) => ({ serviceCallId: `m-${i}`, dueAt: inAnHour + i }));
        const receipts = yield* timers.scheduleTimers(inputs);
        assert.deepEqual(receipts.map((r) => [r.first, r.count]), [[0, 1000], [1000, 500]]);
        yield* Effect.promise(() =>
          eventually("1500 stored", () => Effect.runPromise(Effect.map(timers.stats(), (s) => s.scheduled === 1500))),
        );
        assert.equal((yield* timers.get("m-1499")).dueAt, new Date(inAnHour + 1499).toISOString());
        const refused = yield* Effect.flip(timers.scheduleTimers([{ serviceCallId: "x", dueAt: inAnHour }, { serviceCallId: "x", dueAt: inAnHour }]));
        assert.equal(refused._tag, "TimerRejected");
        assert.match(refused.reason, /^timers\[1\]: serviceCallId "x" is named twice/);
      }),
    );
  });

  it("fails with tagged errors", async () => {
    const tags = await run(
      tenant("effect-errors"),
      Effect.gen(function* () {
        const timers = yield* TimerService;
        const missingOne = yield* Effect.flip(timers.get("nothing"));
        const rejected = yield* Effect.flip(timers.schedule({ serviceCallId: "x", dueAt: "2026-11-22T10:00:00" }));
        const bad = yield* Effect.flip(Stream.runCollect(timers.list({ pageSize: 0 })));
        const handled = yield* timers.get("nothing").pipe(
          Effect.as("found"),
          Effect.catchTag("TimerNotFound", (e) => Effect.succeed(`not found: ${e.reason}`)),
        );
        assert.match(handled, /^not found: no timer "nothing"/);
        assert.match(rejected.reason, /is not an RFC 3339 timestamp with a zone/);
        return [missingOne._tag, rejected._tag, bad._tag];
      }),
    );
    assert.deepEqual(tags, ["TimerNotFound", "TimerRejected", "TimerBadRequest"]);
  });

  it("streams decoded events to settle, and a consuming handler retries a failure", async () => {
    await run(
      tenant("effect-events"),
      Effect.gen(function* () {
        const timers = yield* TimerService;
        yield* timers.schedule({ serviceCallId: "s-1", dueAt: Date.now(), data: ["a"] });
        const [delivery] = Chunk.toArray(yield* Stream.runCollect(Stream.take(timers.dueEvents({ consumer: "effect-stream" }), 1)));
        assert.ok(delivery);
        assert.ok(delivery.event instanceof DueTimeReached);
        assert.ok(delivery.event.payload instanceof DueTimeReachedPayload);
        assert.deepEqual(delivery.event.payload.data, ["a"]);
        yield* delivery.ack;

        const attempts = yield* Queue.unbounded<number>();
        const count = yield* Ref.make(0);
        const consumer = yield* Effect.fork(
          timers.consumeDue({ consumer: "effect-consume", retryDelayMs: 100 }, (event) =>
            Effect.gen(function* () {
              const n = yield* Ref.updateAndGet(count, (c) => c + 1);
              yield* Queue.offer(attempts, n);
              if (n === 1) return yield* Effect.fail(`first attempt at ${event.payload.serviceCallId} fails`);
            }),
          ),
        );
        const seen = yield* Effect.forEach([1, 2], () => Queue.take(attempts)).pipe(Effect.timeout(Duration.seconds(20)));
        assert.deepEqual(seen, [1, 2], "delivered again after the failure, then acknowledged");
        yield* Fiber.interrupt(consumer);
      }),
    );
  });

  it("streams TimerExpired and TimerCommandRejected", async () => {
    await run(
      tenant("effect-expired"),
      Effect.gen(function* () {
        const timers = yield* TimerService;
        yield* timers.schedule({ serviceCallId: "late", dueAt: Date.now() - 10_000, expireAfter: "PT1S" });
        const [expired] = Chunk.toArray(yield* Stream.runCollect(Stream.take(timers.expiredEvents({ consumer: "effect-expired" }), 1)));
        assert.ok(expired?.event instanceof TimerExpired);
        yield* expired.ack;
      }),
    );
    await run(
      quotaTenant,
      Effect.gen(function* () {
        const timers = yield* TimerService;
        yield* timers.schedule({ serviceCallId: "one", dueAt: Date.now() + 3_600_000 });
        yield* timers.schedule({ serviceCallId: "two", dueAt: Date.now() + 3_600_000 });
        const [rejected] = Chunk.toArray(yield* Stream.runCollect(Stream.take(timers.rejectedEvents({ consumer: "effect-rejected" }), 1)));
        assert.ok(rejected?.event instanceof TimerCommandRejected);
        assert.equal(rejected.event.payload.reason, `quota exceeded: max_pending 1 for tenant ${quotaTenant}`);
        yield* rejected.ack;
      }),
    );
  });

  it("runs handlers on TimerExpired and TimerCommandRejected", async () => {
    const expiredTenant = tenant("effect-consume-expired");
    await run(
      expiredTenant,
      Effect.gen(function* () {
        const timers = yield* TimerService;
        const seen = yield* Queue.unbounded<TimerExpired>();
        const consumer = yield* Effect.fork(timers.consumeExpired({ consumer: "effect-consume-expired" }, (event) => Queue.offer(seen, event)));
        yield* timers.schedule({ serviceCallId: "late", dueAt: Date.now() - 5_000, expireAfter: "PT1S" });
        const event = yield* Queue.take(seen).pipe(Effect.timeout(Duration.seconds(20)));
        assert.equal(event.payload.serviceCallId, "late");
        yield* Fiber.interrupt(consumer);
      }),
    );
    await run(
      quotaTenant,
      Effect.gen(function* () {
        const timers = yield* TimerService;
        const seen = yield* Queue.unbounded<TimerCommandRejected>();
        const consumer = yield* Effect.fork(
          timers.consumeRejected({ consumer: "effect-consume-rejected" }, (event) => Queue.offer(seen, event)),
        );
        // Past the tenant's max_pending of 1, as the test before left it; its earlier
        // rejection comes first to a new consumer.
        yield* timers.schedule({ serviceCallId: "three", dueAt: Date.now() + 3_600_000 });
        const event = yield* Effect.repeat(Queue.take(seen), { until: (e) => e.payload.original.includes('"three"') }).pipe(
          Effect.timeout(Duration.seconds(20)),
        );
        assert.match(event.payload.original, /"three"/);
        yield* Fiber.interrupt(consumer);
      }),
    );
  });

  it("carries the Effect span's trace to the event, and runs the handler under it", async () => {
    await run(
      tenant("effect-trace"),
      Effect.gen(function* () {
        const timers = yield* TimerService;
        const traceId = yield* Effect.withSpan(
          Effect.gen(function* () {
            yield* timers.schedule({ serviceCallId: "traced", dueAt: Date.now() });
            return (yield* Effect.currentSpan).traceId;
          }),
          "schedule a reminder",
        );
        const parents = yield* Queue.unbounded<string>();
        const consumer = yield* Effect.fork(
          timers.consumeDue({ consumer: "effect-trace" }, () =>
            Effect.flatMap(Effect.currentParentSpan, (span) => Queue.offer(parents, span.traceId)),
          ),
        );
        const seen = yield* Queue.take(parents).pipe(Effect.timeout(Duration.seconds(20)));
        assert.equal(seen, traceId);
        assert.equal((yield* timers.get("traced")).traceId, traceId);
        yield* Fiber.interrupt(consumer);
      }),
    );
  });

  it("lets a service on an EventBusPort swap in-process timers for the daemon by a layer", async () => {
    /** The service's bus: where DueTimeReached events reach its handlers. */
    class EventBusPort extends Context.Tag("EventBusPort")<EventBusPort, { readonly publish: (event: DueTimeReached) => Effect.Effect<void> }>() {}
    /** What the service's timer module offered it. */
    class Timers extends Context.Tag("Timers")<Timers, { readonly schedule: (command: ScheduleTimer) => Effect.Effect<void, TimerClientError> }>() {}

    const tenantId = tenant("effect-port");
    /** The module it had: timers in this process, lost on a restart. */
    const InProcessTimers = Layer.effect(
      Timers,
      Effect.map(EventBusPort, (bus) => ({
        schedule: (command: ScheduleTimer) =>
          Effect.forkDaemon(
            Effect.sleep(Duration.millis(Math.max(0, Date.parse(command.payload.dueAt) - Date.now()))).pipe(
              Effect.zipRight(
                Effect.suspend(() =>
                  bus.publish(
                    DueTimeReached.make({
                      id: command.id,
                      type: "DueTimeReached",
                      tenantId: command.tenantId,
                      timestampMs: Date.now(),
                      correlationId: command.payload.correlationId ?? null,
                      causationId: null,
                      aggregateId: command.payload.serviceCallId,
                      payload: DueTimeReachedPayload.make({
                        tenantId: command.tenantId,
                        serviceCallId: command.payload.serviceCallId,
                        dueAt: new Date(Date.parse(command.payload.dueAt)).toISOString(),
                        reachedAt: new Date().toISOString(),
                        data: command.payload.data,
                      }),
                    }),
                  ),
                ),
              ),
            ),
          ).pipe(Effect.asVoid),
      })),
    );
    /** The daemon instead: schedules go to it, its events are forwarded to the bus. */
    const DaemonTimers = Layer.scoped(
      Timers,
      Effect.gen(function* () {
        const timers = yield* TimerService;
        const bus = yield* EventBusPort;
        yield* Effect.forkScoped(timers.consumeDue({ consumer: "effect-port" }, bus.publish));
        return {
          schedule: (command: ScheduleTimer) =>
            Effect.asVoid(
              timers.schedule({
                serviceCallId: command.payload.serviceCallId,
                dueAt: command.payload.dueAt,
                data: command.payload.data,
                ...(command.payload.correlationId ? { correlationId: command.payload.correlationId } : {}),
              }),
            ),
        };
      }),
    ).pipe(Layer.provide(TimerService.fromConnection(nc, { tenantId })));

    /** The service itself: it knows only its ports. */
    const remindInAMoment = (received: Queue.Queue<DueTimeReached>) =>
      Effect.gen(function* () {
        const timers = yield* Timers;
        const command = yield* Schema.decodeUnknown(ScheduleTimer)({
          id: crypto.randomUUID(),
          type: "ScheduleTimer",
          tenantId,
          timestampMs: Date.now(),
          payload: { tenantId, serviceCallId: "remind-1", dueAt: new Date(Date.now() + 300).toISOString(), data: { to: "ada" } },
        });
        yield* timers.schedule(command);
        return yield* Queue.take(received).pipe(Effect.timeout(Duration.seconds(20)));
      });

    for (const timersLayer of [InProcessTimers, DaemonTimers]) {
      const event = await Effect.runPromise(
        Effect.scoped(
          Effect.gen(function* () {
            const received = yield* Queue.unbounded<DueTimeReached>();
            const bus = Layer.succeed(EventBusPort, { publish: (event: DueTimeReached) => Queue.offer(received, event).pipe(Effect.asVoid) });
            return yield* Effect.provide(remindInAMoment(received), Layer.provideMerge(timersLayer, bus));
          }),
        ),
      );
      assert.equal(event.payload.serviceCallId, "remind-1");
      assert.deepEqual(event.payload.data, { to: "ada" });
    }
  });
});
