// The window a study's pages need, computed in the browser from the numbers the server sends: the
// twin of server/paradigms/display.py (layout_window, policy_factor), what every paradigm shares.  The
// entry pages' device check (device_check.js) and the trial pages use it, so the server's `study
// create`, the preview, the consent page and the trial page all name the same window; the trial pages
// also scale their images to the window with it (imageScale).  A paradigm's own layout lives in its
// package (paired comparison: server/paradigms/paired/static/window.js; ratings: rating_trial.js).

/** Round to 1e-6 before a ceiling, as display.py does (3 * 512 * 0.5 is 768, not 769). */
export const round6 = (x) => Math.round(x * 1e6) / 1e6;

/** The scale the window must allow: min_image_scale (fit) or 1 / devicePixelRatio (pixel_exact). */
export function policyFactor(policy, minImageScale, dpr = 1) {
  return policy === 'pixel_exact' ? 1 / (dpr || 1) : minImageScale;
}

/**
 * The smallest inner window (CSS px) that shows a layout's content at `factor` of its size: the twin
 * of display.py's layout_window.
 * @param {number[]} layout  [content width, content height, chrome width, chrome height] at scale 1
 *   (display.py's Layout.to_page): the content scales, the chrome around it does not
 * @param {number} factor  see policyFactor
 * @param {number[]} floor  the study's smallest window whatever its images
 * @returns {{width: number, height: number}}
 */
export function layoutWindow([contentWidth, contentHeight, chromeWidth, chromeHeight], factor, floor) {
  const width = Math.ceil(round6(contentWidth * factor)) + chromeWidth;
  const height = Math.ceil(round6(contentHeight * factor)) + chromeHeight;
  return { width: Math.max(floor[0] || 0, width), height: Math.max(floor[1] || 0, height) };
}

/**
 * The scale at which a trial page shows its images: 1 / devicePixelRatio (pixel_exact: one image
 * pixel per screen pixel), else (fit) the largest scale up to 1 at which they fit the inner window.
 * @param {string} policy  the State's display.policy
 * @param {number} dpr  window.devicePixelRatio
 * @param {number[]} content  [width, height] (CSS px at scale 1) of what is scaled: the images side by side
 * @param {{width: number, height: number}} chrome  the room the page takes besides them (its chromeSize)
 * @param {Element|null} notice  a notice above the trial (e.g. "Cannot reach the server"), which takes
 *   room of its own while it shows
 * @returns {number} never below 0 (a window smaller than the chrome shows nothing)
 */
export function imageScale(policy, dpr, [width, height], chrome, notice) {
  if (policy === 'pixel_exact') return 1 / dpr;
  const noticeHeight = notice && !notice.hidden ? notice.getBoundingClientRect().height : 0;
  return Math.max(0, Math.min(1, (window.innerWidth - chrome.width) / width,
                              (window.innerHeight - chrome.height - noticeHeight) / height));
}
