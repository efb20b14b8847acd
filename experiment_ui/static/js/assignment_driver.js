// The assignment driver: ONE module that runs a worker's assignment in the browser, whatever the
// paradigm -- as jsPsych's core runs a timeline of plugins.  It owns everything between trials:
//
//   - the page's chrome (progress, notice, status and upload lines; paradigms.js says where they go)
//   - the stages: the server is the source of truth for where the worker is (State, GET /state).
//     Stages the browser runs (a paradigm's `stages`) go to their plugin; every other stage --
//     consent, instructions, the end (completed, stopped, disqualified, full) -- is a page the
//     server renders, so the driver hands over to it (a guarded reload, after the queue drained);
//   - the trials of a stage: the first open trial that was not answered in this page load (nor is
//     still queued from an earlier one, so a reload asks nothing twice) goes to the plugin, whose
//     `finish(body)` puts the response in the queue; when none is left, the driver waits for the
//     queue and asks the server again (with backoff, if the server has not caught up yet);
//   - ONE response queue (response_queue.js) for every response of every plugin, and what its
//     answers mean: a refusal is reported (unless the plugin calls it harmless) and re-synced, a
//     stop the server reports in the answer to an un-awaited response is followed at once;
//   - errors: GET /state is retried for as long as the network or the server is down; a stimulus
//     that does not load is retried after a notice; anything else ends in a notice.
//
// Plugins (pc_trial.js, page_done.js, calibration.js, motion_trial.js) declare their parameters
// and run one trial; they never talk to the queue, the tab guard or the stage logic.

import { sleep, el, guardedReload, StimulusLoadError } from './dom.js';
import { t, tn } from './i18n.js';
import { ApiError, backoffDelay, callApi, fetchAssignmentFile, fetchStateRetrying } from './assignment_api.js';
import { ResponseQueue, uuid4 } from './response_queue.js';
import { startGuarded } from './tab_guard.js';
import { PARADIGMS } from './paradigms.js';
import { DisplayMonitor, info as monitorInfo, remoteDesktopCues } from './display_monitor.js';

export const info = Object.freeze({
  name: 'assignment-driver',
  version: 1,
  description: 'Stages, response queue, resume and hand-over of one assignment, for every paradigm.',
  parameters: Object.freeze({
    reload_guard_ms: { type: 'int', default: 10000,
      description: 'Do not reload again for the same stage within this time (stops a reload loop if server and page disagree).' },
    handover_wait_ms: { type: 'int', default: 5000,
      description: 'Before handing over to a server page, give queued responses this long to go out (they stay stored anyway).' },
    load_retry_ms: { type: 'int', default: 3000,
      description: 'After a stimulus failed to load, try again after this long.' },
    saving_shown_after_ms: { type: 'int', default: 1000,
      description: 'Say "Saving n answers" only once a response has waited this long (no flicker on every click).' },
  }),
});

/**
 * Parameters of a module: its declared defaults, overridden by those entries of `given` that it declares.
 * @param {Object<string, {default: *}>} declared  a module's `info.parameters`
 * @param {object} [given]  e.g. the page's `config.parameters`
 */
export function parameters(declared, given = {}) {
  const out = {};
  for (const [name, spec] of Object.entries(declared || {})) {
    out[name] = given && Object.hasOwn(given, name) ? given[name] : spec.default;
  }
  return out;
}

const saving = () => t('Saving your answers… please keep this page open.');

