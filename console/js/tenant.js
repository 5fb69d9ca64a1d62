// A tenant's page: its figures, last minutes, charts and timers, and cancel-many after a dry run.

import { bars, byTime } from "./charts.js";
import { $, cell, fill, link, ofQuota, status, timerHash } from "./dom.js";
import { call, tenantCall } from "./request.js";
import { PAGE_SIZE, state } from "./state.js";

/// The tenant's figures: its pending timers (as the overview last counted them), the next
/// hour, its last minutes, its quotas, and (once a minute) the week ahead by hour.
export async function loadFigures() {
  const week = Date.now() - state.weekLoaded > 60000;
  const path = `/console/api/tenants/${encodeURIComponent(state.tenant)}/activity${week ? "?week" : ""}`;
  const reply = await call("GET", path);
  const p = reply.pending;
  $("stat-scheduled").textContent = String(p.scheduled);
  $("stat-overdue").textContent = String(p.overdue);
  $("stat-next").textContent = p.nextDueAt || "—";
  $("stat-counted").textContent = p.error || (p.countedAt ? `counted at ${p.countedAt}` : "");
  $("hour-error").textContent = reply.nextHour.error || "";
  if (reply.nextHour.due) {
    const [xs, ys] = byTime(reply.nextHour.due);
    bars("forecast-chart", xs, ys);
  }
  const a = reply.activity;
  $("act-fired-minute").textContent = String(a.firedLastMinute);
  $("act-fired").textContent = String(a.fired);
  $("act-p50").textContent = a.latenessP50 || "—";
  $("act-p99").textContent = a.latenessP99 || "—";
  $("act-expired").textContent = String(a.expired);
  $("act-accepted").textContent = String(a.accepted);
  $("act-rejected").textContent = String(a.rejected);
  $("quota-pending").textContent = ofQuota(p.scheduled, reply.maxPending);
  $("quota-rate").textContent = ofQuota(a.peakCommandsPerSecond, reply.commandsPerSecond);
  bars("lateness-chart", reply.latenessBuckets.map((_, i) => i), a.lateness, reply.latenessBuckets);
  if (reply.nextWeek) {
    $("week-error").textContent = reply.nextWeek.error || "";
    if (reply.nextWeek.due) {
      const [xs, ys] = byTime(reply.nextWeek.due);
      bars("week-chart", xs, ys);
      state.weekLoaded = Date.now();
    }
  }
}

export function readFilter() {
  const instant = (value) => (value ? new Date(value).toISOString() : undefined);
  const filter = {
    state: $("f-state").value || undefined,
    serviceCallId: $("f-id").value.trim() || undefined,
    correlationId: $("f-correlation").value.trim() || undefined,
    dueFrom: instant($("f-from").value),
    dueTo: instant($("f-to").value),
  };
  return filter;
}

export function renderTimers(timers) {
  fill($("timers").tBodies[0], timers, (tr, t) => {
    cell(tr, link(t.serviceCallId, timerHash(t.tenantId, t.serviceCallId)));
    cell(tr, t.state);
    cell(tr, t.dueAt, "t");
    cell(tr, t.correlationId);
    tr.dataset.serviceCallId = t.serviceCallId;
  });
}

export async function loadTimers() {
  const f = state.filter;
  if (f.serviceCallId) {
    // One key: the get request.
    try {
      const reply = await tenantCall(state.tenant, "get", { serviceCallId: f.serviceCallId });
      renderTimers([reply.timer]);
    } catch (e) {
      if (e.status !== 404) {
        throw e;
      }
      renderTimers([]);
    }
    state.next = null;
    $("next-page").hidden = true;
    return;
  }
  const body = { limit: PAGE_SIZE };
  for (const key of ["state", "correlationId", "dueFrom", "dueTo"]) {
    if (f[key] !== undefined) {
      body[key] = f[key];
    }
  }
  const after = state.pageAfter[state.pageAfter.length - 1];
  if (after) {
    body.after = after;
  }
  const page = await tenantCall(state.tenant, "list", body);
  renderTimers(page.timers);
  state.next = page.next || null;
  $("next-page").hidden = !state.next;
}

/// The cancel-many filter of the current list filter: the pending timers it selects.
export function cancelFilter() {
  const f = state.filter;
  const filter = {};
  for (const key of ["correlationId", "dueFrom", "dueTo"]) {
    if (f[key] !== undefined) {
      filter[key] = f[key];
    }
  }
  if (Object.keys(filter).length === 0) {
    filter.all = true;
  }
  return filter;
}

export function resetCancelMany() {
  $("cancel-many-count").textContent = "";
  $("cancel-many-confirm").hidden = true;
  $("cancel-many-abort").hidden = true;
  $("cancel-many").hidden = false;
}

export async function dryRunCancelMany() {
  if (state.filter.serviceCallId) {
    status("Cancel one timer from its own page; cancel-many goes by correlation id and due range.", true);
    return;
  }
  const filter = cancelFilter();
  const reply = await tenantCall(state.tenant, "cancel-many", { ...filter, dryRun: true });
  state.pendingCancel = filter;
  $("cancel-many").hidden = true;
  $("cancel-many-count").textContent = `${reply.count} pending timer(s) would be cancelled.`;
  $("cancel-many-confirm").textContent = `Cancel ${reply.count} timer(s)`;
  $("cancel-many-confirm").hidden = reply.count === 0;
  $("cancel-many-abort").hidden = false;
}

export async function confirmCancelMany() {
  const filter = state.pendingCancel;
  resetCancelMany();
  status("Cancelling…");
  const reply = await tenantCall(state.tenant, "cancel-many", filter);
  status(`${reply.count} timer(s) cancelled.`);
  await Promise.all([loadFigures(), loadTimers()]);
}
