/**
 * What a test file runs against: one nats-server and one daemon of its own, and connections
 * to them. `world()` returns undefined (the file's tests skip) when a binary is missing outside
 * CI.
 */
import { connect, type NatsConnection, type ConnectionOptions } from "@nats-io/transport-node";
import { binaries, type Binaries } from "./binaries.js";
import { Daemon } from "./daemon.js";
import { NatsServer } from "./nats-server.js";
import { within } from "./wait.js";

export interface World {
  readonly bins: Binaries;
  readonly server: NatsServer;
  readonly daemon: Daemon;
  /** A connection to the server, closed by `stop`. */
  connect(options?: Partial<ConnectionOptions>): Promise<NatsConnection>;
  stop(): Promise<void>;
}

/** Why the tests of this file skip, or undefined when they run. */
export function missing(): string | undefined {
  const found = binaries();
  return typeof found === "string" ? found : undefined;
}

export interface WorldOptions {
  /** `TIMER_*` settings of the daemon. */
  readonly daemonEnv?: Record<string, string>;
  /** A nats-server configuration, instead of plain flags. */
  readonly serverConfig?: (port: number, storeDir: string) => string;
  /** The broker URL the daemon uses (credentials in it), from the server's. */
  readonly daemonUrl?: (server: NatsServer) => string;
}

export async function startWorld(options: WorldOptions = {}): Promise<World> {
  const bins = binaries();
  if (typeof bins === "string") throw new Error(bins);
  const server = await NatsServer.start(bins.natsServer, options.serverConfig);
  const daemon = await Daemon.start(bins.daemon, options.daemonUrl?.(server) ?? server.url, options.daemonEnv);
  const connections: NatsConnection[] = [];
  return {
    bins,
    server,
    daemon,
    async connect(connectOptions = {}) {
      const nc = await connect({ servers: server.url, maxReconnectAttempts: -1, reconnectTimeWait: 100, ...connectOptions });
      connections.push(nc);
      return nc;
    },
    async stop() {
      await Promise.allSettled(connections.map((nc) => within("a connection to close", 10_000, nc.close())));
      await daemon.stop();
      await server.stop();
    },
  };
}

let counter = 0;
/** A tenant id of its own for each test, so tests of one file never see each other's timers. */
export function tenant(name: string): string {
  counter += 1;
  return `${name}-${process.pid}-${counter}`;
}
