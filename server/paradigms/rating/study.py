"""Rating study definitions: ``study.toml`` with ``[study] kind = "rating"`` -> a Study with its
rating stimuli (:class:`~server.paradigms.rating.models.RatingStimulus`).

A rating study reads the same prepared scenes as a paired-comparison study (``[study] manifests``
from ``perceptlab stimuli prepare``), so one stimulus folder serves a PC and a DCR study. Every
candidate of every scene becomes a stimulus ``<scene>/<candidate>``, shown as prepared
(``[rating] stimulus``: "amplified" or "original"). ``STUDY_TEMPLATE`` (``perceptlab study
template --kind rating``) documents every key.

Quality checks (server/paradigms/rating/quality.py) need images of their own. A study with checks has
every image it shows written at creation under each scene's folder in ``rating/`` by one encoder path
(:func:`write_scene_images`; deterministic: the same study file writes the same bytes):

* ``rating/<stimulus>/test-<hash>.png``: each candidate as shown, the same pixels;
* ``rating/hidden_reference-<hash>.png``: the reference with one code value of seeded noise
  (:func:`stimuli.check_images.imperceptible_copy`): never a pixel-identical copy of the reference;
* ``rating/<stimulus>/gold_low_<k>-<hash>.png``: strongly degraded copies (blurred, washed out and darkened:
  :func:`stimuli.check_images.blurred_degradations`, an error of at least twice the worst candidate's
  IE), amplified like the candidates when the study shows amplified images;
* DCR and CCR: ``rating/reference-<hash>.png``, one copy of the reference per stimulus (same pixels, own
  bytes), so that in CCR no URL repeats across a scene's trials to mark the reference's side.

Each of these files is re-encoded and padded to a size drawn independently from one distribution per
scene (:func:`stimuli.check_images.common_sizes`), in the prepared files' PNG structure
(:mod:`stimuli.check_images`): neither ``Content-Length``, the PNG header, re-encoding the pixels nor the
stream's block structure tells a check from a real stimulus (tests/server/test_rating_check_images.py).
What a script learns by decoding (the pixels; the compressed body's length before the padding, a
measure of compressibility; how close the hidden reference is to the reference) is not hidden: checks are
plain to eyes, and so to a program that measures what eyes see. A study without checks shows the
prepared files as they are.

"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from stimuli.media import VIDEO

from ...models import Study
from ...stimulus_index import SALT_KEY, new_salt
from ..display import WindowRequirement
from ..display_monitor import DisplayMonitorParams
from ..media import MediaParams, decode_types, needed_mbps, study_media, write_check_clips
from ..params import (TEXT_PLACEHOLDER, EntryParams, StoppingParams, MTurkParams, StudyParams, TextsParams, param, parse_spec,
                      redeclare, study_template)
from ..questionnaire import QuestionnaireParams
from ..sections import DisplayParams, PagesParams, QualityParams, ViewingParams
from ..studyfile import StudyDefinitionError, check_resolve_items, common_root, load_manifest_json
from .models import GOLD_LOW, HIDDEN_REFERENCE, TEST, RatingStimulus
from .scales import METHODS

KIND = "rating"
STIMULI = ("amplified", "original")
REFERENCE_ITEM = "__reference__"  # item_id of a scene's hidden reference (stimulus_id "<scene>/__reference__")
CHECK_FOLDER = "rating"           # the quality checks' files, in each scene's folder
GOLD_MARGIN = 2.0                 # a gold_low image's IE / the scene's worst candidate's (stimuli.gold)

# The trial page's fixed chrome in CSS px around the images: the sizes rating.css sets, which rating_trial.js's
# RATING_CHROME and ratingWindowNeeded use too (tests/browser/test_rating_page.py checks that both agree).
RATING_CHROME: dict[str, int] = {
    "bar": 45,          # the top bar (44 px and its 1 px border)
    "label": 36,        # an image's label (28 px) and the gap below it; only when a trial shows two images
    "pad": 8,           # the trial's padding (top, bottom, sides)
    "gap": 24,          # between the two images
    "scale": 72,        # the row of answers (buttons or slider) and Next (64 px), and the gap above it
    "scale_width": 880,  # that row's smallest width (every P.910 label on two lines at most)
    "margin": 2,        # kept free so that rounding never brings a scrollbar back
}
# The stacked layout of narrow windows and phones: the image above; below it the question (40 px, two lines: the
# top bar has no room for it on a phone), the row of answers (64 px, 4 px apart: CCR's seven 44 px touch targets
# in 332 px) and Next across the row (48 px); 8 px between them: 8 + 40 + 8 + 64 + 8 + 48 = 176. A study whose min_window_width is below the side-by-side row's own width
# (:func:`side_by_side_width`, 898) accepts narrow windows, and its window is the stacked layout's: 350 px wide
# at the least, so that such a study admits phones (display.PHONE_WINDOW, the one device rule).
RATING_CHROME_STACKED: dict[str, int] = {**RATING_CHROME, "scale": 176, "scale_width": 332}


def side_by_side_width(chrome: dict[str, int] = RATING_CHROME) -> int:
    """The narrowest window of the side-by-side layout: its row of answers and Next, with the padding."""
    return chrome["scale_width"] + 2 * chrome["pad"] + chrome["margin"]


def rating_chrome(min_window_width: int) -> dict[str, int]:
    """The chrome of a study's window: the stacked layout's when its ``min_window_width`` accepts windows
    narrower than the side-by-side layout needs (rating_trial.js ``requirementChrome``), else the side-by-side."""
    return RATING_CHROME_STACKED if min_window_width < side_by_side_width() else RATING_CHROME


def gold_low_item(k: int) -> str:
    """Item ID of a scene's ``k``-th strongly degraded image (1, 2, ...): in exports only."""
    return f"__gold_low_{k}__"