export class AssignmentDriver {
  /**
   * @param {HTMLElement} root
   * @param {{apiBase: string, assignmentId: string, token: string, parameters?: object}} config
   * @param {object} paradigm  an entry of PARADIGMS
   */
  constructor(root, config, paradigm) {
    this.root = root;
    this.config = config;
    this.paradigm = paradigm;
    this.params = parameters(info.parameters, config.parameters);
    this.apiBase = String(config.apiBase || '/api/v1').replace(/\/+$/, '');
    this.assignmentId = String(config.assignmentId);
    this.token = config.token;
    this.state = null;
    this.answered = new Set();  // trial ids answered in this page load (the server may not know yet)
    this.awaited = new Set();   // ids of queued responses whose plugin waits for the answer
    this.plugins = new Map();   // plugin class -> its instance (one per page load)
    this.activePlugin = null;
    this.current = null;        // {stage, trial, plugin, awaiting}: the trial (or screen) running now
    this.controller = null;     // aborts the running stage loop when the driver follows a new State
    this.resyncing = null;      // the promise of a re-sync in flight
    this.stale = false;         // a response awaited by its plugin was refused: ask the server next
    this.idleRounds = 0;        // State asked for in vain (nothing open yet): backoff exponent
    this.answeredState = null;  // the State that came with the latest answer (the one completing a page)
    this.leaving = false;       // handing over to a server page
    this.pendingTimer = null;
    this.pendingSince = null;
    // Quiet-or-not of refusals, by endpoint (responses queued by an earlier page load included).
    this.routes = new Map();
    for (const stage of Object.values(paradigm.stages)) {
      const route = stage.plugin.info.response;
      if (route) this.routes.set(route.path, route);
    }
    this.chrome = this.buildChrome(paradigm.frame);
    // Before the plugins: while a display change pauses the trial, key input stops at the monitor.
    this.monitor = new DisplayMonitor({
      config: config.displayMonitor,
      post: (body) => this.api('POST', '/display-events', body),
      onAnswer: (answer) => this.onDisplayAnswer(answer),
      params: parameters(monitorInfo.parameters, config.parameters),
      recalibrates: (paradigm.display || {}).zoom === 'recalibrates',
      storageKey: `perceptlab.display.${this.assignmentId}`,
    });
    // Every plugin of the paradigm exists from the start (one instance per page load): e.g. the
    // paired-comparison plugin tracks held keys before its first pair appears.
    for (const stage of Object.values(paradigm.stages)) this.pluginFor(stage.plugin);
    this.queue = new ResponseQueue({
      apiBase: this.apiBase,
      assignmentId: this.assignmentId,
      token: this.token,
      onChange: () => this.renderPending(),
      onDelivered: (body, answer, entry) => this.onDelivered(body, answer, entry),
      onRejected: (body, error, entry) => this.onRejected(body, error, entry),
    });
    this.renderPending();
  }

  /** The plugin running the current stage (tests and debugging read its `current` trial). */
  get plugin() {
    return this.activePlugin;
  }

  // --- chrome ------------------------------------------------------------------

  buildChrome(frame) {
    const part = (spec, tag, attrs = {}) => (spec
      ? el(tag, { id: spec.id, class: spec.class, style: spec.style, ...attrs }) : null);
    const progress = part(frame.progress, 'p');
    const prompt = part(frame.prompt, 'div');
    const pending = part(frame.pending, 'p', { 'aria-live': 'polite', 'data-pending': '0' });
    const notice = part(frame.notice, 'div', { role: 'alert', hidden: true });
    const status = part(frame.status, 'p', { 'aria-live': 'polite', text: t('Loading…') });
    const stage = part(frame.stage, 'div');
    const header = frame.header ? el('header', { class: frame.header.class }, progress, prompt, pending) : null;
    this.root.classList.add(frame.root);
    this.root.replaceChildren(...(header ? [header, notice, status, stage] : [progress, notice, status, stage, pending]));
    return { header, progress, prompt, pending, notice, status, stage };
  }

  /** The chrome above the content, whose size changes the room left for it. */
  chromeAbove() {
    return [this.chrome.header, this.chrome.notice].filter(Boolean);
  }

  /** Where the content starts (CSS px from the top of the page): below the notice if shown, else the header. */
  contentTop() {
    const above = this.chrome.notice.hidden ? this.chrome.header : this.chrome.notice;
    return above ? above.getBoundingClientRect().bottom + window.scrollY : 0;
  }

  setStatus(text) {
    this.chrome.status.textContent = text;
    this.chrome.status.hidden = !text;
  }

  showNotice(text) {
    this.chrome.notice.textContent = text;
    this.chrome.notice.hidden = !text;
  }

  /** The progress line, and data attributes on it (e.g. {pageKind: 'quiz'}). */
  setProgress(text, data = {}) {
    this.chrome.progress.textContent = text;
    Object.assign(this.chrome.progress.dataset, data);
  }

