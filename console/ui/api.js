// api.js: every call the console makes goes through here, with the admin
// token (kept in sessionStorage, so it is gone with the tab) when one is set.

const KEY = 'fulcrum.admin.token';

export function token() { return sessionStorage.getItem(KEY) || ''; }
export function setToken(t) {
  if (t) sessionStorage.setItem(KEY, t); else sessionStorage.removeItem(KEY);
}

// ApiError carries the HTTP status and the server's error text.
export class ApiError extends Error {
  constructor(status, msg) { super(msg); this.status = status; }
}

const listeners = new Set();
// onAuth(fn): fn(refused bool) after every answer, to show or clear the
// "token refused" banner.
export function onAuth(fn) { listeners.add(fn); }

// call fetches path (relative to the listener) and returns the parsed JSON.
export async function call(method, path, body) {
  const headers = {};
  const t = token();
  if (t) headers['Authorization'] = 'Bearer ' + t;
  const init = { method, headers, cache: 'no-store' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const r = await fetch(path, init);
  for (const fn of listeners) fn(r.status === 401);
  const text = await r.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  if (!r.ok) {
    throw new ApiError(r.status, (data && data.error) || text.trim() || r.statusText);
  }
  return data;
}

export const get = (p) => call('GET', p);
export const post = (p, b) => call('POST', p, b);
