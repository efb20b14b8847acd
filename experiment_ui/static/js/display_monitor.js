// The display monitor: ONE module, started by the assignment driver on every page it runs, whatever the
// paradigm (server half: server/paradigms/display_monitor.py).  It watches the display the trials are seen on:
//
//   - the zoom or devicePixelRatio (a matchMedia resolution query, re-armed at each change),
//   - the screen: its size or available area (the window moved to another monitor; checked on resize and
//     every `check_ms`),
//   - the window: below the study's requirement (the entry pages' own rule, device_check.js neededWindow).
//
// A change pauses the trial: an overlay covers the page and asks for the display back, pointer and key input
// never reach the trial plugins, and the time paused is kept (`pausedBetween`) so that the driver's
// `activeSince` leaves it out of every response time.  The pause and its end are posted to
// POST /display-events (the same event_id on a retry: counted once); past the study's
// `[viewing] max_display_changes` the server turns the worker away, and the driver follows that State.

import { el } from './dom.js';
import { neededWindow } from './device_check.js';
import { t } from './i18n.js';
import { backoffDelay } from './assignment_api.js';
import { uuid4 } from './response_queue.js';

export const info = Object.freeze({
  name: 'display-monitor',
  version: 1,
  description: 'Pauses the trial while the zoom, the screen or a too small window differs from the start.',
  parameters: Object.freeze({
    display_check_ms: { type: 'int', default: 1000,
      description: 'How often the screen is compared with the start (a window moved to another monitor fires no event).' },
    display_post_attempts: { type: 'int', default: 5,
      description: 'Tries of each display event post (the same event_id: the server counts it once).' },
  }),
});

// Device-pixel ratios closer than this are the same (browsers report e.g. 1.2500000298).
const DPR_TOLERANCE = 0.01;

/** The display as the page sees it now (kept in one place so that the rule is a pure function). */
export function displayNow() {
  const screen = window.screen || {};
  return {
    dpr: window.devicePixelRatio || 1,
    width: window.innerWidth,
    height: window.innerHeight,
    screen: { width: screen.width, height: screen.height, availWidth: screen.availWidth, availHeight: screen.availHeight },
  };
}

function sameScreen(a, b, scale = 1) {
  return ['width', 'height', 'availWidth', 'availHeight']
    .every((key) => Math.abs(a[key] * scale - b[key]) <= Math.max(1, scale));
}

/** A "screen" exactly the window's size follows the window (an emulated device, a kiosk): not a monitor. */
function screenFollowsWindow(d) {
  return d.screen.width === d.width && d.screen.height === d.height;
}

/** Whether display `d` offers the window `need` (null: no requirement). */
export function fits(d, need) {
  return !need || (d.width >= need.width && d.height >= need.height);
}

export function ratioChanged(start, now) {
  return Math.abs(now.dpr - start.dpr) > DPR_TOLERANCE;
}

/**
 * What changed between `start` and `now` that pauses a trial, or null.
 * @param {object} start  displayNow() when monitoring began
 * @param {object} now    displayNow()
 * @param {{width: number, height: number}|null} need  the smallest window the study needs at now's ratio
 * @param {boolean} [startFits]  the window met the need at the start: only then does falling below it count
 *        (a page opened too small shows its paradigm's own "make the window larger")
 * @returns {'zoom'|'screen'|'window'|null}
 */
export function displayChange(start, now, need, startFits = true) {
  if (ratioChanged(start, now)) {
    // A browser zoom keeps the screen: in CSS px (Chromium) or in device px (Firefox scales screen.width).
    const kept = sameScreen(start.screen, now.screen) || sameScreen(start.screen, now.screen, start.dpr / now.dpr);
    return kept ? 'zoom' : 'screen';
  }
  if (!sameScreen(start.screen, now.screen) && !(screenFollowsWindow(start) && screenFollowsWindow(now))) {
    return 'screen';
  }
  if (startFits && !fits(now, need)) return 'window';
  return null;
}

/**
 * Cues of a remote or virtual session, for the remote-desktop hint (server/paradigms/remote_hint.py decides
 * which fired; recorded only, never a reason to refuse): colour depth, reduced motion, forced colours and the
 * WebGL renderer's name.
 */
export function remoteDesktopCues() {
  const media = (query) => Boolean(window.matchMedia && window.matchMedia(query).matches);
  let renderer = null;
  try {
    const gl = document.createElement('canvas').getContext('webgl');
    const debug = gl && gl.getExtension('WEBGL_debug_renderer_info');
    renderer = gl ? String(gl.getParameter(debug ? debug.UNMASKED_RENDERER_WEBGL : gl.RENDERER)).slice(0, 200) : null;
  } catch (_) { /* no WebGL: no renderer cue */ }
  return {
    color_depth: Number.isInteger(window.screen.colorDepth) ? window.screen.colorDepth : null,
    reduced_motion: media('(prefers-reduced-motion: reduce)'),
    forced_colors: media('(forced-colors: active)'),
    renderer,
  };
}

