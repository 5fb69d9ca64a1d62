/**
 * A reminder service on timer-service: it schedules a reminder and a follow-up, cancels the
 * follow-up, and handles the reminder when it fires. Exits 0 once the reminder arrived, 1 if
 * it did not within a minute. NATS_URL and TENANT say where and for whom.
 */
import { connect } from "@nats-io/transport-node";
import { TimerClient, TimerError, type DueEvent } from "timer-service-client";

interface Reminder {
  readonly user: string;
  readonly text: string;
}

const nc = await connect({ servers: process.env.NATS_URL ?? "nats://127.0.0.1:4222" });
const timers = new TimerClient(nc, { tenantId: process.env.TENANT ?? "example" });
const run = `${Date.now()}`;

let fired!: (event: DueEvent<Reminder>) => void;
const reminderFired = new Promise<DueEvent<Reminder>>((resolve) => (fired = resolve));

// A durable consumer: after a restart, this service resumes where it stopped.
const subscription = await timers.onDue<Reminder>(
  async (event) => {
    // Events may come twice: handling one is keyed by its timer, so a repeat is harmless.
    if (event.payload.serviceCallId === `reminder-${run}`) fired(event);
  },
  { consumer: "example-reminders" },
);

const reminder = await timers.schedule<Reminder>({
  serviceCallId: `reminder-${run}`,
  dueAt: new Date(Date.now() + 1000),
  data: { user: "ada", text: "the meeting starts soon" },
  correlationId: `example-${run}`,
});
console.log(`scheduled reminder-${run} for ${reminder.dueAt} (command ${reminder.seq})`);

await timers.schedule({ serviceCallId: `follow-up-${run}`, dueAt: Date.now() + 3_600_000 });
const cancelled = await timers.cancel(`follow-up-${run}`);
console.log(`follow-up-${run}: ${cancelled.outcome}`);

try {
  await timers.schedule({ serviceCallId: "", dueAt: "tomorrow" });
} catch (error) {
  if (error instanceof TimerError) console.log(`refused before sending: ${error.reason}`);
}

const deadline = new Promise<undefined>((resolve) => setTimeout(resolve, 60_000, undefined).unref());
const event = await Promise.race([reminderFired, deadline]);
await subscription.stop();
await nc.drain();
if (!event) {
  console.error("the reminder did not arrive within a minute");
  process.exit(1);
}
const lateMs = Date.parse(event.payload.reachedAt) - Date.parse(event.payload.dueAt);
console.log(`reminder for ${event.payload.data?.user}: "${event.payload.data?.text}" (fired ${lateMs} ms after its dueAt)`);