DEFAULT_CONSENT = """\
This task is part of a research study on how people perceive {medium} quality, run by {researcher}. \
You will look at {medium}s and rate their quality on a scale. It takes {time}. It pays {pay}.

Participation is voluntary: you may stop at any time by returning the task. We record your \
ratings, response times, window size and your platform worker ID. Worker IDs are replaced by \
pseudonyms in every exported data set and are never published.

Some {medium}s have a known answer; workers who answer too many of them far from it are stopped.

Questions about the study: {contact}."""

_INSTRUCTIONS = {  # {one}: "image" or "video" (media.stimulus_word)
    "acr": "In every trial you see one {one}. Rate its quality: Excellent, Good, Fair, Poor or Bad.",
    "dcr": "In every trial you see two {one}s: the REFERENCE on the left and a TEST {one} on the right. Rate "
           "how much the test {one} is impaired compared with the reference, from Imperceptible to Very annoying.",
    "ccr": "In every trial you see two {one}s, FIRST and SECOND. Rate how the second compares with the first, "
           "from Much worse to Much better.",
}
_INSTRUCTIONS_ANSWER = ("Click an answer (or press its number key), then press Next (or Enter). There is no time "
                        "limit, but please decide at your natural pace.")
_INSTRUCTIONS_AMPLIFIED = "Differences have been amplified so they are easier to see."
_INSTRUCTIONS_QUIZ = "First comes a short training with obvious cases: you must pass it to continue."


# The HIT's texts over the [mturk] defaults (server/mturk.py), shown in the template.
MTURK_TEXTS = {"title": "Rate the quality of images",
               "description": "Look at images and rate their quality on a scale.",
               "keywords": "image, quality, rating, perception, survey"}


def default_instructions(method: str = "dcr", stimulus: str = "amplified", quiz: bool = True,
                         word: str = "image") -> str:
    """The instructions a study shows unless its file gives its own (an unknown method, which the spec's check
    refuses next, gets none of its own); ``word`` names the stimuli: "image" or "video"."""
    parts = [_INSTRUCTIONS.get(method, "").format(one=word), _INSTRUCTIONS_ANSWER,
             _INSTRUCTIONS_AMPLIFIED if stimulus == "amplified" else "", _INSTRUCTIONS_QUIZ if quiz else ""]
    return "\n\n".join(part for part in parts if part)


RATING_UNITS = "points"  # [stopping] units of ratings


