/**
 * `scheduleTimers`: many timers of the tenant sent as ScheduleTimers commands (§3), each of 1
 * to 1000 timers and at most `maxCommandBytes` long. The whole list is checked before anything
 * is sent, each timer by the rules of a ScheduleTimer and each key at most once, then cut into
 * as few messages as those two bounds allow, in the list's order.
 */
import type { CommandReceipt } from "./client.js";
import { envelope } from "./envelope.js";
import {
  TimerBadRequestError,
  TimerError,
  TimerNotFoundError,
  TimerPermissionError,
  TimerRejectedError,
  TimerServiceError,
  TimerUnavailableError,
} from "./errors.js";
import { checkMessageSize, checkServiceCallId, type CommandLimits } from "./rules.js";
import { quoted, utf8Bytes } from "./text.js";
import { prepareTimer, type ScheduleInput } from "./timer-input.js";

/** Most timers one ScheduleTimers may hold; a longer list is sent as several. */
export const MAX_TIMERS_PER_MESSAGE = 1000;

/** One ScheduleTimers to send: its envelope id (its `Nats-Msg-Id`) and its JSON text. */
export interface PlannedMessage {
  readonly id: string;
  readonly json: string;
  /** The position in the caller's list of its first timer. */
  readonly first: number;
  readonly count: number;
}

/** What the broker said when it stored one ScheduleTimers of a `scheduleTimers`. */
export interface ScheduleManyReceipt extends CommandReceipt {
  /** The position in the list of the message's first timer: it holds `first` to `first + count - 1`. */
  readonly first: number;
  readonly count: number;
}

/** What ends a ScheduleTimers' JSON after its last timer: the list, the payload, the envelope. */
const CLOSING = "]}}";

/**
 * The messages that carry `inputs`, or the reason the list is refused: the first timer that
 * breaks a rule, named by its position in the list (`timers[<i>]: …`, in the daemon's words for
 * a message that held it there).
 */
export function planScheduleTimers(
  tenantId: string,
  inputs: readonly ScheduleInput<unknown>[],
  limits: CommandLimits,
): { readonly messages: PlannedMessage[] } | { readonly reason: string } {
  if (inputs.length === 0) return { reason: "timers is empty: scheduleTimers needs at least one timer" };
  // Each timer's JSON text, checked; the messages are then put together from these texts.
  const texts: string[] = [];
  const sizes: number[] = [];
  const seen = new Set<string>();
  const empty = opening(tenantId).bytes + CLOSING.length;
  for (const [i, input] of inputs.entries()) {
    const at = (reason: string) => ({ reason: `timers[${i}]: ${reason}` });
    const timer = prepareTimer(input, limits);
    if (timer.unsendable) return at(timer.unsendable);
    const twice =
      checkServiceCallId(input.serviceCallId) === undefined && seen.has(input.serviceCallId)
        ? `serviceCallId ${quoted(input.serviceCallId)} is named twice: a ScheduleTimers holds each key at most once`
        : undefined;
    const refusal = twice ?? timer.refusal;
    if (refusal) return at(refusal);
    seen.add(input.serviceCallId);
    const text = JSON.stringify(timer.fields);
    const size = utf8Bytes(text);
    const alone = checkMessageSize(empty + size, limits);
    if (alone) return at(`${alone}, even with this timer alone`);
    texts.push(text);
    sizes.push(size);
  }
  const messages: PlannedMessage[] = [];
  let first = 0;
  while (first < texts.length) {
    const open = opening(tenantId);
    let bytes = open.bytes + CLOSING.length + (sizes[first] ?? 0);
    let end = first + 1;
    while (end < texts.length && end - first < MAX_TIMERS_PER_MESSAGE && bytes + 1 + (sizes[end] ?? 0) <= limits.maxCommandBytes) {
      bytes += 1 + (sizes[end] ?? 0);
      end += 1;
    }
    const json = open.text + texts.slice(first, end).join(",") + CLOSING;
    messages.push({ id: open.id, json, first, count: end - first });
    first = end;
  }
  return { messages };
}

/**
 * A new ScheduleTimers' JSON up to its first timer: the envelope (stamped now, a new id) and
 * the payload, written last in both, with its list of timers left open.
 */
function opening(tenantId: string): { readonly id: string; readonly text: string; readonly bytes: number } {
  const command = envelope("ScheduleTimers", tenantId, { tenantId, timers: [] });
  const json = JSON.stringify(command);
  if (!json.endsWith(`"timers":[${CLOSING}`)) throw new Error(`a ScheduleTimers envelope that does not end with its timers: ${json}`);
  const text = json.slice(0, -CLOSING.length);
  return { id: command.id, text, bytes: utf8Bytes(text) };
}

/**
 * Sends the messages one after the other, in order, each once the one before it was stored,
 * and stops at the first failure: its error then says which timers were stored before it.
 */
export async function sendPlanned(
  messages: readonly PlannedMessage[],
  publish: (message: PlannedMessage) => Promise<CommandReceipt>,
): Promise<ScheduleManyReceipt[]> {
  const receipts: ScheduleManyReceipt[] = [];
  for (const [k, message] of messages.entries()) {
    try {
      const receipt = await publish(message);
      receipts.push({ ...receipt, first: message.first, count: message.count });
    } catch (error) {
      if (!(error instanceof TimerError) || messages.length === 1) throw error;
      const last = message.first + message.count - 1;
      const before = message.first === 0 ? "nothing was sent before it" : `timers[0] to timers[${message.first - 1}] were stored`;
      const after = k === messages.length - 1 ? "" : `; timers[${last + 1}] on were not sent`;
      const reason = `message ${k + 1} of ${messages.length} (timers[${message.first}] to timers[${last}]): ${error.reason} (${before}${after})`;
      throw withReason(error, reason);
    }
  }
  return receipts;
}

/** `error` with a longer reason: the same class and fields, the original as its cause. */
function withReason(error: TimerError, reason: string): TimerError {
  const options = { source: error.source, cause: error, ...(error.subject === undefined ? {} : { subject: error.subject }) };
  if (error instanceof TimerUnavailableError) return new TimerUnavailableError(reason, error.retryAfterMs, error.code, options);
  if (error instanceof TimerPermissionError) return new TimerPermissionError(reason, options);
  if (error instanceof TimerRejectedError) return new TimerRejectedError(reason, options);
  if (error instanceof TimerBadRequestError) return new TimerBadRequestError(reason, options);
  if (error instanceof TimerNotFoundError) return new TimerNotFoundError(reason, options);
  return new TimerServiceError(reason, error.code, options);
}
