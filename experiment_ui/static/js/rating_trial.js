// Rating trial plugin (kind "rating": ACR, DCR, CCR; ITU-T P.910 / P.808, ITU-R BT.500): the
// parameters it understands are declared first, then the code that runs ONE trial, as a jsPsych
// plugin does.  The assignment driver (assignment_driver.js) decides which trial comes next, queues
// the rating this plugin hands to `finish`, and follows the server from page to page.
//
// Layout: the trial's images side by side (ACR: one; DCR: "Reference" left, "Test" right; CCR:
// "First" left, "Second" right -- which one is the reference is the server's secret), the question
// in the top bar, and below the images one row: the scale's labelled buttons (or a slider with
// the labels at its ticks) and "Next".
//
// Choosing never sends.  A rating is chosen by clicking its button (or the slider), or by a digit
// key; it can be changed freely; only "Next" (or Enter) sends it, and Next is enabled only once a
// rating is chosen.  Nothing in the trial keeps the keyboard focus (its buttons are taken out of
// the tab order and a click does not focus them), so Space cannot press anything, and Enter sends
// only a rating the worker chose for the trial on screen: a fresh trial starts with none.  An Enter
// must be pressed afresh (held keys and auto-repeat never send).  A double click on Next cannot
// answer the next trial either: its Next is disabled until a rating is chosen.
//
// Keys: when every value of the scale is a whole number from 1 to 9 (ACR, DCR: 5..1), the digit
// key *is* the value ("5" = the button labelled 5); otherwise (CCR: -3..3) digit k chooses the k-th
// button from the left.  Each button shows its key.  With the slider, digit k moves to the k-th tick
// and the arrow keys move a focused slider; neither ever sends.
//
// Display policy (the State's `display`, server/paradigms/display.py): "fit" scales the images to
// the window (never above 1, their display size); "pixel_exact" shows one image pixel per device
// pixel.  The smallest window a trial needs is `ratingWindowNeeded` of the server's numbers and the
// fixed chrome below (RATING_CHROME, the sizes rating.css sets; the State may send its own
// `display.chrome`); below it the trial is hidden with a message, as on the paired page.
//
// The plugin keeps its DOM between trials: the trial just answered stays on screen (not clickable)
// until the next one is decoded, so no half-drawn trial is ever visible.

import { t } from './i18n.js';
import { sleep, el, unlessAborted, StimulusLoadError, nextFrame, decoded } from './dom.js';
import { imageScale, policyFactor, round6 } from './display.js';
import { ClipFiles, MediaFailure, failureText, playButton, playClip, playUnderRule, stimulusTexts, stimulusWords } from './media.js';

export const info = Object.freeze({
  name: 'rating',
  version: 1,
  description: 'Category rating (ACR, DCR, CCR) of one image or two side by side, on labelled buttons or a slider; sent with Next.',
  // Where its ratings go (the response queue's route): POST .../ratings, idempotent by rating_id.
  response: Object.freeze({
    path: 'ratings',
    idField: 'rating_id',
    // The same trial answered twice (two open tabs) is harmless, and so are ratings still queued when
    // a check ended the assignment (the page that follows says why); any other refusal deserves a word.
    quietRejection: (error) => ['trial_already_answered', 'assignment_ended'].includes(error.error),
  }),
  parameters: Object.freeze({
    loading_delay_ms: { type: 'int', default: 300,
      description: 'Show "Loading images" only if the next trial is not ready after this long (avoids flicker).' },
    feedback_ms: { type: 'int', default: 1000,
      description: 'Practice: how long "Correct" stays on screen (when the server judges practice ratings).' },
    feedback_wrong_ms: { type: 'int', default: 2000,
      description: 'Practice: how long the longer "Not quite ..." explanation stays on screen.' },
    saving_delay_ms: { type: 'int', default: 400,
      description: 'Practice: show "Saving" only if the server has not answered after this long.' },
    send_key: { type: 'key', default: 'Enter', description: 'Key that sends the chosen rating (as Next does).' },
    clip_timeout_ms: { type: 'int', default: 120000,
      description: 'Video: a clip whose whole file has not loaded after this long is a timeout failure (P.910 toolkit: 120 s).' },
  }),
});

/**
 * The rating page's fixed chrome in CSS px (rating.css sets these sizes; a State's display.chrome
 * overrides them): what the page takes besides the images, which scale.
 */
export const RATING_CHROME = Object.freeze({
  bar: 45,          // the top bar (.pc-bar: 44 px and its 1 px border)
  label: 36,        // .rating-label (28 px) and the gap below it; only when a trial shows two images
  pad: 8,           // .rating-trial padding (top, bottom, sides)
  gap: 24,          // between the two images
  scale: 72,        // the scale row (.rating-scale: 64 px) and the gap above it
  scale_width: 880, // the scale row's smallest width (every label of P.910's scales on two lines at most)
  margin: 2,        // kept free so that rounding never brings a scrollbar back
});

