"""Database models every paradigm shares (SQLAlchemy 2.0 declarative, typed ``Mapped[...]``).

Every schema change is an Alembic migration in ``server/migrations/versions``;
``tests/server/test_migrations.py`` fails when the models and the migrations disagree.

The tables here follow the worker's path through any study::

    Study -< Worker -< Assignment -< Page

with the experimenters' accounts and the MTurk bookkeeping. Each paradigm package keeps its own tables
(its trials and responses, what its studies show) in its ``models.py`` on the same :class:`Base`
(``server/paradigms/paired/models.py``, ``server/paradigms/motion/models.py``);
:func:`server.paradigms.load_models` imports them wherever every table must be known (ARCHITECTURE.md,
The paradigm contract). Responses are append-only: nothing updates or deletes them.
"""
from __future__ import annotations

import datetime as dt
import secrets
from typing import Any

from sqlalchemy import (JSON, BigInteger, Boolean, DateTime, Float, ForeignKey, Index, Integer, String, Text,
                        UniqueConstraint, false, text)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from .paradigms.stages import Stage


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def as_utc(value: dt.datetime) -> dt.datetime:
    """A stored time as an aware UTC datetime: SQLite hands back naive datetimes, stored in UTC."""
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.timezone.utc)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, dt.datetime: DateTime(timezone=True)}


class Study(Base):
    __tablename__ = "study"

    id: Mapped[int] = mapped_column(primary_key=True)
    slug: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(16), default="active")  # active | paused | stopped (server/stopping.py)
    seed: Mapped[int] = mapped_column(Integer)
    # The parsed study.toml (every parameter, with defaults filled in) and where its stimuli live.
    config: Mapped[dict[str, Any]]
    stimulus_root: Mapped[str] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    # The key that signs this study's participant links (server/paradigms/entry.py); random per study, so a
    # link signed for one study opens no other. Null only if a migration could not fill it.
    entry_secret: Mapped[str | None] = mapped_column(String(64), default=lambda: secrets.token_hex(32))


class Worker(Base):
    """A crowd worker within one study (the same person in two studies is two rows)."""
    __tablename__ = "worker"
    __table_args__ = (UniqueConstraint("study_id", "platform", "external_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("study.id", ondelete="CASCADE"), index=True)
    platform: Mapped[str] = mapped_column(String(16))   # mturk | link
    external_id: Mapped[str] = mapped_column(String(200))  # MTurk WorkerId: PII, never exported by default
    # active | disqualified (failed the quiz: for good) | stopped (hidden gold accuracy fell below the threshold)
    status: Mapped[str] = mapped_column(String(16), default="active")
    status_reason: Mapped[str | None] = mapped_column(Text)
    # Why, as a code of server/reasons.py and the arguments its message is filled with (the worker reads it in
    # their language); NULL while active, and for workers turned away before codes existed.
    status_reason_code: Mapped[str | None] = mapped_column(String(40))
    status_reason_args: Mapped[dict[str, Any] | None]
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    # Motion studies: the RDK screening result (r of u and v pooled); a worker who passed it once
    # skips the RDK block in later assignments of the study.
    screening_r: Mapped[float | None] = mapped_column(Float)
    screening_passed: Mapped[bool | None] = mapped_column(Boolean)
    # A pilot participant (a preview, a test run, marked by the experimenter) or a simulated one (perceptlab
    # simulate; always a pilot too): takes part like anyone but counts for nothing (server/pilot.py).
    pilot: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    simulated: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # Entry fingerprints (server/fingerprints.py): keyed hashes of the first entry's network (/24, /48) and
    # User-Agent, never the raw values; NULL when unknown (and for workers who entered before). Evidence for
    # the sock-puppet analysis only.
    address_group: Mapped[str | None] = mapped_column(String(16))
    agent_group: Mapped[str | None] = mapped_column(String(16))
    # Display changes during trials (server/paradigms/display_monitor.py): pauses counted against the worker
    # (summed over the study's assignments, against [viewing] max_display_changes) and their total length.
    display_changes: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    paused_ms: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))
    # The language the worker's pages are shown in (server/i18n.py choose_locale): one of the study's
    # [study] languages, chosen at entry and kept for every later page; NULL for workers who entered before.
    locale: Mapped[str | None] = mapped_column(String(16))


