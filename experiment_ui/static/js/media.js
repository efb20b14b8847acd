// The media layer's browser half (server/paradigms/media.py is the server's): what every paradigm's
// trial plugin uses to show video clips, so that no plugin holds media code.
//
// - decodingProblems(types): before consent (device_check.js), whether this browser can decode the
//   study's clips (canPlayType and MediaCapabilities.decodingInfo), with the reason when not.
// - measureConnection(url, minMbps, probeBytes): before consent, whether the connection reaches the study's
//   minimum speed, from the whole download of a test file of known size (no stimulus).
// - preloadClip(url): the whole file (fetch -> Blob -> object URL) before a trial starts, with progress;
//   a trial never starts on a partly loaded clip.
// - clipElement(objectUrl): a <video> without controls, muted, inline, decoded up to its first frame.
// - PlaybackLog / playClip(video, log): one playback, logged with requestVideoFrameCallback (frames
//   presented), getVideoPlaybackQuality (frames dropped), waiting/playing (stalls) and the start delay;
//   autoplay refusal turns into a click that starts it, never a stuck page. playTogether(videos, log):
//   clips side by side, started on the same frame, with the drift between them measured (max_drift_ms).
// - faithful(log, rule): the study's [media] rule, the twin of media.py's faithful().
// - stimulusWords(state): "video" or "image", for every worker-facing string that names the stimulus.
//
// Every failure is a MediaFailure whose `reason` names its cause: "http" (the HTTP status), "network",
// "timeout", "decode" (the browser's MediaError) or "autoplay"; the plugin records it on the trial.

import { t } from './i18n.js';

/**
 * The words a worker page uses for the study's stimuli (one shared place): "video" on a video study (the State's
 * `media.kind`), else "image". Every string that names the stimulus is built from these.
 * @returns {{one: string, many: string, Many: string}} e.g. {one: 'video', many: 'videos', Many: 'Videos'}
 */
export function stimulusWords(state) {
  const one = state && state.media && state.media.kind === 'video' ? 'video' : 'image';
  return { one, many: `${one}s`, Many: `${one[0].toUpperCase()}${one.slice(1)}s` };
}

/** The trial pages' shared sentences about the study's stimuli (pc_trial.js, rating_trial.js), whole sentences per
 *  kind so that each language words them its own way. `video`: a video study. */
export const stimulusTexts = (video) => ({
  tooSmall: `${video ? t('The videos of this study need a larger browser window to be shown large enough.')
    : t('The images of this study need a larger browser window to be shown large enough.')} `
    + `${t('Maximise the window or switch to full screen (F11; on a Mac Ctrl+⌘+F).')} `
    + t('The study continues by itself as soon as the window is large enough.'),
  loading: video ? t('Loading videos…') : t('Loading images…'),
  sizeNumbers: (need) => t('Window now %(width)s × %(height)s pixels; needed at least %(needW)s × %(needH)s.',
    { width: window.innerWidth, height: window.innerHeight, needW: need.width, needH: need.height }),
  clipProgress: (done) => t('Loading video… %(percent)s', { percent: `${Math.round(100 * done)} %` }),
});

/** A clip that could not be shown, by cause (http | network | timeout | decode | autoplay). */
export class MediaFailure extends Error {
  constructor(reason, detail) {
    super(`${reason}: ${detail}`);
    this.reason = reason;
    this.detail = detail;
  }
}
MediaFailure.prototype.name = 'MediaFailure';

/** What a worker reads about a failure (the cause first, then what happens next). */
export function failureText(failure) {
  const detail = failure.detail;
  const what = {
    http: () => t('the server answered %(detail)s', { detail }),
    network: () => t('the connection to the server broke off'),
    timeout: () => t('it did not finish loading within %(detail)s', { detail }),
    decode: () => t('your browser could not decode it (%(detail)s)', { detail }),
    autoplay: () => t('your browser did not let it play'),
  }[failure.reason]?.() || detail;
  return t('A video of this trial could not be loaded: %(reason)s.', { reason: what });
}

const MEDIA_ERRORS = { 1: 'aborted', 2: 'network error while decoding', 3: 'decoding error', 4: 'format or codec not supported' };

/**
 * Why this browser cannot play the study's clips: one problem per MIME type (with codecs) it cannot decode.
 * @param {string[]} types  e.g. ['video/mp4; codecs="avc1.640028"'] (the requirement's `decode`)
 * @returns {Promise<{code: string, type: string, text: string}[]>}
 */
