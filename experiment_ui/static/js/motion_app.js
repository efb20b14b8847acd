// Motion-matching study app (template motion.html): drives the stages
// calibration -> rdk -> main -> done for one assignment.  Like pc_trial.js it
// declares its parameters first, then the code that runs them.
//
// The server is the source of truth: after every response the app asks for
// GET /state again (trials last >= 9 s, so this costs nothing) and shows the first
// unanswered trial of the current block.  Responses go through VoteQueue
// (path "motion-responses"), so a reload or an outage loses nothing; a response
// still queued from an earlier page load is not asked again.
//
// No answers reach the page before the worker gives one: an RDK trial's dots come
// pre-rendered from the server (GET .../motion-trials/{id}/dots, fetched while the worker
// reads the intro or answers the trial before), and a feedback trial's true vector comes
// only in the answer to its stored response.

import { sleep, el, guardedReload } from './dom.js';
import { ApiError, callApi, fetchStateRetrying } from './assignment_api.js';
import { VoteQueue, backoffDelay, uuid4 } from './vote_queue.js';
import { loadTrialAssets, runTrial, showFeedback } from './motion_trial.js';
import { runCalibration } from './calibration.js';

export const info = Object.freeze({
  name: 'motion-study',
  version: 1,
  description: 'Calibration, RDK screening, practice and main motion-matching trials of one assignment.',
  parameters: Object.freeze({
    saving_delay_ms: { type: 'int', default: 600,
      description: 'Show "Saving your answer" only if the server has not answered after this long.' },
    reload_guard_ms: { type: 'int', default: 10000,
      description: 'Do not reload again for the same stage within this time (stops a reload loop).' },
  }),
});


/** What the worker reads before each part (block name x practice/test). */
const INTROS = {
  'rdk:practice': ['Practice: moving dots',
    'A cloud of dots moves in one direction for half a second. Then a small patch of noise appears in the middle. '
    + 'Move the mouse so that the noise moves like the dots: the direction from the centre of the large circle to the '
    + 'mouse is the direction, and the farther from the centre, the faster. The sequence repeats; after at least three '
    + 'repetitions, click to answer. After each practice trial you see the true motion (green) and your answer (purple).'],
  'rdk:test': ['Moving dots',
    'Now the test trials. Answer as accurately as you can; your answers decide whether you can take '
    + 'part in the main study.'],
  'main:practice': ['Practice: movies',
    'A green circle shows where to look. Then a short movie plays; a small green dot flashes on its middle frame at '
    + 'the point to judge. Set the noise patch to move like the scene at that point, at the moment of the dot. '
    + 'After each practice trial you see the true motion (green) and your answer (purple). A trial that is too far '
    + 'off is repeated.'],
  'main:test': ['Movies',
    'Now the main trials, without feedback. Keep the viewing distance from the calibration. '
    + 'You can rest before starting a trial: each one starts when you click.'],
};

class MotionApp {
  constructor(root, config) {
    this.root = root;
    this.params = { ...Object.fromEntries(Object.entries(info.parameters).map(([k, s]) => [k, s.default])),
                    ...(config.parameters || {}) };
    this.apiBase = String(config.apiBase || '/api/v1').replace(/\/+$/, '');
    this.assignmentId = String(config.assignmentId);
    this.token = config.token;
    this.state = null;
    this.answered = new Set();     // trial ids answered in this page load
    this.introsShown = new Set();
    this.preloaded = new Map();    // trial_id -> Promise of assets
    this.buildDom();
    this.queue = new VoteQueue({
      apiBase: this.apiBase, assignmentId: this.assignmentId, token: this.token,
      path: 'motion-responses', idField: 'response_id',
      onChange: () => this.renderPending(),
    });
    this.renderPending();
  }

  buildDom() {
    this.progressEl = el('p', { id: 'motion-progress', class: 'motion-progress' });
    this.pendingEl = el('p', { id: 'motion-pending', class: 'motion-pending', 'aria-live': 'polite', 'data-pending': '0' });
    this.noticeEl = el('div', { id: 'motion-notice', class: 'pc-notice', role: 'alert', hidden: true });
    this.statusEl = el('p', { id: 'motion-app-status', class: 'pc-status', 'aria-live': 'polite', text: 'Loading…' });
    this.stageEl = el('div', { id: 'motion-stage', class: 'motion-stage' });
    this.root.classList.add('motion-app');
    this.root.replaceChildren(this.progressEl, this.noticeEl, this.statusEl, this.stageEl, this.pendingEl);
  }

  setStatus(text) {
    this.statusEl.textContent = text;
    this.statusEl.hidden = !text;
  }

  showNotice(text) {
    this.noticeEl.textContent = text;
    this.noticeEl.hidden = !text;
  }

