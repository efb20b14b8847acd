"""Paired-comparison study definitions: ``study.toml`` -> a Study with its sets, stimuli and pairs.

:class:`StudySpec` declares every key once (server/paradigms/params.py); ``STUDY_TEMPLATE`` (``perceptlab
study template``) is made from it. Only ``study.manifests`` is required; a paired-comparison file names no
``[study] kind`` (or ``kind = "pc"``).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
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
from ..params import (TEXT_PLACEHOLDER, EntryParams, StoppingParams, Fail, MTurkParams, StudyParams, TextsParams, param, parse_spec,
                      redeclare, study_template)
from ..questionnaire import QuestionnaireParams
from ..sections import DisplayParams, PagesParams, QualityParams, ViewingParams
from ..studyfile import StudyDefinitionError, check_resolve_items, common_root, load_manifest_json
from .models import Pair, Stimulus, StudySet
from .window import manifest_sets, pc_requirement

KIND = "pc"
SAMPLINGS = ("regular", "active")  # [design] sampling
# [media] reference_position: where a video study's reference plays, between the two clips or before them.
REFERENCE_POSITIONS = ("between", "before")
# Video scenes' gold pairs (a hidden reference against a washed-out, blurred clip), in each scene's folder.
CHECK_FOLDER = "pc"
VIDEO_GOLD_PAIRS = 2


def gold_item_ids(k: int) -> tuple[str, str]:
    """Item IDs of a set's gold pair ``k`` (1, 2, ...): its better and worse image (see stimuli.gold).

    They appear in exports only (``item_a``/``item_b``/``gold_winner``); workers see opaque URLs.
    """
    return f"__gold_better_{k}__", f"__gold_worse_{k}__"


DEFAULT_CONSENT = """\
This task is part of a research study on how people perceive {medium} quality, run by {researcher}. \
You will compare {medium}s and click the one that looks closer to a reference {medium}. It takes {time}. \
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
_INSTRUCTIONS_VIDEO = {
    "between": "In every trial three videos play once, together: the middle one is the reference (the ground "
               "truth). When they have played, click the video on the LEFT or on the RIGHT that looks more like "
               "the reference, or press the left or right arrow key.",
    "before": "In every trial the reference video (the ground truth) plays first, then two videos play "
              "together side by side. When they have played, click the video on the LEFT or on the RIGHT that "
              "looks more like the reference, or press the left or right arrow key."}


def video_instructions(reference_position: str, quiz: bool) -> str:
    """The default instructions of a video study (``[media] reference_position``; the quiz's sentence when it
    has one)."""
    return "\n\n".join(part for part in (_INSTRUCTIONS_VIDEO[reference_position], quiz and _INSTRUCTIONS_QUIZ)
                        if part)


def default_instructions(stimulus: str = "amplified", crops: bool = True) -> str:
    """The instructions a study shows unless its file gives its own: they say that the differences were
    amplified only when the study shows amplified images (``[design] stimulus``), and mention the zoom
    crops only when its stimuli have any (prepared with ``--top-k 0``, or no crop worth showing: none)."""
    middle = " ".join(part for part, wanted in ((_INSTRUCTIONS_CROPS, crops),
                                                 (_INSTRUCTIONS_AMPLIFIED, stimulus == "amplified")) if wanted)
    return "\n\n".join(part for part in (_INSTRUCTIONS_TRIAL, middle, _INSTRUCTIONS_QUIZ) if part)


DEFAULT_INSTRUCTIONS = default_instructions()


