// The window a paired-comparison trial needs: the twin of server/paradigms/paired/window.py
// (pc_chrome_size, pc_layout, window_needed), on display.js's shared layoutWindow.  A view shows three
// panels of one size abreast (LEFT | REFERENCE | RIGHT) inside the page's fixed chrome (the State's
// display.chrome, the sizes perceptlab.css sets); the views show one at a time, so the widest and the
// tallest decide.  Served as /static/paradigms/pc/window.js (server/paradigms/wiring.py).

import { layoutWindow } from '../../js/display.js';

export const PANELS = 3;

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
 * @param {number} factor  display.js's policyFactor
 * @param {number[]} floor  the study's smallest window whatever its images
 * @param {object} chrome  the page's fixed chrome (the State's display.chrome)
 * @returns {{width: number, height: number}}
 */
export function windowNeeded(views, factor, floor, chrome) {
  const extra = chromeSize(views.length, chrome);
  const content = [PANELS * Math.max(...views.map(([w]) => w)), Math.max(...views.map(([, h]) => h))];
  return layoutWindow([...content, extra.width, extra.height], factor, floor);
}