/**
 * The stacked layout of narrow windows and phones (rating.css `[data-layout="stacked"]`): below the images the
 * question (40 px: two lines; the top bar has no room for it), the row of answers (64 px, 4 px apart: seven
 * 44 px touch targets in 332 px) and Next (48 px) across the row, 8 px between them (scale: 8 + 40 + 8 + 64 + 8
 * + 48). The server's RATING_CHROME_STACKED (rating/study.py).
 */
export const RATING_CHROME_STACKED = Object.freeze({ ...RATING_CHROME, scale: 176, scale_width: 332 });

/** The narrowest window of the side-by-side layout: its row of answers and Next, with the padding. */
export function sideBySideWidth(chrome = RATING_CHROME) {
  return chrome.scale_width + 2 * chrome.pad + chrome.margin;
}

/**
 * The chrome of a study's window (server: rating_chrome): the stacked layout's when its floor accepts windows
 * narrower than the side-by-side layout needs.
 * @param {number} floorWidth  the study's min_window_width
 */
export function requirementChrome(floorWidth) {
  return (floorWidth || 0) < sideBySideWidth() ? RATING_CHROME_STACKED : RATING_CHROME;
}

const DEFAULT_DISPLAY = Object.freeze({ policy: 'fit', min_image_scale: 0.5, floor: [0, 0] });

/**
 * Width and height (CSS px) the rating page takes besides the images of a trial of `nImages`.
 * @param {number} nImages  1 (ACR) or 2 (DCR, CCR)
 * @param {object} chrome  RATING_CHROME or the State's display.chrome
 */
export function ratingChromeSize(nImages, chrome = RATING_CHROME) {
  return {
    width: 2 * chrome.pad + (nImages - 1) * chrome.gap + chrome.margin,
    height: chrome.bar + chrome.pad + (nImages > 1 ? chrome.label : 0) + chrome.scale + chrome.pad + chrome.margin,
  };
}

/**
 * The smallest inner window (CSS px) that shows a trial's images side by side at `factor` of their
 * size, with the scale below them.
 * @param {number[][]} sizes  [width, height] of each image at scale 1 (the State's image sizes)
 * @param {number} factor  policyFactor (display.js): min_image_scale (fit) or 1 / devicePixelRatio
 * @param {number[]} floor  the study's smallest window whatever its images
 * @param {object} [chrome]  the layout's chrome (default: the study's, requirementChrome of its floor)
 * @returns {{width: number, height: number}}
 */
export function ratingWindowNeeded(sizes, factor, floor = [0, 0], chrome = requirementChrome(floor[0])) {
  const extra = ratingChromeSize(sizes.length, chrome);
  const images = Math.ceil(round6(sizes.reduce((sum, [w]) => sum + w, 0) * factor)) + extra.width;
  const scale = chrome.scale_width + 2 * chrome.pad + chrome.margin;
  const height = Math.ceil(round6(Math.max(...sizes.map(([, h]) => h)) * factor)) + extra.height;
  return { width: Math.max(floor[0] || 0, images, scale), height: Math.max(floor[1] || 0, height) };
}

/** The images of a trial in display order: reference before test (DCR), first before second (CCR). */
const ROLE_ORDER = Object.freeze({ reference: 0, first: 0, test: 1, second: 1 });
export function orderedImages(trial) {
  return [...(trial.images || [])].sort((a, b) => (ROLE_ORDER[a.role] ?? 1) - (ROLE_ORDER[b.role] ?? 1));
}

/** What the label above an image says (none when a trial shows one image: ACR). */
function roleLabel(role, nImages) {
  if (nImages < 2) return '';
  return { reference: t('Reference'), test: t('Test'), first: t('First'), second: t('Second') }[role] || '';
}

/** The accessible name of one of a trial's `nImages` stimuli ("Test video", "Image to rate"); `one`: stimulusWords().one. */
function stimulusLabel(role, nImages, one) {
  const video = one === 'video';
  if (nImages < 2) return video ? t('Video to rate') : t('Image to rate');
  const labels = video
    ? { reference: t('Reference video'), test: t('Test video'), first: t('First video'), second: t('Second video') }
    : { reference: t('Reference image'), test: t('Test image'), first: t('First image'), second: t('Second image') };
  return labels[role] || '';
}

// The server sends its question (scales.py); these stand in if a State has none.  `one`: stimulusWords().one.
const DEFAULT_QUESTIONS = Object.freeze({
  acr: (one) => (one === 'video' ? t('How would you rate the quality of this video?') : t('How would you rate the quality of this image?')),
  dcr: (one) => (one === 'video' ? t('How does the test video compare with the reference?') : t('How does the test image compare with the reference?')),
  ccr: (one) => (one === 'video' ? t('How does the second video compare with the first?') : t('How does the second image compare with the first?')),
});

