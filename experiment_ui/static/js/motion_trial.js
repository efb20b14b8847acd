// Motion-matching trial plugin (HuPerFlow paradigm, seed 003 Fig. 2): one self-contained ES
// module in the spirit of a jsPsych plugin -- the parameters it understands are
// declared first, then the code that runs ONE trial (MotionTrial, and MotionMatching, the
// plugin the assignment driver runs for the RDK screening and the main blocks).
//
// A trial is a loop of cycles (cycle_ms = 3000):
//   movie (movie_frames stimulus frames at 30 Hz) -> ISI1 (1000 ms, grey) ->
//   matching noise (500 ms = 15 frames in a 120 px aperture) -> ISI2 (rest of the cycle)
// The worker sets direction and speed with the mouse on a 600 px control panel at the
// viewport centre; a click counts only after `cycles_required` complete cycles.
//
// Timing (contract "clock-indexed frames"): the stimulus frame drawn at rAF timestamp t
// of a phase that started at rAF t0 is k = floor((t - t0 + refresh/2) / frame_ms), so a
// late refresh skips a frame instead of delaying the rest; a timed phase ends at the
// first rAF with k >= n_frames.  Phase *starts* are anchored to the trial's first rAF
// (cycle c starts at T0 + (c-1)·cycle length) so the schedule never drifts.
// Every rAF timestamp of every completed movie and matching phase is logged (raw frame log,
// including the refresh that ends the phase) and sent with the response.
//
// ISI screens are mid grey with the four placeholder dots (HuPerFlow shows a grey
// screen); the control panel outline and the purple cursor dot are drawn in every phase.
// rt_ms is measured from the trial start (onset of the first movie frame) to the click.
//
// No answers reach the page before the worker gives one: an RDK trial's dots come pre-rendered
// from the server (GET .../motion-trials/{id}/dots, fetched while the worker reads the intro or
// answers the trial before), and a feedback trial's true vector comes only in the answer to its
// stored response.

import { el, unlessAborted, StimulusLoadError } from './dom.js';
import { t } from './i18n.js';
import { recalibrate } from './calibration.js';

export const info = Object.freeze({
  name: 'motion-matching',
  version: 2,
  description: 'Method of adjustment for perceived motion at a probe (movie -> ISI -> matching noise -> ISI, repeated).',
  // Where its responses (with their raw frame logs) go: POST .../motion-responses, idempotent by response_id.
  response: Object.freeze({
    path: 'motion-responses',
    idField: 'response_id',
    // A trial answered already or a block that moved on: the next State says where things stand.
    quietRejection: (error) => error.status === 409,
  }),
  // The study sends the stimulus parameters in State's params; saving_delay_ms is the page's own.
  parameters: Object.freeze({
    saving_delay_ms: { type: 'int', default: 600,
      description: 'Show "Saving your answer" only if the server has not answered after this long.' },
    frame_rate_hz: { type: 'float', default: 30, description: 'Stimulus frame rate (movie and matching noise).' },
    cycle_ms: { type: 'float', default: 3000, description: 'Length of one cycle.' },
    isi1_ms: { type: 'float', default: 1000, description: 'Grey interval between movie and matching noise.' },
    matching_ms: { type: 'float', default: 500, description: 'Duration of the matching noise (15 frames at 30 Hz).' },
    cycles_required: { type: 'int', default: 3, description: 'Complete cycles before a click is accepted.' },
    panel_diameter_px: { type: 'int', default: 600, description: 'Control panel diameter (centre of the viewport).' },
    max_speed_ppf: { type: 'float', default: 20, description: 'Speed at the panel edge (px per 30 Hz frame).' },
    aperture_px: { type: 'int', default: 120, description: 'Diameter of the matching-noise aperture.' },
    cue_diameter_px: { type: 'int', default: 120, description: 'Green cue circle at the probe before the trial starts.' },
    placeholder_offset_px: { type: 'int', default: 60, description: 'Distance of the four placeholder dots from the probe.' },
    placeholder_diameter_px: { type: 'int', default: 10, description: 'Placeholder dot diameter.' },
    probe_diameter_px: { type: 'int', default: 7, description: 'Probe dot (drawn on the middle movie frame only).' },
    cursor_diameter_px: { type: 'int', default: 10, description: 'Purple cursor dot on the panel.' },
    noise_url: { type: 'url', default: null, description: 'Seamless 1/f² noise texture (required; the study provides it).' },
    practice_max_epe: { type: 'float', default: 10, description: 'Practice passes if EPE <= this (px/frame) ...' },
    practice_max_dir_deg: { type: 'float', default: 30, description: '... and the direction error <= this (degrees).' },
    // The server sends the study's need (server/paradigms/motion/study.py, min_window): its clips, the
    // RDK aperture and the panel at one image pixel per CSS pixel, with room for the text beside the panel.
    min_window_width: { type: 'int', default: 1000, description: 'Smaller windows hide the trial.' },
    min_window_height: { type: 'int', default: 600, description: 'Smaller windows hide the trial.' },
    feedback_px_per_ppf: { type: 'float', default: 10, description: 'Feedback arrows: screen px per px/frame.' },
    max_log_cycles: { type: 'int', default: 30, description: 'Cycles whose frame timestamps are logged (bounds the response size).' },
    background: { type: 'color', default: '#808080', description: 'Surround and ISI grey.' },
  }),
});

const GREEN = '#00c800';
const PURPLE = '#a020f0';
const GT_COLOUR = '#00c800';

export function defaults() {
  const out = {};
  for (const [name, spec] of Object.entries(info.parameters)) out[name] = spec.default;
  return out;
}

/** Parameters of a trial: declared defaults, overridden by the study's params (unknown keys kept). */
export function withDefaults(params) {
  const out = defaults();
  for (const [key, value] of Object.entries(params || {})) if (value !== null && value !== undefined) out[key] = value;
  return out;
}

// --- pure functions (shared with the tests) ---------------------------------

/**
 * Direction and speed for a cursor offset from the panel centre (screen px, dy down).
 * θ = atan2(−dy, dx) in 0–360° (y-up), speed = 2^((d/R)·log2(max+1)) − 1 with d capped at R.
 * @returns {{direction_deg: number, speed_ppf: number, resp_u: number, resp_v: number, inside: boolean}}
 */
