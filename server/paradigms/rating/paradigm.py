"""Ratings (ACR, DCR, CCR; ITU-T P.910 / P.808): the worker's path through a study, as database
transactions.

Stages of an assignment (the paired-comparison stages, reused)::

    consent -> instructions -> quiz (training) -> trials <-> page_done -> completed
                                  \\-> disqualified (training failed: for good)
                                          trials -> stopped (hidden checks out of range, or straight-lining)
    any of consent, instructions, quiz, page_done -> full (no stimulus left for this worker before min_pages)

The study file and study creation are in :mod:`.study`, the scales in :mod:`.scales`, the quality
rules in :mod:`.quality`, the choice of a page's stimuli in :mod:`.allocation`, the export in
:mod:`.export`. Every function runs inside the caller's session and leaves committing to it.

The wire format (the State's ``scale`` and ``page``, ``POST .../ratings``) is the one
``experiment_ui/static/js/rating_trial.js`` is written against: trials carry their ID, position,
whether answered, and their images (role, opaque URL, size). Which image is the reference in CCR,
and whether a trial is a hidden reference or a gold image, is never sent.
"""
from __future__ import annotations

import datetime as dt
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from sqlalchemy import bindparam, case, func, insert, literal_column, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ... import validation as check
from ...allocation import release_other_pages, reservation_end, reservation_end_at
from ...i18n import lazy_ngettext
from ...errors import ApiError, invalid, reject_unknown
from ...models import Assignment, Page, Study, Worker, utcnow
from ...openapi import load_part
from ...tokens import TokenClaims
from ..core import (MAX_ROW_ID, UUID_PATTERN, AssignmentRow, DemoStudy, Paradigm, PayUnit, ResponseKind, ResultsAnalysis,
                    ResultsOptions, StudyExport, TimePrior, UrlFor,
                    add_trials, allocation_lock, as_object, check_replay, ended_error, follow_worker, ended_message_and_completion,
                    fixed_study_facts, move_to, new_page, page_count, refused_after_the_end, seeded_rng, spec_for,
                    stop, stored_media, study_ref)
from ..paged import WORKER_TRIAL_PAGES, PageSteps, end_page, mark_page_done, paged_action, worker_trial_pages
from ..display import WindowRequirement
from ..media import parse_playback, state_media, stimulus_fields, stimulus_word
from ..stages import TERMINAL_STAGES, TURNED_AWAY, Stage
from . import export as rating_export, study as rating_study
from .allocation import (COUNTED, RATING_ALLOCATION_LOCKS, any_stimulus_left, choose_stimuli, hidden_references_for,
                         page_rows, pick_checks)
from .models import GOLD_LOW, HIDDEN_REFERENCE, RatingGoldResult, RatingResponse, RatingStimulus, RatingTrial
from .quality import STRAIGHT_LINE_MIN_TRIALS, below_threshold, in_range, known_range, straight_lined
from .scales import normalise, scale_of, valid_rating
from .study import RatingSpec

_trial, _stimulus, _response, _gold, _page, _assignment, _worker = (
    model.__table__ for model in (RatingTrial, RatingStimulus, RatingResponse, RatingGoldResult, Page, Assignment,
                                  Worker))

_API = load_part(Path(__file__).with_name("openapi.yaml"))  # the kind's schemas and documented answers
PAGE_STAGES = (Stage.QUIZ, Stage.TRIALS, Stage.PAGE_DONE)  # stages that show a page of trials (and take ratings)


# ---------------------------------------------------------------- the study's fixed stimuli

class StimulusLayout(NamedTuple):
    """What a trial shows of a stimulus and how its rating is judged: fixed at creation."""

    role: str
    path: str
    reference_path: str
    width: int
    height: int


_LAYOUT = select(_stimulus.c.id, _stimulus.c.role, _stimulus.c.path, _stimulus.c.reference_path, _stimulus.c.width,
                 _stimulus.c.height).where(_stimulus.c.study_id == bindparam("study_id"))


def study_stimuli(session: Session, study_id: int) -> dict[int, StimulusLayout]:
    """The study's stimuli by ID, read once per process (they never change after creation)."""
    layouts = fixed_study_facts(session, "rating.stimuli")
    layout = layouts.get(study_id)
    if layout is None:
        rows = session.connection().execute(_LAYOUT, {"study_id": study_id})
        layout = layouts.setdefault(study_id, {row.id: StimulusLayout(*row[1:]) for row in rows})
    return layout


# ---------------------------------------------------------------- stage actions

