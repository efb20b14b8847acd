"""Paired-comparison study definitions: ``study.toml`` -> a Study with its sets, stimuli and pairs.

``STUDY_TEMPLATE`` (``perceptlab study template``) documents every key. Only ``study.manifests``
is required; a paired-comparison file names no ``[study] kind`` (or ``kind = "pc"``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ...models import Study
from ...stimulus_index import SALT_KEY, new_salt
from ..display import POLICIES, WindowRequirement, manifest_sets, pc_requirement
from ..studyfile import (ENTRY_SECTION, ENTRY_TEMPLATE, StoredSpec, StudyDefinitionError, common_root,
                        is_dollar_amount, read_sections, slugify, validate_entry, validate_slug)
from .models import Pair, Stimulus, StudySet

KIND = "pc"
SAMPLINGS = ("regular", "active")  # [design] sampling


def gold_item_ids(k: int) -> tuple[str, str]:
    """Item IDs of a set's gold pair ``k`` (1, 2, ...): its better and worse image (see stimuli.gold).

    They appear in exports only (``item_a``/``item_b``/``gold_winner``); workers see opaque URLs.
    """
    return f"__gold_better_{k}__", f"__gold_worse_{k}__"


DEFAULT_CONSENT = """\
This task is part of a research study on how people perceive image quality, run by {researcher}. \
You will compare images and click the one that looks closer to a reference image. It takes {time}. \
It pays {pay}.

Participation is voluntary: you may stop at any time by returning the task. We record your \
choices, response times, window size and your platform worker ID. Worker IDs are replaced by \
pseudonyms in every exported data set and are never published.

Some comparisons have a known answer; workers who answer too many of them wrongly are stopped.

