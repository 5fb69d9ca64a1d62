/**
 * The contract's checks without a daemon: ids, instants, `expireAfter`, `data`, filters, and
 * the error replies read as typed errors. (The daemon's own reasons are compared with these
 * in conformance.test.ts.)
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { headers, type Msg } from "@nats-io/nats-core";
import { errorOfReply } from "../../src/api.js";
import { shapeOf } from "../../src/data-shape.js";
import { uuidv7 } from "../../src/envelope.js";
import { parseExpireAfter } from "../../src/expire-after.js";
import { displayUtc, formatUtc, parseClientInstant, toInstant } from "../../src/instant.js";
import {
  DEFAULT_LIMITS,
  cancelFilterFields,
  checkDataJson,
  checkForecastMinutes,
  checkListLimit,
  checkServiceCallId,
  checkTenantId,
  dataText,
} from "../../src/rules.js";
import { Subjects } from "../../src/subjects.js";
import { quoted } from "../../src/text.js";
import {
  TimerBadRequestError,
  TimerNotFoundError,
  TimerServiceError,
  TimerUnavailableError,
} from "../../src/index.js";
import { parseTraceparent } from "../../src/trace.js";

describe("ids", () => {
  it("takes tenant ids of 1 to 64 of [A-Za-z0-9_-], not _ alone", () => {
    for (const ok of ["acme_01-x", "__", "_a", "a".repeat(64)]) assert.equal(checkTenantId(ok), undefined, ok);
    for (const bad of ["", "a".repeat(65), "a.b", "ä"]) {
      assert.match(checkTenantId(bad) ?? "", /must be 1–64 characters of A-Z, a-z, 0-9, '_' or '-'$/, bad);
    }
    assert.match(checkTenantId("_") ?? "", /^tenantId "_" is reserved/);
  });

  it("counts a service call id in characters and refuses control characters", () => {
    assert.equal(checkServiceCallId("x".repeat(128)), undefined);
    assert.equal(checkServiceCallId("🙂".repeat(128)), undefined, "an emoji is one character");
    assert.equal(checkServiceCallId(""), "serviceCallId must be 1–128 characters, got 0");
    assert.equal(checkServiceCallId("x".repeat(129)), "serviceCallId must be 1–128 characters, got 129");
    assert.equal(checkServiceCallId("a\nb"), 'serviceCallId "a\\nb" contains a control character');
    assert.equal(checkServiceCallId("a\u0085b"), 'serviceCallId "a\\u{85}b" contains a control character');
  });

  it("quotes as the daemon does", () => {
    assert.equal(quoted('a"b\\c\t\0\u001b'), '"a\\"b\\\\c\\t\\0\\u{1b}"');
  });
});

describe("instants", () => {
  it("rounds a finer instant up to the next millisecond, never early", () => {
    const cases: Array<[string, string]> = [
      ["2026-11-22T09:30:13.023999Z", "2026-11-22T09:30:13.024Z"],
      ["2026-11-22T09:30:13.023000001Z", "2026-11-22T09:30:13.024Z"],
      ["2026-11-22T09:30:13.023000Z", "2026-11-22T09:30:13.023Z"],
      ["2026-11-22T09:30:13.9995Z", "2026-11-22T09:30:14.000Z"],
      ["2026-12-31T23:59:59.9999+00:00", "2027-01-01T00:00:00.000Z"],
      ["2026-11-22T10:00:00.123+01:00", "2026-11-22T09:00:00.123Z"],
      ["2026-11-22 10:00:00z", "2026-11-22T10:00:00.000Z"],
      ["2016-12-31T23:59:60Z", "2017-01-01T00:00:00.000Z"],
    ];
    for (const [given, stored] of cases) {
      const ms = parseClientInstant("dueAt", given);
      assert.equal(typeof ms, "number", given);
      assert.equal(formatUtc(ms as number), stored, given);
    }
  });

  it("refuses what the daemon refuses, with its reason", () => {
    const reason = (text: string) => (parseClientInstant("dueAt", text) as { reason: string }).reason;
    assert.equal(
      reason("2026-11-22T10:00:00"),
      'dueAt "2026-11-22T10:00:00" is not an RFC 3339 timestamp with a zone (Z or ±HH:MM): premature end of input',
    );
    assert.match(reason("tomorrow"), /premature end of input$/);
    assert.match(reason("2026-13-01T00:00:00Z"), /input is out of range$/);
    assert.match(reason("2026-02-30T00:00:00Z"), /input is out of range$/);
    assert.match(reason("2026-11-22T10:00:00Zx"), /trailing input$/);
    assert.match(reason("2026-11-22X10:00:00Z"), /input contains invalid characters$/);
    assert.equal(reason("0000-01-01T00:30:00+01:00"), 'dueAt "0000-01-01T00:30:00+01:00" is outside the years 0001–9999 once converted to UTC');
    assert.match(reason("9999-12-31T23:59:59.9991Z"), /outside the years/);
    assert.equal(typeof parseClientInstant("dueAt", "9999-12-31T23:59:59.999Z"), "number");
  });

  it("takes a Date or epoch milliseconds and writes them in UTC", () => {
    assert.deepEqual(toInstant("dueAt", new Date(Date.UTC(2030, 0, 2, 3, 4, 5, 6))), { text: "2030-01-02T03:04:05.006Z", ms: 1893553445006 });
    assert.deepEqual(toInstant("dueAt", 1893553445006.2), { text: "2030-01-02T03:04:05.007Z", ms: 1893553445007 });
    assert.ok("reason" in toInstant("dueAt", new Date(Number.NaN)));
    assert.equal(displayUtc(Date.UTC(2026, 10, 22, 10)), "2026-11-22 10:00:00 UTC");
    assert.equal(displayUtc(Date.UTC(2026, 10, 22, 10, 0, 0, 500)), "2026-11-22 10:00:00.500 UTC");
  });
});

describe("expireAfter", () => {
  it("reads days, hours, minutes and seconds", () => {
    assert.equal(parseExpireAfter("PT15M"), 900_000);
    assert.equal(parseExpireAfter("PT1H30M"), 5_400_000);
    assert.equal(parseExpireAfter("P1DT12H"), 129_600_000);
    assert.equal(parseExpireAfter("P3650D"), 3650 * 86_400_000);
    assert.equal(parseExpireAfter("PT1S"), 1000);
  });

  it("refuses the rest with the daemon's reasons", () => {
    const reason = (text: string) => (parseExpireAfter(text) as { reason: string }).reason;
    const tail = ': expected an ISO 8601 duration of days, hours, minutes and seconds such as "PT15M", "PT1H30M" or "P1DT12H"';
    assert.equal(reason("15M"), `expireAfter "15M" does not start with P${tail}`);
    assert.equal(reason("PT"), `expireAfter "PT" has T and no time after it${tail}`);
    assert.equal(reason("P"), `expireAfter "P" names no amount${tail}`);
    assert.equal(reason("PT0S"), `expireAfter "PT0S" is shorter than a second${tail}`);
    assert.equal(reason("P1Y"), `expireAfter "P1Y" has the unit 'Y' out of place or unknown${tail}`);
    assert.equal(reason("PT1S1M"), `expireAfter "PT1S1M" has the unit 'M' out of place or unknown${tail}`);
    assert.equal(reason("PT5"), `expireAfter "PT5" has a number without a unit${tail}`);
    assert.equal(reason("PTH"), `expireAfter "PTH" has "" before 'H'${tail}`);
    assert.equal(reason("P3651D"), 'expireAfter "P3651D" is longer than 3650 days');
  });
});

describe("data", () => {
  it("measures bytes, depth and numbers as the daemon does", () => {
    assert.deepEqual(shapeOf('{"a":[1,[2,{"b":"[[[["}]],"c":-12.5e+10}'), { depth: 4, longestNumber: 9 });
    assert.deepEqual(shapeOf("1"), { depth: 0, longestNumber: 1 });
    assert.deepEqual(shapeOf('"a\\"[1234"'), { depth: 0, longestNumber: 0 });
    assert.deepEqual(dataText({ a: 1 }), { json: '{"a":1}' });
    assert.match((dataText(() => 1) as { reason: string }).reason, /^data is not JSON/);
    assert.match((dataText({ n: 1n }) as { reason: string }).reason, /^data is not JSON/);
    assert.equal(checkDataJson('"' + "x".repeat(16 * 1024) + '"', DEFAULT_LIMITS), "data is 16386 bytes, more than the 16384-byte limit (max_data_bytes)");
    assert.equal(checkDataJson("[".repeat(65) + "]".repeat(65), DEFAULT_LIMITS), "data nests 65 arrays or objects deep, more than the 64 allowed (max_data_depth)");
    assert.equal(checkDataJson(`[${"9".repeat(101)}]`, DEFAULT_LIMITS), "data has a number of 101 characters, more than the 100 allowed (max_data_number_chars)");
    assert.equal(checkDataJson("[1]", { ...DEFAULT_LIMITS, maxDataBytes: 2 }), "data is 3 bytes, more than the 2-byte limit (max_data_bytes)");
  });
});

describe("filters and requests", () => {
  it("holds cancel-many filters to the daemon's rules", () => {
    assert.deepEqual(cancelFilterFields({}), {
      reason: "give correlationId, dueFrom or dueTo, or all: true to cancel every pending timer of the tenant",
    });
    assert.deepEqual(cancelFilterFields({ all: true, correlationId: "x" }), {
      reason: "all: true cancels every pending timer; give it without correlationId, dueFrom or dueTo",
    });
    assert.deepEqual(cancelFilterFields({ dueFrom: "2026-11-22T10:00:00Z", dueTo: "2026-11-22T09:00:00.5Z" }), {
      reason: "dueFrom 2026-11-22 10:00:00 UTC is not before dueTo 2026-11-22 09:00:00.500 UTC: the range holds no timer",
    });
    assert.deepEqual(cancelFilterFields({ dueFrom: new Date(Date.UTC(2026, 0, 1)), state: "Scheduled" }), {
      fields: { dueFrom: "2026-01-01T00:00:00.000Z", state: "Scheduled" },
    });
    assert.equal(checkListLimit(0), "limit 0 is outside 1–1000");
    assert.equal(checkForecastMinutes(1441), "forecastMinutes must be a whole number from 1 to 1440, got 1441");
    assert.equal(checkForecastMinutes(1.5), "forecastMinutes must be a whole number from 1 to 1440, got 1.5");
  });

  it("names the contract's subjects", () => {
    const s = new Subjects("acme");
    assert.deepEqual(
      [s.schedule, s.scheduleMany, s.cancel, s.cancelMany, s.event("due"), s.event("expired"), s.event("rejected"), s.api("cancel-many")],
      [
        "timer.cmd.schedule.acme",
        "timer.cmd.schedule-many.acme",
        "timer.cmd.cancel.acme",
        "timer.cmd.cancel-many.acme",
        "timer.evt.due.acme",
        "timer.evt.expired.acme",
        "timer.evt.rejected.acme",
        "timer.api.cancel-many.acme",
      ],
    );
  });

  it("makes UUID v7 ids in time order", () => {
    const a = uuidv7(1_700_000_000_000);
    const b = uuidv7(1_700_000_000_001);
    assert.match(a, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    assert.ok(a < b);
  });

  it("reads a traceparent only in W3C's form", () => {
    assert.deepEqual(parseTraceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"), {
      traceId: "0af7651916cd43dd8448eb211c80319c",
      spanId: "b7ad6b7169203331",
      flags: 1,
    });
    assert.equal(parseTraceparent("00-00000000000000000000000000000000-b7ad6b7169203331-01"), undefined);
    assert.equal(parseTraceparent("garbage"), undefined);
  });
});

describe("error replies", () => {
  const reply = (code: string | undefined, body: object): Msg => {
    const h = headers();
    if (code) {
      h.set("Nats-Service-Error-Code", code);
      h.set("Nats-Service-Error", "header reason");
    }
    const data = new TextEncoder().encode(JSON.stringify(body));
    return { headers: h, data, json: () => JSON.parse(new TextDecoder().decode(data)) } as unknown as Msg;
  };

  it("gives each code its class, the body's reason and retryAfterMs", () => {
    assert.equal(errorOfReply(reply(undefined, { timer: {} }), "s"), undefined);
    const bad = errorOfReply(reply("400", { error: "whole reason" }), "s");
    assert.ok(bad instanceof TimerBadRequestError && bad.reason === "whole reason" && bad.code === 400);
    assert.ok(errorOfReply(reply("404", { error: "no timer" }), "s") instanceof TimerNotFoundError);
    const busy = errorOfReply(reply("503", { error: "busy", retryAfterMs: 250 }), "s");
    assert.ok(busy instanceof TimerUnavailableError && busy.retryAfterMs === 250 && busy.code === 503);
    const internal = errorOfReply(reply("500", { error: "storage unavailable" }), "s");
    assert.ok(internal instanceof TimerServiceError && internal.code === 500);
    const other = errorOfReply(reply("418", {}), "s");
    assert.ok(other instanceof TimerServiceError && other.code === 418 && other.reason === "header reason");
  });
});