  renderPending() {
    const pendingEl = this.chrome && this.chrome.pending;
    if (!pendingEl || !this.queue) return;
    const n = this.queue.pending;
    const retrying = this.queue.retrying;
    pendingEl.dataset.pending = String(n);
    pendingEl.dataset.retrying = retrying ? 'true' : 'false';
    if (this.paradigm.frame.pending.shows === 'when-retrying') {
      pendingEl.textContent = n && retrying
        ? tn('%(num)s answer waiting to be saved · retrying', '%(num)s answers waiting to be saved · retrying', n) : '';
      return;
    }
    // A response normally uploads within a few hundred ms; announcing every one of them would make
    // the bar flicker on each click, so "Saving" appears only once a response has waited a while.
    clearTimeout(this.pendingTimer);
    if (n > 0 && !retrying) {
      this.pendingSince = this.pendingSince || performance.now();
      const wait = this.params.saving_shown_after_ms - (performance.now() - this.pendingSince);
      if (wait > 0) {
        this.pendingTimer = setTimeout(() => this.renderPending(), wait);
        return;
      }
    } else if (n === 0) {
      this.pendingSince = null;
    }
    // Kept short (one line in the top bar) so the content below never jumps; details in the tooltip.
    if (n === 0) {
      pendingEl.textContent = `✓ ${t('All answers saved')}`;
      pendingEl.title = '';
    } else if (retrying) {
      pendingEl.textContent = tn('%(num)s answer waiting · retrying', '%(num)s answers waiting · retrying', n);
      pendingEl.title = t('Connection problem. Your answers are kept in this browser and uploaded automatically; you can keep working.');
    } else {
      pendingEl.textContent = tn('Saving %(num)s answer…', 'Saving %(num)s answers…', n);
      pendingEl.title = '';
    }
  }

  // --- server ------------------------------------------------------------------

  api(method, path, body) {
    return callApi(this, method, path, body);
  }

  /** {@link callApi}'s wait while the server answers 503 with Retry-After (0: it answers again). */
  onWait(ms) {
    this.showNotice(ms > 0
      ? t('The server is briefly unavailable. Trying again in %(seconds)s s… Your answers are kept.', { seconds: Math.ceil(ms / 1000) })
      : '');
  }

  /** A binary file of this assignment (e.g. an RDK trial's dots), as an ArrayBuffer. */
  fetchFile(path) {
    return fetchAssignmentFile(this, path);
  }

  /** GET /state, retried with backoff for as long as the network or server is down. */
  async fetchState() {
    this.answeredState = null; // what comes back is newer
    let retried = false;
    const state = await fetchStateRetrying(this, (delay) => {
      retried = true;
      this.showNotice(t('Cannot reach the server. Trying again in %(seconds)s s… Your answers are kept.', { seconds: Math.ceil(delay / 1000) }));
    });
    if (retried) this.showNotice('');
    return state;
  }

  /** {@link fetchState}, or null once a refusal (a bad token, a gone assignment) is shown as fatal. */
  async fetchStateOrFail() {
    try {
      return await this.fetchState();
    } catch (error) {
      this.fatal(error);
      return null;
    }
  }

  postEnvironment() {
    const body = {
      window: { width: window.innerWidth, height: window.innerHeight, dpr: window.devicePixelRatio || 1 },
      screen: { width: window.screen.width, height: window.screen.height },
      user_agent: navigator.userAgent,
      display: remoteDesktopCues(),
    };
    // Informative only: a failure must never block the worker (and it is no response: not queued).
    this.api('POST', '/environment', body).catch((error) => console.warn('environment not recorded', error));
  }

  /** Trials answered here but maybe not yet known to the server: this page load's answers and
   *  responses still queued from an earlier load (after a reload they must not be asked again). */
  localAnswers() {
    const ids = new Set(this.answered);
    for (const body of this.queue.pendingBodies()) if (body.trial_id !== undefined) ids.add(body.trial_id);
    return ids;
  }

  /**
   * Milliseconds since performance.now() time `t0` that the trial was on screen: the time a display change
   * paused it left out (display_monitor.js). Every plugin measures its response times with it.
   */
  activeSince(t0, now = performance.now()) {
    return Math.max(0, now - t0 - this.monitor.pausedBetween(t0, now));
  }

  /** The server's answer to a display event: a worker past the study's limit is turned away; follow it. */
  onDisplayAnswer(answer) {
    const stage = answer && answer.stage;
    if (stage && this.state && stage !== this.state.stage && !this.paradigm.stages[stage]) this.resync();
  }

  // --- flow --------------------------------------------------------------------

  async run() {
    this.monitor.begin();
    this.postEnvironment();
    const state = await this.fetchStateOrFail();
    if (state) this.follow(state);
  }

  /** Show whatever `state` asks for, and go on from there until the worker leaves for a server page. */
  async follow(state) {
    if (this.controller) this.controller.abort();
    const controller = this.controller = new AbortController();
    const { signal } = controller;
    try {
      while (state && !signal.aborted) {
        if (!this.state || state.stage !== this.state.stage) this.idleRounds = 0;
        this.state = state;
        this.root.dataset.stage = state.stage;
        const stage = this.paradigm.stages[state.stage];
        if (!stage) {
          await this.handOver(state);
          return;
        }
        state = await this.step(stage, signal);
      }
    } catch (error) {
      if (!signal.aborted) this.fatal(error);
    }
  }

