// Paired-comparison (PC) trial plugin: the parameters it understands are declared first, then
// the code that runs ONE trial, as a jsPsych plugin does.  The assignment driver
// (assignment_driver.js) decides which pair comes next, queues the vote this plugin hands to
// `finish`, and follows the server from page to page.
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
// The plugin keeps its DOM between trials: the pair just answered stays on screen (not
// clickable) until the next one is decoded, so no half-drawn pair is ever visible.

import { sleep, el, unlessAborted, StimulusLoadError } from './dom.js';

export const info = Object.freeze({
  name: 'paired-comparison',
  version: 2,
  description: 'Forced choice between two candidates shown either side of a reference, with zoomed crops.',
  // Where its votes go (the response queue's route): POST .../votes, idempotent by vote_id.
  response: Object.freeze({
    path: 'votes',
    idField: 'vote_id',
    // Answering the same pair twice (e.g. two open tabs) is harmless, and so are the votes still queued
    // when a check question ended the assignment (the page that follows says why); any other refusal
    // deserves a word.
    quietRejection: (error) => ['trial_already_answered', 'assignment_ended'].includes(error.error),
  }),
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
  }),
});

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

/** The paired-comparison plugin (one instance per page load; `run` shows one pair). */
export class PairedComparison {
  static info = info;

  /**
   * @param {import('./assignment_driver.js').AssignmentDriver} driver  the page's assignment driver
   * @param {object} params  this plugin's parameters (declared defaults, overridden by the page's config)
   */
  constructor(driver, params) {
    this.driver = driver;
    this.params = params;
    this.mounted = false;
    this.trial = null;          // trial object on screen
    this.accepting = false;     // a choice counts only while true
    this.awaitingChoice = false; // the pair on screen has not been answered yet
    this.imagesShown = false;   // the pair's images are decoded and in the DOM
    this.t0 = null;             // performance.now() when the current images became visible
    this.seq = 0;               // bumps on every trial and on clear(); stale async continuations check it
    this.mode = 'idle';         // idle | loading | trial | saving_quiz
    this.preloaded = new Map(); // url -> Image of the next trial (keeps them in the memory cache)
    this.keysDown = new Set();  // vote keys pressed and not yet released: they must be pressed afresh
    this.fit = null;            // bestFit() of the pair on screen, for the current window
    this.chosen = null;         // resolves the wait for the worker's choice
    // Keys are tracked from the start, so that a key already held when the first pair appears does not vote.
    document.addEventListener('keydown', (event) => this.onKeyDown(event));
    document.addEventListener('keyup', (event) => this.keysDown.delete(event.key));
    // Keys released while another window had the focus send no keyup here.
    window.addEventListener('blur', () => this.keysDown.clear());
    window.addEventListener('resize', () => this.updateTrialVisibility());
  }

  // --- DOM -----------------------------------------------------------------

  /** Build the pair's DOM (once) in `container` and the instruction/feedback line in the driver's prompt. */
  mount(container) {
    if (this.mounted) return;
    this.mounted = true;
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

    this.instructionEl = el('p', { id: 'instruction', class: 'pc-instruction', hidden: true },
      'Which image is closer to the ', el('strong', { text: 'reference' }), '? Click it or press ',
      el('kbd', { text: '←' }), ' / ', el('kbd', { text: '→' }), '.');
    this.feedbackEl = el('p', { id: 'feedback', class: 'pc-feedback', role: 'status', 'aria-live': 'assertive', hidden: true });
    this.driver.chrome.prompt.append(this.instructionEl, this.feedbackEl);

    this.sizeNumbersEl = el('p', { class: 'pc-size-numbers' });
    this.tooSmallEl = el('section', { id: 'window-too-small', class: 'pc-panel pc-too-small', role: 'alert', hidden: true },
      el('h2', { text: 'Please make the window larger' }),
      el('p', { text: 'The images of this study need a larger browser window to be shown large enough. '
        + 'Maximise the window or switch to full screen (F11; on a Mac Ctrl+⌘+F). '
        + 'The study continues by itself as soon as the window is large enough.' }),
      this.sizeNumbersEl);
    container.append(this.tooSmallEl, this.trialEl);
    // The bar (feedback, a longer line) and the notice change the room left for the pair.
    if (typeof ResizeObserver !== 'undefined') {
      this.chromeObserver = new ResizeObserver(() => this.updateTrialVisibility());
      for (const node of this.driver.chromeAbove()) this.chromeObserver.observe(node);
    }
  }

  setMode(mode, statusText = '') {
    this.mode = mode;
    this.driver.setStatus(statusText);
    const inTrial = mode === 'trial' || mode === 'saving_quiz';
    this.instructionEl.hidden = !inTrial || !this.feedbackEl.hidden;
    this.updateTrialVisibility();
  }