@dataclass(frozen=True, kw_only=True)
class RatingSpec(StudyParams, EntryParams, TextsParams, StoppingParams, MTurkParams, PagesParams, QualityParams,
                 DisplayParams, MediaParams, ViewingParams, DisplayMonitorParams,
                QuestionnaireParams):
    """Every parameter of a rating study, declared once (:mod:`server.paradigms.params`), validated;
    stored as ``Study.config`` (with ``kind = "rating"``)."""
    SECTION_DOCS: ClassVar[dict[str, str]] = {
        "rating": "What is rated and on which scale (ITU-T P.910 / P.808).",
        "quality": "Quality checks: a training quiz, hidden references and strongly degraded images with a known "
                   "answer range, and straight-lining (server/paradigms/rating/quality.py).",
        "display": "The images are shown side by side (DCR, CCR) or alone (ACR); `study create` prints the "
                   "smallest inner window (CSS pixels) the study needs."}
    kind: str = param(KIND, section="study", choices=(KIND,), doc="the paradigm: ratings")
    manifests: tuple[str, ...] = param(
        section="study", required=True, example=("prepared/manifest.json",),
        doc="from `perceptlab stimuli prepare`, relative to this file; the same folder may serve a "
            "paired-comparison study")
    method: str = param("dcr", section="rating", choices=METHODS,
                        doc='"acr": one image, Excellent..Bad; "dcr": reference then test, Imperceptible..Very '
                            'annoying; "ccr": two images, the reference\'s side drawn at random per trial, Much '
                            "worse..Much better (stored: positive = the test is better)")
    slider: bool = param(False, section="rating", doc="true: a continuous slider over the same scale (labels at "
                                                      "the ticks)")
    stimulus: str = param("amplified", section="rating", choices=STIMULI,
                          doc='candidate images shown: "amplified" (artefacts amplified) or "original"; video clips are '
                              'shown as delivered (never amplified)')
    ratings_per_stimulus: int = param(24, section="rating", low=1,
                                      doc="ratings each candidate gets (P.808: at least 24 per condition)")
    question: str = param("", section="rating", doc='the question above the scale; "" = the method\'s own')
    ratings_per_page: int = param(20, section="pages", low=2, doc="ratings per page, paid per page")
    reward_per_page: str = redeclare(
        PagesParams, "reward_per_page", "0.90",
        doc="the HIT: 1 page of 20 DCR ratings (~3 min) + consent, instructions, training")
    bonus_per_page: str = redeclare(PagesParams, "bonus_per_page", "0.60",
                                    doc="paid for every page after min_pages; both ~$12/h at the documented pace")
    quiz_size: int = redeclare(QualityParams, "quiz_size", 4,
                               doc="training trials with a known answer range; failing them disqualifies for good")
    gold_per_scene: int = param(2, section="quality", low=1, high=20,
                                doc="strongly degraded images made per scene (besides its hidden reference)")
    straight_line_pages: int = param(1, section="quality", low=0,
                                     doc="pages of identical answers (at least 5) that stop a worker; 0 = never")
    consent: str = param(DEFAULT_CONSENT, section="texts", placeholder=TEXT_PLACEHOLDER,
                         doc="plain text shown before the task; {researcher}, {contact}, {pay}, {time} and "
                             '{medium} ("image" or "video") are filled in')
    instructions: str = param("", section="texts", placeholder=TEXT_PLACEHOLDER,
                              fallback=lambda values, path: default_instructions(
                                  values["method"], values["stimulus"], values["quiz_size"] > 0),
                              doc="shown before the training (default: the method's own)")
    # Redefined from StoppingParams (its place in the file stays there): a MOS half-width has one unit.
    units: str = param(RATING_UNITS, section="stopping", choices=(RATING_UNITS,),
                       doc='the unit of halfwidth: "points" of the rating scale (a MOS half-width), the only unit '
                           "of ratings")
    base_dir: str = field(default=".", compare=False)

    @property
    def gold_per_page(self) -> int:
        """Hidden quality checks per page: the rate rounded, at least one when the rate is positive."""
        if self.gold_rate <= 0:
            return 0
        return max(1, int(round(self.gold_rate * self.ratings_per_page)))

    @property
    def has_checks(self) -> bool:
        """Whether the study shows quality checks (a quiz or hidden ones), whose files creation writes."""
        return self.quiz_size > 0 or self.gold_per_page > 0

    def validate(self, fail) -> None:
        """Rules between parameters."""
        if self.gold_per_page >= self.ratings_per_page:
            fail("quality.gold_rate leaves no real ratings on a page")
        if len(self.question) > 300:
            fail("rating.question must be at most 300 characters")
        if any(not m for m in self.manifests):
            fail("study.manifests must be a list of paths (non-empty strings)")
        if (self.halfwidth > 0 or self.resolve) and self.ratings_per_stimulus < self.min_workers:
            fail(f"rating.ratings_per_stimulus ({self.ratings_per_stimulus}) is below stopping.min_workers "
                 f"({self.min_workers}): no stimulus could ever meet the [stopping] target")


