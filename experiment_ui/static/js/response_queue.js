// ResponseQueue: at-least-once delivery of every response a worker gives -- paired-comparison
// votes, motion-matching responses (with their frame logs), the screen calibration -- to
// POST {apiBase}/assignments/{aid}/{route.path}.  One queue per assignment for all of them.
//
// Why it exists: a crowd worker's click is the only copy of that data point.
// Every response is written to localStorage *before* it is sent, and removed only
// once the server has acknowledged it (201 stored / 200 duplicate) or refused
// it for good (other 4xx).  A reload, a closed tab or a flaky connection
// therefore loses nothing, and the server's idempotency (a route's idField:
// same vote_id / response_id + same payload -> 200 "duplicate"; the calibration:
// the same body again -> its stored result) makes every resend safe.  The exact JSON
// body is stored, so a resend is byte-for-byte the first attempt (a changed
// payload would be a 409 conflict).
//
// Responses are sent one at a time, oldest first, whatever their route: the server then
// sees them in the order they were made, and a failing connection is probed by one request
// instead of a burst.

import { t } from './i18n.js';
import { ApiError, BACKOFF, LANGUAGE, backoffDelay, isTransientStatus, readJson, retryAfterMs } from './assignment_api.js';

const STORAGE_PREFIX = 'perceptlab.responses.';
// Queues that pages of earlier releases left behind (one per endpoint), taken over at start-up.
const LEGACY_QUEUES = Object.freeze([
  { prefix: 'perceptlab.votes.', path: 'votes' },
  { prefix: 'perceptlab.motion-responses.', path: 'motion-responses' },
]);

/** Default tuning; every field can be overridden in the constructor options. */
export const DEFAULTS = Object.freeze({
  ...BACKOFF,
  requestTimeoutMs: 20000, // a hung request counts as a network error
  keepaliveBudget: 60000,  // bytes; browsers cap all in-flight keepalive bodies at 64 KiB
});

