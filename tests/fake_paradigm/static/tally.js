// The fake paradigm's browser code, served from its package as /static/paradigms/fake-tally/tally.js.
export const TALLY = 'fake-tally';
