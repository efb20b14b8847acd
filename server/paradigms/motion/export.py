"""Motion-matching exports: motion.csv, rdk.csv, frames.csv, calibration.csv, and the dashboard's
workers table.

Worker IDs are pseudonymised as in votes.csv (:func:`server.exports.worker_label`) unless the salt
is None. The frame timing of frames.csv is recomputed from each response's frame log with
:mod:`analysis.frame_timing`, as the server did when the response was stored.
"""
from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from analysis.formats import table_csv
from analysis.frame_timing import phase_timing
from stimuli.rdk import rdk_vector

from ...exports import pilot_filter, pseudonym, worker_label
from ...models import Assignment, Study, Worker, as_utc
from ..core import spec_for
from ..stages import Stage
from .models import Calibration, FrameLog, MotionClip, MotionProbe, MotionResponse, MotionTrial

RDK_MOVIE_FRAMES = 15  # frames of an RDK trial's dot movie


def frame_timing(frames: list[dict[str, Any]], refresh_ms: float, movie_frames: int, spec) -> list:
    """:func:`analysis.frame_timing.phase_timing` of every logged phase (movie or matching)."""
    return [phase_timing(p["t"], refresh_ms, movie_frames if p["phase"] == "movie" else spec.matching_frames,
                         spec.frame_ms) for p in frames]


MOTION_COLUMNS = ("worker_id", "clip_id", "probe_id", "repetition", "gt_u", "gt_v", "resp_u", "resp_v", "cycles",
                  "rt_ms", "frame_drops", "onset_err_mean_ms", "onset_err_sd_ms", "dataset", "probe_x", "probe_y",
                  "probe_frame", "trial_id", "timing_flagged")
RDK_COLUMNS = MOTION_COLUMNS + ("practice",)
FRAMES_COLUMNS = ("worker_id", "trial_id", "clip_id", "probe_id", "repetition", "cycle", "phase", "raf_index", "t_ms",
                  "stim_frame", "interval_ms", "dropped", "onset_err_ms")
CALIBRATION_COLUMNS = ("worker_id", "px_per_mm", "viewing_distance_cm", "refresh_hz", "refresh_irregular_fraction",
                       "fullscreen", "screening_r", "screening_passed", "measured_distance_cm")
# workers.csv of a motion study: the latest calibration (px_per_mm of the card, the viewing distance
# the worker was asked to sit at and, with [calibration] blind_spot, the one measured; refresh), the RDK
# screening and the main trials of every session.
MOTION_WORKERS_COLUMNS = ("worker_id", "platform", "status", "stage", "sessions", "sessions_completed",
                          "calibrations", "px_per_mm", "viewing_distance_cm", "measured_distance_cm",
                          "refresh_hz", "display_accepted",
                          "fullscreen", "screening_r", "screening_passed", "trials_done", "trials_with_drops",
                          "drop_rate", "dpr", "screen_width", "screen_height", "window_width", "window_height",
                          "first_seen")
MOTION_FILES = {"motion.csv": MOTION_COLUMNS, "rdk.csv": RDK_COLUMNS, "frames.csv": FRAMES_COLUMNS,
                "calibration.csv": CALIBRATION_COLUMNS}


def _blank(value: Any) -> Any:
    """None as an empty field (``table_csv`` writes NaN as empty too)."""
    return "" if value is None else value


def _motion_response_rows(session: Session, study_id: int, include_pilot: bool = False):
    return session.execute(
        select(Worker.external_id, MotionTrial.id, MotionTrial.kind, MotionTrial.practice, MotionTrial.position,
               MotionTrial.repetition, MotionTrial.params, MotionProbe.probe_id, MotionProbe.x, MotionProbe.y,
               MotionProbe.frame, MotionProbe.gt_u, MotionProbe.gt_v, MotionClip.clip_id, MotionClip.dataset,
               MotionClip.movie_frames, MotionResponse)
        .select_from(MotionResponse)
        .join(MotionTrial, MotionResponse.trial_id == MotionTrial.id)
        .outerjoin(MotionProbe, MotionTrial.probe_id == MotionProbe.id)
        .outerjoin(MotionClip, MotionProbe.clip_id == MotionClip.id)
        .join(Worker, MotionResponse.worker_id == Worker.id)
        .where(MotionResponse.study_id == study_id, pilot_filter(include_pilot))
        .order_by(MotionResponse.id)).all()


