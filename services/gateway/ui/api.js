// The console's HTTP client: every call carries the bearer token the user
// typed in, kept in this tab's sessionStorage (never a cookie, never
// localStorage: it leaves with the tab), and every error is the API's typed
// error body.

const tokenKey = 'skein.token';

export function getToken() {
  return sessionStorage.getItem(tokenKey) || '';
}

export function setToken(token) {
  if (token) sessionStorage.setItem(tokenKey, token);
  else sessionStorage.removeItem(tokenKey);
}

// authHeaders returns the headers that authenticate a request.
export function authHeaders() {
  const t = getToken();
  return t ? { Authorization: 'Bearer ' + t } : {};
}

// ApiError is an answer other than 2xx: code is the API's error code
// (docs/API.md, Errors), or http_<status> when the body was not the API's.
export class ApiError extends Error {
  constructor(status, code, message, requestId) {
    super(message || code);
    this.status = status;
    this.code = code;
    this.requestId = requestId || '';
  }
}

// api sends one request and returns its JSON answer. body, when given, is
// sent as JSON.
export async function api(method, path, body, signal) {
  const headers = { ...authHeaders() };
  const init = { method, headers, signal, credentials: 'omit', cache: 'no-store' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let resp;
  try {
    resp = await fetch(path, init);
  } catch (err) {
    if (err.name === 'AbortError') throw err;
    throw new ApiError(0, 'network', 'the gateway cannot be reached: ' + err.message);
  }
  const text = await resp.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!resp.ok) {
    const e = (data && data.error) || {};
    throw new ApiError(resp.status, e.code || 'http_' + resp.status, e.message || resp.statusText, e.requestId);
  }
  return data;
}

// sessionPath is the API path of a session, or of one of its routes.
export function sessionPath(id, rest) {
  return '/v1/sessions/' + encodeURIComponent(id) + (rest || '');
}

// randomID returns n random characters of [a-z0-9], for session IDs and
// idempotency keys.
export function randomID(n) {
  const alphabet = 'abcdefghijklmnopqrstuvwxyz0123456789';
  const bytes = crypto.getRandomValues(new Uint8Array(n));
  let s = '';
  for (const b of bytes) s += alphabet[b % alphabet.length];
  return s;
}
