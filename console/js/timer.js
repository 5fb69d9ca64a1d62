// One timer's page: its fields, its data as formatted JSON, and its cancel.

import { $, cell, fill, status } from "./dom.js";
import { tenantCall } from "./request.js";
import { state } from "./state.js";

export function renderTimer(timer) {
  state.timer = timer;
  const fields = [
    ["Tenant", timer.tenantId],
    ["Service call id", timer.serviceCallId],
    ["State", timer.state],
    ["Due at", timer.dueAt],
    ["Expires at", timer.expiresAt],
    ["Correlation id", timer.correlationId],
    ["Registered at", timer.registeredAt],
    ["Reached at", timer.reachedAt],
    ["Cancelled at", timer.cancelledAt],
    ["Trace id", timer.traceId],
  ];
  fill($("timer-fields").tBodies[0], fields, (tr, [name, value]) => {
    const th = document.createElement("th");
    th.textContent = name;
    tr.appendChild(th);
    cell(tr, value);
  });
  // What the store knows of its history: when its last command was taken, and what became of
  // it since, in order.
  const history = [
    [timer.registeredAt, timer.dueAt ? `scheduled for ${timer.dueAt}` : "cancelled before any schedule (a tombstone)"],
    [timer.cancelledAt, "cancelled"],
    [timer.reachedAt, timer.state === "Expired" ? "fired past its deadline, as TimerExpired" : "fired, as DueTimeReached"],
  ]
    .filter(([at]) => at)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  fill($("timer-history"), history, (li, [at, what]) => {
    li.textContent = `${at}: ${what}`;
  });
  $("timer-data").textContent =
    timer.data === undefined ? "(no data)" : JSON.stringify(timer.data, null, 2);
  $("timer-cancel").hidden = timer.state !== "Scheduled";
}

/** The timer the page was last asked for, as `tenant/id`: an answer for another one is late. */
let wanted = null;

/**
 * Empties the timer's page before another timer is loaded into it: until then the cancel button
 * is hidden and acts on nothing, so a click meant for the new timer can never cancel the one
 * shown before it.
 */
export function clearTimer() {
  state.timer = null;
  $("timer-cancel").hidden = true;
  $("timer-fields").tBodies[0].replaceChildren();
  $("timer-history").replaceChildren();
  $("timer-data").textContent = "";
}

export async function loadTimer(tenant, id) {
  const key = `${tenant}/${id}`;
  if (wanted !== key) {
    clearTimer();
    wanted = key;
  }
  const reply = await tenantCall(tenant, "get", { serviceCallId: id });
  // A slow answer for a timer the page has left since is not shown.
  if (wanted === key) {
    renderTimer(reply.timer);
  }
}

export async function cancelTimer() {
  const timer = state.timer;
  if (!timer) {
    return;
  }
  const key = `${timer.tenantId}/${timer.serviceCallId}`;
  const reply = await tenantCall(timer.tenantId, "cancel", { serviceCallId: timer.serviceCallId });
  status(`Cancel: ${reply.outcome}.`);
  // Shown only while the page still shows that timer: not over one loaded meanwhile.
  if (reply.timer && wanted === key) {
    renderTimer(reply.timer);
  }
}
