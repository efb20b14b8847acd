"""The rating paradigm's tables (on :class:`server.models.Base`, so that migrations, ``create_all`` and
the tests see them with every other table).

::

    Study -< RatingStimulus (one image to rate: a scene's candidate, its hidden reference or a gold image)
    Assignment -< Page -< RatingTrial -- RatingResponse (at most one per trial) -- RatingGoldResult

Responses are append-only: nothing updates or deletes them. A response's ``client_rating_id`` (a UUID
made by the browser) makes retries idempotent, as a paired vote's ``client_vote_id`` does.
"""
from __future__ import annotations

import datetime as dt

from sqlalchemy import JSON, Boolean, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint, false, func
from sqlalchemy.orm import Mapped, mapped_column

from ...models import Base, utcnow

# RatingStimulus.role: what the image shown as the test is.
TEST = "test"                          # a candidate of the scene (a method's output): real data
HIDDEN_REFERENCE = "hidden_reference"  # the reference itself, in a copy of its own (quality check)
GOLD_LOW = "gold_low"                  # a strongly degraded copy of the scene (quality check)
ROLES = (TEST, HIDDEN_REFERENCE, GOLD_LOW)


class RatingStimulus(Base):
    """One image a rating study asks about, with the reference it is judged against (DCR, CCR).

    ``stimulus_id`` in ratings.csv is ``<scene>/<item_id>``: for candidates exactly the ``set_id`` and
    ``item_id`` of a paired-comparison study's votes.csv and scales.csv over the same manifests, so the
    two studies' results join (server/paradigms/rating/export.py).
    """
    __tablename__ = "rating_stimulus"
    __table_args__ = (UniqueConstraint("study_id", "scene", "item_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("study.id", ondelete="CASCADE"), index=True)
    scene: Mapped[str] = mapped_column(String(200))    # the manifest's scene_id (set_id of a paired study)
    item_id: Mapped[str] = mapped_column(String(200))  # candidate ID; "__reference__", "__gold_low_<k>__"
    role: Mapped[str] = mapped_column(String(16))      # test | hidden_reference | gold_low
    # Paths relative to the study's stimulus root; served under opaque names (server/stimulus_index.py).
    path: Mapped[str] = mapped_column(Text)            # the image rated (the test)
    reference_path: Mapped[str] = mapped_column(Text)  # the scene's reference (shown by DCR and CCR)
    width: Mapped[int]
    height: Mapped[int]
    # 0 for quality checks: shown as often as needed. The ratings a stimulus has are counted from the responses
    # of participants who are not pilots (server/paradigms/rating/allocation.py), never kept in a counter that a
    # reset, a pilot marked afterwards or a deleted participant would leave stale.
    target_ratings: Mapped[int]
    is_gold: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class RatingTrial(Base):
    """One rating of one stimulus on a page of an assignment."""
    __tablename__ = "rating_trial"
    __table_args__ = (UniqueConstraint("page_id", "position"), Index("ix_rating_trial_stimulus_id", "stimulus_id"))

    id: Mapped[int] = mapped_column(primary_key=True)
    page_id: Mapped[int] = mapped_column(ForeignKey("page.id", ondelete="CASCADE"))
    # Copies of the page's assignment and worker, kept by the server (no foreign key: see server.models.Vote).
    assignment_id: Mapped[int] = mapped_column(Integer, index=True)
    worker_id: Mapped[int] = mapped_column(Integer, index=True)
    position: Mapped[int]
    stimulus_id: Mapped[int] = mapped_column(ForeignKey("rating_stimulus.id"))
    # CCR: whether the reference is the FIRST of the two images (drawn per trial, never sent); DCR always
    # shows it first, ACR not at all.
    reference_first: Mapped[bool] = mapped_column(Boolean, default=True)
    is_gold: Mapped[bool] = mapped_column(Boolean, default=False)
    is_quiz: Mapped[bool] = mapped_column(Boolean, default=False)
    answered: Mapped[bool] = mapped_column(Boolean, default=False)


class RatingResponse(Base):
    """One rating. Append-only; ``client_rating_id`` makes retries idempotent."""
    __tablename__ = "rating_response"

    id: Mapped[int] = mapped_column(primary_key=True)
    client_rating_id: Mapped[str] = mapped_column(String(36), unique=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("rating_trial.id", ondelete="CASCADE"), unique=True)
    # Copies of the trial's (no foreign key: see server.models.Vote).
    assignment_id: Mapped[int] = mapped_column(Integer, index=True)
    worker_id: Mapped[int] = mapped_column(Integer, index=True)
    study_id: Mapped[int] = mapped_column(Integer, index=True)
    stimulus_id: Mapped[int] = mapped_column(Integer, index=True)
    # The worker's answer on the scale shown (``raw``) and the stored rating: CCR normalised so that a
    # positive value means the test (processed) image is better than the reference; else equal to raw.
    raw_rating: Mapped[float] = mapped_column(Float)
    rating: Mapped[float] = mapped_column(Float)
    rt_ms: Mapped[float] = mapped_column(Float)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow, server_default=func.now())
    # A video trial's playback log (server/paradigms/media.py parse_playback); None for images.
    playback: Mapped[dict | None] = mapped_column(JSON, nullable=True, default=None)


class RatingGoldResult(Base):
    """Whether a quality-check rating (quiz, hidden reference, gold) fell in its known range."""
    __tablename__ = "rating_gold_result"

    id: Mapped[int] = mapped_column(primary_key=True)
    response_id: Mapped[int] = mapped_column(ForeignKey("rating_response.id", ondelete="CASCADE"), unique=True)
    worker_id: Mapped[int] = mapped_column(Integer, index=True)
    assignment_id: Mapped[int] = mapped_column(Integer, index=True)
    is_quiz: Mapped[bool] = mapped_column(Boolean)
    correct: Mapped[bool] = mapped_column(Boolean)
