// Small helpers shared by the worker-side modules (the assignment driver and its trial plugins):
// building DOM nodes, waiting (for a time, a frame or a decoded image), the error a plugin throws
// when its stimuli do not load, and the guarded reload that hands a page over to the server when
// the worker's stage changes.

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Resolves at the next animation frame (the first frame that paints what was shown before). */
export const nextFrame = () => new Promise((resolve) => requestAnimationFrame(() => resolve()));

/** Resolves once the image is loaded *and decoded*, so it paints in full on first show. */
export async function decoded(img) {
  try {
    await img.decode();
  } catch (error) {
    // decode() also rejects for benign reasons (e.g. src replaced); only a missing/broken image is fatal.
    if (!(img.complete && img.naturalWidth > 0)) throw new Error(`Image failed to load: ${img.src}`);
  }
  return img;
}

/**
 * `promise`, cut short by `signal`: resolves (or rejects) as `promise` does, or with null as soon
 * as `signal` aborts -- for waits (a click, a trial) that the driver may call off.
 */
export function unlessAborted(promise, signal) {
  if (!signal) return promise;
  if (signal.aborted) return Promise.resolve(null);
  return new Promise((resolve, reject) => {
    const stop = () => resolve(null);
    signal.addEventListener('abort', stop, { once: true });
    promise.then(
      (value) => { signal.removeEventListener('abort', stop); resolve(value); },
      (error) => { signal.removeEventListener('abort', stop); reject(error); });
  });
}

/**
 * Thrown by a trial plugin whose stimuli could not be loaded. The driver shows `message` to the
 * worker (it should say that the page tries again), waits, and asks the server where things stand.
 */
export class StimulusLoadError extends Error {}
StimulusLoadError.prototype.name = 'StimulusLoadError';

/**
 * `el('p', {class: 'note', text: 'Hi'}, child...)`: an element with attributes.
 * `class` and `text` are properties; null, undefined and false attributes are left out,
 * true gives an empty attribute; falsy children are skipped.
 */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key === 'text') node.textContent = value;
    else node.setAttribute(key, value === true ? '' : String(value));
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

/**
 * Reload the page so the server renders the worker's new stage -- unless the same stage was
 * reloaded less than `guardMs` ago (server and page disagree: reloading again would loop).
 * @returns {boolean} false when the guard stopped the reload (show the worker a notice instead)
 */
export function guardedReload(assignmentId, stage, guardMs) {
  const key = `perceptlab.reload.${assignmentId}`;
  let last = null;
  try { last = JSON.parse(sessionStorage.getItem(key) || 'null'); } catch (_) { /* storage unusable */ }
  if (last && last.stage === stage && Date.now() - last.at < guardMs) return false;
  try { sessionStorage.setItem(key, JSON.stringify({ stage, at: Date.now() })); } catch (_) { /* ignore */ }
  location.reload();
  return true;
}
