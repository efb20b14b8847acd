// The [viewing] checks at entry (server/paradigms/viewing.py; docs/viewing.md): brightness and contrast, colour
// vision, viewing distance and acuity, in the order the server lists them (the page's #viewing-config).
//
// The page holds no answer: every image comes from the server (`<base>/image/<check>/<i>`), and what the worker
// saw is posted (`<base>/answers/<check>`, `{"answers": [...]}`); the server scores it and answers
// {passed, message}. The card and the blind spot are the shared calibration modules (calibration.js,
// blind_spot.js), whose body goes to `<base>/screen` (answer {accepted, reason}, as calibration.js expects).
// Once every check passed, the page goes on (before consent: the consent page; after the instructions: the
// instructions' form is sent); after a failure it shows the server's reason and a link to the page that ends.

import { el } from './dom.js';
import { t } from './i18n.js';
import { Calibration } from './calibration.js';

/** POST `body` as JSON to `url`; the parsed answer, or an Error with `status` and the server's message. */
async function postJson(url, body) {
  const response = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/json' },
                                      body: JSON.stringify(body), credentials: 'same-origin' });
  const answer = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = new Error(answer.message || `HTTP ${response.status}`);
    error.status = response.status;
    throw error;
  }
  return answer;
}

/** A row of answer buttons (one pressed at a time); `onPick(value)` after each press. */
function choiceRow(values, label, onPick, { id, labelOf = String } = {}) {
  const row = el('div', { class: 'viewing-choices', role: 'group', 'aria-label': label, id });
  for (const value of values) {
    const button = el('button', { type: 'button', class: 'pc-button viewing-choice', 'data-value': String(value),
                                  'aria-pressed': 'false', text: labelOf(value) });
    button.addEventListener('click', () => {
      for (const other of row.children) other.setAttribute('aria-pressed', String(other === button));
      onPick(value);
    });
    row.append(button);
  }
  return row;
}

export class ViewingChecks {
  /**
   * @param {HTMLElement} root  where the checks are drawn
   * @param {{checks: string[], base: string, distance_cm: number, colour_plates: number, acuity_trials: number,
   *          gap_directions: string[], max_shapes: number}} config  the server's (server/paradigms/viewing.py)
   * @param {{onPassed: Function, onFailed: Function}} handlers  after every check passed; after one failed
   */
  constructor(root, config, { onPassed, onFailed }) {
    this.root = root;
    this.config = config;
    this.onPassed = onPassed;
    this.onFailed = onFailed;
  }

  url(...parts) {
    return [this.config.base, ...parts].join('/');
  }

  /** Run the checks in order; resolves once all passed or one failed. */
  async run() {
    const steps = { brightness: () => this.brightness(), colour: () => this.colour(),
                    distance: () => this.screen(), acuity: () => this.acuity() };
    let screened = false;
    for (const check of this.config.checks) {
      this.root.dataset.check = check;
      // One card match serves the distance and the acuity check (the distance check comes first).
      const step = check === 'acuity' && !screened ? async () => (await this.screen()) && this.acuity() : steps[check];
      if (check === 'distance') screened = true;
      const passed = await step();
      if (!passed) return false;
    }
    this.root.dataset.check = 'done';
    this.onPassed();
    return true;
  }

  panel(title, ...children) {
    this.root.replaceChildren();
    const section = el('section', { class: 'pc-panel viewing-panel', id: `viewing-${this.root.dataset.check}` },
      el('h2', { text: title }), ...children);
    this.root.append(section);
    return section;
  }

  /** Send one check's answers; false (and the reason shown) when the server turned the worker away. */
  async send(check, answers) {
    let answer;
    try {
      answer = await postJson(this.url('answers', check), { answers });
    } catch (error) {
      this.fail(t('Your answers could not be saved (%(error)s). Please reload the page.', { error: error.message }));
      return false;
    }
    if (!answer.passed) {
      this.fail(answer.message);
      return false;
    }
    return true;
  }

  fail(message) {
    this.root.dataset.outcome = 'failed';
    this.onFailed(message);
  }

  /** Count the shapes in a dark and in a bright patch. */
  brightness() {
    const counts = [null, null];
    const next = el('button', { type: 'button', id: 'viewing-next', class: 'pc-button pc-button-primary',
                                text: t('Continue'), disabled: true });
    const range = Array.from({ length: this.config.max_shapes + 1 }, (_, k) => k);
    const patch = (index, label) => el('figure', { class: 'viewing-figure' },
      el('img', { src: this.url('image', 'brightness', index), alt: label, class: 'viewing-patch',
                  id: `viewing-patch-${index}`, width: 240, height: 240 }),
      el('figcaption', { text: label }),
      choiceRow(range, label, (value) => {
        counts[index] = value;
        next.disabled = counts.includes(null);
      }, { id: `viewing-count-${index}` }));
    this.panel(t('Brightness and contrast'),
      el('p', { text: t('Each square holds a few faint shapes (circles, squares or triangles). How many shapes do '
        + 'you see in each square? Look closely; do not change your screen’s settings now.') }),
      el('div', { class: 'viewing-figures' }, patch(0, t('Dark square')), patch(1, t('Bright square'))),
      el('div', { class: 'pc-actions' }, next));
    return new Promise((resolve) => {
      next.addEventListener('click', async () => {
        next.disabled = true;
        resolve(await this.send('brightness', counts));
      }, { once: true });
    });
  }

