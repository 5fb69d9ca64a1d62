// The overview: every tenant's row and, for the operator, the daemon's state.

import { $, cell, fill, link, ofQuota, tenantHash } from "./dom.js";
import { call } from "./request.js";

export async function loadOverview() {
  const overview = await call("GET", "/console/api/overview");
  $("overview-error").hidden = !overview.readError;
  $("overview-error").textContent = overview.readError || "";
  $("counted-at").textContent = overview.countedAt || "—";
  fill($("tenants").tBodies[0], overview.tenants, (tr, t) => {
    cell(tr, link(t.tenantId, tenantHash(t.tenantId)));
    cell(tr, t.scheduled, "n");
    cell(tr, t.overdue, t.overdue > 0 ? "n error" : "n");
    cell(tr, t.nextDueAt, "t");
    cell(tr, t.firedLastMinute, "n");
    cell(tr, t.latenessP50);
    cell(tr, t.latenessP99);
    cell(tr, t.expired, t.expired > 0 ? "n error" : "n");
    cell(tr, t.rejected, t.rejected > 0 ? "n error" : "n");
    cell(tr, ofQuota(t.scheduled, t.maxPending), "n");
    cell(tr, ofQuota(t.peakCommandsPerSecond, t.commandsPerSecond), "n");
    tr.dataset.tenant = t.tenantId;
  });
  const daemon = overview.daemon;
  $("daemon-part").hidden = !daemon;
  if (daemon) {
    $("daemon-name").textContent = daemon.name;
    $("daemon-ready").textContent = daemon.ready ? "ready" : "not ready";
    $("daemon-ready").className = daemon.ready ? "ok" : "error";
    $("daemon-broker").textContent = daemon.brokerConnected ? "connected" : "not connected";
    $("daemon-broker").className = daemon.brokerConnected ? "ok" : "error";
    fill($("daemon-problems"), daemon.problems, (li, p) => {
      li.textContent = p;
    });
    fill($("actors").tBodies[0], daemon.actors, (tr, a) => {
      cell(tr, a.name);
      cell(tr, a.running ? "yes" : "no", a.running ? "ok" : "error");
      cell(tr, a.startedAt, "t");
      cell(tr, a.restarts, "n");
      cell(tr, a.lastFailure ? `${a.lastFailureAt}: ${a.lastFailure}` : "");
    });
    fill($("lanes").tBodies[0], daemon.lanes, (tr, l) => {
      cell(tr, l.lane);
      cell(tr, l.waiting, "n");
      cell(tr, l.longestWaitMs.toFixed(1), "n");
    });
    fill($("daemons").tBodies[0], overview.daemons, (tr, d) => {
      cell(tr, d.name);
      cell(tr, d.seenAt, "t");
    });
  }
}