export function panelValue(dx, dy, params = {}) {
  const radius = (params.panel_diameter_px ?? 600) / 2;
  const maxSpeed = params.max_speed_ppf ?? 20;
  const dist = Math.hypot(dx, dy);
  let direction = Math.atan2(-dy, dx) * 180 / Math.PI;
  if (direction < 0) direction += 360;
  const d = Math.min(dist, radius);
  const speed = 2 ** ((d / radius) * Math.log2(maxSpeed + 1)) - 1;
  const rad = direction * Math.PI / 180;
  return { direction_deg: direction, speed_ppf: speed, resp_u: speed * Math.cos(rad),
           resp_v: -speed * Math.sin(rad), inside: dist <= radius };
}

/** Angle between two vectors, 0–180° (0 when either is zero-length). */
export function angleBetween(u1, v1, u2, v2) {
  const n1 = Math.hypot(u1, v1);
  const n2 = Math.hypot(u2, v2);
  if (n1 === 0 || n2 === 0) return 0;
  const c = Math.max(-1, Math.min(1, (u1 * u2 + v1 * v2) / (n1 * n2)));
  return Math.acos(c) * 180 / Math.PI;
}

/** Contract's practice verdict: EPE <= 10 px/frame AND direction difference <= 30°. */
export function practiceVerdict(gt, resp, params = {}) {
  const epe = Math.hypot(resp.u - gt.u, resp.v - gt.v);
  const dir = angleBetween(resp.u, resp.v, gt.u, gt.v);
  const passed = epe <= (params.practice_max_epe ?? 10) && dir <= (params.practice_max_dir_deg ?? 30);
  return { epe, direction_error_deg: dir, passed };
}

/**
 * Practice rule (the server's, mirrored for display and the harness): a failed trial is
 * repeated; practice ends after `needed` passes or `max` trials.
 * @param {{passes: number, done: number}} progress  counts *after* the trial just answered
 * @returns {{repeat: boolean, finished: boolean}}
 */
export function practiceStep(progress, passed, { needed = 6, max = 30 } = {}) {
  const finished = progress.passes >= needed || progress.done >= max;
  return { repeat: !passed && !finished, finished };
}

/** Schedule of one trial in ms (nominal phase boundaries within a cycle). */
export function cycleSchedule(trial, params = {}) {
  const p = withDefaults(params);
  const frameMs = 1000 / p.frame_rate_hz;
  const movieFrames = trial.movie_frames ?? 15;
  const movieMs = movieFrames * frameMs;
  const matchingFrames = Math.round(p.matching_ms / frameMs);
  const isi2 = trial.isi2_ms ?? (p.cycle_ms - movieMs - p.isi1_ms - p.matching_ms);
  const starts = { movie: 0, isi1: movieMs, matching: movieMs + p.isi1_ms, isi2: movieMs + p.isi1_ms + p.matching_ms };
  return { frameMs, movieFrames, movieMs, matchingFrames, matchingMs: matchingFrames * frameMs, isi1Ms: p.isi1_ms,
           isi2Ms: isi2, starts, cycleMs: starts.isi2 + isi2, probeIndex: Math.floor((movieFrames - 1) / 2) };
}

/** Stimulus frame at rAF time t of a phase that began at t0 (half a refresh of tolerance). */
export function stimIndex(t, t0, refreshMs, frameMs = 1000 / 30) {
  return Math.floor((t - t0 + refreshMs / 2) / frameMs);
}

/**
 * JS twin of analysis.frame_timing.phase_timing (same rules): drops are intervals over
 * 1.5 refreshes; onset error of each shown frame = its first rAF minus t0 + k·frame_ms.
 */
export function phaseTiming(t, refreshMs, nFrames, frameMs = 1000 / 30) {
  if (!t.length) throw new Error('a phase needs at least one timestamp');
  const t0 = t[0];
  const stimIdx = t.map((x) => stimIndex(x, t0, refreshMs, frameMs));
  const intervals = t.slice(1).map((x, i) => x - t[i]);
  const dropped = intervals.map((d) => d > 1.5 * refreshMs);
  const seen = new Set();
  const onsetErrors = [];
  stimIdx.forEach((k, i) => {
    if (k < nFrames && !seen.has(k)) {
      seen.add(k);
      onsetErrors.push(t[i] - (t0 + k * frameMs));
    }
  });
  return { stimIndex: stimIdx, intervals, dropped, nDrops: dropped.filter(Boolean).length,
           onsetErrors, skippedFrames: nFrames - seen.size };
}

/** JS twin of analysis.frame_timing.summarise_phases (sample SD). */
export function summarisePhases(phases) {
  const errors = phases.flatMap((p) => p.onsetErrors);
  const n = errors.length;
  const mean = n ? errors.reduce((a, b) => a + b, 0) / n : null;
  const sd = n > 1 ? Math.sqrt(errors.reduce((a, b) => a + (b - mean) ** 2, 0) / (n - 1)) : null;
  return { frame_drops: phases.reduce((a, p) => a + p.nDrops, 0),
           n_intervals: phases.reduce((a, p) => a + p.intervals.length, 0),
           onset_err_mean_ms: mean, onset_err_sd_ms: sd, n_onsets: n,
           skipped_frames: phases.reduce((a, p) => a + p.skippedFrames, 0) };
}

/** Summary of a raw frame log ([{cycle, phase, t}]) with the trial's frame counts. */
export function summariseFrames(frames, refreshMs, movieFrames, matchingFrames = 15, frameMs = 1000 / 30) {
  return summarisePhases(frames.map((f) => phaseTiming(f.t, refreshMs,
    f.phase === 'movie' ? movieFrames : matchingFrames, frameMs)));
}

/**
 * The dots of an RDK trial as the server rendered them (GET .../motion-trials/{id}/dots; format in
 * server/openapi.yaml): a 16-byte little-endian header ("RDK1", uint16 frames, uint16 units per px,
 * uint32 dots, uint16 aperture px, uint16 0), then uint16 x, y of every dot in every frame, frame-major,
 * offset by half the aperture. The browser is never told the direction or speed: it only draws these.
 * @param {ArrayBuffer} buffer
 * @returns {{n: number, nFrames: number, aperture: number, xy: Float32Array, position: (i: number, k: number) => number[]}}
 */