/** The trial's ID as the server named it (State trials carry `trial_id`, or `id`). */
export const trialIdOf = (trial) => (trial.trial_id !== undefined ? trial.trial_id : trial.id);

/**
 * The key that chooses each of `values` (in display order): the value itself when every value is a
 * whole number 1-9 (ACR, DCR), else the button's place from the left, 1-9 (CCR); null beyond 9.
 */
export function scaleKeys(values) {
  const digits = values.every((v) => Number.isInteger(v) && v >= 1 && v <= 9)
    && new Set(values).size === values.length;
  return values.map((v, i) => (digits ? String(v) : i < 9 ? String(i + 1) : null));
}

/** The slider's value at `position` (0 = the first tick .. n-1 = the last): linear between the ticks. */
export function sliderValue(values, position) {
  const n = values.length;
  const p = Math.min(n - 1, Math.max(0, position));
  const value = values[0] + (p * (values[n - 1] - values[0])) / (n - 1);
  return Math.round(value * 1000) / 1000;
}

/** The rating plugin (one instance per page load; `run` shows one trial). */
export class RatingTrial {
  static info = info;

  /**
   * @param {import('./assignment_driver.js').AssignmentDriver} driver  the page's assignment driver
   * @param {object} params  this plugin's parameters (declared defaults, overridden by the page's config)
   */
  constructor(driver, params) {
    this.driver = driver;
    this.params = params;
    this.mounted = false;
    this.trial = null;          // the trial on screen
    this.images = [];           // its images in display order
    this.scaleKey = null;       // the scale the buttons were built for (rebuilt when the State's changes)
    this.values = [];           // the scale's values in display order
    this.keys = [];             // the key of each value (scaleKeys)
    this.slider = false;
    this.rating = null;         // the rating chosen for the trial on screen (null: none yet)
    this.accepting = false;     // choices and Next count only while true
    this.awaitingRating = false; // the trial on screen has not been sent yet
    this.imagesShown = false;
    this.t0 = null;             // performance.now() when the current images became visible
    this.seq = 0;               // bumps on every trial and on clear(); stale async continuations check it
    this.mode = 'idle';         // idle | loading | trial | saving_quiz
    this.preloaded = new Map(); // url -> Image of the next trial (keeps them in the memory cache)
    this.keysDown = new Set();  // keys pressed and not yet released: Enter must be pressed afresh
    this.scale = null;          // CSS px per image px of the trial on screen
    this.sent = null;           // resolves the wait for Next
    // Video trials (media.js): clips preloaded whole (url -> Promise of an object URL), the clips on screen,
    // their playback log, and the failures met per trial (recorded on its rating).
    this.clipFiles = new ClipFiles({ timeoutMs: params.clip_timeout_ms });
    this.clips = null;
    this.playing = false;
    this.playback = null;
    this.failures = new Map();
    // Keys are tracked from the start, so that a key already held when the first trial appears does nothing.
    document.addEventListener('keydown', (event) => this.onKeyDown(event));
    document.addEventListener('keyup', (event) => this.keysDown.delete(event.key));
    // Keys released while another window had the focus send no keyup here.
    window.addEventListener('blur', () => this.keysDown.clear());
    window.addEventListener('resize', () => this.updateTrialVisibility());
  }

  // --- DOM -----------------------------------------------------------------

