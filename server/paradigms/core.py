"""What every paradigm shares: entering a study, the assignment lock, completion and stop, the
replay rule of idempotent responses, per-page randomness, pages and their trials, and the
:class:`Paradigm` base class whose hooks each paradigm module fills in.

Every function here runs inside the caller's session and leaves committing to it, so that a
request either stores everything it changes or nothing. Concurrency: the caller locks the
assignment row (:func:`lock_assignment`, ``SELECT ... FOR UPDATE``) before a response or an
action changes it, and work is handed out under a per-study advisory lock on PostgreSQL
(:func:`allocation_lock`; SQLite serialises writers already), so two workers never take the
last open slot of a pair or a clip together.
"""
from __future__ import annotations

import datetime as dt
import hmac
import json
import re
import secrets
import sys
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from functools import wraps
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import numpy as np
from sqlalchemy import bindparam, func, insert, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from . import all_paradigms, paradigm_named, stored_kind
from .. import validation as check
from ..allocation import now
from ..db import autocommit_driver_connection
from ..errors import ApiError, invalid, reject_unknown
from ..fingerprints import EntryFingerprint
from ..i18n import gettext
from ..models import Assignment, Page, Study, Worker, utcnow
from ..reasons import reason, reason_text
from ..tokens import TokenClaims, new_nonce
from .display import WindowRequirement
from .media import media_of
from .entry import PILOT_PLATFORM, check_link_entry, check_mturk_entry
from .recruiters import code_completion
from .remote_hint import clean_display_cues
from .stages import TERMINAL_STAGES, TURNED_AWAY, Stage, earns_code

_ID_PATTERN = re.compile(r"[A-Za-z0-9_.:@-]{1,200}")
# The client-made ID of every response (vote_id, response_id).
UUID_PATTERN = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
# Trial IDs are INTEGER columns: a larger ID names no trial (and PostgreSQL would raise on it).
MAX_ROW_ID = 2_147_483_647

UrlFor = Callable[[str], str]
# (session, locked assignment, JSON body) -> (HTTP status, JSON body): one kind of response. The
# assignment is an AssignmentRow (see with_assignment_object for handlers that want the ORM object).
RecordResponse = Callable[[Session, "AssignmentRow", Any], tuple[int, dict[str, Any]]]
# (autocommit driver connection, the verified token, the study's spec, JSON body, now) -> (HTTP status,
# JSON body), or None to hand the response to the paradigm's RecordResponse: the common case of a
# kind of response as one statement on PostgreSQL (see record_in_one_statement).
OneStatementResponse = Callable[[Any, TokenClaims, Any, Any, dt.datetime], "tuple[int, dict[str, Any]] | None"]


# ---------------------------------------------------------------- study parameters, once per process

# A study's parameters never change after creation (pausing changes only Study.status), so each
# process reads a study's paradigm and spec once per engine: the response paths then find both with
# two dict lookups and no query. Keyed by the engine object (weakly: a disposed engine's entries go
# with it), which is much cheaper than rendering its URL on every request.
_STUDIES: weakref.WeakKeyDictionary[Any, dict[int, tuple[Paradigm, Any]]] = weakref.WeakKeyDictionary()


def study_paradigm(session: Session, study_id: int) -> tuple[Paradigm, Any]:
    """``(paradigm, spec)`` of a study by its ID, read once per process and database engine.

    Parameters
    ----------
    session : Session
    study_id : int

    Returns
    -------
    tuple
        The study's :class:`Paradigm` and its spec (the paradigm's ``spec_class``).
    """
    bind = session.get_bind()
    studies = _STUDIES.get(bind)
    if studies is None:
        studies = _STUDIES.setdefault(bind, {})
    found = studies.get(study_id)
    if found is None:
        config = session.scalar(select(Study.config).where(Study.id == study_id))
        if config is None:
            raise ApiError(404, "not_found", "no such study")
        paradigm = paradigm_named(stored_kind(config))
        found = studies.setdefault(study_id, (paradigm, paradigm.spec_class.from_config(config)))
    return found


def known_study(engine, study_id: int) -> tuple[Paradigm, Any] | None:
    """``(paradigm, spec)`` of a study this process has read already (:func:`study_paradigm`) for ``engine``;
    None otherwise. Never queries: for paths below Flask that hold no session (the fast lane)."""
    return _STUDIES.get(engine, {}).get(study_id)


def spec_for(session: Session, study_id: int):
    """The study's parameters (its paradigm's spec), parsed once per process."""
    return study_paradigm(session, study_id)[1]


def record_in_one_statement(engine, name: str, claims: TokenClaims, payload: Any,
                            now: dt.datetime) -> tuple[int, dict[str, Any]] | None:
    """Store a response of the kind ``name`` in one statement, on PostgreSQL, when its paradigm has a
    handler for that kind (:attr:`ResponseKind.one_statement`) and the process knows the study
    named by the token; return ``(HTTP status, body)``, or None when the regular path must decide.

    The handler's statement is its own transaction (autocommit: no BEGIN or COMMIT round trip) and
    checks the token's nonce against the assignment row it locks. It changes nothing when it returns
    None. A clash or a lost connection (a vote ID stored concurrently by another assignment, a
    deadlock, the server gone) also hands the response to the regular path, which answers it as it
    always did: responses are idempotent, so a statement whose outcome was lost with the connection
    is a replay there. Any other database error (a schema without the function) is raised: a fast
    path that silently fell back on every request would only hide it.
    """
    if engine.dialect.name != "postgresql" or claims.study_id is None:
        return None
    found = known_study(engine, claims.study_id)  # the first response of a study in a process: None
    if found is None:
        return None
    paradigm, spec = found
    kind = paradigm.response_kind(name)
    handler = None if kind is None else kind.one_statement
    if handler is None:
        return None
    dbapi = engine.dialect.loaded_dbapi
    try:
        with autocommit_driver_connection(engine) as connection:
            return handler(connection, claims, spec, payload, now)
    except (dbapi.IntegrityError, dbapi.OperationalError):
        return None


_FIXED: weakref.WeakKeyDictionary[Any, dict[str, dict[int, Any]]] = weakref.WeakKeyDictionary()


def fixed_study_facts(session: Session, name: str) -> dict[int, Any]:
    """A per-process ``study ID -> value`` dict, per database engine, for facts about a study that
    never change after it is created (its pairs, stimuli, naming key): a paradigm fills it on first
    use and then answers requests from memory. ``name`` keeps each kind of fact apart."""
    bind = session.get_bind()
    caches = _FIXED.get(bind)
    if caches is None:
        caches = _FIXED.setdefault(bind, {})
    return caches.setdefault(name, {})


def stored_media(session: Session, study_id: int) -> dict:
    """The study's media (:func:`server.paradigms.media.media_of`), read once per process (fixed at creation)."""
    known = fixed_study_facts(session, "media")
    media = known.get(study_id)
    if media is None:
        media = known.setdefault(study_id, media_of(session.get(Study, study_id).config))
    return media


class StudyRef(NamedTuple):
    """What handing out work needs of a study: its ID (the allocation lock, the queries) and its seed
    (:func:`seeded_rng`). Both are fixed at creation; the :class:`~server.models.Study` object would
    cost a query and the parsing of its whole configuration on every page start."""

    id: int
    seed: int


_STUDY_SEED = select(Study.__table__.c.seed).where(Study.__table__.c.id == bindparam("study_id"))


def study_ref(session: Session, study_id: int) -> StudyRef:
    """The study's :class:`StudyRef`, read once per process and database engine."""
    refs = fixed_study_facts(session, "core.study_ref")
    ref = refs.get(study_id)
    if ref is None:
        seed = session.connection().execute(_STUDY_SEED, {"study_id": study_id}).scalar_one_or_none()
        if seed is None:
            raise ApiError(404, "not_found", "no such study")
        ref = refs.setdefault(study_id, StudyRef(study_id, int(seed)))
    return ref


# Built once: a reused statement keeps its compiled form and cache key, where building it on every
# request cost about as much CPU as loading the row (every vote and action takes this lock).
_LOCK_ASSIGNMENT = select(Assignment).where(Assignment.id == bindparam("assignment_id")).with_for_update()


