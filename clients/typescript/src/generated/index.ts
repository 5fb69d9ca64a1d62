// Generated from schema/*.json by scripts/generate-types.mjs (json-schema-to-typescript).
// Do not edit: `npm run generate` writes it again, `npm run check:generated` finds drift.
export type { ApiCancelManyReply } from "./api-cancel-many-reply.js";
export type { CorrelationId, ClientInstant, CancellableState, ApiCancelManyRequest } from "./api-cancel-many-request.js";
export type { CancelOutcome, UtcInstant, Data, ServiceCallId, TimerState, TenantId, ApiCancelReply, TimerView } from "./api-cancel-reply.js";
export type { ApiCancelRequest } from "./api-cancel-request.js";
export type { ApiErrorReply } from "./api-error-reply.js";
export type { ApiGetReply } from "./api-get-reply.js";
export type { ApiGetRequest } from "./api-get-request.js";
export type { ApiListReply } from "./api-list-reply.js";
export type { ApiListRequest } from "./api-list-request.js";
export type { ApiStatsReply, ForecastMinute } from "./api-stats-reply.js";
export type { ApiStatsRequest } from "./api-stats-request.js";
export type { CancelTimer, CancelTimerPayload } from "./cancel-timer.js";
export type { CancelTimers, CancelTimersPayload } from "./cancel-timers.js";
export type { DueTimeReached, DueTimeReachedPayload } from "./due-time-reached.js";
export type { ExpireAfter, ScheduleTimer, ScheduleTimerPayload } from "./schedule-timer.js";
export type { ScheduleTimers, ScheduleTimersPayload, TimerSpec } from "./schedule-timers.js";
export type { TimerCommandRejected, TimerCommandRejectedPayload } from "./timer-command-rejected.js";
export type { TimerExpired, TimerExpiredPayload } from "./timer-expired.js";
