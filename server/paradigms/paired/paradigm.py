"""Paired comparison: the worker's path through a study, as database transactions.

Stages of an assignment::

    consent -> instructions -> quiz -> trials <-> page_done -> completed
                                  \\-> disqualified (quiz failed: for good)
                                          trials -> stopped (hidden gold accuracy below the threshold)
    any of consent, instructions, quiz, page_done -> full (no work left for this worker before
                                                          min_pages; never paid, see Paradigm.no_work_left)

The study file, its spec and study creation are in :mod:`server.paradigms.paired.study`; the
shared lifecycle (entry, lock, completion, pages) in :mod:`server.paradigms.core`. Every function
runs inside the caller's session and leaves committing to it. Page allocation takes a per-study
advisory lock on PostgreSQL (SQLite serialises writers already), so two workers never take the
last open slot of a pair together.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from sqlalchemy import bindparam, case, func, insert, literal_column, select, text, update
from sqlalchemy.dialects.postgresql import aggregate_order_by
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ... import validation as check
from ...allocation import now, release_other_pages, reservation_end, reservation_end_at
from ...i18n import lazy_ngettext
from ...errors import ApiError, invalid, reject_unknown
from ...openapi import load_part
from ...models import Assignment, Page, Study, Worker, utcnow
from ...tokens import TokenClaims
from . import active as paired_active, export as paired_export, pilots as paired_pilots, study as paired_study
from ..core import (MAX_ROW_ID, UUID_PATTERN, AssignmentRow, NewPage, Paradigm, PayUnit, ResponseKind,
                   ResultsAnalysis, ResultsOptions, StudyExport, StudyRef, TimePrior, UrlFor, add_trials,
                   allocation_lock, as_object, check_replay, ended_error, follow_worker, ended_message_and_completion,
                   fixed_study_facts, move_to, new_page, open_trials, page_count, refused_after_the_end, seeded_rng,
                   spec_for, stop, stored_media, study_ref)
from ..paged import WORKER_TRIAL_PAGES, PageSteps, end_page, mark_page_done, paged_action, worker_trial_pages
from ..display import WindowRequirement
from ..media import parse_playback, state_media, stimulus_fields
from .window import PC_CHROME, pc_views
from .allocation import LAPSED_PER_PAIR, PAIR_ALLOCATION_LOCKS, RESERVED, hold_pairs, retire_lapsed_pages
from .models import GoldResult, Pair, Stimulus, StudySet, Trial, Vote
from .study import StudySpec
from ..stages import TERMINAL_STAGES, TURNED_AWAY, Stage

_trial, _pair, _page, _vote, _gold, _assignment, _worker, _set, _stimulus = (
    model.__table__ for model in (Trial, Pair, Page, Vote, GoldResult, Assignment, Worker, StudySet, Stimulus))

PAGE_STAGES = (Stage.QUIZ, Stage.TRIALS, Stage.PAGE_DONE)  # stages that show a page of trials
# Stages that take votes: those of a page. A vote sent after the end (stopped, disqualified, completed,
# full) is refused (core.ended_error), a replay of a stored one still answered "duplicate".
VOTING_STAGES = PAGE_STAGES
_ALLOCATION_LOCKS = PAIR_ALLOCATION_LOCKS  # advisory lock namespace of pair allocation (core.allocation_lock)


# ---------------------------------------------------------------- stage actions

def perform_action(session: Session, assignment: Assignment | AssignmentRow,
                   action: str) -> Assignment | AssignmentRow:
    """Move the (locked) assignment on (:func:`server.paradigms.paged.paged_action`): consent,
    instructions_done, continue (another page), finish.

    Returns the assignment after the action (:meth:`Paradigm.perform_action`). Given a row, the
    common steps are statements on it; the rare ones (finish, a worker stopped, no work left) load
    the ORM object and return it.
    """
    return paged_action(session, assignment, action, spec_for(session, assignment.study_id), _PAGE_STEPS)


# ---------------------------------------------------------------- the study's fixed layout

class SetLayout(NamedTuple):
    """What a page shows of one set besides the two candidates."""

    reference: str                  # full reference image
    reference_crops: tuple[str, ...]
    boxes: tuple[dict, ...]         # the crops' boxes, with display sizes
    width: int
    height: int


class StudyLayout(NamedTuple):
    """A study's pairs, stimuli and sets as plain values: they never change after the study is
    created, so each process reads them once (:func:`study_layout`) and builds pages from memory."""

    pairs: dict[int, tuple[int, int, int]]           # pair ID -> (set ID, stimulus A ID, stimulus B ID)
    # Pairs a gold trial may show (pair ID -> set ID, in ID order): real pairs with a known answer (a design pair
    # chosen as gold: its gold trials are trials of that pair) and the gold-only pairs of ``checks_only``.
    gold: dict[int, int]
    checks_only: frozenset[int]                      # gold pairs that are no real pair (Pair.is_gold)
    stimuli: dict[int, tuple[str, tuple[str, ...]]]  # stimulus ID -> (full image, crop images)
    sets: dict[int, SetLayout]


_LAYOUT_PAIRS = (select(_pair.c.id, _pair.c.set_id, _pair.c.stimulus_a_id, _pair.c.stimulus_b_id, _pair.c.is_gold,
                        _pair.c.gold_winner_id)
                 .join_from(_pair, _set, _pair.c.set_id == _set.c.id)
                 .where(_set.c.study_id == bindparam("study_id")).order_by(_pair.c.id))
_LAYOUT_STIMULI = (select(_stimulus.c.id, _stimulus.c.full, _stimulus.c.crops)
                   .join_from(_stimulus, _set, _stimulus.c.set_id == _set.c.id)
                   .where(_set.c.study_id == bindparam("study_id")))
_LAYOUT_SETS = select(_set.c.id, _set.c.reference, _set.c.crops, _set.c.image_width, _set.c.image_height).where(
    _set.c.study_id == bindparam("study_id"))


def study_layout(session: Session, study_id: int, pair_ids=()) -> StudyLayout:
    """The study's :class:`StudyLayout`, read once per process (again when it lacks one of ``pair_ids``)."""
    layouts = fixed_study_facts(session, "paired.layout")
    layout = layouts.get(study_id)
    if layout is None or any(pair_id not in layout.pairs for pair_id in pair_ids):
        connection = session.connection()
        params = {"study_id": study_id}
        pairs = connection.execute(_LAYOUT_PAIRS, params).all()
        layout = StudyLayout(
            pairs={row.id: (row.set_id, row.stimulus_a_id, row.stimulus_b_id) for row in pairs},
            gold={row.id: row.set_id for row in pairs if row.gold_winner_id is not None},
            checks_only=frozenset(row.id for row in pairs if row.is_gold),
            stimuli={row.id: (row.full, tuple((row.crops or {}).get("paths", ())))
                     for row in connection.execute(_LAYOUT_STIMULI, params)},
            sets={row.id: SetLayout(row.reference["full"], tuple(row.reference.get("crops", ())),
                                    tuple(row.crops.get("boxes", ())), row.image_width, row.image_height)
                  for row in connection.execute(_LAYOUT_SETS, params)})
        layouts[study_id] = layout
    return layout


# ---------------------------------------------------------------- allocation statements, built once

# How often the worker was shown each of the study's gold pairs, in any role (a design pair chosen as gold may
# have been one of the worker's real trials), and how often as gold.
_GOLD_SEEN = (select(_trial.c.pair_id, func.count(), func.count().filter(_trial.c.is_gold),
                     func.count().filter(_trial.c.is_quiz))
              .where(_trial.c.worker_id == bindparam("worker_id"),
                     _trial.c.pair_id.in_(bindparam("pair_ids", expanding=True)))
              .group_by(_trial.c.pair_id))
# Each gold pair now: whether it is a real pair with no vote left to give (its votes and reserved trials reach
# its target; a gold-only pair never is), and how many trials showed it in the study (every worker, every
# role, answered or not: what workers who pool their pages count), through the trial's pair index.
_GOLD_STATE = select(
    _pair.c.id,
    (~_pair.c.is_gold & (_pair.c.n_votes + _pair.c.n_held >= _pair.c.target_votes)).label("full"),
    select(func.count()).select_from(_trial).where(_trial.c.pair_id == _pair.c.id).scalar_subquery().label("shown"),
).where(_pair.c.id.in_(bindparam("pair_ids", expanding=True)))
_WORKER_STATUS = select(_worker.c.status, _worker.c.status_reason).where(_worker.c.id == bindparam("worker_id"))
# What a page start asks first, in one round trip: is the worker turned away, how many pages of
# trials did they get in the study, which index the assignment's next page has, and whether the
# worker has other assignments (other HITs) whose pages the new one must release.
_PAGE_START_FACTS = _WORKER_STATUS.add_columns(
    WORKER_TRIAL_PAGES.scalar_subquery(),
    select(func.count()).select_from(_page).where(_page.c.assignment_id == bindparam("assignment_id"))
    .scalar_subquery(),
    select(func.count()).select_from(_assignment).where(_assignment.c.worker_id == bindparam("worker_id"),
                                                        _assignment.c.id != bindparam("assignment_id"))
    .scalar_subquery())
