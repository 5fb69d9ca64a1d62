// The timer-service console: one page, filled from the daemon's JSON endpoints (src/console).
// The token is kept in this tab's session storage and sent in the Authorization header only.
// This module signs in and out, follows the location's hash, and refreshes what is shown.

import { $, show, status, tenantHash } from "./dom.js";
import { loadOverview } from "./overview.js";
import { call, onUnauthorized } from "./request.js";
import { REFRESH_MS, TOKEN_KEY, state } from "./state.js";
import { confirmCancelMany, dryRunCancelMany, loadFigures, loadTimers, readFilter, resetCancelMany } from "./tenant.js";
import { cancelTimer, loadTimer } from "./timer.js";

function signOut() {
  sessionStorage.removeItem(TOKEN_KEY);
  state.session = null;
  state.tenant = null;
  $("who").textContent = "";
  $("tenant-name").textContent = "";
  $("sign-out").hidden = true;
  show("sign-in");
}

async function signIn(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
  try {
    state.session = await call("GET", "/console/api/session");
  } catch (e) {
    sessionStorage.removeItem(TOKEN_KEY);
    status(`Not signed in: ${e.message}`, true);
    show("sign-in");
    return false;
  }
  $("who").textContent =
    state.session.role === "operator" ? "operator" : `tenant ${state.session.tenant}`;
  $("sign-out").hidden = false;
  status("");
  return true;
}

function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  if (parts[0] === "tenant" && parts[1]) {
    return parts[2] === "timer" && parts[3] !== undefined
      ? { view: "timer", tenant: parts[1], id: parts[3] }
      : { view: "tenant", tenant: parts[1] };
  }
  if (state.session && state.session.role === "tenant") {
    return { view: "tenant", tenant: state.session.tenant };
  }
  return { view: "overview" };
}

async function render() {
  if (!state.session) {
    show("sign-in");
    return;
  }
  const where = route();
  try {
    if (where.view === "overview") {
      show("overview");
      await loadOverview();
    } else if (where.view === "tenant") {
      if (state.tenant !== where.tenant) {
        state.filter = {};
        state.pageAfter = [];
        state.weekLoaded = 0;
        resetCancelMany();
      }
      state.tenant = where.tenant;
      $("tenant-name").textContent = where.tenant;
      show("tenant");
      await Promise.all([loadFigures(), loadTimers()]);
    } else {
      state.tenant = where.tenant;
      $("timer-id").textContent = where.id;
      $("timer-back").href = tenantHash(where.tenant);
      show("timer");
      await loadTimer(where.tenant, where.id);
    }
    $("live").textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (e) {
    status(`${e.message}${e.status ? ` (${e.status})` : ""}`, true);
  }
}

/// Refreshes the figures in view every few seconds; the list only on its first page, so
/// that a page being read does not move.
async function refresh() {
  if (state.refreshing || !state.session || document.hidden) {
    return;
  }
  state.refreshing = true;
  try {
    if (state.view === "overview") {
      await loadOverview();
    } else if (state.view === "tenant") {
      await loadFigures();
      if (state.pageAfter.length === 0) {
        await loadTimers();
      }
    }
    $("live").textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (e) {
    status(`${e.message}${e.status ? ` (${e.status})` : ""}`, true);
  } finally {
    state.refreshing = false;
  }
}

const guarded = (action) => async (event) => {
  if (event) {
    event.preventDefault();
  }
  try {
    await action();
  } catch (e) {
    status(`${e.message}${e.status ? ` (${e.status})` : ""}`, true);
  }
};

function wire() {
  $("sign-in-form").addEventListener(
    "submit",
    guarded(async () => {
      const token = $("token").value.trim();
      $("token").value = "";
      if (await signIn(token)) {
        await render();
      }
    }),
  );
  $("sign-out").addEventListener("click", () => {
    signOut();
    location.hash = "#/";
  });
  $("filter").addEventListener(
    "submit",
    guarded(async () => {
      state.filter = readFilter();
      state.pageAfter = [];
      resetCancelMany();
      await loadTimers();
    }),
  );
  $("next-page").addEventListener(
    "click",
    guarded(async () => {
      state.pageAfter.push(state.next);
      await loadTimers();
    }),
  );
  $("first-page").addEventListener(
    "click",
    guarded(async () => {
      state.pageAfter = [];
      await loadTimers();
    }),
  );
  $("cancel-many").addEventListener("click", guarded(dryRunCancelMany));
  $("cancel-many-confirm").addEventListener("click", guarded(confirmCancelMany));
  $("cancel-many-abort").addEventListener("click", resetCancelMany);
  $("timer-cancel").addEventListener("click", guarded(cancelTimer));
  window.addEventListener("hashchange", () => {
    status("");
    render();
  });
  setInterval(refresh, REFRESH_MS);
}

async function start() {
  wire();
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token && (await signIn(token))) {
    await render();
  } else {
    show("sign-in");
  }
}

onUnauthorized(signOut);
start();
