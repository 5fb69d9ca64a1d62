/**
 * Instants as the contract writes them (§3): a client may write RFC 3339 with a zone, the
 * daemon stores UTC with millisecond precision, rounding a finer instant *up* so a timer never
 * fires before the instant the client named. The parser follows the daemon's own (chrono's
 * RFC 3339 reader) so that a string the client accepts is one the daemon accepts.
 */

import { quoted } from "./text.js";

const MS_PER_DAY = 86_400_000;
/** 0001-01-01T00:00:00.000Z and 9999-12-31T23:59:59.999Z: the years the daemon can store. */
export const LOWEST_INSTANT_MS = -62_135_596_800_000;
export const HIGHEST_INSTANT_MS = 253_402_300_799_999;

/** Why chrono refused a text, in its own words (the daemon quotes them). */
type ParseFailure =
  | "input is out of range"
  | "input contains invalid characters"
  | "premature end of input"
  | "trailing input";

const OUT_OF_RANGE: ParseFailure = "input is out of range";
const INVALID: ParseFailure = "input contains invalid characters";
const TOO_SHORT: ParseFailure = "premature end of input";
const TOO_LONG: ParseFailure = "trailing input";

/** Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's `days_from_civil`). */
function daysFromCivil(year: number, month: number, day: number): number {
  const y = month <= 2 ? year - 1 : year;
  const era = Math.floor(y / 400);
  const yoe = y - era * 400;
  const mp = (month + 9) % 12;
  const doy = Math.floor((153 * mp + 2) / 5) + day - 1;
  const doe = yoe * 365 + Math.floor(yoe / 4) - Math.floor(yoe / 100) + doy;
  return era * 146_097 + doe - 719_468;
}

function daysInMonth(year: number, month: number): number {
  if (month === 2) {
    const leap = (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;
    return leap ? 29 : 28;
  }
  return [4, 6, 9, 11].includes(month) ? 30 : 31;
}

const isDigit = (c: string | undefined): boolean => c !== undefined && c >= "0" && c <= "9";

/**
 * Milliseconds since the epoch of an RFC 3339 text, rounded up to the millisecond, or why it is
 * not one (chrono's `parse_from_rfc3339`: `T`, `t` or a space between date and time, any number
 * of fraction digits, `Z`, `z` or `±HH:MM`, a leap second 60).
 */
function parseRfc3339(text: string): number | ParseFailure {
  if (text.length < 19) return TOO_SHORT;
  const digits = (from: number, count: number): number | undefined => {
    let value = 0;
    for (let i = from; i < from + count; i++) {
      if (!isDigit(text[i])) return undefined;
      value = value * 10 + Number(text[i]);
    }
    return value;
  };
  const year = digits(0, 4);
  if (year === undefined || text[4] !== "-") return INVALID;
  const month = digits(5, 2);
  if (month === undefined || text[7] !== "-") return INVALID;
  const day = digits(8, 2);
  if (day === undefined) return INVALID;
  if (month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month)) return OUT_OF_RANGE;
  if (!["T", "t", " "].includes(text[10] ?? "")) return INVALID;
  const hour = digits(11, 2);
  if (hour === undefined || text[13] !== ":") return INVALID;
  const minute = digits(14, 2);
  if (minute === undefined || text[16] !== ":") return INVALID;
  let second = digits(17, 2);
  if (second === undefined) return INVALID;
  let leap = 0;
  if (second === 60) {
    second = 59;
    leap = 1_000_000_000;
  }
  let at = 19;
  let nanos = 0;
  if (text[at] === ".") {
    at += 1;
    const start = at;
    while (isDigit(text[at])) at += 1;
    if (at === start) return text.length === start ? TOO_SHORT : INVALID;
    const fraction = text.slice(start, Math.min(at, start + 9)).padEnd(9, "0");
    nanos = Number(fraction);
  }
  nanos += leap;
  if (hour > 23 || minute > 59 || second > 59 || (nanos >= 1_000_000_000 && second !== 59)) {
    return OUT_OF_RANGE;
  }
  let offsetMinutes = 0;
  const zone = text[at];
  if (zone === "Z" || zone === "z") {
    at += 1;
  } else {
    let sign: number;
    if (zone === "+") sign = 1;
    else if (zone === "-" || zone === "\u2212") sign = -1;
    else return zone === undefined ? TOO_SHORT : INVALID;
    at += 1;
    if (text.length < at + 2) return TOO_SHORT;
    const hours = digits(at, 2);
    if (hours === undefined) return INVALID;
    at += 2;
    if (text[at] !== ":") return text[at] === undefined ? TOO_SHORT : INVALID;
    at += 1;
    if (text.length < at + 2) return TOO_SHORT;
    const minutes = digits(at, 2);
    if (minutes === undefined || !/[0-5]/.test(text[at] ?? "")) return INVALID;
    at += 2;
    offsetMinutes = sign * (hours * 60 + minutes);
  }
  if (at !== text.length) return TOO_LONG;
  if (Math.abs(offsetMinutes) >= 24 * 60) return OUT_OF_RANGE;
  const wholeMs =
    daysFromCivil(year, month, day) * MS_PER_DAY +
    ((hour * 60 + minute) * 60 + second) * 1000 -
    offsetMinutes * 60_000;
  // Never early: a fraction finer than a millisecond goes up to the next one.
  return wholeMs + Math.ceil(nanos / 1_000_000);
}

