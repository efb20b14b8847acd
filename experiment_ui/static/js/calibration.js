// Screen calibration plugin for motion studies (HuPerFlow, seed 003 §3.1.1): a self-contained
// ES module in the spirit of a jsPsych plugin -- parameters first, then the code that runs the
// one calibration screen (Calibration; ScreenCalibration is the plugin the assignment driver runs).
//
// 1. Credit card: the worker resizes an on-screen card to a real one (85.60 x 53.98 mm)
//    with the arrow keys (1 px, Shift 10 px) or by dragging the corner handle.  The
//    shape is kept unless the worker unticks "keep the card's shape" (then Left/Right
//    change the width and Up/Down the height).  px/mm is the mean of both sides
//    (contract): (w/85.60 + h/53.98)/2, and the viewing distance at which
//    px_per_degree px = 1° is shown: (px_per_degree/px_per_mm/10) / (2·tan 0.5°) cm.
// 2. Refresh rate: rAF intervals are recorded while the worker reads (progress shown);
//    the server decides from their median (>= refresh_samples intervals are sent).
// 3. Fullscreen: requested on a button press (inside MTurk's iframe it may be refused;
//    the outcome is recorded, the study goes on either way).
// 4. Optionally (study setting `[calibration] blind_spot`), "Continue" leads to the blind-spot
//    measurement of the viewing distance (blind_spot.js) before anything is sent; its sweeps go
//    with the body (`blind_spot_px`).  That step states the card step's distance again (there is
//    one viewing distance) and tells the worker how far off the measured one is.
// The body of POST /calibration is built by `calibrationBody`; the caller sends it (the driver:
// through its response queue).
// 5. A recalibration (`recalibrate`): when the page zoom changes during the trials, devicePixelRatio
//    changes and a CSS pixel has another size on the screen, so the card is measured again (the card
//    starts at the size the old measurement gives at the new zoom) and sent with `recalibration: true`.

import { el, unlessAborted } from './dom.js';
import { BlindSpot, distanceText } from './blind_spot.js';
import { t, tParts } from './i18n.js';

export const info = Object.freeze({
  name: 'screen-calibration',
  version: 2,
  description: 'Credit-card size calibration, refresh-rate estimate and fullscreen request.',
  // Where the calibration goes: POST .../calibration.  The server is idempotent by the body itself
  // (the same body again answers the stored result), so it carries no id.  The screen reports a
  // refusal itself, so the driver stays quiet about it.
  response: Object.freeze({ path: 'calibration', idField: null, quietRejection: () => true }),
  parameters: Object.freeze({
    card_width_mm: { type: 'float', default: 85.6, description: 'ISO/IEC 7810 ID-1 card width.' },
    card_height_mm: { type: 'float', default: 53.98, description: 'ISO/IEC 7810 ID-1 card height.' },
    px_per_degree: { type: 'float', default: 50, description: 'Pixels per degree of visual angle the study assumes.' },
    refresh_samples: { type: 'int', default: 60, description: 'Fewest rAF intervals sent (median on the server).' },
    refresh_extra: { type: 'int', default: 60, description: 'Intervals recorded beyond refresh_samples (a steadier median).' },
    refresh_warmup: { type: 'int', default: 5, description: 'First rAF callbacks ignored (page still settling).' },
    min_refresh_hz: { type: 'float', default: 55, description: 'Shown to the worker as the requirement (the server decides).' },
    initial_card_width_px: { type: 'float', default: 323.5, description: 'Card width before adjustment (85.6 mm at 96 dpi).' },
    min_card_width_px: { type: 'float', default: 80, description: 'Smallest card the handle/keys allow.' },
    blind_spot: { type: 'bool', default: false, description: 'Measure the viewing distance (blind spot) after the card.' },
    viewing_distance_cm: { type: 'float', default: null,
                           description: 'The one distance the worker is asked to keep (cm); null: where px_per_degree px make 1° '
                             + '(the motion study\'s). The [viewing] checks state theirs.' },
    purpose: { type: 'string', default: null,
               description: 'Why the card is matched: the first words of the card step (null: "The movies must '
                 + 'appear at the right size.", in the page\'s language).' },
  }),
});

export function defaults() {
  const out = {};
  for (const [name, spec] of Object.entries(info.parameters)) out[name] = spec.default;
  return out;
}

/** px/mm from both card sides and the viewing distance (cm): the stated one (viewing_distance_cm), else the one at
 *  which px_per_degree px = 1°. */
