/**
 * `expireAfter` (§3): how late a timer may still fire, an ISO 8601 duration of whole days,
 * hours, minutes and seconds from 1 second to 3650 days. Read as the daemon reads it, with its
 * reasons, so the client refuses what the daemon would.
 */
import { quoted } from "./text.js";

export const MAX_EXPIRE_AFTER_DAYS = 3650;

const DATE_UNITS: ReadonlyArray<readonly [string, number]> = [["D", 86_400_000]];
const TIME_UNITS: ReadonlyArray<readonly [string, number]> = [
  ["H", 3_600_000],
  ["M", 60_000],
  ["S", 1_000],
];

/** Its length in milliseconds, or the daemon's reason for refusing it. */
export function parseExpireAfter(text: string): number | { reason: string } {
  const refuse = (why: string) => ({
    reason:
      `expireAfter ${quoted(text)} ${why}: expected an ISO 8601 duration of days, hours, ` +
      `minutes and seconds such as "PT15M", "PT1H30M" or "P1DT12H"`,
  });
  if (!text.startsWith("P")) return refuse("does not start with P");
  const rest = text.slice(1);
  const t = rest.indexOf("T");
  let date = rest;
  let time = "";
  if (t >= 0) {
    date = rest.slice(0, t);
    time = rest.slice(t + 1);
    if (time === "") return refuse("has T and no time after it");
  }
  let total = 0;
  let any = false;
  for (const [part, units] of [
    [date, DATE_UNITS],
    [time, TIME_UNITS],
  ] as const) {
    let left = part;
    let allowed = units;
    while (left !== "") {
      const end = left.search(/[^0-9]/);
      const number = end < 0 ? left : left.slice(0, end);
      const unit = end < 0 ? undefined : [...left.slice(end)][0];
      if (unit === undefined) return refuse("has a number without a unit");
      const at = allowed.findIndex(([u]) => u === unit);
      if (at < 0) return refuse(`has the unit '${unit}' out of place or unknown`);
      if (number === "" || number.length > 12) {
        return refuse(`has ${quoted(number)} before '${unit}'`);
      }
      total += Number(number) * (allowed[at]?.[1] ?? 0);
      any = true;
      allowed = allowed.slice(at + 1);
      left = left.slice(number.length + unit.length);
    }
  }
  if (!any) return refuse("names no amount");
  if (total < 1_000) return refuse("is shorter than a second");
  if (total > MAX_EXPIRE_AFTER_DAYS * 86_400_000) {
    return { reason: `expireAfter ${quoted(text)} is longer than ${MAX_EXPIRE_AFTER_DAYS} days` };
  }
  return total;
}