  /** The page's instance of `Plugin`, with its parameters (declared defaults, overridden by the config's). */
  pluginFor(Plugin) {
    if (!this.plugins.has(Plugin)) {
      this.plugins.set(Plugin, new Plugin(this, parameters(Plugin.info.parameters, this.config.parameters)));
    }
    return this.plugins.get(Plugin);
  }

  /** Make `Plugin`'s instance the one on screen (null: none); the one before takes its things off. */
  activate(Plugin) {
    const plugin = Plugin ? this.pluginFor(Plugin) : null;
    if (this.activePlugin && this.activePlugin !== plugin && this.activePlugin.clear) this.activePlugin.clear();
    this.activePlugin = plugin;
    return plugin;
  }

  /**
   * One step of a stage: its next open trial (or its screen) through the plugin.
   * @returns {Promise<object|null>} the State to follow next (null once `signal` aborted)
   */
  async step(stage, signal) {
    const plugin = this.activate(stage.plugin);
    const series = typeof stage.trials === 'function';
    this.monitor.arm(series); // display changes pause trials, not the screens between them
    let trial = null;
    let next = null;
    if (series) {
      const local = this.localAnswers();
      const open = stage.trials(this.state).filter((t) => !local.has(t.trial_id));
      if (!open.length) return this.awaitServer(plugin, signal);
      [trial, next = null] = open;
      this.idleRounds = 0;
    }
    const current = this.current = { stage: this.state.stage, trial, plugin, awaiting: true };
    let result;
    try {
      result = await plugin.run(this.chrome.stage, series ? trial : stage.trial(this.state), {
        finish: (body, options) => this.finish(current, body, options),
        next,
        signal,
      });
    } catch (error) {
      if (signal.aborted) return null;
      if (error instanceof StimulusLoadError) return this.retryAfterLoadFailure(plugin, error, signal);
      throw error;
    } finally {
      if (this.current === current) this.current = null;
    }
    if (signal.aborted) return null;
    if (this.resyncing) {
      // A re-sync is under way (a refusal, a stop): it decides what comes next.
      await this.resyncing;
      return signal.aborted ? null : this.fetchState();
    }
    // A screen whose action answered with the new State (e.g. "continue" on page_done).
    if (!series && result && typeof result.stage === 'string') return result;
    if (!series || stage.resync === 'each-trial' || this.stale) {
      this.stale = false;
      return this.fetchState();
    }
    return this.state; // the page's trials are known: walk on without asking
  }

  /**
   * The plugin's response: into the queue at once (stored before it is sent).
   * @param {{awaitAnswer?: boolean}} options  awaitAnswer: the plugin needs the server's answer (feedback)
   * @returns {Promise<object>|undefined} with awaitAnswer, the server's answer (an ApiError if refused)
   */
  finish(current, body, { awaitAnswer = false } = {}) {
    const route = current.plugin.constructor.info.response;
    if (!route) throw new Error(`the ${current.plugin.constructor.info.name} plugin declares no response route`);
    const id = uuid4();
    current.awaiting = false;
    if (current.trial) this.answered.add(current.trial.trial_id);
    if (awaitAnswer) this.awaited.add(id);
    const delivered = this.queue.enqueue(route, body, { id });
    if (!awaitAnswer) return undefined;
    // Forgotten only after onDelivered/onRejected ran (they run in the same task as the settling).
    const forget = () => this.awaited.delete(id);
    delivered.then(forget, forget);
    return delivered;
  }

  onDelivered(body, answer, entry) {
    // Only the latest answer's State is current: an answer without one (or a fetch) supersedes it.
    this.answeredState = (answer && answer.state) || null;
    if (this.awaited.has(entry.id)) return; // its plugin reads the answer and moves on by itself
    // Responses nobody waits for (main-trial votes; responses queued by an earlier page load): a
    // stop caused by a hidden gold answer arrives here.  Follow it at once instead of letting the
    // worker answer the rest of the page for nothing.
    const stage = answer && answer.stage;
    if (stage && this.state && stage !== this.state.stage && !this.paradigm.stages[stage]) this.resync();
  }

  onRejected(body, error, entry) {
    console.warn('response rejected', body, error);
    // The server did not take it, so the server's view of that trial wins.
    if (body && body.trial_id !== undefined) this.answered.delete(body.trial_id);
    const route = this.routes.get(entry.path);
    if (!(route && route.quietRejection && route.quietRejection(error))) {
      this.showNotice(t('One answer could not be saved: %(reason)s', { reason: error.message }));
    }
    // Whatever happened (study paused, stage moved on), the server knows where we stand: ask it when
    // the plugin waiting for this answer is done, or now.
    if (this.awaited.has(entry.id)) this.stale = true;
    else this.resync();
  }

