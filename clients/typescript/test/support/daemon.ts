/**
 * The real timer-service binary as a child process: its own SQLite file in a temp directory,
 * its own HTTP port, started and waited on until `/readyz` answers 200.
 */
import type { ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { end, launch } from "./processes.js";
import { scratch } from "./scratch.js";
import { freePort } from "./ports.js";
import { eventually } from "./wait.js";

export class Daemon {
  private child: ChildProcess | undefined;

  private constructor(
    readonly bin: string,
    readonly brokerUrl: string,
    readonly dir: string,
    readonly httpPort: number,
    private readonly env: Record<string, string>,
  ) {}

  /** Starts the daemon on `brokerUrl` with extra `TIMER_*` settings; resolves once ready. */
  static async start(bin: string, brokerUrl: string, env: Record<string, string> = {}): Promise<Daemon> {
    const dir = scratch("timer-daemon-");
    const daemon = new Daemon(bin, brokerUrl, dir, await freePort(), env);
    await daemon.spawn();
    return daemon;
  }

  get http(): string {
    return `http://127.0.0.1:${this.httpPort}`;
  }

  get log(): string {
    return join(this.dir, "daemon.log");
  }

  logText(): string {
    try {
      return readFileSync(this.log, "utf8");
    } catch {
      return "";
    }
  }

  private async spawn(): Promise<void> {
    // Only the settings given here: none from the caller's shell (a TIMER_* or OTEL_* there
    // could change what is tested).
    const inherited = Object.fromEntries(
      Object.entries(process.env).filter(([k]) => !k.startsWith("TIMER_") && !k.startsWith("OTEL_")),
    );
    const env = {
      ...inherited,
      TIMER_BROKER_URL: this.brokerUrl,
      TIMER_DB_PATH: join(this.dir, "timers.db"),
      TIMER_HTTP_LISTEN: `127.0.0.1:${this.httpPort}`,
      TIMER_NAME: "ts-client-test",
      RUST_LOG: "info",
      ...this.env,
    };
    this.child = launch(this.bin, ["run", "--config", join(this.dir, "absent-config.toml")], env, this.log);
    const child = this.child;
    await eventually(
      "the daemon's /readyz to answer 200",
      async () => {
        if (child.exitCode !== null) throw new Error(`the daemon exited with ${child.exitCode}: ${this.logText().slice(-2000)}`);
        const response = await fetch(`${this.http}/readyz`, { signal: AbortSignal.timeout(1000) });
        return response.status === 200;
      },
      { timeoutMs: 30_000, everyMs: 100 },
    );
  }

  /** Stops it (SIGTERM: graceful; SIGKILL: a crash) and starts it again on the same file. */
  async restart(signal: NodeJS.Signals = "SIGTERM"): Promise<void> {
    await this.stop(signal);
    await this.spawn();
  }

  async stop(signal: NodeJS.Signals = "SIGTERM"): Promise<void> {
    await end(this.child, signal, 25_000);
    this.child = undefined;
  }
}