def perform_action(session: Session, assignment: Assignment | AssignmentRow,
                   action: str) -> Assignment | AssignmentRow:
    """Move the (locked) assignment on (:func:`server.paradigms.paged.paged_action`): consent,
    instructions_done (the training, or the first page), continue (another page), finish."""
    return paged_action(session, assignment, action, spec_for(session, assignment.study_id), _PAGE_STEPS)


_PAGE_START_FACTS = (select(_worker.c.status, _worker.c.status_reason, WORKER_TRIAL_PAGES.scalar_subquery(),
                            select(func.count()).select_from(_page)
                            .where(_page.c.assignment_id == bindparam("assignment_id")).scalar_subquery(),
                            select(func.count()).select_from(_assignment)
                            .where(_assignment.c.worker_id == bindparam("worker_id"),
                                   _assignment.c.id != bindparam("assignment_id")).scalar_subquery())
                     .where(_worker.c.id == bindparam("worker_id")))


def _allocate_quiz_page(session: Session, assignment: Assignment | AssignmentRow, spec: RatingSpec) -> None:
    study = study_ref(session, assignment.study_id)
    index = page_count(session, assignment.id)
    rng = seeded_rng(study, assignment, index)
    checks = pick_checks(session, study.id, assignment.worker_id, spec.quiz_size, rng)
    if not checks:
        raise ApiError(409, "wrong_stage", "this study has no quality checks for its training")
    page = new_page(session, assignment, Stage.QUIZ, index)
    add_trials(session, RatingTrial, page, assignment, page_rows(spec.method, [], checks, rng, is_quiz=True))


def start_trials_page(session: Session, assignment: Assignment | AssignmentRow,
                      spec: RatingSpec) -> Assignment | AssignmentRow:
    """Give the worker a new page of ratings, or (:meth:`Paradigm.no_work_left`) complete the assignment or
    tell the worker the study is full when no stimulus needs this worker's rating any more."""
    study = study_ref(session, assignment.study_id)
    status, reason, trial_pages, index, other_assignments = session.connection().execute(
        _PAGE_START_FACTS, {"worker_id": assignment.worker_id, "assignment_id": assignment.id}).one()
    if status in TURNED_AWAY:  # stopped in another of the worker's HITs
        assignment = as_object(session, assignment)
        follow_worker(assignment)
        return assignment
    if trial_pages >= spec.max_pages:
        return _no_work_left(session, assignment, spec)
    allocation_lock(session, study, RATING_ALLOCATION_LOCKS)
    rng = seeded_rng(study, assignment, index)
    real = choose_stimuli(session, study.id, assignment.worker_id, spec.ratings_per_page - spec.gold_per_page, rng)
    if not real:
        return _no_work_left(session, assignment, spec)
    if other_assignments:  # one reserved page per worker
        release_other_pages(session, assignment.worker_id, assignment.id)
    counted = not assignment.pilot  # a pilot's page reserves nothing (server/pilot.py)
    page = new_page(session, assignment, Stage.TRIALS, index, reservation_end(session, spec) if counted else None)
    # ACR-HR: the hidden reference of every scene on the page that the worker has not had yet (allocation.py)
    references = hidden_references_for(session, study.id, assignment.worker_id, real) if spec.method == "acr" else []
    others = pick_checks(session, study.id, assignment.worker_id, max(spec.gold_per_page - len(references), 0), rng)
    checks = references + [c for c in others if c not in references]
    add_trials(session, RatingTrial, page, assignment, page_rows(spec.method, real, checks, rng))
    return move_to(session, assignment, Stage.TRIALS)


def _no_work_left(session: Session, assignment: Assignment | AssignmentRow, spec: RatingSpec) -> Assignment:
    assignment = as_object(session, assignment)
    PARADIGM.no_work_left(assignment, spec)
    return assignment


# ---------------------------------------------------------------- ratings

