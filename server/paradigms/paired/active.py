"""Active pair sampling in a running paired-comparison study (``[design] sampling = "active"``).

Pairs and budget
----------------
An active study stores every pair of each set's candidates (``n(n-1)/2``) as a :class:`Pair`
(:func:`server.paradigms.paired.study.create_study`). The pairs of the set's regular design keep
``target_votes = votes_per_pair``, the others 0, so a set's targets add up to its **budget**: the
votes a regular study would collect (``votes_per_pair`` x the design's pairs). No pair gets more
than ``votes_per_pair`` votes (its cap).

Phases of a set
---------------
* **warm-up** -- while a design pair still lacks ``warmup_votes_per_pair`` votes, counting the
  reserved trials that show it as votes to come: the set offers those pairs first, neediest first
  (the regular rule), so a random connected design gives every item a few comparisons before any
  other pair is chosen. Only a worker who has seen all of them, or the last page of the warm-up,
  is given other pairs of the set as well (so that pages stay full).
* **active** -- the set offers any pair below its cap, in the order of its *selection*: a batch
  chosen by :func:`analysis.active.plan_batch` from the set's votes (pairs with reserved trials,
  whose votes are on their way, and pairs at their cap are left out), then every other pair by its
  expected information gain. A pair handed out since the selection was made goes behind those that
  were not, so concurrent pages share a batch out instead of all taking its best pair.
* **done** -- votes and reserved trials reach the budget.

Every allocation rule of the regular design holds unchanged: a worker never sees a pair twice,
pages mix the sets (one pair of each set in turn, the sets in random order), gold is added by the
caller, reserved trials count as votes, and the study's advisory lock serialises the hand-out across
app instances. Budgets and caps are counted from the database under that lock, so instances whose
selections differ may hand out different pairs, never more votes.

Selections are kept per process, database and study (:func:`refresh_selections`; running state, apart from
the study's fixed facts in :func:`server.paradigms.core.fixed_study_facts`) and refreshed, before the
allocation lock is taken, once a set has gained ``refresh_votes(n)`` votes since its selection was
made or :data:`REFRESH_SECONDS` have passed. Under the lock a page costs one query of the pairs'
state and a sort; a set that has just left its warm-up and has no selection yet in this process is
ranked by its votes (fewest first) for that one page.
"""
from __future__ import annotations

import datetime as dt
import threading
import weakref
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from ...allocation import now
from .allocation import LAPSED_PER_PAIR, RESERVED
from ..core import fixed_study_facts
from .models import Pair, StudySet, Trial, Vote

_trial, _pair, _vote, _set = (model.__table__ for model in (Trial, Pair, Vote, StudySet))

REFRESH_SECONDS = 30.0
"""A set's selection is made again at least this often while the study runs (seconds)."""

WARMUP, ACTIVE, DONE = "warm-up", "active", "done"