_SEEN_BY_WORKER = select(_trial.c.pair_id).where(_trial.c.worker_id == bindparam("worker_id"),
                                                 _trial.c.pair_id.is_not(None))
_DEFICIT = _pair.c.target_votes - _pair.c.n_votes - RESERVED
_NEEDY_PAIRS = (select(_pair.c.id, _DEFICIT)
                .join_from(_pair, _set, _pair.c.set_id == _set.c.id)
                .outerjoin(LAPSED_PER_PAIR, LAPSED_PER_PAIR.c.pair_id == _pair.c.id)
                .where(_set.c.study_id == bindparam("study_id"), ~_pair.c.is_gold,
                       _pair.c.id.not_in(_SEEN_BY_WORKER), _DEFICIT > 0))
# Whether any pair is left for the worker: the same rule, stopping at the first pair (entering a
# study asks this of every new worker). The lapsed pages are counted from the held ones, which
# are few; a count per pair through the trials would read every trial of each full pair.
_ANY_PAIR_LEFT = _NEEDY_PAIRS.with_only_columns(_pair.c.id).limit(1)
# Both questions of work_left (the worker's pages of trials so far, whether any pair is left for them) in one
# round trip: entering a study and every page's end ask them.
_WORK_LEFT_FACTS = select(WORKER_TRIAL_PAGES.scalar_subquery(), _ANY_PAIR_LEFT.exists())
# The mean count (votes and held trials) of the study's real pairs that are gold pairs too (key True) and of the
# others (False).
_REAL_PAIR_LEVELS = (select(_pair.c.gold_winner_id.is_not(None), func.avg(_pair.c.n_votes + _pair.c.n_held))
                     .join_from(_pair, _set, _pair.c.set_id == _set.c.id)
                     .where(_set.c.study_id == bindparam("study_id"), ~_pair.c.is_gold)
                     .group_by(_pair.c.gold_winner_id.is_not(None)))
# PostgreSQL: the same pairs as two arrays in one row, in ID order. A study's hundreds of needy
# pairs as rows cost a page start more CPU in the driver and SQLAlchemy than all its other statements.
_NEEDY = _NEEDY_PAIRS.subquery()
_NEEDY_PAIR_ARRAYS = select(func.array_agg(aggregate_order_by(_NEEDY.c.id, _NEEDY.c.id)),
                            func.array_agg(aggregate_order_by(_NEEDY.c[1], _NEEDY.c.id)))


def _active_sets(session: Session, study_id: int) -> dict[int, paired_active.ActiveSet]:
    """An active study's sets as index arrays (:mod:`server.paradigms.paired.active`), from its layout."""
    layout = study_layout(session, study_id)
    return paired_active.active_sets(session, study_id, layout.pairs, layout.checks_only)


class GoldReserve(NamedTuple):
    """What a worker's later pages need of the gold pairs they have not seen (:func:`choose_pairs`)."""

    unseen: int     # gold pairs the worker has not seen in any role, after this page's gold trials
    per_page: int   # gold trials a page
    pages_left: int  # pages the worker may still start after this one ([pages] max_pages)


def _pick_gold(session: Session, study: Study | StudyRef, worker_id: int, n: int,
               rng: np.random.Generator) -> tuple[list[int], int]:
    """``n`` gold pairs for one of the worker's pages (the caller holds the study's allocation lock), and how
    many of the study's gold pairs the worker has not seen after them.

    A gold pair that comes back is a pattern that marks it as gold (real pairs never
    repeat for a worker), so every pick is one the worker has seen least often, in
    any role and any of their assignments: unseen ones while any remain. Then a real
    pair the worker did not meet in a quiz goes before one they did (the quiz tells
    whether each answer was right, so a quiz pair shown again as hidden gold could be
    answered from that answer, without looking). Then a real
    pair that still needs a vote goes before one whose votes and reserved trials reach
    its target (its gold trial is a vote of it, and would be one too many). Ties go to
    the gold pair shown least in the whole study, counting every trial that showed its
    two files (issue 38: how often a pair recurs across workers separated gold at AUC
    0.805; real pairs are filled evenly, and a design pair's gold trials count toward
    its target, so gold pairs recur as real ones do), then to the set the worker was
    shown fewest gold trials of (spreading gold over the sets; gold pairs met as real
    trials do not count there: a third of a scene's design pairs may be gold pairs, and
    real trials meet many), then at random.
    """
    gold = study_layout(session, study.id).gold
    if not gold or n == 0:
        return [], 0
    connection = session.connection()
    ids = list(gold)
    seen = {row[0]: row for row in connection.execute(_GOLD_SEEN, {"worker_id": worker_id, "pair_ids": ids})}
    state = {row.id: row for row in connection.execute(_GOLD_STATE, {"pair_ids": ids})}
    times = {pair_id: int(seen[pair_id][1]) if pair_id in seen else 0 for pair_id in gold}
    quizzed = {pair_id: pair_id in seen and int(seen[pair_id][3]) > 0 for pair_id in gold}
    full = {pair_id: bool(state[pair_id].full) for pair_id in gold}
    overall = {pair_id: int(state[pair_id].shown) for pair_id in gold}
    per_set = dict.fromkeys(gold.values(), 0)  # gold trials the worker was shown of each set
    for pair_id, row in seen.items():
        per_set[gold[pair_id]] += int(row[2])
    tie_break = dict(zip(gold, rng.random(len(gold))))
    picks: list[int] = []
    for _ in range(n):
        pick = min(gold, key=lambda p: (times[p], quizzed[p], full[p], overall[p], per_set[gold[p]], tie_break[p]))
        picks.append(int(pick))
        times[pick] += 1
        overall[pick] += 1
        per_set[gold[pick]] += 1
    return picks, sum(count == 0 for count in times.values())


# PostgreSQL: a page's trials in one INSERT from arrays, its real pairs counted as held in the same
# statement (an executemany sent a statement per trial, each one a round of parsing and executing).
_STORE_PAGE_TRIALS_POSTGRESQL = text("""
WITH stored AS (
    INSERT INTO trial (page_id, assignment_id, worker_id, kind, position, pair_id, left_is_a, is_gold, is_quiz,
                       answered)
    SELECT :page_id, :assignment_id, :worker_id, 'pc', CAST(t.position AS INTEGER) - 1, t.pair_id, t.left_is_a,
           t.is_gold, :is_quiz, FALSE
    FROM unnest(CAST(:pair_ids AS INTEGER[]), CAST(:left_is_a AS BOOLEAN[]), CAST(:is_gold AS BOOLEAN[]))
         WITH ORDINALITY AS t(pair_id, left_is_a, is_gold, position)
    RETURNING trial.id
), held AS (
    UPDATE pair SET n_held = pair.n_held + 1 WHERE pair.id = ANY(CAST(:held_pair_ids AS INTEGER[]))
)
SELECT count(*) FROM stored
""")


# PostgreSQL: a page of trials started in one statement (the page, its trials, its real pairs counted as held,
# and the assignment row moved to stage trials when asked): under the study's allocation lock, each round
# trip of the page start is one every other page start of the study waits for.
_START_TRIALS_PAGE_POSTGRESQL = text("""
WITH new_page AS (
    INSERT INTO page (assignment_id, index, kind, created_at, reserved_until, held)
    VALUES (:assignment_id, :index, 'trials', CAST(:created_at AS TIMESTAMP WITH TIME ZONE),
            CAST(:reserved_until AS TIMESTAMP WITH TIME ZONE), CAST(:held AS BOOLEAN))
    RETURNING page.id
), stored AS (
    INSERT INTO trial (page_id, assignment_id, worker_id, kind, position, pair_id, left_is_a, is_gold, is_quiz,
                       answered)
    SELECT new_page.id, :assignment_id, :worker_id, 'pc', CAST(t.position AS INTEGER) - 1, t.pair_id, t.left_is_a,
           t.is_gold, FALSE, FALSE
    FROM new_page, unnest(CAST(:pair_ids AS INTEGER[]), CAST(:left_is_a AS BOOLEAN[]), CAST(:is_gold AS BOOLEAN[]))
         WITH ORDINALITY AS t(pair_id, left_is_a, is_gold, position)
    RETURNING trial.id, trial.position, trial.answered, trial.pair_id, trial.left_is_a
), held AS (
    UPDATE pair SET n_held = pair.n_held + 1 WHERE pair.id = ANY(CAST(:held_pair_ids AS INTEGER[]))
), moved AS (
    UPDATE assignment SET stage = 'trials' WHERE assignment.id = :assignment_id AND CAST(:move AS BOOLEAN)
)
SELECT CAST(:index AS INTEGER) AS index, 'trials' AS kind, stored.id, stored.position, stored.answered, stored.pair_id,
       stored.left_is_a
FROM stored ORDER BY stored.position
""")
# The key of session.info under which a page start leaves its page's rows (those of _LATEST_PAGE_TRIALS) for
# the State the same request answers with: read from the statement that stored them, not queried again.
_NEW_PAGE_ROWS = "paired.new_page_rows"


