// Paired-comparison (PC) trial runner: one self-contained ES module, in the
// spirit of a jsPsych plugin -- the parameters it understands are declared
// first, then the code that runs them.
//
// Layout (StudyMB 2.0, Fig. 4): LEFT candidate | REFERENCE | RIGHT candidate,
// each column a full image over its zoomed crops.  The worker picks the
// candidate closer to the reference by clicking its column or pressing
// ArrowLeft / ArrowRight.  Forced choice: no default, no submit button.
//
// Nothing else votes.  The candidates are not focusable (a focused button would
// turn a later Space or Enter into a vote for whatever pair is on screen then);
// a vote key must be pressed afresh for each pair (held keys and auto-repeat do
// not vote twice).  The pair is scaled to the inside of the browser window --
// header, the three full images and all zoomed crops, without scrolling -- and
// hidden with a message when that would make the images smaller than the
// study's min_image_scale (or the window is below min_window_width/height).
//
// The server is the source of truth for where the worker is (State from
// GET /state); this module only walks through the current page's unanswered
// trials and asks the server again whenever a page ends.  Votes go through
// VoteQueue, so a reload or an outage loses nothing.

import { sleep, el, guardedReload } from './dom.js';
import { ApiError, callApi, fetchStateRetrying } from './assignment_api.js';
import { VoteQueue, backoffDelay, uuid4 } from './vote_queue.js';

export const info = Object.freeze({
  name: 'paired-comparison',
  version: 1,
  description: 'Forced choice between two candidates shown either side of a reference, with zoomed crops.',
  parameters: Object.freeze({
    highlight_ms: { type: 'int', default: 150,
      description: 'How long the chosen side stays highlighted before the next pair appears (confirms the click registered).' },
    feedback_ms: { type: 'int', default: 1000,
      description: 'Quiz: how long "Correct" stays on screen.' },
    feedback_wrong_ms: { type: 'int', default: 1600,
      description: 'Quiz: how long the longer "Not quite ..." explanation stays on screen.' },
    loading_delay_ms: { type: 'int', default: 300,
      description: 'Show "Loading images" only if the next pair is not ready after this long (avoids flicker).' },
    saving_delay_ms: { type: 'int', default: 400,
      description: 'Quiz: show "Saving" only if the server has not answered after this long.' },
    key_left: { type: 'key', default: 'ArrowLeft', description: 'Key that chooses the left candidate.' },
    key_right: { type: 'key', default: 'ArrowRight', description: 'Key that chooses the right candidate.' },
    reload_guard_ms: { type: 'int', default: 10000,
      description: 'Do not reload again for the same stage within this time (stops a reload loop if server and page disagree).' },
  }),
});

function defaults() {
  const out = {};
  for (const [name, spec] of Object.entries(info.parameters)) out[name] = spec.default;
  return out;
}

const nextFrame = () => new Promise((resolve) => requestAnimationFrame(() => resolve()));

// Space (CSS px at scale 1) between a full image and its crops and between crops; it scales with the images.
const CROP_GAP = 8;
// Room kept free below and beside the pair, so that rounding never brings a scrollbar back.
const FIT_MARGIN = 2;
const DEFAULT_MIN_IMAGE_SCALE = 0.5;

function sortedCrops(image) {
  return [...(image.crops || [])].sort((a, b) => a.rank - b.rank);
}

/** Size (CSS px at scale 1) of one column's images when its crops are laid out `perRow` to a row. */
function columnGeometry(image, perRow) {
  const crops = sortedCrops(image);
  let width = image.width;
  let height = image.height;
  for (let i = 0; i < crops.length; i += perRow) {
    const row = crops.slice(i, i + perRow);
    width = Math.max(width, row.reduce((sum, c) => sum + c.display_width, 0) + (row.length - 1) * CROP_GAP);
    height += CROP_GAP + Math.max(...row.map((c) => c.display_height));
  }
  return { width, height };
}

/**
 * The largest scale (at most 1: images never grow) at which the three columns of `trial` fit
 * `room` (CSS px), trying every number of crops per row.
 * @returns {{perRow: number, scale: number, width: number, height: number}} width/height at scale 1
 */
export function bestFit(trial, room) {
  const images = [trial.left, trial.reference, trial.right];
  const nCrops = Math.max(1, ...images.map((image) => (image.crops || []).length));
  let best = null;
  for (let perRow = nCrops; perRow >= 1; perRow -= 1) {
    const columns = images.map((image) => columnGeometry(image, perRow));
    const width = columns.reduce((sum, c) => sum + c.width, 0);
    const height = Math.max(...columns.map((c) => c.height));
    const scale = Math.min(1, room.width / width, room.height / height);
    if (!best || scale > best.scale + 1e-9) best = { perRow, scale, width, height };
  }
  return best;
}

