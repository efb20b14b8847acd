// The paradigms the assignment driver knows, by name (the worker page's template names one).
// A paradigm declares only what differs between paradigms:
//
//   frame   the page's chrome, by part: root class; header (progress | prompt | pending in one bar
//           above the content, or none); id and class of progress, prompt, pending, notice, status
//           and stage; `pending.shows`: "always" (a running "saved" line) or "when-retrying".
//   texts   wording the driver uses for this paradigm (optional).
//   stages  the stages the browser runs, each with its plugin and either
//             trials(state) -> the stage's open trials, in order (a series: one run per trial), or
//             trial(state)  -> the parameters of a single screen (run once per State);
//           `resync: 'each-trial'` asks the server for a new State after every trial (blocks that
//           grow, e.g. a failed practice trial is repeated).
//           Every other stage (consent, instructions, completed, stopped, disqualified, full) is a
//           page the server renders: the driver hands over to it.
//   display what the display monitor (display_monitor.js) leaves to the paradigm (optional):
//           `zoom: 'recalibrates'`: a zoom change is counted but pauses nothing, since the paradigm
//           measures the screen again itself (motion's card), and each series of trials after a
//           screen stage takes the display as it then is.
//
// A plugin is a class with `static info = {name, version, description, parameters, response}`
// (`response`: the response queue's route -- {path, idField, quietRejection} -- or null) and
// `run(container, trial, {finish, next, signal})`; optional `update()` (State changed while a trial
// runs) and `clear()` (take everything off the screen).  Adding a paradigm: a plugin module and an
// entry here.

import { t } from './i18n.js';
import { PairedComparison } from './pc_trial.js';
import { PageDone } from './page_done.js';
import { MotionMatching } from './motion_trial.js';
import { ScreenCalibration } from './calibration.js';
import { RatingTrial, trialIdOf } from './rating_trial.js';

/** The open trials of State's current page, in display order. */
function pageTrials(state) {
  const page = state.page;
  if (!page) return [];
  return [...page.trials].sort((a, b) => a.position - b.position).filter((t) => !t.answered);
}

/** The open trials of a rating page, each with the `trial_id` the driver tracks answers by. */
const ratingTrials = (state) => pageTrials(state).map((t) => ({ ...t, trial_id: trialIdOf(t) }));

/** The open trials of State's current block (the server sends them in order, repeats first). */
const blockTrials = (state) => state.trials || [];

export const PARADIGMS = Object.freeze({
  'paired-comparison': Object.freeze({
    frame: {
      root: 'pc-app',
      header: { class: 'pc-bar' },
      progress: { id: 'progress', class: 'pc-progress' },
      prompt: { class: 'pc-bar-center' },
      pending: { id: 'pending', class: 'pc-pending', shows: 'always' },
      notice: { id: 'notice', class: 'pc-notice' },
      status: { id: 'pc-status', class: 'pc-status' },
      // No box of its own: the panels and the pair are laid out as children of the app.
      stage: { class: 'pc-stage', style: 'display: contents' },
    },
    texts: { confirming: t('Waiting for the server to confirm this page…') },
    stages: {
      quiz: { plugin: PairedComparison, trials: pageTrials },
      trials: { plugin: PairedComparison, trials: pageTrials },
      page_done: { plugin: PageDone, trial: (state) => state.progress || {} },
    },
  }),
  'motion-matching': Object.freeze({
    frame: {
      root: 'motion-app',
      header: null,
      progress: { id: 'motion-progress', class: 'motion-progress' },
      prompt: null,
      // Text over a running stimulus would distract: say something only when answers wait.
      pending: { id: 'motion-pending', class: 'motion-pending', shows: 'when-retrying' },
      notice: { id: 'motion-notice', class: 'pc-notice' },
      status: { id: 'motion-app-status', class: 'pc-status' },
      stage: { id: 'motion-stage', class: 'motion-stage' },
    },
    texts: {},
    display: { zoom: 'recalibrates' },
    stages: {
      // A refused display moves the assignment to "disqualified": the next State shows why.
      calibration: { plugin: ScreenCalibration, trial: (state) => ({ params: state.params }) },
      rdk: { plugin: MotionMatching, trials: blockTrials, resync: 'each-trial' },
      main: { plugin: MotionMatching, trials: blockTrials, resync: 'each-trial' },
    },
  }),
  rating: Object.freeze({
    frame: {
      root: 'rating-app',
      header: { class: 'pc-bar' },
      progress: { id: 'progress', class: 'pc-progress' },
      prompt: { class: 'pc-bar-center' },
      pending: { id: 'pending', class: 'pc-pending', shows: 'always' },
      notice: { id: 'notice', class: 'pc-notice' },
      status: { id: 'rating-status', class: 'pc-status' },
      stage: { id: 'rating-stage', class: 'rating-stage' },
    },
    texts: { confirming: t('Waiting for the server to confirm this page…') },
    stages: {
      quiz: { plugin: RatingTrial, trials: ratingTrials },
      trials: { plugin: RatingTrial, trials: ratingTrials },
      page_done: { plugin: PageDone, trial: (state) => state.progress || {} },
    },
  }),
});