export function decodeDotMovie(buffer) {
  const view = new DataView(buffer);
  const magic = buffer.byteLength >= 16 ? String.fromCharCode(...new Uint8Array(buffer, 0, 4)) : '';
  if (magic !== 'RDK1') throw new Error('not a dot movie');
  const nFrames = view.getUint16(4, true);
  const scale = view.getUint16(6, true);
  const n = view.getUint32(8, true);
  const aperture = view.getUint16(12, true);
  if (!scale || buffer.byteLength !== 16 + 4 * nFrames * n) throw new Error('dot movie: bad header or length');
  const half = aperture / 2;
  const xy = new Float32Array(2 * nFrames * n);
  for (let j = 0; j < xy.length; j++) xy[j] = view.getUint16(16 + 2 * j, true) / scale - half;
  return {
    n, nFrames, aperture, xy,
    /** Offset of dot i from the aperture centre at stimulus frame k (screen px; the last frame after the end). */
    position(i, k) {
      const j = 2 * (Math.min(k, nFrames - 1) * n + i);
      return [xy[j], xy[j + 1]];
    },
  };
}

// --- assets -----------------------------------------------------------------

const noiseCache = new Map();

async function loadBitmap(url) {
  const img = new Image();
  img.decoding = 'async';
  img.src = url;
  try {
    await img.decode();
  } catch (error) {
    if (!(img.complete && img.naturalWidth > 0)) throw new Error(`Image failed to load: ${url}`);
  }
  return typeof createImageBitmap === 'function' ? createImageBitmap(img) : img;
}

/** The matching-noise texture (cached per URL). */
export function loadNoise(url) {
  // No stand-in texture: the matching stimulus must have the 1/f² spectrum (the server always sends one).
  if (!url) return Promise.reject(new Error('the matching-noise texture (params.noise_url) is missing'));
  if (!noiseCache.has(url)) {
    const promise = loadBitmap(url);
    promise.catch(() => noiseCache.delete(url));
    noiseCache.set(url, promise);
  }
  return noiseCache.get(url);
}

/**
 * An RDK movie's frames drawn once, before the trial starts: one transparent bitmap per stimulus
 * frame, its dots white `dotPx`-pixel squares at their sub-pixel positions (anti-aliased, as
 * `fillRect` draws them), `pixelRatio` device pixels per CSS pixel.
 *
 * 5,000 `fillRect` calls per refresh cost 5-8 ms on a laptop that rasterises its canvas on the
 * CPU (half a 60 Hz refresh, and refreshes dropped); drawing one bitmap costs about 0.5 ms.
 * Memory: frames x (aperture + 2 dotPx + 4)^2 x 4 bytes x pixelRatio^2 (22 MB for 15 frames of a
 * 600-pixel aperture).
 * @returns {{images: Array<ImageBitmap|HTMLCanvasElement>, half: number, size: number}} `half`: the
 *   CSS pixels from a bitmap's corner to the aperture centre; `size`: its CSS width and height (its
 *   device pixels / pixelRatio exactly, so that it is drawn one bitmap pixel to one device pixel).
 */
export function renderDotFrames(movie, dotPx = 2, pixelRatio = 1) {
  const half = Math.ceil(movie.aperture / 2) + dotPx + 2;
  const side = Math.ceil(2 * half * pixelRatio);
  const offscreen = typeof OffscreenCanvas === 'function';
  const images = [];
  for (let k = 0; k < movie.nFrames; k++) {
    const canvas = offscreen ? new OffscreenCanvas(side, side) : Object.assign(document.createElement('canvas'),
                                                                             { width: side, height: side });
    const ctx = canvas.getContext('2d');
    ctx.setTransform(pixelRatio, 0, 0, pixelRatio, 0, 0);
    ctx.fillStyle = '#ffffff';
    ctx.beginPath();  // one path of all the frame's dots: one fill instead of thousands
    const x0 = half - dotPx / 2;
    const end = 2 * (k + 1) * movie.n;
    for (let j = 2 * k * movie.n; j < end; j += 2) ctx.rect(x0 + movie.xy[j], x0 + movie.xy[j + 1], dotPx, dotPx);
    ctx.fill();
    images.push(offscreen ? canvas.transferToImageBitmap() : canvas);
  }
  return { images, half, size: side / pixelRatio };
}

/** Free what a trial's assets hold outside the JavaScript heap (its RDK frames' bitmaps). */
export function releaseTrialAssets(assets) {
  for (const image of (assets && assets.dotFrames && assets.dotFrames.images) || []) {
    if (typeof image.close === 'function') image.close();
  }
}

/**
 * Everything a trial draws, decoded before it starts: {frames: ImageBitmap[], dots, dotFrames, noise}
 * (`dotFrames`: an RDK trial's dots drawn into one bitmap per frame, see renderDotFrames).
 * `loadDots(trial)` resolves with an RDK trial's dot movie (ArrayBuffer); the study app fetches it
 * from the server with the assignment's token.
 */
export async function loadTrialAssets(trial, params = {}, { loadDots } = {}) {
  const p = withDefaults(params);
  const rdk = trial.kind === 'rdk';
  if (rdk && !loadDots) throw new Error('an RDK trial needs loadDots (the server renders its dots)');
  const frames = rdk ? Promise.resolve([]) : Promise.all(trial.clip.frames.map(loadBitmap));
  const dots = rdk ? loadDots(trial).then(decodeDotMovie) : Promise.resolve(null);
  const [loaded, movie, noise] = await Promise.all([frames, dots, loadNoise(p.noise_url)]);
  const dotFrames = movie && renderDotFrames(movie, trial.rdk?.dot_px ?? 2, window.devicePixelRatio || 1);
  return { frames: loaded, dots: movie, dotFrames, noise };
}

// --- the trial ----------------------------------------------------------------

/**
 * The control panel's diameter as the CSS variable --motion-panel-px (on the document, so that the
 * progress badge outside the trial sees it too): the text beside the panel (progress, status, feedback)
 * keeps to the columns left and right of it (css/motion.css).
 */
export function setPanelSize(params) {
  document.documentElement.style.setProperty('--motion-panel-px', `${withDefaults(params).panel_diameter_px}px`);
}

const round3 = (x) => Math.round(x * 1000) / 1000;

/**
 * One trial on a full-viewport canvas inside `container`.
 *
 * options: params (study params), refreshMs (calibrated refresh interval; 1000/60 if
 * unknown), assets (from loadTrialAssets; loaded here if absent), autoStart (skip the
 * "click to start" cue screen), loadDots (RDK: fetch the dot movie, see loadTrialAssets),
 * recordDraws (keep a per-rAF draw log in `drawLog`),
 * hooks.onDraw(event) (called at every rAF with {cycle, phase, k, t, probe, ...}).
 * `run()` resolves with the response (contract body without response_id / client fields).
 */