def export_motion(session: Session, study_id: int, *, salt: bytes | None,
                  include_pilot: bool = False) -> dict[str, list[dict[str, Any]]]:
    """Every motion response of a study as records of motion.csv (main test trials), rdk.csv (RDK
    trials, practice flagged) and calibration.csv (one row per calibrated assignment).

    Worker IDs are pseudonymised as in votes.csv unless ``salt`` is None. Timing columns are the
    server's summary of each trial's frame log (``frame_drops`` > 0 sets ``timing_flagged``).
    RDK rows use ``clip_id`` "rdk", ``probe_id`` "rdk-<trial id>" (each RDK trial is its own stimulus,
    so the ID is unique across workers and analysis.motion reads rdk.csv like motion.csv) and ``dataset`` "rdk".
    Pilot and simulated participants (server/pilot.py) only with ``include_pilot``.
    """
    labels: dict[str, str] = {}
    motion, rdk = [], []
    for row in _motion_response_rows(session, study_id, include_pilot):
        raw, response = row[0], row[-1]
        if raw not in labels:
            labels[raw] = worker_label(raw, salt)
        record = {"worker_id": labels[raw], "repetition": row.repetition, "resp_u": response.resp_u,
                  "resp_v": response.resp_v, "cycles": response.cycles, "rt_ms": response.rt_ms,
                  "frame_drops": response.frame_drops, "onset_err_mean_ms": _blank(response.onset_err_mean_ms),
                  "onset_err_sd_ms": _blank(response.onset_err_sd_ms), "trial_id": str(row.id),
                  "timing_flagged": "1" if response.timing_flagged else "0"}
        if row.kind == Stage.RDK:
            gt_u, gt_v = rdk_vector(row.params["direction_deg"], row.params["speed_ppf"])
            record.update(clip_id="rdk", probe_id=f"rdk-{row.id}", dataset="rdk", gt_u=float(gt_u),
                          gt_v=float(gt_v), probe_x="", probe_y="", probe_frame="",
                          practice="1" if row.practice else "0")
            rdk.append(record)
        elif not row.practice:
            record.update(clip_id=row.clip_id, probe_id=row.probe_id, dataset=row.dataset, gt_u=row.gt_u,
                          gt_v=row.gt_v, probe_x=row.x, probe_y=row.y, probe_frame=row.frame)
            motion.append(record)
    return {"motion.csv": motion, "rdk.csv": rdk,
            "calibration.csv": _calibration_rows(session, study_id, salt, include_pilot)}


def _calibration_rows(session: Session, study_id: int, salt: bytes | None,
                      include_pilot: bool = False) -> list[dict[str, Any]]:
    rows = []
    for raw, r, passed, cal in session.execute(
            select(Worker.external_id, Worker.screening_r, Worker.screening_passed, Calibration)
            .join(Worker, Calibration.worker_id == Worker.id)
            .where(Calibration.study_id == study_id, pilot_filter(include_pilot)).order_by(Calibration.id)):
        rows.append({"worker_id": worker_label(raw, salt), "px_per_mm": cal.px_per_mm,
                     "viewing_distance_cm": cal.viewing_distance_cm, "refresh_hz": cal.refresh_hz,
                     "refresh_irregular_fraction": cal.refresh_irregular_fraction,
                     "fullscreen": "1" if cal.fullscreen else "0", "screening_r": _blank(r),
                     "screening_passed": "" if passed is None else ("1" if passed else "0"),
                     "measured_distance_cm": _blank(cal.measured_distance_cm)})
    return rows


def export_frames(session: Session, study_id: int, *, salt: bytes | None,
                  include_pilot: bool = False) -> list[dict[str, Any]]:
    """frames.csv records: one per requestAnimationFrame callback of every logged phase.

    ``t_ms`` is relative to the phase onset; ``stim_frame``, ``interval_ms`` (to the previous
    callback), ``dropped`` and ``onset_err_ms`` (on the first callback of each stimulus frame only)
    come from :func:`analysis.frame_timing.phase_timing` with the assignment's calibrated refresh.
    """
    spec = spec_for(session, study_id)
    refresh = dict(session.execute(select(Calibration.assignment_id, Calibration.refresh_median_ms)
                                   .where(Calibration.study_id == study_id)).all())
    logs = dict(session.execute(select(FrameLog.response_id, FrameLog.frames).join(
        MotionResponse, FrameLog.response_id == MotionResponse.id).where(MotionResponse.study_id == study_id)).all())
    labels: dict[str, str] = {}
    records = []
    for row in _motion_response_rows(session, study_id, include_pilot):
        raw, response = row[0], row[-1]
        if raw not in labels:
            labels[raw] = worker_label(raw, salt)
        phases = logs.get(response.id, {}).get("phases", [])
        movie_frames = RDK_MOVIE_FRAMES if row.kind == Stage.RDK else row.movie_frames
        timings = frame_timing(phases, refresh[response.assignment_id], movie_frames, spec)
        clip_id, probe_id = (("rdk", f"rdk-{row.id}") if row.kind == Stage.RDK else (row.clip_id, row.probe_id))
        common = {"worker_id": labels[raw], "trial_id": str(row.id), "clip_id": clip_id, "probe_id": probe_id,
                  "repetition": row.repetition}
        for phase, timing in zip(phases, timings):
            records += _phase_records(common, phase, timing)
    return records


