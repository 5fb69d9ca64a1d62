// The page's state, shared by its modules, and its constants.

export const TOKEN_KEY = "timer-service-console-token";

export const REFRESH_MS = 3000;

export const PAGE_SIZE = 50;

export const state = {
  session: null,
  view: null,
  tenant: null,
  filter: {},
  pageAfter: [],
  next: null,
  charts: {},
  timer: null,
  weekLoaded: 0,
  refreshing: false,
};