export class MotionTrial {
  constructor(container, trial, options = {}) {
    this.container = container;
    this.trial = trial;
    this.params = withDefaults(options.params);
    this.refreshMs = options.refreshMs || 1000 / 60;
    this.half = this.refreshMs / 2;
    this.schedule = cycleSchedule(trial, this.params);
    this.options = options;
    this.hooks = options.hooks || {};
    this.recordDraws = Boolean(options.recordDraws);
    this.drawLog = [];
    this.frames = [];          // raw frame log (contract format)
    this.cyclesCompleted = 0;
    this.cursor = null;        // last valid panel value (null until the cursor entered the panel)
    this.cursorXY = null;      // its offset from the panel centre
    this.state = 'loading';    // loading | ready | running | paused | done
    this.cancelled = false;    // cancel(): the driver moved on; run() resolves with null
    this.onMove = this.onMove.bind(this);
    this.onClick = this.onClick.bind(this);
    this.onKey = this.onKey.bind(this);
    this.onResize = this.onResize.bind(this);
    this.tick = this.tick.bind(this);
    this.buildDom();
  }

  buildDom() {
    this.canvas = el('canvas', { class: 'motion-canvas', 'aria-label': t('Motion stimulus and control panel') });
    this.statusEl = el('p', { class: 'motion-status', role: 'status', 'aria-live': 'polite', text: t('Loading…') });
    // No advice to zoom out: the card calibration holds at this zoom only (a zoom change means measuring
    // the card again, see MotionMatching.watchZoom).
    this.tooSmallEl = el('section', { class: 'pc-panel motion-too-small', role: 'alert', hidden: true },
      el('h2', { text: t('Please make the window larger') }),
      el('p', { text: t('This trial needs a larger browser window. Maximise the window or switch to full screen (F11). The trial starts again by itself as soon as the window is large enough.') }),
      this.sizeEl = el('p', { class: 'pc-size-numbers' }));
    this.root = el('div', { class: 'motion-trial', 'data-state': 'loading' }, this.canvas, this.statusEl, this.tooSmallEl);
    setPanelSize(this.params);
    this.container.append(this.root);
    this.ctx = this.canvas.getContext('2d');
  }

  setStatus(text, kind = '') {
    this.statusEl.textContent = text;
    this.statusEl.dataset.kind = kind;
  }

  setState(state) {
    this.state = state;
    this.root.dataset.state = state;
  }

  /** Resolves with the response once the worker clicks an answer. */
  async run() {
    this.setState('loading');
    this.setStatus(t('Loading the movie…'));
    this.assets = this.options.assets
      || await loadTrialAssets(this.trial, this.params, { loadDots: this.options.loadDots });
    if (this.cancelled) return null;
    this.pattern = this.ctx.createPattern(this.assets.noise, 'repeat');
    window.addEventListener('mousemove', this.onMove);
    window.addEventListener('mousedown', this.onClick);
    window.addEventListener('keydown', this.onKey);
    window.addEventListener('resize', this.onResize);
    const done = new Promise((resolve) => { this.resolve = resolve; });
    this.resize();
    if (this.options.autoStart) this.begin();
    else this.showCue();
    return done;
  }

  /** Stop for good (the page moved on): no more drawing or listening; run() resolves with null. */
  cancel() {
    this.cancelled = true;
    this.dispose();
    this.setState('done');
    if (this.resolve) this.resolve(null);
  }

  dispose() {
    window.removeEventListener('mousemove', this.onMove);
    window.removeEventListener('mousedown', this.onClick);
    window.removeEventListener('keydown', this.onKey);
    window.removeEventListener('resize', this.onResize);
    if (this.rafId) cancelAnimationFrame(this.rafId);
    this.rafId = null;
  }

  tooSmall() {
    return window.innerWidth < this.params.min_window_width || window.innerHeight < this.params.min_window_height;
  }

  resize() {
    const dpr = window.devicePixelRatio || 1;
    this.width = window.innerWidth;
    this.height = window.innerHeight;
    this.canvas.width = Math.round(this.width * dpr);
    this.canvas.height = Math.round(this.height * dpr);
    this.canvas.style.width = `${this.width}px`;
    this.canvas.style.height = `${this.height}px`;
    // Draw in CSS pixels: one image pixel = one CSS pixel, as calibrated.
    this.ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    this.cx = this.width / 2;
    this.cy = this.height / 2;
    if (this.trial.kind === 'main') {
      this.imgX = Math.round(this.cx - this.trial.clip.width / 2);
      this.imgY = Math.round(this.cy - this.trial.clip.height / 2);
      this.px = this.imgX + this.trial.probe.x;
      this.py = this.imgY + this.trial.probe.y;
    } else {
      this.px = this.cx;
      this.py = this.cy;
    }
    const small = this.tooSmall();
    this.tooSmallEl.hidden = !small;
    this.canvas.hidden = small;
    this.statusEl.hidden = small;
    if (small) {
      this.sizeEl.textContent = t('Window now %(width)s × %(height)s pixels; needed at least %(needW)s × %(needH)s.', {
        width: window.innerWidth, height: window.innerHeight, needW: this.params.min_window_width,
        needH: this.params.min_window_height });
    }
    return small;
  }

  onResize() {
    const small = this.resize();
    if (this.state === 'running' && small) {
      // A hidden trial cannot be watched: stop it and start afresh when the window is large again.
      this.dispose();
      window.addEventListener('resize', this.onResize);
      this.setState('paused');
    } else if (this.state === 'paused' && !small) {
      window.addEventListener('mousemove', this.onMove);
      window.addEventListener('mousedown', this.onClick);
      window.addEventListener('keydown', this.onKey);
      this.showCue();
    } else if (this.state === 'ready') {
      this.showCue();
    }
  }

  showCue() {
    this.setState('ready');
    if (this.tooSmall()) return;
    this.setStatus(this.trial.kind === 'main' ? t('Look at the green circle. Click or press Space to start the movie.')
      : t('Look at the centre of the circle. Click or press Space to start.'), 'start');
    this.drawScene({ phase: 'cue' });
  }

  /** Start the cycles at the next animation frame. */
  begin() {
    this.frames = [];
    this.cyclesCompleted = 0;
    this.T0 = null;
    this.phase = null;
    // Two refreshes of the cue screen first: the first paints of a fresh canvas (and the upload of
    // the first bitmap) are slow, and must not land in the movie's first refresh interval.
    this.warmup = 2;
    this.setState('running');
    this.updateStatus();
    this.rafId = requestAnimationFrame(this.tick);
  }