/** Rewards come as strings ("0.50"); show plain numbers as dollars, anything else as given. */
function money(value) {
  const text = String(value ?? '').trim();
  if (!text) return '';
  return /^\d+(\.\d+)?$/.test(text) ? `$${text}` : text;
}

/** Resolves once the image is loaded *and decoded*, so it paints in full on first show. */
async function decoded(img) {
  try {
    await img.decode();
  } catch (error) {
    // decode() also rejects for benign reasons (e.g. src replaced); only a
    // missing/broken image is fatal.
    if (!(img.complete && img.naturalWidth > 0)) throw new Error(`Image failed to load: ${img.src}`);
  }
  return img;
}

class PcTrialApp {
  constructor(root, config) {
    this.root = root;
    this.params = { ...defaults(), ...(config.parameters || {}) };
    this.apiBase = String(config.apiBase || '/api/v1').replace(/\/+$/, '');
    this.assignmentId = String(config.assignmentId);
    this.token = config.token;
    this.state = null;
    this.trial = null;          // trial object on screen
    this.accepting = false;     // a choice counts only while true
    this.awaitingChoice = false; // the pair on screen has not been answered yet
    this.imagesShown = false;   // the pair's images are decoded and in the DOM
    this.t0 = null;             // performance.now() when the current images became visible
    this.seq = 0;               // bumps on every render; stale async continuations check it
    this.mode = 'loading';      // loading | trial | page_done | saving | message
    this.answered = new Set();  // trial ids answered in this page load (server may not know yet)
    this.preloaded = new Map(); // url -> Image of the next trial (keeps them in the memory cache)
    this.pageEndRetries = 0;
    this.keysDown = new Set();  // vote keys pressed and not yet released: they must be pressed afresh
    this.fit = null;            // bestFit() of the pair on screen, for the current window
    this.buildDom();
    this.queue = new VoteQueue({
      apiBase: this.apiBase,
      assignmentId: this.assignmentId,
      token: this.token,
      onChange: () => this.renderPending(),
      onRejected: (vote, error) => this.onVoteRejected(vote, error),
      // Main-trial votes are not awaited, so a stop caused by a hidden gold answer arrives here:
      // follow it at once instead of letting the worker answer the rest of the page for nothing.
      onDelivered: (vote, body) => {
        // (Quiz votes are awaited and show their feedback first; they move on by themselves.)
        const stopped = body.stage === 'stopped' || body.stage === 'disqualified';
        const mainTrials = this.state && this.state.page && this.state.page.kind === 'trials';
        if (stopped && mainTrials && this.state.stage !== body.stage) this.refresh();
      },
    });
    this.renderPending();
    this.onKeyDown = this.onKeyDown.bind(this);
    this.onResize = this.onResize.bind(this);
    document.addEventListener('keydown', this.onKeyDown);
    document.addEventListener('keyup', (event) => this.keysDown.delete(event.key));
    // Keys released while another window had the focus send no keyup here.
    window.addEventListener('blur', () => this.keysDown.clear());
    window.addEventListener('resize', this.onResize);
    // The bar (feedback, a longer line) and the notice change the room left for the pair.
    if (typeof ResizeObserver !== 'undefined') {
      this.chromeObserver = new ResizeObserver(() => this.onResize());
      this.chromeObserver.observe(this.bar);
      this.chromeObserver.observe(this.noticeEl);
    }
  }

  // --- DOM -----------------------------------------------------------------