/**
 * A client instant (`dueAt`, `dueFrom`, `dueTo`) as milliseconds since the epoch, or the
 * daemon's reason for refusing it, naming `field`.
 */
export function parseClientInstant(field: string, text: string): number | { reason: string } {
  const parsed = parseRfc3339(text);
  const shown = quoted(text);
  if (typeof parsed === "string") {
    return {
      reason: `${field} ${shown} is not an RFC 3339 timestamp with a zone (Z or ±HH:MM): ${parsed}`,
    };
  }
  if (parsed < LOWEST_INSTANT_MS || parsed > HIGHEST_INSTANT_MS) {
    return { reason: `${field} ${shown} is outside the years 0001–9999 once converted to UTC` };
  }
  return parsed;
}

/** `YYYY-MM-DDTHH:MM:SS.sssZ`, the one format the daemon writes. */
export function formatUtc(ms: number): string {
  return new Date(ms).toISOString();
}

/** An instant as chrono displays a `DateTime<Utc>` (`2026-11-22 10:00:00.500 UTC`). */
export function displayUtc(ms: number): string {
  const iso = formatUtc(ms);
  const fraction = iso.slice(20, 23);
  return `${iso.slice(0, 10)} ${iso.slice(11, 19)}${fraction === "000" ? "" : `.${fraction}`} UTC`;
}

/** What a caller may pass as an instant: a `Date`, RFC 3339 text, or epoch milliseconds. */
export type InstantInput = Date | string | number;

/**
 * An instant as the wire text and its milliseconds, or why it cannot be sent. Text is kept as
 * the caller wrote it (the daemon rounds it); a `Date` or a number is written in UTC, a
 * fraction of a millisecond rounded up.
 */
export function toInstant(
  field: string,
  value: InstantInput,
): { text: string; ms: number } | { reason: string } {
  if (typeof value === "string") {
    const ms = parseClientInstant(field, value);
    return typeof ms === "number" ? { text: value, ms } : ms;
  }
  const raw = value instanceof Date ? value.getTime() : value;
  if (typeof raw !== "number" || !Number.isFinite(raw)) {
    return { reason: `${field} is not a valid instant: ${String(value)}` };
  }
  const ms = Math.ceil(raw);
  if (ms < LOWEST_INSTANT_MS || ms > HIGHEST_INSTANT_MS) {
    return { reason: `${field} ${ms} ms is outside the years 0001–9999` };
  }
  return { text: formatUtc(ms), ms };
}
