// The worker API of one assignment (/api/v1/assignments/{id}/...), as the assignment driver and
// the response queue call it: the assignment's own token in the Authorization header (it works
// inside MTurk's cookie-less iframe), JSON both ways, one error shape for every failure (ApiError),
// and one retry policy (backoffDelay) for GET /state and the response queue alike.

import { sleep } from './dom.js';
import { t } from './i18n.js';

// The page's language (base.html's <html lang>): the server answers in it (server/views/api.py LOCALE_HEADER).
export const LANGUAGE = typeof document === 'undefined' ? {} : { 'X-Perceptlab-Locale': document.documentElement.lang || 'en' };

/**
 * Every failed request of the worker API, in the API's own error shape:
 * `status` (HTTP status; 0 when no answer came at all), `error` (the API's code, e.g.
 * "trial_already_answered") and `message` (a sentence a worker can read).
 */
export class ApiError extends Error {
  /**
   * @param {number} status   HTTP status, or 0 for a network failure
   * @param {string} [error]  the API's error code; `http_<status>` (or "network_error") if the answer had none
   * @param {string} [message]
   */
  constructor(status, error, message) {
    super(message || `HTTP ${status}`);
    this.status = status;
    this.error = error || (status ? `http_${status}` : 'network_error');
    // Enumerable like `status` and `error`, so that {...error} and JSON.stringify show the whole shape.
    Object.defineProperty(this, 'message', { value: this.message, enumerable: true, writable: true, configurable: true });
  }

  /** The error of a non-2xx answer whose JSON body (possibly null) is `body`. */
  static fromResponse(status, body, fallbackMessage) {
    return new ApiError(status, body && body.error, (body && body.message) || fallbackMessage);
  }

  /** No answer at all: offline, DNS, a dropped connection, a request aborted by our timeout. */
  static network() {
    return new ApiError(0, 'network_error', t('Cannot reach the server. Please check your connection and try again.'));
  }
}
// A prototype property, not an own one: {...error} must stay {status, error, message}.
ApiError.prototype.name = 'ApiError';

/** Worth retrying: server trouble, "too many requests" or a request timeout. */
export function isTransientStatus(status) {
  return status >= 500 || status === 429 || status === 408;
}

/** Worth retrying: no HTTP answer at all, or a transient status. */
export function isTransient(error) {
  return !(error instanceof ApiError) || error.status === 0 || isTransientStatus(error.status);
}

/** Default backoff tuning (GET /state retries and the response queue). */
export const BACKOFF = Object.freeze({
  baseDelayMs: 1000,    // first retry after 0.5..1 s
  maxDelayMs: 30000,    // cap: retry at least every 30 s, forever (a response is never given up)
});

/**
 * Delay before retry number `attempt` (1 = first retry): exponential growth,
 * capped, with "equal jitter" (a random factor in [0.5, 1)) so that many
 * workers cut off by the same outage do not all come back in the same second.
 */
export function backoffDelay(attempt, { baseDelayMs = BACKOFF.baseDelayMs,
                                        maxDelayMs = BACKOFF.maxDelayMs,
                                        random = Math.random } = {}) {
  const exp = Math.min(maxDelayMs, baseDelayMs * 2 ** Math.max(0, attempt - 1));
  return Math.round(exp * (0.5 + 0.5 * random()));
}

/** The JSON body of a response, or null (an empty or non-JSON body must not turn into a failure). */
export async function readJson(response) {
  try {
    return await response.json();
  } catch (_) {
    return null;
  }
}

/** `{apiBase}/assignments/{assignmentId}{path}` */
export function assignmentUrl(conn, path) {
  return `${conn.apiBase}/assignments/${encodeURIComponent(conn.assignmentId)}${path}`;
}

/** Retry-After (seconds or an HTTP date) of a response, in ms; null when it has none. */
export function retryAfterMs(response) {
  const value = response.headers && response.headers.get('Retry-After');
  if (!value) return null;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return Math.max(0, seconds * 1000);
  const date = Date.parse(value);
  return Number.isFinite(date) ? Math.max(0, date - Date.now()) : null;
}

/** How long {@link callApi} waits out a server that answers 503 with Retry-After before it gives up. */
export const UNAVAILABLE_MAX_WAIT_MS = 10 * 60 * 1000;

/**
 * One JSON request to `{apiBase}/assignments/{assignmentId}{path}`.
 *
 * A 503 with Retry-After means the server stored nothing (its database is briefly out of reach): the same
 * request goes again after the time it asks (plus up to a second of jitter, so that every worker of a study
 * does not come back in the same instant), for up to {@link UNAVAILABLE_MAX_WAIT_MS}. `conn.onWait(ms)`, when
 * the connection has one, is told each wait, and `conn.onWait(0)` once the server answers again.
 * @param {{apiBase: string, assignmentId: string, token: string, onWait?: (ms: number) => void}} conn
 * @returns {Promise<object|null>} the JSON answer (null for 204); an ApiError for a 4xx/5xx or no answer
 */
export async function callApi(conn, method, path, body) {
  const started = Date.now();
  let waited = false;
  for (;;) {
    let response;
    try {
      response = await fetch(assignmentUrl(conn, path), {
        method,
        headers: { Authorization: `Bearer ${conn.token}`, ...LANGUAGE, ...(body ? { 'Content-Type': 'application/json' } : {}) },
        body: body ? JSON.stringify(body) : undefined,
        credentials: 'same-origin',
        cache: 'no-store',
      });
    } catch (_) {
      throw ApiError.network();
    }
    const data = await readJson(response);
    const wait = response.status === 503 ? retryAfterMs(response) : null;
    if (wait !== null && Date.now() + wait - started <= UNAVAILABLE_MAX_WAIT_MS) {
      waited = true;
      if (conn.onWait) conn.onWait(wait);
      await sleep(wait + Math.random() * 1000);
      continue;
    }
    if (waited && conn.onWait) conn.onWait(0);
    if (!response.ok) throw ApiError.fromResponse(response.status, data);
    return data;
  }
}

/**
 * A binary file of the assignment (e.g. an RDK trial's dot movie), as an ArrayBuffer. Not `no-store`:
 * the server marks such files private and immutable, so a reload reuses the download.
 */
export async function fetchAssignmentFile(conn, path) {
  let response;
  try {
    response = await fetch(assignmentUrl(conn, path), {
      headers: { Authorization: `Bearer ${conn.token}`, ...LANGUAGE }, credentials: 'same-origin',
    });
  } catch (_) {
    throw ApiError.network();
  }
  if (!response.ok) throw ApiError.fromResponse(response.status, await readJson(response));
  return response.arrayBuffer();
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
