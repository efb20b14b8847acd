// Blind-spot viewing distance (jsPsych's virtual-chinrest, Li et al. 2020), a step of the motion
// calibration page (calibration.js) when the study sets `[calibration] blind_spot = true`.
//
// The worker closes the right eye and looks at a black square near the right edge with the left eye.
// A red dot starts just left of the square and moves left; it vanishes when it enters the left eye's
// blind spot, about 13.5° from the fixation point, and the worker presses Space at that moment.  With
// px/mm from the card, the square-to-dot distance d (mm) of a sweep gives the viewing distance
// d / tan 13.5°; `repetitions` sweeps are averaged.  The server recomputes it from the raw distances
// (`blind_spot_px` of POST /calibration) and refuses anything outside 20-200 cm, as this page does.
//
// There is one viewing distance: the card step's (where the study's px_per_degree px make 1°, from the
// card's px/mm; `targetCm`).  This step states it before the sweeps and, after them, how far the
// measured distance is from it (within `blind_spot_tolerance`: keep it; else move and measure again).
//
// Keys: Space counts only while the dot moves (a held key's repeats do not); any other key, or Space
// at any other moment, does nothing.  A sweep starts with the Start button (a click or Enter, never
// Space, which is the answer key); a dot that reaches the left edge unanswered is a failed sweep.

import { el } from './dom.js';
import { t, tn, tParts } from './i18n.js';

export const info = Object.freeze({
  name: 'blind-spot',
  version: 1,
  description: 'Viewing distance from the blind spot (virtual chinrest), averaged over sweeps.',
  parameters: Object.freeze({
    blind_spot_repetitions: { type: 'int', default: 5, description: 'Sweeps averaged.' },
    blind_spot_deg: { type: 'float', default: 13.5, description: 'Angle of the blind spot from fixation.' },
    blind_spot_speed_mm_s: { type: 'float', default: 25, description: 'Speed of the dot (mm on screen per second).' },
    blind_spot_start_mm: { type: 'float', default: 10, description: 'Where the dot starts, left of the square.' },
    blind_spot_square_mm: { type: 'float', default: 8, description: 'Side of the fixation square.' },
    blind_spot_dot_mm: { type: 'float', default: 6, description: 'Diameter of the dot.' },
    blind_spot_min_cm: { type: 'float', default: 20, description: 'Nearest plausible distance (else: measure again).' },
    blind_spot_max_cm: { type: 'float', default: 200, description: 'Farthest plausible distance (else: measure again).' },
    blind_spot_tolerance: { type: 'float', default: 0.1,
                            description: 'Fraction the measured distance may differ from the card step\'s.' },
  }),
});

export function defaults() {
  const out = {};
  for (const [name, spec] of Object.entries(info.parameters)) out[name] = spec.default;
  return out;
}

/** A distance as both calibration steps state it: "65 cm (26 inches)". */
export function distanceText(cm) {
  return t('%(cm)s cm (%(inches)s inches)', { cm: Math.round(cm), inches: Math.round(cm / 2.54) });
}

/** Viewing distance (cm) from the sweeps' square-to-dot distances (px) and the card's px/mm. */
export function blindSpotDistance(sweepsPx, pxPerMm, deg = 13.5) {
  const mean = sweepsPx.reduce((a, b) => a + b, 0) / sweepsPx.length;
  return mean / pxPerMm / 10 / Math.tan(deg * Math.PI / 180);
}

/**
 * The blind-spot screen inside `container`.  `run()` resolves with {sweeps_px, distance_cm} once the
 * worker measured a plausible distance; `redo()` starts over (e.g. after the server refused it).
 */