def parse_rating(payload: Any, spec: RatingSpec) -> dict[str, Any]:
    """Validate a rating body ``{"rating_id", "trial_id", "rating", "rt_ms", "playback"?}``; raise a 400 naming the
    problem. ``playback`` is a video trial's playback log (:func:`server.paradigms.media.parse_playback`)."""
    if not isinstance(payload, dict):
        raise invalid("the body must be a JSON object")
    reject_unknown(payload, ("rating_id", "trial_id", "rating", "rt_ms", "playback"))
    rating_id = payload.get("rating_id")
    if not isinstance(rating_id, str) or not UUID_PATTERN.fullmatch(rating_id):
        raise invalid("rating_id must be a UUID made by the browser")
    trial_id = payload.get("trial_id")
    if isinstance(trial_id, bool) or not isinstance(trial_id, int) or trial_id < 1:
        raise invalid("trial_id must be the trial's ID (a positive integer)")
    rating = payload.get("rating")
    if not valid_rating(spec.method, spec.slider, rating):
        scale = scale_of(spec.method)
        wanted = (f"a number in [{scale.low}, {scale.high}]" if spec.slider
                  else "one of " + ", ".join(str(v) for v in scale.values))
        raise invalid(f"rating must be {wanted}")
    rt = check.number(payload.get("rt_ms"), "rt_ms (milliseconds)", *check.RT_MS)
    def fail(message: str):
        raise invalid(message)

    playback = parse_playback(payload.get("playback"), fail)
    return {"rating_id": rating_id.lower(), "trial_id": trial_id, "rating": float(rating), "rt_ms": rt,
            "playback": playback}


_CLAIM_TRIAL = (update(_trial)
                .where(_trial.c.id == bindparam("trial_id"), _trial.c.assignment_id == bindparam("owner_id"),
                       ~_trial.c.answered)
                .values(answered=True)
                .returning(_trial.c.page_id, _trial.c.stimulus_id, _trial.c.reference_first, _trial.c.is_gold,
                           _trial.c.is_quiz))
_INSERT_RESPONSE = insert(_response).returning(_response.c.id)
_INSERT_GOLD = insert(_gold)
# Renew the page's reservation (when it has one: training and pilots' pages have none) and count its open
# trials, in one statement: the count sees the trial claimed earlier in this transaction.
_UPDATED_PAGE_ID = literal_column("page.id")
_RENEW_PAGE_COUNT_OPEN = (
    update(_page).where(_page.c.id == bindparam("page_id"))
    .values(reserved_until=case((_page.c.reserved_until.is_not(None),
                                 bindparam("until", type_=_page.c.reserved_until.type)), else_=None))
    .returning(select(func.count()).select_from(_trial)
               .where(_trial.c.page_id == _UPDATED_PAGE_ID, ~_trial.c.answered).scalar_subquery()))
_OPEN_ON_PAGE = select(func.count()).select_from(_trial).where(_trial.c.page_id == bindparam("page_id"),
                                                               ~_trial.c.answered)
_SCORE = (func.coalesce(func.sum(case((_gold.c.correct, 1), else_=0)), 0), func.count())
_QUIZ_SCORE = select(*_SCORE).where(_gold.c.assignment_id == bindparam("assignment_id"), _gold.c.is_quiz)
_HIDDEN_SCORE = select(*_SCORE).where(_gold.c.worker_id == bindparam("worker_id"), ~_gold.c.is_quiz)
_TRIAL_OF_ASSIGNMENT = select(_trial.c.id, _trial.c.page_id, _trial.c.answered).where(
    _trial.c.id == bindparam("trial_id"), _trial.c.assignment_id == bindparam("assignment_id"))
_BY_CLIENT_ID = select(_response.c.trial_id, _response.c.raw_rating).where(
    _response.c.client_rating_id == bindparam("rating_id"))
# Every answer of the worker's completed pages of real trials, page by page (straight-lining).
_WORKER_PAGE_ANSWERS = (select(_trial.c.page_id, _response.c.raw_rating)
                        .join(_response, _response.c.trial_id == _trial.c.id)
                        .join(_page, _page.c.id == _trial.c.page_id)
                        .where(_trial.c.worker_id == bindparam("worker_id"), ~_trial.c.is_quiz,
                               _page.c.completed_at.is_not(None))
                        .order_by(_trial.c.page_id))


class StoredRating(NamedTuple):
    """What the rules after a rating need of it and its trial."""

    page_id: int
    is_gold: bool
    is_quiz: bool
    correct: bool | None  # a quality check's rating in its known range; None for real stimuli
    open_left: int        # unanswered trials left on the page