  /** Build the trial's DOM (once) in `container`, and the question/feedback line in the driver's prompt. */
  mount(container) {
    if (this.mounted) return;
    this.mounted = true;
    this.words = stimulusWords(this.driver.state); // "image" or "video": a study shows one kind
    this.imagesEl = el('div', { class: 'rating-images' });
    this.scaleEl = el('div', { class: 'rating-options', role: 'group', 'aria-labelledby': 'rating-question' });
    // Next never takes the focus (a focused button would turn Space into a send); Enter is its key.
    this.nextButton = el('button', {
      type: 'button', id: 'rating-next', class: 'rating-next', tabindex: '-1', disabled: true,
      'aria-keyshortcuts': this.params.send_key,
    }, el('span', { text: t('Next') }), ' ', el('kbd', { 'aria-hidden': 'true', text: this.params.send_key === 'Enter' ? t('↵ Enter') : this.params.send_key }));
    this.nextButton.addEventListener('mousedown', (event) => event.preventDefault());
    this.nextButton.addEventListener('click', (event) => {
      if (event.isTrusted) this.send();
    });
    // The stacked layout's question (the top bar is too narrow for it on a phone): shown by rating.css there only.
    this.stackedQuestionEl = el('p', { class: 'rating-question-stacked', 'aria-hidden': 'true' });
    this.scaleRow = el('div', { class: 'rating-scale' }, this.stackedQuestionEl, this.scaleEl, this.nextButton);
    this.trialEl = el('section', { id: 'trial', class: 'rating-trial', 'aria-label': this.words.one === 'video' ? t('Videos to rate') : t('Images to rate'), hidden: true },
      this.imagesEl, this.scaleRow);

    this.questionEl = el('p', { id: 'rating-question', class: 'rating-question', hidden: true });
    this.feedbackEl = el('p', { id: 'feedback', class: 'pc-feedback', role: 'status', 'aria-live': 'assertive', hidden: true });
    this.driver.chrome.prompt.append(this.questionEl, this.feedbackEl);

    this.sizeNumbersEl = el('p', { class: 'pc-size-numbers' });
    this.tooSmallEl = el('section', { id: 'window-too-small', class: 'pc-panel pc-too-small', role: 'alert', hidden: true },
      el('h2', { text: t('Please make the window larger') }),
      el('p', { text: stimulusTexts(this.words.one === 'video').tooSmall }),
      this.sizeNumbersEl);
    container.append(this.tooSmallEl, this.trialEl);
    // The bar (feedback) and the notice change the room left for the images.
    if (typeof ResizeObserver !== 'undefined') {
      this.chromeObserver = new ResizeObserver(() => this.updateTrialVisibility());
      for (const node of this.driver.chromeAbove()) this.chromeObserver.observe(node);
    }
  }

  /** The State's scale, with the question the page asks. */
  scaleSpec() {
    const state = this.driver.state;
    const scale = (state && state.scale) || {};
    const method = scale.method || 'acr';
    return {
      method,
      slider: Boolean(scale.slider),
      values: (scale.values || []).map(Number),
      labels: scale.labels || [],
      question: scale.question || (DEFAULT_QUESTIONS[method] || DEFAULT_QUESTIONS.acr)(stimulusWords(state).one),
    };
  }

  /** (Re)build the buttons or the slider when the State's scale differs from the one on screen. */
  renderScale() {
    const spec = this.scaleSpec();
    const key = JSON.stringify(spec);
    if (key === this.scaleKey) return;
    this.scaleKey = key;
    this.values = spec.values;
    this.keys = scaleKeys(spec.values);
    this.slider = spec.slider;
    this.questionEl.textContent = spec.question;
    this.stackedQuestionEl.textContent = spec.question;
    this.trialEl.dataset.method = spec.method;
    this.scaleRow.dataset.kind = spec.slider ? 'slider' : 'buttons';
    if (spec.slider) {
      this.renderSlider(spec);
    } else {
      this.buttons = spec.values.map((value, i) => {
        const keyName = this.keys[i];
        const button = el('button', {
          type: 'button', class: 'rating-option', tabindex: '-1', 'aria-pressed': 'false',
          'data-value': String(value), 'aria-keyshortcuts': keyName,
        }, keyName && el('kbd', { 'aria-hidden': 'true', text: keyName }),
        el('span', { class: 'rating-option-label', text: spec.labels[i] ?? String(value) }));
        // A click chooses (never sends) and leaves the focus where it was (on nothing in the trial).
        button.addEventListener('mousedown', (event) => event.preventDefault());
        button.addEventListener('click', (event) => {
          if (event.isTrusted) this.choose(value);
        });
        return button;
      });
      this.sliderEl = null;
      this.scaleEl.replaceChildren(...this.buttons);
    }
  }

  /** A continuous slider over the scale's range, its labels at the ticks; no thumb until it is touched. */
  renderSlider(spec) {
    const n = spec.values.length;
    this.buttons = [];
    this.sliderEl = el('input', {
      type: 'range', id: 'rating-slider', class: 'rating-slider', min: '0', max: String(n - 1), step: 'any',
      'aria-labelledby': 'rating-question', 'data-untouched': 'true',
    });
    const ticks = el('div', { class: 'rating-ticks', 'aria-hidden': 'true', style: `--ticks: ${n}` }, ...spec.values.map((value, i) => el('span', {
      class: 'rating-tick', 'data-value': String(value), style: `--at: ${(i / (n - 1)).toFixed(6)}`,
    }, this.keys[i] && el('kbd', { text: this.keys[i] }), ' ', spec.labels[i] ?? String(value))));
    // Moving it (pointer or arrow keys) chooses; a click on the thumb's resting place moves nothing, so a
    // pointer release chooses too.
    this.sliderEl.addEventListener('input', () => this.choose(sliderValue(this.values, Number(this.sliderEl.value)), false));
    this.sliderEl.addEventListener('pointerup', () => this.choose(sliderValue(this.values, Number(this.sliderEl.value)), false));
    this.scaleEl.replaceChildren(el('div', { class: 'rating-slider-box' }, this.sliderEl, ticks));
  }