  buildDom() {
    const column = (side) => {
      const label = side === 'left'
        ? el('span', { class: 'pc-label' }, el('kbd', { class: 'pc-key', 'aria-hidden': 'true', text: '←' }), ' Left')
        : el('span', { class: 'pc-label' }, 'Right ', el('kbd', { class: 'pc-key', 'aria-hidden': 'true', text: '→' }));
      // Not a <button> and not focusable: focus never rests on a candidate, so Space and Enter
      // cannot vote; the keyboard's way to choose is the arrow keys (the page says so).
      const candidate = el('div', {
        class: 'pc-col pc-choice',
        role: 'button',
        'data-side': side,
        'aria-keyshortcuts': side === 'left' ? this.params.key_left : this.params.key_right,
        'aria-label': `${side === 'left' ? 'Left' : 'Right'} image is closer to the reference `
          + `(${side === 'left' ? 'Left' : 'Right'} arrow key)`,
      }, label, el('span', { class: 'pc-images' }));
      // Only a real pointer click votes: detail 1.  (0 is a click made by script or by a key on a
      // focused element; > 1 is the 2nd click of a double-click, which must not answer the next pair.)
      candidate.addEventListener('click', (event) => {
        if (event.detail !== 1 || !event.isTrusted) return;
        this.choose(side, event.pointerType === 'touch' ? 'touch' : 'mouse');
      });
      return candidate;
    };
    this.left = column('left');
    this.right = column('right');
    // The reference is deliberately not a button: it cannot be chosen.
    this.reference = el('div', { id: 'reference', class: 'pc-col pc-reference', role: 'group',
                                 'aria-label': 'Reference (ground truth)' },
      el('span', { class: 'pc-label pc-label-ref', text: 'Reference (ground truth)' }),
      el('span', { class: 'pc-images' }));
    this.trialEl = el('section', { id: 'trial', class: 'pc-trial', 'aria-label': 'Pair to compare', hidden: true },
      this.left, this.reference, this.right);

    this.progressEl = el('p', { id: 'progress', class: 'pc-progress' });
    this.instructionEl = el('p', { id: 'instruction', class: 'pc-instruction' },
      'Which image is closer to the ', el('strong', { text: 'reference' }), '? Click it or press ',
      el('kbd', { text: '←' }), ' / ', el('kbd', { text: '→' }), '.');
    this.feedbackEl = el('p', { id: 'feedback', class: 'pc-feedback', role: 'status', 'aria-live': 'assertive', hidden: true });
    this.pendingEl = el('p', { id: 'pending', class: 'pc-pending', 'aria-live': 'polite', 'data-pending': '0' });
    const bar = this.bar = el('header', { class: 'pc-bar' }, this.progressEl,
      el('div', { class: 'pc-bar-center' }, this.instructionEl, this.feedbackEl), this.pendingEl);

    this.noticeEl = el('div', { id: 'notice', class: 'pc-notice', role: 'alert', hidden: true });
    this.statusEl = el('p', { id: 'pc-status', class: 'pc-status', 'aria-live': 'polite', text: 'Loading…' });

    this.sizeNumbersEl = el('p', { class: 'pc-size-numbers' });
    this.tooSmallEl = el('section', { id: 'window-too-small', class: 'pc-panel pc-too-small', role: 'alert', hidden: true },
      el('h2', { text: 'Please make the window larger' }),
      el('p', { text: 'The images of this study need a larger browser window to be shown large enough. '
        + 'Maximise the window or switch to full screen (F11; on a Mac Ctrl+⌘+F). '
        + 'The study continues by itself as soon as the window is large enough.' }),
      this.sizeNumbersEl);

    this.pageDoneText = el('p');
    this.btnContinue = el('button', { type: 'button', id: 'btn-continue', class: 'pc-button pc-button-primary' });
    this.btnFinish = el('button', { type: 'button', id: 'btn-finish', class: 'pc-button',
                                    text: 'Finish and submit', 'aria-label': 'Finish the study and submit' });
    this.btnContinue.addEventListener('click', () => this.pageAction('continue'));
    this.btnFinish.addEventListener('click', () => this.pageAction('finish'));
    this.pageDoneEl = el('section', { id: 'page-done', class: 'pc-panel', hidden: true, 'aria-labelledby': 'page-done-title' },
      el('h2', { id: 'page-done-title', text: 'Page complete' }), this.pageDoneText,
      el('div', { class: 'pc-actions' }, this.btnContinue, this.btnFinish));

    this.root.classList.add('pc-app');
    this.root.replaceChildren(bar, this.noticeEl, this.statusEl, this.tooSmallEl, this.trialEl, this.pageDoneEl);
  }

  setMode(mode, statusText = '') {
    this.mode = mode;
    this.statusEl.textContent = statusText;
    this.statusEl.hidden = !statusText;
    this.pageDoneEl.hidden = mode !== 'page_done';
    const inTrial = mode === 'trial' || mode === 'saving_quiz';
    this.instructionEl.hidden = !inTrial || !this.feedbackEl.hidden;
    this.updateTrialVisibility();
  }

