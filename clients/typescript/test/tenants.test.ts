/**
 * Tenants kept apart by NATS permissions alone (CONTRACT §1, §9; deployment.md "one user per
 * tenant"): the service's user and one user per tenant with the permission layout of
 * tests/security.rs, plus what a tenant's durable consumers need on the event stream, and
 * `timer.cmd.cancel-many.>` for the service: the API's cancel-many publishes a CancelTimers
 * there, and without it the layout of deployment.md answers cancel-many with a 500 after the
 * daemon's 5 s PubAck wait. Tenant A's client cannot schedule, read, cancel or consume for
 * tenant B.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { NatsConnection } from "@nats-io/nats-core";
import { TimerClient, TimerError, TimerNotFoundError, TimerPermissionError, type DueEvent } from "../src/index.js";
import { Inbox, eventually, within } from "./support/wait.js";
import { missing, startWorld, type World } from "./support/world.js";

const KINDS = ["due", "expired", "rejected"] as const;

/**
 * What a tenant's durable consumer `<tenant>-<kind>` on TIMER_EVENTS needs: create it on its
 * own subject only, read its info, pull from it and acknowledge. Consumer names are per stream,
 * so each tenant's are named for it.
 */
function consumerPermissions(tenant: string): string[] {
  return KINDS.flatMap((kind) => {
    const name = `${tenant}-${kind}`;
    return [
      `$JS.API.CONSUMER.CREATE.TIMER_EVENTS.${name}.timer.evt.${kind}.${tenant}`,
      `$JS.API.CONSUMER.INFO.TIMER_EVENTS.${name}`,
      `$JS.API.CONSUMER.MSG.NEXT.TIMER_EVENTS.${name}`,
      `$JS.ACK.TIMER_EVENTS.${name}.>`,
    ];
  });
}

function serverConfig(port: number, store: string): string {
  const tenant = (name: string) => `{ user: ${name}, password: "${name}-secret", permissions: {
      publish:   { allow: ${JSON.stringify(["timer.cmd.*." + name, "timer.api.*." + name, ...consumerPermissions(name)])} },
      subscribe: { allow: ["timer.evt.*.${name}", "_INBOX.${name}.>"] }
    } }`;
  return `
listen: "127.0.0.1:${port}"
jetstream { store_dir: "${store}" }
authorization {
  users = [
    { user: timer-service, password: "service-secret", permissions: {
        publish:   { allow: ["$JS.API.>", "$JS.ACK.TIMER_COMMANDS.>", "timer.evt.>", "timer.cmd.cancel.>", "timer.cmd.cancel-many.>", "_INBOX.>", "$SRV.>"] },
        subscribe: { allow: ["_INBOX.>", "timer.api.>", "$SRV.>"] }
    } }
    ${tenant("acme")}
    ${tenant("globex")}
  ]
}
`;
}

describe("tenants kept apart by per-tenant credentials", { skip: missing() }, () => {
  let world: World;
  let acmeNats: NatsConnection;
  let globexNats: NatsConnection;

  before(async () => {
    world = await startWorld({
      serverConfig,
      daemonEnv: {
        TIMER_NATS_USER: "timer-service",
        TIMER_NATS_PASSWORD: "service-secret",
        TIMER_NATS_INBOX_PER_TENANT: "true",
      },
    });
    acmeNats = await world.connect({ user: "acme", pass: "acme-secret", inboxPrefix: "_INBOX.acme" });
    globexNats = await world.connect({ user: "globex", pass: "globex-secret", inboxPrefix: "_INBOX.globex" });
  });
  after(async () => {
    await world?.stop();
  });

  it("each tenant schedules, queries, cancels and consumes its own timers", async () => {
    const acme = new TimerClient(acmeNats, { tenantId: "acme" });
    const seen = new Inbox<DueEvent>();
    const sub = await acme.onDue((event) => void seen.push(event), { consumer: "acme-due" });
    const rejectedSub = await acme.onRejected(() => undefined, { consumer: "acme-rejected" });
    await acme.schedule({ serviceCallId: "mine", dueAt: Date.now() + 300 });
    assert.equal((await seen.nth(0, "acme's timer")).payload.serviceCallId, "mine");
    await acme.schedule({ serviceCallId: "later", dueAt: Date.now() + 3_600_000, correlationId: "batch" });
    await eventually("acme's second timer stored", async () => (await acme.stats()).scheduled === 1);
    const listed = [];
    for await (const timer of acme.list()) listed.push(timer.serviceCallId);
    assert.deepEqual(listed.sort(), ["later", "mine"]);
    assert.deepEqual(await acme.cancelMany({ correlationId: "batch" }, { dryRun: true }), { count: 1, dryRun: true });
    assert.deepEqual(await acme.cancelMany({ correlationId: "batch" }), { count: 1, dryRun: false });
    assert.equal((await acme.cancel("later")).outcome, "already_cancelled");
    await Promise.all([sub.stop(), rejectedSub.stop()]);
  });

  it("acme's connection cannot act on globex, nor read its events", async () => {
    const globex = new TimerClient(globexNats, { tenantId: "globex" });
    const globexSeen = new Inbox<DueEvent>();
    const globexSub = await globex.onDue((event) => void globexSeen.push(event), { consumer: "globex-due" });
    await globex.schedule({ serviceCallId: "theirs", dueAt: Date.now() + 3_600_000 });
    await eventually("globex's timer stored", async () => (await globex.get("theirs")).state === "Scheduled");

    // A client on acme's connection that names globex.
    const forged = new TimerClient(acmeNats, { tenantId: "globex", timeoutMs: 2000 });
    const refused = async (what: string, call: Promise<unknown>) => {
      await assert.rejects(call, (error: unknown) => {
        assert.ok(error instanceof TimerError, `${what}: ${String(error)}`);
        assert.ok(error instanceof TimerPermissionError, `${what} refused for permission, got ${error.kind}: ${error.message}`);
        return true;
      });
    };
    await refused("schedule", forged.schedule({ serviceCallId: "forged", dueAt: Date.now() }));
    await refused("cancelCommand", forged.cancelCommand("theirs"));
    await refused("get", forged.get("theirs"));
    await refused("list", forged.listPage());
    await refused("stats", forged.stats());
    await refused("cancel", forged.cancel("theirs"));
    await refused("cancelMany", forged.cancelMany({ all: true }));
    await refused("onDue on globex's subject", forged.onDue(() => undefined, { consumer: "acme-expired" }));
    await refused("onDue on globex's consumer", forged.onDue(() => undefined, { consumer: "globex-due" }));

    // Nothing of it reached globex.
    assert.equal((await globex.get("theirs")).state, "Scheduled");
    await assert.rejects(globex.get("forged"), TimerNotFoundError);
    const stats = await globex.stats();
    assert.equal(stats.scheduled, 1);
    assert.equal(globexSeen.size, 0);

    // And its events are not acme's to read: the broker refuses the subscription.
    const spying = acmeNats.subscribe("timer.evt.due.globex");
    const spied = (async () => {
      for await (const _ of spying) return "received";
      return "closed";
    })().catch((error: unknown) => String(error));
    assert.match(await within("the broker to refuse the subscription", 10_000, spied), /Permissions Violation/i);
    await globex.cancel("theirs");
    await globexSub.stop();
  });
});