STUDY_TEMPLATE = study_template(RatingSpec, header="perceptlab rating study: `perceptlab study create study.toml`",
                                mturk=MTURK_TEXTS)


def demo_study_file(manifests: str, seed: int, texts: str) -> str:
    """The study file of the demo's DCR study over ``manifests`` (``perceptlab demo``): pages of 10 ratings,
    a training of 4; about 2 minutes a page at the documented pace, plus consent and training: $0.60 a page
    is $14.40 an hour, above the default wage floor."""
    return (f'[study]\nkind = "rating"\nslug = "demo-dcr"\nname = "Demo: how impaired is each interpolated frame?"\n'
            f'manifests = ["{manifests}"]\nseed = {seed}\n\n'
            '[rating]\nmethod = "dcr"\nratings_per_stimulus = 10\n\n'
            '[pages]\nratings_per_page = 10\nmin_pages = 1\nmax_pages = 5\nreward_per_page = "0.60"\n'
            'bonus_per_page = "0.40"\n\n'
            "[quality]\nquiz_size = 4\ngold_rate = 0.1\ngold_min_answered = 2\n\n" + texts)


def spec_from_toml(data: dict[str, Any], path: Path) -> RatingSpec:
    """The :class:`RatingSpec` of a parsed study file read from ``path``; raise
    :class:`StudyDefinitionError` naming the file and the problem."""
    return parse_spec(RatingSpec, data, path)


# ---------------------------------------------------------------- the window

def images_shown(method: str) -> int:
    """Images side by side in a trial: one for ACR, two for DCR and CCR."""
    return 1 if method == "acr" else 2


def window_for(spec, sizes, media: dict | None = None) -> WindowRequirement:
    """The smallest inner window (CSS px) that shows every scene's images of ``sizes`` (``(width, height)``)
    side by side at the study's smallest scale (``fit``) or 1:1 at devicePixelRatio 1 (``pixel_exact``),
    with the scale's row below them (stacked when the study accepts narrow windows: :func:`rating_chrome`):
    rating_trial.js's ``ratingWindowNeeded`` of the same numbers."""
    factor = spec.min_image_scale if spec.policy == "fit" else 1.0
    n = images_shown(spec.method)
    c = rating_chrome(spec.min_window_width)
    width, height = spec.min_window_width, spec.min_window_height
    width = max(width, c["scale_width"] + 2 * c["pad"] + c["margin"])
    for w, h in sizes:
        width = max(width, math.ceil(round(n * w * factor, 6)) + 2 * c["pad"] + (n - 1) * c["gap"] + c["margin"])
        height = max(height, math.ceil(round(h * factor, 6)) + c["bar"] + c["pad"] + (c["label"] if n > 1 else 0)
                     + c["scale"] + c["pad"] + c["margin"])
    floor = (spec.min_window_width, spec.min_window_height)
    return WindowRequirement(min_window=(width, height), policy=spec.policy, min_image_scale=spec.min_image_scale,
                             floor=floor, decode=decode_types(media or {}), min_mbps=needed_mbps(media or {}, spec),
                             needs_card=spec.needs_card())


def window_requirement(spec: RatingSpec) -> WindowRequirement:
    """:func:`window_for` the scenes of the spec's manifests (before the study exists)."""
    scenes = scene_manifests(spec)
    media = study_media(scenes, common_root([folder.resolve() for folder, _ in scenes]))
    return window_for(spec, [(m["image_size"]["width"], m["image_size"]["height"]) for _, m in scenes], media)


# ---------------------------------------------------------------- manifests -> rows

