/**
 * The contract's rules for what a client sends (§3 commands, §6 requests), checked before
 * anything leaves the process and refused with the reason the daemon itself would give. The
 * daemon checks again: these only spare a round trip and a TimerCommandRejected.
 */
import { displayUtc, toInstant, type InstantInput } from "./instant.js";
import { parseExpireAfter } from "./expire-after.js";
import { shapeOf } from "./data-shape.js";
import { charCount, hasControl, quoted, utf8Bytes } from "./text.js";

/** The sizes the daemon holds a command to; its defaults (`max_command_bytes` and the rest). */
export interface CommandLimits {
  /** The whole message, in bytes (64 KiB). */
  readonly maxCommandBytes: number;
  /** A ScheduleTimer's `data`, in bytes of its JSON text (16 KiB). */
  readonly maxDataBytes: number;
  /** Arrays and objects open at once in `data` (64). */
  readonly maxDataDepth: number;
  /** Characters of the longest number in `data` (100). */
  readonly maxDataNumberChars: number;
}

export const DEFAULT_LIMITS: CommandLimits = {
  maxCommandBytes: 64 * 1024,
  maxDataBytes: 16 * 1024,
  maxDataDepth: 64,
  maxDataNumberChars: 100,
};

export const MAX_TENANT_ID_CHARS = 64;
export const MAX_SERVICE_CALL_ID_CHARS = 128;
export const MAX_CORRELATION_ID_CHARS = 256;
export const MAX_LIST_LIMIT = 1000;
export const MAX_FORECAST_MINUTES = 1440;

/** A reason the daemon would refuse with, or `undefined` when the value passes. */
export type Refusal = string | undefined;

export function checkTenantId(tenantId: string): Refusal {
  if (tenantId === "_") {
    return `tenantId "_" is reserved: its rejection subject receives the commands that name no valid tenant`;
  }
  if (tenantId.length === 0 || tenantId.length > MAX_TENANT_ID_CHARS || !/^[A-Za-z0-9_-]+$/.test(tenantId)) {
    return `tenantId ${quoted(tenantId)} must be 1–${MAX_TENANT_ID_CHARS} characters of A-Z, a-z, 0-9, '_' or '-'`;
  }
  return undefined;
}

function checkId(field: string, id: string, max: number): Refusal {
  const chars = charCount(id);
  if (chars === 0 || chars > max) return `${field} must be 1–${max} characters, got ${chars}`;
  if (hasControl(id)) return `${field} ${quoted(id)} contains a control character`;
  return undefined;
}

export function checkServiceCallId(id: string): Refusal {
  return checkId("serviceCallId", id, MAX_SERVICE_CALL_ID_CHARS);
}

export function checkCorrelationId(id: string): Refusal {
  return checkId("correlationId", id, MAX_CORRELATION_ID_CHARS);
}

/**
 * `data` as the JSON text it travels as, or why it has none (a BigInt, a cycle, a function):
 * such a command cannot even be sent, so this reason is the client's own.
 */
export function dataText(data: unknown): { json: string } | { reason: string } {
  let json: string | undefined;
  try {
    json = JSON.stringify(data);
  } catch (error) {
    return { reason: `data is not JSON: ${(error as Error).message}` };
  }
  return json === undefined ? { reason: `data is not JSON: a ${typeof data} has no JSON form` } : { json };
}

/** The daemon's checks of `data`'s JSON text: its bytes, its depth, its longest number. */
export function checkDataJson(json: string, limits: CommandLimits): Refusal {
  const bytes = utf8Bytes(json);
  if (bytes > limits.maxDataBytes) {
    return `data is ${bytes} bytes, more than the ${limits.maxDataBytes}-byte limit (max_data_bytes)`;
  }
  const shape = shapeOf(json);
  if (shape.depth > limits.maxDataDepth) {
    return `data nests ${shape.depth} arrays or objects deep, more than the ${limits.maxDataDepth} allowed (max_data_depth)`;
  }
  if (shape.longestNumber > limits.maxDataNumberChars) {
    return `data has a number of ${shape.longestNumber} characters, more than the ${limits.maxDataNumberChars} allowed (max_data_number_chars)`;
  }
  return undefined;
}

export function checkExpireAfter(text: string): Refusal {
  const parsed = parseExpireAfter(text);
  return typeof parsed === "number" ? undefined : parsed.reason;
}

export function checkMessageSize(bytes: number, limits: CommandLimits): Refusal {
  return bytes > limits.maxCommandBytes
    ? `message is ${bytes} bytes, more than the ${limits.maxCommandBytes}-byte limit`
    : undefined;
}

/** What `cancelMany` selects: a filter, or every pending timer with `all: true` (§3). */
export interface CancelFilter {
  readonly correlationId?: string;
  readonly dueFrom?: InstantInput;
  readonly dueTo?: InstantInput;
  readonly all?: boolean;
  /** Only `Scheduled`, said for clarity: it narrows nothing. */
  readonly state?: "Scheduled";
}

/** The filter as the wire carries it, or the daemon's reason for refusing it. */
export function cancelFilterFields(
  filter: CancelFilter,
): { fields: Record<string, string | boolean> } | { reason: string } {
  const given = filter.correlationId !== undefined || filter.dueFrom !== undefined || filter.dueTo !== undefined;
  if (!filter.all && !given) {
    return { reason: "give correlationId, dueFrom or dueTo, or all: true to cancel every pending timer of the tenant" };
  }
  if (filter.all && given) {
    return { reason: "all: true cancels every pending timer; give it without correlationId, dueFrom or dueTo" };
  }
  const fields: Record<string, string | boolean> = {};
  if (filter.correlationId !== undefined) {
    const refusal = checkCorrelationId(filter.correlationId);
    if (refusal) return { reason: refusal };
    fields.correlationId = filter.correlationId;
  }
  const range: Record<string, number> = {};
  for (const field of ["dueFrom", "dueTo"] as const) {
    const value = filter[field];
    if (value === undefined) continue;
    const instant = toInstant(field, value);
    if ("reason" in instant) return instant;
    fields[field] = instant.text;
    range[field] = instant.ms;
  }
  if (range.dueFrom !== undefined && range.dueTo !== undefined && range.dueFrom >= range.dueTo) {
    return {
      reason: `dueFrom ${displayUtc(range.dueFrom)} is not before dueTo ${displayUtc(range.dueTo)}: the range holds no timer`,
    };
  }
  if (filter.all) fields.all = true;
  if (filter.state !== undefined) fields.state = filter.state;
  return { fields };
}

export function checkListLimit(limit: number): Refusal {
  return Number.isInteger(limit) && limit >= 1 && limit <= MAX_LIST_LIMIT
    ? undefined
    : `limit ${limit} is outside 1–${MAX_LIST_LIMIT}`;
}

export function checkForecastMinutes(minutes: number): Refusal {
  return Number.isInteger(minutes) && minutes >= 1 && minutes <= MAX_FORECAST_MINUTES
    ? undefined
    : `forecastMinutes must be a whole number from 1 to ${MAX_FORECAST_MINUTES}, got ${minutes}`;
}