def record_rating(session: Session, assignment: AssignmentRow, payload: Any) -> tuple[int, dict[str, Any]]:
    """Store one rating; return ``(HTTP status, body)``. A retry of a stored rating returns 200 "duplicate".

    ``assignment`` must be locked (:func:`~server.paradigms.core.lock_assignment_row`): the ratings of an
    assignment are applied one at a time, so the end of a page or of the training is seen exactly once.
    """
    spec = spec_for(session, assignment.study_id)
    rating = parse_rating(payload, spec)
    if rating["trial_id"] > MAX_ROW_ID:  # beyond the INTEGER key: no such trial (PostgreSQL would raise)
        raise ApiError(404, "unknown_trial", "this trial is not part of your assignment")
    if assignment.stage not in PAGE_STAGES:
        return _unclaimed(session, assignment, rating)
    connection = session.connection()
    trial = connection.execute(_CLAIM_TRIAL, {"trial_id": rating["trial_id"], "owner_id": assignment.id}).first()
    if trial is None:
        return _unclaimed(session, assignment, rating)
    stimulus = study_stimuli(session, assignment.study_id)[trial.stimulus_id]
    stored_rating = normalise(spec.method, rating["rating"], trial.reference_first)
    try:
        response_id = connection.execute(_INSERT_RESPONSE, {
            "client_rating_id": rating["rating_id"], "trial_id": rating["trial_id"], "assignment_id": assignment.id,
            "worker_id": assignment.worker_id, "study_id": assignment.study_id, "stimulus_id": trial.stimulus_id,
            "raw_rating": rating["rating"], "rating": stored_rating, "rt_ms": rating["rt_ms"],
            "playback": rating["playback"], "created_at": utcnow()}).scalar_one()
    except IntegrityError:
        # Only the unique client_rating_id can clash (the trial is ours and locked): the browser reused a
        # rating ID for another trial. The caller rolls the whole request back.
        raise ApiError(409, "conflict", "this rating_id was already used for a different response") from None
    correct = None
    if trial.is_gold:
        correct = in_range(spec.method, stimulus.role, stored_rating, spec.slider)
        connection.execute(_INSERT_GOLD, {"response_id": response_id, "worker_id": assignment.worker_id,
                                          "assignment_id": assignment.id, "is_quiz": trial.is_quiz,
                                          "correct": correct})
    open_left = int(connection.execute(_RENEW_PAGE_COUNT_OPEN, {"page_id": trial.page_id,
                                                                "until": reservation_end(session, spec)}).scalar_one())
    stored = StoredRating(trial.page_id, trial.is_gold, trial.is_quiz, correct, open_left)
    stage = _after_rating(session, assignment, stored, spec)
    body = _answer(stage, rating["rating_id"], "stored", open_left)
    if trial.is_quiz:  # training: the worker learns whether the answer was in range (hidden checks never do)
        body["feedback"] = {"correct": bool(correct)}
    return 201, body


# PostgreSQL's one-statement rating: the function perceptlab_rating_response (its text: rating.sql beside
# this module, installed by a migration that reads it) locks the assignment, checks the token's nonce and
# stores the common ratings with the rules of record_rating and _after_rating; it answers "ended" for an
# open trial of an assignment that has ended (refused, nothing changed), and "defer", having changed
# nothing, for every case those decide otherwise (a replay, the end of the training, a stop, the last page).
_CALL_RATING_FUNCTION = ("SELECT outcome, stage, open_left, correct FROM perceptlab_rating_response("
                         "%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)")


def record_rating_in_one_statement(connection, claims: TokenClaims, spec: RatingSpec, payload: Any,
                                   moment: dt.datetime) -> tuple[int, dict[str, Any]] | None:
    """:func:`record_rating`'s common case in one round trip (an autocommit psycopg ``connection``);
    None, with nothing changed, when :func:`record_rating` must decide (see
    :func:`~server.paradigms.core.record_in_one_statement`). The body is checked by :func:`parse_rating`
    (the scale's rule has its one home there); one that does not parse is left to the regular path, so
    that every refusal keeps its order of checks. Quality checks take this path as real stimuli do: a
    worker cannot tell them apart by which path answered (the same body and headers either way)."""
    try:
        rating = parse_rating(payload, spec)
    except ApiError:
        return None
    if rating["trial_id"] > MAX_ROW_ID or rating["playback"] is not None:  # rating.sql stores no playback log
        return None
    reference = known_range(spec.method, HIDDEN_REFERENCE, spec.slider)
    gold = known_range(spec.method, GOLD_LOW, spec.slider)
    outcome, stage, open_left, correct = connection.execute(_CALL_RATING_FUNCTION, (
        claims.assignment_id, claims.nonce, claims.study_id, rating["trial_id"], rating["rating_id"],
        rating["rating"], rating["rt_ms"], spec.method, *reference, *gold, utcnow(), reservation_end_at(moment, spec),
        spec.max_pages, spec.accuracy_threshold, spec.gold_min_answered, spec.straight_line_pages,
        STRAIGHT_LINE_MIN_TRIALS)).fetchone()
    if outcome == "ended":  # an open trial of an assignment that has ended: refused, as record_rating does
        error = ended_error(stage)
        return error.status, error.to_dict()
    if outcome != "stored":
        return None
    body = _answer(stage, rating["rating_id"], "stored", open_left)
    if correct is not None:  # training only (the function tells no hidden check's result)
        body["feedback"] = {"correct": bool(correct)}
    return 201, body