export async function decodingProblems(types, { width = 1920, height = 1080, framerate = 30 } = {}) {
  const problems = [];
  const probe = document.createElement('video');
  for (const type of types || []) {
    let supported = probe.canPlayType(type) !== '';
    if (supported && navigator.mediaCapabilities && navigator.mediaCapabilities.decodingInfo) {
      try {
        const info = await navigator.mediaCapabilities.decodingInfo({
          type: 'file', video: { contentType: type, width, height, bitrate: 8e6, framerate } });
        supported = info.supported;
      } catch (error) {
        supported = false; // a type the browser does not even parse
      }
    }
    if (!supported) {
      problems.push({ code: 'cannot_decode', type, text: t("Your browser cannot play this study's videos (it cannot decode %(codec)s). Try another browser, such as a current Chrome, Edge or Safari.", { codec: codecName(type) }) });
    }
  }
  return problems;
}

/** 'video/mp4; codecs="avc1.640028"' -> 'H.264 video (avc1.640028)'. */
function codecName(type) {
  const codec = (/codecs="?([^";]+)/.exec(type) || [])[1] || type;
  const family = { avc1: 'H.264', vp09: 'VP9', av01: 'AV1', hvc1: 'HEVC (H.265)', hev1: 'HEVC (H.265)',
                   'mp4v': 'MPEG-4 Part 2', vp8: 'VP8' }[codec.split('.')[0]];
  return family ? t('%(family)s video (%(codec)s)', { family, codec }) : t('video of codec %(codec)s', { codec });
}

/**
 * The whole file of a clip as an object URL; `onProgress(fraction or null)` while it loads.
 * @returns {Promise<{objectUrl: string, bytes: number}>}
 * @throws {MediaFailure} http, network or timeout
 */
export async function preloadClip(url, { onProgress = () => {}, timeoutMs = 120000, signal = null } = {}) {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), timeoutMs);
  const stop = () => abort.abort();
  if (signal) signal.addEventListener('abort', stop, { once: true });
  try {
    let response;
    try {
      response = await fetch(url, { signal: abort.signal, credentials: 'same-origin' });
    } catch (error) {
      throw loadFailure(abort, signal, timeoutMs);
    }
    if (!response.ok) throw new MediaFailure('http', `HTTP ${response.status}`);
    const total = Number(response.headers.get('Content-Length')) || 0;
    const reader = response.body.getReader();
    const chunks = [];
    let bytes = 0;
    onProgress(total ? 0 : null);
    for (;;) {
      let step;
      try {
        step = await reader.read();
      } catch (error) {
        throw loadFailure(abort, signal, timeoutMs);
      }
      if (step.done) break;
      chunks.push(step.value);
      bytes += step.value.byteLength;
      onProgress(total ? Math.min(1, bytes / total) : null);
    }
    if (total && bytes !== total) throw new MediaFailure('network', `${bytes} of ${total} bytes arrived`);
    const type = response.headers.get('Content-Type') || 'video/mp4';
    return { objectUrl: URL.createObjectURL(new Blob(chunks, { type })), bytes };
  } finally {
    clearTimeout(timer);
    if (signal) signal.removeEventListener('abort', stop);
  }
}

// Allowed for setting the test file's request up (DNS, TLS, the server's answer) besides its transfer.
const SETUP_MS = 1000;

/**
 * Whether this connection is fast enough for the study's clips (server/paradigms/media.py, "The connection
 * check"): the test file at `url` (`probeBytes` random bytes) is loaded whole, as a clip is; its speed is
 * counted from the answer's arrival to its last byte. A download still running when a connection at
 * `minMbps` would have finished it (plus SETUP_MS) is stopped there: that connection is too slow.
 * @returns {Promise<{ok: boolean, measuredMbps: number|null}>} measuredMbps null: not finished in that time
 * @throws {MediaFailure} http or network: the test itself failed, which says nothing of the speed
 */