@dataclass(frozen=True, kw_only=True)
class StudySpec(StudyParams, EntryParams, TextsParams, StoppingParams, MTurkParams, PagesParams, QualityParams,
                DisplayParams, MediaParams, ViewingParams, DisplayMonitorParams,
                QuestionnaireParams):
    """Every parameter of a study, declared once (server/paradigms/params.py) and validated; stored as
    ``Study.config``."""
    SECTION_DOCS: ClassVar[dict[str, str]] = {
        **MediaParams.SECTION_DOCS,
        "display": "The trial page shows one view at a time, LEFT | REFERENCE | RIGHT: the whole images, or one "
                   "zoom region (keys 1, 2, ... switch at once). `study create` prints the smallest inner window "
                   "(CSS pixels) the study needs and refuses one above 1366 x 657 (a 1366x768 laptop) unless "
                   "--allow-large-window; the HIT preview, consent and entry pages state it and turn away phones "
                   "and smaller windows before consent."}
    manifests: tuple[str, ...] = param(section="study", required=True, example=("prepared/manifest.json",),
                                       doc="from `perceptlab stimuli prepare`, relative to this file")

    degree: int = param(0, section="design", low=0,
                        doc="0 = the design stored in each manifest; >0 = draw a new random regular design")
    votes_per_pair: int = param(20, section="design", low=1, doc="StudyMB 2.0: 20; StudyMB 1.0: 30")
    stimulus: str = param("amplified", section="design", choices=("amplified", "original"),
                          doc='candidate images shown: "amplified" (artefacts amplified) or "original"')
    sampling: str = param(
        "regular", section="design", choices=SAMPLINGS,
        doc='"regular": each pair of the design above gets votes_per_pair votes; "active": every pair of a set '
            "is a candidate, and the study spends the same budget (votes_per_pair x the design's pairs, per set; "
            "no pair gets more than votes_per_pair) on the pairs whose next vote teaches the most "
            "(analysis.active, server/paradigms/paired/active.py)")
    warmup_votes_per_pair: int = param(
        1, section="design",
        doc="active only: each pair of the design gets this many votes first (a random connected warm-up; 0 to "
            "votes_per_pair); then the set's pages carry pairs chosen from its votes")

    pairs_per_page: int = param(20, section="pages", low=1, doc="StudyMB 1.0: 20 pairs per page, paid per page")
    reward_per_page: str = redeclare(
        PagesParams, "reward_per_page", "1.50",
        doc="the HIT: 1 page of 20 comparisons (~5 min) + consent, instructions, quiz (~2 min)")
    bonus_per_page: str = redeclare(
        PagesParams, "bonus_per_page", "1.00",
        doc="paid for every page after min_pages (~5 min each); both are ~$12/h at the documented pace, the "
            "default [server] wage_floor_usd_per_hour")
    quiz_size: int = redeclare(QualityParams, "quiz_size", 5,
                               doc="gold pairs in the quiz; failing it disqualifies for good")
    accuracy_threshold: float = redeclare(
        QualityParams, "accuracy_threshold", 0.7,
        doc="quiz and hidden gold (StudyMB 1.0: more than 30% wrong stops a worker)")

    consent: str = param(
        DEFAULT_CONSENT, section="texts", placeholder=TEXT_PLACEHOLDER,
        doc="plain text shown before the task; blank lines separate paragraphs; {researcher} and {contact} "
            'become the values above, {pay} the pay rules of [pages] ("$1.50 for 1 page, and a bonus of ..."), '
            '{time} the time estimate ("about 5 minutes per page of 20 comparisons, ..."), {medium} "image" or '
            '"video"; `study create` refuses empty ones')
    instructions: str = param(
        DEFAULT_INSTRUCTIONS, section="texts", placeholder=TEXT_PLACEHOLDER,
        fallback=lambda values, path: default_instructions(values["stimulus"]),
        doc="shown before the quiz, beside the overview image (default: says whether the differences were "
            "amplified, [design] stimulus)")
    reference_position: str = param(
        "between", section="media", choices=REFERENCE_POSITIONS,
        doc='video: "between": the reference plays in the middle, together with the two clips (LEFT | REFERENCE '
            '| RIGHT, started on the same frame); "before": the reference plays alone first, then the two clips '
            "together side by side. Images always show the reference between the candidates")
    base_dir: str = field(default=".", compare=False)  # the study file's folder (manifests are relative to it)

    @property
    def gold_per_page(self) -> int:
        """Hidden gold trials per page: the rate rounded, at least one when the rate is positive."""
        if self.gold_rate <= 0:
            return 0
        return max(1, int(round(self.gold_rate * self.pairs_per_page)))

    def validate(self, fail: Fail) -> None:
        """Rules between parameters (each parameter's own bounds are declared above)."""
        if not 0 <= self.warmup_votes_per_pair <= self.votes_per_pair:
            fail(f"design.warmup_votes_per_pair must be in [0, votes_per_pair = {self.votes_per_pair}], "
                 f"got {self.warmup_votes_per_pair}")
        if self.gold_per_page >= self.pairs_per_page:
            fail("quality.gold_rate leaves no real pairs on a page")