  setMode(mode, statusText = '') {
    this.mode = mode;
    this.driver.setStatus(statusText);
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
      this.sizeNumbersEl.textContent = stimulusTexts(false).sizeNumbers(need);
    }
    const show = inTrial && !tooSmall && this.trial !== null && this.imagesShown;
    const wasHidden = this.trialEl.hidden;
    this.trialEl.hidden = !show;
    this.questionEl.hidden = !show || !this.feedbackEl.hidden;
    if (!show) {
      // Hidden images cannot be judged: stop the clock and refuse choices.
      if (this.mode === 'trial') this.setAccepting(false);
    } else if (wasHidden && this.mode === 'trial' && this.awaitingRating) {
      // Shown again (window enlarged): the response time starts afresh.
      this.armClock();
    }
  }

  setAccepting(on) {
    this.accepting = on;
    this.trialEl.dataset.accepting = String(on);
    this.updateNext();
  }

  updateNext() {
    this.nextButton.disabled = !(this.accepting && this.rating !== null);
  }

  /**
   * The State's display settings (policy, min_image_scale, floor) and the chrome of the layout: stacked in a
   * window narrower than the side-by-side layout, when the study accepts one (its floor is narrower too).
   */
  display() {
    const state = this.driver.state;
    const display = { ...DEFAULT_DISPLAY, ...((state && state.display) || {}) };
    display.layout = requirementChrome(display.floor[0]) === RATING_CHROME_STACKED
      && window.innerWidth < sideBySideWidth() ? 'stacked' : 'side-by-side';
    display.chrome = { ...(display.layout === 'stacked' ? RATING_CHROME_STACKED : RATING_CHROME),
      ...(display.chrome || {}) };
    return display;
  }

  /**
   * Scale the images to the window and say which window the trial needs (ratingWindowNeeded of the
   * server's numbers).
   * @returns {{width: number, height: number}} the smallest inner window (CSS px) for this trial
   */
  layout() {
    const display = this.display();
    const dpr = window.devicePixelRatio || 1;
    const sizes = this.images.map((image) => [image.width, image.height]);
    const need = ratingWindowNeeded(sizes, policyFactor(display.policy, display.min_image_scale, dpr),
                                    display.floor, display.chrome);
    // The images side by side (the scale row below them is in the chrome).
    const content = [sizes.reduce((sum, [w]) => sum + w, 0), Math.max(...sizes.map(([, h]) => h))];
    this.scale = imageScale(display.policy, dpr, content, ratingChromeSize(sizes.length, display.chrome),
                            this.driver.chrome.notice);
    this.applyScale(display.chrome);
    return need;
  }

  applyScale(chrome) {
    const px = (value) => `${(value * this.scale).toFixed(3)}px`;
    const display = this.display();
    this.trialEl.dataset.scale = this.scale.toFixed(3);
    this.trialEl.dataset.policy = display.policy;
    this.trialEl.dataset.layout = display.layout;
    let total = 0;
    this.images.forEach((image, i) => {
      const img = this.imageEls[i];
      img.style.width = px(image.width);
      img.style.height = px(image.height);
      total += image.width * this.scale;
    });
    const imagesWidth = total + (this.images.length - 1) * chrome.gap;
    // The scale row spans the images, and never less than its own smallest width.
    this.scaleRow.style.width = `${Math.max(imagesWidth, chrome.scale_width).toFixed(3)}px`;
  }

  // --- one trial -------------------------------------------------------------

  /** The driver's state changed while a trial is on screen (e.g. a re-sync): redraw the progress line. */
  update() {
    this.renderProgress();
  }

  renderProgress() {
    const state = this.driver.state;
    const page = state && state.page;
    if (!page) return;
    const local = this.driver.localAnswers();
    const done = page.trials.filter((t) => t.answered || local.has(trialIdOf(t))).length;
    const n = page.n_trials || page.trials.length;
    const k = Math.min(n, done + 1);
    // Practice pages do not count towards pages_completed: the page being worked on is pages_completed + 1.
    const text = page.kind === 'quiz'
      ? t('Practice %(k)s of %(n)s', { k, n })
      : t('Trial %(k)s of %(n)s · page %(page)s', { k, n, page: (state.progress?.pages_completed ?? 0) + 1 });
    this.driver.setProgress(text, { pageKind: page.kind });
  }

  /**
   * Show `trial`, let the worker choose (and change) a rating, hand it to `finish` on Next, and resolve
   * once the next trial may appear (main trials: at once; practice: after the server's feedback, if any).
   * @param {HTMLElement} container  the driver's stage element
   * @param {object} trial  one trial of State's page ({trial_id or id, position, answered, images})
   * @param {{finish: Function, next: object|null, signal: AbortSignal}} step
   */
  async run(container, trial, { finish, next, signal }) {
    this.mount(container);
    const seq = ++this.seq;
    const stop = () => { this.seq += 1; this.setAccepting(false); };
    signal.addEventListener('abort', stop, { once: true });
    try {
      this.awaitingRating = false;
      this.setAccepting(false);
      this.renderProgress();
      if (!(await this.show(trial, seq)) || seq !== this.seq) return;
      this.preload(next);
      if (this.clips && !(await this.playTrial(trial, seq))) return;
      const sent = await unlessAborted(new Promise((resolve) => { this.sent = resolve; }), signal);
      this.sent = null;
      if (!sent || seq !== this.seq) return;
      await this.answer(trial, sent, finish, seq);
    } finally {
      signal.removeEventListener('abort', stop);
    }
  }

  /** Load and decode the trial's images, then swap them in; false if a newer trial or clear() took over. */
  async show(trial, seq) {
    // Keep the old trial (already sent, not clickable) until the new one is decoded; say "loading"
    // only if that takes noticeably long.
    const slow = setTimeout(() => {
      if (seq !== this.seq) return;
      this.imagesShown = false;
      this.setMode('loading', stimulusTexts(this.words.one === 'video').loading);
    }, this.trial ? this.params.loading_delay_ms : 0);
    const images = orderedImages(trial);
    let imgs;
    try {
      imgs = await this.buildImages(images);
    } catch (error) {
      if (seq !== this.seq) return false;
      if (error instanceof MediaFailure) throw this.mediaFailure(trial, error);
      throw new StimulusLoadError(this.words.one === 'video'
        ? t('One of the videos of this trial could not be loaded. Check your connection; trying again…')
        : t('One of the images of this trial could not be loaded. Check your connection; trying again…'),
      { cause: error });
    } finally {
      clearTimeout(slow);
    }
    if (seq !== this.seq) return false;

    // Swap everything in one synchronous step: no half-drawn trial is ever visible.
    this.renderScale();
    this.trial = trial;
    this.images = images;
    this.imageEls = imgs;
    this.trialEl.dataset.trialId = String(trialIdOf(trial));
    this.trialEl.dataset.pageKind = this.driver.state.page.kind;
    this.trialEl.dataset.images = String(images.length);
    this.imagesEl.replaceChildren(...images.map((image, i) => {
      const label = roleLabel(image.role, images.length);
      return el('figure', { class: 'rating-figure', 'data-role': image.role },
        label && el('figcaption', { class: 'rating-label', text: label }), imgs[i]);
    }));
    this.resetChoice();
    this.hideFeedback();
    this.releaseFocus();
    this.imagesShown = true;
    this.awaitingRating = true;
    this.clips = imgs[0] instanceof HTMLVideoElement ? imgs : null;
    this.playing = this.clips !== null; // no choice counts before the clips have played
    this.playback = null;
    delete this.trialEl.dataset.played;
    const wasVisible = !this.trialEl.hidden;
    this.setMode('trial'); // arms the clock itself if this un-hides the trial
    if (wasVisible && !this.trialEl.hidden) this.armClock();
    return true;
  }

  /** A fresh trial: no rating chosen, the slider without its thumb. */
  resetChoice() {
    this.rating = null;
    delete this.trialEl.dataset.rating;
    for (const button of this.buttons || []) button.setAttribute('aria-pressed', 'false');
    if (this.sliderEl) {
      this.sliderEl.dataset.untouched = 'true';
      this.sliderEl.value = String((this.values.length - 1) / 2);
      this.sliderEl.removeAttribute('aria-valuetext');
    }
    this.updateNext();
  }

  /** Start the response-time clock at the first frame that shows the images. */
  async armClock() {
    const trial = this.trial;
    this.setAccepting(false);
    await nextFrame();
    if (this.trial !== trial || this.trialEl.hidden || !this.awaitingRating || this.playing) return;
    this.t0 = performance.now();
    this.setAccepting(true);
  }

  /** Decoded <img> elements for `images` (in display order); for video trials, decoded <video>s. */
  async buildImages(images) {
    if (images.some((image) => image.kind === 'video')) return this.buildClips(images);
    const imgs = images.map((image) => {
      const img = new Image();
      img.className = 'rating-image';
      img.alt = stimulusLabel(image.role, images.length, 'image');
      img.decoding = 'async';
      img.draggable = false;
      img.src = image.url;
      return img;
    });
    await Promise.all(imgs.map(decoded));
    return imgs;
  }

  // --- video (media.js) -----------------------------------------------------

  /** Decoded <video> elements of a trial's clips, each loaded whole first; the progress in the status line. */
  async buildClips(images) {
    const urls = images.map((image) => image.url);
    const videos = await this.clipFiles.elements(urls, (done) => {
      if (this.mode === 'loading') this.driver.setStatus(stimulusTexts(true).clipProgress(done));
    });
    videos.forEach((video, i) => {
      video.className = 'rating-image rating-video';
      video.dataset.durationS = String(images[i].duration_s ?? '');
      video.setAttribute('aria-label', stimulusLabel(images[i].role, images.length, 'video'));
    });
    // Object URLs of clips no longer needed (not this trial's, not the next one's) are released.
    this.clipFiles.keepOnly(new Set([...urls, ...(this.nextUrls || [])]));
    return videos;
  }

  /** A clip's failure: recorded on the trial (sent with its rating) and named to the worker. */
  mediaFailure(trial, failure) {
    this.failures.set(trialIdOf(trial), failure.message);
    return new StimulusLoadError(`${failureText(failure)} ${t('Trying again…')}`, { cause: failure });
  }

  /**
   * Play the trial's clips one after the other (DCR: the reference, then the test), then let the worker
   * rate; an unfaithful playback (the State's media.rule) is played again up to rule.max_repeats times.
   * @returns {Promise<boolean>} false if a newer trial or clear() took over
   */
  async playTrial(trial, seq) {
    const media = this.driver.state.media || {};
    const rule = media.rule || null;
    const clips = this.clips;
    const duration = clips.reduce((sum, v) => sum + 1000 * (Number(v.dataset.durationS) || v.duration || 0), 0);
    let log;
    try {
      this.trialEl.dataset.playing = 'true';
      log = await playUnderRule((fresh) => this.playClips(clips, fresh, seq), rule, duration,
                                (n) => { this.trialEl.dataset.repeats = String(n); });
      if (seq !== this.seq) return false;
    } catch (error) {
      if (seq !== this.seq) return false;
      if (error instanceof MediaFailure) throw this.mediaFailure(trial, error);
      throw error;
    } finally {
      delete this.trialEl.dataset.playing;
    }
    log.error = this.failures.get(trialIdOf(trial)) || null;
    this.playback = log;
    this.playing = false;
    this.trialEl.dataset.played = 'true';
    this.showReplay(media.replays || 0, seq);
    if (!this.trialEl.hidden) this.armClock();
    return true;
  }

  async playClips(clips, log, seq) {
    for (const video of clips) {
      if (seq !== this.seq) return;
      video.dataset.state = 'playing';
      await playClip(video, log, { durationS: Number(video.dataset.durationS) || video.duration,
                                   askClick: () => this.askClick(video) });
      video.dataset.state = 'played';
    }
  }

  /** The browser refused to autoplay: a Play button over the clip starts it (never a stuck page). */
  askClick(video) {
    this.driver.setStatus(t('Your browser waits for a click to play the video.'));
    return playButton(video.parentElement, { id: 'rating-play', className: 'rating-play' });
  }

  /** "Play again" while the study allows replays of this trial (each counted in the log). */
  showReplay(left, seq) {
    this.replayButton?.remove();
    if (left <= 0) return;
    this.replayButton = el('button', { type: 'button', id: 'rating-replay', class: 'rating-replay',
                                       text: t('Play again (%(left)s)', { left }) });
    this.replayButton.addEventListener('click', async () => {
      if (seq !== this.seq || !this.accepting) return;
      this.replayButton.remove();
      this.setAccepting(false);
      this.playing = true;
      this.playback.replays += 1;
      try {
        await this.playClips(this.clips, this.playback, seq);
      } finally {
        this.playing = false;
      }
      if (seq !== this.seq) return;
      this.showReplay(left - 1, seq);
      this.setAccepting(true);
    });
    this.scaleRow.prepend(this.replayButton);
  }

  /** Warm the cache with the next trial's images while this one is judged (clips: their whole files). */
  preload(trial) {
    this.preloaded.clear();
    this.nextUrls = new Set((trial?.images || []).map((image) => image.url));
    if (!trial) return;
    if ((trial.images || []).some((image) => image.kind === 'video')) {
      for (const image of trial.images) this.clipFiles.file(image.url).catch(() => {}); // shown when the trial is
      return;
    }
    for (const image of trial.images || []) {
      if (this.preloaded.has(image.url)) continue;
      const img = new Image();
      img.src = image.url;
      img.decode().catch(() => {}); // a failure shows up (and is handled) when the trial is shown
      this.preloaded.set(image.url, img);
    }
  }

  /**
   * Digit keys choose, Enter (pressed afresh) sends; both only while a trial takes choices.  Keys
   * with Alt, Ctrl or Meta belong to the browser.
   */
  onKeyDown(event) {
    const held = event.repeat || this.keysDown.has(event.key);
    this.keysDown.add(event.key);
    if (event.altKey || event.ctrlKey || event.metaKey) return;
    if (this.mode !== 'trial' || !this.mounted || this.trialEl.hidden) return;
    if (event.key === this.params.send_key) {
      event.preventDefault(); // nothing else acts on it (a focused control, a form)
      if (!held) this.send();
      return;
    }
    const index = this.keys.indexOf(event.key);
    if (index < 0 || event.shiftKey) return;
    event.preventDefault();
    if (held) return;
    if (this.sliderEl) {
      this.sliderEl.value = String(index);
      this.choose(this.values[index], false);
    } else {
      this.choose(this.values[index]);
    }
  }

  /** Choose `value` (never sends): the button (or the slider's thumb) shows it; Next is enabled. */
  choose(value, fromButton = true) {
    if (!this.accepting || !this.trial || this.mode !== 'trial' || !this.awaitingRating) return;
    this.rating = value;
    this.trialEl.dataset.rating = String(value);
    if (fromButton) {
      for (const button of this.buttons) {
        button.setAttribute('aria-pressed', String(Number(button.dataset.value) === value));
      }
    }
    if (this.sliderEl) {
      this.sliderEl.dataset.untouched = 'false';
      const nearest = this.values.reduce((best, v, i) => (Math.abs(v - value) < Math.abs(this.values[best] - value) ? i : best), 0);
      const label = this.scaleSpec().labels[nearest];
      this.sliderEl.setAttribute('aria-valuetext', label ? `${value} (${label})` : String(value));
    }
    this.updateNext();
  }

  /** Next (or Enter): send the chosen rating of the trial on screen, if there is one. */
  send() {
    if (!this.accepting || this.rating === null || this.mode !== 'trial' || !this.sent) return;
    const rt = this.driver.activeSince(this.t0);  // a display change's pause left out
    this.awaitingRating = false;
    this.setAccepting(false);
    this.sent({ rating: this.rating, rt });
  }

  /** The rating goes to the driver's queue at once; in practice the server's feedback is shown, if any. */
  async answer(trial, { rating, rt }, finish, seq) {
    const quiz = this.driver.state.page.kind === 'quiz';
    const body = { trial_id: trialIdOf(trial), rating, rt_ms: Math.round(rt) };
    if (this.playback) body.playback = this.playback.toJSON();
    // Main trials do not wait for the server (the queue delivers in the background); practice
    // feedback comes in the rating's answer, so it is awaited.
    const delivered = finish(body, { awaitAnswer: quiz });
    this.releaseFocus();
    if (!quiz) return;

    this.mode = 'saving_quiz';
    const saving = setTimeout(() => this.showFeedback(t('Saving your answer…'), 'saving'), this.params.saving_delay_ms);
    let result;
    try {
      result = await delivered;
    } catch (error) {
      // Refused: the driver reports it and asks the server where things stand.
      clearTimeout(saving);
      this.hideFeedback();
      return;
    }
    clearTimeout(saving);
    if (seq !== this.seq) return;
    const feedback = result && result.feedback;
    const correct = feedback && typeof feedback.correct === 'boolean' ? feedback.correct : null;
    if (correct === true) {
      this.showFeedback(t('Correct'), 'correct');
    } else if (correct === false) {
      this.showFeedback(feedback.message || t('Not quite: this one has a clear answer. Look closely before you rate.'), 'wrong');
    } else {
      this.hideFeedback();
    }
    await sleep(correct === false ? this.params.feedback_wrong_ms : correct === true ? this.params.feedback_ms : 0);
    if (seq !== this.seq) return;
    this.mode = 'trial';
  }

  /** Nothing in the app keeps the focus after a rating is sent or a new trial appears. */
  releaseFocus() {
    const focused = document.activeElement;
    if (focused && focused !== document.body && this.driver.root.contains(focused)) focused.blur();
  }

  showFeedback(text, kind) {
    this.feedbackEl.textContent = text;
    this.feedbackEl.dataset.kind = kind;
    this.feedbackEl.hidden = false;
    this.questionEl.hidden = true;
  }

  hideFeedback() {
    this.feedbackEl.hidden = true;
    this.feedbackEl.textContent = '';
    delete this.feedbackEl.dataset.kind;
    this.questionEl.hidden = !(this.mode === 'trial' || this.mode === 'saving_quiz') || this.trialEl.hidden;
  }

  /** Off the screen: the page ended, another stage took over, or the driver shows a message. */
  clear() {
    if (!this.mounted) return;
    ++this.seq;
    this.trial = null;
    this.imagesShown = false;
    this.awaitingRating = false;
    this.hideFeedback();
    this.setMode('idle');
  }
}
