// Page-complete plugin of paired-comparison studies (stage "page_done"): the worker has finished a
// page and chooses to continue with another one or to finish and submit.  Like every plugin it
// declares its parameters first (none) and runs one screen; the choice is an action
// (POST .../actions), not a response, so it bypasses the response queue and its answer -- the new
// State -- goes straight back to the driver.

import { el, unlessAborted } from './dom.js';
import { t, tn } from './i18n.js';
import { ApiError } from './assignment_api.js';

export const info = Object.freeze({
  name: 'page-done',
  version: 1,
  description: 'End of a page: continue with another page (with its bonus) or finish and submit.',
  response: null,
  parameters: Object.freeze({}),
});

/** Rewards come as strings ("0.50"); show plain numbers as dollars, anything else as given. */
function money(value) {
  const text = String(value ?? '').trim();
  if (!text) return '';
  return /^\d+(\.\d+)?$/.test(text) ? `$${text}` : text;
}

export class PageDone {
  static info = info;

  constructor(driver, params) {
    this.driver = driver;
    this.params = params;
    this.panel = null;
    this.clicked = null; // resolves the wait for a button
  }

  mount(container) {
    if (this.panel) return;
    this.text = el('p');
    this.btnContinue = el('button', { type: 'button', id: 'btn-continue', class: 'pc-button pc-button-primary' });
    this.btnFinish = el('button', { type: 'button', id: 'btn-finish', class: 'pc-button',
                                    text: t('Finish and submit'), 'aria-label': t('Finish the study and submit') });
    this.btnContinue.addEventListener('click', () => this.clicked && this.clicked('continue'));
    this.btnFinish.addEventListener('click', () => this.clicked && this.clicked('finish'));
    this.panel = el('section', { id: 'page-done', class: 'pc-panel', hidden: true, 'aria-labelledby': 'page-done-title' },
      el('h2', { id: 'page-done-title', text: t('Page complete') }), this.text,
      el('div', { class: 'pc-actions' }, this.btnContinue, this.btnFinish));
    container.append(this.panel);
  }

  /**
   * Show the panel for `progress` (State's progress: pages_completed, min/max_pages, bonus_per_page) and
   * resolve with the State that the chosen action returns -- or null when the server had moved on
   * already (409: a double submit, a second tab), for the driver to ask where things stand.
   */
  async run(container, progress, { signal }) {
    this.mount(container);
    const p = progress || {};
    const done = p.pages_completed ?? 0;
    const canFinish = p.min_pages == null || done >= p.min_pages;
    // next_page (the server's word at page_done): false when no page is left for this worker in the
    // study; then only finishing is offered. A worker who still owes pages may try (the server says "full").
    const noPageLeft = p.next_page === false;
    const canContinue = (p.max_pages == null || done < p.max_pages) && !(noPageLeft && canFinish);
    // The bonus is paid for pages beyond min_pages; a page still needed to reach it is not a bonus page.
    const bonus = canFinish ? money(p.bonus_per_page) : '';
    this.driver.setProgress(tn('%(num)s page completed', '%(num)s pages completed', done));
    let next;
    if (!canFinish) {
      next = tn('Please continue: at least %(num)s page is needed before you can submit.',
        'Please continue: at least %(num)s pages are needed before you can submit.', p.min_pages);
    }
    else if (canContinue && bonus) next = t('You can continue with another page for a bonus of %(bonus)s, or finish now and submit.', { bonus });
    else if (canContinue) next = t('You can continue with another page, or finish now and submit.');
    else if (noPageLeft && done < (p.max_pages ?? Infinity)) next = t('No further page is left for you in this study: please finish and submit.');
    else next = t('Please finish and submit.');
    const thanks = p.max_pages
      ? tn('Thank you! You have completed %(num)s page (up to %(most)s possible).',
        'Thank you! You have completed %(num)s pages (up to %(most)s possible).', done, { most: p.max_pages })
      : tn('Thank you! You have completed %(num)s page.', 'Thank you! You have completed %(num)s pages.', done);
    this.text.textContent = `${thanks} ${next}`;
    this.btnContinue.textContent = bonus ? t('Continue with another page (bonus %(bonus)s)', { bonus }) : t('Continue with the next page');
    this.btnContinue.setAttribute('aria-label', bonus ? t('Continue with another page, bonus %(bonus)s', { bonus }) : t('Continue with the next page'));
    // If the server's numbers rule out both, show both and let it decide.
    this.btnContinue.hidden = !canContinue && canFinish;
    this.btnFinish.hidden = !canFinish && canContinue;
    this.driver.setStatus('');
    this.panel.hidden = false;
    for (;;) {
      this.btnContinue.disabled = false;
      this.btnFinish.disabled = false;
      const action = await unlessAborted(new Promise((resolve) => { this.clicked = resolve; }), signal);
      this.clicked = null;
      if (!action) return null;
      this.btnContinue.disabled = true;
      this.btnFinish.disabled = true;
      try {
        const state = await this.driver.api('POST', '/actions', { action });
        this.driver.showNotice('');
        return state;
      } catch (error) {
        if (signal.aborted) return null;
        // Already acted (double submit, second tab): just follow the server.
        if (error instanceof ApiError && error.status === 409) return null;
        this.driver.showNotice(error.message);
      }
    }
  }

  clear() {
    if (this.panel) this.panel.hidden = true;
    this.clicked = null;
  }
}
