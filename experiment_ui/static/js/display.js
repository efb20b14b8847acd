// The window a study's pages need, computed in the browser from the numbers the server sends: the
// twin of server/paradigms/display.py (window_needed, policy_factor).  The trial page (pc_trial.js)
// and the entry pages' device check (device_check.js) use it, so the server's `study create`, the
// preview, the consent page and the trial page all name the same window.

/** Round to 1e-6 before a ceiling, as display.py does (3 * 512 * 0.5 is 768, not 769). */
const round6 = (x) => Math.round(x * 1e6) / 1e6;

/** The scale the window must allow: min_image_scale (fit) or 1 / devicePixelRatio (pixel_exact). */
export function policyFactor(policy, minImageScale, dpr = 1) {
  return policy === 'pixel_exact' ? 1 / (dpr || 1) : minImageScale;
}

/** Width and height (CSS px) the trial page takes besides the three panels of a view. */
export function chromeSize(nViews, chrome) {
  return {
    width: 2 * chrome.pad + 2 * chrome.gap + chrome.margin,
    height: chrome.bar + (nViews > 1 ? chrome.views : 0) + chrome.pad + chrome.label + chrome.pad + chrome.margin,
  };
}

/**
 * The smallest inner window (CSS px) that shows every view of a set at `factor` of its panel size.
 * @param {number[][]} views  panel [width, height] of each view (the whole images, then each region)
 * @param {number} factor  see policyFactor
 * @param {number[]} floor  the study's smallest window whatever its images
 * @param {object} chrome  the page's fixed chrome (the State's display.chrome)
 * @returns {{width: number, height: number}}
 */
export function windowNeeded(views, factor, floor, chrome) {
  const extra = chromeSize(views.length, chrome);
  const width = Math.max(...views.map(([w]) => Math.ceil(round6(3 * w * factor)))) + extra.width;
  const height = Math.max(...views.map(([, h]) => Math.ceil(round6(h * factor)))) + extra.height;
  return { width: Math.max(floor[0] || 0, width), height: Math.max(floor[1] || 0, height) };
}