  /** #trial is visible only in trial mode and only if the window is large enough. */
  updateTrialVisibility() {
    const inTrial = this.mode === 'trial' || this.mode === 'saving_quiz';
    const need = inTrial && this.trial !== null && this.imagesShown ? this.layout() : null;
    const tooSmall = need !== null && (window.innerWidth < need.width || window.innerHeight < need.height);
    this.tooSmallEl.hidden = !tooSmall;
    if (tooSmall) {
      this.sizeNumbersEl.textContent = `Window now ${window.innerWidth} × ${window.innerHeight} pixels; `
        + `needed at least ${need.width} × ${need.height}.`;
    }
    const show = inTrial && !tooSmall && this.trial !== null && this.imagesShown;
    const wasHidden = this.trialEl.hidden;
    this.trialEl.hidden = !show;
    // Nothing to click while the trial is hidden: the instruction line would only confuse.
    this.instructionEl.hidden = !show || !this.feedbackEl.hidden;
    if (!show) {
      // Hidden images cannot be judged: stop the clock and refuse choices.
      if (this.mode === 'trial') {
        this.accepting = false;
        this.trialEl.dataset.accepting = 'false';
      }
    } else if (wasHidden && this.mode === 'trial' && this.awaitingChoice) {
      // Shown again (window enlarged): the response time starts afresh.
      this.armClock();
    }
  }

  /**
   * Scale the pair on screen to the window (see bestFit) and say which window it needs: the
   * study's min_window_width/height, or more if the images would fall below min_image_scale.
   * @returns {{width: number, height: number}} the smallest inner window (CSS px) for this pair
   */
  layout() {
    const limits = (this.state && this.state.limits) || {};
    const minScale = limits.min_image_scale || DEFAULT_MIN_IMAGE_SCALE;
    const chrome = this.measureChrome();
    const room = { width: window.innerWidth - chrome.width - FIT_MARGIN,
                   height: window.innerHeight - chrome.height - FIT_MARGIN };
    this.fit = bestFit(this.trial, room);
    this.applyScale(this.fit);
    return {
      width: Math.max(limits.min_window_width || 0,
                      Math.ceil(this.fit.width * minScale + chrome.width + FIT_MARGIN)),
      height: Math.max(limits.min_window_height || 0,
                       Math.ceil(this.fit.height * minScale + chrome.height + FIT_MARGIN)),
    };
  }

  /** What does not scale with the images (CSS px): the bar and notice above the pair, the column
   *  labels, the trial's padding and the gaps between the columns. */
  measureChrome() {
    const trial = this.trialEl;
    const wasHidden = trial.hidden;
    if (wasHidden) {
      // Laid out but not painted: all of this runs before the browser draws again.
      trial.style.visibility = 'hidden';
      trial.hidden = false;
    }
    const box = trial.getBoundingClientRect();
    const style = getComputedStyle(trial);
    const labels = Math.max(...[this.left, this.reference, this.right].map(
      (column) => column.querySelector('.pc-images').getBoundingClientRect().top - box.top));
    if (wasHidden) {
      trial.hidden = true;
      trial.style.visibility = '';
    }
    const above = (this.noticeEl.hidden ? this.bar : this.noticeEl).getBoundingClientRect().bottom + window.scrollY;
    return {
      width: parseFloat(style.paddingLeft) + parseFloat(style.paddingRight) + 2 * parseFloat(style.columnGap),
      height: above + labels + parseFloat(style.paddingBottom),
    };
  }

  /** Size every image of the pair to `fit.scale` and put the crops `fit.perRow` to a row. */
  applyScale(fit) {
    const px = (value) => `${(value * fit.scale).toFixed(2)}px`;
    this.trialEl.style.setProperty('--pc-gap', px(CROP_GAP));
    this.trialEl.dataset.scale = fit.scale.toFixed(3);
    const columns = [[this.left, this.trial.left], [this.reference, this.trial.reference], [this.right, this.trial.right]];
    for (const [column, image] of columns) {
      column.style.width = px(columnGeometry(image, fit.perRow).width);
      for (const img of column.querySelectorAll('img')) {
        img.style.width = px(Number(img.dataset.displayWidth));
        img.style.height = px(Number(img.dataset.displayHeight));
      }
      const box = column.querySelector('.pc-crops');
      if (!box || box.dataset.perRow === String(fit.perRow)) continue;
      const crops = [...box.querySelectorAll('.pc-crop')]; // built in rank order
      const rows = [];
      for (let i = 0; i < crops.length; i += fit.perRow) {
        rows.push(el('span', { class: 'pc-crop-row' }, ...crops.slice(i, i + fit.perRow)));
      }
      box.replaceChildren(...rows); // moving an <img> keeps it loaded
      box.dataset.perRow = String(fit.perRow);
    }
  }

  onResize() {
    this.updateTrialVisibility();
  }