Questions about the study: {contact}."""

_INSTRUCTIONS_TRIAL = """\
In every trial you see three images. The middle one is the reference (the ground truth). \
Click the image on the LEFT or on the RIGHT that looks more like the reference, or press the \
left or right arrow key. There is no time limit, but please decide at your natural pace."""
_INSTRUCTIONS_CROPS = """\
Keys 2, 3, ... show enlarged crops of the regions where the images differ most (outlined in the \
example image); key 1 the whole images. Look there first."""
_INSTRUCTIONS_AMPLIFIED = "The differences have been amplified so they are easier to see."
_INSTRUCTIONS_QUIZ = "First comes a short quiz with obvious differences: you must pass it to continue."


def default_instructions(stimulus: str = "amplified", crops: bool = True) -> str:
    """The instructions a study shows unless its file gives its own: they say that the differences were
    amplified only when the study shows amplified images (``[design] stimulus``), and mention the zoom
    crops only when its stimuli have any (prepared with ``--top-k 0``, or no crop worth showing: none)."""
    middle = " ".join(part for part, wanted in ((_INSTRUCTIONS_CROPS, crops),
                                                 (_INSTRUCTIONS_AMPLIFIED, stimulus == "amplified")) if wanted)
    return "\n\n".join(part for part in (_INSTRUCTIONS_TRIAL, middle, _INSTRUCTIONS_QUIZ) if part)


DEFAULT_INSTRUCTIONS = default_instructions()


STUDY_TEMPLATE = '''\
# perceptlab study definition: `perceptlab study create study.toml`
[study]
slug = "interp-2026"              # URL-safe name used in worker links
name = "Frame interpolation quality"
manifests = ["prepared/manifest.json"]  # from `perceptlab stimuli prepare`, relative to this file
seed = 0

[design]
degree = 0            # 0 = the design stored in each manifest; >0 = draw a new random regular design
votes_per_pair = 20   # StudyMB 2.0: 20; StudyMB 1.0: 30
stimulus = "amplified"   # candidate images shown: "amplified" (artefacts amplified) or "original"
sampling = "regular"  # "regular": each pair of the design above gets votes_per_pair votes;
                      # "active": every pair of a set is a candidate, and the study spends the same
                      # budget (votes_per_pair x the design's pairs, per set; no pair gets more than
                      # votes_per_pair) on the pairs whose next vote teaches the most (analysis.active)
warmup_votes_per_pair = 1  # active only: each pair of the design gets this many votes first (a random
                           # connected warm-up); then the set's pages carry pairs chosen from its votes

[pages]
pairs_per_page = 20   # StudyMB 1.0: 20 pairs per page, paid per page
min_pages = 1         # pages a worker must complete before submitting
max_pages = 10        # cap on pages (and so on trials) per worker
reward_per_page = "1.50"  # the HIT: 1 page of 20 comparisons (~5 min) + consent, instructions, quiz (~2 min)
bonus_per_page = "1.00"   # paid for every page after min_pages (~5 min each); both are ~$12/h at the
                          # documented pace, the default [server] wage_floor_usd_per_hour

[quality]
quiz_size = 5             # gold pairs in the quiz; failing it disqualifies for good
gold_rate = 0.1           # share of each page's trials that are hidden gold pairs
accuracy_threshold = 0.7  # quiz and hidden gold (StudyMB 1.0: more than 30% wrong stops a worker)
gold_min_answered = 3     # hidden gold answers needed before the threshold is applied
assignment_timeout_minutes = 60  # a page only polled (never answered) is held at most this long
reservation_minutes = 5   # an open page holds its pairs this long after the worker's last vote or
                          # page load; then its unanswered pairs are offered to other workers too

[display]
# The trial page shows one view at a time, LEFT | REFERENCE | RIGHT: the whole images, or one zoom
# region (keys 1, 2, ... switch at once). `study create` prints the smallest inner window (CSS pixels)
# the study needs and refuses one above 1366 x 657 (a 1366x768 laptop) unless --allow-large-window;
# the HIT preview, consent and entry pages state it and turn away phones and smaller windows before consent.
policy = "fit"           # "fit": scaled to the window, never above the prepared display size (scale 1)
                         # nor below min_image_scale; "pixel_exact": one image pixel on one device pixel
                         # (devicePixelRatio applied), zoom regions too (1:1), nothing ever rescaled
min_image_scale = 0.5    # fit: smaller than this, the trial is hidden and the worker asked for a larger window
min_window_width = 1000  # smallest window inside (CSS pixels) whatever the images need: keeps phones out;
min_window_height = 600  # 1366x768 and 1280x720 laptop screens give about 1366x657 and 1280x600

''' + ENTRY_TEMPLATE + '''
[texts]
researcher = ""             # REQUIRED by the default consent: who runs the study ("Dr A. Lee, Univ. of X")
contact = ""                # REQUIRED by the default consent: whom workers may ask ("a.lee@x.edu")
# consent = """..."""       # plain text shown before the task; blank lines separate paragraphs; {researcher}
                            # and {contact} become the values above, {pay} the pay rules of [pages] ("$1.50
                            # for 1 page, and a bonus of ..."), {time} the time estimate ("about 5 minutes
                            # per page of 20 comparisons, ..."); `study create` refuses empty ones
# instructions = """..."""  # shown before the quiz, beside the overview image

# [mturk]                  # optional: HIT settings for `perceptlab mturk launch` (defaults shown)
# title = "Compare the quality of images"
# reward comes from [pages]; description, keywords, assignment_duration_minutes = 120,
# auto_approval_days = 3, min_approval_rate = 98, min_approved_hits = 1000, locales = ["US"],
# masters = false, took_part_scope = "lab" (or "study")
'''


@dataclass(frozen=True)
class StudySpec(StoredSpec):
    """Every parameter of a study, validated; stored as ``Study.config``."""
    _TUPLE_FIELD = "manifests"
    slug: str
    name: str
    manifests: tuple[str, ...]
    seed: int = 0
    degree: int = 0
    votes_per_pair: int = 20
    stimulus: str = "amplified"
    sampling: str = "regular"       # regular | active (server/paradigms/paired/active.py)
    warmup_votes_per_pair: int = 1  # active: votes of each design pair before the selector takes over
    pairs_per_page: int = 20
    min_pages: int = 1
    max_pages: int = 10
    reward_per_page: str = "1.50"
    bonus_per_page: str = "1.00"
    quiz_size: int = 5
    gold_rate: float = 0.1
    accuracy_threshold: float = 0.7
    gold_min_answered: int = 3
    assignment_timeout_minutes: int = 60
    reservation_minutes: int = 5
    min_window_width: int = 1000
    min_window_height: int = 600
    min_image_scale: float = 0.5  # smallest scale the trial page may show images and crops at (1 = display size)
    policy: str = "fit"             # [display] policy: fit | pixel_exact (server/paradigms/display.py)
    consent: str = DEFAULT_CONSENT
    instructions: str = DEFAULT_INSTRUCTIONS
    researcher: str = ""            # the consent's {researcher} and {contact} (server/paradigms/consent.py)
    contact: str = ""
    mturk: dict[str, Any] = field(default_factory=dict)  # the [mturk] table, over studyfile.MTURK_DEFAULTS
    allow_anonymous: bool = False
    signed_links: bool = False
    access_key: str = ""
    external_hits: bool = False    # admit MTurk entries while the study has no HIT posted by perceptlab
    entry_limit: int = -1           # per address and window; -1 = [server] entry_limit, 0 = none
    recruiter: str = "link"         # link | prolific | redirect (server/paradigms/recruiters.py)
    completion_code: str = ""       # "" = one random code per participant
    redirect_url: str = ""          # recruiter "redirect": https://... with {code} and {participant}
    base_dir: str = field(default=".", compare=False)


    @property
    def gold_per_page(self) -> int:
        """Hidden gold trials per page: the rate rounded, at least one when the rate is positive."""
        if self.gold_rate <= 0:
            return 0
        return max(1, int(round(self.gold_rate * self.pairs_per_page)))


SECTIONS: dict[str, dict[str, type]] = {
    "study": {"slug": str, "name": str, "manifests": list, "seed": int},
    "design": {"degree": int, "votes_per_pair": int, "stimulus": str, "sampling": str, "warmup_votes_per_pair": int},
    "pages": {"pairs_per_page": int, "min_pages": int, "max_pages": int, "reward_per_page": str,
              "bonus_per_page": str},
    "quality": {"quiz_size": int, "gold_rate": float, "accuracy_threshold": float, "gold_min_answered": int,
                "assignment_timeout_minutes": int, "reservation_minutes": int},
    "display": {"policy": str, "min_window_width": int, "min_window_height": int, "min_image_scale": float},
    "texts": {"consent": str, "instructions": str, "researcher": str, "contact": str},
    "entry": ENTRY_SECTION,  # the same [entry] table in every kind of study
}


def spec_from_toml(data: dict[str, Any], path: Path) -> StudySpec:
    """The :class:`StudySpec` of a parsed study file read from ``path`` (for messages and relative paths);
    raise :class:`StudyDefinitionError` naming the problem."""
    if isinstance(data.get("study"), dict) and data["study"].get("kind") == KIND:
        # The registry chose this paradigm by the kind; the spec does not store the default kind.
        data = {**data, "study": {k: v for k, v in data["study"].items() if k != "kind"}}
    values = read_sections(data, SECTIONS, path)
    if not all(isinstance(m, str) and m for m in values.get("manifests", [])):
        raise StudyDefinitionError(f"{path}: study.manifests must be a list of paths (strings)")
    if "manifests" not in values or not values["manifests"]:
        raise StudyDefinitionError(f"{path}: study.manifests is required (paths from `perceptlab stimuli prepare`)")
    values.setdefault("slug", slugify(path.stem))
    values.setdefault("name", values["slug"])
    values.setdefault("instructions", default_instructions(values.get("stimulus", "amplified")))
    spec = StudySpec(**{**values, "manifests": tuple(values["manifests"])}, base_dir=str(path.parent.resolve()))
    validate_spec(spec, str(path))
    return spec


def validate_spec(spec: StudySpec, where: str = "study") -> None:
    """Raise :class:`StudyDefinitionError` (prefixed with ``where``) for an impossible parameter."""
    def fail(message: str) -> None:
        raise StudyDefinitionError(f"{where}: {message}")

    validate_slug(spec, fail)
    if spec.stimulus not in ("amplified", "original"):
        fail(f"design.stimulus must be 'amplified' or 'original', got {spec.stimulus!r}")
    if spec.sampling not in SAMPLINGS:
        fail(f"design.sampling must be 'regular' or 'active', got {spec.sampling!r}")
    if not 0 <= spec.warmup_votes_per_pair <= spec.votes_per_pair:
        fail(f"design.warmup_votes_per_pair must be in [0, votes_per_pair = {spec.votes_per_pair}], "
             f"got {spec.warmup_votes_per_pair}")
    for key in ("votes_per_pair", "pairs_per_page", "min_pages", "max_pages", "assignment_timeout_minutes",
                "reservation_minutes", "min_window_width", "min_window_height"):
        if getattr(spec, key) < 1:
            fail(f"{key} must be at least 1")
    for key in ("degree", "quiz_size", "gold_min_answered", "seed"):
        if getattr(spec, key) < 0:
            fail(f"{key} must not be negative")
    if spec.max_pages < spec.min_pages:
        fail(f"max_pages ({spec.max_pages}) is below min_pages ({spec.min_pages})")
    validate_entry(spec, fail)
    if not 0 <= spec.gold_rate < 1:
        fail(f"gold_rate must be in [0, 1), got {spec.gold_rate}")
    if spec.policy not in POLICIES:
        fail(f"display.policy must be 'fit' or 'pixel_exact', got {spec.policy!r}")
    if not 0 < spec.min_image_scale <= 1:
        fail(f"display.min_image_scale must be in (0, 1], got {spec.min_image_scale}")
    if not 0 < spec.accuracy_threshold <= 1:
        fail(f"accuracy_threshold must be in (0, 1], got {spec.accuracy_threshold}")
    if spec.gold_per_page >= spec.pairs_per_page:
        fail("gold_rate leaves no real pairs on a page")
    for key in ("reward_per_page", "bonus_per_page"):
        if not is_dollar_amount(getattr(spec, key)):
            fail(f"{key} must be a dollar amount like \"0.50\", got {getattr(spec, key)!r}")


def window_requirement(spec: StudySpec, sets=None) -> WindowRequirement:
    """The smallest inner window the study's trial pages need (:mod:`server.paradigms.display`).

    ``sets``: ``(width, height, crop boxes)`` of each set; by default read from the spec's manifests
    (before the study exists: ``study create``, ``launch``).
    """
    names = None
    if sets is None:
        manifests = [manifest for _, manifest in _scene_manifests(spec)]
        sets, names = manifest_sets(manifests), [manifest["scene_id"] for manifest in manifests]
    return pc_requirement(spec.policy, spec.min_image_scale, (spec.min_window_width, spec.min_window_height), sets,
                          names)


# ---------------------------------------------------------------- manifests -> rows

def _scene_manifests(spec: StudySpec) -> list[tuple[Path, dict]]:
    """``(scene folder, scene manifest)`` for every scene the study's manifests name."""
    scenes: list[tuple[Path, dict]] = []
    for name in spec.manifests:
        path = Path(spec.base_dir) / name
        manifest = _load_json(path)
        if manifest.get("kind") == "study":
            for entry in manifest.get("scenes", []):
                scene_path = path.parent / entry["manifest"]
                scenes.append((scene_path.parent, _load_json(scene_path)))
        elif manifest.get("kind") == "scene":
            scenes.append((path.parent, manifest))
        else:
            raise StudyDefinitionError(f"{path}: not a manifest written by `perceptlab stimuli prepare`")
    ids = [m["scene_id"] for _, m in scenes]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise StudyDefinitionError(f"scene IDs appear twice across the manifests: {', '.join(duplicates)}")
    if not scenes:
        raise StudyDefinitionError("the manifests name no scenes")
    return scenes


