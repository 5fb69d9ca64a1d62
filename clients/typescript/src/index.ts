/**
 * timer-service-client: schedule, cancel and query durable timers of one tenant over NATS
 * JetStream, and consume their events (docs/CONTRACT.md). The Effect API is in
 * `timer-service-client/effect`.
 *
 * Layout: `client` (the TimerClient), `schedule-many` (its `scheduleTimers`: a list cut into
 * ScheduleTimers messages), `consumers` (durable event consumers), `api` (requests and error
 * replies), `rules` with `timer-input`, `instant`, `expire-after`, `data-shape` and `text` (the
 * contract's checks, with the daemon's reasons), `errors`, `trace` (W3C trace context),
 * `subjects`, `envelope`, and `generated/` (types from schema/).
 */
export { TimerClient } from "./client.js";
export type {
  CallOptions,
  CommandOptions,
  CommandReceipt,
  ListFilter,
  ListPageRequest,
  ScheduleInput,
  ScheduleReceipt,
  TimerClientOptions,
} from "./client.js";
export { MAX_TIMERS_PER_MESSAGE } from "./schedule-many.js";
export type { ScheduleManyReceipt } from "./schedule-many.js";
export type { ConsumerOptions, Delivery, DeliveryInfo, EventSubscription, Feed } from "./consumers.js";
export {
  TimerBadRequestError,
  TimerError,
  TimerNotFoundError,
  TimerPermissionError,
  TimerRejectedError,
  TimerServiceError,
  TimerUnavailableError,
} from "./errors.js";
export type { ErrorSource } from "./errors.js";
export type { DueEvent, ExpiredEvent, RejectedEvent, Timer } from "./events.js";
export { DEFAULT_LIMITS } from "./rules.js";
export type { CancelFilter, CommandLimits } from "./rules.js";
export { DEFAULT_EVENT_STREAM, DEFAULT_PREFIXES, Subjects } from "./subjects.js";
export type { EventKind, SubjectPrefixes, Verb } from "./subjects.js";
export type { InstantInput } from "./instant.js";
export type { MessageEnvelope } from "./envelope.js";
export type { TraceHeaders } from "./trace.js";
export type * from "./generated/index.js";