export class BlindSpot {
  /**
   * @param {HTMLElement} container
   * @param {{pxPerMm: number, targetCm: number, params?: object}} options
   *   targetCm: the viewing distance the card step stated (the study's one distance)
   */
  constructor(container, { pxPerMm, targetCm, params = {} }) {
    this.container = container;
    this.params = { ...defaults(), ...params };
    this.pxPerMm = pxPerMm;
    this.targetCm = targetCm;
    this.sweeps = [];
    this.moving = false;
    this.frame = null;
    this.x = null;               // the dot's centre as last drawn (CSS px from the stage's left edge)
    this.onKey = this.onKey.bind(this);
    this.buildDom();
  }

  mm(value) {
    return value * this.pxPerMm;
  }

  buildDom() {
    const p = this.params;
    this.square = el('div', { id: 'bs-square', class: 'bs-square' });
    this.dot = el('div', { id: 'bs-dot', class: 'bs-dot', hidden: true });
    this.stage = el('div', { id: 'bs-stage', class: 'bs-stage' }, this.square, this.dot);
    this.countEl = el('p', { id: 'bs-count', class: 'calib-readout', 'aria-live': 'polite' });
    this.messageEl = el('p', { id: 'bs-message', class: 'bs-message', role: 'status' });
    this.startButton = el('button', { type: 'button', id: 'bs-start', class: 'pc-button pc-button-primary', text: t('Start') });
    this.redoButton = el('button', { type: 'button', id: 'bs-redo', class: 'pc-button', text: t('Measure again'), hidden: true });
    // The sentence's marked-up words, made apart: Babel does not extract a t() nested in tParts()'s arguments.
    const marked = { eye: el('strong', { text: t('right eye') }), start: el('strong', { text: t('Start') }),
                     space: el('kbd', { text: t('Space') }) };
    this.root = el('section', { id: 'blind-spot', class: 'bs', 'aria-label': t('Viewing distance') },
      el('p', { id: 'bs-target', class: 'calib-distance', 'data-cm': this.targetCm.toFixed(2),
                text: t('Sit about %(distance)s from the screen, as on the card step, and keep that distance during '
                  + 'the study. We now check it.', { distance: distanceText(this.targetCm) }) }),
      el('p', {}, ...tParts('Close your %(eye)s (or cover it with your right hand) and look at the black square '
        + 'with your left eye. Click %(start)s: a red dot moves to the left. Keep looking at the square and press '
        + '%(space)s the moment the dot disappears.', marked)),
      this.stage,
      el('div', { class: 'pc-actions bs-actions' }, this.startButton, this.redoButton, this.countEl),
      this.messageEl);
    this.container.append(this.root);
    const side = this.mm(p.blind_spot_square_mm);
    Object.assign(this.square.style, { width: `${side}px`, height: `${side}px` });
    const size = this.mm(p.blind_spot_dot_mm);
    Object.assign(this.dot.style, { width: `${size}px`, height: `${size}px` });
    // Space is the answer key: it must not also press the focused Start button (Enter still does).
    for (const type of ['keydown', 'keyup']) {
      this.startButton.addEventListener(type, (event) => { if (event.key === ' ') event.preventDefault(); });
    }
    this.startButton.addEventListener('click', () => this.startSweep());
    this.redoButton.addEventListener('click', () => this.redo());
    this.renderCount();
  }

  run() {
    return new Promise((resolve) => { this.resolve = resolve; });
  }

  /** The square's centre (CSS px from the stage's left edge). */
  squareX() {
    return this.square.offsetLeft + this.square.offsetWidth / 2;
  }

  renderCount() {
    const n = this.params.blind_spot_repetitions;
    this.countEl.textContent = t('Sweep %(k)s of %(n)s', { k: Math.min(this.sweeps.length + 1, n), n });
    this.countEl.dataset.done = String(this.sweeps.length);
  }

  say(text, kind = '') {
    this.messageEl.textContent = text;
    this.messageEl.dataset.kind = kind;
  }