def lock_assignment(session: Session, assignment_id: int) -> Assignment:
    """The assignment row, locked for this transaction (no-op lock on SQLite, which serialises writers)."""
    assignment = session.scalar(_LOCK_ASSIGNMENT, {"assignment_id": assignment_id})
    if assignment is None:
        raise ApiError(404, "not_found", "no such assignment")
    return assignment


class AssignmentRow(NamedTuple):
    """The columns of an assignment that most worker requests need, as a plain row.

    A response handler (:attr:`ResponseKind.record`) gets this, locked, instead of the ORM object,
    and :meth:`Paradigm.state` may get it unlocked: loading an :class:`~server.models.Assignment`
    through the ORM costs more CPU than the whole vote's SQL, and most requests only read these
    columns. Code that changes the assignment, or needs its other columns or its relations, loads
    the object with :meth:`load` (or :func:`as_object`).
    """

    id: int
    study_id: int
    worker_id: int
    stage: str
    pages_completed: int
    token_nonce: str
    pilot: bool  # a pilot's (server/pilot.py): its votes fill no pair's target

    def load(self, session: Session) -> Assignment:
        """The assignment as an ORM object, whose changes the session writes at commit."""
        return session.get(Assignment, self.id)


class FinishedRow(NamedTuple):
    """An :class:`AssignmentRow` just completed by :func:`finish_in_one_statement`, with the columns an MTurk
    worker's completion shows (:func:`completion_info`): its State needs no ORM object then
    (:func:`ended_message_and_completion`)."""

    id: int
    study_id: int
    worker_id: int
    stage: str
    pages_completed: int
    token_nonce: str
    pilot: bool
    platform: str
    external_id: str
    turk_submit_to: str | None
    completion_code: str | None

    def load(self, session: Session) -> Assignment:
        """The assignment as an ORM object, whose changes the session writes at commit."""
        return session.get(Assignment, self.id)


_assignment = Assignment.__table__
_ASSIGNMENT_ROW = (select(_assignment.c.id, _assignment.c.study_id, _assignment.c.worker_id, _assignment.c.stage,
                          _assignment.c.pages_completed, _assignment.c.token_nonce, _assignment.c.pilot)
                   .where(_assignment.c.id == bindparam("assignment_id")))
_LOCK_ASSIGNMENT_ROW = _ASSIGNMENT_ROW.with_for_update()


def assignment_row(session: Session, assignment_id: int, *, lock: bool = False) -> AssignmentRow | None:
    """The assignment as an :class:`AssignmentRow` (locked for this transaction with ``lock``), or None."""
    statement = _LOCK_ASSIGNMENT_ROW if lock else _ASSIGNMENT_ROW
    row = session.connection().execute(statement, {"assignment_id": assignment_id}).first()
    return None if row is None else AssignmentRow._make(row)


def lock_assignment_row(session: Session, assignment_id: int) -> AssignmentRow:
    """:func:`lock_assignment` without the ORM: the same row lock, returning an :class:`AssignmentRow`.

    Raises
    ------
    ApiError
        404 ``not_found`` when no assignment has this ID.
    """
    row = assignment_row(session, assignment_id, lock=True)
    if row is None:
        raise ApiError(404, "not_found", "no such assignment")
    return row


def check_nonce(assignment: Assignment | AssignmentRow | None, nonce: str) -> None:
    """A 403 unless the assignment exists and its token nonce is ``nonce`` (a token that was not revoked)."""
    if assignment is None or not hmac.compare_digest(assignment.token_nonce, nonce):
        raise ApiError(403, "bad_token", "the token is no longer valid")


def as_object(session: Session, assignment: Assignment | AssignmentRow | FinishedRow) -> Assignment:
    """The assignment as an ORM object (loaded when ``assignment`` is a row)."""
    return assignment if isinstance(assignment, Assignment) else assignment.load(session)


_SET_STAGE = (update(_assignment).where(_assignment.c.id == bindparam("assignment_id"))
              .values(stage=bindparam("stage")))


def move_to(session: Session, assignment: Assignment | AssignmentRow, stage: Stage) -> Assignment | AssignmentRow:
    """The assignment at ``stage``: an ORM object is changed (written at commit), a row is updated
    by one statement and returned with its new stage."""
    if isinstance(assignment, Assignment):
        assignment.stage = stage
        return assignment
    session.connection().execute(_SET_STAGE, {"assignment_id": assignment.id, "stage": stage.value})
    return assignment._replace(stage=stage.value)


def with_assignment_object(record: Callable[[Session, Assignment, Any], tuple[int, dict[str, Any]]]) -> RecordResponse:
    """Adapt a response handler written for the ORM :class:`~server.models.Assignment` to
    :data:`RecordResponse` (which is given a :class:`AssignmentRow`)."""
    @wraps(record)
    def adapted(session: Session, assignment: AssignmentRow, payload: Any) -> tuple[int, dict[str, Any]]:
        return record(session, assignment.load(session), payload)
    return adapted


_ADVISORY_LOCK = text("SELECT pg_advisory_xact_lock(:key)")
HOLDS_ALLOCATION_LOCK = "perceptlab.holds_allocation_lock"
"""The key of ``session.info`` that :func:`allocation_lock` sets: the session's transaction holds a study's
allocation lock, which every other hand-out of the study's work waits for until the transaction ends (the
API's actions commit as soon as the action's work is done, before reading and building the State)."""


def allocation_lock(session: Session, study: Study | StudyRef, namespace: int) -> None:
    """Serialise the hand-out of a study's shared work (PostgreSQL advisory lock until commit).

    ``namespace`` keeps each paradigm's locks apart (paired comparison 7_000_000, motion 7_100_000).
    """
    if session.get_bind().dialect.name == "postgresql":
        session.connection().execute(_ADVISORY_LOCK, {"key": namespace + study.id})
        session.info[HOLDS_ALLOCATION_LOCK] = True


# ---------------------------------------------------------------- endings

def give_code(assignment: Assignment) -> None:
    """Give the assignment its completion code (once: a code already given is kept)."""
    if assignment.completion_code is None:
        assignment.completion_code = secrets.token_hex(5).upper()


def complete(assignment: Assignment) -> None:
    """The worker finished: stage ``completed`` with a completion code.

    Unless the worker was turned away meanwhile in another assignment of the study (two HITs open
    at once): then this assignment is turned away too, with the same stage and reason, and earns a
    code only as :func:`stop` gives one (stopped after paid units)."""
    worker = assignment.worker
    if worker.status in TURNED_AWAY:
        follow_worker(assignment)
        return
    assignment.stage = Stage.COMPLETED
    assignment.completed_at = utcnow()
    give_code(assignment)


def stop(assignment: Assignment, code: str, **args: Any) -> None:
    """Turn the worker away in this assignment and in the study for the reason ``code``
    (:data:`server.reasons.REASONS`: it says the stage, ``stopped`` or ``disqualified``, and the message,
    filled with ``args``, which the worker reads in their language).

    The worker's record keeps the code, its arguments and the message in English (``status_reason``).
    The assignment gets a completion code only when it earned one (:func:`~server.paradigms.stages.earns_code`:
    stopped after paid units); a disqualified worker has none."""
    why = reason(code)
    if why.stage not in TURNED_AWAY:
        raise ValueError(f"reason {code!r} does not turn a worker away (its stage is {why.stage})")
    worker = assignment.worker
    worker.status, worker.status_reason = why.stage, why.english(args)
    worker.status_reason_code, worker.status_reason_args = code, args or None
    follow_worker(assignment)


def follow_worker(assignment: Assignment) -> None:
    """End ``assignment`` as its worker was turned away (in it or in another assignment of the study): the
    worker's stage, reason code and arguments."""
    worker = assignment.worker
    end_assignment(assignment, Stage(worker.status), worker.status_reason_code, worker.status_reason_args)