  renderPending() {
    if (!this.pendingEl || !this.queue) return;
    const n = this.queue.pending;
    this.pendingEl.dataset.pending = String(n);
    this.pendingEl.dataset.retrying = this.queue.retrying ? 'true' : 'false';
    const answers = n === 1 ? 'answer' : 'answers';
    // A vote normally uploads within a few hundred ms; announcing every one of them would make
    // the bar flicker on each click, so "Saving" appears only once a vote has waited a while.
    clearTimeout(this.pendingTimer);
    if (n > 0 && !this.queue.retrying) {
      this.pendingSince = this.pendingSince || performance.now();
      const wait = 1000 - (performance.now() - this.pendingSince);
      if (wait > 0) {
        this.pendingTimer = setTimeout(() => this.renderPending(), wait);
        return;
      }
    } else if (n === 0) {
      this.pendingSince = null;
    }
    // Kept short (one line in the top bar) so the pair below never jumps; details in the tooltip.
    if (n === 0) {
      this.pendingEl.textContent = '✓ All answers saved';
      this.pendingEl.title = '';
    } else if (this.queue.retrying) {
      this.pendingEl.textContent = `${n} ${answers} waiting · retrying`;
      this.pendingEl.title = 'Connection problem. Your answers are kept in this browser and uploaded automatically; '
        + 'you can keep working.';
    } else {
      this.pendingEl.textContent = `Saving ${n} ${answers}…`;
      this.pendingEl.title = '';
    }
  }

  showNotice(text) {
    this.noticeEl.textContent = text;
    this.noticeEl.hidden = !text;
  }

  // --- server --------------------------------------------------------------

  api(method, path, body) {
    return callApi(this, method, path, body);
  }

  /** GET /state, retried with backoff for as long as the network or server is down. */
  async fetchState() {
    let retried = false;
    const state = await fetchStateRetrying(this, (delay) => {
      retried = true;
      this.showNotice(`Cannot reach the server. Trying again in ${Math.ceil(delay / 1000)} s… Your answers are kept.`);
    });
    if (retried) this.showNotice('');
    return state;
  }

  postEnvironment() {
    const body = {
      window: this.windowInfo(),
      screen: { width: window.screen.width, height: window.screen.height },
      user_agent: navigator.userAgent,
    };
    // Informative only: a failure must never block the worker.
    this.api('POST', '/environment', body).catch((error) => console.warn('environment not recorded', error));
  }

  windowInfo() {
    return { width: window.innerWidth, height: window.innerHeight, dpr: window.devicePixelRatio || 1 };
  }

  // --- flow ----------------------------------------------------------------

  async run() {
    this.postEnvironment();
    await this.refresh();
  }

  async refresh() {
    const seq = ++this.seq;
    let state;
    try {
      state = await this.fetchState();
    } catch (error) {
      this.fatal(error);
      return;
    }
    if (seq === this.seq) this.applyState(state);
  }

  fatal(error) {
    this.trial = null;
    this.setMode('message', '');
    const expired = error instanceof ApiError && (error.status === 403 || error.status === 401);
    this.showNotice(expired
      ? 'This study link is no longer valid. Please open the study again from the page where you accepted it.'
      : `Something went wrong: ${error.message}. Please reload the page; your answers so far are kept.`);
  }

  applyState(state) {
    this.state = state;
    const stage = state.stage;
    if (stage === 'quiz' || stage === 'trials') {
      if (!state.page) {
        this.pageFinished();
        return;
      }
      // Keep the trial on screen if the server still expects it (e.g. a
      // re-sync after a rejected vote): re-showing it would restart the clock.
      const stillOpen = this.trial && this.mode === 'trial' && this.awaitingChoice
        && state.page.trials.some((t) => t.trial_id === this.trial.trial_id && !t.answered);
      if (stillOpen) {
        this.renderProgress();
        return;
      }
      this.showNextTrial();
    } else if (stage === 'page_done') {
      this.showPageDone();
    } else {
      // consent / instructions / completed / disqualified / stopped: rendered by the server.
      this.reloadForStage(stage, state.message);
    }
  }

  /** Answered here but maybe not yet known to the server: this page load's choices and
   *  votes still queued from an earlier load (after a reload they must not be asked again). */
  localAnswers() {
    const ids = new Set(this.answered);
    for (const vote of this.queue.pendingVotes()) ids.add(vote.trial_id);
    return ids;
  }

  /** Trials of the current page still to do, in display order. */
  remainingTrials() {
    const page = this.state && this.state.page;
    if (!page) return [];
    const local = this.localAnswers();
    return [...page.trials]
      .sort((a, b) => a.position - b.position)
      .filter((t) => !t.answered && !local.has(t.trial_id));
  }

