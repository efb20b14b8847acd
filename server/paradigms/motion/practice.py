"""Which probes the main block's practice trials show (issue 39).

Practice gives feedback: it shows a probe's true motion. A session tests the first ``probes_per_clip``
probes of its clips, so a practice trial on one of those would give away the answer of test trials.
Practice therefore shows the *untested* probes (a clip's probes from position ``probes_per_clip`` on),
those of clips outside the session first (a neighbouring probe of a tested clip moves much like the
tested ones), and only those a trial can show: a full movie window around the probe and a trial that
fits the window the study asks of workers (:func:`.study.study_min_window` counts only tested probes).

When the study has no such probe (every clip has at most ``probes_per_clip`` probes), practice falls
back to tested probes of clips outside the session: other sessions test them, and so may a later
session of the same worker. It never shows a probe of the session's own test trials; a session that
shows every clip then has no practice. :func:`practice_warning` says so at ``study create``.
"""
from __future__ import annotations

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from stimuli.motion_clips import ClipManifestError, movie_window

from . import study as motion_study
from .models import MotionClip, MotionProbe
from .study import MotionSpec


def _probes(session: Session, study_id: int, spec: MotionSpec, tested: bool) -> list:
    """Rows ``(id, clip_id, x, y, frame)`` of the study's tested or untested probes, by id."""
    where = MotionProbe.position < spec.probes_per_clip if tested else MotionProbe.position >= spec.probes_per_clip
    return session.execute(select(MotionProbe.id, MotionProbe.clip_id, MotionProbe.x, MotionProbe.y, MotionProbe.frame)
                           .join(MotionClip).where(MotionClip.study_id == study_id, where)
                           .order_by(MotionProbe.id)).all()


def _showable(session: Session, study_id: int, spec: MotionSpec, rows: list, limit: int | None) -> list[int]:
    """Ids of the untested probes in ``rows`` (in order) that a trial can show, at most ``limit``: a full movie
    window around the probe (checked for tested probes only at ``study create``) and a trial within the
    study's minimum window. Clips are read as needed, so a block start reads few of them."""
    window = motion_study.study_min_window(session, study_id, spec)
    clips: dict[int, MotionClip] = {}
    picks: list[int] = []
    for probe_id, clip_id, x, y, frame in rows:
        if limit is not None and len(picks) >= limit:
            break
        clip = clips.get(clip_id) or clips.setdefault(clip_id, session.get(MotionClip, clip_id))
        try:
            movie_window(len(clip.frames["paths"]), frame, clip.movie_frames)
        except ClipManifestError:
            continue
        width, height = motion_study.clip_extent(spec, clip.width, clip.height, [(x, y)])
        if width <= window[0] and height <= window[1]:
            picks.append(probe_id)
    return picks


def practice_probes(session: Session, study_id: int, session_clips: list[int], spec: MotionSpec,
                    rng: np.random.Generator) -> list[int]:
    """``spec.practice_needed`` probe ids for a block's practice trials (cycled through when fewer), never
    a probe the block tests: untested probes (other clips' first), else tested probes of other clips."""
    untested = _probes(session, study_id, spec, tested=False)
    others = [r for r in untested if r.clip_id not in session_clips]
    own = [r for r in untested if r.clip_id in session_clips]
    ordered = [others[k] for k in rng.permutation(len(others))] + [own[k] for k in rng.permutation(len(own))]
    pool = _showable(session, study_id, spec, ordered, spec.practice_needed)
    if not pool:
        tested = [r.id for r in _probes(session, study_id, spec, tested=True) if r.clip_id not in session_clips]
        pool = [tested[k] for k in rng.permutation(len(tested))]
    picks: list[int] = []
    while pool and len(picks) < spec.practice_needed:  # fewer probes than practice trials: cycle through them
        picks += pool[:spec.practice_needed - len(picks)]
    return picks


def practice_warning(session: Session, study_id: int, spec: MotionSpec) -> str | None:
    """What ``study create`` and ``study show`` say when practice cannot keep to untested probes."""
    if not spec.practice_needed or _showable(session, study_id, spec, _probes(session, study_id, spec, False), 1):
        return None
    clips = len(session.scalars(select(MotionClip.id).where(MotionClip.study_id == study_id)).all())
    fallback = ("practice shows probes of clips outside the worker's session, which other sessions test "
                "(and a later session of the same worker may)")
    if clips <= spec.clips_per_session:
        fallback = "a session that shows every clip has no practice trials"
    return (f"no probe is left for practice: every clip has at most probes_per_clip = {spec.probes_per_clip} "
            f"probes a trial can show, and all are tested; {fallback}. Give the clips more probes than "
            "probes_per_clip (untested ones are used for practice).")