class Assignment(Base):
    __tablename__ = "assignment"
    __table_args__ = (UniqueConstraint("study_id", "platform", "external_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("study.id", ondelete="CASCADE"), index=True)
    worker_id: Mapped[int] = mapped_column(ForeignKey("worker.id", ondelete="CASCADE"), index=True)
    platform: Mapped[str] = mapped_column(String(16))
    external_id: Mapped[str] = mapped_column(String(200))  # MTurk AssignmentId, or a generated one
    hit_id: Mapped[str | None] = mapped_column(String(200))
    turk_submit_to: Mapped[str | None] = mapped_column(Text)
    # A Stage (server/paradigms/stages.py; full: no work was left for this worker before the units its
    # HIT requires, never paid)
    stage: Mapped[str] = mapped_column(String(16), default=Stage.CONSENT)
    token_nonce: Mapped[str] = mapped_column(String(32))
    completion_code: Mapped[str | None] = mapped_column(String(64))
    pages_completed: Mapped[int] = mapped_column(Integer, default=0)
    environment: Mapped[dict[str, Any] | None]
    # The recruiter's URL parameters at entry (Prolific: {"STUDY_ID": ..., "SESSION_ID": ...};
    # server/paradigms/recruiters.py), None for other entries.
    entry_params: Mapped[dict[str, Any] | None]
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    completed_at: Mapped[dt.datetime | None]
    # Why this assignment ended other than by completion (a code of server/reasons.py: its worker's, or this
    # assignment's alone, such as study_full or a refused display), with its message's arguments.
    reason_code: Mapped[str | None] = mapped_column(String(40))
    reason_args: Mapped[dict[str, Any] | None]
    # A copy of the worker's pilot flag, kept by server/pilot.py: a vote reads only its locked assignment
    # row, and a pilot's vote fills no pair's target.
    pilot: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())

    worker: Mapped[Worker] = relationship()
    study: Mapped[Study] = relationship()


class DisplayEvent(Base):
    """A pause or a resumption of an assignment's trials for a display change (server/paradigms/display_monitor.py):
    the log behind the worker's counters; ``event_id`` is the browser's, so a retried post is counted once."""
    __tablename__ = "display_event"
    __table_args__ = (UniqueConstraint("assignment_id", "event_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    assignment_id: Mapped[int] = mapped_column(ForeignKey("assignment.id", ondelete="CASCADE"))
    event_id: Mapped[str] = mapped_column(String(64))
    event: Mapped[str] = mapped_column(String(16))           # paused | resumed
    change: Mapped[str | None] = mapped_column(String(16))   # a pause's: zoom | screen | window
    paused_ms: Mapped[int] = mapped_column(BigInteger, default=0)  # a resumption's: how long the pause lasted
    window: Mapped[dict[str, Any] | None]                    # {width, height, dpr} when it happened
    screen: Mapped[dict[str, Any] | None]                    # {width, height}
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class EntryRefusal(Base):
    """How many entries of a study were refused before any participant existed, per reason code
    (server/reasons.py): one counter row per study and code, so a flood of refusals grows no table."""
    __tablename__ = "entry_refusal"

    study_id: Mapped[int] = mapped_column(ForeignKey("study.id", ondelete="CASCADE"), primary_key=True)
    code: Mapped[str] = mapped_column(String(40), primary_key=True)
    count: Mapped[int] = mapped_column(Integer, default=0)
    last_at: Mapped[dt.datetime | None]


class QuestionnaireResponse(Base):
    """A worker's answers to one part (``pre`` or ``post``) of the study's questionnaire
    (server/paradigms/questionnaire.py): stored once per assignment and part, validated before; never read by
    anything that pays, stops or codes."""
    __tablename__ = "questionnaire_response"
    __table_args__ = (UniqueConstraint("assignment_id", "part"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("study.id", ondelete="CASCADE"), index=True)
    worker_id: Mapped[int] = mapped_column(ForeignKey("worker.id", ondelete="CASCADE"))
    assignment_id: Mapped[int] = mapped_column(ForeignKey("assignment.id", ondelete="CASCADE"))
    part: Mapped[str] = mapped_column(String(8))
    answers: Mapped[dict[str, Any]]      # item name -> a string, a number, a list of strings or null
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


# The pages in ix_page_held: held (counted in their pairs' n_held) and not complete.
OPEN_HELD_PAGE = "held AND completed_at IS NULL"


class Page(Base):
    __tablename__ = "page"
    __table_args__ = (UniqueConstraint("assignment_id", "index"),
                      # Open held pages are few (about one per active worker): finding the lapsed ones is
                      # cheap. Keyed on a column a vote never changes, so that renewing a page's reservation
                      # stays an in-place (HOT) update on PostgreSQL (migration 0010); a page leaves the
                      # index when it is complete (migration 0011).
                      Index("ix_page_held", "assignment_id", postgresql_where=text(OPEN_HELD_PAGE),
                            sqlite_where=text(OPEN_HELD_PAGE)))

    id: Mapped[int] = mapped_column(primary_key=True)
    assignment_id: Mapped[int] = mapped_column(ForeignKey("assignment.id", ondelete="CASCADE"), index=True)
    index: Mapped[int]
    kind: Mapped[str] = mapped_column(String(16))  # quiz | trials (paired comparison); rdk | main (motion)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    completed_at: Mapped[dt.datetime | None]
    # Pages that hold shared work (paired-comparison "trials", motion "main"): until when their
    # unanswered trials stay reserved for this worker (renewed while the worker is active, see
    # server/allocation.py); after that they count as free again. Null for other pages.
    reserved_until: Mapped[dt.datetime | None]
    # A page whose open trials its paradigm counts on the work they show (paired comparison: Pair.n_held,
    # server/paradigms/paired/allocation.py) from its start until it is retired, after its reservation
    # lapsed. False for every other page.
    held: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class User(Base):
    """An experimenter who may log in to the dashboard."""
    __tablename__ = "user_account"

    id: Mapped[int] = mapped_column(primary_key=True)
    username: Mapped[str] = mapped_column(String(100), unique=True)
    password_hash: Mapped[str] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class LoginSession(Base):
    """A logged-in dashboard session (server/auth.py). The session cookie carries a random ID whose
    SHA-256 is stored here; deleting the row (logout, password change) ends that session everywhere,
    copies of the cookie included."""
    __tablename__ = "login_session"

    id: Mapped[int] = mapped_column(primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("user_account.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    last_seen_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


# ---------------------------------------------------------------- Amazon Mechanical Turk (server/mturk.py)

class MTurkQualification(Base):
    """A custom qualification type of ours on MTurk (e.g. "perceptlab: took part"), created once."""
    __tablename__ = "mturk_qualification"
    __table_args__ = (UniqueConstraint("name", "sandbox"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    qualification_type_id: Mapped[str] = mapped_column(String(200))
    sandbox: Mapped[bool] = mapped_column(Boolean)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class StudyStopping(Base):
    """What ``[stopping]`` decided for a study (server/stopping.py): the latest measurement and, once a target was
    met or a cap reached, why and when the study stopped taking new participants and when each recruiter was
    told. ``*_told_at`` is written (and committed) before the recruiter's call, so a crash never repeats it."""
    __tablename__ = "study_stopping"

    study_id: Mapped[int] = mapped_column(ForeignKey("study.id", ondelete="CASCADE"), primary_key=True)
    checked_at: Mapped[dt.datetime | None]
    measured: Mapped[dict[str, Any] | None]       # the latest evaluation (server/stopping.py's Evaluation)
    reason: Mapped[str | None] = mapped_column(String(32))  # target | max_votes | max_participants | max_cost
    message: Mapped[str | None] = mapped_column(Text)
    stopped_at: Mapped[dt.datetime | None]
    notify_only: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    at_stop: Mapped[dict[str, Any] | None]        # what was measured when it stopped
    mturk_told_at: Mapped[dt.datetime | None]
    prolific_told_at: Mapped[dt.datetime | None]
    recruiter_note: Mapped[str | None] = mapped_column(Text)  # what the recruiters answered (or an error)
    projection: Mapped[dict[str, Any] | None]     # what is still needed (server/stopping.py's projection)
    forecast: Mapped[dict[str, Any] | None]       # the paradigm's simulation forecast, computed on demand
    forecast_at: Mapped[dt.datetime | None]


class MTurkHit(Base):
    """One HIT of a study; the row exists (status "creating") before the create call is made."""
    __tablename__ = "mturk_hit"

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("study.id", ondelete="CASCADE"), index=True)
    hit_id: Mapped[str | None] = mapped_column(String(200), unique=True)  # None until MTurk answers
    hit_type_id: Mapped[str | None] = mapped_column(String(200))
    unique_request_token: Mapped[str] = mapped_column(String(64), unique=True)
    launch_id: Mapped[str] = mapped_column(String(32))
    batch_index: Mapped[int]
    max_assignments: Mapped[int]
    reward: Mapped[str] = mapped_column(String(16))  # "0.50"
    # creating | Assignable | Unassignable | Reviewable | Reviewing | Disposed | expired | deleted
    status: Mapped[str] = mapped_column(String(32), default="creating")
    sandbox: Mapped[bool] = mapped_column(Boolean)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[dt.datetime | None]


class MTurkAssignment(Base):
    """MTurk's view of one assignment (by AssignmentId), as of the last reconcile or action."""
    __tablename__ = "mturk_assignment"

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("study.id", ondelete="CASCADE"), index=True)
    assignment_id: Mapped[str] = mapped_column(String(200), unique=True)  # MTurk AssignmentId
    hit_id: Mapped[str] = mapped_column(String(200), index=True)
    worker_id: Mapped[str] = mapped_column(String(200))  # MTurk WorkerId: PII
    # The perceptlab assignment with external_id == assignment_id, once the worker has started.
    local_assignment_id: Mapped[int | None] = mapped_column(ForeignKey("assignment.id", ondelete="SET NULL"))
    status: Mapped[str] = mapped_column(String(16))  # Submitted | Approved | Rejected
    submit_time: Mapped[dt.datetime | None]
    approved_at: Mapped[dt.datetime | None]
    rejected_at: Mapped[dt.datetime | None]
    feedback: Mapped[str | None] = mapped_column(Text)
    # Set by the run that is sending the approval (a claim, server/claims.py): a second run leaves the row alone.
    claim: Mapped[str | None] = mapped_column(String(32))
    claimed_at: Mapped[dt.datetime | None]
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class Bonus(Base):
    """A bonus, recorded (status "pending") before ``send_bonus`` so it is never paid twice; the run that sends it
    first claims it (``claim``, ``claimed_at``: server/claims.py), so two runs never both call."""
    __tablename__ = "mturk_bonus"
    __table_args__ = (UniqueConstraint("assignment_id", "reason"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int | None] = mapped_column(ForeignKey("study.id", ondelete="SET NULL"), index=True)
    assignment_id: Mapped[str] = mapped_column(String(200))  # MTurk AssignmentId
    worker_id: Mapped[str] = mapped_column(String(200))      # MTurk WorkerId
    amount: Mapped[str] = mapped_column(String(16))          # "1.20"
    reason: Mapped[str] = mapped_column(String(500))
    unique_request_token: Mapped[str] = mapped_column(String(64), unique=True)
    status: Mapped[str] = mapped_column(String(16), default="pending")  # pending | sent
    sandbox: Mapped[bool] = mapped_column(Boolean)
    claim: Mapped[str | None] = mapped_column(String(32))  # the token of the run sending it
    claimed_at: Mapped[dt.datetime | None]
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    sent_at: Mapped[dt.datetime | None]
# ---------------------------------------------------------------- Prolific (server/prolific.py)

class ProlificStudy(Base):
    """The Prolific study of a perceptlab study (one each); the row exists (status "creating") before the create
    call, named by ``internal_name`` (a deterministic key), so that a create whose answer was lost is found again
    in Prolific's list of studies instead of being made twice."""
    __tablename__ = "prolific_study"

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("study.id", ondelete="CASCADE"), unique=True)
    prolific_id: Mapped[str | None] = mapped_column(String(64), unique=True)  # None until Prolific answers
    internal_name: Mapped[str] = mapped_column(String(200), unique=True)
    # creating | UNPUBLISHED | SCHEDULED | ACTIVE | PAUSED | AWAITING REVIEW | COMPLETED (Prolific's states)
    status: Mapped[str] = mapped_column(String(32), default="creating")
    places: Mapped[int]
    reward_cents: Mapped[int]
    estimated_minutes: Mapped[int]
    devices: Mapped[str] = mapped_column(String(64))  # "desktop,tablet"
    external_url: Mapped[str] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class ProlificSubmission(Base):
    """Prolific's view of one submission (by its ID, the ``SESSION_ID`` of the study URL), as of the last
    reconcile or action."""
    __tablename__ = "prolific_submission"

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("study.id", ondelete="CASCADE"), index=True)
    submission_id: Mapped[str] = mapped_column(String(64), unique=True)
    participant_id: Mapped[str] = mapped_column(String(64), index=True)  # PROLIFIC_PID: PII
    # RESERVED | ACTIVE | TIMED-OUT | AWAITING REVIEW | APPROVED | RETURNED | REJECTED | SCREENED OUT | ...
    status: Mapped[str] = mapped_column(String(32))
    entered_code: Mapped[str] = mapped_column(String(200), default="")
    started_at: Mapped[dt.datetime | None]
    completed_at: Mapped[dt.datetime | None]
    # Bulk approval is asynchronous on Prolific: the run that asks for it claims the row (server/claims.py) and
    # ``claimed_at`` is when it asked. ``status`` is only ever what Prolific showed: a submission counts as approved
    # (and earns its bonus) once a read-back shows APPROVED, never because approval was asked for.
    claim: Mapped[str | None] = mapped_column(String(32))
    claimed_at: Mapped[dt.datetime | None]
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class ProlificBonus(Base):
    """The bonus ledger: one row per bonus, written before any Prolific call for it.

    ``recorded`` (the intent) -> ``setting_up`` (claimed for a set-up call) -> ``set_up`` (Prolific holds an unpaid
    bulk bonus, ``bulk_id``) -> ``paying`` (claimed and committed just before the pay call, which is not
    idempotent) -> ``paid``. Every step is a claim (``claim``, ``claimed_at``; server/claims.py): one conditional
    UPDATE from the state read, so that of two runs only one goes on. A ``paying`` row whose call
    got no answer is settled by reconciling against the submission's bonuses on Prolific, never by paying
    again blindly (server/prolific.py)."""
    __tablename__ = "prolific_bonus"

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int | None] = mapped_column(ForeignKey("study.id", ondelete="SET NULL"), index=True)
    key: Mapped[str] = mapped_column(String(64), unique=True)  # from the Prolific study, participant and reason
    participant_id: Mapped[str] = mapped_column(String(64))
    submission_id: Mapped[str] = mapped_column(String(64), index=True)
    amount: Mapped[str] = mapped_column(String(16))  # "0.80", in the Prolific study's currency
    reason: Mapped[str] = mapped_column(String(500))
    # recorded | setting_up | set_up | paying | paid
    status: Mapped[str] = mapped_column(String(16), default="recorded")
    bulk_id: Mapped[str | None] = mapped_column(String(64), index=True)
    claim: Mapped[str | None] = mapped_column(String(32))  # the token of the run that moved it last
    claimed_at: Mapped[dt.datetime | None]
    note: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    pay_sent_at: Mapped[dt.datetime | None]
    paid_at: Mapped[dt.datetime | None]


class ViewingResult(Base):
    """One ``[viewing]`` check of a worker (server/paradigms/viewing.py): the answers they gave, how many were
    wrong of how many, whether that passes, and what was measured (``measures``: the card's px/mm and the
    devicePixelRatio of the ``screen`` row, the distance, the logMAR tested). One row per worker and check,
    written once (the answers the server drew are never stored: they come again from the keyed seed)."""
    __tablename__ = "viewing_result"
    __table_args__ = (UniqueConstraint("worker_id", "check"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("study.id", ondelete="CASCADE"), index=True)
    worker_id: Mapped[int] = mapped_column(ForeignKey("worker.id", ondelete="CASCADE"))
    check: Mapped[str] = mapped_column(String(16))   # brightness | colour | distance | acuity | screen
    answers: Mapped[dict[str, Any]]
    errors: Mapped[int] = mapped_column(Integer)
    items: Mapped[int] = mapped_column(Integer)
    passed: Mapped[bool] = mapped_column(Boolean)
    measures: Mapped[dict[str, Any] | None]
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
