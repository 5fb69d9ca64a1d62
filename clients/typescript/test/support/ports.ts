/**
 * Free TCP ports below Linux's ephemeral range (32768–60999): a port the kernel hands out for
 * `bind(0)` may be taken by an outgoing connection before the server binds it, while ports
 * below that range are taken only by listeners. Starts at a random place, so parallel test
 * processes rarely meet.
 */
import { createServer } from "node:net";

const FIRST = 20_000;
const SPAN = 12_000;
let next = Math.floor(Math.random() * SPAN);

function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", () => resolve(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
  });
}

export async function freePort(): Promise<number> {
  for (let i = 0; i < SPAN; i++) {
    const port = FIRST + (next++ % SPAN);
    if (await bindable(port)) return port;
  }
  throw new Error("no free port");
}