def end_assignment(assignment: Assignment, stage: Stage, code: str | None, args: dict[str, Any] | None = None) -> None:
    """Move ``assignment`` to the terminal ``stage`` for the reason ``code`` (this assignment's own, such
    as ``study_full`` or a refused display, which leaves the worker as they were), with a completion code
    only when it earned one."""
    assignment.stage = stage
    assignment.reason_code, assignment.reason_args = code, args or None
    if earns_code(stage, assignment.pages_completed):
        give_code(assignment)


def reason_message(assignment: Assignment) -> str | None:
    """What the worker of an ended ``assignment`` reads, in their language: its reason code's message, else
    (records made before codes) the worker's stored reason."""
    if assignment.stage == Stage.FULL:
        return reason_text("study_full", None)
    return reason_text(assignment.reason_code, assignment.reason_args, assignment.worker.status_reason)


def completion_info(assignment: Assignment | FinishedRow) -> dict[str, Any] | None:
    """How the worker submits: MTurk's form or a completion code (with the study recruiter's redirect:
    :func:`server.paradigms.recruiters.code_completion`). A worker stopped by a quality rule after
    completing paid units may still submit them; the experimenter decides at review."""
    if not earns_code(assignment.stage, assignment.pages_completed) or assignment.completion_code is None:
        return None
    if assignment.platform == "mturk":
        return {"mode": "mturk", "submit_url": assignment.turk_submit_to.rstrip("/") + "/mturk/externalSubmit",
                "assignment_id": assignment.external_id, "code": assignment.completion_code}
    return code_completion(assignment)


def ended_message_and_completion(paradigm: Paradigm, session: Session, assignment: Assignment | AssignmentRow
                                 | FinishedRow) -> tuple[str | None, dict | None]:
    """The State's ``message`` and ``completion`` of an assignment at a terminal stage. The row of an MTurk
    assignment that :func:`finish_in_one_statement` completed holds all they need (no message: the base
    :meth:`Paradigm.stop_message` has none for a completion), so the finish needs no ORM object and no
    second statement; any other assignment is loaded."""
    if (isinstance(assignment, FinishedRow) and assignment.stage == Stage.COMPLETED and assignment.platform == "mturk"
            and type(paradigm).stop_message is Paradigm.stop_message):
        return None, completion_info(assignment)
    ended = as_object(session, assignment)
    return paradigm.stop_message(session, ended), completion_info(ended)


# ---------------------------------------------------------------- responses after the end

ENDED = "assignment_ended"  # the error code of a response sent to an assignment that has ended


def ended_error(stage: str) -> ApiError:
    """The 409 answer to a new response at a terminal stage (a replay of a stored one is still
    answered ``duplicate``): nothing sent after a stop, a disqualification, the completion or a full
    study is stored or counted toward a pair's or a clip's target."""
    return ApiError(409, ENDED, f"This assignment has ended (stage {stage}): no more answers are accepted.")


_worker = Worker.__table__
_WORKER_STATUS = select(_worker.c.status).where(_worker.c.id == bindparam("worker_id"))


def refused_after_the_end(record: RecordResponse) -> RecordResponse:
    """Wrap a paradigm's response handler so that a worker turned away in another assignment of the
    study (stopped or disqualified there) is turned away in this one at its next response.

    The assignment is stopped with the worker's stage and reason (written at commit), then the
    handler meets it at that terminal stage: a replay of a stored response is still answered, a new
    one refused (:func:`ended_error`); the refusal is returned, not raised, so that the stop is kept.
    Costs one query per response on the regular path (the one-statement path defers such votes)."""
    @wraps(record)
    def guarded(session: Session, assignment: AssignmentRow, payload: Any) -> tuple[int, dict[str, Any]]:
        if assignment.stage in TERMINAL_STAGES:
            return record(session, assignment, payload)
        status = session.connection().execute(_WORKER_STATUS, {"worker_id": assignment.worker_id}).scalar()
        if status not in TURNED_AWAY:
            return record(session, assignment, payload)
        ended = assignment.load(session)
        follow_worker(ended)
        try:
            return record(session, assignment._replace(stage=ended.stage), payload)
        except ApiError as exc:
            return exc.status, exc.to_dict()
    return guarded


# ---------------------------------------------------------------- idempotent responses

def check_replay(stored_trial_id: int | None, trial_id: int, same_response: bool, id_field: str) -> None:
    """A response for an answered trial is a retry only when its client ID was stored for this very
    trial with the same content; else it is refused.

    Parameters
    ----------
    stored_trial_id : int or None
        The trial the response's client ID was stored for, or None when it was never stored.
    trial_id : int
        The trial the response is for.
    same_response : bool
        Whether the stored response has the same content.
    id_field : str
        The name of the client ID field, for the message (``vote_id``, ``response_id``).

    Raises
    ------
    ApiError
        409 ``trial_already_answered`` (another response answered the trial) or ``conflict``
        (the client ID was used for another trial or another answer).
    """
    if stored_trial_id is None:
        raise ApiError(409, "trial_already_answered", "this trial was answered already")
    if stored_trial_id != trial_id or not same_response:
        raise ApiError(409, "conflict", f"this {id_field} was already used for a different response")


# ---------------------------------------------------------------- pages and trials

def seeded_rng(study: Study | StudyRef, assignment: Assignment, page_index: int) -> np.random.Generator:
    """The random generator of one page of an assignment: the same page always gets the same draws."""
    return np.random.default_rng([study.seed, assignment.id, page_index])


_PAGE_COUNT = select(func.count()).select_from(Page.__table__).where(
    Page.__table__.c.assignment_id == bindparam("assignment_id"))


def page_count(session: Session, assignment_id: int) -> int:
    """Pages the assignment was given so far (the next page's index)."""
    return int(session.connection().execute(_PAGE_COUNT, {"assignment_id": assignment_id}).scalar_one())


class NewPage(NamedTuple):
    """A page just stored: what its trials and the page's random draws need of it."""

    id: int
    index: int


_INSERT_PAGE = insert(Page.__table__).returning(Page.__table__.c.id)


def new_page(session: Session, assignment: Assignment, kind: Stage, index: int | None = None,
             reserved_until: dt.datetime | None = None, held: bool = False) -> NewPage:
    """A new page (block) of the assignment; ``reserved_until`` makes it hold its share of the work,
    ``held`` makes its paradigm count its open trials on the work they show (paired comparison: its pairs'
    ``n_held``, server/paradigms/paired/allocation.py).

    One INSERT without an ORM object (whose flush cost a page start more CPU than the statement):
    pages are read back by query, never from the session."""
    if index is None:
        index = page_count(session, assignment.id)
    page_id = session.connection().execute(_INSERT_PAGE, {
        "assignment_id": assignment.id, "index": index, "kind": kind.value, "created_at": now(session),
        "reserved_until": reserved_until, "held": held}).scalar_one()
    return NewPage(page_id, index)


def add_trials(session: Session, model: type, page: NewPage, assignment: Assignment,
               rows: list[dict[str, Any]]) -> None:
    """Store a page's trials (rows of ``model``) in the order given, numbered from position 0.

    One multi-row INSERT without ORM objects (a page's twenty trials as objects cost more CPU than
    the rest of starting the page): the trials are read back by query, never from the session."""
    if not rows:
        return
    owner = {"page_id": page.id, "assignment_id": assignment.id, "worker_id": assignment.worker_id}
    session.connection().execute(insert(model.__table__),
                                 [{**owner, "position": position, **row} for position, row in enumerate(rows)])


_OPEN_TRIALS: dict[type, Any] = {}  # trial model -> its count statement, built once


def open_trials(session: Session, model: type, page_id: int) -> int:
    """Unanswered trials (rows of ``model``) of a page."""
    statement = _OPEN_TRIALS.get(model)
    if statement is None:
        table = model.__table__
        statement = _OPEN_TRIALS.setdefault(model, select(func.count()).select_from(table).where(
            table.c.page_id == bindparam("page_id"), ~table.c.answered))
    return int(session.connection().execute(statement, {"page_id": page_id}).scalar_one())