  startSweep() {
    if (this.moving || this.sweeps.length >= this.params.blind_spot_repetitions) return;
    this.startButton.disabled = true;
    this.startButton.blur();
    this.say('');
    const x0 = this.squareX() - this.mm(this.params.blind_spot_start_mm);
    const speed = this.mm(this.params.blind_spot_speed_mm_s) / 1000;  // px per ms
    const radius = this.mm(this.params.blind_spot_dot_mm) / 2;
    let t0 = null;
    this.moving = true;
    this.root.dataset.moving = 'true';
    this.place(x0);
    this.dot.hidden = false;
    document.addEventListener('keydown', this.onKey);
    const step = (time) => {  // not `t`: that is the translation function
      if (!this.moving) return;
      if (t0 === null) t0 = time;
      const x = x0 - speed * (time - t0);
      if (x <= radius) {  // the dot reached the left edge of the band: no answer
        this.stopSweep();
        this.say(t('The dot reached the edge. Keep your right eye closed, look only at the square, and press Space '
          + 'as soon as the dot disappears. Start again when ready.'), 'retry');
        return;
      }
      this.place(x);
      this.frame = requestAnimationFrame(step);
    };
    this.frame = requestAnimationFrame(step);
  }

  place(x) {
    this.x = x;
    this.dot.style.left = `${x - this.mm(this.params.blind_spot_dot_mm) / 2}px`;
  }

  stopSweep() {
    this.moving = false;
    delete this.root.dataset.moving;
    cancelAnimationFrame(this.frame);
    document.removeEventListener('keydown', this.onKey);
    this.dot.hidden = true;
    this.startButton.disabled = false;
  }

  onKey(event) {
    if (event.key !== ' ' || event.repeat || !this.moving) return;  // stray keys and held Space do nothing
    event.preventDefault();
    const px = this.squareX() - this.x;
    this.stopSweep();
    this.sweeps.push(Math.round(px * 10) / 10);
    this.renderCount();
    if (this.sweeps.length < this.params.blind_spot_repetitions) {
      this.say(tn('Recorded. %(num)s more sweep to go: click Start again.',
        'Recorded. %(num)s more sweeps to go: click Start again.', this.params.blind_spot_repetitions - this.sweeps.length));
      return;
    }
    this.finish();
  }

  finish() {
    const p = this.params;
    const cm = blindSpotDistance(this.sweeps, this.pxPerMm, p.blind_spot_deg);
    if (!(cm >= p.blind_spot_min_cm && cm <= p.blind_spot_max_cm)) {
      this.say(t('That gave %(cm)s cm, which cannot be right (the card may be off, or Space came too early or too '
        + 'late). Please measure again.', { cm: Math.round(cm) }), 'retry');
      this.sweeps = [];
      this.renderCount();
      return;
    }
    this.startButton.hidden = true;
    this.redoButton.hidden = false;
    this.root.dataset.distanceCm = cm.toFixed(2);
    const off = cm - this.targetCm;
    const close = Math.abs(off) <= p.blind_spot_tolerance * this.targetCm;
    const measured = t('You sit about %(distance)s from the screen; the study needs about %(needed)s.',
      { distance: distanceText(cm), needed: distanceText(this.targetCm) });
    const moveBy = { cm: Math.round(Math.abs(off)) };
    const advice = close ? t('Good: keep this distance during the study.')
      : off < 0 ? t('Please move about %(cm)s cm farther back, then click Measure again (or Continue if you stay '
        + 'where you are).', moveBy)
        : t('Please move about %(cm)s cm closer, then click Measure again (or Continue if you stay where you are).',
          moveBy);
    this.say(`${measured} ${advice}`, close ? 'done' : 'retry');
    this.root.dataset.distanceOk = String(close);
    this.resolve({ sweeps_px: [...this.sweeps], distance_cm: cm });
  }

  /** Forget the sweeps and measure again (resolves a new `run()`). */
  redo() {
    this.stopSweep();
    this.sweeps = [];
    delete this.root.dataset.distanceCm;
    this.startButton.hidden = false;
    this.redoButton.hidden = true;
    this.say('');
    this.renderCount();
    if (this.onRedo) this.onRedo();
  }

  dispose() {
    this.stopSweep();
  }
}