  /**
   * Ask the server where things stand, and follow it -- unless the trial on screen is still open
   * there and unanswered: then it stays (showing it again would restart its clock).
   */
  resync() {
    if (this.leaving) return Promise.resolve();
    if (!this.resyncing) {
      const controller = this.controller;
      this.resyncing = (async () => {
        const state = await this.fetchStateOrFail();
        if (!state) return;
        if (this.leaving || this.controller !== controller) return; // the driver moved on meanwhile
        const current = this.current;
        if (current && current.awaiting && this.stillOpen(state, current)) {
          this.state = state;
          if (current.plugin.update) current.plugin.update();
          return;
        }
        this.follow(state);
      })().finally(() => { this.resyncing = null; });
    }
    return this.resyncing;
  }

  stillOpen(state, current) {
    if (state.stage !== current.stage) return false;
    if (!current.trial) return true; // a screen of the same stage
    const stage = this.paradigm.stages[state.stage];
    return stage.trials(state).some((t) => t.trial_id === current.trial.trial_id);
  }

  /** Every open trial is answered here: wait until the queue is empty, then ask the server. */
  async awaitServer(plugin, signal) {
    if (plugin.clear) plugin.clear();
    this.setStatus(this.queue.pending ? saving() : t('Loading…'));
    await this.queue.whenIdle();
    if (signal.aborted) return null;
    const answered = this.answeredState;
    this.answeredState = null;
    if (answered && this.idleRounds === 0) {
      // The answer that completed the page brought the State: no need to ask for it.
      this.idleRounds += 1;
      return answered;
    }
    if (this.idleRounds > 0) {
      // The server has not moved on yet (should be rare): ask again later instead of spinning.
      const confirming = (this.paradigm.texts || {}).confirming;
      if (confirming) this.setStatus(confirming);
      await sleep(backoffDelay(this.idleRounds));
      if (signal.aborted) return null;
    }
    this.idleRounds += 1;
    return this.fetchState();
  }

  async retryAfterLoadFailure(plugin, error, signal) {
    console.error(error);
    if (plugin.clear) plugin.clear();
    this.setStatus('');
    this.showNotice(error.message);
    await sleep(this.params.load_retry_ms);
    if (signal.aborted) return null;
    this.showNotice('');
    return this.fetchState();
  }

  /** A stage the server renders (consent, instructions, the end): reload once the queue drained. */
  async handOver(state) {
    this.leaving = true;
    this.monitor.end();
    this.activate(null);
    this.setStatus(state.message || t('Loading…'));
    // Give queued responses a moment to go out before leaving; they stay stored anyway.
    await Promise.race([this.queue.whenIdle(), sleep(this.params.handover_wait_ms)]);
    if (!guardedReload(this.assignmentId, state.stage, this.params.reload_guard_ms)) {
      this.setStatus('');
      this.showNotice(t('This page is out of date. Please reload it (F5).'));
    }
  }

  fatal(error) {
    console.error(error);
    this.monitor.end();
    if (this.controller) this.controller.abort();
    this.activate(null);
    this.setStatus('');
    const expired = error instanceof ApiError && (error.status === 403 || error.status === 401);
    this.showNotice(expired
      ? t('This study link is no longer valid. Please open the study again from the page where you accepted it.')
      : t('Something went wrong: %(reason)s. Please reload the page; your answers so far are kept.', { reason: error.message }));
  }
}

/**
 * Run the assignment in `root` with the paradigm `config.paradigm` (a key of PARADIGMS) -- unless
 * another tab already runs the same assignment (tab_guard.js): then that tab's notice shows instead.
 * @param {HTMLElement} root
 * @param {{paradigm: string, apiBase: string, assignmentId: string, token: string, parameters?: object}} config
 * @returns {Promise<AssignmentDriver|null>} the driver (also window.assignmentDriver, for debugging and
 *          tests), or null in a second tab
 */
export function start(root, config) {
  const paradigm = PARADIGMS[config.paradigm];
  if (!paradigm) throw new Error(`unknown paradigm ${JSON.stringify(config.paradigm)}`);
  return startGuarded((r, c) => {
    const driver = new AssignmentDriver(r, c, paradigm);
    window.assignmentDriver = driver;
    driver.run();
    return driver;
  }, root, config);
}
