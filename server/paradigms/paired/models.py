"""Paired comparison's tables (on :class:`server.models.Base`; :func:`server.paradigms.load_models` imports
this module wherever every table must be known)::

    Study -< StudySet -< Stimulus
                      -< Pair (two stimuli of one set; gold pairs have a known better stimulus: a pair of
                               the design chosen as gold, or a gold-only pair, is_gold)
    Assignment -< Page (kind "quiz" | "trials") -< Trial -- Vote (at most one per trial)
                                                         -- GoldResult (gold trials only)
    Study -- ScaleSnapshot (the running estimate, server/paradigms/paired/live_scales.py)

Votes are append-only: nothing updates or deletes them.
"""
from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, Boolean, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint, func
from sqlalchemy.orm import Mapped, backref, mapped_column, relationship

from ...models import Base, Page, Study, utcnow

__all__ = ["GoldResult", "Pair", "ScaleSnapshot", "Stimulus", "StudySet", "Trial", "Vote"]


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

    # Study.sets (the study's sets in order) is declared from here: server/models.py names no paradigm's table.
    study: Mapped[Study] = relationship(backref=backref("sets", order_by="StudySet.id"))


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
    target_votes: Mapped[int]  # 0 for gold-only pairs: they are shown as often as needed
    # Votes stored for this pair (real pairs only), kept by the vote transaction so that choosing
    # the next page's pairs never has to count a study's whole vote table.
    n_votes: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Unanswered trials showing this pair on pages that hold work (Page.held), kept by the page start,
    # the vote and the retirement of lapsed pages (server/paradigms/paired/allocation.py): with it, choosing a page's
    # pairs reads the pair table instead of counting every open trial of the study.
    n_held: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # A gold-only pair (no pair of the design: synthetic gold images, or candidates outside the design), shown
    # only as gold. A design pair chosen as gold is a real pair (is_gold false) with a gold_winner_id: its gold
    # trials (Trial.is_gold) are votes of it, counted toward its target like its real trials.
    is_gold: Mapped[bool] = mapped_column(Boolean, default=False)
    gold_winner_id: Mapped[int | None] = mapped_column(ForeignKey("stimulus.id"))

    stimulus_a: Mapped[Stimulus] = relationship(foreign_keys=[stimulus_a_id])
    stimulus_b: Mapped[Stimulus] = relationship(foreign_keys=[stimulus_b_id])
    set: Mapped[StudySet] = relationship()



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

    page: Mapped[Page] = relationship()
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
    # vote, the study's shared by every vote of the study (migration 0010). No index on the assignment
    # or the worker: every query that reads them selects a study's votes first (migration 0025).
    assignment_id: Mapped[int] = mapped_column(Integer)
    worker_id: Mapped[int] = mapped_column(Integer)
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
    # A video trial's playback log, both clips (and the reference's) summed, with the drift between the clips
    # played together (server/paradigms/media.py parse_playback); None for images.
    playback: Mapped[dict | None] = mapped_column(JSON, nullable=True, default=None)


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



class ScaleSnapshot(Base):
    """Running scale estimates of a study, computed in the background and cached here
    so that every server process shows the same figures."""
    __tablename__ = "scale_snapshot"

    study_id: Mapped[int] = mapped_column(ForeignKey("study.id", ondelete="CASCADE"), primary_key=True)
    n_votes: Mapped[int]
    computed_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    payload: Mapped[dict[str, Any]]
