"""Database models (SQLAlchemy 2.0 declarative, typed ``Mapped[...]``).

Every schema change is an Alembic migration in ``server/migrations/versions``;
``tests/server/test_migrations.py`` fails when these models and the migrations
disagree.

The tables follow the worker's path through a study::

    Study -< StudySet -< Stimulus
                      -< Pair (two stimuli of one set; gold pairs have a known better stimulus)
    Study -< Worker -< Assignment -< Page -< Trial -- Vote (at most one per trial)
                                                   -- GoldResult (gold trials only)

Motion-matching studies (``server/paradigms/motion/paradigm.py``) use their own tables::

    Study -< MotionClip -< MotionProbe
    Assignment -- Calibration (one per assignment)
    Assignment -< Page (kind "rdk" | "main") -< MotionTrial -- MotionResponse (at most one) -- FrameLog

Votes and motion responses are append-only: nothing updates or deletes them.
"""
from __future__ import annotations

import datetime as dt
import secrets
from typing import Any

from sqlalchemy import (JSON, Boolean, DateTime, Float, ForeignKey, Index, Integer, String, Text,
                        UniqueConstraint, false, func, text)
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
    status: Mapped[str] = mapped_column(String(16), default="active")  # active | paused
    seed: Mapped[int] = mapped_column(Integer)
    # The parsed study.toml (every parameter, with defaults filled in) and where its stimuli live.
    config: Mapped[dict[str, Any]]
    stimulus_root: Mapped[str] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    # The key that signs this study's participant links (server/paradigms/entry.py); random per study, so a
    # link signed for one study opens no other. Null only if a migration could not fill it.
    entry_secret: Mapped[str | None] = mapped_column(String(64), default=lambda: secrets.token_hex(32))

    sets: Mapped[list[StudySet]] = relationship(back_populates="study", order_by="StudySet.id")


