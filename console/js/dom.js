// Small helpers to write the page. Every value is written as text (textContent) or through
// the DOM, never parsed as HTML: an id or a data holding markup is shown as the text it is.

import { state } from "./state.js";

export const $ = (id) => document.getElementById(id);

export function show(sectionId) {
  for (const id of ["sign-in", "overview", "tenant", "timer"]) {
    $(id).hidden = id !== sectionId;
  }
  state.view = sectionId;
}

export function status(message, isError) {
  const bar = $("status");
  bar.textContent = message || "";
  bar.hidden = !message;
  bar.className = isError ? "error" : "";
}

export function cell(row, value, className) {
  const td = document.createElement("td");
  if (value instanceof Node) {
    td.appendChild(value);
  } else {
    td.textContent = value === null || value === undefined ? "—" : String(value);
  }
  if (className) {
    td.className = className;
  }
  row.appendChild(td);
  return td;
}

export function link(text, hash) {
  const a = document.createElement("a");
  a.textContent = text;
  a.href = hash;
  return a;
}

/// Replaces the rows of a table body (or the items of a list) with one per item, each written
/// by `render`.
export function fill(container, items, render) {
  const tag = container.tagName === "UL" || container.tagName === "OL" ? "li" : "tr";
  const rows = items.map((item) => {
    const row = document.createElement(tag);
    render(row, item);
    return row;
  });
  container.replaceChildren(...rows);
}

/// `used` against a quota `limit` (null is unlimited).
export const ofQuota = (used, limit) =>
  limit === null || limit === undefined ? `${used} (no limit)` : `${used} of ${limit}`;

export const tenantHash = (tenant) => `#/tenant/${encodeURIComponent(tenant)}`;

export const timerHash = (tenant, id) =>
  `${tenantHash(tenant)}/timer/${encodeURIComponent(id)}`;