/** The worker-facing words of a pause. */
export function pauseText(change, now, need) {
  if (change === 'zoom') {
    return t('The page zoom changed. Please set it back as it was (Ctrl+0, or ⌘+0 on a Mac, resets it) to go on.');
  }
  if (change === 'screen') {
    return t('The window moved to another screen, or the screen changed. Please move the window back to go on.');
  }
  return t('The window is too small for this study: it needs at least %(width)s × %(height)s pixels and is '
    + '%(now_width)s × %(now_height)s. Please make it larger to go on.',
  { width: need.width, height: need.height, now_width: now.width, now_height: now.height });
}

// Input events that must not reach a paused trial (pointer and touch are caught by the overlay itself).
const BLOCKED = ['keydown', 'keyup', 'keypress'];

export class DisplayMonitor {
  /**
   * @param {object} options
   * @param {{requirement?: object, max_changes?: number}|null} options.config  the page's `displayMonitor`
   * @param {(body: object) => Promise<object>} options.post  POST /display-events (the driver's api)
   * @param {(answer: object) => void} options.onAnswer  the server's answer (its `stage` may be stopped)
   * @param {object} options.params  this module's parameters
   * @param {boolean} [options.recalibrates]  the paradigm measures the screen again after a zoom (paradigms.js
   *        `display.zoom`): a zoom is counted, never paused, and each series of trials starts from the display
   * @param {string} [options.storageKey]  where the start and a pause survive a reload (sessionStorage): a
   *        reload neither makes a changed display the new start nor counts a pause twice
   * @param {() => object} [options.now]  displayNow (tests)
   */
  constructor({ config, post, onAnswer, params, recalibrates = false, storageKey = null, now = displayNow }) {
    this.storageKey = storageKey;
    this.recalibrates = recalibrates;
    this.armed = false;
    this.requirement = (config && config.requirement) || null;
    this.maxChanges = config && Number.isInteger(config.max_changes) ? config.max_changes : -1;
    this.post = post;
    this.onAnswer = onAnswer;
    this.params = params;
    this.now = now;
    this.start = null;
    this.change = null;        // what pauses the trial now ('zoom' | 'screen' | 'window'), or null
    this.pausedAt = null;      // performance.now() when the current pause began
    this.pauses = [];          // [[from, to]] of ended pauses, performance.now() times
    this.changes = 0;          // counted by the server, as its latest answer says
    this.overlay = null;
    this.timer = null;
    this.media = null;
    this.check = () => this.update();
    this.block = (event) => {
      if (this.change === null) return;
      event.stopImmediatePropagation();
      // Ctrl/⌘ combinations are left to the browser: Ctrl+0 is how the worker restores the zoom.
      if (!(event.ctrlKey || event.metaKey)) event.preventDefault();
    };
    // Capturing on window, registered before any plugin exists (the driver makes the monitor first): key input
    // stops here while paused.
    for (const type of BLOCKED) window.addEventListener(type, this.block, true);
  }

  /** Listen for changes (they count only while armed: during trials). */
  begin() {
    if (this.timer !== null) return;
    this.recall();
    window.addEventListener('resize', this.check);
    this.timer = setInterval(this.check, this.params.display_check_ms);
    this.watchRatio();
    this.update();
  }

  /**
   * Trials (`series`) or a screen between them (page done, calibration) start: the display at the first trial
   * of this page load is the one every trial must keep (a paradigm that recalibrates: at each series' start).
   */
  arm(series) {
    if (series && !this.armed && (this.start === null || (this.recalibrates && this.change === null))) {
      this.rebase(this.now());
    }
    this.armed = series;
    if (series) this.update();
  }

  /** The display the trials must keep from now on. */
  rebase(now) {
    this.start = now;
    this.startFits = fits(now, this.need(now));
    this.remember();
  }

  /** Keep the start and the pause on now for this tab's next page load (sessionStorage). */
  remember() {
    if (!this.storageKey) return;
    const pause = this.change === null ? null
      : { change: this.change, since: Date.now() - (performance.now() - this.pausedAt) };
    try {
      sessionStorage.setItem(this.storageKey, JSON.stringify({ start: this.start, startFits: this.startFits, pause }));
    } catch (_) { /* storage unusable: a reload starts afresh */ }
  }

  /** The start and the pause an earlier load of this page left (a pause goes on: its resumption is posted). */
  recall() {
    let kept = null;
    try { kept = this.storageKey && JSON.parse(sessionStorage.getItem(this.storageKey) || 'null'); } catch (_) { /* none */ }
    if (!kept || !kept.start) return;
    this.start = kept.start;
    this.startFits = kept.startFits;
    if (kept.pause) {
      this.change = kept.pause.change;
      this.pausedAt = performance.now() - Math.max(0, Date.now() - kept.pause.since);
    }
  }

