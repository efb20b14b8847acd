"""Motion-matching study definitions: ``study.toml`` with ``[study] kind = "motion"`` -> a Study
with its clips and probes.

A motion study file names clip manifests (``stimuli.motion_clips``, format
``perceptlab-motion-clips/1``) instead of paired-comparison manifests;
``MOTION_STUDY_TEMPLATE`` (``perceptlab study template --motion``) documents
every key. Only ``study.clips`` is required.

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
from ..studyfile import (ENTRY_SECTION, ENTRY_TEMPLATE, StoredSpec, StudyDefinitionError, common_root,
                        is_dollar_amount, load_study_toml, read_sections, slugify, validate_entry, validate_slug)
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


MOTION_STUDY_TEMPLATE = '''\
# perceptlab motion-matching study: `perceptlab study create study.toml`
[study]
kind = "motion"
slug = "flow-2026"                 # URL-safe name used in worker links
name = "Perceived optical flow"
clips = ["clips/manifest.json"]    # clip manifests (perceptlab-motion-clips/1), relative to this file
seed = 0

[session]
clips_per_session = 2        # clips a worker sees in one session (never the same clip twice)
probes_per_clip = 10         # the first N probes of each clip (all when a clip has fewer)
repetitions = 4              # 2 clips x 10 probes x 4 = 80 trials, randomised
observers_per_clip = 4       # sessions wanted per clip (neediest clips are given out first)
reward_per_session = "2.10"
assignment_timeout_minutes = 90  # a session only polled (never answered) holds its clips at most this long
reservation_minutes = 5      # an open session holds its clips this long after the worker's last response
                             # or page load; then its clips are offered to other workers too

[practice]
practice_needed = 6          # passed practice trials before the main trials
practice_max = 30            # at most this many practice trials per block
practice_max_epe = 10.0      # a practice trial passes with EPE <= this (px/frame) ...
practice_max_dir_deg = 30.0  # ... and a direction error <= this (degrees)

[screening]
rdk_practice = 6             # RDK practice trials with feedback (repeated until passed, like practice)
rdk_trials = 80              # RDK test trials
rdk_n_dots = 5000
rdk_aperture_px = 600
rdk_dot_px = 2
rdk_speed_min = 1.0          # px/frame
rdk_speed_max = 20.0
screening_min_r = 0.90       # r (u and v pooled) of RDK responses against the truth needed to go on
rdk_feedback = true          # show the true motion after RDK test trials too (HuPerFlow does)

[timing]
frame_rate_hz = 30
cycle_ms = 3000              # movie + ISI 1 + matching + ISI 2
isi1_ms = 1000
matching_ms = 500
cycles_required = 3          # clicks count once this many cycles were complete
min_refresh_hz = 55          # slower displays are turned away
max_refresh_irregular = 0.2  # ... and so are displays with more irregular refresh intervals than this share
refresh_samples = 60         # requestAnimationFrame intervals the browser measures
dropped_frames = "exclude"   # trials with frame drops: "exclude" (flagged), "repeat" (one repeat), "keep"
max_timing_repeats = 10      # at most this many timing repeats per session

[display]
panel_diameter_px = 600
aperture_px = 120            # matching noise aperture
cue_diameter_px = 120
placeholder_offset_px = 60
placeholder_diameter_px = 10
probe_diameter_px = 7
cursor_diameter_px = 10
px_per_degree = 50           # the viewing distance shown to the worker makes 50 px = 1 degree
min_window_width = 0         # the window a trial needs comes from the clips, the RDK aperture and the
min_window_height = 0        # panel (1000 x 600 with these sizes); a larger value here raises it

[calibration]
blind_spot = false           # true: after the card, measure the viewing distance with the blind-spot task
                             # (virtual chinrest: one eye closed, a dot moving away from a square vanishes
                             # at about 13.5 degrees); stored beside the card (calibration.csv, dashboard)
blind_spot_repetitions = 5   # sweeps averaged (the distance must come out between 20 and 200 cm)

''' + ENTRY_TEMPLATE + '''
[texts]
researcher = ""              # REQUIRED by the default consent: who runs the study ("Dr A. Lee, Univ. of X")
contact = ""                 # REQUIRED by the default consent: whom workers may ask ("a.lee@x.edu")
# consent = """..."""        # {researcher} and {contact} become the values above, {pay} the pay of [session]
                             # ("$2.10 for 1 session"), {time} the time estimate ("about 11 minutes per
                             # session of 46 trials"); `study create` refuses empty ones
# instructions = """..."""

# [mturk]                    # optional HIT settings for `perceptlab mturk launch` (motion defaults shown)
# title = "Match the motion of a point in short video clips"
# assignment_duration_minutes = 120, min_approval_rate = 98, min_approved_hits = 1000, locales = ["US"],
# require_screening = 0        # e.g. 90: only workers whose screening score (r x 100) is at least 90
'''


@dataclass(frozen=True)
class MotionSpec(StoredSpec):
    """Every parameter of a motion study, validated; stored as ``Study.config`` (with ``kind = "motion"``)."""
    _TUPLE_FIELD = "clips"
    slug: str
    name: str
    clips: tuple[str, ...]
    seed: int = 0
    kind: str = KIND
    clips_per_session: int = 2
    probes_per_clip: int = 10
    repetitions: int = 4
    observers_per_clip: int = 4
    reward_per_session: str = "2.10"
    assignment_timeout_minutes: int = 90
    reservation_minutes: int = 5
    practice_needed: int = 6
    practice_max: int = 30
    practice_max_epe: float = 10.0
    practice_max_dir_deg: float = 30.0
    rdk_practice: int = 6
    rdk_trials: int = 80
    rdk_n_dots: int = 5000
    rdk_aperture_px: int = 600
    rdk_dot_px: int = 2
    rdk_speed_min: float = 1.0
    rdk_speed_max: float = 20.0
    screening_min_r: float = 0.90
    rdk_feedback: bool = True
    frame_rate_hz: int = 30
    cycle_ms: int = 3000
    isi1_ms: int = 1000
    matching_ms: int = 500
    cycles_required: int = 3
    min_refresh_hz: float = 55.0
    max_refresh_irregular: float = 0.2
    refresh_samples: int = 60
    dropped_frames: str = "exclude"
    max_timing_repeats: int = 10
    panel_diameter_px: int = 600
    aperture_px: int = 120
    cue_diameter_px: int = 120
    placeholder_offset_px: int = 60
    placeholder_diameter_px: int = 10
    probe_diameter_px: int = 7
    cursor_diameter_px: int = 10
    px_per_degree: float = 50.0
    min_window_width: int = 0       # 0: no floor beyond what min_window() computes from the geometry
    min_window_height: int = 0
    blind_spot: bool = False        # the [calibration] table: measure the viewing distance too
    blind_spot_repetitions: int = 5
    consent: str = DEFAULT_MOTION_CONSENT
    instructions: str = DEFAULT_MOTION_INSTRUCTIONS
    researcher: str = ""            # the consent's {researcher} and {contact} (server/paradigms/consent.py)
    contact: str = ""
    noise: str = ""  # the noise texture, relative to the stimulus root (filled in at creation)
    mturk: dict[str, Any] = field(default_factory=dict)  # the [mturk] table (server/mturk.py)
    allow_anonymous: bool = False   # the [entry] table (server/paradigms/entry.py)
    signed_links: bool = False
    access_key: str = ""
    external_hits: bool = False    # admit MTurk entries while the study has no HIT posted by perceptlab
    entry_limit: int = -1           # per address and window; -1 = [server] entry_limit, 0 = none
    recruiter: str = "link"         # link | prolific | redirect (server/paradigms/recruiters.py)
    completion_code: str = ""       # "" = one random code per participant
    redirect_url: str = ""          # recruiter "redirect": https://... with {code} and {participant}
    base_dir: str = field(default=".", compare=False)

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


SECTIONS: dict[str, dict[str, type]] = {
    "study": {"kind": str, "slug": str, "name": str, "clips": list, "seed": int},
    "session": {"clips_per_session": int, "probes_per_clip": int, "repetitions": int, "observers_per_clip": int,
                "reward_per_session": str, "assignment_timeout_minutes": int, "reservation_minutes": int},
    "practice": {"practice_needed": int, "practice_max": int, "practice_max_epe": float,
                 "practice_max_dir_deg": float},
    "screening": {"rdk_practice": int, "rdk_trials": int, "rdk_n_dots": int, "rdk_aperture_px": int,
                  "rdk_dot_px": int, "rdk_speed_min": float, "rdk_speed_max": float, "screening_min_r": float,
                  "rdk_feedback": bool},
    "timing": {"frame_rate_hz": int, "cycle_ms": int, "isi1_ms": int, "matching_ms": int, "cycles_required": int,
               "min_refresh_hz": float, "max_refresh_irregular": float, "refresh_samples": int,
               "dropped_frames": str, "max_timing_repeats": int},
    "display": {"panel_diameter_px": int, "aperture_px": int, "cue_diameter_px": int, "placeholder_offset_px": int,
                "placeholder_diameter_px": int, "probe_diameter_px": int, "cursor_diameter_px": int,
                "px_per_degree": float, "min_window_width": int, "min_window_height": int},
    "calibration": {"blind_spot": bool, "blind_spot_repetitions": int},
    "texts": {"consent": str, "instructions": str, "researcher": str, "contact": str},
    "entry": ENTRY_SECTION,
}


def read_motion_study_file(path: str | Path) -> MotionSpec:
    """Parse and validate a motion ``study.toml``; raise :class:`StudyDefinitionError` naming file and key."""
    path = Path(path)
    return motion_spec_from_toml(load_study_toml(path), path)


def motion_spec_from_toml(data: dict[str, Any], path: Path) -> MotionSpec:
    """The :class:`MotionSpec` of parsed TOML ``data`` read from ``path`` (for messages and relative paths)."""
    values = read_sections(data, SECTIONS, path)
    clips = values.get("clips")
    if not clips:
        raise StudyDefinitionError(f"{path}: study.clips is required (paths of clip manifests)")
    if not all(isinstance(c, str) and c for c in clips):
        raise StudyDefinitionError(f"{path}: study.clips must be a list of paths (strings)")
    values.setdefault("slug", slugify(path.stem))
    values.setdefault("name", values["slug"])
    spec = MotionSpec(**{**values, "clips": tuple(clips)}, base_dir=str(path.parent.resolve()))
    validate_motion_spec(spec, str(path))
    return spec


def validate_motion_spec(spec: MotionSpec, where: str = "study") -> None:
    """Raise :class:`StudyDefinitionError` (prefixed with ``where``) for an impossible parameter."""
    def fail(message: str) -> None:
        raise StudyDefinitionError(f"{where}: {message}")

    validate_slug(spec, fail)
    for key in ("clips_per_session", "probes_per_clip", "repetitions", "observers_per_clip",
                "assignment_timeout_minutes", "practice_max", "rdk_trials", "rdk_n_dots", "rdk_aperture_px",
                "rdk_dot_px", "frame_rate_hz", "cycle_ms", "matching_ms", "cycles_required", "refresh_samples",
                "panel_diameter_px", "aperture_px", "cue_diameter_px", "placeholder_diameter_px",
                "probe_diameter_px", "cursor_diameter_px"):
        if getattr(spec, key) < 1:
            fail(f"{key} must be at least 1")
    for key in ("seed", "practice_needed", "rdk_practice", "isi1_ms", "max_timing_repeats",
                "placeholder_offset_px", "min_window_width", "min_window_height"):
        if getattr(spec, key) < 0:
            fail(f"{key} must not be negative")
    if spec.practice_needed > spec.practice_max or spec.rdk_practice > spec.practice_max:
        fail(f"practice_max ({spec.practice_max}) is below practice_needed or rdk_practice")
    if not (spec.practice_max_epe > 0 and 0 < spec.practice_max_dir_deg <= 180):
        fail("practice_max_epe must be positive and practice_max_dir_deg in (0, 180]")
    if not 0 < spec.rdk_speed_min <= spec.rdk_speed_max:
        fail(f"rdk_speed_min ({spec.rdk_speed_min}) must be positive and at most rdk_speed_max")
    if not -1 <= spec.screening_min_r <= 1:
        fail(f"screening_min_r must be in [-1, 1], got {spec.screening_min_r}")
    if spec.rdk_trials < 2:
        fail("rdk_trials must be at least 2 (a correlation needs two trials)")
    if spec.isi2_ms(15) < 0:
        fail(f"cycle_ms ({spec.cycle_ms}) is shorter than a 15-frame movie + isi1_ms + matching_ms")
    if spec.min_refresh_hz <= 0 or not 0 <= spec.max_refresh_irregular <= 1:
        fail("min_refresh_hz must be positive and max_refresh_irregular in [0, 1]")
    if spec.refresh_samples < 60:
        fail("refresh_samples must be at least 60 (a median of fewer is not reliable)")
    if spec.dropped_frames not in ("exclude", "repeat", "keep"):
        fail(f"timing.dropped_frames must be 'exclude', 'repeat' or 'keep', got {spec.dropped_frames!r}")
    if spec.px_per_degree <= 0:
        fail("px_per_degree must be positive")
    if not 1 <= spec.blind_spot_repetitions <= 20:
        fail(f"calibration.blind_spot_repetitions must be 1 to 20, got {spec.blind_spot_repetitions}")
    validate_entry(spec, fail)
    if not is_dollar_amount(spec.reward_per_session):
        fail(f"reward_per_session must be a dollar amount like \"2.00\", got {spec.reward_per_session!r}")


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