def _answer(stage: str, rating_id: str, status: str, open_left: int) -> dict[str, Any]:
    return {"rating_id": rating_id, "status": status, "stage": stage, "page_complete": open_left == 0}


def _unclaimed(session: Session, assignment: AssignmentRow, rating: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """A rating whose trial was not claimed: not the assignment's (404), answered already (a replay, or a
    refusal), sent after the end of the assignment (409 ``assignment_ended``) or at another stage (409)."""
    connection = session.connection()
    trial = connection.execute(_TRIAL_OF_ASSIGNMENT, {"trial_id": rating["trial_id"],
                                                      "assignment_id": assignment.id}).first()
    if trial is None:
        raise ApiError(404, "unknown_trial", "this trial is not part of your assignment")
    if trial.answered:
        existing = connection.execute(_BY_CLIENT_ID, {"rating_id": rating["rating_id"]}).first()
        check_replay(None if existing is None else existing.trial_id, trial.id,
                     existing is not None and existing.raw_rating == rating["rating"], "rating_id")
        open_left = int(connection.execute(_OPEN_ON_PAGE, {"page_id": trial.page_id}).scalar_one())
        return 200, _answer(assignment.stage, rating["rating_id"], "duplicate", open_left)
    if assignment.stage in TERMINAL_STAGES:
        raise ended_error(assignment.stage)
    if assignment.stage not in PAGE_STAGES:
        raise ApiError(409, "wrong_stage", f"no ratings are accepted at stage {assignment.stage}")
    raise ApiError(409, "trial_already_answered", "this trial was answered already")


def _score(session: Session, statement, params: dict[str, int]) -> tuple[int, int]:
    correct, total = session.connection().execute(statement, params).one()
    return int(correct), int(total)


def straight_lined_pages(session: Session, worker_id: int) -> int:
    """The worker's completed pages of real trials whose answers were all alike (:func:`.quality.straight_lined`)."""
    rows = session.connection().execute(_WORKER_PAGE_ANSWERS, {"worker_id": worker_id}).all()
    if not rows:
        return 0
    pages = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    answers = np.fromiter((r[1] for r in rows), dtype=float, count=len(rows))
    starts = np.flatnonzero(np.r_[True, pages[1:] != pages[:-1]])
    return sum(straight_lined(chunk) for chunk in np.split(answers, starts[1:]))


def _after_rating(session: Session, assignment: AssignmentRow, rating: StoredRating, spec: RatingSpec) -> str:
    """Apply the training rule, the hidden-check rule, the straight-lining rule and the end of a page;
    return the assignment's stage."""
    if rating.is_quiz:
        if rating.open_left == 0 and assignment.stage == Stage.QUIZ:
            correct, total = _score(session, _QUIZ_SCORE, {"assignment_id": assignment.id})
            mark_page_done(session, rating.page_id)
            worker = assignment.load(session)
            if below_threshold(correct, total, spec.accuracy_threshold):
                stop(worker, "training_failed", correct=correct, total=total, needed=f"{spec.accuracy_threshold:.0%}")
            else:
                start_trials_page(session, worker, spec)
            return worker.stage
        return assignment.stage
    if rating.is_gold and assignment.stage in (Stage.TRIALS, Stage.PAGE_DONE):
        correct, total = _score(session, _HIDDEN_SCORE, {"worker_id": assignment.worker_id})
        if total >= spec.gold_min_answered and below_threshold(correct, total, spec.accuracy_threshold):
            worker = assignment.load(session)
            stop(worker, "gold_accuracy", wrong=total - correct, total=total)
            return worker.stage
    if rating.open_left == 0 and assignment.stage == Stage.TRIALS:
        mark_page_done(session, rating.page_id)
        if spec.straight_line_pages:
            lined = straight_lined_pages(session, assignment.worker_id)
            if lined >= spec.straight_line_pages:
                worker = assignment.load(session)  # the page does not count as completed: no work was done
                stop(worker, "straight_lining", pages=lined)
                return worker.stage
        return end_page(session, assignment, spec)
    return assignment.stage


# ---------------------------------------------------------------- state for the browser

_LATEST_PAGE_ID = (select(_page.c.id).where(_page.c.assignment_id == bindparam("assignment_id"))
                   .order_by(_page.c.index.desc()).limit(1).scalar_subquery())
_LATEST_PAGE_TRIALS = (select(_page.c.index, _page.c.kind, _trial.c.id, _trial.c.position, _trial.c.answered,
                              _trial.c.stimulus_id, _trial.c.reference_first)
                       .select_from(_page.outerjoin(_trial, _trial.c.page_id == _page.c.id))
                       .where(_page.c.id == _LATEST_PAGE_ID).order_by(_trial.c.position))


def trial_images(method: str, stimulus: StimulusLayout, reference_first: bool, url_for: UrlFor,
                 media: dict | None = None) -> list[dict]:
    """The images of one trial as the State sends them: ACR the test alone; DCR the reference, then the
    test; CCR ``first`` and ``second`` (the reference's place drawn per trial and never named)."""
    def image(role: str, path: str) -> dict[str, Any]:
        return {"role": role, "url": url_for(path), "width": stimulus.width, "height": stimulus.height,
                **stimulus_fields(media or {}, path)}

    if method == "acr":
        return [image("test", stimulus.path)]
    if method == "dcr":
        return [image("reference", stimulus.reference_path), image("test", stimulus.path)]
    first, second = ((stimulus.reference_path, stimulus.path) if reference_first
                     else (stimulus.path, stimulus.reference_path))
    return [image("first", first), image("second", second)]


def assignment_state(session: Session, assignment: Assignment | AssignmentRow, url_for: UrlFor) -> dict[str, Any]:
    """The JSON State of the API: stage, progress, the scale, the display rules and the current page."""
    spec = spec_for(session, assignment.study_id)
    page = message = completion = None
    if assignment.stage in PAGE_STAGES:
        rows = session.connection().execute(_LATEST_PAGE_TRIALS, {"assignment_id": assignment.id}).all()
        if rows:
            stimuli = study_stimuli(session, assignment.study_id)
            media = stored_media(session, assignment.study_id)
            trials = [{"id": row.id, "position": row.position, "answered": row.answered,
                       "images": trial_images(spec.method, stimuli[row.stimulus_id], row.reference_first, url_for,
                                              media)}
                      for row in rows if row.id is not None]
            page = {"index": rows[0].index, "kind": rows[0].kind, "trials": trials}
    elif assignment.stage in TERMINAL_STAGES:
        message, completion = ended_message_and_completion(PARADIGM, session, assignment)
    progress = {"pages_completed": assignment.pages_completed, "min_pages": spec.min_pages,
                "max_pages": spec.max_pages, "reward_per_page": spec.reward_per_page,
                "bonus_per_page": spec.bonus_per_page}
    if assignment.stage in (Stage.TRIALS, Stage.PAGE_DONE):  # whether "continue" would find a page
        progress["next_page"] = (assignment.pages_completed < spec.max_pages
                                 and PARADIGM.work_left(session, study_ref(session, assignment.study_id),
                                                        assignment.worker_id))
    media = stored_media(session, assignment.study_id)
    return {"assignment_id": str(assignment.id), "stage": assignment.stage, "message": message,
            "completion": completion, "progress": progress,
            "scale": scale_of(spec.method).as_state(spec.slider, spec.question, stimulus_word(media)),
            "display": {"policy": spec.policy, "min_image_scale": spec.min_image_scale,
                        "floor": [spec.min_window_width, spec.min_window_height]},
            "page": page, **state_media(media, spec)}


# ---------------------------------------------------------------- dashboard, pay

def rating_progress(session: Session, study_id: int) -> dict[str, Any]:
    """Scenes, real stimuli, ratings stored and targeted (real stimuli, pilots left out), workers."""
    n_scenes, n_stimuli, target = session.execute(
        select(func.count(func.distinct(RatingStimulus.scene)), func.count(),
               func.coalesce(func.sum(RatingStimulus.target_ratings), 0))
        .where(RatingStimulus.study_id == study_id, ~RatingStimulus.is_gold)).one()
    n_ratings = session.scalar(select(func.coalesce(func.sum(COUNTED.c.n), 0))
                               .join(RatingStimulus, RatingStimulus.id == COUNTED.c.stimulus_id)
                               .where(~RatingStimulus.is_gold), {"study_id": study_id})
    n_workers = session.scalar(select(func.count()).select_from(Worker).where(Worker.study_id == study_id,
                                                                              ~Worker.pilot))
    return {"n_scenes": int(n_scenes), "n_stimuli": int(n_stimuli), "target_ratings": int(target),
            "n_ratings": int(n_ratings), "fill": int(n_ratings) / int(target) if target else 0.0,
            "n_workers": int(n_workers)}


# The two steps of the paged lifecycle (server/paradigms/paged.py) that are this paradigm's own.
_PAGE_STEPS = PageSteps(start_page=start_trials_page, allocate_quiz=_allocate_quiz_page)


class Rating(Paradigm):
    """Ratings of single images or of images against their reference (ACR, DCR, CCR); paid per page."""

    kind = rating_study.KIND
    consent_is_a_stage_move = True  # consent -> instructions, nothing else (the API's one-statement consent)
    finish_completes = True  # finish at page_done after min_pages: complete() (the API's one-statement finish)
    title = "ratings"
    state_schema = "RatingState"
    spec_class = RatingSpec
    template = rating_study.STUDY_TEMPLATE
    app_stages = frozenset(PAGE_STAGES)
    app_template = "rating/trials.html"
    worker_pages = "rating/worker_pages.html"
    dashboard_template = "rating/admin_study.html"
    downloads = ("ratings.csv",)
    shows_video = True
    response_model = RatingResponse
    mturk_settings = rating_study.MTURK_TEXTS
    response_kinds = (ResponseKind(
        name="ratings", record=refused_after_the_end(record_rating), one_statement=record_rating_in_one_statement,
        summary="Store one rating",
        operation_id="postRating", request_schema={"$ref": "#/components/schemas/RatingRequest"},
        response_schema={"$ref": "#/components/schemas/RatingStored"},
        operation=_API["operations"]["ratings"], schemas=_API["schemas"]),)

    # The pace workers are told before any has finished (server/worker_time.py): a rating of one image
    # (ACR) and of two side by side (DCR, CCR), and a minute for the consent and the instructions.
    SECONDS_PER_RATING = {"acr": 6.0, "dcr": 8.0, "ccr": 8.0}
    SETUP_SECONDS = 60.0

    def spec_from_toml(self, data: dict[str, Any], path: Path) -> RatingSpec:
        return rating_study.spec_from_toml(data, path)

    def create_study(self, session: Session, spec: RatingSpec) -> Study:
        return rating_study.create_study(session, spec)

    def requirement_of_spec(self, spec: RatingSpec) -> WindowRequirement:
        """The window the largest scene's images need side by side (its manifests)."""
        return rating_study.window_requirement(spec)

    def window_requirement(self, session: Session, study: Study) -> WindowRequirement:
        """:meth:`requirement_of_spec` from the stored stimuli (read once per process)."""
        cache = fixed_study_facts(session, "rating.window_requirement")
        found = cache.get(study.id)
        if found is None:
            sizes = {(s.width, s.height) for s in study_stimuli(session, study.id).values()}
            found = cache[study.id] = rating_study.window_for(spec_for(session, study.id), sorted(sizes),
                                                              stored_media(session, study.id))
        return found

    def work_left(self, session: Session, study: Study, worker_id: int) -> bool:
        """Whether the study could give this worker a page now (below the page cap, a stimulus left)."""
        spec = spec_for(session, study.id)
        if worker_trial_pages(session, worker_id) >= spec.max_pages:
            return False
        return any_stimulus_left(session, study.id, worker_id)

    def perform_action(self, session: Session, assignment: Assignment | AssignmentRow,
                       action: str) -> Assignment | AssignmentRow:
        return perform_action(session, assignment, action)

    def reopen(self, session: Session, assignment: Assignment, spec: RatingSpec) -> None:
        """A worker who had any page gets a page of trials at once; one who had none starts again at consent."""
        if page_count(session, assignment.id):
            start_trials_page(session, assignment, spec)
        else:
            assignment.stage = Stage.CONSENT

    def state(self, session: Session, assignment: Assignment | AssignmentRow, url_for: UrlFor) -> dict[str, Any]:
        return assignment_state(session, assignment, url_for)

    def examples(self, session: Session, study: Study) -> dict[str, Any]:
        """``stimulus``: what the worker pages call the study's stimuli ("image" or "video")."""
        return {"stimulus": stimulus_word(stored_media(session, study.id))}

    def instructions(self, session: Session, study: Study, spec: RatingSpec) -> str:
        """The study's instructions; the default ones speak of videos in a video study."""
        default = partial(rating_study.default_instructions, spec.method, spec.stimulus, spec.quiz_size > 0)
        if spec.instructions != default():
            return spec.instructions
        return default(word=stimulus_word(stored_media(session, study.id)))

    def stimulus_paths(self, session: Session, study: Study) -> list[str]:
        """Every image the study's trials show: each scene's reference and every stimulus's image."""
        paths: list[str] = []
        for reference, path in session.execute(select(RatingStimulus.reference_path, RatingStimulus.path)
                                               .where(RatingStimulus.study_id == study.id)
                                               .order_by(RatingStimulus.id)):
            paths.extend((reference, path))
        return paths

    def export(self, session: Session, study_id: int, *, salt: bytes | None, include_gold: bool = True,
               include_pilot: bool = False) -> StudyExport:
        """ratings.csv, the input of ``perceptlab analyze-ratings`` (:mod:`.export`)."""
        return rating_export.export(session, study_id, salt=salt, include_gold=include_gold,
                                    include_pilot=include_pilot)

    def analyse_results(self, session: Session, study: Study, export: StudyExport, out: Path,
                        options: ResultsOptions) -> ResultsAnalysis | None:
        """``perceptlab analyze-ratings`` of ratings.csv (:mod:`.results`)."""
        from .results import analyse_results
        return analyse_results(session, study, export, out, options)

    def progress(self, session: Session, study_id: int) -> dict[str, Any]:
        """Scenes, their stimuli and ratings (:meth:`core.Paradigm.progress`'s neutral keys)."""
        p = rating_progress(session, study_id)
        return {"kind": self.kind, "n_groups": p["n_scenes"], "groups": "scenes", "n_units": p["n_stimuli"],
                "units": "stimuli", "n_responses": p["n_ratings"], "target_responses": p["target_ratings"],
                "fill": p["fill"], "n_workers": p["n_workers"], "unit": "ratings", "method": spec_for(session, study_id).method}

    def summary_line(self, session: Session, study_id: int) -> str:
        p = rating_progress(session, study_id)
        method = spec_for(session, study_id).method.upper()
        return (f"{method}: {p['n_scenes']} scenes, {p['n_stimuli']} stimuli, {p['n_ratings']}/{p['target_ratings']} "
                f"ratings ({p['fill']:.0%}), {p['n_workers']} workers")

    def dashboard_context(self, session: Session, study: Study, salt: bytes) -> dict[str, Any]:
        """The study page's tables (ratings per scene, workers with their quality checks) and the spec."""
        return {"spec": spec_for(session, study.id), **rating_export.dashboard_tables(session, study.id, salt=salt)}

    def dashboard_summary(self, session: Session, study: Study, salt: bytes, *,
                          raw_ids: bool = False) -> dict[str, Any]:
        """The figures the study page refreshes itself with: progress, scenes, workers."""
        return {"progress": rating_progress(session, study.id),
                **rating_export.dashboard_tables(session, study.id, salt=salt)}

    def demo_studies(self, manifests: str, seed: int, texts: str) -> list[DemoStudy]:
        """A DCR study on the demo's scenes ("demo-dcr"): small pages, a short training."""
        return [DemoStudy("demo-dcr", "rating study (DCR)", rating_study.demo_study_file(manifests, seed, texts))]

    def precision(self, session: Session, study: Study, spec):
        """Per set, the items' half-widths now (``[stopping]``): server/paradigms/rating/precision.py."""
        from .precision import study_precision

        return study_precision(session, study, tuple(getattr(spec, "resolve", ())))

    def forecast(self, session: Session, study: Study, spec):
        """analysis/rating_forecast.py on the study's own ratings (server/paradigms/rating/precision.py)."""
        from .precision import simulation_forecast

        return simulation_forecast(session, study, spec, self.time_prior(spec).unit_s / spec.ratings_per_page)

    def simulated_worker(self):
        """``perceptlab simulate``'s worker: a P.913-like rater on the study's scale (:mod:`simulated_worker`)."""
        from .simulated_worker import RatingWorker
        return RatingWorker

    def admin_blueprint(self):
        """The ratings.csv download (:mod:`.admin`)."""
        from .admin import bp
        return bp

    def pay_unit(self, spec: RatingSpec) -> PayUnit:
        """A page: the HIT's reward covers ``min_pages`` pages, each later page earns ``bonus_per_page``."""
        return PayUnit("page", Decimal(spec.reward_per_page), Decimal(spec.bonus_per_page), spec.min_pages,
                       spec.max_pages)

    def time_prior(self, spec: RatingSpec) -> TimePrior:
        """A page: ``ratings_per_page`` ratings; once: consent, instructions and the training's ratings."""
        pace = self.SECONDS_PER_RATING[spec.method]
        return TimePrior(spec.ratings_per_page * pace, self.SETUP_SECONDS + spec.quiz_size * pace,
                         lazy_ngettext("%(num)s rating", "%(num)s ratings", spec.ratings_per_page))


PARADIGM = Rating()