  renderProgress() {
    const page = this.state.page;
    if (!page) return;
    const local = this.localAnswers();
    const done = page.trials.filter((t) => t.answered || local.has(t.trial_id)).length;
    const k = Math.min(page.n_trials || page.trials.length, done + 1);
    const n = page.n_trials || page.trials.length;
    // Assumption: quiz pages do not count towards pages_completed, so the
    // trials page being worked on is pages_completed + 1.
    const where = page.kind === 'quiz' ? 'practice' : `page ${(this.state.progress?.pages_completed ?? 0) + 1}`;
    this.progressEl.textContent = `Pair ${k} of ${n} · ${where}`;
    this.progressEl.dataset.pageKind = page.kind;
  }

  async showNextTrial() {
    const seq = ++this.seq;
    const remaining = this.remainingTrials();
    if (!remaining.length) {
      this.pageFinished();
      return;
    }
    const trial = remaining[0];
    this.pageEndRetries = 0;
    this.awaitingChoice = false;
    this.accepting = false;
    this.renderProgress();
    // Keep the old pair (already answered, not clickable) until the new one is
    // decoded; only say "loading" if that takes noticeably long.
    const slow = setTimeout(() => {
      if (seq !== this.seq) return;
      this.imagesShown = false;
      this.setMode('loading', 'Loading images…');
    }, this.trial ? this.params.loading_delay_ms : 0);
    let columns;
    try {
      columns = await this.buildImages(trial);
    } catch (error) {
      clearTimeout(slow);
      if (seq !== this.seq) return;
      this.imageFailure(error);
      return;
    } finally {
      clearTimeout(slow);
    }
    if (seq !== this.seq) return;

    // Swap everything in one synchronous step: no half-drawn pair is ever visible.
    this.trial = trial;
    this.trialEl.dataset.trialId = trial.trial_id;
    this.trialEl.dataset.pageKind = this.state.page.kind;
    delete this.trialEl.dataset.chosen;
    for (const node of [this.left, this.right, this.reference]) {
      delete node.dataset.state;
    }
    this.left.querySelector('.pc-images').replaceChildren(...columns.left);
    this.reference.querySelector('.pc-images').replaceChildren(...columns.reference);
    this.right.querySelector('.pc-images').replaceChildren(...columns.right);
    this.hideFeedback();
    this.releaseFocus();
    this.imagesShown = true;
    this.awaitingChoice = true;
    const wasVisible = !this.trialEl.hidden;
    this.setMode('trial'); // arms the clock itself if this un-hides the trial
    if (wasVisible && !this.trialEl.hidden) this.armClock();
    this.preload(remaining[1]);
  }

  /** Start the response-time clock at the first frame that shows the images. */
  async armClock() {
    const trial = this.trial;
    this.accepting = false;
    this.trialEl.dataset.accepting = 'false';
    await nextFrame();
    if (this.trial !== trial || this.trialEl.hidden || !this.awaitingChoice) return;
    this.t0 = performance.now();
    this.accepting = true;
    this.trialEl.dataset.accepting = 'true';
  }

  imageFailure(error) {
    console.error(error);
    this.trial = null;
    this.imagesShown = false;
    this.setMode('message', '');
    this.showNotice('An image of this pair could not be loaded. Check your connection; trying again…');
    const seq = this.seq;
    setTimeout(() => {
      if (seq === this.seq) {
        this.showNotice('');
        this.refresh();
      }
    }, 3000);
  }

  /** Decoded <img> elements for the three columns of `trial`. */
  async buildImages(trial) {
    const all = [];
    const make = (url, width, height, cls, alt) => {
      const img = new Image();
      img.className = cls;
      img.width = width;
      img.height = height;
      img.dataset.displayWidth = String(width);
      img.dataset.displayHeight = String(height);
      img.alt = alt;
      img.decoding = 'async';
      img.draggable = false;
      img.src = url;
      all.push(img);
      return img;
    };
    const column = (image, name) => {
      const nodes = [make(image.full, image.width, image.height, 'pc-full', `${name}, full image`)];
      const crops = sortedCrops(image);
      if (crops.length) {
        const box = el('span', { class: 'pc-crops' });
        crops.forEach((crop, i) => box.append(
          make(crop.url, crop.display_width, crop.display_height, 'pc-crop', `${name}, zoomed region ${i + 1}`)));
        nodes.push(box);
      }
      return nodes;
    };
    const columns = {
      left: column(trial.left, 'Left'),
      reference: column(trial.reference, 'Reference'),
      right: column(trial.right, 'Right'),
    };
    await Promise.all(all.map(decoded));
    return columns;
  }

  /** Warm the cache with the next pair while this one is judged. */
  preload(trial) {
    this.preloaded.clear();
    if (!trial) return;
    for (const image of [trial.left, trial.reference, trial.right]) {
      for (const url of [image.full, ...(image.crops || []).map((c) => c.url)]) {
        if (this.preloaded.has(url)) continue;
        const img = new Image();
        img.src = url;
        img.decode().catch(() => {}); // a failure shows up (and is handled) when the pair is shown
        this.preloaded.set(url, img);
      }
    }
  }