  /** Read the digit of each plate (or say there is none). */
  colour() {
    const n = this.config.colour_plates;
    const answers = [];
    return new Promise((resolve) => {
      const show = (index) => {
        let picked = false;  // one answer per plate, however often the buttons are pressed
        const pick = async (value) => {
          if (picked) return;
          picked = true;
          answers.push(value);
          if (answers.length < n) show(index + 1);
          else resolve(await this.send('colour', answers));
        };
        const digits = choiceRow([0, 1, 2, 3, 4, 5, 6, 7, 8, 9], t('Digit'), pick, { id: 'viewing-digits' });
        const none = el('button', { type: 'button', id: 'viewing-no-digit', class: 'pc-button',
                                    text: t('I see no number') });
        none.addEventListener('click', () => pick(null));
        this.panel(t('Colour vision'),
          el('p', { text: t('Which number do you see in the dots? Plate %(k)s of %(n)s.', { k: index + 1, n }) }),
          el('figure', { class: 'viewing-figure' },
            el('img', { src: this.url('image', 'colour', index), alt: t('A circle of coloured dots'),
                        class: 'viewing-plate', id: 'viewing-plate', width: 240, height: 240 })),
          digits, el('div', { class: 'pc-actions' }, none));
      };
      show(0);
    });
  }

  /** The card (and, with the distance check, the blind spot): the shared calibration page. */
  async screen() {
    this.root.replaceChildren();
    const distance = this.config.checks.includes('distance');
    const calibration = new Calibration(this.root, {
      params: { blind_spot: distance, viewing_distance_cm: this.config.distance_cm,
                purpose: t('The test images must appear at the right size.') },
      submit: (body) => postJson(this.url('screen'), body),
    });
    this.calibration = calibration;  // tests and debugging read it
    const answer = await calibration.run();
    if (answer && answer.accepted === false) {
      this.fail(answer.reason);
      return false;
    }
    return true;
  }

  /** Name the direction of each Landolt C's gap. */
  acuity() {
    const n = this.config.acuity_trials;
    const answers = [];
    const arrows = { up: '↑', right: '→', down: '↓', left: '←' };
    const keys = { ArrowUp: 'up', ArrowRight: 'right', ArrowDown: 'down', ArrowLeft: 'left' };
    return new Promise((resolve) => {
      let onKey = null;
      const show = (index) => {
        let picked = false;  // one answer per C, by button or key
        const pick = async (value) => {
          if (picked) return;
          picked = true;
          answers.push(value);
          if (answers.length < n) {
            show(index + 1);
            return;
          }
          document.removeEventListener('keydown', onKey);
          resolve(await this.send('acuity', answers));
        };
        const image = el('img', { src: this.url('image', 'acuity', index), alt: t('A ring with a gap'),
                                  class: 'viewing-ring', id: 'viewing-ring' });
        // One image pixel on one device pixel: the server drew the C for this screen's px/mm and zoom.
        image.addEventListener('load', () => {
          image.style.width = `${image.naturalWidth / (window.devicePixelRatio || 1)}px`;
          image.dataset.loaded = 'true';
        });
        this.panel(t('Sharpness of vision'),
          el('p', { text: t('Sit about %(cm)s cm from the screen. Where is the gap in the ring? Ring %(k)s of '
            + '%(n)s (the arrow keys answer too).', { cm: this.config.distance_cm, k: index + 1, n }) }),
          el('div', { class: 'viewing-ring-box' }, image),
          choiceRow(this.config.gap_directions, t('Direction of the gap'), pick,
                    { id: 'viewing-directions', labelOf: (d) => arrows[d] }));
        for (const button of this.root.querySelectorAll('#viewing-directions button')) {
          button.setAttribute('aria-label', { up: t('Up'), right: t('Right'), down: t('Down'), left: t('Left') }[button.dataset.value]);
        }
        if (onKey) document.removeEventListener('keydown', onKey);
        onKey = (event) => {
          if (!keys[event.key]) return;
          event.preventDefault();
          document.removeEventListener('keydown', onKey);
          pick(keys[event.key]);
        };
        document.addEventListener('keydown', onKey);
      };
      show(0);
    });
  }
}

/** The page's entry point: runs the checks of #viewing-config in #viewing-root. */
export function startViewingChecks() {
  const config = JSON.parse(document.getElementById('viewing-config').textContent);
  const root = document.getElementById('viewing-root');
  const outcome = document.getElementById('viewing-outcome');
  const checks = new ViewingChecks(root, config, {
    onPassed: () => {
      root.replaceChildren();  // the last check's answers are sent: only the way on stays
      root.dataset.outcome = 'passed';
      outcome.hidden = false;
      outcome.querySelector('#viewing-message').textContent = t('Thank you: your screen and eyes suit this study.');
      document.getElementById('viewing-go-on').hidden = false;
    },
    onFailed: (message) => {
      root.replaceChildren();
      outcome.hidden = false;
      outcome.dataset.outcome = 'failed';
      outcome.querySelector('#viewing-message').textContent = message;
      document.getElementById('viewing-end').hidden = false;
    },
  });
  window.perceptlabViewing = checks;
  return checks.run();
}