def scene_manifests(spec: RatingSpec) -> list[tuple[Path, dict]]:
    """``(scene folder, scene manifest)`` for every scene the spec's manifests name (a study manifest
    names several, a scene manifest one); a clear :class:`StudyDefinitionError` for anything else."""
    scenes: list[tuple[Path, dict]] = []
    for name in spec.manifests:
        path = Path(spec.base_dir) / name
        manifest = load_manifest_json(path)
        if manifest.get("kind") == "study":
            for entry in manifest.get("scenes", []):
                if not isinstance(entry, dict) or not isinstance(entry.get("manifest"), str):
                    raise StudyDefinitionError(f"{path}: a scene entry names no manifest")
                scene_path = path.parent / entry["manifest"]
                scenes.append((scene_path.parent, _checked_scene(scene_path, load_manifest_json(scene_path))))
        elif manifest.get("kind") == "scene":
            scenes.append((path.parent, _checked_scene(path, manifest)))
        else:
            raise StudyDefinitionError(f"{path}: not a manifest written by `perceptlab stimuli prepare`")
    ids = [m["scene_id"] for _, m in scenes]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise StudyDefinitionError(f"scene IDs appear twice across the manifests: {', '.join(duplicates)}")
    if not scenes:
        raise StudyDefinitionError("the manifests name no scenes")
    return scenes


def _checked_scene(path: Path, manifest: dict) -> dict:
    """The scene manifest, once it has what a rating study reads of it."""
    try:
        ok = (isinstance(manifest["scene_id"], str) and isinstance(manifest["reference"]["path"], str)
              and int(manifest["image_size"]["width"]) > 0 and int(manifest["image_size"]["height"]) > 0
              and all(isinstance(c["id"], str) and all(isinstance(c[k], str) for k in _shown_keys(manifest))
                      for c in manifest["candidates"]))
    except (KeyError, TypeError, ValueError):
        ok = False
    if not ok or not manifest["candidates"]:
        raise StudyDefinitionError(f"{path}: not a scene manifest of `perceptlab stimuli prepare` (scene_id, "
                                   "image_size, reference and candidates with original and amplified images)")
    reserved = [c["id"] for c in manifest["candidates"] if c["id"].startswith("__") and c["id"].endswith("__")]
    if reserved:  # "__reference__", "__gold_low_<k>__": the IDs of the scene's quality checks
        raise StudyDefinitionError(f"{path}: candidate {reserved[0]!r}: IDs that begin and end with '__' are kept "
                                   "for the quality checks; rename the file")
    return manifest


def _shown_keys(manifest: dict) -> tuple[str, ...]:
    """The files a candidate of the scene must name: video scenes are delivered as they are (no amplified copy)."""
    return ("original",) if is_video_scene(manifest) else STIMULI


def is_video_scene(manifest: dict) -> bool:
    """Whether a prepared scene's manifest describes video clips (stimuli/video.py writes ``media``)."""
    return (manifest.get("media") or {}).get("kind") == VIDEO


def stimulus_root(spec: RatingSpec) -> Path:
    """The folder every stored stimulus path is relative to: the common parent of the scenes."""
    return common_root([folder.resolve() for folder, _ in scene_manifests(spec)])


def create_study(session: Session, spec: RatingSpec) -> Study:
    """Store a rating study with its stimuli (and write its quality checks' images); the caller commits.

    Every image the study shows must exist: a missing file is an error now, not a broken image in a
    worker's browser later.
    """
    if session.scalar(select(func.count()).select_from(Study).where(Study.slug == spec.slug)):
        raise StudyDefinitionError(f"a study with slug {spec.slug!r} exists already")
    scenes = scene_manifests(spec)
    check_resolve_items(spec.resolve, [{c["id"] for c in m["candidates"]} for _, m in scenes])
    root = common_root([folder.resolve() for folder, _ in scenes])
    config = {**spec.to_config(), SALT_KEY: new_salt()}  # the key of the study's opaque stimulus names
    study = Study(slug=spec.slug, name=spec.name, seed=spec.seed, config=config, stimulus_root=str(root))
    session.add(study)
    session.flush()
    rows = []
    for folder, manifest in scenes:
        rows.extend(scene_stimuli(study.id, spec, root, folder.resolve(), manifest))
    # What the study shows (server/paradigms/media.py): for videos each clip's duration, rate, size and codec,
    # the check clips written above included.
    checks = {row.path: root / row.path for row in rows if row.role != TEST}
    study.config = {**config, "media": study_media([(f.resolve(), m) for f, m in scenes], root, checks)}
    session.add_all(rows)
    session.flush()
    return study