def _pair_trial_rows(pair_ids: list[int], gold_ids: list[int], page_rng: np.random.Generator,
                     is_quiz: bool) -> list[dict[str, Any]]:
    """A page's trials: real and gold pairs in random order, each on a random side."""
    entries = [(pid, False) for pid in pair_ids] + [(pid, True) for pid in gold_ids]
    order = page_rng.permutation(len(entries))
    sides = page_rng.random(len(entries)) < 0.5
    rows = []
    for position, k in enumerate(order):
        pair_id, is_gold = entries[k]
        rows.append({"pair_id": int(pair_id), "left_is_a": bool(sides[position]), "is_gold": is_gold or is_quiz,
                     "is_quiz": is_quiz})
    return rows


def _add_pair_trials(session: Session, page: NewPage, assignment: Assignment | AssignmentRow, pair_ids: list[int],
                     gold_ids: list[int], page_rng: np.random.Generator, is_quiz: bool,
                     held_ids: list[int] | None = None) -> None:
    """The page's trials (:func:`_pair_trial_rows`); ``held_ids``, the page's real pairs (those of its gold
    trials included), are counted in their ``n_held`` (:func:`server.paradigms.paired.allocation.hold_pairs`)."""
    rows = _pair_trial_rows(pair_ids, gold_ids, page_rng, is_quiz)
    connection = session.connection()
    if connection.dialect.name == "postgresql":
        connection.execute(_STORE_PAGE_TRIALS_POSTGRESQL, {
            "page_id": page.id, "assignment_id": assignment.id, "worker_id": assignment.worker_id,
            "is_quiz": is_quiz, "pair_ids": [row["pair_id"] for row in rows],
            "left_is_a": [row["left_is_a"] for row in rows], "is_gold": [row["is_gold"] for row in rows],
            "held_pair_ids": sorted(int(pid) for pid in held_ids or ())})
        return
    add_trials(session, Trial, page, assignment, rows)
    if held_ids:
        hold_pairs(session, held_ids)


def _allocate_quiz_page(session: Session, assignment: Assignment | AssignmentRow, spec: StudySpec) -> None:
    study = study_ref(session, assignment.study_id)
    page_index = page_count(session, assignment.id)
    gold, _ = _pick_gold(session, study, assignment.worker_id, spec.quiz_size,
                         seeded_rng(study, assignment, page_index))
    if not gold:
        raise ApiError(409, "wrong_stage", "this study has no gold pairs for its quiz")
    page = new_page(session, assignment, Stage.QUIZ, page_index)
    _add_pair_trials(session, page, assignment, [], gold, seeded_rng(study, assignment, 10_000 + page.index),
                     is_quiz=True)


def _start_trials_page(session: Session, assignment: Assignment | AssignmentRow,
                       spec: StudySpec) -> Assignment | AssignmentRow:
    """Give the worker a new page, or (:meth:`Paradigm.no_work_left`) complete the assignment or tell
    the worker the study is full when no pair needs votes any more. Returns the assignment after
    (a row stays a row on a new page; the object, loaded, otherwise)."""
    study = study_ref(session, assignment.study_id)
    status, reason, trial_pages, page_index, other_assignments = session.connection().execute(
        _PAGE_START_FACTS, {"worker_id": assignment.worker_id, "assignment_id": assignment.id}).one()
    if status in TURNED_AWAY:  # stopped in another of the worker's HITs
        assignment = as_object(session, assignment)
        follow_worker(assignment)
        return assignment
    if trial_pages >= spec.max_pages:
        return _no_work_left(session, assignment, spec)
    if spec.sampling == "active":  # selections are made before the lock, never under it
        paired_active.refresh_selections(session, study, spec, _active_sets(session, study.id))
    allocation_lock(session, study, _ALLOCATION_LOCKS)
    retire_lapsed_pages(session, study.id)
    page_rng = seeded_rng(study, assignment, page_index)
    # The checks first, among the pairs the worker has not seen; the real pairs among the rest (a gold pair may
    # be a design pair: never on one page twice, and its unseen gold pairs kept for the worker's later pages).
    gold_ids, unseen = _pick_gold(session, study, assignment.worker_id, spec.gold_per_page, page_rng)
    reserve = GoldReserve(unseen, spec.gold_per_page, spec.max_pages - trial_pages - 1)
    pair_ids = choose_pairs(session, study, assignment.worker_id, spec.pairs_per_page - spec.gold_per_page, spec,
                            page_rng, exclude=frozenset(gold_ids), reserve=reserve)
    if not pair_ids:
        return _no_work_left(session, assignment, spec)
    if other_assignments:  # one reserved page per worker
        release_other_pages(session, assignment.worker_id, assignment.id)
    # A pilot's page reserves nothing and its votes fill no target (server/pilot.py); its earlier pages'
    # pairs are recounted, in case a vote was counted before the worker was marked.
    real = not assignment.pilot
    if not real:
        paired_pilots.recount_assignment_pairs(session, study.id, assignment.id)
    reserved_until = reservation_end(session, spec) if real else None
    # A gold trial of a real pair is a vote of that pair on its way, held like the page's real trials.
    checks_only = study_layout(session, study.id).checks_only
    held = [*pair_ids, *(pair_id for pair_id in gold_ids if pair_id not in checks_only)] if real else []
    connection = session.connection()
    if connection.dialect.name == "postgresql":
        rows = _pair_trial_rows(pair_ids, gold_ids, page_rng, is_quiz=False)
        row_moves = not isinstance(assignment, Assignment)  # an ORM object's stage is written at commit
        stored = connection.execute(_START_TRIALS_PAGE_POSTGRESQL, {
            "assignment_id": assignment.id, "worker_id": assignment.worker_id, "index": page_index,
            "created_at": now(session), "reserved_until": reserved_until, "held": real,
            "pair_ids": [row["pair_id"] for row in rows], "left_is_a": [row["left_is_a"] for row in rows],
            "is_gold": [row["is_gold"] for row in rows],
            "held_pair_ids": sorted(int(pid) for pid in held), "move": row_moves}).all()
        session.info[_NEW_PAGE_ROWS] = (assignment.id, stored)
        if row_moves:
            return assignment._replace(stage=Stage.TRIALS.value)
        return move_to(session, assignment, Stage.TRIALS)
    page = new_page(session, assignment, Stage.TRIALS, page_index, reserved_until, held=real)
    _add_pair_trials(session, page, assignment, pair_ids, gold_ids, page_rng, is_quiz=False, held_ids=held)
    return move_to(session, assignment, Stage.TRIALS)


def _no_work_left(session: Session, assignment: Assignment | AssignmentRow, spec: StudySpec) -> Assignment:
    assignment = as_object(session, assignment)
    PARADIGM.no_work_left(assignment, spec)
    return assignment


