"""Motion matching's tables (on :class:`server.models.Base`; :func:`server.paradigms.load_models` imports
this module wherever every table must be known)::

    Study -< MotionClip -< MotionProbe
    Assignment -- Calibration (one per assignment)
    Assignment -< Page (kind "rdk" | "main") -< MotionTrial -- MotionResponse (at most one) -- FrameLog

The RDK screening's result is kept on the shared Worker row (``screening_r``, ``screening_passed``).
Motion responses are append-only: nothing updates or deletes them.
"""
from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import Boolean, Float, ForeignKey, String, Text, UniqueConstraint, func
from sqlalchemy.orm import Mapped, mapped_column, relationship

from ...models import Base, utcnow

__all__ = ["Calibration", "FrameLog", "MotionClip", "MotionProbe", "MotionResponse", "MotionTrial"]


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