  /** Only key_left / key_right vote, and only when pressed afresh: a held key (auto-repeat, or a
   *  press that began before this pair appeared) never answers a pair. */
  onKeyDown(event) {
    const side = event.key === this.params.key_left ? 'left' : event.key === this.params.key_right ? 'right' : null;
    if (!side) return;
    const held = event.repeat || this.keysDown.has(event.key);
    this.keysDown.add(event.key);
    if (event.altKey || event.ctrlKey || event.metaKey || event.shiftKey) return;
    if (this.mode !== 'trial' || this.trialEl.hidden) return;
    event.preventDefault(); // arrows would otherwise scroll the page
    if (held) return;
    this.choose(side, 'keyboard');
  }

  async choose(side, input) {
    if (!this.accepting || !this.trial || this.mode !== 'trial') return; // images not shown yet: ignore
    const rt = Math.max(0, performance.now() - this.t0);
    this.accepting = false;
    this.awaitingChoice = false;
    this.trialEl.dataset.accepting = 'false';
    const trial = this.trial;
    const seq = this.seq;
    const quiz = this.state.page.kind === 'quiz';
    this.answered.add(trial.trial_id);
    const vote = {
      vote_id: uuid4(),
      trial_id: trial.trial_id,
      choice: side,
      rt_ms: Math.round(rt),
      input,
      client_time: new Date().toISOString(),
      window: this.windowInfo(),
    };
    const delivered = this.queue.enqueue(vote);
    this.releaseFocus();
    this.trialEl.dataset.chosen = side;
    (side === 'left' ? this.left : this.right).dataset.state = 'chosen';

    if (!quiz) {
      // Main trials do not wait for the server: the queue delivers in the background.
      await sleep(this.params.highlight_ms);
      if (seq === this.seq) this.showNextTrial();
      return;
    }

    // Quiz: the feedback comes in the vote response, so wait for it.
    this.mode = 'saving_quiz';
    const saving = setTimeout(() => this.showFeedback('Saving your answer…', 'saving'), this.params.saving_delay_ms);
    let result;
    try {
      [result] = await Promise.all([delivered, sleep(this.params.highlight_ms)]);
    } catch (error) {
      clearTimeout(saving);
      this.hideFeedback();
      // onVoteRejected already re-syncs with the server.
      return;
    }
    clearTimeout(saving);
    if (seq !== this.seq) return;
    const correct = result && result.feedback ? Boolean(result.feedback.correct) : null;
    if (correct === true) {
      this.showFeedback('Correct', 'correct');
    } else if (correct === false) {
      const other = side === 'left' ? 'right' : 'left';
      (side === 'left' ? this.left : this.right).dataset.state = 'wrong';
      (other === 'left' ? this.left : this.right).dataset.state = 'correct';
      this.showFeedback(`Not quite: the image closer to the reference was on the ${other}`, 'wrong');
    }
    await sleep(correct === false ? this.params.feedback_wrong_ms : correct === true ? this.params.feedback_ms : 0);
    if (seq !== this.seq) return;
    this.mode = 'trial';
    if (result && result.page_complete) this.pageFinished();
    else this.showNextTrial();
  }

  /** Nothing in the app keeps the focus after a vote or a new pair (Space and Enter act on the
   *  focused element: a leftover focus on a page button must not do anything either). */
  releaseFocus() {
    const focused = document.activeElement;
    if (focused && focused !== document.body && this.root.contains(focused)) focused.blur();
  }

  showFeedback(text, kind) {
    this.feedbackEl.textContent = text;
    this.feedbackEl.dataset.kind = kind;
    this.feedbackEl.hidden = false;
    this.instructionEl.hidden = true;
  }

  hideFeedback() {
    this.feedbackEl.hidden = true;
    this.feedbackEl.textContent = '';
    delete this.feedbackEl.dataset.kind;
    this.instructionEl.hidden = !(this.mode === 'trial' || this.mode === 'saving_quiz');
  }

  onVoteRejected(vote, error) {
    console.warn('vote rejected', vote, error);
    // The server did not take it, so the server's view of that trial wins.
    this.answered.delete(vote.trial_id);
    if (error.error !== 'trial_already_answered') {
      // Answering the same pair twice (e.g. two open tabs) is harmless; anything else deserves a word.
      this.showNotice(`One answer could not be saved: ${error.message}`);
    }
    // Whatever happened (study paused, stage moved on), the server knows where we stand.
    this.refresh();
  }