def scene_stimuli(study_id: int, spec: RatingSpec, root: Path, folder: Path, manifest: dict) -> list[RatingStimulus]:
    """The rating stimuli of one scene: every candidate, and with quality checks its hidden reference and
    ``gold_per_scene`` strongly degraded images. With checks, every image is one :func:`write_scene_images`
    wrote (candidates and references too), each stimulus with a reference copy of its own."""
    def rel(path: Path) -> str:
        if not path.is_file():
            raise StudyDefinitionError(f"{path}: listed in {folder / 'manifest.json'} but missing")
        return path.relative_to(root).as_posix()

    scene = manifest["scene_id"]
    width, height = int(manifest["image_size"]["width"]), int(manifest["image_size"]["height"])
    reference = rel(folder / manifest["reference"]["path"])

    def stimulus(item_id: str, role: str, path: str, reference_path: str = reference) -> RatingStimulus:
        real = role == TEST
        return RatingStimulus(study_id=study_id, scene=scene, item_id=item_id, role=role, path=path,
                              reference_path=reference_path, width=width, height=height,
                              target_ratings=spec.ratings_per_stimulus if real else 0, is_gold=not real)

    video = is_video_scene(manifest)
    shown_key = "original" if video else spec.stimulus
    shown = {c["id"]: rel(folder / c[shown_key]) for c in manifest["candidates"]}
    if not spec.has_checks:  # nothing to hide: the prepared files, as they are
        return [stimulus(item, TEST, path) for item, path in shown.items()]
    if video:  # check clips come out of the video encoder path (stimuli/video.py), sized like candidates
        hidden, degraded = write_check_clips(folder, manifest, folder / CHECK_FOLDER, seed=spec.seed,
                                             n_degraded=spec.gold_per_scene)
        rows = [stimulus(item, TEST, path) for item, path in shown.items()]
        rows.append(stimulus(REFERENCE_ITEM, HIDDEN_REFERENCE, rel(hidden)))
        rows.extend(stimulus(gold_low_item(k), GOLD_LOW, rel(path)) for k, path in enumerate(degraded, start=1))
        return rows
    images = write_scene_images(spec, folder, manifest)
    references = {item: rel(path) for item, path in images.references.items()} if images.references else {}
    rows = [stimulus(item, TEST, rel(images.candidates[item]), references.get(item, reference)) for item in shown]
    rows.append(stimulus(REFERENCE_ITEM, HIDDEN_REFERENCE, rel(images.hidden),
                         references.get(REFERENCE_ITEM, reference)))
    rows.extend(stimulus(gold_low_item(k), GOLD_LOW, rel(path), references.get(gold_low_item(k), reference))
                for k, path in enumerate(images.degraded, start=1))
    return rows


def content_name(stem: str, data: bytes) -> str:
    """``<stem>-<16 hex digits of data's SHA-256>.png``: a written image's file name, fixed by its bytes."""
    return f"{stem}-{hashlib.sha256(data).hexdigest()[:16]}.png"


@dataclass(frozen=True)
class SceneImages:
    """The files :func:`write_scene_images` wrote for one scene.

    Attributes
    ----------
    candidates : dict
        candidate ID -> its image as shown, re-encoded and padded.
    hidden : Path
        The hidden reference (the reference with imperceptible noise).
    degraded : list of Path
        The strongly degraded images, ``gold_low_1``, ``gold_low_2``, ...
    references : dict
        item ID (every candidate, ``__reference__``, ``__gold_low_<k>__``) -> the reference copy its trials
        show (DCR and CCR; empty for ACR, which never shows the reference).
    """

    candidates: dict[str, Path]
    hidden: Path
    degraded: list[Path]
    references: dict[str, Path]

    @property
    def checks(self) -> list[Path]:
        """The quality checks' files: the hidden reference, then the degraded images."""
        return [self.hidden, *self.degraded]


