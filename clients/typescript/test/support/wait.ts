/**
 * Waiting on things outside the process, always with a deadline: `eventually` polls a
 * condition (never a bare sleep standing in for one), `within` bounds one promise.
 */
import { setTimeout as sleep } from "node:timers/promises";

/** Polls `probe` every `everyMs` until it returns something other than `undefined`/`false`. */
export async function eventually<T>(
  what: string,
  probe: () => Promise<T | undefined | false> | T | undefined | false,
  { timeoutMs = 15_000, everyMs = 50 }: { timeoutMs?: number; everyMs?: number } = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined && value !== false) return value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${String(last)}` : ""}`);
    }
    await sleep(everyMs);
  }
}

/** `promise`, or a failure naming `what` once `timeoutMs` passed. */
export async function within<T>(what: string, timeoutMs: number, promise: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)), timeoutMs);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** A queue of values that arrive from callbacks, taken one at a time with a deadline. */
export class Inbox<T> {
  private readonly items: T[] = [];
  private waiters: Array<() => void> = [];

  push(item: T): void {
    this.items.push(item);
    for (const wake of this.waiters.splice(0)) wake();
  }

  get size(): number {
    return this.items.length;
  }

  get all(): readonly T[] {
    return this.items;
  }

  /** The `n`th item (0-based), once it arrived. */
  async nth(n: number, what: string, timeoutMs = 15_000): Promise<T> {
    const deadline = Date.now() + timeoutMs;
    while (this.items.length <= n) {
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (have ${this.items.length})`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    return this.items[n] as T;
  }

  /** The first item that satisfies `match`, once it arrived. */
  async find(match: (item: T) => boolean, what: string, timeoutMs = 15_000): Promise<T> {
    return eventually(what, () => this.items.find(match), { timeoutMs, everyMs: 20 });
  }
}