export async function measureConnection(url, minMbps, probeBytes, now = () => performance.now()) {
  const timeoutMs = SETUP_MS + (probeBytes * 8) / (minMbps * 1e3);
  let answered = null;
  try {
    const loaded = await preloadClip(url, { timeoutMs, onProgress: () => { if (answered === null) answered = now(); } });
    URL.revokeObjectURL(loaded.objectUrl);
    const measuredMbps = (loaded.bytes * 8) / (Math.max(now() - answered, 1) / 1000) / 1e6;
    return { ok: measuredMbps >= minMbps, measuredMbps };
  } catch (failure) {
    if (failure instanceof MediaFailure && failure.reason === 'timeout') return { ok: false, measuredMbps: null };
    throw failure;
  }
}

function loadFailure(abort, signal, timeoutMs) {
  if (abort.signal.aborted && !(signal && signal.aborted)) return new MediaFailure('timeout', `${Math.round(timeoutMs / 1000)} s`);
  return new MediaFailure('network', 'the download was interrupted');
}

/**
 * A <video> of an object URL, with no controls, no seeking and no picture-in-picture, muted (the study's
 * clips are judged for their pictures) and inline; resolves once its first frame is decoded.
 * @throws {MediaFailure} decode
 */
export function clipElement(objectUrl) {
  const video = document.createElement('video');
  Object.assign(video, { muted: true, playsInline: true, controls: false, preload: 'auto', loop: false,
                         disablePictureInPicture: true, disableRemotePlayback: true });
  video.setAttribute('playsinline', '');
  video.setAttribute('muted', '');
  video.addEventListener('contextmenu', (event) => event.preventDefault());
  return new Promise((resolve, reject) => {
    video.addEventListener('loadeddata', () => resolve(video), { once: true });
    video.addEventListener('error', () => {
      const error = video.error;
      reject(new MediaFailure('decode', (error && (error.message || MEDIA_ERRORS[error.code])) || 'unknown error'));
    }, { once: true });
    video.src = objectUrl;
  });
}

/** A trial's playback log, summed over its clips and playbacks (the rating's `playback`). */
export class PlaybackLog {
  constructor() {
    Object.assign(this, { stall_ms: 0, dropped_frames: 0, presented_frames: 0, start_delay_ms: 0, replays: 0,
                          playing_ms: 0, duration_ms: 0, max_drift_ms: null, error: null });
  }

  /** The JSON the server takes (server/paradigms/media.py parse_playback). */
  toJSON() {
    const round = (x) => Math.round(x * 10) / 10;
    const body = { stall_ms: round(this.stall_ms), dropped_frames: this.dropped_frames,
                   presented_frames: this.presented_frames, start_delay_ms: round(this.start_delay_ms),
                   replays: this.replays, playing_ms: round(this.playing_ms), duration_ms: round(this.duration_ms) };
    if (this.max_drift_ms !== null) body.max_drift_ms = round(this.max_drift_ms); // clips played together only
    if (this.error) body.error = this.error.slice(0, 300);
    return body;
  }
}

/** Whether a log passes the study's rule (the State's media.rule): media.py's faithful(). */
export function faithful(log, rule) {
  const frames = log.presented_frames + log.dropped_frames;
  const dropped = frames ? log.dropped_frames / frames : 1;
  const extra = log.playing_ms / (1 + log.replays) - log.duration_ms;
  return log.stall_ms <= rule.max_stall_ms && dropped <= rule.max_dropped_share
    && extra <= rule.max_extra_playing_ms && log.presented_frames > 0;
}

// Frames over which a clip's offset (display time of its media time 0) is the least, in playTogether.
const OFFSET_FRAMES = 5;

/**
 * Play `video` once from its start to its end, adding to `log` (playTogether of one clip).
 * @param {HTMLVideoElement} video
 * @param {PlaybackLog} log
 * @param {{durationS: number, askClick: Function, now?: Function}} options
 * @returns {Promise<void>}
 * @throws {MediaFailure} decode (an error while playing) or timeout (the clip never ended)
 */
export function playClip(video, log, options) {
  return playTogether([video], log, options);
}