/** RFC 4122 version-4 UUID; crypto.randomUUID exists only in secure contexts. */
export function uuid4() {
  if (globalThis.crypto && typeof globalThis.crypto.randomUUID === 'function') {
    try {
      return globalThis.crypto.randomUUID();
    } catch (_) {
      // Not a secure context (plain http on a LAN address): fall through.
    }
  }
  const b = new Uint8Array(16);
  globalThis.crypto.getRandomValues(b);
  b[6] = (b[6] & 0x0f) | 0x40; // version 4
  b[8] = (b[8] & 0x3f) | 0x80; // RFC 4122 variant
  const h = Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

const isEntry = (e) => e && typeof e.id === 'string' && typeof e.path === 'string' && typeof e.body === 'string';

export class ResponseQueue {
  /**
   * @param {object} options
   * @param {string} options.apiBase      e.g. "/api/v1"
   * @param {string} options.assignmentId
   * @param {string} options.token        bearer token of this assignment
   * @param {(q: ResponseQueue) => void} [options.onChange]   pending count / state changed
   * @param {(body: object, answer: object, entry: {id: string, path: string}) => void} [options.onDelivered]
   * @param {(body: object, error: ApiError, entry: {id: string, path: string}) => void} [options.onRejected]
   *        a response the server refused for good (4xx other than 408/429); it is dropped from the queue
   */
  constructor(options) {
    const o = { ...DEFAULTS, ...options };
    this.apiBase = String(o.apiBase || '/api/v1').replace(/\/+$/, '');
    this.assignmentId = String(o.assignmentId);
    this.token = o.token;
    this.onChange = o.onChange || null;
    this.onDelivered = o.onDelivered || null;
    this.onRejected = o.onRejected || null;
    this.baseDelayMs = o.baseDelayMs;
    this.maxDelayMs = o.maxDelayMs;
    this.requestTimeoutMs = o.requestTimeoutMs;
    this.keepaliveBudget = o.keepaliveBudget;
    this.random = o.random || Math.random;
    this.fetch = o.fetch || globalThis.fetch.bind(globalThis);
    this.storageKey = STORAGE_PREFIX + this.assignmentId;
    this.storage = ResponseQueue._usableStorage(o.storage === undefined ? globalThis.localStorage : o.storage);
    this._memory = [];         // used only when localStorage is unusable
    this._waiters = new Map(); // entry id -> {resolve, reject} for enqueue() promises
    this._idleWaiters = [];
    this._sending = false;
    this._timer = null;
    this._failures = 0;        // consecutive failed attempts -> backoff exponent
    this.nextRetryAt = null;   // epoch ms of the scheduled retry, for the UI
    this.lastError = null;     // text of the last transient failure, for the UI
    this._onOnline = () => this._retryNow();
    this._onPageHide = () => this.sendBeaconLike();
    if (typeof window !== 'undefined') {
      window.addEventListener('online', this._onOnline);
      window.addEventListener('pagehide', this._onPageHide);
    }
    this._adoptLegacyQueues();
    // Responses left over from an earlier page load (reload, crash, closed tab) go first.
    if (this._load().length) queueMicrotask(() => { this._emit(); this._pump(); });
  }

  static _usableStorage(storage) {
    // Storage can be disabled (privacy settings) or throw on access; then the
    // queue still works, only without surviving a reload.
    try {
      if (!storage) return null;
      const probe = STORAGE_PREFIX + '__probe__';
      storage.setItem(probe, '1');
      storage.removeItem(probe);
      return storage;
    } catch (_) {
      return null;
    }
  }

  // --- persistence ---------------------------------------------------------
  // Every read goes back to storage (not a cached copy) so that two tabs of
  // the same assignment do not overwrite each other's queued responses.

  _load() {
    if (!this.storage) return this._memory.slice();
    try {
      const parsed = JSON.parse(this.storage.getItem(this.storageKey) || '[]');
      return Array.isArray(parsed) ? parsed.filter(isEntry) : [];
    } catch (_) {
      return [];
    }
  }

  _save(entries) {
    this._memory = entries.slice();
    if (!this.storage) return;
    try {
      if (entries.length) this.storage.setItem(this.storageKey, JSON.stringify(entries));
      else this.storage.removeItem(this.storageKey);
    } catch (_) {
      // Quota exceeded: keep going in memory rather than losing the response now.
      this.storage = null;
    }
  }

  _remove(id) {
    this._save(this._load().filter((e) => e.id !== id));
  }

  /** Move the per-endpoint queues of earlier releases ({vote_id, body, queued_at}) into this one. */
  _adoptLegacyQueues() {
    if (!this.storage) return;
    const adopted = [];
    for (const { prefix, path } of LEGACY_QUEUES) {
      const key = prefix + this.assignmentId;
      try {
        const old = JSON.parse(this.storage.getItem(key) || '[]');
        if (Array.isArray(old)) {
          for (const e of old) {
            if (e && e.vote_id && typeof e.body === 'string') {
              adopted.push({ id: String(e.vote_id), path, body: e.body, queued_at: e.queued_at || 0 });
            }
          }
        }
        this.storage.removeItem(key);
      } catch (_) {
        // Unreadable: nothing to take over.
      }
    }
    if (!adopted.length) return;
    const entries = this._load();
    const known = new Set(entries.map((e) => e.id));
    const merged = [...entries, ...adopted.filter((e) => !known.has(e.id))];
    merged.sort((a, b) => (a.queued_at || 0) - (b.queued_at || 0)); // oldest first, as they were made
    this._save(merged);
  }

  // --- public API ----------------------------------------------------------

  /** Number of responses not yet acknowledged by the server. */
  get pending() {
    return this._load().length;
  }

  /** True while a retry is scheduled after a failure (the UI can say "offline"). */
  get retrying() {
    return this._timer !== null;
  }

  /** Parsed bodies of the responses still queued (e.g. to skip their trials after a reload). */
  pendingBodies() {
    return this._load().map((e) => JSON.parse(e.body));
  }

  /**
   * Queue a response and start sending it.
   * @param {{path: string, idField: string|null}} route  where it goes: POST .../{path}; `idField` names the
   *        body's idempotency key (added unless the body has one), null for an endpoint that is idempotent
   *        by its body alone
   * @param {object} body  the request body
   * @param {{id?: string}} [options]  the entry's id (with an idField: the key's value); a new UUID by default
   * @returns {Promise<object>} the server's JSON answer once delivered; rejects with an ApiError when the
   *          server refuses the response for good.  Callers that do not need the answer can ignore it.
   */
  enqueue(route, body, { id } = {}) {
    const idField = route.idField || null;
    const entryId = String((idField && body[idField]) || id || uuid4());
    const sent = idField ? { [idField]: entryId, ...body } : body;
    const entry = { id: entryId, path: String(route.path).replace(/^\/+|\/+$/g, ''),
                    body: JSON.stringify(sent), queued_at: Date.now() };
    const promise = new Promise((resolve, reject) => {
      this._waiters.set(entry.id, { resolve, reject });
    });
    // Unhandled-rejection noise is pointless when the caller fires and forgets.
    promise.catch(() => {});
    const entries = this._load();
    if (!entries.some((e) => e.id === entry.id)) entries.push(entry);
    this._save(entries);
    this._emit();
    this._pump();
    return promise;
  }

  /** Resolves when nothing is pending (immediately if the queue is empty). */
  whenIdle() {
    if (!this.pending && !this._sending) return Promise.resolve();
    return new Promise((resolve) => this._idleWaiters.push(resolve));
  }

  /** Try again now instead of waiting out the backoff (e.g. a "retry" button). */
  retryNow() {
    this._retryNow();
  }

  /**
   * Last-chance delivery when the page goes away: fire every pending response with
   * fetch(keepalive) -- it outlives the page, and unlike sendBeacon it can carry
   * the Authorization header.  The responses stay in storage; if these requests got
   * through, the next load's resend is answered "duplicate" and dropped.
   */
  sendBeaconLike() {
    let budget = this.keepaliveBudget;
    for (const entry of this._load()) {
      budget -= entry.body.length;
      if (budget < 0) break;
      try {
        this.fetch(this._url(entry), {
          method: 'POST',
          headers: this._headers(),
          body: entry.body,
          keepalive: true,
          credentials: 'same-origin',
        }).catch(() => {});
      } catch (_) {
        // Some browsers throw synchronously when the keepalive quota is hit.
        break;
      }
    }
  }

  /** Stop timers and listeners (tests, or when the app is torn down). */
  dispose() {
    clearTimeout(this._timer);
    this._timer = null;
    if (typeof window !== 'undefined') {
      window.removeEventListener('online', this._onOnline);
      window.removeEventListener('pagehide', this._onPageHide);
    }
  }

  // --- sending -------------------------------------------------------------

  _url(entry) {
    return `${this.apiBase}/assignments/${encodeURIComponent(this.assignmentId)}/${entry.path}`;
  }

  _headers() {
    return { 'Content-Type': 'application/json', Authorization: `Bearer ${this.token}`, ...LANGUAGE };
  }

  _emit() {
    if (this.onChange) {
      try { this.onChange(this); } catch (e) { console.error(e); }
    }
    if (!this._sending && this.pending === 0) {
      const waiters = this._idleWaiters.splice(0);
      waiters.forEach((resolve) => resolve());
    }
  }

  _retryNow() {
    if (this._timer === null) return;
    clearTimeout(this._timer);
    this._timer = null;
    this.nextRetryAt = null;
    this._pump();
  }

  _schedule(delayMs) {
    this.nextRetryAt = Date.now() + delayMs;
    this._timer = setTimeout(() => {
      this._timer = null;
      this.nextRetryAt = null;
      this._pump();
    }, delayMs);
    this._emit();
  }

  async _pump() {
    // One request in flight at a time; during a backoff wait new responses just queue up.
    if (this._sending || this._timer !== null) return;
    this._sending = true;
    try {
      for (;;) {
        const entry = this._load()[0];
        if (!entry) break;
        const outcome = await this._sendOne(entry);
        if (outcome.retryAfter !== undefined) {
          this._failures += 1;
          const delay = Math.min(this.maxDelayMs, Math.max(
            outcome.retryAfter || 0,
            backoffDelay(this._failures, { baseDelayMs: this.baseDelayMs, maxDelayMs: this.maxDelayMs, random: this.random }),
          ));
          this._sending = false;
          this._schedule(delay);
          return;
        }
        this._failures = 0;
        this.lastError = null;
      }
    } finally {
      this._sending = false;
    }
    this._emit();
  }

  /** One attempt.  Returns {} when the response left the queue, {retryAfter} when it must be retried. */
  async _sendOne(entry) {
    const controller = typeof AbortController === 'function' ? new AbortController() : null;
    const timeout = controller ? setTimeout(() => controller.abort(), this.requestTimeoutMs) : null;
    let response;
    try {
      response = await this.fetch(this._url(entry), {
        method: 'POST',
        headers: this._headers(),
        body: entry.body,
        credentials: 'same-origin',
        signal: controller ? controller.signal : undefined,
      });
    } catch (error) {
      // Network failure, DNS, offline, aborted by our timeout: the server may or
      // may not have stored it -- resending is safe either way.
      this.lastError = navigator.onLine === false ? 'offline' : 'network error';
      return { retryAfter: null };
    } finally {
      if (timeout) clearTimeout(timeout);
    }
    const answer = await readJson(response);
    const meta = { id: entry.id, path: entry.path };
    if (response.ok) {
      // 201 "stored" and 200 "duplicate" both mean the server has this response.
      this._remove(entry.id);
      this._settle(entry, 'resolve', answer || {});
      if (this.onDelivered) {
        try { this.onDelivered(JSON.parse(entry.body), answer || {}, meta); } catch (e) { console.error(e); }
      }
      this._emit();
      return {};
    }
    if (isTransientStatus(response.status)) {
      this.lastError = response.status === 429 ? 'rate limited' : `server error ${response.status}`;
      return { retryAfter: retryAfterMs(response) };
    }
    // Any other 4xx will fail the same way every time: drop it, and tell the UI.
    const error = ApiError.fromResponse(response.status, answer,
                                        response.statusText || t('The server refused this response.'));
    this._remove(entry.id);
    this._settle(entry, 'reject', error);
    if (this.onRejected) {
      try { this.onRejected(JSON.parse(entry.body), error, meta); } catch (e) { console.error(e); }
    }
    this._emit();
    return {};
  }

  _settle(entry, how, value) {
    const waiter = this._waiters.get(entry.id);
    if (!waiter) return; // queued by an earlier page load: nobody awaits it
    this._waiters.delete(entry.id);
    waiter[how](value);
  }
}