def refresh_votes(n_items: int) -> int:
    """New votes of a set after which its selection is made again: half a batch (at least 2)."""
    return max(2, batch_size(n_items) // 2)


def batch_size(n_items: int) -> int:
    """Pairs in a set's selected batch: one per item, as many as a spanning tree plus one."""
    return max(1, n_items)


# ---------------------------------------------------------------- the study's sets as index arrays

@dataclass(frozen=True)
class ActiveSet:
    """A set's candidate pairs as index arrays (fixed once the study is created)."""

    set_id: int
    items: tuple[int, ...]      # stimulus IDs; an item's index is its position
    pair_ids: np.ndarray        # (m,) the set's real pairs, in pair-ID order
    pairs: np.ndarray           # (m, 2) item indices of each pair (stimulus A, stimulus B)
    position: dict[int, int]    # pair ID -> row of pair_ids


def active_sets(session: Session, study_id: int, layout_pairs: dict[int, tuple[int, int, int]],
                gold: Collection[int]) -> dict[int, ActiveSet]:
    """The study's sets as :class:`ActiveSet` (built once per process from the study's layout), without the
    ``gold`` pairs (the gold-only ones: a real pair chosen as gold stays one of its set's pairs)."""
    cache = fixed_study_facts(session, "paired.active_sets")
    sets = cache.get(study_id)
    if sets is None:
        by_set: dict[int, list[tuple[int, int, int]]] = {}
        for pair_id, (set_id, a, b) in sorted(layout_pairs.items()):
            if pair_id not in gold:
                by_set.setdefault(set_id, []).append((pair_id, a, b))
        sets = {}
        for set_id, rows in by_set.items():
            items = tuple(sorted({a for _, a, _ in rows} | {b for _, _, b in rows}))
            index = {stimulus: k for k, stimulus in enumerate(items)}
            pair_ids = np.array([r[0] for r in rows], dtype=np.int64)
            pairs = np.array([(index[a], index[b]) for _, a, b in rows], dtype=np.int64).reshape(-1, 2)
            sets[set_id] = ActiveSet(set_id, items, pair_ids, pairs, {int(p): k for k, p in enumerate(pair_ids)})
        cache[study_id] = sets
    return sets


# ---------------------------------------------------------------- the pairs' state, one query

_PAIR_STATE = (select(_pair.c.id, _pair.c.set_id, _pair.c.n_votes, _pair.c.target_votes, RESERVED)
               .join_from(_pair, _set, _pair.c.set_id == _set.c.id)
               .outerjoin(LAPSED_PER_PAIR, LAPSED_PER_PAIR.c.pair_id == _pair.c.id)
               .where(_set.c.study_id == bindparam("study_id"), ~_pair.c.is_gold))
_SEEN_BY_WORKER = select(_trial.c.pair_id).where(_trial.c.worker_id == bindparam("worker_id"),
                                                 _trial.c.pair_id.is_not(None))
_SET_VOTES = (select(_vote.c.winner_id, _pair.c.stimulus_a_id, _pair.c.stimulus_b_id)
              .join_from(_vote, _pair, _vote.c.pair_id == _pair.c.id)
              .where(_pair.c.set_id == bindparam("set_id"), ~_pair.c.is_gold))


class SetState(NamedTuple):
    """A set's pairs now, aligned with :attr:`ActiveSet.pair_ids`."""

    votes: np.ndarray     # stored votes
    target: np.ndarray    # target_votes: votes_per_pair for design pairs, 0 for the others
    reserved: np.ndarray  # unanswered trials on reserved pages

    @property
    def handed_out(self) -> np.ndarray:
        return self.votes + self.reserved

    @property
    def budget(self) -> int:
        return int(self.target.sum())

    def warmup_left(self, warmup: int) -> np.ndarray:
        """Votes still to hand out to each design pair in the warm-up (0 for the other pairs)."""
        return np.maximum(np.minimum(self.target, warmup) - self.handed_out, 0)

    def phase(self, warmup: int) -> str:
        if self.warmup_left(warmup).any():
            return WARMUP
        return DONE if self.handed_out.sum() >= self.budget else ACTIVE


def read_state(session: Session, study_id: int, sets: dict[int, ActiveSet]) -> dict[int, SetState]:
    """Every set's :class:`SetState` (one query)."""
    arrays = {set_id: (np.zeros(len(s.pair_ids), np.int64), np.zeros(len(s.pair_ids), np.int64),
                       np.zeros(len(s.pair_ids), np.int64)) for set_id, s in sets.items()}
    for pair_id, set_id, votes, target, reserved in session.connection().execute(
            _PAIR_STATE, {"study_id": study_id, "now": now(session)}):
        active_set = sets.get(set_id)
        k = None if active_set is None else active_set.position.get(pair_id)
        if k is not None:
            arrays[set_id][0][k], arrays[set_id][1][k], arrays[set_id][2][k] = votes, target, reserved
    return {set_id: SetState(*values) for set_id, values in arrays.items()}


# ---------------------------------------------------------------- selections, cached per process

@dataclass
class Selection:
    """A set's pairs in the order the selector wants them, as of ``votes`` votes."""

    rank: np.ndarray       # (m,) rank of each pair (0 = the batch's first)
    baseline: np.ndarray   # (m,) votes + reserved trials of each pair when it was made
    votes: int             # the set's votes then
    made_at: dt.datetime
    batch: int             # pairs in the batch (ranks below this)
    mean: np.ndarray       # the posterior mean: the next fit's warm start
    gain_percent: float | None         # expected precision gained by the batch (analysis.active.PrecisionGain)
    random_gain_percent: float | None  # the same for as many pairs drawn at random from the open ones


@dataclass
class StudySelections:
    """One process's selections of a study, and the latest state it saw of each set."""

    selections: dict[int, Selection] = field(default_factory=dict)
    seen_votes: dict[int, int] = field(default_factory=dict)     # set ID -> votes at the latest look
    seen_phase: dict[int, str] = field(default_factory=dict)     # set ID -> phase at the latest look
    lock: threading.Lock = field(default_factory=threading.Lock)  # one refresh at a time per study


# Per process and database engine (weakly keyed: a disposed engine's selections go with it): each study's
# StudySelections. Running state that changes as votes arrive (under each StudySelections' own lock), so it is
# kept here, not in core.fixed_study_facts, whose values never change once a study exists.
_SELECTIONS: weakref.WeakKeyDictionary[Any, dict[int, StudySelections]] = weakref.WeakKeyDictionary()


def _selections(session: Session, study_id: int) -> StudySelections:
    """This process's :class:`StudySelections` of a study on the session's database."""
    bind = session.get_bind()
    studies = _SELECTIONS.get(bind)
    if studies is None:
        studies = _SELECTIONS.setdefault(bind, {})
    found = studies.get(study_id)
    if found is None:
        found = studies.setdefault(study_id, StudySelections())
    return found


def _stale(selection: Selection | None, votes: int, n_items: int, moment: dt.datetime) -> bool:
    if selection is None:
        return True
    return (votes - selection.votes >= refresh_votes(n_items)
            or (moment - selection.made_at).total_seconds() >= REFRESH_SECONDS)


def refresh_selections(session: Session, study, spec, sets: dict[int, ActiveSet]) -> None:
    """Make the selection of every active set whose selection is missing or stale (before the lock).

    Staleness is judged from the latest state this process saw (the previous page start); a
    process that has seen none reads the state first. Only sets in their active phase need one.
    """
    cache = _selections(session, study.id)
    moment = now(session)
    if not cache.seen_phase:
        _remember(cache, read_state(session, study.id, sets), spec)
    due = [set_id for set_id, phase in cache.seen_phase.items()
           if phase == ACTIVE and set_id in sets
           and _stale(cache.selections.get(set_id), cache.seen_votes.get(set_id, 0), len(sets[set_id].items), moment)]
    if not due or not cache.lock.acquire(blocking=False):
        return  # nothing to do, or another thread of this process is making them right now
    try:
        state = read_state(session, study.id, sets)
        for set_id in due:
            cache.selections[set_id] = make_selection(session, study, spec, sets[set_id], state[set_id], moment,
                                                      cache.selections.get(set_id))
    finally:
        cache.lock.release()


def _remember(cache: StudySelections, state: dict[int, SetState], spec) -> None:
    for set_id, set_state in state.items():
        cache.seen_votes[set_id] = int(set_state.votes.sum())
        cache.seen_phase[set_id] = set_state.phase(spec.warmup_votes_per_pair)


def set_votes(session: Session, active_set: ActiveSet) -> tuple[np.ndarray, np.ndarray]:
    """The set's votes as item indices: ``(winners, losers)``."""
    index = {stimulus: k for k, stimulus in enumerate(active_set.items)}
    rows = session.connection().execute(_SET_VOTES, {"set_id": active_set.set_id}).all()
    winners = np.fromiter((index[w] for w, _, _ in rows), dtype=np.int64, count=len(rows))
    losers = np.fromiter((index[b if w == a else a] for w, a, b in rows), dtype=np.int64, count=len(rows))
    return winners, losers


def make_selection(session: Session, study, spec, active_set: ActiveSet, state: SetState,
                   moment: dt.datetime, previous: Selection | None = None) -> Selection:
    """A set's :class:`Selection` from its votes: the batch of :func:`analysis.active.plan_batch`
    (pairs with reserved trials or at their cap left out), then every other pair by its value
    (:func:`analysis.active.pair_values`), with the batch's expected precision gain beside that of
    as many pairs drawn at random from the open ones."""
    from analysis import active

    winners, losers = set_votes(session, active_set)
    n_items, pairs = len(active_set.items), active_set.pairs
    open_rows = np.flatnonzero(state.handed_out < spec.votes_per_pair)
    rng = np.random.default_rng([study.seed, active_set.set_id, len(winners)])
    planned = active.plan_batch(n_items, winners, losers, min(batch_size(n_items), len(open_rows)), rng=rng,
                                candidates=pairs[open_rows] if len(open_rows) else None,
                                exclude=pairs[state.reserved > 0],
                                init=None if previous is None else previous.mean)
    position = {(int(min(i, j)), int(max(i, j))): k for k, (i, j) in enumerate(pairs)}
    in_batch = list(dict.fromkeys(position[(int(i), int(j))] for i, j in planned.pairs)) if len(open_rows) else []
    values = active.pair_values(planned.posterior, pairs)
    rest = np.setdiff1d(np.arange(len(pairs)), in_batch)
    rest = rest[np.lexsort((rng.random(len(rest)), -values[rest]))]
    rank = np.empty(len(pairs), np.int64)
    rank[np.array(in_batch + list(rest), dtype=np.int64)] = np.arange(len(pairs))
    gain = random_gain = None
    if in_batch and planned.gain is not None:
        gain = planned.gain.percent
        drawn = pairs[rng.choice(open_rows, size=len(in_batch), replace=False)]
        random_gain = active.expected_precision_gain(planned.posterior, drawn).percent
    return Selection(rank, state.handed_out.copy(), int(state.votes.sum()), moment, len(in_batch),
                     planned.posterior.mean, gain, random_gain)


# ---------------------------------------------------------------- choosing a page's pairs

def _eligible(active_set: ActiveSet, state: SetState, seen: set[int], spec) -> np.ndarray:
    """The rows of the set's pairs this worker may be given now: unseen, below the cap."""
    unseen = np.fromiter((int(p) not in seen for p in active_set.pair_ids), dtype=bool, count=len(active_set.pair_ids))
    return np.flatnonzero(unseen & (state.handed_out < spec.votes_per_pair))


def _ordered(rows: np.ndarray, state: SetState, selection: Selection | None, spec,
             rng: np.random.Generator) -> np.ndarray:
    """``rows`` in the order the set wants them given: the warm-up's pairs first (neediest first, as
    in the regular design), then the selection's (a pair given since the selection was made behind
    those that were not; without a selection in this process yet, the fewest votes first).

    A set whose warm-up is nearly handed out may so fill the rest of a page with chosen pairs: pages
    stay full while the study has budget left.
    """
    warmup = state.warmup_left(spec.warmup_votes_per_pair)[rows]
    ties = rng.random(len(rows))
    if selection is None:
        after = state.handed_out[rows]
    else:
        after = np.maximum(state.handed_out[rows] - selection.baseline[rows], 0) * len(selection.rank) + selection.rank[rows]
    return rows[np.lexsort((ties, after, -warmup))]


def choose_pairs(session: Session, study, worker_id: int, n: int, spec, sets: dict[int, ActiveSet],
                 rng: np.random.Generator, exclude: frozenset[int] = frozenset()) -> list[int]:
    """Up to ``n`` pair IDs for a worker's next page (the caller holds the study's allocation lock), none of
    ``exclude`` (the page's gold trials' pairs).

    Each set offers its pairs in its order (:func:`_ordered`), at most its unspent budget; the page
    takes the warm-up's pairs of every set first, then the others, one pair of each set in turn (the
    sets in random order), so pages mix the sets.
    """
    state = read_state(session, study.id, sets)
    cache = _selections(session, study.id)
    _remember(cache, state, spec)
    seen = set(session.connection().execute(_SEEN_BY_WORKER, {"worker_id": worker_id}).scalars()) | exclude
    warmup_offers: list[list[int]] = []  # per set: its warm-up's pairs, then (below) its other pairs
    other_offers: list[list[int]] = []
    for set_id in sorted(sets):
        active_set, set_state = sets[set_id], state[set_id]
        room = set_state.budget - int(set_state.handed_out.sum())
        rows = _eligible(active_set, set_state, seen, spec)
        rows = _ordered(rows, set_state, cache.selections.get(set_id), spec, rng)[:max(0, min(room, n))]
        warm = set_state.warmup_left(spec.warmup_votes_per_pair)[rows] > 0
        warmup_offers.append([int(p) for p in active_set.pair_ids[rows[warm]]])
        other_offers.append([int(p) for p in active_set.pair_ids[rows[~warm]]])
    # Every set's warm-up before any set's chosen pairs; within each, one pair of each set in turn.
    chosen: list[int] = []
    order = rng.permutation(len(warmup_offers))
    for offers in (warmup_offers, other_offers):
        for turn in range(n):
            for k in order:
                if turn < len(offers[k]) and len(chosen) < n:
                    chosen.append(offers[k][turn])
    return chosen


def work_left(session: Session, study, worker_id: int, spec, sets: dict[int, ActiveSet]) -> bool:
    """Whether :func:`choose_pairs` would give this worker a pair now."""
    state = read_state(session, study.id, sets)
    seen = set(session.connection().execute(_SEEN_BY_WORKER, {"worker_id": worker_id}).scalars())
    for set_id, active_set in sets.items():
        set_state = state[set_id]
        if set_state.budget - int(set_state.handed_out.sum()) > 0 and len(_eligible(active_set, set_state, seen, spec)):
            return True
    return False


# ---------------------------------------------------------------- the dashboard

REGULAR_DESIGN = {"sampling": "regular", "label": "random regular design", "phase": None}
"""The dashboard's design of a study with regular sampling."""


def design_summary(session: Session, study, spec, sets: dict[int, ActiveSet]) -> dict[str, Any]:
    """What the dashboard shows of the design: the sampling, each phase's number of sets, and the
    precision expected from the next batches.

    ``expected_gain``: over the sets in their active phase with a selection, the mean relative
    increase of scale precision (1 / variance of the score differences, in percent,
    :class:`analysis.active.PrecisionGain`) expected from their next batch (``batch_votes`` votes
    in all), and ``random_gain`` the same for as many pairs drawn at random; None in the warm-up.
    """
    if spec.sampling != "active":
        return dict(REGULAR_DESIGN)
    state = read_state(session, study.id, sets)
    cache = _selections(session, study.id)
    _remember(cache, state, spec)
    refresh_selections(session, study, spec, sets)  # a process that hands out no pages has none yet
    phases = {set_id: s.phase(spec.warmup_votes_per_pair) for set_id, s in state.items()}
    chosen = [s for set_id, s in cache.selections.items()
              if phases.get(set_id) == ACTIVE and s.gain_percent is not None]
    counts = {phase: sum(p == phase for p in phases.values()) for phase in (WARMUP, ACTIVE, DONE)}
    overall = WARMUP if counts[WARMUP] else ACTIVE if counts[ACTIVE] else DONE
    return {"sampling": "active", "label": "active sampling", "phase": overall, "phases": counts,
            "warmup_votes_per_pair": spec.warmup_votes_per_pair,
            "expected_gain": float(np.mean([s.gain_percent for s in chosen])) if chosen else None,
            "random_gain": float(np.mean([s.random_gain_percent for s in chosen])) if chosen else None,
            "batch_votes": sum(s.batch for s in chosen)}