STUDY_TEMPLATE = study_template(StudySpec, header="perceptlab study definition: `perceptlab study create study.toml`",
                                examples={"slug": "interp-2026", "name": "Frame interpolation quality"})


def spec_from_toml(data: dict[str, Any], path: Path) -> StudySpec:
    """The :class:`StudySpec` of a parsed study file read from ``path`` (for messages and relative paths);
    raise :class:`StudyDefinitionError` naming the problem. A paired-comparison file names no ``[study] kind``
    or ``kind = "pc"`` (which the spec does not store: old and new configs agree)."""
    return parse_spec(StudySpec, data, path, kind=KIND)


def window_requirement(spec: StudySpec, sets=None, media: dict | None = None) -> WindowRequirement:
    """The smallest inner window the study's trial pages need (:mod:`server.paradigms.paired.window`), and for
    videos the codecs the browser must decode (:func:`server.paradigms.media.decode_types`).

    ``sets``: ``(width, height, crop boxes)`` of each set, and ``media`` the study's; by default read from the
    spec's manifests (before the study exists: ``study create``, ``launch``).
    """
    names = None
    if sets is None:
        scenes = _scene_manifests(spec)
        manifests = [manifest for _, manifest in scenes]
        sets, names = manifest_sets(manifests), [manifest["scene_id"] for manifest in manifests]
        media = study_media(scenes, common_root([folder.resolve() for folder, _ in scenes]))
    requirement = pc_requirement(spec.policy, spec.min_image_scale, (spec.min_window_width, spec.min_window_height),
                                 sets, names)
    return replace(requirement, decode=decode_types(media or {}), min_mbps=needed_mbps(media or {}, spec),
                   needs_card=spec.needs_card())


# ---------------------------------------------------------------- manifests -> rows

def _scene_manifests(spec: StudySpec) -> list[tuple[Path, dict]]:
    """``(scene folder, scene manifest)`` for every scene the study's manifests name."""
    scenes: list[tuple[Path, dict]] = []
    for name in spec.manifests:
        path = Path(spec.base_dir) / name
        manifest = load_manifest_json(path)
        if manifest.get("kind") == "study":
            for entry in manifest.get("scenes", []):
                if not isinstance(entry, dict) or not isinstance(entry.get("manifest"), str):
                    raise StudyDefinitionError(f"{path}: a scene entry names no manifest")
                scene_path = path.parent / entry["manifest"]
                scenes.append((scene_path.parent, load_manifest_json(scene_path)))
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
    check_resolve_items(spec.resolve, [{c["id"] for c in m["candidates"]} for _, m in scenes])
    root = stimulus_root(spec)
    checks = spec.quiz_size > 0 or spec.gold_per_page > 0
    gold = {manifest["scene_id"]: _video_gold_entries(spec, folder.resolve(), manifest) if _is_video(manifest)
            else _gold_entries(folder, manifest) for folder, manifest in scenes} if checks else {}
    if checks and not any(gold.values()):
        raise StudyDefinitionError("the stimuli have no gold pairs (prepared with --gold-pairs 0): "
                                   "set [quality] quiz_size = 0 and gold_rate = 0")
    # What the study shows (server/paradigms/media.py), the video gold pairs' clips included.
    clips = {str(Path(path).relative_to(root).as_posix()): Path(path) for folder, manifest in scenes
             if _is_video(manifest) for entry in gold.get(manifest["scene_id"], [])
             for path in (folder.resolve() / entry["better"]["original"], folder.resolve() / entry["worse"]["original"])}
    media = study_media([(folder.resolve(), manifest) for folder, manifest in scenes], root, clips)
    # The key of the study's opaque stimulus names; what it shows.
    config = {**spec.to_config(), SALT_KEY: new_salt(), "media": media}
    study = Study(slug=spec.slug, name=spec.name, seed=spec.seed, config=config, stimulus_root=str(root))
    session.add(study)
    rng = np.random.default_rng(spec.seed)
    for folder, manifest in scenes:
        _add_scene(session, study, spec, root, folder.resolve(), manifest, rng, gold.get(manifest["scene_id"], []))
    session.flush()
    return study


