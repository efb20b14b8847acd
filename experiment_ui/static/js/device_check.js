// The entry pages' device check (HIT preview, consent, instructions; _device_check.html): before
// anyone consents or accepts a HIT, the page checks the device and the window against what the
// study's pages need (the paradigm's WindowRequirement, server/paradigms/display.py) and says
// plainly when it cannot work here: a phone, a touch-only device where a mouse is needed, a screen
// too small, or a window too small (that one goes away by itself once the window is large enough).
// While a problem stands, the page's `[data-needs-device]` parts (the consent form, the start
// button) are hidden.

import { layoutWindow, policyFactor } from './display.js';
import { decodingProblems } from './media.js';

/** What the browser says about itself (kept in one place so that the check is a pure function). */
export function environment() {
  const ua = navigator.userAgent || '';
  const uaMobile = navigator.userAgentData ? navigator.userAgentData.mobile : undefined;
  const media = (query) => window.matchMedia && window.matchMedia(query).matches;
  return {
    width: window.innerWidth,
    height: window.innerHeight,
    screenWidth: (window.screen && (window.screen.availWidth || window.screen.width)) || window.innerWidth,
    screenHeight: (window.screen && (window.screen.availHeight || window.screen.height)) || window.innerHeight,
    dpr: window.devicePixelRatio || 1,
    // Phones and tablets say so in their user agent (iPadOS poses as a Mac, but has no fine pointer).
    mobile: uaMobile === true || /Mobi|Android|iPhone|iPod|iPad|Windows Phone/i.test(ua),
    // No mouse, touchpad or pen anywhere: a touch screen only.
    touchOnly: media('(pointer: coarse)') && !media('(any-pointer: fine)'),
  };
}

/** The window (CSS px) the study needs on this device: under pixel_exact it depends on the ratio. */
export function neededWindow(requirement, dpr) {
  if (requirement.policy !== 'pixel_exact' || !(requirement.layouts || []).length) {
    return { width: requirement.min_window[0], height: requirement.min_window[1] };
  }
  const factor = policyFactor(requirement.policy, requirement.min_image_scale, dpr);
  const needs = requirement.layouts.map((layout) => layoutWindow(layout, factor, requirement.floor));
  return { width: Math.max(...needs.map((n) => n.width)), height: Math.max(...needs.map((n) => n.height)) };
}

/**
 * The problems of this device for the study, most serious first (empty: it can take part).
 * @returns {{code: string, text: string}[]} code: phone | touch_only | screen_too_small | window_too_small
 */
export function deviceProblems(requirement, env) {
  const need = neededWindow(requirement, env.dpr);
  const size = `${need.width} × ${need.height}`;
  const problems = [];
  if (env.mobile) {
    problems.push({ code: 'phone', text: 'This study cannot be done on a phone or tablet: it needs a computer '
      + `(laptop or desktop) with a browser window of at least ${size} pixels.` });
  } else if (requirement.needs_mouse && env.touchOnly) {
    problems.push({ code: 'touch_only', text: 'This study needs a mouse or a touchpad; this device has a touch '
      + 'screen only.' });
  }
  if (env.screenWidth < need.width || env.screenHeight < need.height) {
    if (!env.mobile) {
      problems.push({ code: 'screen_too_small', text: `This screen is too small for this study: it needs a browser `
        + `window of at least ${size} pixels inside, and this screen has ${env.screenWidth} × ${env.screenHeight}.` });
    }
  } else if (env.width < need.width || env.height < need.height) {
    problems.push({ code: 'window_too_small', text: `Your browser window is ${env.width} × ${env.height} pixels `
      + `inside; this study needs at least ${size}. Maximise the window or switch to full screen (F11; on a Mac `
      + 'Ctrl+⌘+F): this message goes away by itself when the window is large enough.' });
  }
  return problems;
}

/** What the participant should do, where the check runs (the HIT preview, or after accepting); when only
 *  the window is too small, that is what to do if it cannot be made larger. */
function advice(where, platform, fixable) {
  const unless = fixable ? 'If your screen cannot show a window this large: ' : '';
  if (where === 'preview') return `${unless}Please do not accept this HIT on this device.`;
  if (platform === 'mturk') return `${unless}Please return this HIT (do not submit it): you cannot complete it on this device.`;
  return `${unless}You cannot take part on this device: please close this page (you may come back on a computer that fits).`;
}

/** Run the check in `box` (the _device_check.html element) now and whenever the window changes. */
export function startDeviceCheck(box) {
  const requirement = JSON.parse(box.dataset.requirement);
  const { where, platform } = box.dataset;
  const alert = box.querySelector('.device-problem');
  const guarded = [...document.querySelectorAll('[data-needs-device]')];
  // Video studies: whether this browser decodes the clips (media.js), asked once; the guarded parts stay
  // hidden until the answer is in.
  const types = requirement.decode || [];
  let decoding = types.length ? null : [];
  const render = () => {
    const problems = [...(decoding || []), ...deviceProblems(requirement, environment())];
    const fixable = problems.length > 0 && problems.every((p) => p.code === 'window_too_small');
    alert.hidden = problems.length === 0;
    box.dataset.device = problems.length ? problems[0].code : decoding === null ? 'checking' : 'ok';
    if (problems.length) {
      alert.replaceChildren(...problems.map((p) => Object.assign(document.createElement('p'), { textContent: p.text })));
      const todo = advice(where, platform, fixable);
      alert.append(Object.assign(document.createElement('p'), { className: 'device-advice', textContent: todo }));
    }
    // The preview has nothing to hide (accepting happens on the platform's page).
    for (const part of guarded) part.hidden = problems.length > 0 || decoding === null;
  };
  render();
  if (decoding === null) {
    decodingProblems(types).then((found) => { decoding = found; render(); });
  }
  window.addEventListener('resize', render);
  return render;
}