class StudySet(Base):
    """One scene: a reference and the candidates compared against each other."""
    __tablename__ = "study_set"
    __table_args__ = (UniqueConstraint("study_id", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("study.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200))  # set_id in votes.csv
    # Paths relative to the study's stimulus root.
    reference: Mapped[dict[str, Any]]               # {"full": path, "crops": [path...]}
    overview: Mapped[str | None] = mapped_column(Text)
    crops: Mapped[dict[str, Any]]                   # {"boxes": [...]} with display sizes
    image_width: Mapped[int]
    image_height: Mapped[int]

    study: Mapped[Study] = relationship(back_populates="sets")


class Stimulus(Base):
    __tablename__ = "stimulus"
    __table_args__ = (UniqueConstraint("set_id", "item_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    set_id: Mapped[int] = mapped_column(ForeignKey("study_set.id", ondelete="CASCADE"), index=True)
    item_id: Mapped[str] = mapped_column(String(200))  # candidate ID; "__gold_better_<k>__"/"__gold_worse_<k>__"
    kind: Mapped[str] = mapped_column(String(16))       # candidate | gold_good | gold_bad
    full: Mapped[str] = mapped_column(Text)             # displayed image (amplified for candidates)
    crops: Mapped[dict[str, Any]]                       # {"paths": [path per crop box]}


class Pair(Base):
    __tablename__ = "pair"
    __table_args__ = (UniqueConstraint("set_id", "stimulus_a_id", "stimulus_b_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    set_id: Mapped[int] = mapped_column(ForeignKey("study_set.id", ondelete="CASCADE"), index=True)
    stimulus_a_id: Mapped[int] = mapped_column(ForeignKey("stimulus.id"))
    stimulus_b_id: Mapped[int] = mapped_column(ForeignKey("stimulus.id"))
    target_votes: Mapped[int]  # 0 for gold pairs: they are shown as often as needed
    # Votes stored for this pair (real pairs only), kept by the vote transaction so that choosing
    # the next page's pairs never has to count a study's whole vote table.
    n_votes: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Unanswered trials showing this pair on pages that hold work (Page.held), kept by the page start,
    # the vote and the retirement of lapsed pages (server/allocation.py): with it, choosing a page's
    # pairs reads the pair table instead of counting every open trial of the study.
    n_held: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    is_gold: Mapped[bool] = mapped_column(Boolean, default=False)
    gold_winner_id: Mapped[int | None] = mapped_column(ForeignKey("stimulus.id"))

    stimulus_a: Mapped[Stimulus] = relationship(foreign_keys=[stimulus_a_id])
    stimulus_b: Mapped[Stimulus] = relationship(foreign_keys=[stimulus_b_id])
    set: Mapped[StudySet] = relationship()


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
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    # Motion studies: the RDK screening result (r of u and v pooled); a worker who passed it once
    # skips the RDK block in later assignments of the study.
    screening_r: Mapped[float | None] = mapped_column(Float)
    screening_passed: Mapped[bool | None] = mapped_column(Boolean)
    # A pilot participant (a preview, a test run, marked by the experimenter) or a simulated one (perceptlab
    # simulate; always a pilot too): takes part like anyone but counts for nothing (server/pilot.py).
    pilot: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    simulated: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


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
    # A copy of the worker's pilot flag, kept by server/pilot.py: a vote reads only its locked assignment
    # row, and a pilot's vote fills no pair's target.
    pilot: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())

    worker: Mapped[Worker] = relationship()
    study: Mapped[Study] = relationship()


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
    # A paired-comparison trials page counted in its pairs' Pair.n_held: from its start until it is
    # retired, after its reservation lapsed (server/allocation.py). False for every other page.
    held: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())

    trials: Mapped[list[Trial]] = relationship(back_populates="page", order_by="Trial.position")


class Trial(Base):
    __tablename__ = "trial"
    __table_args__ = (UniqueConstraint("page_id", "position"),
                      # Not partial on "answered": marking a trial answered then touches no index and
                      # stays an in-place (HOT) update on PostgreSQL (migration 0010).
                      Index("ix_trial_pair_id", "pair_id"))

    id: Mapped[int] = mapped_column(primary_key=True)
    # Looked up by the leading column of the unique (page_id, position) key.
    page_id: Mapped[int] = mapped_column(ForeignKey("page.id", ondelete="CASCADE"))
    # Copies of the page's assignment and worker, kept by the server (no foreign key: see Vote).
    assignment_id: Mapped[int] = mapped_column(Integer, index=True)
    worker_id: Mapped[int] = mapped_column(Integer, index=True)
    position: Mapped[int]
    kind: Mapped[str] = mapped_column(String(16), default="pc")  # pc (motion trials: MotionTrial)
    pair_id: Mapped[int | None] = mapped_column(ForeignKey("pair.id"))
    left_is_a: Mapped[bool] = mapped_column(Boolean)  # randomised side, logged
    is_gold: Mapped[bool] = mapped_column(Boolean, default=False)
    is_quiz: Mapped[bool] = mapped_column(Boolean, default=False)
    answered: Mapped[bool] = mapped_column(Boolean, default=False)

    page: Mapped[Page] = relationship(back_populates="trials")
    pair: Mapped[Pair | None] = relationship()


class Vote(Base):
    """One forced-choice response. Append-only; ``client_vote_id`` makes retries idempotent."""
    __tablename__ = "vote"

    id: Mapped[int] = mapped_column(primary_key=True)
    client_vote_id: Mapped[str] = mapped_column(String(36), unique=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trial.id", ondelete="CASCADE"), unique=True)
    # Copies of the trial's assignment, worker, study and pair and of the chosen stimulus, written by
    # the server from the trial. The trial's key is their integrity (vote -> trial -> page ->
    # assignment, all ON DELETE CASCADE); a foreign key on each copy would lock five more rows per
    # vote, the study's shared by every vote of the study (migration 0010).
    assignment_id: Mapped[int] = mapped_column(Integer, index=True)
    worker_id: Mapped[int] = mapped_column(Integer, index=True)
    study_id: Mapped[int] = mapped_column(Integer, index=True)
    pair_id: Mapped[int] = mapped_column(Integer, index=True)
    winner_id: Mapped[int] = mapped_column(Integer)
    chose_left: Mapped[bool] = mapped_column(Boolean)
    rt_ms: Mapped[float] = mapped_column(Float)
    input: Mapped[str] = mapped_column(String(16))
    client_time: Mapped[str | None] = mapped_column(String(40))
    window_width: Mapped[int | None]
    window_height: Mapped[int | None]
    device_pixel_ratio: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow, server_default=func.now())


class GoldResult(Base):
    __tablename__ = "gold_result"

    id: Mapped[int] = mapped_column(primary_key=True)
    vote_id: Mapped[int] = mapped_column(ForeignKey("vote.id", ondelete="CASCADE"), unique=True)
    # Copies of the vote's (no foreign key: see Vote).
    worker_id: Mapped[int] = mapped_column(Integer, index=True)
    assignment_id: Mapped[int] = mapped_column(Integer, index=True)
    is_quiz: Mapped[bool] = mapped_column(Boolean)
    correct: Mapped[bool] = mapped_column(Boolean)

    vote: Mapped[Vote] = relationship()


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


class ScaleSnapshot(Base):
    """Running scale estimates of a study, computed in the background and cached here
    so that every server process shows the same figures."""
    __tablename__ = "scale_snapshot"

    study_id: Mapped[int] = mapped_column(ForeignKey("study.id", ondelete="CASCADE"), primary_key=True)
    n_votes: Mapped[int]
    computed_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    payload: Mapped[dict[str, Any]]


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
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class Bonus(Base):
    """A bonus, recorded (status "pending") before ``send_bonus`` so it is never paid twice."""
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
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class ProlificBonus(Base):
    """The bonus ledger: one row per bonus, written before any Prolific call for it.

    ``recorded`` (the intent) -> ``set_up`` (Prolific holds an unpaid bulk bonus, ``bulk_id``) -> ``paying``
    (committed just before the pay call, which is not idempotent) -> ``paid``. A ``paying`` row whose call
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
    status: Mapped[str] = mapped_column(String(16), default="recorded")  # recorded | set_up | paying | paid
    bulk_id: Mapped[str | None] = mapped_column(String(64), index=True)
    note: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    pay_sent_at: Mapped[dt.datetime | None]
    paid_at: Mapped[dt.datetime | None]

# ---------------------------------------------------------------- motion matching (server/paradigms/motion/paradigm.py)

class MotionClip(Base):
    """One clip of a motion study: its frames (paths relative to the study's stimulus root)."""
    __tablename__ = "motion_clip"
    __table_args__ = (UniqueConstraint("study_id", "clip_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("study.id", ondelete="CASCADE"), index=True)
    clip_id: Mapped[str] = mapped_column(String(200))
    dataset: Mapped[str] = mapped_column(String(200))
    position: Mapped[int]
    frames: Mapped[dict[str, Any]]                    # {"paths": [frame path, ...]}
    width: Mapped[int]
    height: Mapped[int]
    frame_rate: Mapped[float] = mapped_column(Float)
    movie_frames: Mapped[int]                         # stimulus frames per movie: 15 or 10 (from the manifest)

    probes: Mapped[list[MotionProbe]] = relationship(back_populates="clip", order_by="MotionProbe.position")


class MotionProbe(Base):
    """A probe location with its ground-truth flow (clip frame ``frame`` -> ``frame + 1``, pixels per frame)."""
    __tablename__ = "motion_probe"
    __table_args__ = (UniqueConstraint("clip_id", "probe_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    clip_id: Mapped[int] = mapped_column(ForeignKey("motion_clip.id", ondelete="CASCADE"), index=True)
    probe_id: Mapped[str] = mapped_column(String(200))
    position: Mapped[int]
    x: Mapped[float] = mapped_column(Float)
    y: Mapped[float] = mapped_column(Float)
    frame: Mapped[int]
    gt_u: Mapped[float] = mapped_column(Float)
    gt_v: Mapped[float] = mapped_column(Float)

    clip: Mapped[MotionClip] = relationship(back_populates="probes")


class Calibration(Base):
    """The worker's display as measured at the start of one assignment (credit card, refresh rate, and the
    viewing distance from the blind-spot task when the study measures it), measured again when the page
    zoom changed during the blocks."""
    __tablename__ = "calibration"

    id: Mapped[int] = mapped_column(primary_key=True)
    assignment_id: Mapped[int] = mapped_column(ForeignKey("assignment.id", ondelete="CASCADE"), unique=True)
    worker_id: Mapped[int] = mapped_column(ForeignKey("worker.id", ondelete="CASCADE"), index=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("study.id", ondelete="CASCADE"), index=True)
    card_width_px: Mapped[float] = mapped_column(Float)
    card_height_px: Mapped[float] = mapped_column(Float)
    px_per_mm: Mapped[float] = mapped_column(Float)
    viewing_distance_cm: Mapped[float] = mapped_column(Float)
    refresh_hz: Mapped[float] = mapped_column(Float)
    refresh_median_ms: Mapped[float] = mapped_column(Float)
    refresh_irregular_fraction: Mapped[float] = mapped_column(Float)
    # {"ms": [raw requestAnimationFrame intervals]}; after a recalibration (the page zoom changed during
    # the blocks) the row holds the new measurement and "earlier": [the figures it replaced, with when].
    refresh_intervals: Mapped[dict[str, Any]]
    fullscreen: Mapped[bool] = mapped_column(Boolean)
    device_pixel_ratio: Mapped[float | None] = mapped_column(Float)
    screen_width: Mapped[int | None]
    screen_height: Mapped[int | None]
    window_width: Mapped[int | None]
    window_height: Mapped[int | None]
    # The blind-spot task (study setting calibration.blind_spot): {"px": [square-to-dot distance of each
    # sweep]} and the viewing distance they give; None when the study does not measure it.
    blind_spot_px: Mapped[dict[str, Any] | None]
    measured_distance_cm: Mapped[float | None] = mapped_column(Float)
    accepted: Mapped[bool] = mapped_column(Boolean)
    reason: Mapped[str | None] = mapped_column(Text)  # why the display was refused
    body_sha256: Mapped[str] = mapped_column(String(64))  # a retried POST is recognised by its body
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class MotionTrial(Base):
    """One adjustment trial of a motion assignment: an RDK trial (``params`` holds direction, speed,
    seed) or a main trial at a probe; practice trials give feedback and are repeated until passed."""
    __tablename__ = "motion_trial"
    __table_args__ = (UniqueConstraint("page_id", "position"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    page_id: Mapped[int] = mapped_column(ForeignKey("page.id", ondelete="CASCADE"), index=True)
    assignment_id: Mapped[int] = mapped_column(ForeignKey("assignment.id", ondelete="CASCADE"), index=True)
    worker_id: Mapped[int] = mapped_column(ForeignKey("worker.id", ondelete="CASCADE"), index=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("study.id", ondelete="CASCADE"), index=True)
    position: Mapped[int]
    kind: Mapped[str] = mapped_column(String(16))     # rdk | main
    practice: Mapped[bool] = mapped_column(Boolean)
    probe_id: Mapped[int | None] = mapped_column(ForeignKey("motion_probe.id"), index=True)
    repetition: Mapped[int]                           # 1..repetitions (0 for practice)
    # RDK: {"direction_deg", "speed_ppf", "seed"}; any repeat: {"repeat_of": trial id, "reason": ...}
    params: Mapped[dict[str, Any]]
    answered: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class MotionResponse(Base):
    """One adjustment response. Append-only; ``response_id`` (made by the browser) makes retries idempotent."""
    __tablename__ = "motion_response"

    id: Mapped[int] = mapped_column(primary_key=True)
    response_id: Mapped[str] = mapped_column(String(36), unique=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("motion_trial.id", ondelete="CASCADE"), unique=True)
    assignment_id: Mapped[int] = mapped_column(ForeignKey("assignment.id", ondelete="CASCADE"), index=True)
    worker_id: Mapped[int] = mapped_column(ForeignKey("worker.id", ondelete="CASCADE"), index=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("study.id", ondelete="CASCADE"), index=True)
    resp_u: Mapped[float] = mapped_column(Float)
    resp_v: Mapped[float] = mapped_column(Float)
    direction_deg: Mapped[float] = mapped_column(Float)
    speed_ppf: Mapped[float] = mapped_column(Float)
    cycles: Mapped[int]
    rt_ms: Mapped[float] = mapped_column(Float)
    # Computed by the server from the raw frame log with the worker's calibrated refresh interval.
    frame_drops: Mapped[int]
    n_intervals: Mapped[int]
    onset_err_mean_ms: Mapped[float | None] = mapped_column(Float)
    onset_err_sd_ms: Mapped[float | None] = mapped_column(Float)
    skipped_frames: Mapped[int]
    practice_passed: Mapped[bool | None] = mapped_column(Boolean)  # practice trials only
    timing_flagged: Mapped[bool] = mapped_column(Boolean)          # frame_drops > 0
    repeat_added: Mapped[bool] = mapped_column(Boolean)
    client_time: Mapped[str | None] = mapped_column(String(40))
    window_width: Mapped[int | None]
    window_height: Mapped[int | None]
    device_pixel_ratio: Mapped[float | None] = mapped_column(Float)
    body_sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow, server_default=func.now())


class FrameLog(Base):
    """The raw requestAnimationFrame log of one response: ``{"phases": [{"cycle", "phase", "t": [...]}]}``."""
    __tablename__ = "frame_log"

    id: Mapped[int] = mapped_column(primary_key=True)
    response_id: Mapped[int] = mapped_column(ForeignKey("motion_response.id", ondelete="CASCADE"), unique=True)
    frames: Mapped[dict[str, Any]]
