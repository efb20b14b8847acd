// Paired-comparison (PC) trial plugin: the parameters it understands are declared first, then
// the code that runs ONE trial, as a jsPsych plugin does.  The assignment driver
// (assignment_driver.js) decides which pair comes next, queues the vote this plugin hands to
// `finish`, and follows the server from page to page.
//
// Layout (StudyMB 2.0, Fig. 4): LEFT candidate | REFERENCE | RIGHT candidate, one *view* at a
// time: the whole images, or one zoom region of all three (keys 1, 2, ... or the buttons above
// switch at once; every image is decoded before the pair appears).  The worker picks the
// candidate closer to the reference by clicking its column or pressing ArrowLeft / ArrowRight,
// in any view.  Forced choice: no default, no submit button.
//
// Nothing else votes.  The candidates are not focusable (a focused button would
// turn a later Space or Enter into a vote for whatever pair is on screen then);
// a vote key must be pressed afresh for each pair (held keys and auto-repeat do
// not vote twice).  The view switches are keys 1-9 and buttons that never take the focus.
//
// Display policy (the State's `display`, server/paradigms/display.py): "fit" scales each view to
// the inside of the browser window (never above the display size); "pixel_exact" shows one image
// pixel per device pixel (CSS size = pixels / devicePixelRatio).  The window a trial needs is
// computed from the server's numbers (window.js of server/paradigms/paired/static/, the twin of
// paired/window.py, served as /static/paradigms/pc/window.js); below it the pair is hidden with a message.
//
// The plugin keeps its DOM between trials: the pair just answered stays on screen (not
// clickable) until the next one is decoded, so no half-drawn pair is ever visible.
//
// Video clips (the State's `media`, media.js): the three clips' whole files are preloaded, then played
// once without controls, the two candidates started together on the same frame (media.js playTogether,
// which measures the drift between them); the reference plays with them in the middle ([media]
// reference_position "between") or alone before them ("before": the page shows one phase at a time,
// data-phase "reference" then "pair"). No choice counts before the clips have played; an unfaithful
// playback is played again under the study's rule, "Play again" offers the study's replays, and the
// trial's playback log goes with the vote.

import { t, tParts } from './i18n.js';
import { sleep, el, unlessAborted, StimulusLoadError, nextFrame, decoded } from './dom.js';
import { imageScale, policyFactor } from './display.js';
import { chromeSize, windowNeeded } from '../paradigms/pc/window.js';
import { ClipFiles, MediaFailure, failureText, playButton, playTogether, playUnderRule, stimulusTexts, stimulusWords } from './media.js';

export const info = Object.freeze({
  name: 'paired-comparison',
  version: 3,
  description: 'Forced choice between two candidates shown either side of a reference; whole images and zoom regions one view at a time.',
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
    clip_timeout_ms: { type: 'int', default: 120000,
      description: 'Video: a clip whose whole file has not loaded after this long is a timeout failure (P.910 toolkit: 120 s).' },
  }),
});

const DEFAULT_DISPLAY = Object.freeze({
  policy: 'fit', min_image_scale: 0.5, floor: [0, 0],
  chrome: { bar: 45, views: 36, label: 36, pad: 8, gap: 24, margin: 2 },
});
const VIEW_KEYS = ['1', '2', '3', '4', '5', '6', '7', '8', '9'];

/** Whether a trial shows video clips (the State's stimulus fields, server/paradigms/media.py). */
function isClipTrial(trial) {
  return Boolean(trial) && trial.reference.kind === 'video';
}

/** The trial's views ([width, height] of a panel at scale 1), as many as its images have. */
function trialViews(trial) {
  const n = 1 + Math.min(...[trial.left, trial.reference, trial.right].map((image) => (image.crops || []).length));
  const views = trial.views || [[trial.reference.width, trial.reference.height]];
  return views.slice(0, n);
}

