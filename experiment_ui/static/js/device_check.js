// The entry pages' device check (HIT preview, consent, instructions; _device_check.html): before
// anyone consents or accepts a HIT, the page checks the device and the window against what the
// study's pages need (the paradigm's WindowRequirement, server/paradigms/display.py) and says
// plainly when it cannot work here: a device of a class the study does not admit (a phone, a tablet;
// the server's rule, WindowRequirement.devices, and its data: whether the user agent is mobile, the
// phone threshold), a screen too small, or a window too small (that one goes away by itself once the
// window is large enough).
// While a problem stands, the page's `[data-needs-device]` parts (the consent form, the start
// button) are hidden. On the consent page of a video study (`data-unable`), the connection check
// (media.js measureConnection) downloads the test file; a connection too slow for the clips, or a browser
// that cannot decode them (media.js decodingProblems), is reported to the server, which turns the worker
// away with the reason, and the page shows that reason at once.

import { layoutWindow, policyFactor } from './display.js';
import { decodingProblems, measureConnection } from './media.js';
import { t } from './i18n.js';

/** What the browser says about itself (kept in one place so that the check is a pure function). */
export function environment() {
  const media = (query) => window.matchMedia && window.matchMedia(query).matches;
  return {
    width: window.innerWidth,
    height: window.innerHeight,
    screenWidth: (window.screen && (window.screen.availWidth || window.screen.width)) || window.innerWidth,
    screenHeight: (window.screen && (window.screen.availHeight || window.screen.height)) || window.innerHeight,
    dpr: window.devicePixelRatio || 1,
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
 * This device's class under the server's rule (display.py device_class, with the data `rule` carries: the
 * server's verdict on the user agent, `mobile_ua`, and `phone_short_side`): desktop | tablet | phone.
 */
export function deviceClass(rule, env) {
  if (!(rule.mobile_ua || env.touchOnly)) return 'desktop';
  return Math.min(env.screenWidth, env.screenHeight) < rule.phone_short_side ? 'phone' : 'tablet';
}

/** Why a device of a class the study does not admit is turned away, saying which it admits (`devices`). */
function refusal(devices, needsMouse, size) {
  if (devices.includes('tablet')) {
    return t('This study cannot be done on a phone: it needs a computer or a tablet with a browser window of at least %(size)s pixels.', { size });
  }
  return needsMouse
    ? t('This study cannot be done on a phone or tablet: it needs a computer (laptop or desktop) with a mouse or a touchpad with a browser window of at least %(size)s pixels.', { size })
    : t('This study cannot be done on a phone or tablet: it needs a computer (laptop or desktop) with a browser window of at least %(size)s pixels.', { size });
}

/**
 * The problems of this device for the study, most serious first (empty: it can take part).
 * @returns {{code: string, text: string}[]} code: phone | tablet (a class the study does not admit) |
 *   screen_too_small | window_too_small
 */
export function deviceProblems(requirement, env) {
  const need = neededWindow(requirement, env.dpr);
  const size = `${need.width} × ${need.height}`;
  const device = deviceClass(requirement, env);
  if (!requirement.devices.includes(device)) {
    return [{ code: device, text: refusal(requirement.devices, requirement.needs_mouse, size) }];
  }
  const problems = [];
  if (env.screenWidth < need.width || env.screenHeight < need.height) {
    problems.push({ code: 'screen_too_small', text: t('This screen is too small for this study: it needs a browser window of at least %(size)s pixels inside, and this screen has %(screen)s.', { size, screen: `${env.screenWidth} × ${env.screenHeight}` }) });
  } else if (env.width < need.width || env.height < need.height) {
    problems.push({ code: 'window_too_small', text: t('Your browser window is %(window)s pixels inside; this study needs at least %(size)s. Maximise the window or switch to full screen (F11; on a Mac Ctrl+⌘+F): this message goes away by itself when the window is large enough.', { window: `${env.width} × ${env.height}`, size }) });
  }
  return problems;
}

/** What the participant should do, where the check runs (the HIT preview, or after accepting); when only
 *  the window is too small, that is what to do if it cannot be made larger. */
function advice(where, platform, fixable) {
  const unless = fixable ? `${t('If your screen cannot show a window this large:')} ` : '';
  if (where === 'preview') return unless + t('Please do not accept this HIT on this device.');
  if (platform === 'mturk') return unless + t('Please return this HIT (do not submit it): you cannot complete it on this device.');
  return unless + t('You cannot take part on this device: please close this page (you may come back on a computer that fits).');
}

/**
 * The connection check's problems (empty: fast enough). A slow connection is reported to `unableUrl`, which
 * records it and answers what to tell the worker; a test that failed to load is a problem of its own (reloading
 * the page tries again), recorded nowhere.
 */
async function connectionProblems(probeUrl, requirement, unableUrl) {
  let result;
  try {
    result = await measureConnection(probeUrl, requirement.min_mbps, requirement.probe_bytes);
  } catch (failure) {
    return [{ code: 'connection_check_failed', text: t('The connection test could not load (%(reason)s). Please reload this page to try again.', { reason: failure.message }) }];
  }
  if (result.ok) return [];
  const text = await reportUnable(unableUrl, { reason: 'slow_connection', measured_mbps: result.measuredMbps });
  return [{ code: 'slow_connection', text: text || t("Your internet connection is too slow for this study's videos.") }];
}

/**
 * The decoding check's problems (media.js decodingProblems; empty: this browser plays the clips). Where the page
 * has `unableUrl` (the consent page), a refusal is reported there like a slow connection, and the worker reads
 * the reason their record keeps.
 */
async function decodeProblems(types, unableUrl) {
  const problems = await decodingProblems(types);
  if (!problems.length || !unableUrl) return problems;
  const text = await reportUnable(unableUrl, { reason: 'cannot_decode', types: problems.map((p) => p.type) });
  return text ? [{ code: 'cannot_decode', text }] : problems;
}

/** Report why this worker cannot take part to `unableUrl`, which turns them away and records the reason:
 *  the reason (what to tell the worker), or null when the report failed (the refusal stands all the same). */
async function reportUnable(unableUrl, body) {
  try {
    const answer = await fetch(unableUrl, { method: 'POST', headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
      credentials: 'same-origin', body: JSON.stringify(body) });
    if (answer.ok) return (await answer.json()).message;
  } catch (error) { /* only the record is missing */ }
  return null;
}

// The device problems the study counts per reason code (server/reasons.py; views/worker.py DEVICE_REFUSALS).
const COUNTED_PROBLEMS = ['phone', 'tablet', 'screen_too_small', 'window_too_small'];

/** Report the first device problem of the consent page (`url`: its `data-refused`) for the study's counts, once
 *  per assignment and problem in this tab (a resize or a reload does not count it again); nothing waits for it. */
function reportDeviceProblem(url, problems) {
  const problem = problems.find((p) => COUNTED_PROBLEMS.includes(p.code));
  if (!url || !problem) return;
  const key = `perceptlab-refused:${url}:${problem.code}`;
  try {
    if (sessionStorage.getItem(key)) return;
    sessionStorage.setItem(key, '1');
  } catch (error) { /* storage refused: report anyway */ }
  fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/json' }, credentials: 'same-origin',
    body: JSON.stringify({ problem: problem.code }) }).catch(() => {});
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
  let connection = box.dataset.unable && requirement.min_mbps > 0 ? null : [];
  const render = () => {
    const problems = [...(decoding || []), ...(connection || []), ...deviceProblems(requirement, environment())];
    const fixable = problems.length > 0 && problems.every((p) => p.code === 'window_too_small');
    const checking = decoding === null || connection === null;
    alert.hidden = problems.length === 0;
    box.dataset.device = problems.length ? problems[0].code : checking ? 'checking' : 'ok';
    if (problems.length) {
      alert.replaceChildren(...problems.map((p) => Object.assign(document.createElement('p'), { textContent: p.text })));
      const todo = advice(where, platform, fixable);
      alert.append(Object.assign(document.createElement('p'), { className: 'device-advice', textContent: todo }));
    }
    // The preview has nothing to hide (accepting happens on the platform's page).
    for (const part of guarded) part.hidden = problems.length > 0 || checking;
    reportDeviceProblem(box.dataset.refused, problems);
  };
  render();
  if (decoding === null) {
    decodeProblems(types, box.dataset.unable).then((found) => { decoding = found; render(); });
  }
  if (connection === null) {
    connectionProblems(box.dataset.probe, requirement, box.dataset.unable).then((found) => { connection = found; render(); });
  }
  window.addEventListener('resize', render);
  return render;
}
