/**
 * Child processes of a test file, each killed when the test process exits however it exits,
 * so no server or daemon outlives its test.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { openSync, closeSync } from "node:fs";
import { within } from "./wait.js";

const living = new Set<ChildProcess>();
process.on("exit", () => {
  for (const child of living) child.kill("SIGKILL");
});

/** Starts `command` with its output appended to `log`. */
export function launch(command: string, args: string[], env: NodeJS.ProcessEnv, log: string): ChildProcess {
  const out = openSync(log, "a");
  const child = spawn(command, args, { env, stdio: ["ignore", out, out] });
  closeSync(out);
  living.add(child);
  child.once("exit", () => living.delete(child));
  return child;
}

/** Ends `child` with `signal` and waits (bounded) for it to exit; SIGKILL if it will not. */
export async function end(child: ChildProcess | undefined, signal: NodeJS.Signals, timeoutMs = 10_000): Promise<number | null> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return child?.exitCode ?? null;
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  child.kill(signal);
  try {
    return await within(`process ${child.pid} to exit on ${signal}`, timeoutMs, exited);
  } catch {
    child.kill("SIGKILL");
    return within(`process ${child.pid} to exit on SIGKILL`, 5_000, exited);
  }
}