function sortedCrops(image) {
  return [...(image.crops || [])].sort((a, b) => a.rank - b.rank);
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
    this.view = 0;              // the view on screen: 0 = whole images, r = zoom region r
    this.scale = null;          // CSS px per panel px of the view on screen
    this.chosen = null;         // resolves the wait for the worker's choice
    // Video trials: the clips' whole files, the <video>s on screen ({left, reference, right}), whether they
    // are playing (no choice counts then), the trial's playback log, and the failures met per trial.
    this.clipFiles = new ClipFiles({ timeoutMs: params.clip_timeout_ms });
    this.clips = null;
    this.playing = false;
    this.playback = null;
    this.failures = new Map();
    this.nextUrls = new Set();
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
    this.words = stimulusWords(this.driver.state); // "image" or "video": a study shows one kind
    const video = this.words.one === 'video';
    this.video = video;
    const column = (side) => {
      const label = side === 'left'
        ? el('span', { class: 'pc-label' }, el('kbd', { class: 'pc-key', 'aria-hidden': 'true', text: '←' }), ' ', t('Left'))
        : el('span', { class: 'pc-label' }, t('Right'), ' ', el('kbd', { class: 'pc-key', 'aria-hidden': 'true', text: '→' }));
      // Not a <button> and not focusable: focus never rests on a candidate, so Space and Enter
      // cannot vote; the keyboard's way to choose is the arrow keys (the page says so).
      const candidate = el('div', {
        class: 'pc-col pc-choice',
        role: 'button',
        'data-side': side,
        'aria-keyshortcuts': side === 'left' ? this.params.key_left : this.params.key_right,
        'aria-label': side === 'left'
          ? (video ? t('Left video is closer to the reference (Left arrow key)')
            : t('Left image is closer to the reference (Left arrow key)'))
          : (video ? t('Right video is closer to the reference (Right arrow key)')
            : t('Right image is closer to the reference (Right arrow key)')),
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
                                 'aria-label': t('Reference (ground truth)') },
      el('span', { class: 'pc-label pc-label-ref', text: t('Reference (ground truth)') }),
      el('span', { class: 'pc-images' }));
    // View buttons: not focusable (a focused button would turn Space or Enter into a view switch,
    // and focus must never rest anywhere in the pair); the mouse or the keys 1-9 switch views.
    this.viewsEl = el('nav', { class: 'pc-views', 'aria-label': t('Views') });
    this.viewsEl.addEventListener('mousedown', (event) => event.preventDefault());
    this.viewsEl.addEventListener('click', (event) => {
      const button = event.target.closest('[data-view]');
      if (button) this.showView(Number(button.dataset.view));
    });
    this.trialEl = el('section', { id: 'trial', class: 'pc-trial', 'aria-label': t('Pair to compare'), hidden: true },
      this.viewsEl, this.left, this.reference, this.right);

    const instructionParts = { reference: el('strong', { text: t('reference') }),
      keys: el('span', { class: 'pc-keys', dir: 'ltr' }, el('kbd', { text: '←' }), ' / ', el('kbd', { text: '→' })) };
    this.instructionEl = el('p', { id: 'instruction', class: 'pc-instruction', hidden: true },
      ...(video ? tParts('Which video is closer to the %(reference)s? Click it or press %(keys)s.', instructionParts)
        : tParts('Which image is closer to the %(reference)s? Click it or press %(keys)s.', instructionParts)));
    this.feedbackEl = el('p', { id: 'feedback', class: 'pc-feedback', role: 'status', 'aria-live': 'assertive', hidden: true });
    this.driver.chrome.prompt.append(this.instructionEl, this.feedbackEl);

    this.sizeNumbersEl = el('p', { class: 'pc-size-numbers' });
    this.tooSmallEl = el('section', { id: 'window-too-small', class: 'pc-panel pc-too-small', role: 'alert', hidden: true },
      el('h2', { text: t('Please make the window larger') }),
      el('p', { text: stimulusTexts(video).tooSmall }),
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
      this.sizeNumbersEl.textContent = stimulusTexts(this.video).sizeNumbers(need);
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

  /** The State's display settings (policy, min_image_scale, floor, chrome). */
  display() {
    const state = this.driver.state;
    return { ...DEFAULT_DISPLAY, ...((state && state.display) || {}) };
  }

  /**
   * Scale the view on screen to the window and say which window the trial needs: display.js's
   * windowNeeded of the server's numbers (the same as `study create` printed, for this trial's set).
   * @returns {{width: number, height: number}} the smallest inner window (CSS px) for this pair
   */
  layout() {
    const display = this.display();
    const dpr = window.devicePixelRatio || 1;
    const views = trialViews(this.trial);
    const need = windowNeeded(views, policyFactor(display.policy, display.min_image_scale, dpr),
                              display.floor, display.chrome);
    const [width, height] = views[Math.min(this.view, views.length - 1)];
    // The three panels of the view side by side.
    this.scale = imageScale(display.policy, dpr, [3 * width, height], chromeSize(views.length, display.chrome),
                            this.driver.chrome.notice);
    this.applyScale(width, height, views.length);
    return need;
  }

  /** Size the three panels of the view on screen to `this.scale`; show only that view's images. */
  applyScale(width, height, nViews) {
    const px = (value) => `${(value * this.scale).toFixed(3)}px`;
    this.trialEl.dataset.scale = this.scale.toFixed(3);
    this.trialEl.dataset.view = String(this.view);
    this.trialEl.dataset.policy = this.display().policy;
    this.viewsEl.hidden = nViews < 2;
    for (const button of this.viewsEl.querySelectorAll('[data-view]')) {
      button.setAttribute('aria-pressed', String(Number(button.dataset.view) === this.view));
    }
    for (const column of [this.left, this.reference, this.right]) {
      column.style.width = px(width);
      for (const img of column.querySelectorAll('img, video')) {
        const shown = Number(img.dataset.view) === this.view;
        img.hidden = !shown;
        if (shown) {
          img.style.width = px(width);
          img.style.height = px(height);
        }
      }
    }
  }

  /** Switch to view `index` (0: whole images, r: zoom region r) at once; votes are not touched. */
  showView(index) {
    if (!this.trial || !this.imagesShown) return;
    const n = trialViews(this.trial).length;
    if (!(index >= 0 && index < n) || index === this.view) return;
    this.view = index;
    this.updateTrialVisibility();
  }

  /** The view buttons of `trial`: "Whole images 1", "Region 1 2", ... */
  renderViewButtons(trial) {
    const n = trialViews(trial).length;
    const buttons = [];
    for (let i = 0; i < n; i += 1) {
      buttons.push(el('button', { type: 'button', class: 'pc-view', tabindex: '-1', 'data-view': String(i),
                                  'aria-keyshortcuts': VIEW_KEYS[i] },
        i === 0 ? (this.video ? t('Whole videos') : t('Whole images')) : t('Region %(n)s', { n: i }), ' ', i < VIEW_KEYS.length && el('kbd', { text: VIEW_KEYS[i] })));
    }
    this.viewsEl.replaceChildren(...buttons);
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
    const where = page.kind === 'quiz' ? t('practice') : t('page %(n)s', { n: (state.progress?.pages_completed ?? 0) + 1 });
    this.driver.setProgress(t('Pair %(k)s of %(n)s · %(where)s', { k, n, where }), { pageKind: page.kind });
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
      if (this.clips && !(await this.playTrial(trial, seq))) return;
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
      this.setMode('loading', stimulusTexts(this.video).loading);
    }, this.trial ? this.params.loading_delay_ms : 0);
    let columns;
    try {
      columns = await this.buildImages(trial);
    } catch (error) {
      if (seq !== this.seq) return false;
      if (error instanceof MediaFailure) throw this.mediaFailure(trial, error);
      throw new StimulusLoadError(this.video
        ? t('One of the videos of this pair could not be loaded. Check your connection; trying again…')
        : t('One of the images of this pair could not be loaded. Check your connection; trying again…'),
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
    this.view = 0; // every pair starts with the whole images
    this.renderViewButtons(trial);
    this.left.querySelector('.pc-images').replaceChildren(...columns.left);
    this.reference.querySelector('.pc-images').replaceChildren(...columns.reference);
    this.right.querySelector('.pc-images').replaceChildren(...columns.right);
    this.hideFeedback();
    this.releaseFocus();
    this.clips = isClipTrial(trial) ? { left: columns.left[0], reference: columns.reference[0], right: columns.right[0] }
      : null;
    this.playing = this.clips !== null; // no choice counts before the clips have played
    this.playback = null;
    this.replayButton?.remove();
    for (const key of ['played', 'phase', 'repeats', 'maxDriftMs']) delete this.trialEl.dataset[key];
    if (this.clips) this.trialEl.dataset.phase = this.playSteps()[0].phase; // "before": the pair hidden from the start
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
    if (this.trial !== trial || this.trialEl.hidden || !this.awaitingChoice || this.playing) return;
    this.t0 = performance.now();
    this.accepting = true;
    this.trialEl.dataset.accepting = 'true';
  }

  /** Decoded <img> elements for the three columns of `trial`; for video trials, decoded <video>s. */
  async buildImages(trial) {
    if (isClipTrial(trial)) return this.buildClips(trial);
    const all = [];
    const make = (url, view, cls, alt) => {
      const img = new Image();
      img.className = cls;
      img.dataset.view = String(view);
      img.alt = alt;
      img.decoding = 'async';
      img.draggable = false;
      img.hidden = view !== 0;
      img.src = url;
      all.push(img);
      return img;
    };
    const column = (image, name) => [
      make(image.full, 0, 'pc-full', t('%(name)s, whole image', { name })),
      ...sortedCrops(image).map((crop, i) => make(crop.url, i + 1, 'pc-crop',
        t('%(name)s, zoomed region %(k)s', { name, k: i + 1 }))),
    ];
    const columns = {
      left: column(trial.left, t('Left')),
      reference: column(trial.reference, t('Reference')),
      right: column(trial.right, t('Right')),
    };
    await Promise.all(all.map(decoded));
    return columns;
  }

  // --- video (media.js) -----------------------------------------------------

  /** The three columns' <video>s of a clip trial, each file loaded whole first (progress in the status line). */
  async buildClips(trial) {
    const sides = ['left', 'reference', 'right'];
    const urls = sides.map((side) => trial[side].full);
    const videos = await this.clipFiles.elements(urls, (done) => {
      if (this.mode === 'loading') this.driver.setStatus(stimulusTexts(true).clipProgress(done));
    });
    const columns = {};
    sides.forEach((side, i) => {
      const video = videos[i];
      video.className = 'pc-full pc-video';
      video.dataset.view = '0';
      video.dataset.durationS = String(trial[side].duration_s ?? '');
      video.setAttribute('aria-label', side === 'reference' ? t('Reference video') : side === 'left' ? t('Left video') : t('Right video'));
      columns[side] = [video];
    });
    this.clipFiles.keepOnly(new Set([...urls, ...this.nextUrls]));
    return columns;
  }

  /** A clip's failure: recorded on the trial (sent with its vote) and named to the worker. */
  mediaFailure(trial, failure) {
    this.failures.set(trial.trial_id, failure.message);
    return new StimulusLoadError(`${failureText(failure)} ${t('Trying again…')}`, { cause: failure });
  }

  /** The clips as they play, one step after the other, each step's clips together ([media] reference_position). */
  playSteps() {
    const { left, reference, right } = this.clips;
    const position = (this.driver.state.media || {}).reference_position || 'between';
    return position === 'before'
      ? [{ phase: 'reference', videos: [reference] }, { phase: 'pair', videos: [left, right] }]
      : [{ phase: 'all', videos: [left, reference, right] }];
  }

  /**
   * Play the trial's clips (playSteps), then let the worker choose; an unfaithful playback (the State's
   * media.rule) is played again up to rule.max_repeats times.
   * @returns {Promise<boolean>} false if a newer trial or clear() took over
   */
  async playTrial(trial, seq) {
    const media = this.driver.state.media || {};
    const steps = this.playSteps();
    const seconds = (video) => Number(video.dataset.durationS) || video.duration || 0;
    const durationMs = steps.reduce((sum, step) => sum + 1000 * Math.max(...step.videos.map(seconds)), 0);
    let log;
    try {
      log = await playUnderRule((fresh) => this.playOnce(steps, fresh, seq), media.rule || null, durationMs,
                                (n) => { this.trialEl.dataset.repeats = String(n); });
    } catch (error) {
      if (seq !== this.seq) return false;
      if (error instanceof MediaFailure) throw this.mediaFailure(trial, error);
      throw error;
    }
    if (seq !== this.seq) return false;
    log.error = this.failures.get(trial.trial_id) || null;
    this.playback = log;
    this.playing = false;
    this.trialEl.dataset.played = 'true';
    if (log.max_drift_ms !== null) this.trialEl.dataset.maxDriftMs = log.max_drift_ms.toFixed(1);
    this.showReplay(media.replays || 0, seq);
    if (!this.trialEl.hidden) this.armClock();
    return true;
  }

  /** One playback of the steps into `log`. */
  async playOnce(steps, log, seq) {
    for (const { phase, videos } of steps) {
      if (seq !== this.seq) return;
      this.trialEl.dataset.phase = phase;
      for (const video of videos) video.dataset.state = 'playing';
      await playTogether(videos, log, {
        durationS: Math.max(...videos.map((v) => Number(v.dataset.durationS) || v.duration || 0)),
        askClick: () => {
          this.driver.setStatus(t('Your browser waits for a click to play the videos.'));
          return playButton(this.trialEl, { id: 'pc-play', className: 'pc-play' });
        },
      });
      for (const video of videos) video.dataset.state = 'played';
    }
  }

  /** "Play again" while the study allows replays of this trial (each counted in the log). */
  showReplay(left, seq) {
    this.replayButton?.remove();
    if (left <= 0) return;
    this.replayButton = el('button', { type: 'button', id: 'pc-replay', class: 'pc-replay', tabindex: '-1',
                                       text: t('Play again (%(left)s)', { left }) });
    this.replayButton.addEventListener('mousedown', (event) => event.preventDefault()); // never takes the focus
    this.replayButton.addEventListener('click', async () => {
      if (seq !== this.seq || !this.accepting) return;
      this.replayButton.remove();
      this.accepting = false;
      this.trialEl.dataset.accepting = 'false';
      this.playing = true;
      this.playback.replays += 1;
      try {
        await this.playOnce(this.playSteps(), this.playback, seq);
      } finally {
        this.playing = false;
      }
      if (seq !== this.seq) return;
      this.showReplay(left - 1, seq);
      this.armClock();
    });
    this.driver.chrome.prompt.append(this.replayButton);
  }

  /** Warm the cache with the next pair while this one is judged (clips: their whole files). */
  preload(trial) {
    this.preloaded.clear();
    this.nextUrls = new Set(isClipTrial(trial) ? [trial.left.full, trial.reference.full, trial.right.full] : []);
    if (!trial) return;
    if (isClipTrial(trial)) {
      for (const url of this.nextUrls) this.clipFiles.file(url).catch(() => {}); // shown when the trial is
      return;
    }
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
    if (!side) {
      // 1-9 switch views (never a vote); only while a pair is on screen.
      const view = VIEW_KEYS.indexOf(event.key);
      if (view >= 0 && !event.repeat && !(event.altKey || event.ctrlKey || event.metaKey)
          && this.mounted && !this.trialEl.hidden) this.showView(view);
      return;
    }
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
    const rt = this.driver.activeSince(this.t0);  // a display change's pause left out
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
    if (this.playback) vote.playback = this.playback.toJSON();
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
    const saving = setTimeout(() => this.showFeedback(t('Saving your answer…'), 'saving'), this.params.saving_delay_ms);
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
      this.showFeedback(t('Correct'), 'correct');
    } else if (correct === false) {
      const other = side === 'left' ? 'right' : 'left';
      (side === 'left' ? this.left : this.right).dataset.state = 'wrong';
      (other === 'left' ? this.left : this.right).dataset.state = 'correct';
      const text = other === 'left'
        ? (this.video ? t('Not quite: the video closer to the reference was on the left')
          : t('Not quite: the image closer to the reference was on the left'))
        : (this.video ? t('Not quite: the video closer to the reference was on the right')
          : t('Not quite: the image closer to the reference was on the right'));
      this.showFeedback(text, 'wrong');
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
