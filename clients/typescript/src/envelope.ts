/**
 * The `MessageEnvelope` every message travels in (§3), and the UUID v7 ids the client gives
 * its commands (time-ordered, as the daemon's own).
 */
import { randomFillSync } from "node:crypto";

/** The envelope with a payload of type `P`. Events may carry fields the client does not name. */
export interface MessageEnvelope<P, T extends string = string> {
  readonly id: string;
  readonly type: T;
  readonly tenantId: string;
  readonly timestampMs: number;
  readonly correlationId?: string | null;
  readonly causationId?: string | null;
  readonly aggregateId?: string | null;
  readonly payload: P;
}

const hex = (bytes: Uint8Array): string => Buffer.from(bytes).toString("hex");

/**
 * Random bytes drawn from the system's generator 4 KiB at a time: one call per id was nearly a
 * tenth of the client's CPU time per `schedule` at full rate (a CPU profile of bench/bench.ts).
 */
const pool = new Uint8Array(4096);
let used = pool.length;

function fillRandom(into: Uint8Array, from: number): void {
  const wanted = into.length - from;
  if (used + wanted > pool.length) {
    randomFillSync(pool);
    used = 0;
  }
  into.set(pool.subarray(used, used + wanted), from);
  used += wanted;
}

/** A UUID v7: 48 bits of Unix milliseconds, then random bits (RFC 9562). */
export function uuidv7(now: number = Date.now()): string {
  const bytes = new Uint8Array(16);
  fillRandom(bytes, 6);
  let ms = now;
  for (let i = 5; i >= 0; i--) {
    bytes[i] = ms % 256;
    ms = Math.floor(ms / 256);
  }
  bytes[6] = 0x70 | ((bytes[6] ?? 0) & 0x0f);
  bytes[8] = 0x80 | ((bytes[8] ?? 0) & 0x3f);
  const h = hex(bytes);
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/** A command's envelope, stamped now. */
export function envelope<P, T extends string>(
  type: T,
  tenantId: string,
  payload: P,
  fields: { correlationId?: string; aggregateId?: string } = {},
): MessageEnvelope<P, T> {
  const now = Date.now();
  return {
    id: uuidv7(now),
    type,
    tenantId,
    timestampMs: now,
    ...(fields.correlationId === undefined ? {} : { correlationId: fields.correlationId }),
    ...(fields.aggregateId === undefined ? {} : { aggregateId: fields.aggregateId }),
    payload,
  };
}
