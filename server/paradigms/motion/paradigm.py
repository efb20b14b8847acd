"""The worker's path through a motion-matching study (HuPerFlow paradigm), as database transactions.

Stages of an assignment::

    consent -> instructions -> calibration -> rdk -> main -> completed
                                    \\-> disqualified (refresh rate too low or irregular)
                                                \\-> disqualified (RDK screening r below the threshold: for good)
    consent, calibration, rdk -> full (no clip needs observers any more: never paid; see
                                       Paradigm.no_work_left)

A worker who passed the RDK screening in an earlier assignment of the study goes
from calibration straight to main. Each block (RDK screening, main session) is a
Page (kind ``rdk`` / ``main``) of :class:`~server.paradigms.motion.models.MotionTrial` rows:
practice trials first (with feedback; a failed one is repeated until
``practice_needed`` passes or ``practice_max`` practice trials), then the test
trials; the main block's practice never shows a probe the block tests (:mod:`.practice`).
Responses are append-only :class:`~server.paradigms.motion.models.MotionResponse` rows
with their raw frame log; the per-trial timing summary is computed here from
that log with :mod:`analysis.frame_timing` and the worker's calibrated refresh
interval.

The study file, its spec and study creation are in :mod:`server.paradigms.motion.study`, the
exports in :mod:`server.paradigms.motion.export`. As everywhere in :mod:`server.paradigms`, every
function runs inside the caller's session and leaves committing to it; the caller locks the
assignment row (:func:`server.paradigms.core.lock_assignment`) before a response or an action.
"""
from __future__ import annotations

import hashlib
import json
import math
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import and_, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from analysis.frame_timing import estimate_refresh, summarise_phases
from stimuli.motion_clips import movie_window
from stimuli.rdk import rdk_dot_movie, rdk_trial_params, rdk_vector

from ... import validation as check
from ...allocation import now, release_other_pages, renew_page, reservation_end
from ...i18n import lazy_ngettext
from ...errors import ApiError, invalid, reject_unknown
from ...exports import pseudonym
from ...openapi import load_part
from ...models import Assignment, Page, Study, Worker, utcnow
from ...reasons import REASONS
from . import export as motion_export, study as motion_study
from ..core import (MAX_ROW_ID, UUID_PATTERN, AssignmentRow, NewPage, Paradigm, PayUnit, ResponseKind,
                   ResultsAnalysis, ResultsOptions, StudyExport, TimePrior, UrlFor, add_trials, allocation_lock,
                   as_object, check_replay, complete, completion_info, end_assignment, ended_error, new_page, open_trials, page_count,
                   reason_message, refused_after_the_end, seeded_rng, spec_for, stop, with_assignment_object)
from ..display import WindowRequirement
# The card and blind-spot figures are the floor's (server/paradigms/screen.py), shared with the [viewing] checks.
from ..screen import BLIND_SPOT_CM, CARD_HEIGHT_MM, CARD_WIDTH_MM, blind_spot_distance, calibration_figures  # noqa: F401
from .export import RDK_MOVIE_FRAMES, frame_timing
from .models import Calibration, FrameLog, MotionClip, MotionProbe, MotionResponse, MotionTrial
from .practice import practice_probes, practice_warning
from .study import MotionSpec
from ..stages import TERMINAL_STAGES, TURNED_AWAY, Stage

STAGE_ORDER = (Stage.CONSENT, Stage.INSTRUCTIONS, Stage.CALIBRATION, Stage.RDK, Stage.MAIN, Stage.COMPLETED)
BLOCK_STAGES = (Stage.RDK, Stage.MAIN)  # a block's Page.kind and MotionTrial.kind are its stage
_ALLOCATION_LOCKS = 7_100_000  # advisory lock namespace of clip allocation (core.allocation_lock)
MAX_PHASES = 200
MAX_TIMESTAMPS = 20_000
# A motion response carries its raw frame log: up to MAX_TIMESTAMPS rAF timestamps of about 11 bytes
# each, which the worker API's 64 kB would cut short.
MOTION_RESPONSE_BYTES = 256 * 1024
MAX_REFRESH_INTERVALS = 2_000
MAX_RESPONSE_PPF = 180.0  # bound on |resp_u|, |resp_v| and speed (the panel gives at most max_speed_ppf)


# ---------------------------------------------------------------- stage actions

def perform_motion_action(session: Session, assignment: Assignment, action: str) -> None:
    """``consent`` (consent -> instructions) and ``instructions_done`` (instructions -> calibration).

    A repeated action that was done already does nothing; the paired-comparison actions
    ``continue`` and ``finish`` do not exist in motion studies (409).
    """
    expected = {"consent": Stage.CONSENT, "instructions_done": Stage.INSTRUCTIONS}
    if action in ("continue", "finish"):
        raise ApiError(409, "wrong_stage", f"{action} is not an action of motion studies")
    if action not in expected:
        raise invalid(f"unknown action {action!r}")
    stage = assignment.stage
    if stage != expected[action]:
        following = STAGE_ORDER.index(expected[action]) + 1
        if stage in (*TURNED_AWAY, Stage.FULL) or (stage in STAGE_ORDER and STAGE_ORDER.index(stage) >= following):
            return  # a repeated click or a retried request: the first one did it
        raise ApiError(409, "wrong_stage", f"cannot {action.replace('_', ' ')} at stage {stage}")
    assignment.stage = STAGE_ORDER[STAGE_ORDER.index(stage) + 1]


# ---------------------------------------------------------------- validation helpers

def _number(body: dict, key: str, low: float, high: float, *, required: bool = True) -> float | None:
    return check.number(body.get(key), key, low, high, required=required)


def _integer(body: dict, key: str, low: int, high: int, *, required: bool = True) -> int | None:
    return check.integer(body.get(key), key, low, high, required=required)