  renderPending() {
    if (!this.pendingEl || !this.queue) return;
    const n = this.queue.pending;
    this.pendingEl.dataset.pending = String(n);
    this.pendingEl.textContent = n && this.queue.retrying
      ? `${n} answer${n === 1 ? '' : 's'} waiting to be saved · retrying` : '';
  }

  // --- server ----------------------------------------------------------------

  api(method, path, body) {
    return callApi(this, method, path, body);
  }

  /** GET /state, retried with backoff on network trouble or a 5xx. */
  async fetchState() {
    const state = await fetchStateRetrying(this, () => this.showNotice('Cannot reach the server; trying again…'));
    this.showNotice('');
    return state;
  }

  fatal(error) {
    console.error(error);
    this.setStatus('');
    const expired = error instanceof ApiError && (error.status === 403 || error.status === 401);
    this.showNotice(expired
      ? 'This study link is no longer valid. Please open the study again from the page where you accepted it.'
      : `Something went wrong: ${error.message}. Please reload the page; your answers so far are kept.`);
  }

  async run() {
    try {
      await this.follow(await this.fetchState());
    } catch (error) {
      this.fatal(error);
    }
  }

  /** Show whatever the server's state asks for, until the worker is done. */
  async follow(state) {
    for (;;) {
      this.state = state;
      this.root.dataset.stage = state.stage;
      if (state.stage === 'calibration') {
        // A refused display moves the assignment to "disqualified": the next /state shows why.
        await this.calibrate();
      } else if (state.stage === 'rdk' || state.stage === 'main') {
        await this.runBlock();
      } else {
        // consent, instructions and the end (completed, disqualified, stopped): server-rendered pages.
        await this.reloadForStage(state.stage);
        return;
      }
      state = await this.fetchState();
    }
  }

  // --- calibration -------------------------------------------------------------

  async calibrate() {
    this.setStatus('');
    this.progressEl.textContent = '';
    this.stageEl.replaceChildren();
    const result = await runCalibration(this.stageEl, {
      params: this.state.params,
      submit: async (body) => {
        try {
          return await this.api('POST', '/calibration', body);
        } catch (error) {
          if (error instanceof ApiError && error.status === 409) return null;  // calibrated already: follow /state
          throw error;
        }
      },
    });
    this.stageEl.replaceChildren();
    return result;
  }

  // --- trials --------------------------------------------------------------------

  localAnswers() {
    const ids = new Set(this.answered);
    for (const body of this.queue.pendingVotes()) ids.add(body.trial_id);
    return ids;
  }

  remainingTrials() {
    const local = this.localAnswers();
    return (this.state.trials || []).filter((t) => !local.has(t.trial_id));
  }

  refreshMs() {
    const hz = this.state.calibration && this.state.calibration.refresh_hz;
    return hz > 0 ? 1000 / hz : 1000 / 60;
  }

  /** An RDK trial's dots, rendered by the server (the page is never told the direction or speed). */
  async fetchDots(trial) {
    const url = `${this.apiBase}/assignments/${encodeURIComponent(this.assignmentId)}`
      + `/motion-trials/${encodeURIComponent(trial.trial_id)}/dots`;
    // Cacheable (the server marks it private and immutable): a reload reuses the download.
    const response = await fetch(url, { headers: { Authorization: `Bearer ${this.token}` }, credentials: 'same-origin' });
    if (!response.ok) throw new ApiError(response.status, null);
    return response.arrayBuffer();
  }

  assetsFor(trial) {
    if (!this.preloaded.has(trial.trial_id)) {
      const promise = loadTrialAssets(trial, this.state.params, { loadDots: (t) => this.fetchDots(t) });
      promise.catch(() => this.preloaded.delete(trial.trial_id));
      this.preloaded.set(trial.trial_id, promise);
    }
    return this.preloaded.get(trial.trial_id);
  }

  renderProgress(trial) {
    const b = this.state.block || {};
    const part = b.name === 'rdk' ? 'Moving dots' : 'Movies';
    if (trial.practice) {
      this.progressEl.textContent = `${part} · practice ${(b.practice_done ?? 0) + 1} · `
        + `passed ${b.practice_passes ?? 0} of ${b.practice_needed ?? 6}`;
    } else {
      this.progressEl.textContent = `${part} · trial ${Math.min((b.trials_done ?? 0) + 1, b.trials_total || 1)} `
        + `of ${b.trials_total ?? '?'}`;
    }
    this.progressEl.dataset.practice = String(Boolean(trial.practice));
  }

