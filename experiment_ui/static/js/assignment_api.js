// The worker API of one assignment (/api/v1/assignments/{id}/...), as the worker-side apps
// (pc_trial.js, motion_app.js) call it: the assignment's own token in the Authorization header
// (it works inside MTurk's cookie-less iframe), JSON both ways, and GET /state retried for as
// long as the network or the server is down.

import { sleep } from './dom.js';
import { backoffDelay } from './vote_queue.js';

/** A JSON error answer of the API ({"error": code, "message": ...}). */
export class ApiError extends Error {
  constructor(status, data) {
    super((data && data.message) || `HTTP ${status}`);
    this.status = status;
    this.code = (data && data.error) || `http_${status}`;
  }
}

/**
 * One request to `{apiBase}/assignments/{assignmentId}{path}`.
 * @param {{apiBase: string, assignmentId: string, token: string}} conn
 * @returns {Promise<object|null>} the JSON answer (null for 204); an ApiError for a 4xx/5xx
 */
export async function callApi(conn, method, path, body) {
  const response = await fetch(`${conn.apiBase}/assignments/${encodeURIComponent(conn.assignmentId)}${path}`, {
    method,
    headers: { Authorization: `Bearer ${conn.token}`, ...(body ? { 'Content-Type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
    credentials: 'same-origin',
    cache: 'no-store',
  });
  let data = null;
  try { data = await response.json(); } catch (_) { /* 204 or non-JSON */ }
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

/** Worth retrying: no HTTP answer at all, a server error, or "too many requests". */
export function isTransient(error) {
  return !(error instanceof ApiError) || error.status >= 500 || error.status === 429;
}

/**
 * GET /state, retried with backoff while the failure is transient; other errors are thrown.
 * @param {(delayMs: number, attempt: number) => void} onRetry  tell the worker (called before each wait)
 */
export async function fetchStateRetrying(conn, onRetry) {
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await callApi(conn, 'GET', '/state');
    } catch (error) {
      if (!isTransient(error)) throw error;
      const delay = backoffDelay(attempt);
      onRetry(delay, attempt);
      await sleep(delay);
    }
  }
}