def _digest(values: dict[str, Any]) -> str:
    """A retry is recognised by the SHA-256 of its significant fields (canonical JSON)."""
    return hashlib.sha256(json.dumps(values, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


# ---------------------------------------------------------------- calibration

_CALIBRATION_FIELDS = ("card_width_px", "card_height_px", "refresh_intervals_ms", "fullscreen", "device_pixel_ratio",
                       "screen_width", "screen_height", "window_width", "window_height", "blind_spot_px",
                       "recalibration")


def parse_calibration(payload: Any, spec: MotionSpec) -> dict[str, Any]:
    """Validate a calibration body (see the OpenAPI file); raise a 400 naming the first problem."""
    if not isinstance(payload, dict):
        raise invalid("the body must be a JSON object")
    reject_unknown(payload, _CALIBRATION_FIELDS)
    values: dict[str, Any] = {"card_width_px": _number(payload, "card_width_px", *check.SIZE_PX),
                              "card_height_px": _number(payload, "card_height_px", *check.SIZE_PX)}
    intervals = payload.get("refresh_intervals_ms")
    if not isinstance(intervals, list) or not spec.refresh_samples <= len(intervals) <= MAX_REFRESH_INTERVALS:
        raise invalid(f"refresh_intervals_ms must be a list of {spec.refresh_samples} to {MAX_REFRESH_INTERVALS} "
                      "requestAnimationFrame intervals")
    values["refresh_intervals_ms"] = check.number_list(intervals, "refresh_intervals_ms", *check.RAF_INTERVAL_MS)
    if 1000.0 / float(np.median(values["refresh_intervals_ms"])) > check.REFRESH_HZ[1]:
        # No display refreshes this fast: a forged or broken timer. (Too slow is a real display
        # or a throttled tab; record_calibration refuses those, with the reason.)
        raise invalid(f"refresh_intervals_ms: the median interval gives more than {check.REFRESH_HZ[1]:g} Hz, "
                      "which is not a display's refresh rate")
    if not isinstance(payload.get("fullscreen"), bool):
        raise invalid("fullscreen must be true or false")
    values["fullscreen"] = payload["fullscreen"]
    values["device_pixel_ratio"] = _number(payload, "device_pixel_ratio", *check.DEVICE_PIXEL_RATIO, required=False)
    for key in ("screen_width", "screen_height", "window_width", "window_height"):
        values[key] = _integer(payload, key, *check.SIZE_PX, required=False)
    sweeps = payload.get("blind_spot_px")
    if spec.blind_spot:
        n = spec.blind_spot_repetitions
        if not isinstance(sweeps, list) or len(sweeps) != n:
            raise invalid(f"blind_spot_px must be a list of {n} square-to-dot distances (px), one per sweep")
        values["blind_spot_px"] = [check.number(x, f"blind_spot_px[{k}]", *check.SIZE_PX) for k, x in enumerate(sweeps)]
    elif sweeps is not None:
        raise invalid("blind_spot_px: this study does not measure the blind spot (calibration.blind_spot = false)")
    if not isinstance(payload.get("recalibration", False), bool):
        raise invalid("recalibration must be true or false")
    return values


def record_calibration(session: Session, assignment: Assignment, payload: Any) -> tuple[int, dict[str, Any]]:
    """Store the worker's calibration and move on (rdk, main, or disqualified); return ``(200, body)``.

    A retry of the same body after it was stored answers the stored result. Another body at a later
    stage is a 409, unless it says ``"recalibration": true`` during the RDK or main block after an
    accepted calibration: the page zoom (``devicePixelRatio``) changed, so CSS pixels have another
    size on the screen and the worker measured the card again (:func:`_recalibrate`).
    """
    spec = spec_for(session, assignment.study_id)
    values = parse_calibration(payload, spec)
    digest = _digest(values)
    existing = session.scalar(select(Calibration).where(Calibration.assignment_id == assignment.id))
    if existing is not None:
        if existing.body_sha256 == digest:
            return 200, _calibration_body(existing, assignment)
        if payload.get("recalibration") and existing.accepted and assignment.stage in BLOCK_STAGES:
            return 200, _recalibrate(session, existing, assignment, values, digest, spec)
        raise ApiError(409, "wrong_stage", "this assignment is calibrated already")
    if assignment.stage in TERMINAL_STAGES:
        raise ended_error(assignment.stage)
    if assignment.stage != Stage.CALIBRATION:
        raise ApiError(409, "wrong_stage", f"no calibration is accepted at stage {assignment.stage}")
    figures, refusal = _measure(values, spec)
    calibration = Calibration(assignment_id=assignment.id, worker_id=assignment.worker_id,
                              study_id=assignment.study_id, body_sha256=digest, **figures)
    session.add(calibration)
    session.flush()
    if refusal is not None:
        # The display, not the worker, failed: a later assignment on another display may start again.
        # No completion code: nothing was done that earns one.
        end_assignment(assignment, Stage.DISQUALIFIED, *refusal)
    elif assignment.worker.screening_passed:
        _start_main_block(session, assignment, spec)
    elif not PARADIGM.work_left(session, assignment.study, assignment.worker_id):
        PARADIGM.no_work_left(assignment, spec)  # no clip left: spare the worker the RDK screening first
    else:
        _start_rdk_block(session, assignment, spec)
    return 200, _calibration_body(calibration, assignment)


# The figures of a calibration that a recalibration replaces, kept beside the raw intervals.
_EARLIER_FIGURES = ("card_width_px", "card_height_px", "px_per_mm", "viewing_distance_cm", "measured_distance_cm",
                    "refresh_hz", "device_pixel_ratio", "window_width", "window_height")


def _recalibrate(session: Session, calibration: Calibration, assignment: Assignment, values: dict[str, Any],
                 digest: str, spec: MotionSpec) -> dict[str, Any]:
    """A calibration measured again in the middle of a block (the zoom changed): its row holds the new
    figures from now on, the earlier ones go to ``refresh_intervals["earlier"]`` (one entry per
    recalibration, with the time it was replaced). Answered trials stay as they are: each response
    records the devicePixelRatio it was shown at. A display that no longer meets the study's needs is
    refused as at the first calibration."""
    earlier = list(calibration.refresh_intervals.get("earlier", []))
    earlier.append({**{key: getattr(calibration, key) for key in _EARLIER_FIGURES}, "replaced_at": now(session).isoformat()})
    figures, refusal = _measure(values, spec)
    figures["refresh_intervals"] = {**figures["refresh_intervals"], "earlier": earlier}
    for key, value in figures.items():
        setattr(calibration, key, value)
    calibration.body_sha256 = digest
    if refusal is not None:
        # Refused mid-block: the answered trials stay; the completion code follows the rules of a
        # disqualification (none for the display alone).
        end_assignment(assignment, Stage.DISQUALIFIED, *refusal)
    return _calibration_body(calibration, assignment)


def _measure(values: dict[str, Any], spec: MotionSpec) -> tuple[dict[str, Any], tuple[str, dict] | None]:
    """The columns of a Calibration row from a parsed body: px/mm, viewing distances, refresh rate, and
    ``accepted``/``reason`` (a display too slow or irregular for the study is refused), with the refusal's
    reason code and arguments (server/reasons.py), or None."""
    try:
        refresh = estimate_refresh(values["refresh_intervals_ms"], min_samples=spec.refresh_samples)
    except ValueError as exc:
        raise invalid(f"refresh_intervals_ms: {exc}") from None
    px_per_mm, distance_cm = calibration_figures(values["card_width_px"], values["card_height_px"],
                                                 spec.px_per_degree)
    measured_cm = None
    if "blind_spot_px" in values:
        measured_cm = blind_spot_distance(values["blind_spot_px"], px_per_mm)
        low, high = BLIND_SPOT_CM
        if not low <= measured_cm <= high:
            # A sweep stopped by a stray key or a card set far off: measure again (nothing is stored).
            raise invalid(f"blind_spot_px: the sweeps give a viewing distance of {measured_cm:.0f} cm; "
                          f"{low:g} to {high:g} cm is plausible")
    refusal = None
    min_refresh_hz = max(spec.min_refresh_hz, check.REFRESH_HZ[0])
    # In the worker's language (the page's, X-Perceptlab-Locale); the figures formatted before the call, which
    # Babel would skip with an f-string inside.
    if refresh.hz < min_refresh_hz:
        refusal = ("refresh_too_slow", {"hz": f"{refresh.hz:.0f}", "needed": f"{min_refresh_hz:g}"})
    elif refresh.irregular_fraction > spec.max_refresh_irregular:
        refusal = ("refresh_irregular", {"late": f"{refresh.irregular_fraction:.0%}"})
    reason = None if refusal is None else REASONS[refusal[0]].english(refusal[1])
    return dict(
        card_width_px=values["card_width_px"], card_height_px=values["card_height_px"], px_per_mm=px_per_mm,
        viewing_distance_cm=distance_cm, refresh_hz=refresh.hz, refresh_median_ms=refresh.median_ms,
        refresh_irregular_fraction=refresh.irregular_fraction, refresh_intervals={"ms": values["refresh_intervals_ms"]},
        fullscreen=values["fullscreen"], device_pixel_ratio=values["device_pixel_ratio"],
        screen_width=values["screen_width"], screen_height=values["screen_height"],
        window_width=values["window_width"], window_height=values["window_height"],
        blind_spot_px=None if measured_cm is None else {"px": values["blind_spot_px"]},
        measured_distance_cm=measured_cm, accepted=reason is None, reason=reason), refusal


def reopen_motion(session: Session, assignment: Assignment, spec: MotionSpec) -> None:
    """A motion worker at stage ``full`` while clips are free again: after an accepted calibration,
    the block that calibration would have started; else from consent. ``assignment`` is locked."""
    calibration = session.scalar(select(Calibration).where(Calibration.assignment_id == assignment.id))
    if calibration is None or not calibration.accepted:
        assignment.stage = Stage.CONSENT
    elif assignment.worker.screening_passed:
        _start_main_block(session, assignment, spec)
    else:
        _start_rdk_block(session, assignment, spec)


def _calibration_body(calibration: Calibration, assignment: Assignment) -> dict[str, Any]:
    return {"px_per_mm": calibration.px_per_mm, "viewing_distance_cm": calibration.viewing_distance_cm,
            "measured_distance_cm": calibration.measured_distance_cm, "refresh_hz": calibration.refresh_hz,
            "refresh_irregular_fraction": calibration.refresh_irregular_fraction,
            "accepted": calibration.accepted, "reason": calibration.reason, "stage": assignment.stage}


# ---------------------------------------------------------------- blocks and trial allocation

def _add_block_trials(session: Session, page: NewPage, assignment: Assignment, rows: list[dict[str, Any]]) -> None:
    """A block's trials (:class:`MotionTrial` rows, which also carry the study)."""
    add_trials(session, MotionTrial, page, assignment,
               [{"study_id": assignment.study_id, "answered": False, **row} for row in rows])


def _start_rdk_block(session: Session, assignment: Assignment, spec: MotionSpec) -> None:
    """The RDK screening block: ``rdk_practice`` practice trials, then ``rdk_trials`` test trials."""
    page = new_page(session, assignment, Stage.RDK)
    params = rdk_trial_params(spec.rdk_practice + spec.rdk_trials,
                              seeded_rng(assignment.study, assignment, page.index),
                              speed_min=spec.rdk_speed_min, speed_max=spec.rdk_speed_max)
    rows = [{"kind": Stage.RDK, "practice": k < spec.rdk_practice, "probe_id": None,
             "repetition": 0 if k < spec.rdk_practice else 1,
             "params": {"direction_deg": float(p["direction_deg"]), "speed_ppf": float(p["speed_ppf"]),
                        "seed": int(p["seed"])}} for k, p in enumerate(params)]
    _add_block_trials(session, page, assignment, rows)
    assignment.stage = Stage.RDK


def _start_main_block(session: Session, assignment: Assignment, spec: MotionSpec) -> None:
    """The main session: practice, then every probe of the worker's clips ``repetitions`` times, shuffled.

    When no clip needs observers any more the worker is told the study is full (stage ``full``).
    The block reserves its clips (:mod:`server.allocation`) while the worker responds.
    """
    study = assignment.study
    allocation_lock(session, study, _ALLOCATION_LOCKS)  # two workers must not both take a clip's last place
    page_index = page_count(session, assignment.id)
    block_rng = seeded_rng(study, assignment, page_index)
    clip_ids = choose_clips(session, study, assignment.worker_id, spec.clips_per_session, spec, block_rng)
    if not clip_ids:
        PARADIGM.no_work_left(assignment, spec)
        return
    release_other_pages(session, assignment.worker_id, assignment.id)  # one reserved block per worker
    probes = _probes_of(session, clip_ids, spec.probes_per_clip)
    main = [(p, r) for p in probes for r in range(1, spec.repetitions + 1)]
    order = block_rng.permutation(len(main))
    practice = practice_probes(session, study.id, clip_ids, spec, block_rng) if spec.practice_needed else []
    rows = [{"kind": Stage.MAIN, "practice": True, "probe_id": p, "repetition": 0, "params": {}} for p in practice]
    rows += [{"kind": Stage.MAIN, "practice": False, "probe_id": main[k][0], "repetition": main[k][1], "params": {}}
             for k in order]
    page = new_page(session, assignment, Stage.MAIN, page_index, reservation_end(session, spec))
    _add_block_trials(session, page, assignment, rows)
    assignment.stage = Stage.MAIN


def _probes_of(session: Session, clip_ids: list[int], n: int) -> list[int]:
    """The first ``n`` probes (manifest order) of each clip, clip by clip."""
    probes: list[int] = []
    for clip_id in clip_ids:
        probes += list(session.scalars(select(MotionProbe.id).where(MotionProbe.clip_id == clip_id)
                                       .order_by(MotionProbe.position).limit(n)))
    return probes


def choose_clips(session: Session, study: Study, worker_id: int, n: int, spec: MotionSpec,
                 rng: np.random.Generator) -> list[int]:
    """Up to ``n`` clips that still need observers and that this worker never had, neediest first.

    A clip's observers are the completed sessions that showed it plus the sessions still under
    way (stage main, on a block whose reservation has not lapsed: see :mod:`server.allocation`),
    so concurrent workers share out the remaining places. Ties break at random.
    """
    moment = now(session)
    sessions = (select(MotionProbe.clip_id, MotionTrial.assignment_id)
                .join(MotionTrial, MotionTrial.probe_id == MotionProbe.id)
                .join(Page, MotionTrial.page_id == Page.id)
                .join(Assignment, MotionTrial.assignment_id == Assignment.id)
                .where(MotionTrial.study_id == study.id, ~MotionTrial.practice, ~Assignment.pilot,  # server/pilot.py
                       or_(Assignment.stage == Stage.COMPLETED,
                           and_(Assignment.stage == Stage.MAIN, Page.reserved_until > moment)))
                .distinct().subquery())
    counts = select(sessions.c.clip_id, func.count().label("n")).group_by(sessions.c.clip_id).subquery()
    seen = (select(MotionProbe.clip_id).join(MotionTrial, MotionTrial.probe_id == MotionProbe.id)
            .where(MotionTrial.worker_id == worker_id, ~MotionTrial.practice))
    deficit = spec.observers_per_clip - func.coalesce(counts.c.n, 0)
    rows = session.execute(select(MotionClip.id, deficit).outerjoin(counts, counts.c.clip_id == MotionClip.id)
                           .where(MotionClip.study_id == study.id, MotionClip.id.not_in(seen), deficit > 0)
                           .order_by(MotionClip.id)).all()
    if not rows:
        return []
    ids = np.array([r[0] for r in rows], dtype=np.int64)
    need = np.array([r[1] for r in rows], dtype=np.int64)
    order = np.lexsort((rng.random(len(ids)), -need))
    return [int(i) for i in ids[order[:n]]]


# ---------------------------------------------------------------- responses

_RESPONSE_FIELDS = ("response_id", "trial_id", "resp_u", "resp_v", "direction_deg", "speed_ppf", "cycles", "rt_ms",
                    "frames", "client_time", "window_width", "window_height", "device_pixel_ratio")


def parse_motion_response(payload: Any, spec: MotionSpec) -> dict[str, Any]:
    """Validate a response body (see the OpenAPI file); raise a 400 naming the first problem."""
    if not isinstance(payload, dict):
        raise invalid("the body must be a JSON object")
    reject_unknown(payload, _RESPONSE_FIELDS)
    response_id = payload.get("response_id")
    if not isinstance(response_id, str) or not UUID_PATTERN.fullmatch(response_id):
        raise invalid("response_id must be a UUID made by the browser")
    limit = MAX_RESPONSE_PPF
    values: dict[str, Any] = {
        "response_id": response_id.lower(), "trial_id": _integer(payload, "trial_id", 1, 2**53),
        "resp_u": _number(payload, "resp_u", -limit, limit), "resp_v": _number(payload, "resp_v", -limit, limit),
        "direction_deg": _number(payload, "direction_deg", 0, 360),
        "speed_ppf": _number(payload, "speed_ppf", 0, limit),
        "cycles": _integer(payload, "cycles", spec.cycles_required, 100_000),
        "rt_ms": _number(payload, "rt_ms", *check.RT_MS)}
    values["frames"] = _parse_frames(payload.get("frames"))
    values["client_time"] = check.client_time(payload.get("client_time"))
    values["window_width"] = _integer(payload, "window_width", *check.SIZE_PX, required=False)
    values["window_height"] = _integer(payload, "window_height", *check.SIZE_PX, required=False)
    values["device_pixel_ratio"] = _number(payload, "device_pixel_ratio", *check.DEVICE_PIXEL_RATIO, required=False)
    return values


def _parse_frames(frames: Any) -> list[dict[str, Any]]:
    if not isinstance(frames, list) or not 1 <= len(frames) <= MAX_PHASES:
        raise invalid(f"frames must be a list of 1 to {MAX_PHASES} logged phases")
    total = 0
    clean = []
    for k, phase in enumerate(frames):
        if not isinstance(phase, dict):
            raise invalid(f"frames[{k}] must be an object")
        reject_unknown(phase, ("cycle", "phase", "t"))
        cycle = phase.get("cycle")
        if isinstance(cycle, bool) or not isinstance(cycle, int) or not 1 <= cycle <= 100_000:
            raise invalid(f"frames[{k}].cycle must be a positive integer")
        if phase.get("phase") not in ("movie", "matching"):
            raise invalid(f"frames[{k}].phase must be 'movie' or 'matching'")
        t = phase.get("t")
        if not isinstance(t, list) or not t:
            raise invalid(f"frames[{k}].t must be a non-empty list of timestamps")
        total += len(t)
        if total > MAX_TIMESTAMPS:
            raise invalid(f"frames hold more than {MAX_TIMESTAMPS} timestamps")
        stamps = check.number_list(t, f"frames[{k}].t", *check.TIMESTAMP_MS)
        if any(b < a for a, b in zip(stamps, stamps[1:])):
            raise invalid(f"frames[{k}].t must not go backwards")
        clean.append({"cycle": cycle, "phase": phase["phase"], "t": stamps})
    return clean


# The columns of a trial that the response path needs, fetched in one query as a plain row.
_RESPONSE_TRIAL_COLUMNS = (MotionTrial.id.label("trial_id"), MotionTrial.page_id, MotionTrial.kind,
                           MotionTrial.practice, MotionTrial.answered, MotionTrial.params, MotionTrial.probe_id,
                           MotionTrial.repetition, MotionTrial.position, MotionProbe.gt_u, MotionProbe.gt_v,
                           MotionClip.movie_frames)


def trial_gt(trial) -> tuple[float, float]:
    """The true vector of a trial row (RDK: from its direction and speed; main: the probe's flow)."""
    if trial.kind == Stage.RDK:
        u, v = rdk_vector(trial.params["direction_deg"], trial.params["speed_ppf"])
        return float(u), float(v)
    return float(trial.gt_u), float(trial.gt_v)


def record_motion_response(session: Session, assignment: Assignment, payload: Any) -> tuple[int, dict[str, Any]]:
    """Store one adjustment response; return ``(HTTP status, body)``. A retry returns 200 "duplicate".

    ``assignment`` must be locked: responses of one assignment are applied one at a time, so
    practice repeats, timing repeats and the end of a block are decided exactly once.
    """
    spec = spec_for(session, assignment.study_id)
    values = parse_motion_response(payload, spec)
    digest = _digest({k: v for k, v in values.items() if k != "client_time"})
    if values["trial_id"] > MAX_ROW_ID:  # beyond MotionTrial.id's INTEGER: no such trial
        raise ApiError(404, "unknown_trial", "this trial is not part of your assignment")
    connection = session.connection()
    trial = connection.execute(
        select(*_RESPONSE_TRIAL_COLUMNS).outerjoin(MotionProbe, MotionTrial.probe_id == MotionProbe.id)
        .outerjoin(MotionClip, MotionProbe.clip_id == MotionClip.id)
        .where(MotionTrial.id == values["trial_id"], MotionTrial.assignment_id == assignment.id)).first()
    if trial is None:
        raise ApiError(404, "unknown_trial", "this trial is not part of your assignment")
    if trial.answered:
        return _replay_response(session, assignment, trial, values["response_id"], digest)
    if assignment.stage in TERMINAL_STAGES:
        raise ended_error(assignment.stage)
    if assignment.stage != trial.kind:
        raise ApiError(409, "wrong_stage", f"no {trial.kind} responses are accepted at stage {assignment.stage}")
    refresh_ms = session.scalar(select(Calibration.refresh_median_ms).where(
        Calibration.assignment_id == assignment.id))
    movie_frames = RDK_MOVIE_FRAMES if trial.kind == Stage.RDK else int(trial.movie_frames)
    try:
        timing = summarise_phases(frame_timing(values["frames"], refresh_ms, movie_frames, spec))
    except ValueError as exc:
        raise invalid(f"frames: {exc}") from None
    passed = None
    if trial.practice:
        from analysis.motion import practice_passed  # analysis.motion loads scipy: only when needed

        gt_u, gt_v = trial_gt(trial)
        passed = bool(practice_passed(gt_u, gt_v, values["resp_u"], values["resp_v"],
                                      max_epe=spec.practice_max_epe, max_dir_deg=spec.practice_max_dir_deg))
    claimed = connection.execute(update(MotionTrial).where(MotionTrial.id == trial.trial_id, ~MotionTrial.answered)
                                 .values(answered=True)).rowcount
    if claimed != 1:
        raise ApiError(409, "trial_already_answered", "this trial was answered already")
    repeat_added = _add_repeat(session, assignment, trial, spec, passed, timing["frame_drops"])
    try:
        row_id = connection.execute(insert(MotionResponse).values(
            response_id=values["response_id"], trial_id=trial.trial_id, assignment_id=assignment.id,
            worker_id=assignment.worker_id, study_id=assignment.study_id, resp_u=values["resp_u"],
            resp_v=values["resp_v"], direction_deg=values["direction_deg"], speed_ppf=values["speed_ppf"],
            cycles=values["cycles"], rt_ms=values["rt_ms"], frame_drops=timing["frame_drops"],
            n_intervals=timing["n_intervals"], onset_err_mean_ms=timing["onset_err_mean_ms"],
            onset_err_sd_ms=timing["onset_err_sd_ms"], skipped_frames=timing["skipped_frames"],
            practice_passed=passed, timing_flagged=timing["frame_drops"] > 0, repeat_added=repeat_added,
            client_time=values["client_time"], window_width=values["window_width"],
            window_height=values["window_height"], device_pixel_ratio=values["device_pixel_ratio"],
            body_sha256=digest, created_at=utcnow()).returning(MotionResponse.id)).scalar_one()
    except IntegrityError:
        # Only the unique response_id can clash (the trial is ours and locked): the browser reused
        # a response ID for another trial. The caller rolls the whole request back.
        raise ApiError(409, "conflict", "this response_id was already used for a different response") from None
    connection.execute(insert(FrameLog).values(response_id=row_id, frames={"phases": values["frames"]}))
    renew_page(session, trial.page_id, spec)  # the worker is active: the block keeps its clips
    if not open_trials(session, MotionTrial, trial.page_id):
        _end_block(session, assignment, trial.kind, spec)
    stored = session.get(MotionResponse, row_id)
    return 201, _response_body(session, assignment, trial, stored, "stored")


def _add_repeat(session: Session, assignment: Assignment, trial, spec: MotionSpec, passed: bool | None,
                frame_drops: int) -> bool:
    """Append a repeat of ``trial`` when the practice rule or the timing policy asks for one."""
    connection = session.connection()
    if trial.practice:
        if passed:
            return False
        needed = spec.rdk_practice if trial.kind == Stage.RDK else spec.practice_needed
        total, passes = connection.execute(
            select(func.count(), func.count(MotionResponse.id).filter(MotionResponse.practice_passed.is_(True)))
            .select_from(MotionTrial).outerjoin(MotionResponse, MotionResponse.trial_id == MotionTrial.id)
            .where(MotionTrial.page_id == trial.page_id, MotionTrial.practice)).one()
        open_practice = int(connection.execute(select(func.count()).select_from(MotionTrial).where(
            MotionTrial.page_id == trial.page_id, MotionTrial.practice, ~MotionTrial.answered)).scalar_one())
        if total >= spec.practice_max or passes + open_practice >= needed:
            return False
        reason = "practice"
    else:
        if frame_drops == 0 or spec.dropped_frames != "repeat":
            return False
        repeats = int(connection.execute(select(func.count()).select_from(MotionTrial).where(
            MotionTrial.assignment_id == assignment.id, ~MotionTrial.practice,
            MotionTrial.params["reason"].as_string() == "timing")).scalar_one())
        if repeats >= spec.max_timing_repeats:
            return False
        reason = "timing"
    position = int(connection.execute(select(func.max(MotionTrial.position)).where(
        MotionTrial.page_id == trial.page_id)).scalar_one()) + 1
    params = {k: v for k, v in trial.params.items() if k not in ("repeat_of", "reason")}
    connection.execute(insert(MotionTrial).values(
        page_id=trial.page_id, assignment_id=assignment.id, worker_id=assignment.worker_id,
        study_id=assignment.study_id, position=position, kind=trial.kind, practice=trial.practice,
        probe_id=trial.probe_id, repetition=trial.repetition, answered=False, created_at=utcnow(),
        params={**params, "repeat_of": trial.trial_id, "reason": reason}))
    return True


def _end_block(session: Session, assignment: Assignment, kind: str, spec: MotionSpec) -> None:
    """Every trial of the block is answered: screening after RDK, completion after main."""
    session.execute(update(Page).where(Page.assignment_id == assignment.id, Page.kind == kind,
                                       Page.completed_at.is_(None)).values(completed_at=utcnow())
                    .execution_options(synchronize_session=False))
    if kind == Stage.MAIN:
        assignment.pages_completed += 1  # the unit of pay: one completed session
        complete(assignment)
        return
    r = screening_score(session, assignment.id, spec)
    worker = assignment.worker
    worker.screening_r = None if math.isnan(r) else r
    worker.screening_passed = bool(r >= spec.screening_min_r)
    if worker.screening_passed:
        _start_main_block(session, assignment, spec)
    else:
        shown = "undefined" if math.isnan(r) else f"{r:.2f}"
        stop(assignment, "motion_screening", r=shown, needed=f"{spec.screening_min_r:.2f}")


def screening_score(session: Session, assignment_id: int, spec: MotionSpec) -> float:
    """r (u and v pooled) of the RDK test responses against the true vectors; NaN when undefined.

    Unless the study keeps them, trials with frame drops are left out (when at least two remain).
    """
    from analysis.motion import pooled_uv_r  # loads scipy: only when a screening ends

    rows = session.execute(select(MotionTrial.kind, MotionTrial.params, MotionResponse.resp_u,
                                  MotionResponse.resp_v, MotionResponse.timing_flagged)
                           .join(MotionResponse, MotionResponse.trial_id == MotionTrial.id)
                           .where(MotionTrial.assignment_id == assignment_id, MotionTrial.kind == Stage.RDK,
                                  ~MotionTrial.practice)).all()
    if spec.dropped_frames != "keep" and sum(not r.timing_flagged for r in rows) >= 2:
        rows = [r for r in rows if not r.timing_flagged]
    gt = np.array([trial_gt(r) for r in rows], dtype=float).reshape(-1, 2)
    resp = np.array([(r.resp_u, r.resp_v) for r in rows], dtype=float).reshape(-1, 2)
    return float(pooled_uv_r(gt[:, 0], gt[:, 1], resp[:, 0], resp[:, 1]))


def _replay_response(session: Session, assignment: Assignment, trial, response_id: str,
            digest: str) -> tuple[int, dict[str, Any]]:
    """The answer to a response for an answered trial: "duplicate" when it is the same response again."""
    existing = session.scalar(select(MotionResponse).where(MotionResponse.response_id == response_id))
    check_replay(None if existing is None else existing.trial_id, trial.trial_id,
                 existing is not None and existing.body_sha256 == digest, "response_id")
    return 200, _response_body(session, assignment, trial, existing, "duplicate")


def _response_body(session: Session, assignment: Assignment, trial, stored: MotionResponse,
                   status: str) -> dict[str, Any]:
    screening = None
    worker = assignment.worker
    if (trial.kind == Stage.RDK and worker.screening_passed is not None
            and not open_trials(session, MotionTrial, trial.page_id)):
        screening = {"r": worker.screening_r, "passed": bool(worker.screening_passed)}
    feedback = None
    if gives_feedback(trial, spec_for(session, assignment.study_id)):
        # The truth reaches the browser only now that the response is stored (and on its replays).
        gt_u, gt_v = trial_gt(trial)
        feedback = {"gt_u": gt_u, "gt_v": gt_v, "passed": stored.practice_passed}
    return {"status": status, "response_id": stored.response_id, "trial_id": trial.trial_id,
            "frame_drops": stored.frame_drops, "onset_err_mean_ms": stored.onset_err_mean_ms,
            "onset_err_sd_ms": stored.onset_err_sd_ms, "practice_passed": stored.practice_passed,
            "repeat_added": stored.repeat_added, "stage": assignment.stage, "screening": screening,
            "feedback": feedback}


def rdk_dot_movie_of(session: Session, assignment: Assignment, trial_id: str) -> bytes:
    """The dot movie (:func:`stimuli.rdk.encode_dot_movie`) of one of the assignment's RDK trials.

    Rendered from the trial's stored direction, speed and seed, so it is the same on every
    request; any other trial (another assignment's, a main trial, no such trial) is a 404.
    """
    unknown = ApiError(404, "unknown_trial", "this trial is not an RDK trial of your assignment")
    if not (trial_id.isascii() and trial_id.isdigit()) or int(trial_id) > MAX_ROW_ID:
        raise unknown
    params = session.scalar(select(MotionTrial.params).where(
        MotionTrial.id == int(trial_id), MotionTrial.assignment_id == assignment.id, MotionTrial.kind == Stage.RDK))
    if params is None:
        raise unknown
    spec = spec_for(session, assignment.study_id)
    return rdk_dot_movie(spec.rdk_n_dots, spec.rdk_aperture_px, params["direction_deg"], params["speed_ppf"],
                         params["seed"], RDK_MOVIE_FRAMES)


# ---------------------------------------------------------------- state for the browser

def motion_params(spec: MotionSpec, noise_url: str, window: tuple[int, int]) -> dict[str, Any]:
    """The fixed parameters the browser draws and times a trial with (State.params); ``window``: the
    smallest inner window the trials need (:func:`motion_study.min_window`)."""
    return {"frame_rate_hz": spec.frame_rate_hz, "cycle_ms": spec.cycle_ms, "isi1_ms": spec.isi1_ms,
            "matching_ms": spec.matching_ms, "cycles_required": spec.cycles_required,
            "panel_diameter_px": spec.panel_diameter_px, "max_speed_ppf": spec.rdk_speed_max,
            "aperture_px": spec.aperture_px, "cue_diameter_px": spec.cue_diameter_px,
            "placeholder_offset_px": spec.placeholder_offset_px,
            "placeholder_diameter_px": spec.placeholder_diameter_px, "probe_diameter_px": spec.probe_diameter_px,
            "cursor_diameter_px": spec.cursor_diameter_px, "noise_url": noise_url,
            "refresh_samples": spec.refresh_samples, "min_refresh_hz": spec.min_refresh_hz,
            "card_width_mm": CARD_WIDTH_MM, "card_height_mm": CARD_HEIGHT_MM, "px_per_degree": spec.px_per_degree,
            "practice_max_epe": spec.practice_max_epe, "practice_max_dir_deg": spec.practice_max_dir_deg,
            "min_window_width": window[0], "min_window_height": window[1],
            "blind_spot": spec.blind_spot, "blind_spot_repetitions": spec.blind_spot_repetitions}


def motion_state(session: Session, assignment: Assignment, url_for: UrlFor) -> dict[str, Any]:
    """The JSON State of a motion assignment: stage, parameters, calibration, the current block and
    its unanswered trials (never their ground truth, nor an RDK trial's direction, speed or seed), completion."""
    spec = spec_for(session, assignment.study_id)
    calibration = session.scalar(select(Calibration).where(Calibration.assignment_id == assignment.id))
    block, trials = None, []
    if assignment.stage in BLOCK_STAGES:
        page = session.scalar(select(Page).where(Page.assignment_id == assignment.id, Page.kind == assignment.stage)
                              .order_by(Page.index.desc()).limit(1))
        if page is not None:
            block, trials = _block(session, page, spec, url_for)
    message = stop_message(session, assignment, calibration)
    return {
        "assignment_id": str(assignment.id), "kind": motion_study.KIND, "stage": assignment.stage,
        "study": {"name": assignment.study.name}, "message": message,
        "params": motion_params(spec, url_for(spec.noise),
                                motion_study.study_min_window(session, assignment.study_id, spec)),
        "calibration": None if calibration is None else {
            "px_per_mm": calibration.px_per_mm, "viewing_distance_cm": calibration.viewing_distance_cm,
            "measured_distance_cm": calibration.measured_distance_cm, "refresh_hz": calibration.refresh_hz,
            "fullscreen": calibration.fullscreen, "device_pixel_ratio": calibration.device_pixel_ratio,
            "card_width_px": calibration.card_width_px, "card_height_px": calibration.card_height_px},
        "block": block, "trials": trials, "completion": completion_info(assignment)}


def stop_message(session: Session, assignment: Assignment, calibration: Calibration | None = None) -> str | None:
    """Why a disqualified or stopped worker cannot go on (screening, or the refused display), or that the
    study is full; else None."""
    if assignment.stage == Stage.FULL:
        return reason_message(assignment)
    if assignment.stage not in TURNED_AWAY:
        return None
    if assignment.reason_code is not None:  # in the worker's language
        return reason_message(assignment)
    worker = assignment.worker  # records made before reason codes
    if worker.status in TURNED_AWAY and worker.status_reason:
        return worker.status_reason
    if calibration is None:
        calibration = session.scalar(select(Calibration).where(Calibration.assignment_id == assignment.id))
    return calibration.reason if calibration is not None else worker.status_reason


def _block(session: Session, page: Page, spec: MotionSpec, url_for: UrlFor) -> tuple[dict, list[dict]]:
    rows = session.execute(
        select(MotionTrial, MotionResponse.practice_passed)
        .outerjoin(MotionResponse, MotionResponse.trial_id == MotionTrial.id)
        .where(MotionTrial.page_id == page.id)
        .order_by(MotionTrial.practice.desc(), MotionTrial.position)).all()
    practice = [(t, p) for t, p in rows if t.practice]
    tests = [t for t, _ in rows if not t.practice]
    block = {"name": page.kind, "practice_passes": sum(bool(p) for _, p in practice),
             "practice_needed": spec.rdk_practice if page.kind == Stage.RDK else spec.practice_needed,
             "practice_done": sum(t.answered for t, _ in practice), "practice_max": spec.practice_max,
             "trials_done": sum(t.answered for t in tests), "trials_total": len(tests)}
    # A failed practice trial's repeat comes next, at the same location (HuPerFlow); timing repeats
    # of test trials wait at the end of the block.
    open_trials = sorted((t for t, _ in rows if not t.answered),
                         key=lambda t: (not t.practice, not (t.practice and "repeat_of" in t.params)))
    probe_ids = {t.probe_id for t in open_trials if t.probe_id is not None}
    probes = {p.id: p for p in session.scalars(select(MotionProbe).where(MotionProbe.id.in_(probe_ids)))}
    clips = {c.id: c for c in session.scalars(select(MotionClip).where(
        MotionClip.id.in_({p.clip_id for p in probes.values()})))}
    return block, [_trial_json(t, probes, clips, spec, url_for) for t in open_trials]


def gives_feedback(trial, spec: MotionSpec) -> bool:
    """Feedback after practice trials, and (HuPerFlow §3.1.3) after the RDK session's test trials too."""
    return bool(trial.practice or (trial.kind == Stage.RDK and spec.rdk_feedback))


def _trial_json(trial: MotionTrial, probes: dict[int, MotionProbe], clips: dict[int, MotionClip],
                spec: MotionSpec, url_for: UrlFor) -> dict[str, Any]:
    movie_frames = RDK_MOVIE_FRAMES
    feedback = gives_feedback(trial, spec)
    out: dict[str, Any] = {"trial_id": trial.id, "kind": trial.kind, "practice": trial.practice,
                           "feedback": feedback, "repetition": trial.repetition}
    if trial.kind == Stage.RDK:
        # No direction, speed or seed: the browser draws the dot movie the server renders (rdk_dot_movie_of).
        out["rdk"] = {"n_dots": spec.rdk_n_dots, "aperture_px": spec.rdk_aperture_px, "dot_px": spec.rdk_dot_px}
    else:
        probe = probes[trial.probe_id]
        clip = clips[probe.clip_id]
        movie_frames = clip.movie_frames
        indices, probe_index = movie_window(len(clip.frames["paths"]), probe.frame, movie_frames)
        out["clip"] = {"clip_id": clip.clip_id, "frames": [url_for(clip.frames["paths"][i]) for i in indices],
                       "width": clip.width, "height": clip.height}
        out["probe"] = {"probe_id": probe.probe_id, "x": probe.x, "y": probe.y, "frame_index": probe_index}
    out.update(movie_frames=movie_frames, movie_ms=spec.movie_ms(movie_frames), isi2_ms=spec.isi2_ms(movie_frames))
    # No ground truth here, not even on feedback trials: it comes in the answer to the stored response.
    return out


def motion_progress(session: Session, study_id: int) -> dict[str, Any]:
    """Headline figures of a motion study: clips, probes, worker sessions and clip viewings against their targets.

    A session (one assignment's main block, the unit of pay) shows ``clips_per_session`` clips, so it
    counts once in ``sessions_done`` and once per clip in ``clip_sessions_done`` (capped at each clip's
    ``observers_per_clip``); ``fill`` is the share of clip viewings, the study's real progress.
    """
    spec = spec_for(session, study_id)
    n_clips = int(session.scalar(select(func.count()).select_from(MotionClip).where(MotionClip.study_id == study_id)))
    n_probes = int(session.scalar(select(func.count()).select_from(MotionProbe).join(MotionClip)
                                  .where(MotionClip.study_id == study_id)))
    per_clip = clip_observers(session, study_id)
    clip_done = sum(min(n, spec.observers_per_clip) for n, _ in per_clip.values())
    clip_target = n_clips * spec.observers_per_clip
    stages = dict(session.execute(select(Assignment.stage, func.count())
                                  .where(Assignment.study_id == study_id, ~Assignment.pilot)
                                  .group_by(Assignment.stage)).all())
    per_session = min(spec.clips_per_session, n_clips)
    n_workers = int(session.scalar(select(func.count()).select_from(Worker).where(Worker.study_id == study_id,
                                                                                  ~Worker.pilot)))
    return {"n_clips": n_clips, "n_probes": n_probes,
            "sessions_done": int(stages.get(Stage.COMPLETED, 0)), "sessions_open": int(stages.get(Stage.MAIN, 0)),
            "sessions_target": math.ceil(clip_target / per_session) if per_session else 0,
            "clip_sessions_done": clip_done, "clip_sessions_target": clip_target,
            "fill": clip_done / clip_target if clip_target else 0.0, "n_workers": n_workers}


_BADGE_NAMES = {Stage.RDK: "screening", Stage.MAIN: "session"}


def worker_badges(session: Session, study_id: int, salt: bytes) -> dict[str, dict[str, Any]]:
    """Per worker pseudonym: where their latest assignment stands, for the dashboard's progress badge.

    ``{"stage", "label", "done", "total"}``: in a block (RDK screening, main session) the answered and
    all test trials of the block ("session 5/16", "screening · practice" before the first test trial);
    else the stage itself ("calibration", "completed", with the number of sessions when more than one).
    """
    latest: dict[int, tuple[int, str, str]] = {}
    completed: dict[int, int] = {}
    for assignment_id, worker_id, stage, external in session.execute(
            select(Assignment.id, Assignment.worker_id, Assignment.stage, Worker.external_id)
            .join(Worker, Worker.id == Assignment.worker_id)
            .where(Assignment.study_id == study_id).order_by(Assignment.id)):
        latest[worker_id] = (assignment_id, stage, external)
        completed[worker_id] = completed.get(worker_id, 0) + (stage == Stage.COMPLETED)
    in_block = [a for a, stage, _ in latest.values() if stage in BLOCK_STAGES]
    counts = {(a, kind, practice): (int(total), int(done)) for a, kind, practice, total, done in session.execute(
        select(MotionTrial.assignment_id, MotionTrial.kind, MotionTrial.practice, func.count(),
               func.count(MotionTrial.id).filter(MotionTrial.answered))
        .where(MotionTrial.assignment_id.in_(in_block))
        .group_by(MotionTrial.assignment_id, MotionTrial.kind, MotionTrial.practice))} if in_block else {}
    out = {}
    for worker_id, (assignment_id, stage, external) in latest.items():
        badge: dict[str, Any] = {"stage": str(stage), "label": str(stage), "done": None, "total": None}
        if stage in BLOCK_STAGES:
            total, done = counts.get((assignment_id, stage, False), (0, 0))
            practice_total, practice_done = counts.get((assignment_id, stage, True), (0, 0))
            name = _BADGE_NAMES[stage]
            practising = practice_done < practice_total and not done
            badge.update(done=done, total=total, label=f"{name} · practice" if practising else f"{name} {done}/{total}")
        elif stage == Stage.COMPLETED and completed[worker_id] > 1:
            badge["label"] = f"completed ×{completed[worker_id]}"
        out[pseudonym(salt, external)] = badge
    return out


def clip_observers(session: Session, study_id: int) -> dict[str, tuple[int, int]]:
    """Per clip ID: ``(completed sessions, sessions under way)`` that show it."""
    rows = session.execute(
        select(MotionClip.clip_id, Assignment.stage, func.count(func.distinct(MotionTrial.assignment_id)))
        .select_from(MotionClip)
        .join(MotionProbe, MotionProbe.clip_id == MotionClip.id)
        .join(MotionTrial, and_(MotionTrial.probe_id == MotionProbe.id, ~MotionTrial.practice))
        .join(Assignment, MotionTrial.assignment_id == Assignment.id)
        .where(MotionClip.study_id == study_id, Assignment.stage.in_((Stage.COMPLETED, Stage.MAIN)), ~Assignment.pilot)
        .group_by(MotionClip.clip_id, Assignment.stage)).all()
    out = {c: (0, 0) for c in session.scalars(select(MotionClip.clip_id).where(MotionClip.study_id == study_id)
                                              .order_by(MotionClip.position))}
    for clip_id, stage, n in rows:
        done, open_ = out[clip_id]
        out[clip_id] = (done + int(n), open_) if stage == Stage.COMPLETED else (done, open_ + int(n))
    return out


def stimulus_paths(session: Session, study: Study) -> list[str]:
    """Every file a motion study shows: each clip's frames (clip by clip) and the matching noise texture."""
    paths: list[str] = []
    for frames in session.scalars(select(MotionClip.frames).where(MotionClip.study_id == study.id)
                                  .order_by(MotionClip.position)):
        paths.extend(frames["paths"])
    if study.config.get("noise"):
        paths.append(study.config["noise"])
    return paths


def example_clip(session: Session, study: Study) -> dict[str, Any] | None:
    """The middle frame of the study's first clip, for the HIT preview."""
    clip = session.scalar(select(MotionClip).where(MotionClip.study_id == study.id)
                          .order_by(MotionClip.position).limit(1))
    if clip is None:
        return None
    paths = clip.frames["paths"]
    return {"path": paths[len(paths) // 2], "width": clip.width, "height": clip.height}


# The schemas and documented answers of the motion responses in the worker API's OpenAPI document
# (server/openapi.py).
_API = load_part(Path(__file__).with_name("openapi.yaml"))


class MotionMatching(Paradigm):
    """Motion matching (HuPerFlow): adjust a noise patch until it moves like a point in a clip; screened by
    an RDK test; paid per session."""

    kind = motion_study.KIND
    consent_is_a_stage_move = True  # consent -> instructions, nothing else (the API's one-statement consent)
    title = "motion matching"
    state_schema = "MotionState"
    spec_class = MotionSpec
    template = motion_study.MOTION_STUDY_TEMPLATE
    app_stages = frozenset({Stage.CALIBRATION, *BLOCK_STAGES})
    app_template = "motion/motion.html"
    worker_pages = "motion/worker_pages.html"
    dashboard_template = "motion/admin_study.html"  # rendered on the server
    downloads = tuple(motion_export.MOTION_FILES)
    response_model = MotionResponse
    mturk_settings = motion_study.MTURK_TEXTS
    repeat_workers = True  # several sessions per worker, each with other clips
    needs_mouse = True     # answers are mouse movements: touch-only devices are told so at entry
    response_kinds = (
        ResponseKind(name="calibration", record=refused_after_the_end(with_assignment_object(record_calibration)),
                     summary="Store the worker's display calibration (motion studies, stage calibration)",
                     request_schema={"$ref": "#/components/schemas/CalibrationRequest"},
                     response_schema={"$ref": "#/components/schemas/CalibrationResult"}, stored_status=200,
                     operation=_API["operations"]["calibration"], schemas=_API["schemas"]),
        ResponseKind(name="motion-responses",
                     record=refused_after_the_end(with_assignment_object(record_motion_response)),
                     summary="Store one adjustment response with its raw frame log (motion studies)",
                     operation_id="postMotionResponse", max_body=MOTION_RESPONSE_BYTES,
                     request_schema={"$ref": "#/components/schemas/MotionResponseRequest"},
                     response_schema={"$ref": "#/components/schemas/MotionResponseStored"},
                     operation=_API["operations"]["motion-responses"], schemas=_API["schemas"]),
    )

    def spec_from_toml(self, data: dict[str, Any], path: Path) -> MotionSpec:
        return motion_study.motion_spec_from_toml(data, path)

    def min_window(self, session: Session, study: Study) -> tuple[int, int]:
        """The smallest inner browser window ``(width, height)``, CSS px, the study's trials need (its
        clips, probes, RDK aperture and control panel at one image pixel per CSS pixel; see
        :func:`motion_study.min_window`)."""
        return motion_study.study_min_window(session, study.id, self.spec_for(session, study.id))

    def requirement_of_spec(self, spec: MotionSpec) -> WindowRequirement:
        """Before the clips are stored (``study create``, ``launch``): the panel, the RDK aperture, the
        study's floor; the clips can only add to it (:meth:`window_requirement` counts them)."""
        floor = (spec.min_window_width, spec.min_window_height)
        return WindowRequirement(min_window=motion_study.min_window(spec), floor=floor, needs_mouse=self.needs_mouse)

    def window_requirement(self, session: Session, study: Study) -> WindowRequirement:
        """What the entry pages state and check before consent: :meth:`min_window` of the stored study."""
        spec = self.spec_for(session, study.id)
        return WindowRequirement(min_window=self.min_window(session, study),
                                 floor=(spec.min_window_width, spec.min_window_height), needs_mouse=self.needs_mouse)

    def create_study(self, session: Session, spec: MotionSpec) -> Study:
        return motion_study.create_motion_study(session, spec)

    def study_warnings(self, session: Session, study: Study) -> list[str]:
        """No probe left untested for practice (:func:`.practice.practice_warning`)."""
        warning = practice_warning(session, study.id, self.spec_for(session, study.id))
        return [warning] if warning else []

    def work_left(self, session: Session, study: Study, worker_id: int) -> bool:
        """Whether a clip still needs observers that this worker never had."""
        # Only whether anything is left matters, not which: any generator will do.
        return bool(choose_clips(session, study, worker_id, 1, spec_for(session, study.id), np.random.default_rng(0)))

    def perform_action(self, session: Session, assignment: Assignment | AssignmentRow, action: str) -> Assignment:
        assignment = as_object(session, assignment)
        perform_motion_action(session, assignment, action)
        return assignment

    def reopen(self, session: Session, assignment: Assignment, spec: MotionSpec) -> None:
        reopen_motion(session, assignment, spec)

    def state(self, session: Session, assignment: Assignment | AssignmentRow, url_for: UrlFor) -> dict[str, Any]:
        return motion_state(session, as_object(session, assignment), url_for)

    def stop_message(self, session: Session, assignment: Assignment) -> str | None:
        return stop_message(session, assignment)

    def examples(self, session: Session, study: Study) -> dict[str, Any]:
        return {"clip_example": example_clip(session, study),
                "min_window": self.min_window(session, study)}

    def simulated_worker(self):
        """``perceptlab simulate``'s worker: calibrates, then matches RDK dots and clip motion (:mod:`.simulated_worker`)."""
        from .simulated_worker import MotionWorker
        return MotionWorker

    def trial_media(self, session: Session, assignment: Assignment, trial_id: str) -> bytes:
        return rdk_dot_movie_of(session, assignment, trial_id)

    def stimulus_paths(self, session: Session, study: Study) -> list[str]:
        return stimulus_paths(session, study)

    def export(self, session: Session, study_id: int, *, salt: bytes | None, include_gold: bool = True,
               include_pilot: bool = False) -> StudyExport:
        """motion.csv (main test trials), rdk.csv, frames.csv and calibration.csv; there is no gold to leave
        out; pilots' sessions only with ``include_pilot``."""
        tables = motion_export.export_motion(session, study_id, salt=salt, include_pilot=include_pilot)
        tables["frames.csv"] = motion_export.export_frames(session, study_id, salt=salt, include_pilot=include_pilot)
        motion = tables["motion.csv"]
        report = [("motion.csv", f"{len(motion)} main trials by {len({r['worker_id'] for r in motion})} workers "
                                 f"({sum(r['timing_flagged'] == '1' for r in motion)} with frame drops)"),
                  ("rdk.csv", f"{len(tables['rdk.csv'])} RDK trials"),
                  ("frames.csv", f"{len(tables['frames.csv'])} frames"),
                  ("calibration.csv", f"{len(tables['calibration.csv'])} calibrations")]
        warning = None if motion else "no main trials yet: perceptlab analyze-motion needs at least one"
        return StudyExport(files=motion_export.motion_csv_texts(tables), report=report, warning=warning)

    def export_file(self, session: Session, study_id: int, name: str, *, salt: bytes | None,
                    include_pilot: bool = False) -> str:
        """One motion file, computing only that table (frames.csv is the costly one)."""
        if name == "frames.csv":
            tables = {name: motion_export.export_frames(session, study_id, salt=salt, include_pilot=include_pilot)}
        else:
            tables = {name: motion_export.export_motion(session, study_id, salt=salt,
                                                        include_pilot=include_pilot)[name]}
        return motion_export.motion_csv_texts(tables)[name]

    def workers_table(self, session: Session, study_id: int, *, salt: bytes | None,
                      include_pilot: bool = False) -> tuple[tuple[str, ...], list[dict[str, Any]]]:
        """Calibration, screening, trials and frame drops per worker instead of pages, votes and gold."""
        return motion_export.MOTION_WORKERS_COLUMNS, motion_export.motion_workers_table(
            session, study_id, salt=salt, include_pilot=include_pilot)

    def progress(self, session: Session, study_id: int) -> dict[str, Any]:
        """Clips, their probes and sessions (:meth:`core.Paradigm.progress`'s neutral keys)."""
        motion = motion_progress(session, study_id)
        return {"kind": self.kind, "n_groups": motion["n_clips"], "groups": "clips", "n_units": motion["n_probes"],
                "units": "probes", "n_responses": motion["sessions_done"], "target_responses": motion["sessions_target"],
                "fill": motion["fill"], "n_workers": motion["n_workers"], "unit": "sessions"}

    def summary_line(self, session: Session, study_id: int) -> str:
        m = motion_progress(session, study_id)
        return (f"motion: {m['n_clips']} clips, {m['n_probes']} probes, {m['sessions_done']}/{m['sessions_target']} "
                f"sessions ({m['clip_sessions_done']}/{m['clip_sessions_target']} clip viewings, {m['fill']:.0%}), "
                f"{m['n_workers']} workers")

    def dashboard_context(self, session: Session, study: Study, salt: bytes) -> dict[str, Any]:
        """The clips table, the workers table and the headline figures of the motion study page."""
        counts = clip_observers(session, study.id)
        clips = [{"clip_id": c.clip_id, "dataset": c.dataset, "n_probes": n, "done": counts[c.clip_id][0],
                  "open": counts[c.clip_id][1]}
                 for c, n in session.execute(select(MotionClip, func.count(MotionProbe.id)).outerjoin(MotionProbe)
                                             .where(MotionClip.study_id == study.id).group_by(MotionClip.id)
                                             .order_by(MotionClip.position))]
        badges = worker_badges(session, study.id, salt)
        workers = [{**w, "badge": badges.get(w["worker_id"])}
                   for w in motion_export.motion_workers(session, study.id, salt)]
        return {"spec": spec_for(session, study.id), "progress": motion_progress(session, study.id), "clips": clips,
                "workers": workers, "downloads": self.downloads}

    def analyse_results(self, session: Session, study: Study, export: StudyExport, out: Path,
                        options: ResultsOptions) -> ResultsAnalysis | None:
        """``perceptlab analyze-motion`` of motion.csv with the study's clips (:mod:`.results`)."""
        from .results import analyse_results

        return analyse_results(session, study, export, out, options)

    def dashboard_summary(self, session: Session, study: Study, salt: bytes, *,
                          raw_ids: bool = False) -> dict[str, Any]:
        """What the motion study page refreshes (static/js/dashboard.js): headline, clips and workers tables."""
        context = self.dashboard_context(session, study, salt)
        return {key: context[key] for key in ("progress", "clips", "workers")}

    def pay_unit(self, spec: MotionSpec) -> PayUnit:
        """A session: one per assignment, paid by the HIT's reward; no bonus."""
        return PayUnit("session", Decimal(spec.reward_per_session), Decimal("0.00"), 1, 1)

    def screening_scores(self, session: Session, study: Study) -> list[tuple[str, int]]:
        """Every screened MTurk worker's RDK screening r, as round(100·r) clipped to 0..100."""
        rows = session.execute(select(Worker.external_id, Worker.screening_r).where(
            Worker.study_id == study.id, Worker.platform == "mturk", Worker.screening_r.is_not(None), ~Worker.pilot)
            .order_by(Worker.id)).all()
        return [(worker_id, int(round(100 * min(max(r, 0.0), 1.0)))) for worker_id, r in rows]

    # The pace workers are told before any has finished (server/worker_time.py): a trial lasts its
    # required cycles (3 x 3 s) plus about 2 s to click and read the feedback (the demo's 46 trials took
    # about 8 minutes in a browser), and consent, instructions and the display calibration about 2 minutes.
    EXTRA_SECONDS_PER_TRIAL = 2.0
    SETUP_SECONDS = 120.0

    def time_prior(self, spec: MotionSpec) -> TimePrior:
        """A session (the unit of pay): setup, RDK screening, practice and main trials, all at one pace."""
        trials = (spec.clips_per_session * spec.probes_per_clip * spec.repetitions + spec.practice_needed
                  + spec.rdk_practice + spec.rdk_trials)
        per_trial = spec.cycles_required * spec.cycle_ms / 1000 + self.EXTRA_SECONDS_PER_TRIAL
        return TimePrior(self.SETUP_SECONDS + trials * per_trial, 0.0, lazy_ngettext("%(num)s trial", "%(num)s trials", trials))

    def time_events(self, study_id: int):
        """Responses and calibrations: the calibration marks the end of the setup of each session."""
        return super().time_events(study_id).union_all(
            select(Calibration.assignment_id, Calibration.created_at).where(Calibration.study_id == study_id))


PARADIGM = MotionMatching()
