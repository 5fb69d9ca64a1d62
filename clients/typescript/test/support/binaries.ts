/**
 * The two programs the tests run: `nats-server` (NATS_SERVER_BIN, else what
 * scripts/nats-server-bin.sh finds or installs) and the daemon (TIMER_SERVICE_BIN, else the
 * repository's debug build), copied to a private place so a rebuild cannot change it under a
 * running test. Missing, a test is skipped, except under CI=true where that is a failure.
 */
import { execFileSync } from "node:child_process";
import { accessSync, constants, copyFileSync, chmodSync } from "node:fs";
import { join } from "node:path";
import { repoRoot } from "./paths.js";
import { scratch } from "./scratch.js";

export interface Binaries {
  readonly natsServer: string;
  readonly daemon: string;
}

const executable = (path: string): boolean => {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
};

function natsServer(): string | string[] {
  const given = process.env.NATS_SERVER_BIN;
  if (given) return executable(given) ? given : [`NATS_SERVER_BIN=${given} is not an executable`];
  try {
    const found = execFileSync("bash", [join(repoRoot, "scripts/nats-server-bin.sh")], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"],
      timeout: 120_000,
    }).trim();
    return executable(found) ? found : [`scripts/nats-server-bin.sh printed ${found}, not an executable`];
  } catch (error) {
    return [`no nats-server: ${(error as Error).message}`];
  }
}

function daemon(): string | string[] {
  const given = process.env.TIMER_SERVICE_BIN ?? join(repoRoot, "target/debug/timer-service");
  if (!executable(given)) return [`no timer-service binary at ${given} (set TIMER_SERVICE_BIN or build it)`];
  const copy = join(scratch("timer-service-bin-"), "timer-service");
  copyFileSync(given, copy);
  chmodSync(copy, 0o755);
  return copy;
}

let found: Binaries | string | undefined;

/** The binaries, or why they are missing (thrown under CI=true). */
export function binaries(): Binaries | string {
  if (found === undefined) {
    const server = natsServer();
    const bin = typeof server === "string" ? daemon() : [];
    const missing = [...(typeof server === "string" ? [] : server), ...(typeof bin === "string" ? [] : bin)];
    found = missing.length === 0 ? { natsServer: server as string, daemon: bin as string } : missing.join("; ");
  }
  if (typeof found === "string" && process.env.CI === "true") {
    throw new Error(`CI=true and a binary the tests need is missing: ${found}`);
  }
  return found;
}