_STORE_ENVIRONMENT = (update(_assignment)
                      .where(_assignment.c.id == bindparam("assignment_id"),
                             _assignment.c.token_nonce == bindparam("nonce"))
                      .values(environment=bindparam("environment", type_=_assignment.c.environment.type))
                      .returning(_assignment.c.id))


def record_environment(session: Session, assignment_id: int, nonce: str, payload: Any) -> None:
    """Validate the worker's window, screen and browser (informative) and keep them on the assignment
    whose token nonce is ``nonce``: one statement, no ORM object.

    Raises
    ------
    ApiError
        400 for a malformed environment; 404 ``not_found`` when no assignment has this ID, 403
        ``bad_token`` when its token was revoked (another nonce).
    """
    try:
        environment = clean_environment(payload)
    except ApiError:
        # A revoked token hears that first, as everywhere (and a deleted assignment a 404).
        check_nonce(lock_assignment_row(session, assignment_id), nonce)
        raise
    stored = session.connection().execute(_STORE_ENVIRONMENT, {
        "assignment_id": assignment_id, "nonce": nonce, "environment": environment}).first()
    if stored is None:
        check_nonce(lock_assignment_row(session, assignment_id), nonce)
        raise RuntimeError("the environment was not stored, yet the assignment and its nonce are there")


def environment_in_one_statement(engine, claims: TokenClaims, payload: Any) -> bool:
    """:func:`record_environment`'s common case on PostgreSQL: the one UPDATE in its own transaction on a driver
    connection (autocommit: no session, no BEGIN or COMMIT round trip). False, with nothing stored, whenever
    :func:`record_environment` must decide (another database, a malformed environment, a revoked token, a
    deleted assignment, a lost connection): it then answers as it always did."""
    if engine.dialect.name != "postgresql":
        return False
    try:
        environment = clean_environment(payload)
    except ApiError:
        return False
    stored = _one_autocommit_row(engine, _STORE_ENVIRONMENT_DRIVER, (
        engine.dialect._json_serializer(environment) if engine.dialect._json_serializer else
        json.dumps(environment), claims.assignment_id, claims.nonce))
    return stored is not None


def _one_autocommit_row(engine, statement: str, params: tuple) -> tuple | None:
    """The row ``statement`` returns, run alone in its own transaction on a driver connection (autocommit); None
    when it returns none or the connection is lost (the one-statement paths then leave the request to the
    session's path, which answers an outage as every route does)."""
    try:
        with autocommit_driver_connection(engine) as connection:
            return connection.execute(statement, params).fetchone()
    except engine.dialect.loaded_dbapi.OperationalError:
        return None


def _study_of_one_statement(engine, claims: TokenClaims, paradigm_flag: str):
    """``known_study``'s (paradigm, spec) of the token's study when the action may be one statement: PostgreSQL,
    a study this process knows, whose paradigm sets ``paradigm_flag``; else None."""
    if engine.dialect.name != "postgresql" or claims.study_id is None:
        return None
    found = known_study(engine, claims.study_id)
    if found is None or not getattr(found[0], paradigm_flag):
        return None
    return found


# The environment as SQLAlchemy's JSON type stores it (the engine's serializer, else json.dumps), by the driver.
_STORE_ENVIRONMENT_DRIVER = ("UPDATE assignment SET environment = CAST(%s AS JSON) WHERE assignment.id = %s "
                             "AND assignment.token_nonce = %s RETURNING assignment.id")
# consent_in_one_statement: the assignment at consent, of the token's study and nonce, moved to instructions.
_CONSENT_DRIVER = ("UPDATE assignment SET stage = 'instructions' WHERE assignment.id = %s "
                   "AND assignment.token_nonce = %s AND assignment.study_id = %s AND assignment.stage = 'consent' "
                   "RETURNING assignment.id, "
                   "assignment.study_id, assignment.worker_id, assignment.stage, assignment.pages_completed, "
                   "assignment.token_nonce, assignment.pilot")


def consent_in_one_statement(engine, claims: TokenClaims) -> AssignmentRow | None:
    """The ``consent`` action in one statement on PostgreSQL, for a study this process knows whose paradigm's
    consent is a stage move (:attr:`Paradigm.consent_is_a_stage_move`): the assignment at stage consent moved to
    instructions in its own transaction (autocommit, on a driver connection); returns the assignment after it.
    None, with nothing changed, for everything the paradigm's action decides (another stage: a repeated click, a
    wrong one; a revoked token; another database; a lost connection)."""
    if _study_of_one_statement(engine, claims, "consent_is_a_stage_move") is None:
        return None
    row = _one_autocommit_row(engine, _CONSENT_DRIVER, (claims.assignment_id, claims.nonce, claims.study_id))
    return None if row is None else AssignmentRow._make(row)


# finish_in_one_statement: complete()'s common case on the row. A worker turned away in another assignment is
# left to complete() (which turns this one away too); the code already given, if any, is kept (give_code).
_FINISH_DRIVER = ("UPDATE assignment SET stage = 'completed', completed_at = %s, "
                  "completion_code = COALESCE(assignment.completion_code, %s) "
                  "WHERE assignment.id = %s AND assignment.token_nonce = %s AND assignment.study_id = %s "
                  "AND assignment.stage = 'page_done' AND assignment.pages_completed >= %s "
                  "AND NOT EXISTS (SELECT 1 FROM worker WHERE worker.id = assignment.worker_id "
                  "AND worker.status IN ('stopped', 'disqualified')) "
                  "RETURNING assignment.id, assignment.study_id, assignment.worker_id, assignment.stage, "
                  "assignment.pages_completed, assignment.token_nonce, assignment.pilot, assignment.platform, "
                  "assignment.external_id, assignment.turk_submit_to, assignment.completion_code")


def finish_in_one_statement(engine, claims: TokenClaims) -> FinishedRow | None:
    """The ``finish`` action in one statement on PostgreSQL, for a study this process knows whose paradigm's finish
    only completes the assignment (:attr:`Paradigm.finish_completes`): the assignment at stage page_done with at
    least the spec's ``min_pages`` completed, whose worker was not turned away elsewhere, completed with its code
    (:func:`complete`, :func:`give_code`) in its own transaction; returns the assignment after it. None, with
    nothing changed, for everything the paradigm's action decides (another stage, too few pages, a worker turned
    away, a revoked token, another database, a lost connection)."""
    found = _study_of_one_statement(engine, claims, "finish_completes")
    if found is None:
        return None
    row = _one_autocommit_row(engine, _FINISH_DRIVER, (
        utcnow(), secrets.token_hex(5).upper(), claims.assignment_id, claims.nonce, claims.study_id,
        int(found[1].min_pages)))
    return None if row is None else FinishedRow._make(row)


def clean_environment(payload: Any) -> dict[str, Any]:
    """The worker's window, screen, browser and remote-desktop cues (informative), validated: else a 400 naming
    the problem."""
    if not isinstance(payload, dict):
        raise invalid("the body must be a JSON object")
    reject_unknown(payload, ("window", "screen", "user_agent", "display"))
    clean: dict[str, Any] = {"window": check.size_object(payload.get("window"), "window", with_dpr=True),
                             "screen": check.size_object(payload.get("screen"), "screen", with_dpr=False)}
    agent = payload.get("user_agent")
    # Truncated rather than refused (browsers' strings grow), but never stored with control characters.
    agent = check.text(agent, "user_agent", max_length=1 << 20)
    clean["user_agent"] = agent[:check.USER_AGENT_LENGTH] if agent is not None else None
    cues = clean_display_cues(payload.get("display"))
    if cues is not None:  # the remote-desktop hint's cues (remote_hint.remote_desktop_cues)
        clean["display"] = cues
    clean["recorded_at"] = utcnow().isoformat()
    return clean


# ---------------------------------------------------------------- what a paradigm declares