  /** One intro card per part (dots/movies x practice/test) and page load. */
  async intro(trial) {
    const key = `${this.state.block ? this.state.block.name : trial.kind}:${trial.practice ? 'practice' : 'test'}`;
    if (this.introsShown.has(key)) return;
    this.introsShown.add(key);
    const [title, text] = INTROS[key] || ['Next part', ''];
    const b = this.state.block || {};
    const count = trial.practice
      ? `Practice ends after ${b.practice_needed ?? 6} passed trials.`
      : `${b.trials_total ?? ''} trials${trial.feedback ? ', each followed by the true motion (green) and your answer (purple)' : ', without feedback'}.`;
    const button = el('button', { type: 'button', id: 'motion-intro-start', class: 'pc-button pc-button-primary',
                                  text: 'Start' });
    const card = el('section', { id: 'motion-intro', class: 'pc-panel', 'data-part': key },
      el('h2', { text: title }), el('p', { text }), el('p', { text: count }), el('div', { class: 'pc-actions' }, button));
    this.setStatus('');
    this.stageEl.replaceChildren(card);
    this.assetsFor(trial);  // load while the worker reads
    await new Promise((resolve) => button.addEventListener('click', resolve, { once: true }));
    card.remove();
  }

  async runBlock() {
    const stage = this.state.stage;
    for (let idle = 0; this.state.stage === stage;) {
      const remaining = this.remainingTrials();
      if (!remaining.length) {
        // Nothing left here (server still catching up, or all answered): wait for the queue, ask again.
        this.setStatus(this.queue.pending ? 'Saving your answers… please keep this page open.' : 'Loading…');
        await this.queue.whenIdle();
        if (idle > 0) await sleep(backoffDelay(idle));
        idle += 1;
        this.state = await this.fetchState();
        continue;
      }
      idle = 0;
      const trial = remaining[0];
      await this.intro(trial);
      await this.runOne(trial, remaining[1]);
      this.state = await this.fetchState();
    }
  }

  async runOne(trial, next) {
    this.renderProgress(trial);
    this.setStatus('');
    this.stageEl.replaceChildren();
    this.root.dataset.trialId = String(trial.trial_id);
    this.root.dataset.trialKind = trial.kind;
    this.root.dataset.practice = String(Boolean(trial.practice));
    let assets;
    try {
      assets = await this.assetsFor(trial);
    } catch (error) {
      this.showNotice('The movie could not be loaded. Check your connection; trying again…');
      await sleep(3000);
      return;
    }
    const response = await runTrial(this.stageEl, trial, {
      params: this.state.params, refreshMs: this.refreshMs(), assets,
      onCreate: (t) => { this.current = t; },
    });
    this.current = null;
    this.preloaded.delete(trial.trial_id);
    // Preload the next trial now, not while this one ran: decoding during a timed phase costs frames.
    if (next) this.assetsFor(next);
    this.answered.add(trial.trial_id);
    const body = { response_id: uuid4(), ...response, client_time: new Date().toISOString(),
                   window_width: window.innerWidth, window_height: window.innerHeight,
                   device_pixel_ratio: window.devicePixelRatio || 1 };
    const saving = setTimeout(() => this.setStatus('Saving your answer…'), this.params.saving_delay_ms);
    let result = null;
    try {
      result = await this.queue.enqueue(body);
    } catch (error) {
      console.warn('response rejected', error);
      this.answered.delete(trial.trial_id);
      if (error.error !== 'trial_already_answered' && error.status !== 409) {
        this.showNotice(`One answer could not be saved: ${error.message}`);
      }
    } finally {
      clearTimeout(saving);
      this.setStatus('');
    }
    // The truth comes only in the server's answer to the stored response (awaited above, with
    // "Saving your answer…" if slow); main test trials get none.
    const feedback = trial.feedback && result ? result.feedback : null;
    if (feedback) {
      const verdict = trial.practice ? { passed: feedback.passed, repeat: Boolean(result.repeat_added) } : null;
      this.root.dataset.feedback = 'shown';
      await showFeedback(this.stageEl, trial, response,
        { params: this.state.params, verdict, gt: { u: feedback.gt_u, v: feedback.gt_v } });
      delete this.root.dataset.feedback;
    }
  }

  // --- the end -------------------------------------------------------------------

  async reloadForStage(stage) {
    this.setStatus('Loading…');
    await Promise.race([this.queue.whenIdle(), sleep(5000)]);
    if (!guardedReload(this.assignmentId, stage, this.params.reload_guard_ms)) {
      this.setStatus('');
      this.showNotice('This page is out of date. Please reload it (F5).');
    }
  }
}

/**
 * Run the motion study app in `root`.
 * @param {HTMLElement} root
 * @param {{apiBase: string, assignmentId: string, token: string, parameters?: object}} config
 * @returns {MotionApp} (handy for debugging and tests)
 */
export function start(root, config) {
  const app = new MotionApp(root, config);
  window.motionApp = app;
  app.run();
  return app;
}