  onKey(event) {
    if (event.key !== ' ' && event.code !== 'Space') return;
    if (this.state === 'ready') {
      event.preventDefault();
      this.begin();
    }
  }

  onMove(event) {
    const dx = event.clientX - this.cx;
    const dy = event.clientY - this.cy;
    const value = panelValue(dx, dy, this.params);
    const inside = value.inside;
    this.canvas.style.cursor = inside && this.state === 'running' ? 'none' : 'default';
    if (!inside) return; // outside the panel the last valid value is kept
    this.cursor = value;
    this.cursorXY = [dx, dy];
    if (this.state === 'running') this.updateStatus();
  }

  onClick(event) {
    if (event.button !== 0) return;
    if (this.state === 'ready') {
      this.begin();
      return;
    }
    if (this.state !== 'running') return;
    if (this.cyclesCompleted < this.params.cycles_required || !this.cursor) {
      this.updateStatus(true);
      return; // too early, or no value set: ignored
    }
    this.finish();
  }

  updateStatus(nudge = false) {
    const need = this.params.cycles_required;
    let text;
    let kind;
    if (this.cyclesCompleted < need) {
      text = t('Watch at least %(need)s times… (%(done)s of %(need)s)', { need, done: this.cyclesCompleted });
      kind = 'wait';
    } else if (!this.cursor) {
      text = t('Move the mouse into the circle to set direction and speed');
      kind = 'enter';
    } else {
      text = t('Click to answer');
      kind = 'ready';
    }
    if (nudge) this.statusEl.dataset.nudge = String(Number(this.statusEl.dataset.nudge || 0) + 1);
    if (this.statusEl.textContent !== text) this.setStatus(text, kind);
  }

  finish() {
    const value = this.cursor;
    // performance.now(), not event.timeStamp: the same clock as the rAF timestamps (also under a fake clock).
    const now = performance.now();
    this.dispose();
    this.setState('done');
    this.setStatus('');
    const response = {
      trial_id: this.trial.trial_id,
      resp_u: round3(value.resp_u),
      resp_v: round3(value.resp_v),
      direction_deg: round3(value.direction_deg),
      speed_ppf: round3(value.speed_ppf),
      cycles: this.cyclesCompleted,
      // Without the time a display change paused the trial (the driver's display monitor).
      rt_ms: round3(this.options.activeSince ? this.options.activeSince(this.T0, now) : Math.max(0, now - this.T0)),
      // Only phases that ran to their end: the one cut short by the click would count as skipped frames.
      frames: this.frames.filter((f) => f.complete).map((f) => ({ cycle: f.cycle, phase: f.phase, t: f.t.map(round3) })),
    };
    this.resolve(response);
  }

  // --- schedule ----------------------------------------------------------------

  /** Nominal start (ms, trial clock) of `phase` in cycle c (1-based). */
  boundary(c, phase) {
    const s = this.schedule;
    const offset = phase === 'end' ? s.cycleMs : s.starts[phase];
    return this.T0 + (c - 1) * s.cycleMs + offset;
  }

  enterPhase(name, cycle, t) {
    this.phase = { name, cycle, t0: t, k: 0 };
    if ((name === 'movie' || name === 'matching') && cycle <= this.params.max_log_cycles) {
      this.phase.log = { cycle, phase: name, t: [] };
      this.frames.push(this.phase.log);
    }
  }

  /** Advance the phase machine to time t (a refresh may end several phases only if it is very late). */
  advance(t) {
    const s = this.schedule;
    for (let guard = 0; guard < 16; guard++) {
      const ph = this.phase;
      if (ph.name === 'movie' || ph.name === 'matching') {
        const n = ph.name === 'movie' ? s.movieFrames : s.matchingFrames;
        ph.k = stimIndex(t, ph.t0, this.refreshMs, s.frameMs);
        if (ph.log) ph.log.t.push(t);   // the ending refresh is logged too (closes the last interval)
        if (ph.k < n) return;
        if (ph.log) ph.log.complete = true;
        this.enterPhase(ph.name === 'movie' ? 'isi1' : 'isi2', ph.cycle, t);
      } else {
        const next = ph.name === 'isi1' ? this.boundary(ph.cycle, 'matching') : this.boundary(ph.cycle, 'end');
        if (t + this.half < next) return;
        if (ph.name === 'isi1') {
          this.enterPhase('matching', ph.cycle, t);
        } else {
          this.cyclesCompleted = ph.cycle;
          this.enterPhase('movie', ph.cycle + 1, t);
        }
      }
    }
  }

  tick(t) {
    this.rafId = requestAnimationFrame(this.tick);
    if (this.warmup > 0) {
      this.warmup -= 1;
      this.drawScene({ phase: 'cue' });
      return;
    }
    if (this.T0 === null) {
      this.T0 = t;
      this.enterPhase('movie', 1, t);
    }
    const before = this.cyclesCompleted;
    this.advance(t);
    if (this.cyclesCompleted !== before) this.updateStatus();
    const ph = this.phase;
    const event = { cycle: ph.cycle, phase: ph.name, t, k: ph.name === 'movie' || ph.name === 'matching' ? ph.k : null,
                    probe: false, cycles_completed: this.cyclesCompleted };
    this.drawScene(event);
    if (this.recordDraws) this.drawLog.push(event);
    if (this.hooks.onDraw) this.hooks.onDraw(event, this);
  }

  // --- drawing -----------------------------------------------------------------

  drawScene(event) {
    const ctx = this.ctx;
    const p = this.params;
    ctx.fillStyle = p.background;
    ctx.fillRect(0, 0, this.width, this.height);
    const main = this.trial.kind === 'main';
    if (event.phase === 'cue' || event.phase === 'movie') {
      const k = event.phase === 'cue' ? 0 : event.k;
      if (main) {
        const bitmap = this.assets.frames[Math.min(k, this.assets.frames.length - 1)];
        ctx.drawImage(bitmap, this.imgX, this.imgY, this.trial.clip.width, this.trial.clip.height);
        event.clip_frame = k;
      } else {
        this.drawDots(k, event);
      }
    }
    if (event.phase === 'matching') this.drawNoise(event);
    this.drawPlaceholders();
    if (event.phase === 'cue' && main) this.circle(this.px, this.py, p.cue_diameter_px / 2, GREEN, false, 2);
    if (event.phase === 'movie' && main && event.k === this.schedule.probeIndex) {
      this.circle(this.px, this.py, p.probe_diameter_px / 2, GREEN, true);
      event.probe = true;
    }
    this.drawPanel();
  }