def _phase_records(common: dict[str, Any], phase: dict[str, Any], timing) -> list[dict[str, Any]]:
    t = phase["t"]
    onsets = iter(timing.onset_errors_ms)
    seen: set[int] = set()
    n_frames = len(timing.onset_errors_ms) + timing.skipped_frames
    out = []
    for i, stamp in enumerate(t):
        k = int(timing.stim_index[i])
        onset: Any = ""
        if k < n_frames and k not in seen:  # the first callback showing stimulus frame k is its onset
            seen.add(k)
            onset = float(next(onsets))
        out.append({**common, "cycle": phase["cycle"], "phase": phase["phase"], "raf_index": i,
                    "t_ms": stamp - t[0], "stim_frame": k,
                    "interval_ms": float(timing.intervals_ms[i - 1]) if i else "",
                    "dropped": ("1" if timing.dropped[i - 1] else "0") if i else "", "onset_err_ms": onset})
    return out


def study_clip_manifest(session: Session, study_id: int):
    """The study's stored clips and probes as a :class:`~stimuli.motion_clips.ClipManifest`, for the analysis.

    Frames are the files the study shows (relative to its stimulus root); the ground truth is the stored
    one (no flow files are read). Returns ``(manifest, note)``: ``(None, why)`` when the study has no clips
    or a frame is missing on this machine (the analysis then draws on a blank canvas and has no image
    gradients), else ``(manifest, a line saying where the frames are)``.
    """
    from pathlib import Path

    from stimuli.motion_clips import Clip, ClipManifest, Probe

    study = session.get(Study, study_id)
    rows = session.scalars(select(MotionClip).where(MotionClip.study_id == study_id)
                           .order_by(MotionClip.position)).all()
    if not rows:
        return None, "the study has no clips"
    root = Path(study.stimulus_root)
    probes: dict[int, list[Probe]] = {}
    for p in session.scalars(select(MotionProbe).join(MotionClip, MotionProbe.clip_id == MotionClip.id)
                             .where(MotionClip.study_id == study_id).order_by(MotionProbe.position)):
        probes.setdefault(p.clip_id, []).append(Probe(p.probe_id, p.x, p.y, p.frame, p.gt_u, p.gt_v))
    clips = []
    for row in rows:
        frames = tuple(row.frames["paths"])
        missing = next((f for f in frames if not (root / f).is_file()), None)
        if missing is not None:
            return None, (f"clip frames not found ({root / missing}): fields drawn on a blank canvas, "
                          "no image gradients")
        clips.append(Clip(clip_id=row.clip_id, dataset=row.dataset, frame_rate=row.frame_rate, frames=frames,
                          flow=(None,) * len(frames), width=row.width, height=row.height,
                          probes=tuple(probes.get(row.id, ())), movie_frames=row.movie_frames))
    manifest = ClipManifest(path=root, root=root, noise=None, clips=tuple(clips))
    return manifest, f"{len(clips)} clips of the study, frames under {root}"


def motion_csv_texts(tables: dict[str, list[dict[str, Any]]]) -> dict[str, str]:
    """CSV text of each motion export file (header only when a table is empty)."""
    return {name: table_csv(MOTION_FILES[name], records) for name, records in tables.items()}


def worker_block_counts(session: Session, study_id: int) -> dict[int, dict[str, int]]:
    """Per worker of a study: answered main test trials, and those with frame drops (dashboard)."""
    rows = session.execute(
        select(MotionResponse.worker_id, func.count(),
               func.count(MotionResponse.id).filter(MotionResponse.timing_flagged))
        .join(MotionTrial, MotionResponse.trial_id == MotionTrial.id)
        .where(MotionResponse.study_id == study_id, MotionTrial.kind == Stage.MAIN, ~MotionTrial.practice)
        .group_by(MotionResponse.worker_id)).all()
    return {int(w): {"trials_done": int(n), "flagged": int(f)} for w, n, f in rows}