def _add_scene(session: Session, study: Study, spec: StudySpec, root: Path, folder: Path, manifest: dict,
               rng: np.random.Generator, gold: list[dict]) -> None:
    def rel(path: str) -> str:
        full = folder / path
        if not full.is_file():
            raise StudyDefinitionError(f"{full}: listed in {folder / 'manifest.json'} but missing")
        return full.relative_to(root).as_posix()

    scene_id = manifest["scene_id"]
    # Video clips are delivered as prepared (stimuli/video.py): no amplified copy, no crops, no overview.
    shown = "original" if _is_video(manifest) else spec.stimulus
    study_set = StudySet(study=study, name=scene_id,
                         reference={"full": rel(manifest["reference"]["path"]),
                                    "crops": [rel(p) for p in manifest["reference"].get("crops", [])]},
                         overview=rel(manifest["overview"]) if manifest.get("overview") else None,
                         crops={"boxes": manifest.get("crops", [])},
                         image_width=manifest["image_size"]["width"], image_height=manifest["image_size"]["height"])
    session.add(study_set)
    session.flush()
    def make_stimulus(item_id: str, kind: str, entry: dict) -> Stimulus:
        """A candidate or gold image as the study shows it (``spec.stimulus``: amplified or original)."""
        crops = [rel(c[shown]) for c in sorted(entry.get("crops", []), key=lambda c: c["rank"])]
        return Stimulus(item_id=item_id, kind=kind, full=rel(entry[shown]), crops={"paths": crops})

    stimuli = {c["id"]: make_stimulus(c["id"], "candidate", c) for c in manifest["candidates"]}
    pairs = _study_pairs(spec, manifest, rng)
    # The design's pairs (regular sampling: an active study's selector decides which pairs get votes, and its
    # gold pairs stay apart).
    real = {frozenset(pair) for pair, _ in pairs} if spec.sampling == "regular" else set()
    known: dict[frozenset, str] = {}  # the study's real pairs chosen as gold -> their better candidate
    gold_ids = []
    for k, entry in enumerate(gold, start=1):
        candidates = entry.get("candidates") or {}
        if frozenset((candidates.get("better"), candidates.get("worse"))) in real:
            # A pair of the study's own: its gold trials are trials of that pair, their votes its votes (counted
            # toward its target, exported and scaled as such), so it recurs across workers as real pairs do.
            known[frozenset((candidates["better"], candidates["worse"]))] = candidates["better"]
            continue
        # Both gold images are files of their own, shown like candidates: never the reference's file.
        better_id, worse_id = gold_item_ids(k)
        stimuli[better_id] = make_stimulus(better_id, "gold_good", entry["better"])
        stimuli[worse_id] = make_stimulus(worse_id, "gold_bad", entry["worse"])
        gold_ids.append((better_id, worse_id))
    for stimulus in stimuli.values():
        stimulus.set_id = study_set.id
        session.add(stimulus)
    session.flush()
    for (a, b), target in pairs:
        better = known.get(frozenset((a, b)))
        session.add(Pair(set_id=study_set.id, stimulus_a_id=stimuli[a].id, stimulus_b_id=stimuli[b].id,
                         target_votes=target, gold_winner_id=None if better is None else stimuli[better].id))
    for better_id, worse_id in gold_ids:
        session.add(Pair(set_id=study_set.id, stimulus_a_id=stimuli[better_id].id,
                         stimulus_b_id=stimuli[worse_id].id, target_votes=0, is_gold=True,
                         gold_winner_id=stimuli[better_id].id))