/**
 * Play `videos` once from their start to their end, started in one task so that they start on the same
 * frame (each whole file preloaded and its first frame decoded: clipElement), adding to `log`. The clock is
 * performance.now(); frames presented are counted per clip by requestVideoFrameCallback
 * (getVideoPlaybackQuality where it is missing) and summed; a stall is time during which any clip waits
 * for data or decoding; the start delay is the slowest clip's. With more than one clip, the drift between
 * them is measured at each presented frame from the browser's own frame metadata: each clip's offset is the
 * display time of its media time 0 (expectedDisplayTime - mediaTime, the least of its last OFFSET_FRAMES
 * frames), and clips in step share it; the largest difference seen goes to `log.max_drift_ms`.
 * @param {HTMLVideoElement[]} videos
 * @param {PlaybackLog} log
 * @param {{durationS: number, askClick: Function, now?: Function}} options  durationS: the longest clip's;
 *   askClick(): a promise that resolves when the worker clicked "Play" (shown when the browser refuses to
 *   autoplay)
 * @returns {Promise<void>}
 * @throws {MediaFailure} decode (an error while playing) or timeout (a clip never ended)
 */
export async function playTogether(videos, log, { durationS, askClick, now = () => performance.now() }) {
  const quality = (video) => (video.getVideoPlaybackQuality ? video.getVideoPlaybackQuality()
    : { totalVideoFrames: 0, droppedVideoFrames: 0 });
  const counting = videos.every((video) => typeof video.requestVideoFrameCallback === 'function');
  const clips = videos.map((video) => ({ video, before: quality(video), presented: 0, startPresented: null,
                                         firstFrame: null, offset: null, recent: [], handle: null }));
  let drift = 0;
  const waiting = new Set();
  let stallStart = null;
  const listeners = [];
  const listen = (video, type, handler) => { video.addEventListener(type, handler); listeners.push([video, type, handler]); };
  for (const clip of clips) {
    clip.video.currentTime = 0;
    listen(clip.video, 'waiting', () => {
      if (waiting.size === 0) stallStart = now();
      waiting.add(clip.video);
    });
    listen(clip.video, 'playing', () => {
      waiting.delete(clip.video);
      if (waiting.size === 0 && stallStart !== null) { log.stall_ms += now() - stallStart; stallStart = null; }
    });
  }
  const onFrame = (clip) => (at, metadata) => {
    if (clip.firstFrame === null) clip.firstFrame = now();
    // presentedFrames counts since the element was made: start from the count when play starts.
    if (clip.startPresented === null) clip.startPresented = metadata.presentedFrames - 1;
    clip.presented = metadata.presentedFrames - clip.startPresented;
    // The first callback may describe the frame on screen before play (its display time is not the
    // playback's): the offsets are taken from each clip's second frame on. A frame is shown at the first
    // refresh at or after its time, so one frame's offset is late by up to a refresh: a clip's offset is
    // the least of its last OFFSET_FRAMES frames' (a cadence cycle: 25 fps on 60 Hz repeats every 5 frames).
    if (clip.presented > 1) {
      clip.recent.push(metadata.expectedDisplayTime - 1000 * metadata.mediaTime);
      if (clip.recent.length > OFFSET_FRAMES) clip.recent.shift();
      clip.offset = Math.min(...clip.recent);
    }
    if (clips.length > 1 && clips.every((c) => c.offset !== null)) {
      const offsets = clips.map((c) => c.offset);
      drift = Math.max(drift, Math.max(...offsets) - Math.min(...offsets));
    }
    clip.handle = clip.video.requestVideoFrameCallback(onFrame(clip));
  };
  const ended = Promise.all(clips.map(({ video }) => new Promise((resolve, reject) => {
    video.addEventListener('ended', resolve, { once: true });
    video.addEventListener('error', () => reject(new MediaFailure('decode', MEDIA_ERRORS[video.error?.code] || 'error while playing')), { once: true });
  })));
  ended.catch(() => {}); // handled below; a failure before the race must not be an unhandled rejection
  const playAll = () => Promise.all(clips.map(({ video }) => video.play()));
  let requested = now();
  try {
    if (counting) for (const clip of clips) clip.handle = clip.video.requestVideoFrameCallback(onFrame(clip));
    try {
      await playAll();
    } catch (error) {
      if (!error || error.name !== 'NotAllowedError') throw new MediaFailure('decode', String(error && error.message));
      for (const { video } of clips) { video.pause(); video.currentTime = 0; }
      await askClick();
      requested = now();
      await playAll();
    }
    let timer;
    const limit = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new MediaFailure('timeout', 'the clip did not finish playing')),
                         1000 * durationS + 30000);
    });
    try {
      await Promise.race([ended, limit]);
    } finally {
      clearTimeout(timer);
    }
    const end = now();
    if (stallStart !== null) log.stall_ms += end - stallStart;
    let firstFrame = null;
    for (const clip of clips) {
      const after = quality(clip.video);
      const dropped = Math.max(0, after.droppedVideoFrames - clip.before.droppedVideoFrames);
      const presented = counting ? clip.presented
        : Math.max(0, after.totalVideoFrames - clip.before.totalVideoFrames - dropped);
      log.presented_frames += presented;
      log.dropped_frames += dropped;
      firstFrame = Math.max(firstFrame ?? -Infinity, clip.firstFrame ?? end);
    }
    log.start_delay_ms += Math.max(0, firstFrame - requested);
    log.playing_ms += end - requested;
    if (clips.length > 1) log.max_drift_ms = Math.max(log.max_drift_ms ?? 0, drift);
  } finally {
    for (const clip of clips) {
      if (clip.handle !== null && clip.video.cancelVideoFrameCallback) clip.video.cancelVideoFrameCallback(clip.handle);
    }
    for (const [video, type, handler] of listeners) video.removeEventListener(type, handler);
  }
}