def write_scene_images(spec: RatingSpec, folder: Path, manifest: dict) -> SceneImages:
    """Write every image a rating study with quality checks shows of one scene; return their paths.
    Deterministic in the study's seed and the scene's files.

    One encoder path for every image, real or check (issue 38): decoded, encoded by
    :func:`stimuli.io.encode_png`, recompressed by :func:`stimuli.check_images.recompress_png` and padded to a
    size drawn for each file independently from one distribution per scene
    (:func:`stimuli.check_images.common_sizes`).
    So neither the size, nor re-encoding the pixels, nor the stream's block structure tells a check from a
    candidate: every file ends in the same padding, none re-encodes to its own stream.

    * Candidates: their prepared image as shown (``[rating] stimulus``), same pixels.
    * Hidden reference: the reference with one code value of seeded noise per pixel and channel
      (:func:`stimuli.check_images.imperceptible_copy`): not a pixel-identical copy.
    * Strongly degraded images: :func:`stimuli.check_images.blurred_degradations`, amplified like the
      candidates when the study shows amplified images.
    * DCR and CCR: one reference copy per stimulus (same pixels, its own padding, so its own bytes and
      URL). A worker meets each stimulus once, so no reference URL comes back within a scene: in CCR the
      repeated URL no longer marks the reference's side.
    """
    from stimuli.amplify import amplify_with_alpha
    from stimuli.check_images import blurred_degradations, common_sizes, imperceptible_copy, recompress_png
    from stimuli.io import StimulusInputError, encode_png, read_image, write_bytes_atomic

    scene = manifest["scene_id"]
    parameters = manifest.get("parameters") or {}
    compression = int(parameters.get("compression", 3))
    # The study's seed and the scene: the same study file writes the same bytes.
    rng = np.random.default_rng([spec.seed, *scene.encode("utf-8")])
    try:
        reference = read_image(folder / manifest["reference"]["path"])
        candidates = {c["id"]: read_image(folder / c["original"]) for c in manifest["candidates"]}
        shown = {c["id"]: read_image(folder / c[spec.stimulus]) for c in manifest["candidates"]}
        degraded_images = blurred_degradations(reference, candidates, spec.gold_per_scene, margin=GOLD_MARGIN)
        hidden_image = imperceptible_copy(reference, rng)
    except ValueError as exc:
        raise StudyDefinitionError(f"scene {scene!r}: no strongly degraded image can be made ({exc}); set "
                                   "[quality] quiz_size = 0 and gold_rate = 0 for a study without checks") from None
    except (StimulusInputError, OSError) as exc:
        raise StudyDefinitionError(f"scene {scene!r}: {exc}") from None
    if spec.stimulus == "amplified":
        alpha = float(parameters.get("alpha", 1.5))
        degraded_images = [amplify_with_alpha(reference, image, alpha)[0] for image in degraded_images]
    items = [*shown, REFERENCE_ITEM, *(gold_low_item(k) for k in range(1, len(degraded_images) + 1))]
    with_reference = images_shown(spec.method) == 2
    encoded = ([encode_png(image, compression) for image in shown.values()] + [encode_png(hidden_image, compression)]
               + [encode_png(image, compression) for image in degraded_images])
    if with_reference:
        reference_png = encode_png(reference, compression)
        encoded += [reference_png] * len(items)
    # Each distinct file recompressed once (zlib level 9, the costly step): the reference's copies are one.
    recompressed = {data: recompress_png(data) for data in encoded}
    sizes = common_sizes([recompressed[data].unpadded_size for data in encoded], rng)
    files: list[bytes] = []
    for data, size in zip(encoded, sizes):
        padded = recompressed[data].padded(int(size))
        while padded in files:  # the reference's copies: each its own bytes (one padding block more)
            size += 5
            padded = recompressed[data].padded(int(size))
        files.append(padded)
    target = folder / CHECK_FOLDER
    # Named by their content: another study over this folder (another seed, another instance) writes files of
    # its own beside these, or the very same bytes, never new bytes under a name a study already serves.
    n_shown, n_checks = len(shown), 1 + len(degraded_images)
    paths = ([target / spec.stimulus / content_name("test", data) for data in files[:n_shown]]
             + [target / content_name("hidden_reference", files[n_shown])]
             + [target / spec.stimulus / content_name(f"gold_low_{k}", data)
                for k, data in enumerate(files[n_shown + 1:n_shown + n_checks], start=1)]
             + [target / content_name("reference", data) for data in files[n_shown + n_checks:]])
    try:
        (target / spec.stimulus).mkdir(parents=True, exist_ok=True)
        for path, data in zip(paths, files):
            if not (path.is_file() and path.read_bytes() == data):  # present: kept as it is, byte for byte
                write_bytes_atomic(path, data)
    except OSError as exc:
        raise StudyDefinitionError(f"{target}: cannot write the rating study's images ({exc.strerror}); the "
                                   "stimulus folder must be writable when the study is created") from None
    return SceneImages(candidates=dict(zip(shown, paths[:n_shown])), hidden=paths[n_shown],
                       degraded=paths[n_shown + 1:n_shown + n_checks],
                       references=dict(zip(items, paths[n_shown + n_checks:])) if with_reference else {})