def _is_video(manifest: dict) -> bool:
    """Whether a prepared scene shows video clips (stimuli/video.py writes its ``media``)."""
    return (manifest.get("media") or {}).get("kind") == VIDEO


def _video_gold_entries(spec: StudySpec, folder: Path, manifest: dict) -> list[dict]:
    """A video scene's gold pairs, in the manifest's gold shape: a hidden reference (the reference through the
    delivery encoder) against each of :data:`VIDEO_GOLD_PAIRS` washed-out, blurred clips, written into the
    scene's :data:`CHECK_FOLDER` (:func:`server.paradigms.media.write_check_clips`: sized like the candidates,
    the same metadata); the hidden reference is the better clip."""
    hidden, degraded = write_check_clips(folder, manifest, folder / CHECK_FOLDER, seed=spec.seed,
                                         n_degraded=VIDEO_GOLD_PAIRS)
    better = hidden.relative_to(folder).as_posix()
    return [{"better": {"original": better, "crops": []}, "worse": {"original": path.relative_to(folder).as_posix(),
                                                                   "crops": []}} for path in degraded]


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


# ---------------------------------------------------------------- gold pairs against the crowd

def gold_pool_warning(spec: StudySpec, pair_targets: list[tuple[int, bool]], n_checks_only: int) -> str | None:
    """A warning when the study's gold pairs are too few for the gold trials its workers are shown, else None.

    A worker who does ``k`` pages is shown ``quiz_size + k gold_per_page`` gold trials of ``quiz_size + k
    pairs_per_page``. Real pairs are filled evenly toward their targets and a design pair's gold trials are votes
    of it, so gold pairs are shown as often as real ones only while their share of the study's votes (a gold-only
    pair, outside the design, counted at the mean target) is at least the gold trials' share; with fewer gold
    pairs than that, each is shown more often than real pairs however the gold trials are spread, which marks
    them to workers who pool what they were shown (issue 38: recurrence AUC 1.0 at 30 workers x 1 page of the demo
    with 6 gold pairs of a scene's 33). Workers who do more pages dilute the quiz: the warning names the fewest
    pages a worker must do for the pool to suffice, if any (``[pages] min_pages`` to ``max_pages``).

    ``pair_targets``: ``(target_votes, is a gold pair)`` of each real (design) pair; ``n_checks_only``: the gold
    pairs outside the design.
    """
    per_page = spec.gold_per_page
    if spec.quiz_size == 0 and per_page == 0:
        return None
    total = sum(target for target, _ in pair_targets)
    targeted = [target for target, _ in pair_targets if target > 0]  # active sampling: pairs outside the design get 0
    mean_target = total / len(targeted) if targeted else 0.0
    gold_votes = sum(target for target, is_gold in pair_targets if is_gold) + n_checks_only * mean_target
    capacity = gold_votes / (total + n_checks_only * mean_target) if total else 1.0

    def share(pages: int) -> float:
        return (spec.quiz_size + pages * per_page) / (spec.quiz_size + pages * spec.pairs_per_page)

    if share(spec.min_pages) <= capacity + 1e-9:
        return None
    enough = next((k for k in range(spec.min_pages, spec.max_pages + 1) if share(k) <= capacity + 1e-9), None)
    n_gold = sum(is_gold for _, is_gold in pair_targets) + n_checks_only
    k = spec.min_pages
    shown = f"{spec.quiz_size + k * per_page} gold trials of {spec.quiz_size + k * spec.pairs_per_page}"
    unless = (f"unless every worker does at least {enough} pages" if enough is not None
              else "whatever number of pages workers do")
    return (f"warning: {n_gold} gold pairs hold {capacity:.0%} of the study's votes, but a worker who does "
            f"{k} page{'s' if k > 1 else ''} ([pages] min_pages) is shown {shown} ({share(k):.0%}): gold pairs will "
            f"be shown more often than real pairs, which tells them apart to workers who compare what they were "
            f"shown, {unless}. Prepare the stimuli with more gold pairs (stimuli prepare --gold-pairs; a looser "
            "--gold-margin or --gold-min-difference qualifies more), or lower [quality] quiz_size or gold_rate.")