@dataclass(frozen=True)
class PayUnit:
    """What a paradigm pays for, in MTurk terms: a HIT's reward covers ``required`` units, and every
    unit after that (up to ``most``) earns ``bonus``.

    Attributes
    ----------
    name : str
        The unit ("page" in paired comparison, "session" in motion matching).
    reward : Decimal
        Reward per required unit.
    bonus : Decimal
        Bonus per unit after the required ones.
    required, most : int
        Units a worker must complete before submitting, and the most that count.
    """
    name: str
    reward: Decimal
    bonus: Decimal
    required: int
    most: int

    @property
    def hit_reward(self) -> Decimal:
        """The HIT reward: ``reward`` for each of the ``required`` units."""
        return (self.reward * self.required).quantize(Decimal("0.01"))

    def extra_units(self, done: int) -> int:
        """Units past the required ones that earn a bonus, of ``done`` completed."""
        return max(0, min(done, self.most) - self.required)


@dataclass(frozen=True)
class TimePrior:
    """How long a paradigm expects its work to take before any worker has finished (server/worker_time.py
    replaces it by the measured median once enough have).

    Attributes
    ----------
    unit_s : float
        Seconds one unit of pay (:class:`PayUnit`) takes.
    setup_s : float
        Seconds once per assignment before the first unit (consent, instructions, a quiz).
    what : str
        What a unit holds, for people: "20 comparisons", "46 trials".
    """
    unit_s: float
    setup_s: float
    what: str


@dataclass
class StudyExport:
    """A paradigm's export files: name -> CSV text, what each holds (``(file name, description)`` lines
    for the terminal), and a warning for stderr (nothing to analyse yet)."""
    files: dict[str, str] = field(default_factory=dict)
    report: list[tuple[str, str]] = field(default_factory=list)
    warning: str | None = None


@dataclass(frozen=True)
class DemoStudy:
    """A study ``perceptlab demo`` creates on the demo's prepared scenes (:meth:`Paradigm.demo_studies`).

    Attributes
    ----------
    slug : str
        The study's slug (its worker link ``/s/<slug>``).
    label : str
        What the demo prints before the link ("rating study (DCR)").
    text : str
        The study file, written once into the demo folder as ``demo_<slug>.toml`` (paths relative to it).
    """
    slug: str
    label: str
    text: str


@dataclass(frozen=True)
class ResultsOptions:
    """The options of ``perceptlab results`` that an analysis may use (:meth:`Paradigm.analyse_results`).

    Attributes
    ----------
    n_boot : int or None
        Bootstrap resamples (None: the analysis's configured default).
    units : str or None
        Unit of scales, where the analysis has such a choice (None: its default).
    allow_disconnected : bool
        Analyse designs that do not connect every item yet.
    plots : bool
        Draw the plots.
    top : int
        Rows of a ranking to print (0: none).
    """
    n_boot: int | None = None
    units: str | None = None
    allow_disconnected: bool = False
    plots: bool = True
    top: int = 10


@dataclass(frozen=True)
class SetPrecision:
    """How precise one set's estimates are now (a paradigm's :meth:`Paradigm.precision`; server/stopping.py).

    ``halfwidths`` are the items' 95 % interval half-widths in the paradigm's unit (NaN: no estimate yet, which
    meets no target); ``spreads`` the per-item SD of one response where the paradigm knows it (ratings), for the
    projection of what is still needed; ``resolved`` says, for each ``"itemA|itemB"`` of ``[stopping] resolve``
    whose items both belong to the set, whether the interval of their difference excludes 0; ``workers`` how many
    different workers kept by the screening answered each item (``[stopping] min_workers``; empty: unknown, and
    then no item meets the target)."""
    name: str
    item_ids: tuple[str, ...]
    halfwidths: tuple[float, ...]
    responses: int
    resolved: dict[str, bool] = field(default_factory=dict)
    spreads: tuple[float, ...] = ()
    workers: tuple[int, ...] = ()


@dataclass(frozen=True)
class Precision:
    """A study's precision now: per set (the whole study is one set for a paradigm without sets), the unit of
    the half-widths, and the responses (non-pilot, non-gold) it was measured on."""
    unit: str
    sets: tuple[SetPrecision, ...]
    responses: int
    note: str = ""


@dataclass
class ResultsAnalysis:
    """What ``perceptlab results`` runs after the export (:meth:`Paradigm.analyse_results`).

    Attributes
    ----------
    source : str
        The export file analysed, for the terminal ("votes.csv").
    run : callable
        ``run(folder)``: analyse into ``folder`` (made if missing), printing with ``click.echo``;
        called after the database session is closed. A :class:`server.cli.base.UserError` it raises
        is the command's one error line.
    notes : list of str
        Lines printed under the export's report (files the hook wrote beside the export, why one is missing).
    """
    source: str
    run: Callable[[Path], None]
    notes: list[str] = field(default_factory=list)


RESPONSE_KIND_NAME = re.compile(r"[a-z][a-z0-9-]{0,39}")


@dataclass(frozen=True)
class ResponseKind:
    """One kind of response a paradigm takes, declared once in :attr:`Paradigm.response_kinds`: the
    worker API's route ``POST /api/v1/assignments/<id>/<name>`` (server/views/api.py), its entry in
    the OpenAPI document (server/openapi.py), its body limit and, with ``one_statement``, the fast
    lane's path (server/views/fast_lane.py) all come from this declaration.

    Attributes
    ----------
    name : str
        The URL segment (lower-case letters, digits and ``-``), unique among every known paradigm's kinds.
    record : RecordResponse
        The regular handler: ``(session, locked AssignmentRow, body) -> (HTTP status, body)``. Wrap it in
        :func:`refused_after_the_end` (a worker turned away elsewhere is turned away here) and, for a
        handler written for the ORM object, :func:`with_assignment_object`. A stored answer with
        ``page_complete`` true gets the assignment's new State added by the view.
    summary : str
        One line for the OpenAPI document.
    request_schema : dict
        JSON Schema (2020-12) of the body; it may ``$ref`` ``#/components/schemas/<name>`` of the
        shared document (server/openapi.yaml) or of ``schemas``.
    response_schema : dict or None
        JSON Schema of the stored answer (status ``stored_status``).
    one_statement : OneStatementResponse or None
        PostgreSQL's one-statement path of the common case (:func:`record_in_one_statement`); it returns
        None, having changed nothing, for whatever ``record`` must decide.
    max_body : int
        The largest body in bytes (a larger one is a 413 before it is read).
    operation_id : str
        The OpenAPI operationId (default: ``post`` and the name in CamelCase).
    stored_status : int
        The HTTP status of a stored response (201; 200 for a kind whose retry answers the same).
    operation : Mapping
        More of the OpenAPI operation object (``description``; ``responses`` by status, replacing the
        shared answers of that status).
    schemas : Mapping
        Named schemas the kind's schemas refer to (``#/components/schemas/<name>``), added to the document.
    """
    name: str
    record: RecordResponse
    summary: str
    request_schema: dict
    response_schema: dict | None = None
    one_statement: OneStatementResponse | None = None
    max_body: int = check.WORKER_BODY_BYTES
    operation_id: str = ""
    stored_status: int = 201
    operation: Mapping[str, Any] = field(default_factory=dict)
    schemas: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if not RESPONSE_KIND_NAME.fullmatch(self.name):
            raise ValueError(f"response kind {self.name!r}: a name is lower-case letters, digits and '-'")
        if self.max_body <= 0:
            raise ValueError(f"response kind {self.name!r}: max_body must be positive")
        if not self.operation_id:
            object.__setattr__(self, "operation_id",
                               "post" + "".join(part.capitalize() for part in self.name.split("-")))


def response_kinds() -> dict[str, tuple[Paradigm, ResponseKind]]:
    """Every response kind of every known paradigm, by name, with the paradigm declaring it.

    Raises
    ------
    ValueError
        Two paradigms declare the same name (one route, one body limit and one OpenAPI entry per name).
    """
    found: dict[str, tuple[Paradigm, ResponseKind]] = {}
    for paradigm in all_paradigms():
        for kind in paradigm.response_kinds:
            if kind.name in found:
                raise ValueError(f"the response kind {kind.name!r} is declared by the {found[kind.name][0].kind!r} "
                                 f"and the {paradigm.kind!r} paradigms")
            found[kind.name] = (paradigm, kind)
    return found


