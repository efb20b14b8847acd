// One tab per assignment.  A worker who opens the same assignment in a second tab (or window)
// would otherwise see the same pairs twice and answer them in both: the second tab says plainly
// that the task is active elsewhere and shows no trials.  Once the first tab is closed, reloading
// the second one takes over.
//
// The claim is a Web Lock named after the assignment (held for the life of the page, released by
// the browser when the tab closes or navigates away).  Web Locks need a secure context (HTTPS or
// localhost); elsewhere a BroadcastChannel roll call stands in: the active tab answers a new tab's
// "hello".  The new tab deliberately does *not* take over by itself when the lock frees up: the
// lock is also released for a moment whenever the active tab reloads (F5), and a background tab
// must not steal the assignment from the tab the worker is looking at.

import { el } from './dom.js';
import { t } from './i18n.js';

const ROLL_CALL_MS = 300; // fallback only: how long a new tab waits for an active tab to answer

/**
 * Claim `assignmentId` for this tab.
 * @param {string} assignmentId
 * @returns {Promise<boolean>} true: this tab is the only one (go ahead); false: another tab holds it
 */
export function claimAssignment(assignmentId) {
  const name = `perceptlab.assignment.${assignmentId}`;
  if (typeof navigator !== 'undefined' && navigator.locks && navigator.locks.request) return claimWithLock(name);
  if (typeof BroadcastChannel !== 'undefined') return claimWithRollCall(name);
  return Promise.resolve(true); // nothing to coordinate with: behave as before
}

function claimWithLock(name) {
  return new Promise((resolve) => {
    navigator.locks.request(name, { ifAvailable: true }, (lock) => {
      resolve(lock !== null);
      // Returning a promise that never settles keeps the lock until the page goes away.
      return lock ? new Promise(() => {}) : null;
    }).catch(() => resolve(true)); // locks unusable (e.g. a sandboxed frame): do not block the worker
  });
}

function claimWithRollCall(name) {
  return new Promise((resolve) => {
    const channel = new BroadcastChannel(name);
    let active = false;
    let blocked = false;
    channel.onmessage = (event) => {
      if (event.data === 'hello' && active) channel.postMessage('here');
      if (event.data === 'here' && !active) blocked = true;
    };
    channel.postMessage('hello');
    setTimeout(() => {
      active = !blocked;
      if (blocked) channel.close();
      resolve(active);
    }, ROLL_CALL_MS);
  });
}

/** The notice shown instead of the task in a second tab. */
export function showOtherTabNotice(root) {
  const reload = el('button', { type: 'button', id: 'btn-other-tab-reload', class: 'button',
                                text: t('I closed the other tab: continue here') });
  reload.addEventListener('click', () => location.reload());
  root.replaceChildren(el('section', { id: 'other-tab', class: 'card other-tab', role: 'alert' },
    el('h1', { text: t('This task is open in another tab') }),
    el('p', { text: t('You already have this task open in another tab or window of this browser. Please continue there and close this tab; answers given there are saved.') }),
    el('p', { text: t('If you closed the other tab, continue here:') }),
    reload));
}

/**
 * Run `start(root, config)` if this tab is the assignment's only one; otherwise show the notice.
 * @returns {Promise<object|null>} what `start` returned, or null in a second tab
 */
export async function startGuarded(start, root, config) {
  if (!(await claimAssignment(String(config.assignmentId)))) {
    showOtherTabNotice(root);
    return null;
  }
  return start(root, config);
}