def _load_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise StudyDefinitionError(f"{path}: no such manifest") from None
    except json.JSONDecodeError as exc:
        raise StudyDefinitionError(f"{path}: not valid JSON ({exc})") from None


def stimulus_root(spec: StudySpec) -> Path:
    """The folder every stored stimulus path is relative to: the common parent of the scenes."""
    return common_root([folder.resolve() for folder, _ in _scene_manifests(spec)])


def create_study(session: Session, spec: StudySpec) -> Study:
    """Store a study with its sets, stimuli and pairs; the caller commits.

    Every image the study will show must exist: a missing file is an error now,
    not a broken image in a worker's browser later.
    """
    if session.scalar(select(func.count()).select_from(Study).where(Study.slug == spec.slug)):
        raise StudyDefinitionError(f"a study with slug {spec.slug!r} exists already")
    scenes = _scene_manifests(spec)
    if (spec.quiz_size > 0 or spec.gold_per_page > 0) and not any(_gold_entries(f, m) for f, m in scenes):
        raise StudyDefinitionError("the stimuli have no gold pairs (prepared with --gold-pairs 0): "
                                   "set [quality] quiz_size = 0 and gold_rate = 0")
    root = stimulus_root(spec)
    config = {**spec.to_config(), SALT_KEY: new_salt()}  # the key of the study's opaque stimulus names
    study = Study(slug=spec.slug, name=spec.name, seed=spec.seed, config=config, stimulus_root=str(root))
    session.add(study)
    rng = np.random.default_rng(spec.seed)
    for folder, manifest in scenes:
        _add_scene(session, study, spec, root, folder.resolve(), manifest, rng)
    session.flush()
    return study