  /** Stop watching (the driver hands over to a server page). */
  end() {
    clearInterval(this.timer);
    window.removeEventListener('resize', this.check);
    for (const type of BLOCKED) window.removeEventListener(type, this.block, true);
    if (this.media) this.media.removeEventListener('change', this.check);
    if (this.overlay) this.overlay.remove();
  }

  get paused() {
    return this.change !== null;
  }

  /** A resolution query that stops matching when the ratio changes: zoom fires it at once. */
  watchRatio() {
    if (this.media) this.media.removeEventListener('change', this.check);
    if (!window.matchMedia) return;
    this.media = window.matchMedia(`(resolution: ${window.devicePixelRatio || 1}dppx)`);
    this.media.addEventListener('change', this.check);
  }

  need(now) {
    return this.requirement ? neededWindow(this.requirement, now.dpr) : null;
  }

  /** Compare the display with the start; pause, update the overlay or resume. */
  update() {
    if (!this.start || (!this.armed && this.change === null)) return;
    const now = this.now();
    if (this.media && !this.media.matches) this.watchRatio();
    const need = this.need(now);
    if (this.recalibrates && this.change === null && ratioChanged(this.start, now)) {
      // Counted, not paused: the paradigm takes the trial off and measures the screen again at the new ratio.
      const change = displayChange(this.start, now, need, this.startFits);
      this.rebase(now);
      this.send({ event: 'paused', change, ...this.sizes(now) })
        .then(() => this.send({ event: 'resumed', paused_ms: 0, ...this.sizes(now) }));
      return;
    }
    const change = displayChange(this.start, now, need, this.startFits);
    if (change && this.change === null) this.pause(change, now);
    else if (!change && this.change !== null) this.resume(now);
    if (this.change !== null) this.render(change || this.change, now, need);
  }

  pause(change, now) {
    this.change = change;
    this.pausedAt = performance.now();
    this.remember();
    this.send({ event: 'paused', change, ...this.sizes(now) });
  }

  resume(now) {
    const end = performance.now();
    const pausedMs = Math.max(0, Math.round(end - this.pausedAt));
    this.pauses.push([this.pausedAt, end]);
    this.change = null;
    this.pausedAt = null;
    this.remember();
    if (this.overlay) this.overlay.hidden = true;
    this.send({ event: 'resumed', paused_ms: pausedMs, ...this.sizes(now) });
  }

  sizes(now) {
    return { window: { width: now.width, height: now.height, dpr: now.dpr },
      screen: { width: now.screen.width, height: now.screen.height } };
  }

  render(change, now, need) {
    if (!this.overlay) {
      this.message = el('p', { class: 'display-paused-text' });
      this.count = el('p', { class: 'display-paused-count' });
      this.overlay = el('div', { class: 'display-paused', role: 'alertdialog', 'aria-modal': 'true',
        'aria-labelledby': 'display-paused-title' },
      el('div', { class: 'display-paused-card' },
        el('h2', { id: 'display-paused-title', text: t('The study is paused') }), this.message, this.count));
      document.body.append(this.overlay);
    }
    this.overlay.hidden = false;
    this.overlay.dataset.change = change;
    this.message.textContent = pauseText(change, now, need);
    this.count.textContent = this.maxChanges >= 0
      ? t('Display changes so far: %(n)s (at most %(max)s are allowed).', { n: this.changes, max: this.maxChanges })
      : '';
  }

  /** Post one event, retried with the same event_id while the network or the server is down. */
  async send(fields) {
    const body = { event_id: uuid4(), ...fields };
    for (let attempt = 1; attempt <= this.params.display_post_attempts; attempt += 1) {
      try {
        const answer = await this.post(body);
        this.changes = answer.display_changes;
        if (this.change !== null) this.update();
        this.onAnswer(answer);
        return;
      } catch (error) {
        // A refusal (4xx but 429) will not change on a retry: the assignment ended, or the body is wrong.
        if (error.status >= 400 && error.status < 500 && error.status !== 429) break;
        await new Promise((resolve) => setTimeout(resolve, backoffDelay(attempt)));
      }
    }
  }

  /** Milliseconds paused between performance.now() times `from` and `to` (a pause still on counts up to `to`). */
  pausedBetween(from, to = performance.now()) {
    const spans = this.pausedAt === null ? this.pauses : [...this.pauses, [this.pausedAt, to]];
    return spans.reduce((sum, [a, b]) => sum + Math.max(0, Math.min(b, to) - Math.max(a, from)), 0);
  }
}