  /** All trials of the page answered here: wait until the queue is empty, then ask the server. */
  async pageFinished() {
    const seq = ++this.seq;
    this.trial = null;
    this.imagesShown = false;
    this.hideFeedback();
    if (this.queue.pending) this.setMode('saving', 'Saving your answers… please keep this page open.');
    else this.setMode('loading', 'Loading…');
    await this.queue.whenIdle();
    if (seq !== this.seq) return;
    let state;
    try {
      state = await this.fetchState();
    } catch (error) {
      this.fatal(error);
      return;
    }
    if (seq !== this.seq) return;
    const local = this.localAnswers();
    const same = (state.stage === 'quiz' || state.stage === 'trials')
      && (!state.page || (this.state && this.state.page && state.page.index === this.state.page.index
        && !state.page.trials.some((t) => !t.answered && !local.has(t.trial_id))));
    if (same) {
      // The server has not moved on yet (should be rare): ask again later instead of spinning.
      this.pageEndRetries += 1;
      this.setMode('saving', 'Waiting for the server to confirm this page…');
      await sleep(backoffDelay(this.pageEndRetries));
      if (seq === this.seq) this.pageFinished();
      return;
    }
    this.pageEndRetries = 0;
    this.answered.clear();
    this.applyState(state);
  }

  showPageDone() {
    ++this.seq;
    this.trial = null;
    this.imagesShown = false;
    this.hideFeedback();
    const p = this.state.progress || {};
    const done = p.pages_completed ?? 0;
    const canContinue = p.max_pages == null || done < p.max_pages;
    const canFinish = p.min_pages == null || done >= p.min_pages;
    // The bonus is paid for pages beyond min_pages; a page still needed to reach it is not a bonus page.
    const bonus = canFinish ? money(p.bonus_per_page) : '';
    const pages = (k) => `${k} ${k === 1 ? 'page' : 'pages'}`;
    this.progressEl.textContent = `${pages(done)} completed`;
    let next;
    if (!canFinish) next = `Please continue: at least ${pages(p.min_pages)} are needed before you can submit.`;
    else if (canContinue) next = `You can continue with another page${bonus ? ` for a bonus of ${bonus}` : ''}, or finish now and submit.`;
    else next = 'Please finish and submit.';
    this.pageDoneText.textContent = `Thank you! You have completed ${pages(done)}`
      + (p.max_pages ? ` (up to ${p.max_pages} possible)` : '') + `. ${next}`;
    this.btnContinue.textContent = bonus ? `Continue with another page (bonus ${bonus})` : 'Continue with the next page';
    this.btnContinue.setAttribute('aria-label', bonus ? `Continue with another page, bonus ${bonus}` : 'Continue with the next page');
    // If the server's numbers rule out both, show both and let it decide.
    this.btnContinue.hidden = !canContinue && canFinish;
    this.btnFinish.hidden = !canFinish && canContinue;
    this.btnContinue.disabled = false;
    this.btnFinish.disabled = false;
    this.setMode('page_done', '');
  }

  async pageAction(action) {
    if (this.mode !== 'page_done') return;
    this.btnContinue.disabled = true;
    this.btnFinish.disabled = true;
    const seq = ++this.seq;
    let state;
    try {
      state = await this.api('POST', '/actions', { action });
    } catch (error) {
      if (seq !== this.seq) return;
      if (error instanceof ApiError && error.status === 409) {
        // Already acted (double submit, second tab): just follow the server.
        this.refresh();
        return;
      }
      this.showNotice(error instanceof ApiError ? error.message
        : 'Cannot reach the server. Please check your connection and try again.');
      this.btnContinue.disabled = false;
      this.btnFinish.disabled = false;
      return;
    }
    if (seq !== this.seq) return;
    this.showNotice('');
    this.answered.clear();
    this.applyState(state);
  }

  async reloadForStage(stage, message) {
    ++this.seq;
    this.trial = null;
    this.imagesShown = false;
    this.setMode('message', message || 'Loading…');
    // Give queued votes a moment to go out before leaving; they stay stored anyway.
    await Promise.race([this.queue.whenIdle(), sleep(5000)]);
    if (!guardedReload(this.assignmentId, stage, this.params.reload_guard_ms)) {
      this.setMode('message', '');
      this.showNotice('This page is out of date. Please reload it (F5).');
    }
  }
}

/**
 * Run the paired-comparison app in `root`.
 * @param {HTMLElement} root
 * @param {{apiBase: string, assignmentId: string, token: string, parameters?: object}} config
 * @returns {PcTrialApp} (handy for debugging and tests)
 */
export function start(root, config) {
  const app = new PcTrialApp(root, config);
  app.run();
  return app;
}
