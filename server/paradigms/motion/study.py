"""Motion-matching study definitions: ``study.toml`` with ``[study] kind = "motion"`` -> a Study
with its clips and probes.

A motion study file names clip manifests (``stimuli.motion_clips``, format
``perceptlab-motion-clips/1``) instead of paired-comparison manifests;
:class:`MotionSpec` declares every key once (server/paradigms/params.py);
``MOTION_STUDY_TEMPLATE`` (``perceptlab study template --motion``) is made from it.
Only ``study.clips`` is required.

The matching stimulus is a 1/f² noise texture: the first manifest's ``noise``
file when it names one, otherwise one is generated at creation with
:func:`stimuli.noise.brownian_noise` (seeded by the study seed) and written to
``_perceptlab/noise_seed<seed>.png`` under the study's stimulus root.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ...models import Study
from ...stimulus_index import SALT_KEY, new_salt
from ..display_monitor import DisplayMonitorParams
from ..sections import ViewingParams
from ..params import (TEXT_PLACEHOLDER, EntryParams, Fail, MTurkParams, StudyParams, TextsParams, param, parse_spec,
                      study_template)
from ..questionnaire import QuestionnaireParams
from ..studyfile import StudyDefinitionError, common_root, load_study_toml
from .models import MotionClip, MotionProbe

KIND = "motion"

DEFAULT_MOTION_CONSENT = """\
This task is part of a research study on how people perceive motion in videos, run by {researcher}. \
You will watch short clips and adjust a moving pattern with the mouse until it moves like a marked point \
in the clip. It takes {time}. It pays {pay}.

Participation is voluntary: you may stop at any time by returning the task. We record your \
adjustments, response times, the size and refresh rate of your display, the timing of every frame \
shown and your platform worker ID. Worker IDs are replaced by pseudonyms in every exported data set \
and are never published.

A short motion test comes first; workers whose answers do not follow the motion cannot continue.

Questions about the study: {contact}."""

DEFAULT_MOTION_INSTRUCTIONS = """\
First you calibrate your screen: hold a credit card (or any card of that size) against the screen and \
resize the drawn card until it matches. Then the page measures your display's refresh rate and asks \
for full screen.

In every trial a clip plays again and again. A green circle and four green dots mark a point; a green \
dot flashes there in the middle of the clip. After each clip a patch of noise appears at that point. \
Move the mouse in the circle at the centre of the screen: the direction from the centre sets the \
direction of the noise motion, the distance sets its speed. Adjust until the noise moves like the \
marked point, then click (clicks count after three repetitions).