// --- what a trial plugin of clips shares ----------------------------------------------------------

/**
 * The whole files of a page's clips, each loaded once (this trial's, or the next one's early) as an object
 * URL (preloadClip), with the progress of each; a failed load is tried afresh when asked again.
 */
export class ClipFiles {
  constructor({ timeoutMs = 120000 } = {}) {
    this.timeoutMs = timeoutMs;
    this.files = new Map();     // url -> Promise<{objectUrl, bytes}>
    this.progress = new Map();  // url -> onProgress of the trial waiting for it
  }

  /** The whole file of `url` (a promise of {objectUrl, bytes}); `onProgress(fraction or null)` while it loads. */
  file(url, onProgress = () => {}) {
    let file = this.files.get(url);
    if (!file) {
      file = preloadClip(url, { onProgress: (f) => this.progress.get(url)?.(f), timeoutMs: this.timeoutMs });
      file.catch(() => this.files.delete(url));
      this.files.set(url, file);
    }
    this.progress.set(url, onProgress);
    return file;
  }

  /**
   * Decoded <video> elements (clipElement) of `urls`, each file loaded whole first; `onProgress(fraction)`
   * with the share of all their bytes loaded so far.
   * @throws {MediaFailure}
   */
  async elements(urls, onProgress = () => {}) {
    const fractions = urls.map(() => 0);
    const files = await Promise.all(urls.map((url, i) => this.file(url, (f) => {
      fractions[i] = f === null ? fractions[i] : f;
      onProgress(fractions.reduce((a, b) => a + b, 0) / urls.length);
    })));
    return Promise.all(files.map(({ objectUrl }) => clipElement(objectUrl)));
  }

  /** Release the object URLs of every clip but `keep`'s (this trial's and the next one's). */
  keepOnly(keep) {
    for (const [url, file] of this.files) {
      if (!keep.has(url)) {
        file.then(({ objectUrl }) => URL.revokeObjectURL(objectUrl), () => {});
        this.files.delete(url);
        this.progress.delete(url);
      }
    }
  }
}

/**
 * Play a trial's clips under the study's rule: `playOnce(log)` plays them all once into a fresh PlaybackLog
 * (whose duration_ms is `durationMs`); an unfaithful playback (faithful(log, rule)) is played again, up to
 * rule.max_repeats times. `onRepeat(n)` before the n-th repeat.
 * @returns {Promise<PlaybackLog>} the last playback's log
 */
export async function playUnderRule(playOnce, rule, durationMs, onRepeat = () => {}) {
  for (let attempt = 0; ; attempt += 1) {
    const log = new PlaybackLog();
    log.duration_ms = durationMs;
    await playOnce(log);
    if (!rule || faithful(log, rule) || attempt >= rule.max_repeats) return log;
    onRepeat(attempt + 1);
  }
}

/**
 * The browser refused to autoplay: a "Play" button in `parent` that resolves the returned promise when
 * clicked (never a stuck page).
 */
export function playButton(parent, { id, className }) {
  return new Promise((resolve) => {
    const button = document.createElement('button');
    Object.assign(button, { type: 'button', id, className, textContent: '▶ Play' });
    button.addEventListener('click', () => { button.remove(); resolve(); }, { once: true });
    parent.append(button);
  });
}