  /** #trial is visible only in trial mode and only if the window is large enough. */
  updateTrialVisibility() {
    if (!this.mounted) return;
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
    const state = this.driver.state;
    const limits = (state && state.limits) || {};
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
    return {
      width: parseFloat(style.paddingLeft) + parseFloat(style.paddingRight) + 2 * parseFloat(style.columnGap),
      height: this.driver.contentTop() + labels + parseFloat(style.paddingBottom),
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

  windowInfo() {
    return { width: window.innerWidth, height: window.innerHeight, dpr: window.devicePixelRatio || 1 };
  }

  // --- one trial -------------------------------------------------------------

  /** The driver's state changed while a pair is on screen (e.g. a re-sync): redraw the progress line. */
  update() {
    this.renderProgress();
  }

  renderProgress() {
    const state = this.driver.state;
    const page = state && state.page;
    if (!page) return;
    const local = this.driver.localAnswers();
    const done = page.trials.filter((t) => t.answered || local.has(t.trial_id)).length;
    const n = page.n_trials || page.trials.length;
    const k = Math.min(n, done + 1);
    // Assumption: quiz pages do not count towards pages_completed, so the
    // trials page being worked on is pages_completed + 1.
    const where = page.kind === 'quiz' ? 'practice' : `page ${(state.progress?.pages_completed ?? 0) + 1}`;
    this.driver.setProgress(`Pair ${k} of ${n} · ${where}`, { pageKind: page.kind });
  }

  /**
   * Show `trial`, take the worker's choice, hand the vote to `finish`, and resolve once the next
   * pair may appear (main trials: after the highlight; quiz: after the server's feedback).
   * @param {HTMLElement} container  the driver's stage element
   * @param {object} trial  one trial of State's page (left, reference, right with their crops)
   * @param {{finish: Function, next: object|null, signal: AbortSignal}} step
   */
  async run(container, trial, { finish, next, signal }) {
    this.mount(container);
    const seq = ++this.seq;
    const stop = () => { this.seq += 1; this.accepting = false; this.trialEl.dataset.accepting = 'false'; };
    signal.addEventListener('abort', stop, { once: true });
    try {
      this.awaitingChoice = false;
      this.accepting = false;
      this.renderProgress();
      if (!(await this.show(trial, seq)) || seq !== this.seq) return;
      this.preload(next);
      const choice = await unlessAborted(new Promise((resolve) => { this.chosen = resolve; }), signal);
      this.chosen = null;
      if (!choice || seq !== this.seq) return;
      await this.answer(trial, choice, finish, seq);
    } finally {
      signal.removeEventListener('abort', stop);
    }
  }

  /** Load and decode the pair, then swap it in; false if a newer trial or clear() took over. */
  async show(trial, seq) {
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
      if (seq !== this.seq) return false;
      throw new StimulusLoadError('An image of this pair could not be loaded. Check your connection; trying again…',
                                  { cause: error });
    } finally {
      clearTimeout(slow);
    }
    if (seq !== this.seq) return false;

    // Swap everything in one synchronous step: no half-drawn pair is ever visible.
    this.trial = trial;
    this.trialEl.dataset.trialId = trial.trial_id;
    this.trialEl.dataset.pageKind = this.driver.state.page.kind;
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
    return true;
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
    if (this.mode !== 'trial' || !this.mounted || this.trialEl.hidden) return;
    event.preventDefault(); // arrows would otherwise scroll the page
    if (held) return;
    this.choose(side, 'keyboard');
  }

  choose(side, input) {
    if (!this.accepting || !this.trial || this.mode !== 'trial' || !this.chosen) return; // images not shown yet: ignore
    const rt = Math.max(0, performance.now() - this.t0);
    this.accepting = false;
    this.awaitingChoice = false;
    this.trialEl.dataset.accepting = 'false';
    this.chosen({ side, input, rt });
  }

  /** The vote goes to the driver's queue at once; then the highlight (main) or the server's feedback (quiz). */
  async answer(trial, { side, input, rt }, finish, seq) {
    const quiz = this.driver.state.page.kind === 'quiz';
    const vote = {
      trial_id: trial.trial_id,
      choice: side,
      rt_ms: Math.round(rt),
      input,
      client_time: new Date().toISOString(),
      window: this.windowInfo(),
    };
    // Main trials do not wait for the server (the queue delivers in the background); the quiz's
    // feedback comes in the vote's answer, so it is awaited.
    const delivered = finish(vote, { awaitAnswer: quiz });
    this.releaseFocus();
    this.trialEl.dataset.chosen = side;
    (side === 'left' ? this.left : this.right).dataset.state = 'chosen';

    if (!quiz) {
      await sleep(this.params.highlight_ms);
      return;
    }

    this.mode = 'saving_quiz';
    const saving = setTimeout(() => this.showFeedback('Saving your answer…', 'saving'), this.params.saving_delay_ms);
    let result;
    try {
      [result] = await Promise.all([delivered, sleep(this.params.highlight_ms)]);
    } catch (error) {
      // Refused: the driver reports it and asks the server where things stand.
      clearTimeout(saving);
      this.hideFeedback();
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
  }

  /** Nothing in the app keeps the focus after a vote or a new pair (Space and Enter act on the
   *  focused element: a leftover focus on a page button must not do anything either). */
  releaseFocus() {
    const focused = document.activeElement;
    if (focused && focused !== document.body && this.driver.root.contains(focused)) focused.blur();
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

  /** Off the screen: the page ended, another stage took over, or the driver shows a message. */
  clear() {
    if (!this.mounted) return;
    ++this.seq;
    this.trial = null;
    this.imagesShown = false;
    this.awaitingChoice = false;
    this.hideFeedback();
    this.setMode('idle');
  }
}
