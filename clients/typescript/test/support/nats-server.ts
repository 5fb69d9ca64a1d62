/**
 * A real `nats-server` with JetStream on a free port and its own storage directory, that can
 * be restarted on the same port and storage (a broker restart as clients see it).
 */
import type { ChildProcess } from "node:child_process";
import { writeFileSync } from "node:fs";
import { connect as tcpConnect } from "node:net";
import { join } from "node:path";
import { end, launch } from "./processes.js";
import { scratch } from "./scratch.js";
import { freePort } from "./ports.js";
import { eventually } from "./wait.js";

export class NatsServer {
  private child: ChildProcess | undefined;

  private constructor(
    readonly bin: string,
    readonly port: number,
    readonly dir: string,
    private readonly config: string | undefined,
  ) {}

  /** Starts a server; `config(port, storeDir)` gives a configuration file instead of flags. */
  static async start(bin: string, config?: (port: number, storeDir: string) => string): Promise<NatsServer> {
    const port = await freePort();
    const dir = scratch("timer-nats-");
    let file: string | undefined;
    if (config) {
      file = join(dir, "nats-server.conf");
      writeFileSync(file, config(port, join(dir, "js")));
    }
    const server = new NatsServer(bin, port, dir, file);
    await server.spawn();
    return server;
  }

  get url(): string {
    return `nats://127.0.0.1:${this.port}`;
  }

  private async spawn(): Promise<void> {
    const args = this.config
      ? ["-c", this.config]
      : ["-a", "127.0.0.1", "-p", String(this.port), "-js", "-sd", join(this.dir, "js")];
    this.child = launch(this.bin, args, process.env, join(this.dir, "nats-server.log"));
    await eventually(`nats-server on port ${this.port}`, () => this.answers(), { timeoutMs: 15_000 });
  }

  /** True once the server sends its INFO line on a new connection. */
  private answers(): Promise<boolean> {
    return new Promise((resolve) => {
      const socket = tcpConnect(this.port, "127.0.0.1");
      const done = (ok: boolean) => {
        socket.destroy();
        resolve(ok);
      };
      socket.setTimeout(1000, () => done(false));
      socket.once("data", (data) => done(data.toString().startsWith("INFO")));
      socket.once("error", () => done(false));
    });
  }

  /** Stops (SIGTERM, or SIGKILL with `hard`) and starts it again on the same port and storage. */
  async restart(options: { hard?: boolean; downMs?: number } = {}): Promise<void> {
    await this.stop(options.hard ? "SIGKILL" : "SIGTERM");
    if (options.downMs) await new Promise((r) => setTimeout(r, options.downMs));
    await this.spawn();
  }

  async stop(signal: NodeJS.Signals = "SIGTERM"): Promise<void> {
    await end(this.child, signal);
    this.child = undefined;
  }
}