# Built once: every entry asks for the worker's and the assignment's rows, in one round trip (their IDs; the
# ORM objects are loaded only when they exist: a new worker's entry, the common one, loads none).
_FIND_WORKER_AND_ASSIGNMENT = select(
    select(_worker.c.id).where(_worker.c.study_id == bindparam("study_id"), _worker.c.platform == bindparam("platform"),
                               _worker.c.external_id == bindparam("worker_external_id")).scalar_subquery(),
    select(_assignment.c.id).where(_assignment.c.study_id == bindparam("study_id"),
                                   _assignment.c.platform == bindparam("platform"),
                                   _assignment.c.external_id == bindparam("assignment_external_id")).scalar_subquery())


_INSERT_WORKER = insert(_worker).returning(_worker.c.id, _worker.c.status, _worker.c.pilot)


class Paradigm:
    """One experimental paradigm: the hooks its module fills in, and the lifecycle every paradigm
    shares (entering a study, running out of work, reopening a full assignment).

    Subclasses set the class attributes and implement the hooks that raise
    :class:`NotImplementedError` here; :mod:`server.paradigms` finds them by ``kind``.
    """

    kind: ClassVar[str]                   # Study.config["kind"] and [study] kind of its study files
    # The name of its State's schema in the OpenAPI document (the shared server/openapi.yaml or its package's
    # openapi.yaml part): GET .../state and POST .../actions answer one of every paradigm's (server/openapi.py).
    state_schema: ClassVar[str | None] = None
    title: ClassVar[str]                  # for people: "paired comparison"
    spec_class: ClassVar[type]            # a frozen dataclass with StoredSpec's to_config/from_config
    template: ClassVar[str]               # the documented study file (perceptlab study template)
    app_stages: ClassVar[frozenset[Stage]]  # stages the browser app runs (else a server-rendered page)
    app_template: ClassVar[str]           # the page of the browser app
    # Jinja macros of the paradigm's parts of the server-rendered worker pages (preview, instructions,
    # done), imported by those pages with their context.
    worker_pages: ClassVar[str]
    dashboard_template: ClassVar[str]     # the experimenter's study page
    downloads: ClassVar[tuple[str, ...]] = ()  # CSV files of the dashboard's download route
    shows_video: ClassVar[bool] = False  # whether its studies may show video clips (server/paradigms/media.py)
    # What `perceptlab launch` of video clips sets in the study file from its template, unless --study-file
    # is given: (section, key) -> value, with the reason it says (what videos lack, e.g. gold pairs).
    video_launch_values: ClassVar[tuple[dict[tuple[str, str], Any], str]] = ({}, "")
    response_model: ClassVar[type]        # the table of the worker's answers (latest activity)
    mturk_settings: ClassVar[dict[str, Any]] = {}  # HIT texts over the [mturk] defaults
    # Whether one worker may take several assignments (motion: several sessions, each with other
    # clips); else MTurk's "took part" qualification blocks a worker after their first one.
    repeat_workers: ClassVar[bool] = False
    # Whether the worker must have a mouse (or touchpad): the entry pages turn away touch-only devices.
    needs_mouse: ClassVar[bool] = False
    # The kinds of response the worker API takes for the paradigm's studies (see ResponseKind).
    response_kinds: ClassVar[tuple[ResponseKind, ...]] = ()
    # Whether the ``consent`` action only moves an assignment from stage consent to instructions (the paradigm's
    # perform_action does nothing else for it): then on PostgreSQL it is one statement (consent_in_one_statement).
    consent_is_a_stage_move: ClassVar[bool] = False
    # Whether the ``finish`` action, at stage page_done after the spec's ``min_pages``, only completes the
    # assignment (:func:`complete`; the paged paradigms): then on PostgreSQL its common case is one statement
    # (finish_in_one_statement).
    finish_completes: ClassVar[bool] = False

    def response_kind(self, name: str) -> ResponseKind | None:
        """The declared :class:`ResponseKind` named ``name``, or None (a scan: a paradigm has a few)."""
        for kind in self.response_kinds:
            if kind.name == name:
                return kind
        return None

    # ------------------------------------------------------------ hooks: study file and creation

    def spec_from_toml(self, data: dict[str, Any], path: Path):
        """The validated spec of a parsed study file (``path`` for messages and relative paths)."""
        raise NotImplementedError

    def create_study(self, session: Session, spec) -> Study:
        """Store the study with everything it shows; the caller commits."""
        raise NotImplementedError

    def study_warnings(self, session: Session, study: Study) -> list[str]:
        """What ``study create`` and ``study show`` warn of in a stored study (its stimuli against its settings);
        none by default."""
        return []

    def requirement_of_spec(self, spec) -> WindowRequirement:
        """What the study's worker pages need of the window and the device, from its spec (before the
        study exists: ``study create``, ``launch``). Default: the spec's ``min_window_width`` x
        ``min_window_height`` at any devicePixelRatio, and :attr:`needs_mouse`; a paradigm whose pages
        need more (the images' sizes, a stimulus of fixed size) computes it here."""
        floor = (int(spec.min_window_width), int(spec.min_window_height))
        return WindowRequirement(min_window=floor, floor=floor, needs_mouse=self.needs_mouse)

    def window_requirement(self, session: Session, study: Study) -> WindowRequirement:
        """:meth:`requirement_of_spec` of a stored study: what the HIT preview, the consent and the
        instructions state and check in the browser before consent (``device_check.js``)."""
        return self.requirement_of_spec(spec_for(session, study.id))

    # ------------------------------------------------------------ hooks: the worker's path

    def work_left(self, session: Session, study: Study, worker_id: int) -> bool:
        """Whether the study could give this worker a unit of work now."""
        raise NotImplementedError

    def perform_action(self, session: Session, assignment: Assignment | AssignmentRow,
                       action: str) -> Assignment | AssignmentRow:
        """Move the (locked) assignment on after a button: consent, instructions_done, ...

        ``assignment`` is the ORM object or a locked :class:`AssignmentRow`; returns the assignment as
        it is after the action (the object, changed, or a row with its new stage), for the state.
        """
        raise NotImplementedError

    def reopen(self, session: Session, assignment: Assignment, spec) -> None:
        """Move a (locked) assignment at ``full`` on, now that work is free again."""
        raise NotImplementedError

    def state(self, session: Session, assignment: Assignment | AssignmentRow, url_for: UrlFor) -> dict[str, Any]:
        """The JSON State the browser app works from. ``assignment`` may be a plain row (``GET .../state``
        reads no ORM object): :func:`as_object` loads the object where more is needed."""
        raise NotImplementedError

    def stop_message(self, session: Session, assignment: Assignment) -> str | None:
        """What the worker is told at stages disqualified and stopped (why) and full; else None."""
        if assignment.stage == Stage.FULL or assignment.stage in TURNED_AWAY:
            return reason_message(assignment)
        return None

    def instructions(self, session: Session, study: Study, spec) -> str:
        """The instructions page's text (default: the study file's ``[texts] instructions``)."""
        return spec.instructions

    def examples(self, session: Session, study: Study) -> dict[str, Any]:
        """Template variables of the HIT preview and the instructions page that the paradigm's
        :attr:`worker_pages` macros show (an example image, a clip's frame). Default: none."""
        return {}

    def trial_media(self, session: Session, assignment: Assignment, trial_id: str) -> bytes:
        """Media the server renders for one of the assignment's trials (motion: an RDK dot movie)."""
        raise ApiError(404, "unknown_trial", "this trial has no server-rendered media")

    # ------------------------------------------------------------ hooks: data for the experimenter

    def stimulus_paths(self, session: Session, study: Study) -> list[str]:
        """Every stimulus path the study's trials and worker pages show (the files it may serve)."""
        raise NotImplementedError

    def export(self, session: Session, study_id: int, *, salt: bytes | None, include_gold: bool = True,
               include_pilot: bool = False) -> StudyExport:
        """The paradigm's data files of a study (worker IDs pseudonymised with ``salt``; raw when None).
        ``include_gold=False`` leaves out quality-check answers where the paradigm has them; pilot and
        simulated participants (server/pilot.py) only with ``include_pilot``. The
        per-worker workers_meta.csv is added by :func:`server.exports.export_study`."""
        raise NotImplementedError

    def export_file(self, session: Session, study_id: int, name: str, *, salt: bytes | None,
                    include_pilot: bool = False) -> str:
        """One of :attr:`downloads` as CSV text."""
        return self.export(session, study_id, salt=salt, include_pilot=include_pilot).files[name]

    def workers_table(self, session: Session, study_id: int, *, salt: bytes | None,
                      include_pilot: bool = False) -> tuple[tuple[str, ...], list[dict[str, Any]]]:
        """workers.csv (dashboard download; workers_meta.csv of an export) as ``(columns, records)``, one
        record per worker keyed by ``worker_id`` (the label :func:`server.worker_records.worker_label` gives).
        Default: what every study knows of its workers (:func:`server.worker_records.worker_records`: platform,
        status, stage, assignments, pages, window, screen, first seen); a paradigm adds its own columns."""
        from ..worker_records import WORKER_COLUMNS, worker_records

        return WORKER_COLUMNS, worker_records(session, study_id, salt=salt, include_pilot=include_pilot)

    def progress(self, session: Session, study_id: int) -> dict[str, Any]:
        """Headline figures of the study list, in every paradigm's words: ``kind``; ``n_groups``, the groups
        its work comes in (sets, scenes, clips), named by ``groups``; ``n_units``, the things under test in them
        (pairs, stimuli, probes), named by ``units``; ``n_responses`` of ``target_responses`` answers (votes,
        ratings, sessions), named by ``unit``; ``fill``; ``n_workers``. The dashboard, ``study show --json`` and
        ``/admin/api/studies`` show these keys for every paradigm."""
        raise NotImplementedError

    def summary_line(self, session: Session, study_id: int) -> str:
        """One line of progress for ``perceptlab study list``."""
        raise NotImplementedError

    def dashboard_context(self, session: Session, study: Study, salt: bytes) -> dict[str, Any]:
        """Template variables of :attr:`dashboard_template` beyond the study row."""
        return {}

    def dashboard_summary(self, session: Session, study: Study, salt: bytes, *,
                          raw_ids: bool = False) -> dict[str, Any]:
        """The JSON figures the paradigm's study page refreshes itself with (``GET /admin/api/studies/<slug>/
        summary``, beside the study row ``study`` and ``generated_at``); ``raw_ids``: the experimenter asked
        for platform IDs beside the pseudonyms. Default: nothing beyond the study row."""
        return {}

    def pay_unit(self, spec) -> PayUnit:
        """What one unit of pay is, and what it earns."""
        raise NotImplementedError

    def time_prior(self, spec) -> TimePrior:
        """How long a unit of pay is expected to take (a documented pace per trial), before measurements."""
        raise NotImplementedError

    def time_events(self, study_id: int):
        """A SELECT of ``(assignment_id, at)`` rows: every logged moment of the workers' work in a study, from
        which :mod:`server.worker_time` measures time on task. Default: the paradigm's responses
        (:attr:`response_model`); a paradigm that logs more steps adds them (motion: the calibration)."""
        answers = self.response_model.__table__
        return select(answers.c.assignment_id, answers.c.created_at.label("at")).where(answers.c.study_id == study_id)

    def analyse_results(self, session: Session, study: Study, export: StudyExport, out: Path,
                        options: ResultsOptions) -> ResultsAnalysis | None:
        """What ``perceptlab results`` analyses of the study's export (written to ``out``), or None when the
        paradigm has no analysis. Called with the session open: read from the database what the analysis
        needs beyond the export files (and write such files to ``out``); the returned
        :class:`ResultsAnalysis` runs after the session is closed. Default: None."""
        return None

    def change_pilots(self, session: Session, study: Study, worker_ids: list[int], pilot: bool,
                      mark: Callable[[], None]) -> None:
        """Workers of the study become pilot participants (``pilot``) or real ones again
        (:func:`server.pilot.mark_pilot`): call ``mark()``, which sets the workers' and their assignments'
        flags, with whatever the paradigm must hold around it and update after it (paired comparison: its
        allocation lock, its pairs' counts). Default: ``mark()``."""
        mark()

    def reset_counts(self, session: Session, study: Study) -> None:
        """The study's participants were deleted (:func:`server.pilot.reset_study`; their assignments and the
        :attr:`response_model` rows are gone): reset what the paradigm keeps of their work elsewhere
        (paired comparison: its running estimate, its pairs' counts). Default: nothing."""

    # ------------------------------------------------------------ hooks: wiring into the app

    @property
    def package(self) -> str:
        """The paradigm's package (``server.paradigms.paired``): where its ``models.py`` and ``templates/`` are."""
        module = type(self).__module__
        return module if Path(sys.modules[module].__file__).name == "__init__.py" else module.rpartition(".")[0]

    @property
    def template_folder(self) -> Path | None:
        """The package's ``templates/`` folder, or None when it has none. The app's Jinja loader serves its
        files under the paradigm's kind: ``<package>/templates/admin_study.html`` is ``"<kind>/admin_study.html"``
        (:func:`server.paradigms.wiring.template_loader`)."""
        folder = Path(sys.modules[type(self).__module__].__file__).parent / "templates"
        return folder if folder.is_dir() else None

    @property
    def static_folder(self) -> Path | None:
        """The package's ``static/`` folder (its browser code), or None when it has none. The app serves its
        files under the paradigm's kind: ``<package>/static/window.js`` is ``/static/paradigms/<kind>/window.js``
        (:func:`server.paradigms.wiring.install_paradigms`), so the shared scripts of
        ``experiment_ui/static/js/`` import it as ``../paradigms/<kind>/window.js``."""
        folder = Path(sys.modules[type(self).__module__].__file__).parent / "static"
        return folder if folder.is_dir() else None

    def demo_studies(self, manifests: str, seed: int, texts: str) -> list[DemoStudy]:
        """Studies of this paradigm that ``perceptlab demo`` creates and serves beside its own, on the demo's
        prepared scenes (``manifests``: their study manifest, relative to the demo folder), seeded with
        ``seed``, ending with ``texts`` (the demo's ``[texts]`` and ``[entry]`` tables). Default: none."""
        return []

    def simulated_worker(self) -> type | None:
        """The paradigm's simulated worker for ``perceptlab simulate``: a subclass of
        :class:`server.simulate_client.SimulatedWorker` (its package's ``simulated_worker.py``), which decides
        each answer while the shared driver walks the lifecycle over HTTP; None when the paradigm has none
        (``simulate`` then names the paradigm as the reason its workers gave up). Default: None."""
        return None

    def admin_blueprint(self):
        """The paradigm's experimenter routes as a Flask blueprint (registered by the app factory for every
        known paradigm), or None. Its module calls :func:`server.admin_support.protect` on it (CSRF, no-store,
        no framing) and guards each view with :func:`server.auth.login_required`, as every ``/admin``
        blueprint does; its ``name`` must be unique (the kind + ``"_admin"``), its URLs live under ``/admin``."""
        return None

    def init_app(self, app) -> None:
        """Wire what else the paradigm needs into a new app (background work such as running estimates),
        after the blueprints are registered. Default: nothing."""

    def precision(self, session: Session, study: Study, spec) -> Precision | None:
        """How precise the study's estimates are now (:class:`Precision`), for ``[stopping]`` targets and the
        dashboard's stopping panel (server/stopping.py); None: the paradigm measures none, so only the caps
        of ``[stopping]`` apply. Must be cheap: it runs after live re-analyses and page completions."""
        return None

    def forecast(self, session: Session, study: Study, spec) -> dict[str, Any] | None:
        """A simulation forecast of what the study still needs to reach ``[stopping] halfwidth`` (JSON-ready; slow:
        server/forecast_jobs.py runs it on demand, one at a time per study, and caches it). Default: None (the
        dashboard shows the 1/sqrt(n) projection only)."""
        return None

    def responses(self, session: Session, study: Study) -> int:
        """Responses so far (non-pilot, non-gold) for ``[stopping] max_votes`` when :meth:`precision` measures
        none. Default: 0."""
        return 0

    def screening_scores(self, session: Session, study: Study) -> list[tuple[str, int]] | None:
        """``(MTurk worker ID, score 0..100)`` for a lab-wide screening qualification, or None when the
        paradigm screens no one."""
        return None

    # ------------------------------------------------------------ shared lifecycle

    def spec_for(self, session: Session, study_id: int):
        """The study's spec (see :func:`spec_for`)."""
        return spec_for(session, study_id)

    def enter(self, session: Session, study: Study, *, platform: str, worker_id: str | None,
              assignment_id: str | None = None, hit_id: str | None = None, turk_submit_to: str | None = None,
              signature: str | None = None, access_key: str | None = None,
              admit_new: Callable[[], None] | None = None, pilot: str | None = None,
              fingerprint: EntryFingerprint | None = None) -> tuple[Assignment, bool]:
        """Find or create the assignment a worker arrives with; return it and whether it is new
        (a reload returns the same one).

        Every entry follows the study's ``[entry]`` rules: plain links (participant ID, signature, access
        key, a Prolific study's ID format: :func:`server.paradigms.entry.check_link_entry`) and MTurk entries
        (MTurk's ID formats and submit addresses, the access key and the study's MTurk signature, a HIT of
        the study: :func:`server.paradigms.entry.check_mturk_entry`). ``admit_new`` is called just before a
        new assignment is created (the per-address rate limit raises there); re-entering an existing
        assignment never calls it. A new assignment for which no work is left starts at stage ``full``; an
        assignment at ``full`` re-entered when work is free again is reopened (:meth:`reopen_if_room`).

        ``pilot`` ("pilot" or "simulated"), which the caller passes only for an entry carrying the study's
        pilot signature (:func:`server.pilot.check_pilot_signature`), makes a new worker a pilot participant
        (:mod:`server.pilot`); platform "pilot" is the experimenter's preview, a new participant each time,
        whatever the study's entry rules, paused or not. A pilot-signed MTurk entry (``perceptlab simulate``)
        is held to MTurk's formats but not to the study's HITs, key or signature: only the experimenter's
        secret key makes that signature.

        ``fingerprint`` (:func:`server.fingerprints.entry_fingerprint` of the request) is stored with a new
        worker, for the analysis only: it never refuses an entry.

        Call it before anything is written in ``session``: an entry that meets a concurrent one of the same
        worker (a double click) rolls the session's transaction back and then finds the rows that one made.
        """
        if platform == PILOT_PLATFORM:
            if pilot is None:
                raise invalid(f"unknown platform {platform!r}")
            worker_id = assignment_id = f"pilot-{secrets.token_hex(6)}"
            hit_id = turk_submit_to = None
        elif platform == "mturk":
            turk_submit_to = check_mturk_entry(
                session, study, self.spec_for(session, study.id), worker_id=worker_id, assignment_id=assignment_id,
                hit_id=hit_id, turk_submit_to=turk_submit_to, signature=signature, access_key=access_key,
                pilot=pilot is not None)
        elif platform == "link":
            check_link_entry(study, self.spec_for(session, study.id), worker_id, signature, access_key)
            worker_id = worker_id or f"anon-{secrets.token_hex(6)}"
            if not _ID_PATTERN.fullmatch(worker_id):
                raise invalid("participant ID is malformed (letters, digits and _.:@- only, at most 200)")
            assignment_id = worker_id  # one assignment per participant and study
            hit_id = turk_submit_to = None
        else:
            raise invalid(f"unknown platform {platform!r}")
        args = (session, study, platform, worker_id, assignment_id, hit_id, turk_submit_to, admit_new, pilot,
                fingerprint)
        try:
            assignment, created = self._find_or_create(*args)
        except IntegrityError:
            # A concurrent request (double click, reload) created the same rows first: use them. The whole
            # transaction goes back, not a SAVEPOINT's (which cost every entry two more round trips): every
            # caller enters before writing anything else, and nothing before the INSERTs wrote.
            session.rollback()
            assignment, created = self._find_or_create(*args)
        if not created and assignment.stage == Stage.FULL:
            self.reopen_if_room(session, lock_assignment(session, assignment.id))
        return assignment, created

    def _find_or_create(self, session: Session, study: Study, platform: str, worker_id: str, assignment_id: str,
                        hit_id: str | None, turk_submit_to: str | None,
                        admit_new: Callable[[], None] | None, pilot: str | None = None,
                        fingerprint: EntryFingerprint | None = None) -> tuple[Assignment, bool]:
        worker_row, assignment_row_id = session.connection().execute(_FIND_WORKER_AND_ASSIGNMENT, {
            "study_id": study.id, "platform": platform, "worker_external_id": worker_id,
            "assignment_external_id": assignment_id}).one()
        worker = None if worker_row is None else session.get(Worker, worker_row)
        assignment = None if assignment_row_id is None else session.get(Assignment, assignment_row_id)
        if assignment is not None:
            if worker is None or assignment.worker_id != worker.id:
                raise ApiError(403, "forbidden", gettext("This assignment belongs to another worker."))
            return assignment, False
        if study.status == "stopped" and platform != PILOT_PLATFORM:  # [stopping]: its target or a cap was reached
            raise ApiError(409, "study_stopped", gettext("This study has all the participants it needs and takes no "
                                                         "new ones. Thank you for your interest."))
        if study.status != "active" and platform != PILOT_PLATFORM:  # the experimenter may preview a paused study
            raise ApiError(409, "study_paused", gettext("This study is paused. Please try again later."))
        if admit_new is not None:
            admit_new()  # before any write: a deferred or refused entry costs two reads
        if worker is None:
            # One INSERT on the session's connection, not an ORM object's flush (which cost the entry more CPU
            # than the statement): this request reads only its ID, status and pilot flag; later ones load it.
            worker = session.connection().execute(_INSERT_WORKER, {
                "study_id": study.id, "platform": platform, "external_id": worker_id, "pilot": pilot is not None,
                "simulated": pilot == "simulated",
                **{k: v or None for k, v in (fingerprint or EntryFingerprint("", ""))._asdict().items()}}).one()
        stage, code, args = Stage.CONSENT, None, None
        if worker.status in TURNED_AWAY:  # turned away in an earlier assignment: so is this one, for that reason
            stage, code, args = Stage(worker.status), worker.status_reason_code, worker.status_reason_args
        elif not self.work_left(session, study, worker.id):
            stage, code = Stage.FULL, "study_full"  # told at once, before consent and instructions, not after the quiz
        assignment = Assignment(study_id=study.id, worker_id=worker.id, platform=platform,
                                external_id=assignment_id, hit_id=hit_id, turk_submit_to=turk_submit_to,
                                stage=stage, token_nonce=new_nonce(), pilot=worker.pilot,
                                reason_code=code, reason_args=args)
        session.add(assignment)
        session.flush()
        return assignment, True

    def no_work_left(self, assignment: Assignment, spec) -> None:
        """Nothing to give the worker: complete when they did the units the HIT requires, else stage
        ``full`` (told the study is full; no completion code, no MTurk submit form, so never paid)."""
        if assignment.pages_completed >= self.pay_unit(spec).required:
            complete(assignment)
        else:
            end_assignment(assignment, Stage.FULL, "study_full")

    def reopen_if_room(self, session: Session, assignment: Assignment) -> None:
        """A worker at stage ``full`` tries again: when work is free again (reservations lapsed), move on
        (:meth:`reopen`). ``assignment`` must be locked. Does nothing while the study is still full."""
        if assignment.stage != Stage.FULL or assignment.study.status != "active":
            return
        if not self.work_left(session, assignment.study, assignment.worker_id):
            return
        self.reopen(session, assignment, self.spec_for(session, assignment.study_id))
        if assignment.stage != Stage.FULL:
            assignment.reason_code = assignment.reason_args = None  # no longer turned away: not counted