  circle(x, y, r, colour, filled, lineWidth = 1) {
    const ctx = this.ctx;
    ctx.beginPath();
    ctx.arc(x, y, r, 0, 2 * Math.PI);
    if (filled) {
      ctx.fillStyle = colour;
      ctx.fill();
    } else {
      ctx.strokeStyle = colour;
      ctx.lineWidth = lineWidth;
      ctx.stroke();
    }
  }

  drawPlaceholders() {
    const { placeholder_offset_px: o, placeholder_diameter_px: d } = this.params;
    for (const [dx, dy] of [[0, -o], [0, o], [-o, 0], [o, 0]]) this.circle(this.px + dx, this.py + dy, d / 2, GREEN, true);
  }

  drawPanel() {
    const p = this.params;
    this.circle(this.cx, this.cy, p.panel_diameter_px / 2, 'rgba(255,255,255,0.55)', false, 1.5);
    if (this.cursorXY) {
      this.circle(this.cx + this.cursorXY[0], this.cy + this.cursorXY[1], p.cursor_diameter_px / 2, PURPLE, true);
    }
  }

  drawNoise(event) {
    const ctx = this.ctx;
    const value = this.cursor || { speed_ppf: 0, direction_deg: 0 };
    const rad = value.direction_deg * Math.PI / 180;
    const k = event.k;
    // Offset at matching frame k = k·speed·(cos θ, −sin θ), read from the cursor now.
    const ox = k * value.speed_ppf * Math.cos(rad);
    const oy = -k * value.speed_ppf * Math.sin(rad);
    event.offset = [ox, oy];
    if (this.pattern.setTransform) this.pattern.setTransform(new DOMMatrix().translate(this.px + ox, this.py + oy));
    ctx.beginPath();
    ctx.arc(this.px, this.py, this.params.aperture_px / 2, 0, 2 * Math.PI);
    ctx.fillStyle = this.pattern;
    ctx.fill();
  }

  drawDots(k, event) {
    const movie = this.assets.dots;
    const frame = Math.min(k, movie.nFrames - 1);
    const { images, half, size } = this.assets.dotFrames;
    // At a whole device pixel, unsmoothed: the dots as drawn, never resampled (the field moves by half a
    // device pixel at most, the same for every frame).
    const dpr = window.devicePixelRatio || 1;
    const x = Math.round((this.cx - half) * dpr) / dpr;
    const y = Math.round((this.cy - half) * dpr) / dpr;
    this.ctx.imageSmoothingEnabled = false;
    this.ctx.drawImage(images[frame], x, y, size, size);
    this.ctx.imageSmoothingEnabled = true;
    if (this.recordDraws) event.dots = [0, 1, 2, 3, 4].map((i) => movie.position(i, frame));
  }
}

/**
 * Run one trial and resolve with its response (null if `options.signal` aborted it); the trial's
 * DOM is removed afterwards.
 */
export async function runTrial(container, trial, options = {}) {
  const t = new MotionTrial(container, trial, options);
  if (options.onCreate) options.onCreate(t);
  const cancel = () => t.cancel();
  if (options.signal) options.signal.addEventListener('abort', cancel, { once: true });
  try {
    if (options.signal && options.signal.aborted) return null;
    return await t.run();
  } finally {
    if (options.signal) options.signal.removeEventListener('abort', cancel);
    t.dispose();
    t.root.remove();
  }
}

// --- feedback ---------------------------------------------------------------------

function arrow(ctx, x, y, u, v, colour) {
  const len = Math.hypot(u, v);
  ctx.strokeStyle = colour;
  ctx.fillStyle = colour;
  ctx.lineWidth = 3;
  ctx.beginPath();
  ctx.moveTo(x, y);
  ctx.lineTo(x + u, y + v);
  ctx.stroke();
  if (len < 1) return;
  const a = Math.atan2(v, u);
  const head = Math.min(14, len / 2);
  ctx.beginPath();
  ctx.moveTo(x + u, y + v);
  ctx.lineTo(x + u - head * Math.cos(a - 0.4), y + v - head * Math.sin(a - 0.4));
  ctx.lineTo(x + u - head * Math.cos(a + 0.4), y + v - head * Math.sin(a + 0.4));
  ctx.closePath();
  ctx.fill();
}

/**
 * Feedback after a practice / RDK-training trial: the true (green) and reported (purple)
 * vectors as arrows from the probe (main) or the aperture centre (RDK), and the errors.
 * `options.gt` = {u, v}: the true vector, which the server sends only in the answer to the stored
 * response. `verdict` = {passed, repeat} or null (no verdict shown). Resolves on a click or Space
 * (or, with null, when `options.signal` aborts).
 */
export function showFeedback(container, trial, response, options = {}) {
  const params = withDefaults(options.params);
  const gt = options.gt;
  if (!gt) throw new Error('showFeedback needs options.gt');
  const resp = { u: response.resp_u, v: response.resp_v };
  const local = practiceVerdict(gt, resp, params);
  const verdict = options.verdict || null;
  const canvas = el('canvas', { class: 'motion-canvas' });
  const width = window.innerWidth;
  const height = window.innerHeight;
  const dpr = window.devicePixelRatio || 1;
  canvas.width = Math.round(width * dpr);
  canvas.height = Math.round(height * dpr);
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  const ctx = canvas.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.fillStyle = params.background;
  ctx.fillRect(0, 0, width, height);
  let x = width / 2;
  let y = height / 2;
  if (trial.kind === 'main') {
    x = Math.round(width / 2 - trial.clip.width / 2) + trial.probe.x;
    y = Math.round(height / 2 - trial.clip.height / 2) + trial.probe.y;
  }
  const scale = params.feedback_px_per_ppf;
  arrow(ctx, x, y, gt.u * scale, gt.v * scale, GT_COLOUR);
  arrow(ctx, x, y, resp.u * scale, resp.v * scale, PURPLE);
  ctx.fillStyle = '#000';
  ctx.beginPath();
  ctx.arc(x, y, 3, 0, 2 * Math.PI);
  ctx.fill();
  const errorText = t('Direction error %(degrees)s°, error %(epe)s px/frame',
    { degrees: Math.round(local.direction_error_deg), epe: local.epe.toFixed(1) });
  let verdictText = '';
  if (verdict && verdict.passed === true) verdictText = t('Well done: this answer passes.');
  else if (verdict && verdict.passed === false) {
    verdictText = verdict.repeat ? t('Not close enough: this trial will be repeated.') : t('Not close enough.');
  }
  const box = el('div', { class: 'motion-feedback', role: 'status', 'data-passed': verdict ? String(verdict.passed) : '' },
    el('p', { class: 'motion-legend' },
      el('span', { class: 'motion-key motion-key-gt', text: '■' }), ` ${t('true motion')}   `,
      el('span', { class: 'motion-key motion-key-resp', text: '■' }), ` ${t('your answer')}`),
    el('p', { class: 'motion-errors', text: errorText }),
    verdictText ? el('p', { class: 'motion-verdict', text: verdictText }) : null,
    el('p', { class: 'motion-continue', text: t('Click or press Space to continue.') }));
  const wrap = el('div', { class: 'motion-trial motion-feedback-screen' }, canvas, box);
  setPanelSize(params);
  container.append(wrap);
  return new Promise((resolve) => {
    const signal = options.signal;
    const finish = (result) => {
      window.removeEventListener('mousedown', done);
      window.removeEventListener('keydown', done);
      if (signal) signal.removeEventListener('abort', stop);
      wrap.remove();
      resolve(result);
    };
    const done = (event) => {
      if (event.type === 'keydown' && event.key !== ' ' && event.key !== 'Enter') return;
      if (event.type === 'mousedown' && event.button !== 0) return;
      if (event.type === 'keydown') event.preventDefault();
      finish({ ...local, text: errorText, verdictText });
    };
    const stop = () => finish(null);
    window.addEventListener('mousedown', done);
    window.addEventListener('keydown', done);
    if (signal) signal.addEventListener('abort', stop, { once: true });
  });
}