def choose_pairs(session: Session, study: Study | StudyRef, worker_id: int, n: int, spec: StudySpec,
                 rng: np.random.Generator, exclude: frozenset[int] = frozenset(),
                 reserve: GoldReserve | None = None) -> list[int]:
    """Up to ``n`` pairs that still need votes and that this worker has never seen, neediest first
    (``exclude``: pairs already on the page, its gold trials').

    A pair's filled count is its votes plus the trials showing it that are still reserved
    (unanswered, on a page whose reservation has not lapsed: ``Pair.n_held`` less the lapsed pages'
    trials, see :mod:`server.allocation`), so
    concurrent workers share out the remaining votes instead of all taking the same pairs, and
    pages abandoned for a few minutes give theirs back. A real pair chosen as gold gets votes from its
    gold trials too, which come whether it needs them or not: while such pairs are on average as filled
    as the others or more (votes and held trials), they go after the others among pairs as needy, so
    that they are not shown more often than real pairs in the end (issue 38: how often a pair recurs
    across workers told their gold trials at AUC 0.772 on the demo, 6 workers x 3 pages, when they took
    ties like any pair; always last, they fell behind the others: 0.645 at 12 x 3; with this rule 0.500
    and 0.522). Remaining ties break at random, which mixes the sets.

    A gold pair seen as a real trial is one the worker's gold trials can no longer show without a repeat,
    which would mark it as gold: with ``reserve``, the page takes gold pairs as real trials only while
    the worker keeps unseen ones for the gold trials of every page they may still do (as many as the
    other pairs left to them fill, at most ``reserve.pages_left``).
    Active sampling chooses by its own rules (:func:`server.paradigms.paired.active.choose_pairs`).
    """
    layout = study_layout(session, study.id)
    if spec.sampling == "active":
        if reserve is not None and reserve.unseen <= reserve.per_page * reserve.pages_left:
            exclude = exclude | frozenset(layout.gold)  # its own order: no share of gold pairs to count out
        return paired_active.choose_pairs(session, study, worker_id, n, spec, _active_sets(session, study.id), rng,
                                          exclude)
    connection = session.connection()
    params = {"study_id": study.id, "worker_id": worker_id, "now": now(session)}
    if connection.dialect.name == "postgresql":
        found_ids, found_deficits = connection.execute(_NEEDY_PAIR_ARRAYS, params).one()
        if not found_ids:
            return []
        ids, deficit = np.array(found_ids, dtype=np.int64), np.array(found_deficits, dtype=np.int64)
    else:
        rows = connection.execute(_NEEDY_PAIRS, params).all()
        if not rows:
            return []
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        deficit = np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows))
        # The database returns rows in no fixed order (it follows where updated rows were written), so
        # the tie-breaking draws go to the pairs in ID order: the same seed and votes give the same page.
        by_id = np.argsort(ids)
        ids, deficit = ids[by_id], deficit[by_id]
    if len(layout.gold) == len(layout.checks_only):  # no real pair is a gold pair
        order = np.lexsort((rng.random(len(ids)), -deficit))
        chosen = (int(i) for i in ids[order] if int(i) not in exclude)
        return [pair_id for _, pair_id in zip(range(n), chosen)]
    in_gold = np.isin(ids, np.fromiter(layout.gold, dtype=np.int64, count=len(layout.gold)))
    level = {bool(k): float(v) for k, v in connection.execute(_REAL_PAIR_LEVELS, {"study_id": study.id})}
    later = in_gold if level.get(True, 0.0) >= level.get(False, 0.0) else np.zeros(len(ids), bool)
    order = np.lexsort((rng.random(len(ids)), later, -deficit))
    allowance = len(ids)
    if reserve is not None:
        others_left = max(0, int((~in_gold).sum()) - n)  # the other pairs left after this page, at most
        pages = min(reserve.pages_left, -(-others_left // n) if n else 0)
        allowance = max(0, reserve.unseen - reserve.per_page * pages)
    chosen: list[int] = []
    for k in order:
        pair_id = int(ids[k])
        if pair_id in exclude or (in_gold[k] and allowance <= 0):
            continue
        allowance -= bool(in_gold[k])
        chosen.append(pair_id)
        if len(chosen) == n:
            break
    return chosen


# ---------------------------------------------------------------- votes

def parse_vote(payload: Any) -> dict[str, Any]:
    """Validate a vote body (see the OpenAPI file); raise a 400 naming the first problem. ``playback`` is a
    video trial's playback log (:func:`server.paradigms.media.parse_playback`)."""
    if not isinstance(payload, dict):
        raise invalid("the body must be a JSON object")
    reject_unknown(payload, ("vote_id", "trial_id", "choice", "rt_ms", "input", "client_time", "window", "playback"))
    vote_id = payload.get("vote_id")
    if not isinstance(vote_id, str) or not UUID_PATTERN.fullmatch(vote_id):
        raise invalid("vote_id must be a UUID made by the browser")
    trial_id = payload.get("trial_id")
    if not isinstance(trial_id, str) or not (trial_id.isascii() and trial_id.isdigit()) or len(trial_id) > 18:
        raise invalid("trial_id must be the trial's ID string")
    if payload.get("choice") not in ("left", "right"):
        raise invalid("choice must be 'left' or 'right'")
    rt = check.number(payload.get("rt_ms"), "rt_ms (milliseconds)", *check.RT_MS)
    if payload.get("input", "mouse") not in ("mouse", "keyboard", "touch"):
        raise invalid("input must be 'mouse', 'keyboard' or 'touch'")
    client_time = check.client_time(payload.get("client_time"))
    window = check.size_object(payload.get("window"), "window", with_dpr=True)

    def fail(message: str):
        raise invalid(message)

    return {"vote_id": vote_id.lower(), "trial_id": int(trial_id), "chose_left": payload["choice"] == "left",
            "rt_ms": rt, "input": payload.get("input", "mouse"), "client_time": client_time,
            "window_width": window.get("width"), "window_height": window.get("height"),
            "device_pixel_ratio": window.get("dpr"), "playback": parse_playback(payload.get("playback"), fail)}


# ---------------------------------------------------------------- the vote statements, built once
#
# A vote is the hot path of a study, so its SQL is a handful of Core statements built at import
# (SQLAlchemy compiles each once per dialect and caches it; building them per request cost more CPU
# than the database spent running them), executed on the session's connection with plain rows back:
# no ORM objects, no unit of work. The assignment is already locked (AssignmentRow), so these
# statements are the only writers of its trials and pages. On PostgreSQL, claiming the trial,
# counting the pair's vote, inserting the vote and renewing the page are one statement
# (_STORE_VOTE_POSTGRESQL); on SQLite, which has no data-modifying CTEs, they are the statements
# below, in that order (see _store_vote).

# The updated row, named from inside a subquery of RETURNING. Spelled out: SQLAlchemy's SQLite
# compiler drops table names in RETURNING, subqueries included, and an unqualified "id" there would
# mean the subquery's own table.
_UPDATED_TRIAL_PAIR = literal_column("trial.pair_id")
_UPDATED_PAGE_ID = literal_column("page.id")


def _of_pair(column, name: str):
    """One column of the trial's pair, as a subquery correlated with the updated trial (SQLite's
    RETURNING may name only the updated table, but may hold subqueries)."""
    return select(column).where(_pair.c.id == _UPDATED_TRIAL_PAIR).scalar_subquery().label(name)


_UPDATED_TRIAL_PAGE = literal_column("trial.page_id")
_PAGE_HELD = select(_page.c.held).where(_page.c.id == _UPDATED_TRIAL_PAGE).scalar_subquery().label("page_held")


# Claim an open trial of the assignment and return what the vote needs of it and of its pair.
# No row: the trial is answered already, or not the assignment's (see _vote_for_unclaimed_trial).
_CLAIM_TRIAL = (
    update(_trial)
    .where(_trial.c.id == bindparam("trial_id"), _trial.c.assignment_id == bindparam("owner_id"),
           ~_trial.c.answered)
    .values(answered=True)
    .returning(_trial.c.id.label("trial_id"), _trial.c.page_id, _trial.c.left_is_a, _trial.c.is_gold,
               _trial.c.is_quiz, _trial.c.pair_id, _of_pair(_pair.c.stimulus_a_id, "stimulus_a_id"),
               _of_pair(_pair.c.stimulus_b_id, "stimulus_b_id"), _of_pair(_pair.c.is_gold, "pair_is_gold"),
               _of_pair(_pair.c.gold_winner_id, "gold_winner_id"), _PAGE_HELD))
# The same columns, read without claiming: a vote whose trial could not be claimed (replay or refusal).
_VOTE_TRIAL = (select(_trial.c.id.label("trial_id"), _trial.c.page_id, _trial.c.left_is_a, _trial.c.is_gold,
                      _trial.c.is_quiz, _trial.c.pair_id, _pair.c.stimulus_a_id, _pair.c.stimulus_b_id,
                      _pair.c.is_gold.label("pair_is_gold"), _pair.c.gold_winner_id, _trial.c.answered)
               .join_from(_trial, _pair, _trial.c.pair_id == _pair.c.id)
               .where(_trial.c.id == bindparam("trial_id"), _trial.c.assignment_id == bindparam("assignment_id")))
# A real pair's vote: one more stored, one fewer held when the trial's page is held (allocation.py).
_COUNT_PAIR_VOTE = (update(_pair).where(_pair.c.id == bindparam("pair_id"))
                    .values(n_votes=_pair.c.n_votes + 1, n_held=_pair.c.n_held - bindparam("unheld")))
_INSERT_VOTE = insert(_vote)
_INSERT_GOLD_VOTE = insert(_vote).returning(_vote.c.id)
_INSERT_GOLD_RESULT = insert(_gold)
# Renew the page's reservation (when it has one: quiz pages have none) and count its open trials,
# in one statement: the count sees the trial claimed earlier in this transaction.
_RENEW_PAGE_COUNT_OPEN = (
    update(_page).where(_page.c.id == bindparam("page_id"))
    .values(reserved_until=case((_page.c.reserved_until.is_not(None),
                                 bindparam("until", type_=_page.c.reserved_until.type)), else_=None))
    .returning(select(func.count()).select_from(_trial)
               .where(_trial.c.page_id == _UPDATED_PAGE_ID, ~_trial.c.answered).scalar_subquery()))
_SCORE = (func.coalesce(func.sum(case((_gold.c.correct, 1), else_=0)), 0), func.count())
_QUIZ_SCORE = select(*_SCORE).where(_gold.c.assignment_id == bindparam("assignment_id"), _gold.c.is_quiz)
_HIDDEN_GOLD_SCORE = select(*_SCORE).where(_gold.c.worker_id == bindparam("worker_id"), ~_gold.c.is_quiz)
_VOTE_BY_CLIENT_ID = (select(_vote.c.trial_id, _vote.c.chose_left, _vote.c.winner_id)
                      .where(_vote.c.client_vote_id == bindparam("vote_id")))


# ---------------------------------------------------------------- votes

class StoredVote(NamedTuple):
    """What the rules after a vote and its answer need of a stored vote and its trial."""

    trial_id: int
    page_id: int
    is_gold: bool
    is_quiz: bool
    gold_winner_id: int | None
    winner_id: int
    open_left: int  # unanswered trials left on the page


# PostgreSQL stores a vote in one statement (one round trip): data-modifying CTEs claim the trial,
# count the pair's vote, insert the vote and its gold result, and renew the page's reservation. All
# of them see the snapshot taken when the statement starts (after the assignment lock), in which the
# claimed trial is still open: hence the "- 1" of open_left. No row back: nothing was changed, the
# trial could not be claimed. Casts name the types PostgreSQL cannot infer in INSERT ... SELECT.
_STORE_VOTE_POSTGRESQL = text("""
WITH claimed AS (
    UPDATE trial SET answered = TRUE
    WHERE trial.id = :trial_id AND trial.assignment_id = :assignment_id AND NOT trial.answered
    RETURNING trial.id, trial.page_id, trial.pair_id, trial.left_is_a, trial.is_gold, trial.is_quiz
), voted AS (
    SELECT claimed.*, pair.is_gold AS pair_is_gold, pair.gold_winner_id,
           CASE WHEN claimed.left_is_a = :chose_left THEN pair.stimulus_a_id ELSE pair.stimulus_b_id END AS winner_id
    FROM claimed JOIN pair ON pair.id = claimed.pair_id
), counted AS (
    UPDATE pair SET n_votes = pair.n_votes + 1, n_held = pair.n_held - CASE WHEN page.held THEN 1 ELSE 0 END
    FROM voted JOIN page ON page.id = voted.page_id
    WHERE pair.id = voted.pair_id AND NOT voted.pair_is_gold AND CAST(:count_pair AS BOOLEAN)
), stored AS (
    INSERT INTO vote (client_vote_id, trial_id, assignment_id, worker_id, study_id, pair_id, winner_id, chose_left,
                      rt_ms, input, client_time, window_width, window_height, device_pixel_ratio, created_at)
    SELECT CAST(:client_vote_id AS VARCHAR), voted.id, :assignment_id, :worker_id, :study_id, voted.pair_id,
           voted.winner_id, :chose_left, CAST(:rt_ms AS DOUBLE PRECISION), CAST(:input AS VARCHAR),
           CAST(:client_time AS VARCHAR), CAST(:window_width AS INTEGER), CAST(:window_height AS INTEGER),
           CAST(:device_pixel_ratio AS DOUBLE PRECISION), CAST(:created_at AS TIMESTAMP WITH TIME ZONE)
    FROM voted
    RETURNING vote.id
), scored AS (
    INSERT INTO gold_result (vote_id, worker_id, assignment_id, is_quiz, correct)
    SELECT stored.id, :worker_id, :assignment_id, voted.is_quiz, COALESCE(voted.winner_id = voted.gold_winner_id, FALSE)
    FROM stored CROSS JOIN voted WHERE voted.is_gold
), renewed AS (
    UPDATE page SET reserved_until = CAST(:until AS TIMESTAMP WITH TIME ZONE) FROM voted
    WHERE page.id = voted.page_id AND page.reserved_until IS NOT NULL
)
SELECT voted.id, voted.page_id, voted.is_gold, voted.is_quiz, voted.gold_winner_id, voted.winner_id,
       (SELECT count(*) FROM trial WHERE trial.page_id = voted.page_id AND NOT trial.answered) - 1
FROM voted
""")
_VOTE_COLUMNS = ("client_vote_id", "trial_id", "assignment_id", "worker_id", "study_id", "chose_left", "rt_ms", "input",
                 "client_time", "window_width", "window_height", "device_pixel_ratio", "created_at")


def record_vote(session: Session, assignment: AssignmentRow, payload: Any) -> tuple[int, dict[str, Any]]:
    """Store one vote; return ``(HTTP status, body)``. A retry of a stored vote returns 200 "duplicate".

    ``assignment`` must be locked (:func:`~server.paradigms.core.lock_assignment_row`): votes of one
    assignment are then applied one at a time, so the end of a page or of the quiz is seen exactly
    once. After the lock, a vote is one statement on PostgreSQL and four on SQLite (see
    :func:`_store_vote`); the rules after it add a statement or two when they apply.
    """
    vote = parse_vote(payload)
    if vote["trial_id"] > MAX_ROW_ID:  # beyond Trial.id's INTEGER: no such trial (PostgreSQL would raise)
        raise ApiError(404, "unknown_trial", "this trial is not part of your assignment")
    if assignment.stage not in VOTING_STAGES:
        return _vote_for_unclaimed_trial(session, assignment, vote)
    spec = spec_for(session, assignment.study_id)
    row = {"client_vote_id": vote["vote_id"], "trial_id": vote["trial_id"], "assignment_id": assignment.id,
           "worker_id": assignment.worker_id, "study_id": assignment.study_id, "chose_left": vote["chose_left"],
           "rt_ms": vote["rt_ms"], "input": vote["input"], "client_time": vote["client_time"],
           "window_width": vote["window_width"], "window_height": vote["window_height"],
           "device_pixel_ratio": vote["device_pixel_ratio"], "created_at": utcnow(), "playback": vote["playback"]}
    try:
        stored = _store_vote(session.connection(), row, reservation_end(session, spec), count=not assignment.pilot)
    except IntegrityError:
        # Only the unique client_vote_id can clash here (the trial is ours and locked): the browser
        # reused a vote ID for another trial. The caller rolls the whole request back.
        raise ApiError(409, "conflict", "this vote_id was already used for a different response") from None
    if stored is None:
        return _vote_for_unclaimed_trial(session, assignment, vote)
    stage = _after_vote(session, assignment, stored, spec)
    if assignment.pilot and stored.open_left == 0:
        # A participant marked as a pilot while on this page may have had votes counted by the one-statement
        # path (server/pilot.py): their pairs are counted again from the votes that count.
        paired_pilots.recount_assignment_pairs(session, assignment.study_id, assignment.id)
    return 201, _vote_body(stage, stored, stored.winner_id, vote["vote_id"], "stored", stored.open_left)


# PostgreSQL's one-statement vote: the function perceptlab_paired_vote (its text: vote.sql beside this
# module, installed by a migration that reads it) locks the assignment, checks the token's nonce and stores
# the common votes with the rules of record_vote and _after_vote; it answers "ended" for an open trial of an assignment that has
# ended (refused, nothing changed), and "defer", having changed nothing, for every case those decide
# otherwise (a replay, a worker turned away in another assignment, ...).
_CALL_VOTE_FUNCTION = ("SELECT outcome, stage, open_left, quiz_correct FROM perceptlab_paired_vote("
                       "%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)")


def record_vote_in_one_statement(connection, claims: TokenClaims, spec: StudySpec, payload: Any,
                                 moment: dt.datetime) -> tuple[int, dict[str, Any]] | None:
    """:func:`record_vote`'s common case in one round trip (an autocommit psycopg ``connection``);
    None, with nothing changed, when :func:`record_vote` must decide (see
    :func:`~server.paradigms.core.record_in_one_statement`). A body that does not parse is left to
    it too, so that every refusal keeps the regular path's order of checks."""
    try:
        vote = parse_vote(payload)
    except ApiError:
        return None
    if vote["trial_id"] > MAX_ROW_ID or vote["playback"] is not None:  # vote.sql stores no playback log
        return None
    outcome, stage, open_left, quiz_correct = connection.execute(_CALL_VOTE_FUNCTION, (
        claims.assignment_id, claims.nonce, claims.study_id, vote["trial_id"], vote["vote_id"], vote["chose_left"],
        vote["rt_ms"], vote["input"], vote["client_time"], vote["window_width"], vote["window_height"],
        vote["device_pixel_ratio"], utcnow(), reservation_end_at(moment, spec), spec.max_pages,
        spec.accuracy_threshold, spec.gold_min_answered)).fetchone()
    if outcome == "ended":  # an open trial of an assignment that has ended: refused, as record_vote does
        error = ended_error(stage)
        return error.status, error.to_dict()
    if outcome != "stored":
        return None
    return 201, _answer(stage, vote["vote_id"], "stored", open_left, quiz_correct)


def _store_vote(connection, row: dict[str, Any], reserved_until, count: bool = True) -> StoredVote | None:
    """Claim the vote's trial (``row["trial_id"]``, of ``row["assignment_id"]``, open), count the pair's
    vote (real pairs only: gold pairs are shared by every worker, a counter would be a hot row; and only
    with ``count``: a pilot's vote fills no target, server/pilot.py), insert
    the vote (and the gold result of a gold trial), renew the page's reservation (the worker is
    active) and count the page's open trials. None, with nothing changed, when the trial could not be
    claimed (answered already, or not the assignment's).

    Raises
    ------
    sqlalchemy.exc.IntegrityError
        The vote's client ID is stored already (for another trial).
    """
    # A vote with a playback log (video) takes the statements below on PostgreSQL too: vote.sql stores none.
    if connection.dialect.name == "postgresql" and row.get("playback") is None:
        found = connection.execute(_STORE_VOTE_POSTGRESQL, {**{k: v for k, v in row.items() if k != "playback"},
                                                            "until": reserved_until, "count_pair": count}).first()
        return None if found is None else StoredVote._make(found)
    trial = connection.execute(_CLAIM_TRIAL, {"trial_id": row["trial_id"], "owner_id": row["assignment_id"]}).first()
    if trial is None:
        return None
    winner = trial.stimulus_a_id if row["chose_left"] == trial.left_is_a else trial.stimulus_b_id
    if not trial.pair_is_gold and count:
        connection.execute(_COUNT_PAIR_VOTE, {"pair_id": trial.pair_id, "unheld": 1 if trial.page_held else 0})
    values = {name: row[name] for name in _VOTE_COLUMNS}
    values["pair_id"], values["winner_id"], values["playback"] = trial.pair_id, winner, row.get("playback")
    if trial.is_gold:
        vote_row = connection.execute(_INSERT_GOLD_VOTE, values).scalar_one()
        connection.execute(_INSERT_GOLD_RESULT, {
            "vote_id": vote_row, "worker_id": row["worker_id"], "assignment_id": row["assignment_id"],
            "is_quiz": trial.is_quiz, "correct": winner == trial.gold_winner_id})
    else:
        connection.execute(_INSERT_VOTE, values)
    open_left = connection.execute(_RENEW_PAGE_COUNT_OPEN, {"page_id": trial.page_id,
                                                            "until": reserved_until}).scalar_one()
    return StoredVote(trial.trial_id, trial.page_id, trial.is_gold, trial.is_quiz, trial.gold_winner_id, winner,
                      int(open_left))


def _vote_for_unclaimed_trial(session: Session, assignment: AssignmentRow,
                              vote: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """A vote whose trial was not claimed: not the assignment's (404), answered already (a replay,
    or a refusal: :func:`_replay`), sent after the end of the assignment (409 ``assignment_ended``) or
    at another stage that takes no votes (409 ``wrong_stage``)."""
    trial = session.connection().execute(_VOTE_TRIAL, {"trial_id": vote["trial_id"],
                                                       "assignment_id": assignment.id}).first()
    if trial is None:
        raise ApiError(404, "unknown_trial", "this trial is not part of your assignment")
    if trial.answered:
        return _replay(session, assignment, trial, vote)
    if assignment.stage in TERMINAL_STAGES:
        raise ended_error(assignment.stage)
    if assignment.stage not in VOTING_STAGES:
        raise ApiError(409, "wrong_stage", f"no votes are accepted at stage {assignment.stage}")
    # Open, ours, at a voting stage, and still not claimed: only a concurrent claim could do that,
    # which the assignment lock rules out; the claim's WHERE clause guards the invariant anyway.
    raise ApiError(409, "trial_already_answered", "this trial was answered already")


def _replay(session: Session, assignment: AssignmentRow, trial, vote: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The answer to a vote for an answered trial: "duplicate" when it is the same vote again."""
    existing = session.connection().execute(_VOTE_BY_CLIENT_ID, {"vote_id": vote["vote_id"]}).first()
    check_replay(None if existing is None else existing.trial_id, trial.trial_id,
                 existing is not None and existing.chose_left == vote["chose_left"], "vote_id")
    return 200, _vote_body(assignment.stage, trial, existing.winner_id, vote["vote_id"], "duplicate",
                           open_trials(session, Trial, trial.page_id))


def _vote_body(stage: str, trial, winner_id: int, vote_id: str, status: str, open_left: int) -> dict[str, Any]:
    return _answer(stage, vote_id, status, open_left, winner_id == trial.gold_winner_id if trial.is_quiz else None)


def _answer(stage: str, vote_id: str, status: str, open_left: int, quiz_correct: bool | None) -> dict[str, Any]:
    """The body of a vote's answer; only quiz votes are told whether they were right."""
    body: dict[str, Any] = {"vote_id": vote_id, "status": status, "stage": stage, "page_complete": open_left == 0}
    if quiz_correct is not None:
        body["feedback"] = {"correct": quiz_correct}
    return body


def _after_vote(session: Session, assignment: AssignmentRow, trial: StoredVote, spec: StudySpec) -> str:
    """Apply the quiz rule, the hidden-gold rule and the end of a page; return the assignment's stage.

    The common outcomes (nothing changes; a page done) are a statement or none; the rare ones
    (the quiz scored, a worker stopped, the last page) change the ORM object, written at commit.
    """
    open_left = trial.open_left
    if trial.is_quiz:
        if open_left == 0 and assignment.stage == Stage.QUIZ:
            correct, total = _gold_score(session, _QUIZ_SCORE, {"assignment_id": assignment.id})
            mark_page_done(session, trial.page_id)
            assignment_object = assignment.load(session)
            if correct < spec.accuracy_threshold * total - 1e-9:
                stop(assignment_object, "quiz_failed", correct=correct, total=total,
                     needed=f"{spec.accuracy_threshold:.0%}")
            else:
                _start_trials_page(session, assignment_object, spec)
            return assignment_object.stage
        return assignment.stage
    if trial.is_gold and assignment.stage in (Stage.TRIALS, Stage.PAGE_DONE):
        correct, total = _gold_score(session, _HIDDEN_GOLD_SCORE, {"worker_id": assignment.worker_id})
        if total >= spec.gold_min_answered and correct < spec.accuracy_threshold * total - 1e-9:
            assignment_object = assignment.load(session)
            stop(assignment_object, "gold_accuracy", wrong=total - correct, total=total)
            return assignment_object.stage
    if open_left == 0 and assignment.stage == Stage.TRIALS:
        mark_page_done(session, trial.page_id)
        return end_page(session, assignment, spec)
    return assignment.stage


def _gold_score(session: Session, statement, params: dict[str, int]) -> tuple[int, int]:
    """(correct, answered) gold results of :data:`_QUIZ_SCORE` or :data:`_HIDDEN_GOLD_SCORE`."""
    correct, total = session.connection().execute(statement, params).one()
    return int(correct), int(total)


# ---------------------------------------------------------------- state for the browser

def assignment_state(session: Session, assignment: Assignment | AssignmentRow, url_for: UrlFor) -> dict[str, Any]:
    """The JSON State of the API: stage, the current page with image URLs, progress, completion.

    Up to the end of the assignment the plain row is enough; a message or a completion (at the
    stages that end it) needs the ORM object, loaded then.
    """
    spec = spec_for(session, assignment.study_id)
    page_data = message = completion = None
    if assignment.stage in PAGE_STAGES:
        started = session.info.pop(_NEW_PAGE_ROWS, None)  # the rows of a page this request started, if any
        if started is not None and started[0] == assignment.id and assignment.stage == Stage.TRIALS:
            rows = started[1]
        else:
            rows = session.connection().execute(_LATEST_PAGE_TRIALS, {"assignment_id": assignment.id}).all()
        if rows:
            page_data = _page_data(session, assignment.study_id, rows, url_for, spec.policy,
                                   stored_media(session, assignment.study_id))
    elif assignment.stage in TERMINAL_STAGES:
        message, completion = ended_message_and_completion(PARADIGM, session, assignment)
    progress = {"pages_completed": assignment.pages_completed, "min_pages": spec.min_pages,
                "max_pages": spec.max_pages, "reward_per_page": spec.reward_per_page,
                "bonus_per_page": spec.bonus_per_page}
    if assignment.stage == Stage.PAGE_DONE:  # whether "continue" would find a page: never offer one that is not there
        progress["next_page"] = PARADIGM.work_left(session, study_ref(session, assignment.study_id),
                                                   assignment.worker_id)
    return {
        "assignment_id": str(assignment.id),
        "stage": assignment.stage,
        "message": message,
        "page": page_data,
        "progress": progress,
        "limits": {"min_window_width": spec.min_window_width, "min_window_height": spec.min_window_height,
                   "min_image_scale": spec.min_image_scale},
        # How the trial page lays out and scales the views of each trial (paired/window.py): pc_trial.js
        # computes the window a trial needs from these numbers and its trials' "views" (static/window.js).
        "display": {"policy": spec.policy, "min_image_scale": spec.min_image_scale,
                    "floor": [spec.min_window_width, spec.min_window_height], "chrome": PC_CHROME},
        "completion": completion,
        **_state_media(stored_media(session, assignment.study_id), spec),
    }


def _state_media(media: dict, spec: StudySpec) -> dict[str, Any]:
    """:func:`server.paradigms.media.state_media` with where the reference plays (``[media] reference_position``)."""
    state = state_media(media, spec)
    if state:
        state["media"]["reference_position"] = spec.reference_position
    return state


# The assignment's latest page with its trials in one query (a page with no trial gives one row
# whose trial columns are NULL): every state of a page stage reads it.
_LATEST_PAGE_ID = (select(_page.c.id).where(_page.c.assignment_id == bindparam("assignment_id"))
                   .order_by(_page.c.index.desc()).limit(1).scalar_subquery())
_LATEST_PAGE_TRIALS = (select(_page.c.index, _page.c.kind, _trial.c.id, _trial.c.position, _trial.c.answered,
                              _trial.c.pair_id, _trial.c.left_is_a)
                       .select_from(_page.outerjoin(_trial, _trial.c.page_id == _page.c.id))
                       .where(_page.c.id == _LATEST_PAGE_ID).order_by(_trial.c.position))


def _page_data(session: Session, study_id: int, rows, url_for: UrlFor, policy: str,
               media: dict | None = None) -> dict[str, Any]:
    """A page (``rows`` of :data:`_LATEST_PAGE_TRIALS`) with its trials' image URLs, from the study's layout,
    and each trial's ``views``: the panel size of the whole images and of each zoom region under the
    display ``policy`` (:func:`server.paradigms.paired.window.pc_views`)."""
    trials = [row for row in rows if row.id is not None]
    layout = study_layout(session, study_id, {t.pair_id for t in trials})
    images: dict[str, dict[str, Any]] = {}
    views: dict[int, list[list[int]]] = {}

    def image(full: str, crops: tuple[str, ...], study_set: SetLayout) -> dict[str, Any]:
        found = images.get(full)  # a page shows each set's reference (and its crops) many times
        if found is None:
            found = images[full] = {**_image(full, crops, study_set, url_for), **stimulus_fields(media or {}, full)}
        return found

    out = []
    for trial in trials:
        set_id, a, b = layout.pairs[trial.pair_id]
        study_set = layout.sets[set_id]
        left, right = (a, b) if trial.left_is_a else (b, a)
        if set_id not in views:
            views[set_id] = [list(v) for v in pc_views(policy, study_set.width, study_set.height, study_set.boxes)]
        out.append({"trial_id": str(trial.id), "position": trial.position, "answered": trial.answered,
                    "views": views[set_id],
                    "reference": image(study_set.reference, study_set.reference_crops, study_set),
                    "left": image(*layout.stimuli[left], study_set),
                    "right": image(*layout.stimuli[right], study_set)})
    return {"index": rows[0].index, "kind": rows[0].kind, "n_trials": len(trials),
            "n_answered": sum(t.answered for t in trials), "trials": out}


def _image(full: str, crops: tuple[str, ...], study_set: SetLayout, url_for: UrlFor) -> dict[str, Any]:
    crop_list = []
    for path, box in zip(crops, study_set.boxes):
        crop_list.append({"url": url_for(path), "display_width": int(box.get("display_width", box["width"])),
                          "display_height": int(box.get("display_height", box["height"])), "rank": int(box["rank"])})
    return {"full": url_for(full), "crops": crop_list, "width": study_set.width, "height": study_set.height}


# ---------------------------------------------------------------- dashboard, exports, pay

def study_progress(session: Session, study_id: int) -> dict[str, Any]:
    """Counts of sets, pairs, votes (real pairs only), the votes targeted, and workers (pilot and simulated
    participants left out: server/pilot.py)."""
    n_sets = session.scalar(select(func.count()).select_from(StudySet).where(StudySet.study_id == study_id))
    n_pairs, target = session.execute(
        select(func.count(), func.coalesce(func.sum(Pair.target_votes), 0)).join(StudySet)
        .where(StudySet.study_id == study_id, ~Pair.is_gold)).one()
    n_votes = session.scalar(select(func.count()).select_from(Vote).join(Pair, Vote.pair_id == Pair.id)
                             .join(Assignment, Assignment.id == Vote.assignment_id)
                             .where(Vote.study_id == study_id, ~Pair.is_gold, ~Assignment.pilot))
    n_workers = session.scalar(select(func.count()).select_from(Worker).where(Worker.study_id == study_id,
                                                                              ~Worker.pilot))
    return {"n_sets": int(n_sets), "n_pairs": int(n_pairs), "target_votes": int(target), "n_votes": int(n_votes),
            "fill": n_votes / target if target else 0.0, "n_workers": int(n_workers)}


def stimulus_paths(session: Session, study: Study) -> list[str]:
    """Every image a paired-comparison study shows: each set's reference with its crops and its
    overview, every stimulus's full image and crops (in a stable order, repeats included)."""
    paths: list[str] = []
    sets = list(session.scalars(select(StudySet).where(StudySet.study_id == study.id).order_by(StudySet.id)))
    for study_set in sets:
        paths.append(study_set.reference["full"])
        paths.extend(study_set.reference.get("crops", []))
        if study_set.overview:
            paths.append(study_set.overview)
    rows = session.execute(select(Stimulus.full, Stimulus.crops).join(StudySet, Stimulus.set_id == StudySet.id)
                           .where(StudySet.study_id == study.id).order_by(Stimulus.id))
    for full, crops in rows:
        paths.append(full)
        paths.extend((crops or {}).get("paths", []))
    return paths


# The schemas and documented answers of the votes in the worker API's OpenAPI document (server/openapi.py).
_API = load_part(Path(__file__).with_name("openapi.yaml"))


# The two steps of the paged lifecycle (server/paradigms/paged.py) that are this paradigm's own.
_PAGE_STEPS = PageSteps(start_page=_start_trials_page, allocate_quiz=_allocate_quiz_page)


class PairedComparison(Paradigm):
    """Paired comparison (StudyMB): which of two images is closer to the reference; paid per page."""

    kind = paired_study.KIND
    consent_is_a_stage_move = True  # consent -> instructions, nothing else (the API's one-statement consent)
    finish_completes = True  # finish at page_done after min_pages: complete() (the API's one-statement finish)
    title = "paired comparison"
    state_schema = "State"
    shows_video = True  # clips side by side, started together (server/paradigms/media.py, media.js playTogether)
    video_launch_values = ({("design", "stimulus"): "original"},
                           "clips are shown as prepared ([design] stimulus = \"original\"); their gold pairs are "
                           "hidden references against washed-out, blurred clips, written at creation")
    spec_class = StudySpec
    template = paired_study.STUDY_TEMPLATE
    app_stages = frozenset(PAGE_STAGES)
    app_template = "pc/trials.html"
    worker_pages = "pc/worker_pages.html"
    dashboard_template = "pc/admin_study.html"  # figures filled in by dashboard.js from the summary JSON
    response_model = Vote
    response_kinds = (ResponseKind(
        name="votes", record=refused_after_the_end(record_vote), one_statement=record_vote_in_one_statement,
        summary="Store one forced-choice response", operation_id="postVote",
        request_schema={"$ref": "#/components/schemas/VoteRequest"},
        response_schema={"$ref": "#/components/schemas/VoteStored"},
        operation=_API["operations"]["votes"], schemas=_API["schemas"]),)

    def spec_from_toml(self, data: dict[str, Any], path: Path) -> StudySpec:
        return paired_study.spec_from_toml(data, path)

    def create_study(self, session: Session, spec: StudySpec) -> Study:
        return paired_study.create_study(session, spec)

    def study_warnings(self, session: Session, study: Study) -> list[str]:
        """Too few gold pairs for the gold trials a worker is shown (:func:`.study.gold_pool_warning`)."""
        rows = session.execute(select(Pair.target_votes, Pair.gold_winner_id.is_not(None), Pair.is_gold)
                               .join(StudySet, Pair.set_id == StudySet.id).where(StudySet.study_id == study.id)).all()
        warning = paired_study.gold_pool_warning(spec_for(session, study.id),
                                                 [(int(target), bool(known)) for target, known, only in rows if not only],
                                                 sum(bool(only) for _, _, only in rows))
        return [warning] if warning else []

    def work_left(self, session: Session, study: Study, worker_id: int) -> bool:
        """Whether the study could give this worker a page now (below the page cap, a pair left)."""
        spec = spec_for(session, study.id)
        if spec.sampling == "active":
            if worker_trial_pages(session, worker_id) >= spec.max_pages:
                return False
            return paired_active.work_left(session, study, worker_id, spec, _active_sets(session, study.id))
        # Only whether anything is left matters, not which (choose_pairs' rule, stopping at the first).
        trial_pages, any_left = session.connection().execute(_WORK_LEFT_FACTS, {
            "study_id": study.id, "worker_id": worker_id, "now": now(session)}).one()
        return trial_pages < spec.max_pages and bool(any_left)

    def perform_action(self, session: Session, assignment: Assignment | AssignmentRow,
                       action: str) -> Assignment | AssignmentRow:
        return perform_action(session, assignment, action)

    def reopen(self, session: Session, assignment: Assignment, spec: StudySpec) -> None:
        """A worker who had any page (quiz or trials) gets a page of trials at once; one who had none
        starts again at consent."""
        if page_count(session, assignment.id):
            _start_trials_page(session, assignment, spec)
        else:
            assignment.stage = Stage.CONSENT

    def state(self, session: Session, assignment: Assignment | AssignmentRow, url_for: UrlFor) -> dict[str, Any]:
        return assignment_state(session, assignment, url_for)

    def requirement_of_spec(self, spec: StudySpec) -> WindowRequirement:
        """The window the largest set's views need under the study's display policy (its manifests)."""
        return paired_study.window_requirement(spec)

    def window_requirement(self, session: Session, study: Study) -> WindowRequirement:
        """:meth:`requirement_of_spec` from the stored sets (read once per process: they never change)."""
        cache = fixed_study_facts(session, "paired.window_requirement")
        found = cache.get(study.id)
        if found is None:
            layout = study_layout(session, study.id)
            sets = [(s.width, s.height, s.boxes) for s in layout.sets.values()]
            found = cache[study.id] = paired_study.window_requirement(spec_for(session, study.id), sets,
                                                                      stored_media(session, study.id))
        return found

    def examples(self, session: Session, study: Study) -> dict[str, Any]:
        """The first set: its overview (or reference) illustrates the instructions and the HIT preview; video
        studies show no clip there (``video``: the pages speak of videos)."""
        if stored_media(session, study.id).get("kind") == "video":
            return {"example": None, "video": True}
        return {"example": study.sets[0] if study.sets else None, "video": False}

    def stimulus_paths(self, session: Session, study: Study) -> list[str]:
        return stimulus_paths(session, study)

    def instructions(self, session: Session, study: Study, spec: StudySpec) -> str:
        """The study's instructions; the default ones without their sentence about the zoom crops when no
        set has any (prepared with ``--top-k 0``, or every crop would have covered most of its image), and
        for video clips the default ones of videos (:func:`~.study.video_instructions`)."""
        if spec.instructions != paired_study.default_instructions(spec.stimulus):
            return spec.instructions
        if stored_media(session, study.id).get("kind") == "video":
            return paired_study.video_instructions(spec.reference_position, spec.quiz_size > 0)
        if not any(study_set.crops.get("boxes") for study_set in study.sets):
            return paired_study.default_instructions(spec.stimulus, crops=False)
        return spec.instructions

    def export(self, session: Session, study_id: int, *, salt: bytes | None, include_gold: bool = True,
               include_pilot: bool = False) -> StudyExport:
        """votes.csv, the input of ``perceptlab analyze`` (quiz and hidden gold votes unless ``include_gold``
        is false; pilots' votes only with ``include_pilot``)."""
        rows = paired_export.export_votes(session, study_id, pseudonymise=salt is not None, include_gold=include_gold,
                                          salt=salt, include_pilot=include_pilot, spec=spec_for(session, study_id))
        counts = paired_export.vote_counts(rows)
        return StudyExport(
            files={"votes.csv": paired_export.votes_csv_text(rows)},
            report=[("votes.csv", f"{counts['votes']} votes ({counts['gold']} gold) by {counts['workers']} workers "
                                  f"in {counts['sets']} sets")],
            warning=None if rows else "no votes yet: perceptlab analyze needs at least one")

    def workers_table(self, session: Session, study_id: int, *, salt: bytes | None,
                      include_pilot: bool = False) -> tuple[tuple[str, ...], list[dict[str, Any]]]:
        """Pages, votes, gold and quiz scores per worker beside what every study knows of its workers."""
        return paired_export.WORKERS_META_COLUMNS, paired_export.workers_meta(session, study_id, salt=salt,
                                                                              include_pilot=include_pilot)

    def dashboard_summary(self, session: Session, study: Study, salt: bytes, *,
                          raw_ids: bool = False) -> dict[str, Any]:
        """Per-set pair fill, the workers table and the running scales (:mod:`.admin`)."""
        from .admin import dashboard_summary

        return dashboard_summary(session, study, salt, raw_ids=raw_ids)

    def precision(self, session: Session, study: Study, spec):
        """Per set, the items' half-widths now (``[stopping]``): server/paradigms/paired/precision.py."""
        from .precision import study_precision

        return study_precision(session, study, spec.resolve, spec.units)

    def forecast(self, session: Session, study: Study, spec):
        """analysis/forecast.py on the study's own votes (server/paradigms/paired/precision.py)."""
        from .precision import simulation_forecast

        return simulation_forecast(session, study, spec, self.time_prior(spec).unit_s / spec.pairs_per_page)

    def simulated_worker(self):
        """``perceptlab simulate``'s worker: votes on each pair by the images' RMSE to the reference (:mod:`simulated_worker`)."""
        from .simulated_worker import PairedWorker
        return PairedWorker

    def admin_blueprint(self):
        """votes.csv, the running scales and their refresh (:mod:`.admin`)."""
        from .admin import bp

        return bp

    def init_app(self, app) -> None:
        """The running estimates' background refresh (:func:`.live_scales.init_app`)."""
        from .live_scales import init_app

        init_app(app)

    def change_pilots(self, session: Session, study: Study, worker_ids: list[int], pilot: bool,
                      mark: Callable[[], None]) -> None:
        """Under the allocation lock; the pilots' held pages released, the pairs recounted (:mod:`.pilots`)."""
        paired_pilots.change_pilots(session, study, worker_ids, pilot, mark)

    def reset_counts(self, session: Session, study: Study) -> None:
        """No running estimate; every pair's counts at zero (:mod:`.pilots`)."""
        paired_pilots.reset_counts(session, study)

    def analyse_results(self, session: Session, study: Study, export: StudyExport, out: Path,
                        options: ResultsOptions) -> ResultsAnalysis | None:
        """machine_errors.csv, then ``perceptlab analyze`` of votes.csv and the top of the ranking (:mod:`.results`)."""
        from .results import analyse_results

        return analyse_results(session, study, export, out, options)

    def progress(self, session: Session, study_id: int) -> dict[str, Any]:
        """:func:`study_progress` and the design that chooses the pairs (``design``:
        :func:`server.paradigms.paired.active.design_summary`)."""
        spec = spec_for(session, study_id)
        if spec.sampling == "active":
            design = paired_active.design_summary(session, session.get(Study, study_id), spec,
                                                  _active_sets(session, study_id))
        else:
            design = dict(paired_active.REGULAR_DESIGN)
        p = study_progress(session, study_id)
        return {"kind": self.kind, "n_groups": p["n_sets"], "groups": "sets", "n_units": p["n_pairs"], "units": "pairs",
                "n_responses": p["n_votes"], "target_responses": p["target_votes"], "unit": "votes",
                "fill": p["fill"], "n_workers": p["n_workers"], "design": design}

    def summary_line(self, session: Session, study_id: int) -> str:
        p = study_progress(session, study_id)
        return (f"{p['n_sets']} sets, {p['n_pairs']} pairs, {p['n_votes']}/{p['target_votes']} votes "
                f"({p['fill']:.0%}), {p['n_workers']} workers")

    def pay_unit(self, spec: StudySpec) -> PayUnit:
        """A page: the HIT's reward covers ``min_pages`` pages, each later page earns ``bonus_per_page``."""
        return PayUnit("page", Decimal(spec.reward_per_page), Decimal(spec.bonus_per_page), spec.min_pages,
                       spec.max_pages)

    # The pace workers are told before any has finished (server/worker_time.py): StudyMB's 5 minutes
    # for a page of 20 comparisons, and a minute to read the consent and the instructions.
    SECONDS_PER_COMPARISON = 15.0
    SETUP_SECONDS = 60.0

    def time_prior(self, spec: StudySpec) -> TimePrior:
        """A page: ``pairs_per_page`` comparisons; once: consent, instructions and the quiz's comparisons."""
        return TimePrior(spec.pairs_per_page * self.SECONDS_PER_COMPARISON,
                         self.SETUP_SECONDS + spec.quiz_size * self.SECONDS_PER_COMPARISON,
                         lazy_ngettext("%(num)s comparison", "%(num)s comparisons", spec.pairs_per_page))


PARADIGM = PairedComparison()