def motion_workers(session: Session, study_id: int, salt: bytes) -> list[dict[str, Any]]:
    """The motion dashboard's workers table: pseudonym, status, latest stage and calibration, screening,
    answered main trials and their frame-drop rate."""
    counts = worker_block_counts(session, study_id)
    stages = dict(session.execute(select(Assignment.worker_id, Assignment.stage)
                                  .where(Assignment.study_id == study_id).order_by(Assignment.id)).all())
    calibrations = {c.worker_id: c for c in session.scalars(
        select(Calibration).where(Calibration.study_id == study_id).order_by(Calibration.id))}
    out = []
    for worker in session.scalars(select(Worker).where(Worker.study_id == study_id, ~Worker.pilot).order_by(Worker.id)):
        cal = calibrations.get(worker.id)
        done = counts.get(worker.id, {"trials_done": 0, "flagged": 0})
        out.append({"worker_id": pseudonym(salt, worker.external_id), "status": worker.status,
                    "stage": stages.get(worker.id), "px_per_mm": cal.px_per_mm if cal else None,
                    "viewing_distance_cm": cal.viewing_distance_cm if cal else None,
                    "measured_distance_cm": cal.measured_distance_cm if cal else None,
                    "refresh_hz": cal.refresh_hz if cal else None, "refused": bool(cal and not cal.accepted),
                    "screening_r": worker.screening_r, "screening_passed": worker.screening_passed,
                    "trials_done": done["trials_done"],
                    "drop_rate": done["flagged"] / done["trials_done"] if done["trials_done"] else None})
    return out


def motion_workers_table(session: Session, study_id: int, *, salt: bytes | None,
                         include_pilot: bool = False) -> list[dict[str, Any]]:
    """workers.csv records of a motion study (:data:`MOTION_WORKERS_COLUMNS`), one per worker.

    Calibration and environment columns are the worker's latest calibration (each session calibrates);
    ``trials_done`` counts answered main test trials of all sessions and ``drop_rate`` the share of
    them with dropped frames. Worker IDs are pseudonymised unless ``salt`` is None.
    """
    counts = worker_block_counts(session, study_id)
    sessions: dict[int, list[str]] = {}
    for worker_id, stage in session.execute(select(Assignment.worker_id, Assignment.stage)
                                            .where(Assignment.study_id == study_id).order_by(Assignment.id)):
        sessions.setdefault(worker_id, []).append(stage)
    calibrations: dict[int, list[Calibration]] = {}
    for cal in session.scalars(select(Calibration).where(Calibration.study_id == study_id).order_by(Calibration.id)):
        calibrations.setdefault(cal.worker_id, []).append(cal)
    records = []
    for worker in session.scalars(select(Worker).where(Worker.study_id == study_id, pilot_filter(include_pilot))
                                  .order_by(Worker.id)):
        stages, cals = sessions.get(worker.id, []), calibrations.get(worker.id, [])
        done = counts.get(worker.id, {"trials_done": 0, "flagged": 0})
        records.append({"worker_id": worker_label(worker.external_id, salt), "platform": worker.platform,
                        "status": worker.status, "stage": stages[-1] if stages else "", "sessions": len(stages),
                        "sessions_completed": stages.count(Stage.COMPLETED), "calibrations": len(cals),
                        **_calibration_fields(cals[-1] if cals else None),
                        "screening_r": _blank(worker.screening_r),
                        "screening_passed": "" if worker.screening_passed is None else int(worker.screening_passed),
                        "trials_done": done["trials_done"], "trials_with_drops": done["flagged"],
                        "drop_rate": done["flagged"] / done["trials_done"] if done["trials_done"] else "",
                        "first_seen": as_utc(worker.created_at).astimezone(dt.timezone.utc).isoformat()})
    return records


_CALIBRATION_FIELDS = ("px_per_mm", "viewing_distance_cm", "measured_distance_cm", "refresh_hz", "display_accepted",
                       "fullscreen", "dpr", "screen_width", "screen_height", "window_width", "window_height")


def _calibration_fields(cal: Calibration | None) -> dict[str, Any]:
    """A worker's calibration and display as workers.csv fields (empty before the first calibration)."""
    if cal is None:
        return dict.fromkeys(_CALIBRATION_FIELDS, "")
    return {"px_per_mm": cal.px_per_mm, "viewing_distance_cm": cal.viewing_distance_cm,
            "measured_distance_cm": _blank(cal.measured_distance_cm), "refresh_hz": cal.refresh_hz,
            "display_accepted": int(cal.accepted), "fullscreen": int(cal.fullscreen),
            "dpr": _blank(cal.device_pixel_ratio), "screen_width": _blank(cal.screen_width),
            "screen_height": _blank(cal.screen_height), "window_width": _blank(cal.window_width),
            "window_height": _blank(cal.window_height)}
