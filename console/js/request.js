import { TOKEN_KEY } from "./state.js";

// Requests to the console's endpoints, with the token of this tab.

/// What to do when the daemon refuses the token (the page signs out).
let unauthorized = () => {};
export function onUnauthorized(action) {
  unauthorized = action;
}

export class Refused extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export async function call(method, path, body) {
  const token = sessionStorage.getItem(TOKEN_KEY) || "";
  const options = { method, headers: { Authorization: `Bearer ${token}` }, cache: "no-store" };
  if (body !== undefined) {
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  const response = await fetch(path, options);
  let reply = null;
  try {
    reply = await response.json();
  } catch (_) {
    reply = null;
  }
  if (!response.ok) {
    const reason = (reply && reply.error) || response.statusText;
    if (response.status === 401) {
      unauthorized();
    }
    throw new Refused(response.status, reason);
  }
  return reply;
}

export const tenantCall = (tenant, verb, body) =>
  call("POST", `/console/api/tenants/${encodeURIComponent(tenant)}/${verb}`, body);