// --- the plugin the assignment driver runs ------------------------------------------

/** What the worker reads before each part (block name x practice/test). */
const INTROS = () => ({
  'rdk:practice': [t('Practice: moving dots'),
    t('A cloud of dots moves in one direction for half a second. Then a small patch of noise appears in the middle. Move the mouse so that the noise moves like the dots: the direction from the centre of the large circle to the mouse is the direction, and the farther from the centre, the faster. The sequence repeats; after at least three repetitions, click to answer. After each practice trial you see the true motion (green) and your answer (purple).')],
  'rdk:test': [t('Moving dots'),
    t('Now the test trials. Answer as accurately as you can; your answers decide whether you can take part in the main study.')],
  'main:practice': [t('Practice: movies'),
    t('A green circle shows where to look. Then a short movie plays; a small green dot flashes on its middle frame at the point to judge. Set the noise patch to move like the scene at that point, at the moment of the dot. After each practice trial you see the true motion (green) and your answer (purple). A trial that is too far off is repeated.')],
  'main:test': [t('Movies'),
    t('Now the main trials, without feedback. Keep the viewing distance from the calibration. You can rest before starting a trial: each one starts when you click.')],
});

/**
 * The motion-matching plugin (one instance per page load): `run` shows the part's intro card the
 * first time a part (dots/movies x practice/test) comes up, runs one MotionTrial, hands the response
 * to `finish` and waits for the server's answer, then shows the true motion if the trial gives feedback.
 */
export class MotionMatching {
  static info = info;

  /**
   * @param {import('./assignment_driver.js').AssignmentDriver} driver  the page's assignment driver
   * @param {object} params  this plugin's parameters (declared defaults, overridden by the page's config)
   */
  constructor(driver, params) {
    this.driver = driver;
    this.params = params;
    this.introsShown = new Set();
    this.screeningPassed = false;  // the answer to this page's last RDK test trial said "passed"
    this.preloaded = new Map();    // trial_id -> Promise of assets
    this.current = null;           // the MotionTrial on screen (tests and debugging read it)
    this.recalibration = null;     // the Calibration on screen while the card is measured again
    this.container = null;
    this.loadDpr = window.devicePixelRatio || 1;
    this.watchZoom();
  }

  /**
   * Stop the trial on screen as soon as devicePixelRatio changes (the page zoom, or the window moved to
   * a screen of another density): its movie and panel now have another size on the screen than the
   * calibration assumed. It is not answered, so it comes back after the card is measured again (`run`).
   */
  watchZoom() {
    let watched = window.devicePixelRatio || 1;
    let query = null;
    const check = () => {
      const dpr = window.devicePixelRatio || 1;
      if (dpr === watched) return;
      watched = dpr;
      listen();
      if (this.current && this.needsRecalibration()) this.current.cancel();
    };
    const listen = () => {
      if (query) query.removeEventListener('change', check);
      if (typeof window.matchMedia !== 'function') return;
      query = window.matchMedia(`(resolution: ${watched}dppx)`);  // fires once the ratio is another
      query.addEventListener('change', check);
    };
    listen();
    // A zoom also resizes the window in CSS pixels; and Chromium's emulated scale factors (DevTools,
    // the browser tests) change the ratio without a media-query change event.
    window.addEventListener('resize', check);
  }

  /** devicePixelRatio differs from the one the card was measured at (State's calibration). */
  needsRecalibration() {
    const calibration = this.driver.state && this.driver.state.calibration;
    const calibrated = (calibration && calibration.device_pixel_ratio) || this.loadDpr;
    return Math.abs((window.devicePixelRatio || 1) - calibrated) > 1e-6;
  }

  /** The card measured again; resolves once the server answered (or `signal` aborted). */
  async recalibrate(container, signal) {
    const state = this.driver.state;
    this.driver.setStatus('');
    this.driver.setProgress('');  // the card page starts at the top, where the badge would cover it
    container.replaceChildren();
    const { calibration, done } = recalibrate(container, {
      params: state.params, previous: state.calibration, fromDpr: this.loadDpr,
      submit: (body) => this.driver.api('POST', '/calibration', body),
    });
    this.recalibration = calibration;
    try {
      await unlessAborted(done, signal);
    } finally {
      calibration.dispose();
      this.recalibration = null;
      container.replaceChildren();
    }
    this.loadDpr = window.devicePixelRatio || 1;
  }

  /** The calibrated refresh interval (ms); 60 Hz if unknown. */
  refreshMs() {
    const calibration = this.driver.state.calibration;
    const hz = calibration && calibration.refresh_hz;
    return hz > 0 ? 1000 / hz : 1000 / 60;
  }

  /** An RDK trial's dots, rendered by the server (the page is never told the direction or speed). */
  fetchDots(trial) {
    return this.driver.fetchFile(`/motion-trials/${encodeURIComponent(trial.trial_id)}/dots`);
  }