Practice trials show the correct motion after your answer; they repeat until you get the hang of it."""


# The HIT texts of motion studies over the [mturk] defaults (Paradigm.mturk_settings; the template shows them).
MTURK_TEXTS = {
    "title": "Match the motion of a point in short video clips",
    "description": "Watch short clips and move the mouse until a noise pattern moves like a marked point "
                   "(needs a mouse and a display of at least 60 Hz).",
    "keywords": "motion, video, perception, psychophysics, mouse",
}


@dataclass(frozen=True, kw_only=True)
class MotionSpec(StudyParams, EntryParams, TextsParams, MTurkParams, ViewingParams,
                 DisplayMonitorParams, QuestionnaireParams):
    """Every parameter of a motion study, declared once (server/paradigms/params.py) and validated; stored as
    ``Study.config`` (with ``kind = "motion"``)."""
    kind: str = param(KIND, section="study", choices=(KIND,), doc='"motion": a motion-matching study')
    clips: tuple[str, ...] = param(section="study", required=True, example=("clips/manifest.json",),
                                   doc="clip manifests (perceptlab-motion-clips/1), relative to this file")

    clips_per_session: int = param(2, section="session", low=1,
                                   doc="clips a worker sees in one session (never the same clip twice)")
    probes_per_clip: int = param(10, section="session", low=1,
                                 doc="the first N probes of each clip (all when a clip has fewer)")
    repetitions: int = param(4, section="session", low=1, doc="2 clips x 10 probes x 4 = 80 trials, randomised")
    observers_per_clip: int = param(4, section="session", low=1,
                                    doc="sessions wanted per clip (neediest clips are given out first)")
    reward_per_session: str = param("2.10", section="session", money=True, doc="the pay of one session (the HIT)")
    assignment_timeout_minutes: int = param(
        90, section="session", low=1, doc="a session only polled (never answered) holds its clips at most this long")
    reservation_minutes: int = param(
        5, section="session", low=1,
        doc="an open session holds its clips this long after the worker's last response or page load; then its "
            "clips are offered to other workers too")

    practice_needed: int = param(6, section="practice", low=0, doc="passed practice trials before the main trials")
    practice_max: int = param(30, section="practice", low=1,
                              doc="at most this many practice trials per block (at least practice_needed and "
                                  "rdk_practice)")
    practice_max_epe: float = param(10.0, section="practice", above=0,
                                    doc="a practice trial passes with EPE <= this (px/frame) ...")
    practice_max_dir_deg: float = param(30.0, section="practice", above=0, high=180,
                                        doc="... and a direction error <= this (degrees)")

    rdk_practice: int = param(6, section="screening", low=0,
                              doc="RDK practice trials with feedback (repeated until passed, like practice)")
    rdk_trials: int = param(80, section="screening", low=2, doc="RDK test trials (a correlation needs two)")
    rdk_n_dots: int = param(5000, section="screening", low=1, doc="dots of the random-dot kinematogram")
    rdk_aperture_px: int = param(600, section="screening", low=1, doc="diameter of the RDK aperture")
    rdk_dot_px: int = param(2, section="screening", low=1, doc="size of an RDK dot")
    rdk_speed_min: float = param(1.0, section="screening", above=0, doc="slowest RDK speed (px/frame)")
    rdk_speed_max: float = param(20.0, section="screening", above=0,
                                 doc="fastest RDK speed (px/frame; at least rdk_speed_min)")
    screening_min_r: float = param(0.90, section="screening", low=-1, high=1,
                                   doc="r (u and v pooled) of RDK responses against the truth needed to go on")
    rdk_feedback: bool = param(True, section="screening",
                               doc="show the true motion after RDK test trials too (HuPerFlow does)")

    frame_rate_hz: int = param(30, section="timing", low=1, doc="frames per second of the clips as shown")
    cycle_ms: int = param(3000, section="timing", low=1,
                          doc="movie + ISI 1 + matching + ISI 2 (holds a 15-frame movie, isi1_ms and matching_ms)")
    isi1_ms: int = param(1000, section="timing", low=0, doc="blank interval between the movie and the matching noise")
    matching_ms: int = param(500, section="timing", low=1, doc="how long the matching noise moves in each cycle")
    cycles_required: int = param(3, section="timing", low=1, doc="clicks count once this many cycles were complete")
    min_refresh_hz: float = param(55.0, section="timing", above=0, doc="slower displays are turned away")
    max_refresh_irregular: float = param(
        0.2, section="timing", low=0, high=1,
        doc="... and so are displays with more irregular refresh intervals than this share")
    refresh_samples: int = param(60, section="timing", low=60,
                                 doc="requestAnimationFrame intervals the browser measures (a median of fewer than "
                                     "60 is not reliable)")
    dropped_frames: str = param("exclude", section="timing", choices=("exclude", "repeat", "keep"),
                                doc='trials with frame drops: "exclude" (flagged), "repeat" (one repeat), "keep"')
    max_timing_repeats: int = param(10, section="timing", low=0, doc="at most this many timing repeats per session")

    panel_diameter_px: int = param(600, section="display", low=1, doc="the control panel the mouse works in")
    aperture_px: int = param(120, section="display", low=1, doc="matching noise aperture")
    cue_diameter_px: int = param(120, section="display", low=1, doc="the green circle around the probe")
    placeholder_offset_px: int = param(60, section="display", low=0,
                                       doc="distance of the four green dots from the probe")
    placeholder_diameter_px: int = param(10, section="display", low=1, doc="size of the four green dots")
    probe_diameter_px: int = param(7, section="display", low=1, doc="size of the dot flashed at the probe")
    cursor_diameter_px: int = param(10, section="display", low=1, doc="size of the cursor in the control panel")
    px_per_degree: float = param(50.0, section="display", above=0,
                                 doc="the viewing distance shown to the worker makes 50 px = 1 degree")
    min_window_width: int = param(
        0, section="display", low=0,
        doc="the window a trial needs comes from the clips, the RDK aperture and the panel (1000 x 600 with these "
            "sizes); a larger value here raises it (0: no floor of its own)")
    min_window_height: int = param(0, section="display", low=0, doc="see min_window_width")

    blind_spot: bool = param(
        False, section="calibration",
        doc="true: after the card, measure the viewing distance with the blind-spot task (virtual chinrest: one "
            "eye closed, a dot moving away from a square vanishes at about 13.5 degrees); stored beside the card "
            "(calibration.csv, dashboard)")
    blind_spot_repetitions: int = param(5, section="calibration", low=1, high=20,
                                        doc="sweeps averaged (the distance must come out between 20 and 200 cm)")

    consent: str = param(
        DEFAULT_MOTION_CONSENT, section="texts", placeholder=TEXT_PLACEHOLDER,
        doc='{researcher} and {contact} become the values above, {pay} the pay of [session] ("$2.10 for 1 '
            'session"), {time} the time estimate ("about 11 minutes per session of 46 trials"); `study create` '
            "refuses empty ones")
    instructions: str = param(DEFAULT_MOTION_INSTRUCTIONS, section="texts", placeholder=TEXT_PLACEHOLDER,
                              doc="shown before the calibration")
    noise: str = ""  # the noise texture, relative to the stimulus root (filled in at creation, not in the file)
    base_dir: str = field(default=".", compare=False)  # the study file's folder (clips are relative to it)

    @property
    def frame_ms(self) -> float:
        return 1000.0 / self.frame_rate_hz

    def movie_ms(self, movie_frames: int) -> float:
        return movie_frames * self.frame_ms

    def isi2_ms(self, movie_frames: int) -> float:
        """The second ISI: what is left of the cycle (15 frames: 1000 ms; 10 frames: 1167 ms)."""
        return self.cycle_ms - self.movie_ms(movie_frames) - self.isi1_ms - self.matching_ms

    @property
    def matching_frames(self) -> int:
        return round(self.matching_ms / self.frame_ms)

    @property
    def main_trials(self) -> int:
        """Non-practice main trials of a full session (fewer when the clips have fewer probes)."""
        return self.clips_per_session * self.probes_per_clip * self.repetitions

    def validate(self, fail: Fail) -> None:
        """Rules between parameters (each parameter's own bounds are declared above)."""
        if self.practice_needed > self.practice_max or self.rdk_practice > self.practice_max:
            fail(f"practice.practice_max ({self.practice_max}) is below practice_needed or rdk_practice")
        if self.rdk_speed_min > self.rdk_speed_max:
            fail(f"screening.rdk_speed_min ({self.rdk_speed_min}) must be at most rdk_speed_max")
        if self.isi2_ms(15) < 0:
            fail(f"timing.cycle_ms ({self.cycle_ms}) is shorter than a 15-frame movie + isi1_ms + matching_ms")


MOTION_STUDY_TEMPLATE = study_template(
    MotionSpec, header="perceptlab motion-matching study: `perceptlab study create study.toml`",
    examples={"slug": "flow-2026", "name": "Perceived optical flow", "mturk": MTURK_TEXTS})


def read_motion_study_file(path: str | Path) -> MotionSpec:
    """Parse and validate a motion ``study.toml``; raise :class:`StudyDefinitionError` naming file and key."""
    path = Path(path)
    return motion_spec_from_toml(load_study_toml(path), path)


def motion_spec_from_toml(data: dict[str, Any], path: Path) -> MotionSpec:
    """The :class:`MotionSpec` of parsed TOML ``data`` read from ``path`` (for messages and relative paths)."""
    return parse_spec(MotionSpec, data, path)


# ---------------------------------------------------------------- the window a trial needs

# Beside the control panel the trial page shows its text (progress, status, feedback) in a column of
# at least this width on either side, off the panel where the mouse works.
TEXT_COLUMN_PX = 200


def clip_extent(spec: MotionSpec, width: int, height: int,
                probes: Iterable[tuple[float, float]] = ()) -> tuple[int, int]:
    """Width and height (CSS px) a clip takes around the window's centre in a main trial: the clip
    itself, widened where a probe's matching aperture, cue circle or placeholder dots reach past its
    edge (``probes``: their ``(x, y)`` in the clip's pixels)."""
    reach = max(spec.aperture_px / 2, spec.cue_diameter_px / 2,
                spec.placeholder_offset_px + spec.placeholder_diameter_px / 2)
    half_w, half_h = width / 2, height / 2
    for x, y in probes:
        half_w = max(half_w, abs(x - width / 2) + reach)
        half_h = max(half_h, abs(y - height / 2) + reach)
    return math.ceil(2 * half_w), math.ceil(2 * half_h)


def min_window(spec: MotionSpec, extents: Iterable[tuple[int, int]] = ()) -> tuple[int, int]:
    """The smallest inner browser window ``(width, height)`` in CSS px the trial page of ``spec`` needs.

    A trial draws one image pixel per CSS pixel around the window's centre, as the calibration assumes
    (the worker sits where ``px_per_degree`` px make one degree), so nothing may be scaled down to fit:
    the window must hold the largest clip with its probes' apertures (``extents``, from
    :func:`clip_extent`), the RDK aperture and the control panel with a text column of
    :data:`TEXT_COLUMN_PX` on either side. The study's ``min_window_width`` and ``min_window_height``
    raise it (0: no floor of their own). HuPerFlow's sizes (a 600 px panel and RDK aperture) with the
    demo's 768 x 432 clips need 1000 x 600: the inner window of a 1366 x 768 laptop (about 1366 x 657) and
    of a 1280 x 720 one (about 1280 x 600) both hold it.
    """
    extents = list(extents)
    width = max([spec.panel_diameter_px + 2 * TEXT_COLUMN_PX, spec.rdk_aperture_px, spec.min_window_width]
                + [w for w, _ in extents])
    height = max([spec.panel_diameter_px, spec.rdk_aperture_px, spec.min_window_height] + [h for _, h in extents])
    return int(width), int(height)


def study_min_window(session: Session, study_id: int, spec: MotionSpec) -> tuple[int, int]:
    """:func:`min_window` of a stored study: its clips and the probes a session shows (one query)."""
    rows = session.execute(
        select(MotionClip.id, MotionClip.width, MotionClip.height, MotionProbe.x, MotionProbe.y)
        .outerjoin(MotionProbe, (MotionProbe.clip_id == MotionClip.id)
                   & (MotionProbe.position < spec.probes_per_clip))
        .where(MotionClip.study_id == study_id)).all()
    clips: dict[int, tuple[int, int, list[tuple[float, float]]]] = {}
    for clip_id, width, height, x, y in rows:
        probes = clips.setdefault(clip_id, (width, height, []))[2]
        if x is not None:
            probes.append((x, y))
    return min_window(spec, (clip_extent(spec, w, h, probes) for w, h, probes in clips.values()))


# ---------------------------------------------------------------- manifests -> rows

def _manifests(spec: MotionSpec) -> list:
    from stimuli.motion_clips import ClipManifestError, load_clip_manifest

    manifests = []
    for name in spec.clips:
        path = Path(spec.base_dir) / name
        try:
            manifests.append(load_clip_manifest(path))
        except FileNotFoundError:
            raise StudyDefinitionError(f"{path}: no such clip manifest") from None
        except ClipManifestError as exc:
            raise StudyDefinitionError(str(exc)) from None
    ids = [c.clip_id for m in manifests for c in m.clips]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise StudyDefinitionError(f"clip IDs appear twice across the manifests: {', '.join(duplicates)}")
    if not ids:
        raise StudyDefinitionError("the clip manifests name no clips")
    return manifests


def create_motion_study(session: Session, spec: MotionSpec) -> Study:
    """Store a motion study with its clips and probes; the caller commits.

    Every frame must exist and every probe used must have a full movie window
    (the clip's ``movie_frames`` around it): errors name the clip and probe.
    """
    from stimuli.motion_clips import ClipManifestError, movie_window

    if session.scalar(select(func.count()).select_from(Study).where(Study.slug == spec.slug)):
        raise StudyDefinitionError(f"a study with slug {spec.slug!r} exists already")
    manifests = _manifests(spec)
    root = common_root([Path(m.root).resolve() for m in manifests])
    noise = _noise_path(spec, manifests[0], root)
    config = {**spec.to_config(), "noise": noise, SALT_KEY: new_salt()}  # new_salt: key of the stimulus names
    study = Study(slug=spec.slug, name=spec.name, seed=spec.seed, config=config, stimulus_root=str(root))
    session.add(study)
    session.flush()
    position = 0
    for manifest in manifests:
        for clip in manifest.clips:
            if not clip.probes:
                raise StudyDefinitionError(f"{manifest.path}: clip {clip.clip_id} has no probes")
            frames = []
            for frame in clip.frames:
                full = (Path(manifest.root) / frame).resolve()
                if not full.is_file():
                    raise StudyDefinitionError(f"{full}: listed for clip {clip.clip_id} in {manifest.path} but missing")
                frames.append(full.relative_to(root).as_posix())
            row = MotionClip(study_id=study.id, clip_id=clip.clip_id, dataset=clip.dataset, position=position,
                             frames={"paths": frames}, width=int(clip.width), height=int(clip.height),
                             frame_rate=float(clip.frame_rate), movie_frames=int(clip.movie_frames))
            session.add(row)
            session.flush()
            position += 1
            for k, probe in enumerate(clip.probes):
                if k < spec.probes_per_clip:  # only the probes a session shows need a movie window
                    try:
                        movie_window(len(frames), probe.frame, clip.movie_frames)
                    except ClipManifestError as exc:
                        raise StudyDefinitionError(f"{manifest.path}: clip {clip.clip_id} probe {probe.probe_id}: "
                                                   f"{exc}") from None
                if not (math.isfinite(probe.gt_u) and math.isfinite(probe.gt_v)):
                    raise StudyDefinitionError(f"{manifest.path}: clip {clip.clip_id} probe {probe.probe_id}: "
                                               "no ground-truth flow at the probe")
                session.add(MotionProbe(clip_id=row.id, probe_id=probe.probe_id, position=k, x=float(probe.x),
                                        y=float(probe.y), frame=int(probe.frame), gt_u=float(probe.gt_u),
                                        gt_v=float(probe.gt_v)))
    session.flush()
    return study


def _noise_path(spec: MotionSpec, manifest, root: Path) -> str:
    """The matching-noise texture relative to ``root``: the manifest's, else a generated one."""
    if manifest.noise:
        full = (Path(manifest.root) / manifest.noise).resolve()
        if not full.is_file():
            raise StudyDefinitionError(f"{full}: the noise texture named in {manifest.path} is missing")
        return full.relative_to(root).as_posix()
    from stimuli.io import write_png
    from stimuli.noise import brownian_noise

    target = root / "_perceptlab" / f"noise_seed{spec.seed}.png"
    if not target.is_file():
        grey = brownian_noise(2048, rng=spec.seed)
        target.parent.mkdir(parents=True, exist_ok=True)
        write_png(target, np.repeat(grey[:, :, None], 3, axis=2))
    return target.relative_to(root).as_posix()
