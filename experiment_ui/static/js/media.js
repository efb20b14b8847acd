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
//   autoplay refusal turns into a click that starts it, never a stuck page.
// - faithful(log, rule): the study's [media] rule, the twin of media.py's faithful().
//
// Every failure is a MediaFailure whose `reason` names its cause: "http" (the HTTP status), "network",
// "timeout", "decode" (the browser's MediaError) or "autoplay"; the plugin records it on the trial.

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
  const what = {
    http: `the server answered ${failure.detail}`,
    network: 'the connection to the server broke off',
    timeout: `it did not finish loading within ${failure.detail}`,
    decode: `your browser could not decode it (${failure.detail})`,
    autoplay: 'your browser did not let it play',
  }[failure.reason] || failure.detail;
  return `A video of this trial could not be loaded: ${what}.`;
}

const MEDIA_ERRORS = { 1: 'aborted', 2: 'network error while decoding', 3: 'decoding error', 4: 'format or codec not supported' };

/**
 * Why this browser cannot play the study's clips: one problem per MIME type (with codecs) it cannot decode.
 * @param {string[]} types  e.g. ['video/mp4; codecs="avc1.640028"'] (the requirement's `decode`)
 * @returns {Promise<{code: string, text: string}[]>}
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
      problems.push({ code: 'cannot_decode', text: `Your browser cannot play this study's videos (it cannot `
        + `decode ${codecName(type)}). Try another browser, such as a current Chrome, Edge or Safari.` });
    }
  }
  return problems;
}

/** 'video/mp4; codecs="avc1.640028"' -> 'H.264 video (avc1.640028)'. */
function codecName(type) {
  const codec = (/codecs="?([^";]+)/.exec(type) || [])[1] || type;
  const family = { avc1: 'H.264', vp09: 'VP9', av01: 'AV1', hvc1: 'HEVC (H.265)', hev1: 'HEVC (H.265)',
                   'mp4v': 'MPEG-4 Part 2', vp8: 'VP8' }[codec.split('.')[0]];
  return family ? `${family} video (${codec})` : `video of codec ${codec}`;
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
                          playing_ms: 0, duration_ms: 0, error: null });
  }

  /** The JSON the server takes (server/paradigms/media.py parse_playback). */
  toJSON() {
    const round = (x) => Math.round(x * 10) / 10;
    const body = { stall_ms: round(this.stall_ms), dropped_frames: this.dropped_frames,
                   presented_frames: this.presented_frames, start_delay_ms: round(this.start_delay_ms),
                   replays: this.replays, playing_ms: round(this.playing_ms), duration_ms: round(this.duration_ms) };
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

/**
 * Play `video` once from its start to its end, adding to `log`. The clock is performance.now(); frames
 * presented are counted by requestVideoFrameCallback (getVideoPlaybackQuality where it is missing).
 * @param {HTMLVideoElement} video
 * @param {PlaybackLog} log
 * @param {{durationS: number, askClick: Function, now?: Function}} options  askClick(): a promise that
 *   resolves when the worker clicked "Play" (shown when the browser refuses to autoplay)
 * @returns {Promise<void>}
 * @throws {MediaFailure} decode (an error while playing) or timeout (the clip never ended)
 */
export async function playClip(video, log, { durationS, askClick, now = () => performance.now() }) {
  video.currentTime = 0;
  const quality = () => (video.getVideoPlaybackQuality ? video.getVideoPlaybackQuality()
    : { totalVideoFrames: 0, droppedVideoFrames: 0 });
  const before = quality();
  let presented = 0;
  let firstFrame = null;
  let stallStart = null;
  const counting = typeof video.requestVideoFrameCallback === 'function';
  let frameHandle = null;
  const onFrame = (at, metadata) => {
    if (firstFrame === null) firstFrame = now();
    presented = metadata.presentedFrames - startPresented;
    frameHandle = video.requestVideoFrameCallback(onFrame);
  };
  let startPresented = 0;
  const onWaiting = () => { if (stallStart === null) stallStart = now(); };
  const onPlaying = () => {
    if (stallStart !== null) { log.stall_ms += now() - stallStart; stallStart = null; }
  };
  video.addEventListener('waiting', onWaiting);
  video.addEventListener('playing', onPlaying);
  const ended = new Promise((resolve, reject) => {
    video.addEventListener('ended', resolve, { once: true });
    video.addEventListener('error', () => reject(new MediaFailure('decode', MEDIA_ERRORS[video.error?.code] || 'error while playing')), { once: true });
  });
  let requested = now();
  try {
    if (counting) {
      // presentedFrames counts since the element was made: start from the count when play starts.
      frameHandle = video.requestVideoFrameCallback((at, metadata) => {
        startPresented = metadata.presentedFrames - 1;
        onFrame(at, metadata);
      });
    }
    try {
      await video.play();
    } catch (error) {
      if (!error || error.name !== 'NotAllowedError') throw new MediaFailure('decode', String(error && error.message));
      await askClick();
      requested = now();
      await video.play();
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
    const after = quality();
    const dropped = Math.max(0, after.droppedVideoFrames - before.droppedVideoFrames);
    if (!counting) presented = Math.max(0, after.totalVideoFrames - before.totalVideoFrames - dropped);
    log.presented_frames += presented;
    log.dropped_frames += dropped;
    log.start_delay_ms += Math.max(0, (firstFrame ?? end) - requested);
    log.playing_ms += end - requested;
  } finally {
    if (frameHandle !== null && video.cancelVideoFrameCallback) video.cancelVideoFrameCallback(frameHandle);
    video.removeEventListener('waiting', onWaiting);
    video.removeEventListener('playing', onPlaying);
  }
}