  assetsFor(trial) {
    if (!this.preloaded.has(trial.trial_id)) {
      const promise = loadTrialAssets(trial, this.driver.state.params, { loadDots: (t) => this.fetchDots(t) });
      promise.catch(() => this.preloaded.delete(trial.trial_id));
      this.preloaded.set(trial.trial_id, promise);
    }
    return this.preloaded.get(trial.trial_id);
  }

  renderProgress(trial) {
    const b = this.driver.state.block || {};
    const part = b.name === 'rdk' ? t('Moving dots') : t('Movies');
    const text = trial.practice
      ? t('%(part)s · practice %(k)s · passed %(passed)s of %(needed)s', { part, k: (b.practice_done ?? 0) + 1,
        passed: b.practice_passes ?? 0, needed: b.practice_needed ?? 6 })
      : t('%(part)s · trial %(k)s of %(n)s', { part, k: Math.min((b.trials_done ?? 0) + 1, b.trials_total || 1),
        n: b.trials_total ?? '?' });
    this.driver.setProgress(text, { practice: String(Boolean(trial.practice)) });
  }

  /**
   * "You passed the motion test" above the first intro of the main block: after the screening
   * block of this page load passed, or on a fresh main block (only workers who passed get one).
   * It says nothing about the answers or the score.
   */
  passedNote(state, trial) {
    const b = state.block || {};
    const fresh = b.name === 'main' && !b.practice_done && !b.trials_done;
    if (trial.kind !== 'main' || !(this.screeningPassed || fresh)) return null;
    this.screeningPassed = false;
    return el('p', { id: 'motion-screening-passed', class: 'motion-passed', role: 'status',
                     text: `✓ ${t('You passed the motion test. Next come the movies.')}` });
  }

  /** One intro card per part (dots/movies x practice/test) and page load. */
  async intro(container, trial, signal) {
    const state = this.driver.state;
    const key = `${state.block ? state.block.name : trial.kind}:${trial.practice ? 'practice' : 'test'}`;
    if (this.introsShown.has(key)) return;
    this.introsShown.add(key);
    const [title, text] = INTROS()[key] || [t('Next part'), ''];
    const b = state.block || {};
    const count = trial.practice
      ? t('Practice ends after %(n)s passed trials.', { n: b.practice_needed ?? 6 })
      : (trial.feedback ? t('%(n)s trials, each followed by the true motion (green) and your answer (purple).', { n: b.trials_total ?? '' })
        : t('%(n)s trials, without feedback.', { n: b.trials_total ?? '' }));
    const button = el('button', { type: 'button', id: 'motion-intro-start', class: 'pc-button pc-button-primary',
                                  text: t('Start') });
    const card = el('section', { id: 'motion-intro', class: 'pc-panel', 'data-part': key },
      this.passedNote(state, trial), el('h2', { text: title }), el('p', { text }), el('p', { text: count }),
      el('div', { class: 'pc-actions' }, button));
    this.renderProgress(trial);  // the badge names the part about to start, not the one before
    this.driver.setStatus('');
    container.replaceChildren(card);
    this.assetsFor(trial);  // load while the worker reads
    await unlessAborted(new Promise((resolve) => button.addEventListener('click', resolve, { once: true })), signal);
    card.remove();
  }

  /**
   * One trial: intro (first of its part), the trial, the response (awaited: it carries the feedback),
   * the feedback screen.
   * @param {HTMLElement} container  the driver's stage element
   * @param {object} trial  one of State's open trials
   * @param {{finish: Function, next: object|null, signal: AbortSignal}} step
   */
  async run(container, trial, { finish, next, signal }) {
    const driver = this.driver;
    this.container = container;
    await this.intro(container, trial, signal);
    if (signal.aborted) return;
    if (this.needsRecalibration()) {
      // The zoom changed since the card was measured: measure it again first. Then the driver asks for
      // the new State (its calibration) and comes back to this trial, still open.
      await this.recalibrate(container, signal);
      return;
    }
    this.renderProgress(trial);
    driver.setStatus('');
    container.replaceChildren();
    Object.assign(driver.root.dataset, { trialId: String(trial.trial_id), trialKind: trial.kind,
                                         practice: String(Boolean(trial.practice)) });
    let assets;
    try {
      assets = await this.assetsFor(trial);
    } catch (error) {
      throw new StimulusLoadError(t('The movie could not be loaded. Check your connection; trying again…'), { cause: error });
    }
    if (signal.aborted) return;
    const params = driver.state.params;
    const response = await runTrial(container, trial, {
      params, refreshMs: this.refreshMs(), assets, signal,
      onCreate: (t) => { this.current = t; },
      activeSince: (t0, now) => driver.activeSince(t0, now),
    });
    this.current = null;
    if (!response) return; // cancelled
    this.preloaded.delete(trial.trial_id);
    releaseTrialAssets(assets);
    // Preload the next trial now, not while this one ran: decoding during a timed phase costs frames.
    if (next) this.assetsFor(next);
    const body = { ...response, client_time: new Date().toISOString(),
                   window_width: window.innerWidth, window_height: window.innerHeight,
                   device_pixel_ratio: window.devicePixelRatio || 1 };
    const saving = setTimeout(() => driver.setStatus(t('Saving your answer…')), this.params.saving_delay_ms);
    let answer = null;
    try {
      answer = await finish(body, { awaitAnswer: true });
    } catch (error) {
      // Refused: the driver reports it (unless quiet) and asks the server where things stand.
    } finally {
      clearTimeout(saving);
      driver.setStatus('');
    }
    if (answer && answer.screening && answer.screening.passed === true) this.screeningPassed = true;
    if (signal.aborted) return;
    // The truth comes only in the server's answer to the stored response (awaited above, with
    // "Saving your answer…" if slow); main test trials get none.
    const feedback = trial.feedback && answer ? answer.feedback : null;
    if (feedback) {
      const verdict = trial.practice ? { passed: feedback.passed, repeat: Boolean(answer.repeat_added) } : null;
      driver.root.dataset.feedback = 'shown';
      await showFeedback(container, trial, response,
        { params, verdict, gt: { u: feedback.gt_u, v: feedback.gt_v }, signal });
      delete driver.root.dataset.feedback;
    }
  }

  clear() {
    if (this.current) this.current.cancel();
    this.current = null;
    if (this.recalibration) this.recalibration.dispose();
    this.recalibration = null;
    if (this.container) this.container.replaceChildren();
  }
}
