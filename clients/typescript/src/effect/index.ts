/**
 * timer-service-client/effect: the client as an Effect service (`TimerService`, a
 * `Context.Tag` with layers), Effect `Schema`s of the messages, tagged errors, and the events
 * as `Stream`s. Built on the same core as the Promise API.
 */
export { NatsConnectionTag, TimerService, makeTimerService } from "./service.js";
export type { TimerDelivery, TimerServiceShape } from "./service.js";
export {
  TimerBadRequest,
  TimerNotFound,
  TimerPermissionDenied,
  TimerRejected,
  TimerServiceFailure,
  TimerUnavailable,
  tagged,
} from "./errors.js";
export type { TimerClientError } from "./errors.js";
export * from "./schemas.js";