export function calibrationFigures(widthPx, heightPx, params = {}) {
  const p = { ...defaults(), ...params };
  const pxPerMm = (widthPx / p.card_width_mm + heightPx / p.card_height_mm) / 2;
  const distanceCm = p.viewing_distance_cm
    ?? (p.px_per_degree / pxPerMm / 10) / (2 * Math.tan(0.5 * Math.PI / 180));
  return { px_per_mm: pxPerMm, viewing_distance_cm: distanceCm };
}

export function median(values) {
  const s = [...values].sort((a, b) => a - b);
  const n = s.length;
  if (!n) return NaN;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

/** Record `n` rAF intervals (after `warmup` callbacks); onProgress(k, n) after each. */
export function measureRefresh(n, { warmup = 5, onProgress = null } = {}) {
  return new Promise((resolve) => {
    const intervals = [];
    let last = null;
    let seen = 0;
    const step = (time) => {  // not `t`: that is the translation function
      seen += 1;
      if (seen > warmup && last !== null) {
        intervals.push(time - last);
        if (onProgress) onProgress(intervals.length, n);
      }
      last = time;
      if (intervals.length >= n) resolve(intervals);
      else requestAnimationFrame(step);
    };
    requestAnimationFrame(step);
  });
}

/** The contract's POST /calibration body (`blindSpot`: the blind-spot result, when the study measures it). */
export function calibrationBody(card, intervals, fullscreen, blindSpot = null) {
  const r1 = (x) => Math.round(x * 10) / 10;
  return {
    ...(blindSpot ? { blind_spot_px: blindSpot.sweeps_px } : {}),
    card_width_px: r1(card.width),
    card_height_px: r1(card.height),
    refresh_intervals_ms: intervals.map((x) => Math.round(x * 1000) / 1000),
    fullscreen: Boolean(fullscreen),
    device_pixel_ratio: window.devicePixelRatio || 1,
    screen_width: window.screen.width,
    screen_height: window.screen.height,
    window_width: window.innerWidth,
    window_height: window.innerHeight,
  };
}

/**
 * The calibration page.  `submit(body)` sends POST /calibration and resolves with the
 * server's JSON (it may throw; the page then lets the worker try again).
 * `run()` resolves with the server's answer once it accepted (stage "rdk") or
 * disqualified the worker (the reason is shown on the page).
 */
export class Calibration {
  /**
   * @param {{params?: object, submit: Function, recalibration?: {fromDpr: number, toDpr: number, card?: object}}} options
   *   recalibration: the zoom changed from `fromDpr` to `toDpr` after the card was measured (`card`:
   *   {width, height} then); the page says so and starts from the card's size at the new zoom.
   */
  constructor(container, { params = {}, submit, recalibration = null }) {
    this.container = container;
    this.params = { ...defaults(), ...params };
    this.submit = submit;
    this.recalibration = recalibration;
    const ratio = this.params.card_height_mm / this.params.card_width_mm;
    this.card = { width: this.params.initial_card_width_px, height: this.params.initial_card_width_px * ratio };
    if (recalibration && recalibration.card) {
      // The same physical card in the new CSS pixels: CSS px per mm scale with 1 / devicePixelRatio.
      const scale = recalibration.fromDpr / recalibration.toDpr;
      this.card = { width: recalibration.card.width * scale, height: recalibration.card.height * scale };
    }
    this.intervals = null;
    this.fullscreen = false;
    this.blindSpot = null;        // the blind-spot step (BlindSpot), once the worker got there
    this.blindSpotResult = null;  // {sweeps_px, distance_cm} once measured
    this.onKey = this.onKey.bind(this);
    this.buildDom();
  }

  buildDom() {
    const p = this.params;
    this.cardEl = el('div', { id: 'calib-card', class: 'calib-card', role: 'img',
                              'aria-label': t('On-screen card: resize it to match a real card') },
      el('span', { class: 'calib-card-stripe' }),
      this.handle = el('span', { id: 'calib-handle', class: 'calib-handle', title: t('Drag to resize') }));
    this.lockEl = el('input', { type: 'checkbox', id: 'calib-lock', checked: true });
    this.sizeEl = el('p', { id: 'calib-size', class: 'calib-readout' });
    this.distanceEl = el('p', { id: 'calib-distance', class: 'calib-distance' });
    this.refreshBar = el('progress', { id: 'calib-refresh-progress', max: 1, value: 0 });
    this.refreshEl = el('p', { id: 'calib-refresh', class: 'calib-readout', text: t('Measuring your screen’s refresh rate…') });
    this.fsButton = el('button', { type: 'button', id: 'calib-fullscreen', class: 'pc-button', text: t('Switch to full screen') });
    this.fsEl = el('span', { id: 'calib-fullscreen-status', class: 'calib-readout' });
    this.continueButton = el('button', { type: 'button', id: 'calib-continue', class: 'pc-button pc-button-primary',
                                         text: t('Continue'), disabled: true });
    this.messageEl = el('div', { id: 'calib-message', class: 'pc-notice', role: 'alert', hidden: true });
    // Text beside the card, not above it, so that the page fits a laptop's window (1280 x 600 and up)
    // without scrolling: the card stays where it was measured, and Continue stays in view.
    this.cardPage = el('div', { id: 'calib-card-page', class: 'calib-layout' },
      el('div', { class: 'calib-text' },
        el('p', { text: `${p.purpose || t('The movies must appear at the right size.')} `
          + t('Hold a credit card (or any card of the same size, %(width)s × %(height)s mm) flat against the screen '
            + 'over the rectangle and resize the rectangle until it matches the card exactly.',
          { width: p.card_width_mm, height: p.card_height_mm }) }),
        el('p', {}, ...tParts('Use the arrow keys (hold %(shift)s for bigger steps) or drag the corner handle.',
          { shift: el('kbd', { text: 'Shift' }) })),
        el('label', { class: 'calib-lock' }, this.lockEl, ' ',
          ...tParts('Keep the card’s shape (untick to change width with %(left)s %(right)s and height with %(up)s '
            + '%(down)s)', { left: el('kbd', { text: '←' }), right: el('kbd', { text: '→' }),
            up: el('kbd', { text: '↑' }), down: el('kbd', { text: '↓' }) })),
        this.sizeEl, this.distanceEl,
        el('div', { class: 'calib-refresh' }, this.refreshEl, this.refreshBar)),
      this.stage = el('div', { class: 'calib-stage' }, this.cardEl));
    this.blindPage = el('div', { id: 'calib-blind-spot-page', hidden: true });
    const again = this.recalibration;
    // The percentages are whole values ("100 %"): a bare % in a msgid would read as a format directive.
    const percent = (dpr) => `${Math.round(dpr * 100)} %`;
    const zoomNote = again ? el('p', { id: 'calib-recalibration', class: 'pc-notice', role: 'status',
      text: t('The page zoom changed (%(from)s to %(to)s of the screen’s pixels), so the movies would now appear at '
        + 'another size. Please match the card once more; your answers so far are kept. Leave the zoom as it is '
        + 'from now on.', { from: percent(again.fromDpr), to: percent(again.toDpr) }) }) : null;
    this.root = el('section', { id: 'calibration', class: 'pc-panel calib', 'data-step': 'card',
                                'data-recalibration': String(Boolean(again)) },
      el('h2', { text: again ? t('Screen calibration, once more') : t('Screen calibration') }),
      zoomNote, this.cardPage, this.blindPage,
      this.messageEl,
      el('div', { class: 'pc-actions calib-actions' }, this.continueButton, this.fsButton, this.fsEl));
    this.container.append(this.root);
    this.handle.addEventListener('pointerdown', (event) => this.startDrag(event));
    this.fsButton.addEventListener('click', () => this.requestFullscreen());
    this.continueButton.addEventListener('click', () => this.send());
    this.render();
  }

  /** Resolves with the server's answer (accepted, or disqualified with a reason shown). */
  run() {
    document.addEventListener('keydown', this.onKey);
    this.setCard(this.card.width, this.card.height);  // laid out now: a start larger than the column is cut back
    this.measure();
    return new Promise((resolve) => { this.resolve = resolve; });
  }

  dispose() {
    document.removeEventListener('keydown', this.onKey);
    if (this.blindSpot) this.blindSpot.dispose();
  }

  async measure() {
    const n = Math.max(60, this.params.refresh_samples) + this.params.refresh_extra;
    const intervals = await measureRefresh(n, {
      warmup: this.params.refresh_warmup,
      onProgress: (k) => { this.refreshBar.value = k / n; },
    });
    this.intervals = intervals;
    const hz = 1000 / median(intervals);
    this.refreshEl.textContent = t('Your screen refreshes %(hz)s times per second (%(hz)s Hz; at least %(min)s Hz '
      + 'is needed).', { hz: hz.toFixed(1), min: this.params.min_refresh_hz });
    this.refreshEl.dataset.hz = hz.toFixed(3);
    this.root.dataset.refreshDone = 'true';
    this.continueButton.disabled = false;
  }

  /**
   * The widest card the page can draw: its column's width (the window's, less a margin, before layout).
   * The keys and the handle stop there, so the card on screen is always the size reported and sent:
   * a card drawn smaller than its figures would calibrate the screen wrongly.
   */
  maxCardWidth() {
    return this.stage.clientWidth || window.innerWidth - 40;
  }

  setCard(width, height) {
    const min = this.params.min_card_width_px;
    const ratio = this.params.card_height_mm / this.params.card_width_mm;
    const maxW = Math.max(min, this.maxCardWidth());
    const clamped = Math.max(min, Math.min(maxW, width));
    if (this.lockEl.checked) height *= clamped / width;  // a card stopped at either end keeps its shape
    this.card.width = clamped;
    this.card.height = Math.max(min * ratio, Math.min(window.innerHeight, height));
    this.render();
  }

  onKey(event) {
    const keys = ['ArrowLeft', 'ArrowRight', 'ArrowUp', 'ArrowDown'];
    if (this.blindSpot) return;  // the card is set: the blind-spot step has keys of its own
    if (!keys.includes(event.key) || event.altKey || event.ctrlKey || event.metaKey) return;
    event.preventDefault();  // arrows would scroll the page
    const step = event.shiftKey ? 10 : 1;
    const sign = event.key === 'ArrowRight' || event.key === 'ArrowUp' ? 1 : -1;
    const { width, height } = this.card;
    if (this.lockEl.checked) {
      const ratio = this.params.card_height_mm / this.params.card_width_mm;
      this.setCard(width + sign * step, (width + sign * step) * ratio);
    } else if (event.key === 'ArrowLeft' || event.key === 'ArrowRight') {
      this.setCard(width + sign * step, height);
    } else {
      this.setCard(width, height + sign * step);
    }
  }

  startDrag(event) {
    event.preventDefault();
    const start = { x: event.clientX, y: event.clientY, width: this.card.width, height: this.card.height };
    const ratio = this.params.card_height_mm / this.params.card_width_mm;
    const move = (e) => {
      const w = start.width + (e.clientX - start.x);
      if (this.lockEl.checked) this.setCard(w, w * ratio);
      else this.setCard(w, start.height + (e.clientY - start.y));
    };
    const up = () => {
      window.removeEventListener('pointermove', move);
      window.removeEventListener('pointerup', up);
    };
    window.addEventListener('pointermove', move);
    window.addEventListener('pointerup', up);
  }

  render() {
    const { width, height } = this.card;
    this.cardEl.style.width = `${width}px`;
    this.cardEl.style.height = `${height}px`;
    this.cardEl.dataset.width = width.toFixed(2);
    this.cardEl.dataset.height = height.toFixed(2);
    const f = calibrationFigures(width, height, this.params);
    this.sizeEl.textContent = t('Card: %(width)s × %(height)s pixels = %(px_per_mm)s pixels per mm',
      { width: width.toFixed(0), height: height.toFixed(0), px_per_mm: f.px_per_mm.toFixed(2) });
    this.sizeEl.dataset.pxPerMm = f.px_per_mm.toFixed(4);
    this.distanceEl.textContent = t('Sit so that your eyes are about %(distance)s from the screen, and keep that '
      + 'distance during the study.', { distance: distanceText(f.viewing_distance_cm) });
    this.distanceEl.dataset.cm = f.viewing_distance_cm.toFixed(2);
  }

  async requestFullscreen() {
    const target = document.documentElement;
    try {
      if (!target.requestFullscreen) throw new Error('not supported');
      await target.requestFullscreen();
      this.fullscreen = true;
      this.fsEl.textContent = t('Full screen on.');
    } catch (error) {
      // Refused (e.g. inside MTurk's iframe): record it and carry on.
      this.fullscreen = false;
      this.fsEl.textContent = t('Full screen is not available here; please maximise the window instead.');
    }
    this.fsEl.dataset.fullscreen = String(this.fullscreen);
  }

  showMessage(text) {
    this.messageEl.textContent = text;
    this.messageEl.hidden = !text;
  }

  /** The blind-spot step: the card page makes room for it; "Continue" waits for a plausible distance. */
  showBlindSpot() {
    // The one viewing distance of the study: where px_per_degree px make 1° on this screen, as the card
    // step stated it (and the server stores it); the blind-spot step states it again and checks it.
    const { px_per_mm: pxPerMm, viewing_distance_cm: targetCm } = calibrationFigures(
      this.card.width, this.card.height, this.params);
    this.root.dataset.step = 'blind-spot';
    this.root.querySelector('h2').textContent = t('Screen calibration: viewing distance');
    this.cardPage.hidden = true;
    this.blindPage.hidden = false;
    this.showMessage('');
    this.blindSpot = new BlindSpot(this.blindPage, { pxPerMm, targetCm, params: this.params });
    const wait = () => {
      this.blindSpotResult = null;
      this.continueButton.disabled = true;
      this.blindSpot.run().then((result) => {
        this.blindSpotResult = result;
        this.continueButton.disabled = false;
      });
    };
    this.blindSpot.onRedo = () => {
      this.showMessage('');
      wait();
    };
    wait();
  }

  async send() {
    if (!this.intervals) return;
    if (this.params.blind_spot && !this.blindSpot) {
      this.showBlindSpot();
      return;
    }
    if (this.params.blind_spot && !this.blindSpotResult) return;
    this.continueButton.disabled = true;
    const fullscreen = this.fullscreen && Boolean(document.fullscreenElement);
    const body = calibrationBody(this.card, this.intervals, fullscreen, this.blindSpotResult);
    let result;
    try {
      result = await this.submit(body);
    } catch (error) {
      this.showMessage(t('Could not save the calibration (%(error)s). Please try again.', { error: error.message }));
      this.continueButton.disabled = false;
      return;
    }
    if (result && result.accepted === false) {
      this.root.dataset.outcome = 'disqualified';
      this.showMessage(result.reason || t('Sorry, this screen does not meet the study’s requirements.'));
      this.dispose();
      this.resolve(result);
      return;
    }
    this.root.dataset.outcome = 'accepted';
    this.dispose();
    this.resolve(result);
  }
}

/** Show the calibration page in `container`; resolves with the server's answer. */
export function runCalibration(container, options) {
  const c = new Calibration(container, options);
  if (options.onCreate) options.onCreate(c);
  return c.run();
}

/**
 * The calibration screen as the assignment driver runs it (stage "calibration"): the body goes
 * through the driver's response queue and the server's answer decides (accepted: the next stage;
 * refused display: disqualified, with the reason on the page).  Resolves with null: the driver then
 * follows the server's State.
 */
export class ScreenCalibration {
  static info = info;

  constructor(driver, params) {
    this.driver = driver;
    this.params = params;
    this.current = null;       // the Calibration on screen (tests and debugging read it)
    this.container = null;
  }

  /**
   * @param {HTMLElement} container  the driver's stage element
   * @param {{params: object}} trial  the study's parameters (State's params)
   * @param {{finish: Function, signal: AbortSignal}} step
   */
  async run(container, trial, { finish, signal }) {
    this.container = container;
    this.driver.setStatus('');
    this.driver.setProgress('');
    container.replaceChildren();
    const calibration = this.current = new Calibration(container, {
      params: { ...this.params, ...(trial.params || {}) },
      submit: async (body) => {
        try {
          return await finish(body, { awaitAnswer: true });
        } catch (error) {
          if (error.status === 409) return null;  // calibrated already: follow the server's State
          throw error;
        }
      },
    });
    await unlessAborted(calibration.run(), signal);
    calibration.dispose();
    this.clear();
    return null;
  }

  clear() {
    if (this.current) this.current.dispose();
    this.current = null;
    if (this.container) this.container.replaceChildren();
  }
}

/**
 * The card measured again during the trials, because devicePixelRatio changed since the calibration
 * `previous` (State's calibration: its `device_pixel_ratio`, `card_width_px`, `card_height_px`), or since
 * `fromDpr` when that is unknown. `submit(body)` sends it (the body says `recalibration: true`).
 * Resolves with the server's answer (accepted, or the display refused with the reason on the page).
 */
export function recalibrate(container, { params, previous, fromDpr, submit }) {
  const toDpr = window.devicePixelRatio || 1;
  const card = previous && previous.card_width_px
    ? { width: previous.card_width_px, height: previous.card_height_px } : null;
  const calibration = new Calibration(container, {
    params,
    submit: (body) => submit({ ...body, recalibration: true }),
    recalibration: { fromDpr: (previous && previous.device_pixel_ratio) || fromDpr, toDpr, card },
  });
  return { calibration, done: calibration.run() };
}