def _add_scene(session: Session, study: Study, spec: StudySpec, root: Path, folder: Path, manifest: dict,
               rng: np.random.Generator) -> None:
    def rel(path: str) -> str:
        full = folder / path
        if not full.is_file():
            raise StudyDefinitionError(f"{full}: listed in {folder / 'manifest.json'} but missing")
        return full.relative_to(root).as_posix()

    scene_id = manifest["scene_id"]
    study_set = StudySet(study=study, name=scene_id,
                         reference={"full": rel(manifest["reference"]["path"]),
                                    "crops": [rel(p) for p in manifest["reference"]["crops"]]},
                         overview=rel(manifest["overview"]) if manifest.get("overview") else None,
                         crops={"boxes": manifest.get("crops", [])},
                         image_width=manifest["image_size"]["width"], image_height=manifest["image_size"]["height"])
    session.add(study_set)
    session.flush()
    def make_stimulus(item_id: str, kind: str, entry: dict) -> Stimulus:
        """A candidate or gold image as the study shows it (``spec.stimulus``: amplified or original)."""
        crops = [rel(c[spec.stimulus]) for c in sorted(entry["crops"], key=lambda c: c["rank"])]
        return Stimulus(item_id=item_id, kind=kind, full=rel(entry[spec.stimulus]), crops={"paths": crops})

    stimuli = {c["id"]: make_stimulus(c["id"], "candidate", c) for c in manifest["candidates"]}
    gold_ids = []
    for k, gold in enumerate(_gold_entries(folder, manifest), start=1):
        # Both gold images are files of their own, shown like candidates: never the reference's file.
        better_id, worse_id = gold_item_ids(k)
        stimuli[better_id] = make_stimulus(better_id, "gold_good", gold["better"])
        stimuli[worse_id] = make_stimulus(worse_id, "gold_bad", gold["worse"])
        gold_ids.append((better_id, worse_id))
    for stimulus in stimuli.values():
        stimulus.set_id = study_set.id
        session.add(stimulus)
    session.flush()
    for (a, b), target in _study_pairs(spec, manifest, rng):
        session.add(Pair(set_id=study_set.id, stimulus_a_id=stimuli[a].id, stimulus_b_id=stimuli[b].id,
                         target_votes=target))
    for better_id, worse_id in gold_ids:
        session.add(Pair(set_id=study_set.id, stimulus_a_id=stimuli[better_id].id,
                         stimulus_b_id=stimuli[worse_id].id, target_votes=0, is_gold=True,
                         gold_winner_id=stimuli[better_id].id))


def _gold_entries(folder: Path, manifest: dict) -> list[dict]:
    """The manifest's gold pairs (each with ``better`` and ``worse`` entries); empty when it has none.

    Schema 3 lists several pairs; schema 2's single pair is read as a list of one.
    Manifests from before schema 2 hold a blurred, noisy copy of the reference
    (``degraded``) whose correct side was the reference itself: easy to spot and
    to read from a URL, so they are refused rather than shown.
    """
    gold = manifest.get("gold")
    if not gold:
        return []
    entries = [gold] if isinstance(gold, dict) else gold
    if not isinstance(entries, list) or not all(
            isinstance(e, dict) and isinstance(e.get("better"), dict) and isinstance(e.get("worse"), dict)
            for e in entries):
        raise StudyDefinitionError(
            f"{folder / 'manifest.json'}: its gold pair is from an older perceptlab (a blurred copy of the "
            f"reference, easy to tell from real trials); run `perceptlab stimuli prepare` again")
    return entries


def _study_pairs(spec: StudySpec, manifest: dict, rng: np.random.Generator) -> list[tuple[tuple[str, str], int]]:
    """The set's real pairs with their ``target_votes``.

    Regular sampling: the design's pairs, ``votes_per_pair`` each. Active sampling: every pair of
    the candidates, so that the selector may choose any; the design's pairs keep ``votes_per_pair``
    and the others 0, so the targets still add up to the set's budget (what the dashboard and the
    study list show) and the design's pairs (target > 0) are the warm-up's
    (:mod:`server.paradigms.paired.active`).
    """
    design = _design_pairs(spec, manifest, rng)
    if spec.sampling != "active":
        return [(pair, spec.votes_per_pair) for pair in design]
    in_design = {frozenset(pair) for pair in design}
    ids = [c["id"] for c in manifest["candidates"]]
    pairs = []
    for i, a in enumerate(ids):
        for b in ids[i + 1:]:
            pairs.append(((a, b), spec.votes_per_pair if frozenset((a, b)) in in_design else 0))
    return pairs


def _design_pairs(spec: StudySpec, manifest: dict, rng: np.random.Generator) -> list[tuple[str, str]]:
    if spec.degree == 0:
        return [tuple(p) for p in manifest["design"]["pairs"]]
    from stimuli.prepare import PrepareError, scene_design

    ids = [c["id"] for c in manifest["candidates"]]
    try:
        design = scene_design(ids, spec.degree, int(rng.integers(2**31)))
    except PrepareError as exc:
        raise StudyDefinitionError(f"scene {manifest['scene_id']}: {exc}") from None
    return [tuple(p) for p in design["pairs"]]
