"""Prepare the stimuli of a paired-comparison study: amplified images, zoom crops, pair designs.

A *scene* is one reference (ground truth) image and two or more candidate
images of the same size, e.g. the frames 155 interpolation methods produced
for one Middlebury sequence. On disk, a scene folder holds ``reference.<ext>``
(or a reference named explicitly) and every other image file is a candidate
whose ID is its file stem. In memory, pass a :class:`SceneImages`.

:func:`prepare_scene` writes one scene into ``out_dir``::

    manifest.json                     everything below, with paths relative to out_dir
    reference.png                     the reference, re-encoded as PNG
    overview.png                      the reference with the zoom regions outlined and numbered
    original/<id>.png                 each candidate as given
    amplified/<id>.png                each candidate with amplified artefacts (Algorithm 1)
    crops/<rank>/reference.png        zoom crops: reference,
    crops/<rank>/original/<id>.png    each candidate,
    crops/<rank>/amplified/<id>.png   and each amplified candidate

Gold (check) pairs are pairs of the scene's own candidates (:func:`stimuli.gold.eligible_gold_pairs`,
:func:`stimuli.gold.choose_gold_pairs`): the manifest's ``gold`` entries name the candidates'
files, so a gold trial shows exactly the files real trials show. They are taken inside the pair
design first (the server shows a design pair's gold trials as votes of that pair, so that gold pairs
recur across workers as real pairs do), outside it when too few design pairs qualify. Only a scene with no candidate
pair plain enough for gold falls back to images made of its candidates' errors
(:func:`stimuli.gold.make_gold_pairs`), written like candidates::

    gold/<k>/original/<side>.png      synthetic gold pair k (side: better, worse)
    gold/<k>/amplified/<side>.png
    crops/<rank>/gold/<k>/<kind>/<side>.png  and their crops (kind: original, amplified)

Every file a trial can show on a side (candidates, synthetic gold images; full and cropped) is then
padded to a size drawn apart from its content, balanced over the gold pairs (:func:`_deliver_sizes`):
no file size, size ratio or "which is smaller" answers a gold pair better than a coin.

:func:`prepare_study` writes several scenes into one subfolder each plus a
top-level ``manifest.json``. Both build into a temporary folder beside the
output and rename it into place at the end: on any error nothing is left
behind, and an existing non-empty output is replaced only with ``overwrite=True``.
"""
from __future__ import annotations

import math
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np

from .gold import DEFAULT_MIN_DIFFERENCE, DEFAULT_PAIR_MARGIN
from .io import FOLDER_MODE, StimulusInputError, is_image_file, read_image, write_bytes_atomic, write_png

# 2: gold pairs made of candidate errors ("better"/"worse"), no blurred reference;
# 3: "gold" is a list of such pairs (several per scene, so none needs to repeat for a worker);
# 4: gold pairs are pairs of the scene's own candidates (their entries name the candidates' files)
SCHEMA_VERSION = 4
MANIFEST = "manifest.json"
MAX_GOLD_PAIRS = 100  # per scene: each is four images plus their crops on disk
# Gold pairs per scene at least, by default (PrepareParameters.gold_pairs None): taken outside the design, or
# synthetic, when fewer design pairs qualify, so that a worker need not meet one twice.
DEFAULT_GOLD_PAIRS = 6
# And by default at least this share of the design's pairs, when that many qualify: gold pairs fewer than the gold
# trials' share of a worker's trials are shown more often than real pairs however they are spread (a default study's
# worker doing one page is shown a quiz of 5 and 2 hidden gold trials of 25: 28%; the server warns of a study whose
# gold pairs are too few for its settings, server/paradigms/paired/study.py gold_pool_warning). Not every pair that
# qualifies: gold pairs are the plainest, and the more of them, the better a decoding statistic (the two errors'
# difference) finds them (benchmarks/gold_separability.py).
GOLD_DESIGN_SHARE = Fraction(1, 3)  # exact: a third of 33 pairs is 11
# The longest image side prepare takes by default: a 1366 px wide laptop window at the "fit" display policy's
# smallest default scale (0.5) shows at most this, even one image alone. Larger scenes are refused from their
# files' headers, before anything is decoded (a 6000x4000 scene took 100 s and 2 GB, then no window fit it).
MAX_SIDE = 2732


class PrepareError(StimulusInputError):
    """Bad input to :func:`prepare_scene` / :func:`prepare_study`."""


@dataclass
class SceneImages:
    """A scene in memory: reference and candidates (ID -> image), all of one shape and dtype."""

    scene_id: str
    reference: np.ndarray
    candidates: dict[str, np.ndarray]
    sources: dict[str, str] = field(default_factory=dict)  # "reference" / candidate ID -> file it came from


@dataclass(frozen=True)
class PrepareParameters:
    """Everything that shapes the prepared stimuli (stored in the manifests)."""

    alpha: float = 1.5            # amplification factor (> 1)
    sigma: float = 20.0           # Gaussian smoothing of the average error, pixels
    zoom: float = 1.5             # display magnification of the crops
    top_k: int = 3                # zoom regions per scene (0: none; stimuli.zoom drops crops of most of the image)
    levels: int = 2               # Otsu classes (2: Otsu, >= 3: multi-Otsu, top class kept)
    pad: int = 16                 # pixels around each region before growing
    min_size: tuple[int, int] = (160, 120)  # smallest crop (width, height)
    aspect: float = 4 / 3         # crop width / height
    degree: int = 6               # comparisons per candidate in the random regular design
    seed: int = 0                 # seed of the pair design
    compression: int = 3          # PNG zlib level
    gold_margin: float = DEFAULT_PAIR_MARGIN  # worse gold candidate's IE and GMSD / better one's, at least (> 1)
    gold_better_scale: float = 0.5  # synthetic fallback only: the best candidate's error scaled by this
    # Distinct gold pairs per scene (0: none). None: GOLD_DESIGN_SHARE of the design's pairs when that many qualify
    # (their gold trials show files real trials show and cost no file), and at least DEFAULT_GOLD_PAIRS in all.
    gold_pairs: int | None = None
    gold_min_difference: float = DEFAULT_MIN_DIFFERENCE  # gold pair's two IEs differ by this (8-bit grey levels)

    def validate(self) -> None:
        """Raise :class:`PrepareError` naming the first bad parameter."""
        checks = [
            (np.isfinite(self.alpha) and self.alpha > 1, f"alpha must be > 1 (the amplification factor), got {self.alpha}"),
            (self.sigma > 0, f"sigma must be > 0 pixels, got {self.sigma}"),
            (self.zoom > 0, f"zoom must be > 0, got {self.zoom}"),
            (self.top_k >= 0, f"top_k must be >= 0 (0: no crops), got {self.top_k}"),
            (self.levels >= 2, f"levels must be >= 2, got {self.levels}"),
            (self.pad >= 0, f"pad must be >= 0, got {self.pad}"),
            (len(self.min_size) == 2 and min(self.min_size) >= 1, f"min_size must be (width, height) >= 1, got {self.min_size}"),
            (self.aspect > 0, f"aspect must be > 0, got {self.aspect}"),
            (self.degree >= 2, f"degree must be >= 2 (a connected design), got {self.degree}"),
            (0 <= self.compression <= 9, f"compression must be 0..9, got {self.compression}"),
            (np.isfinite(self.gold_margin) and self.gold_margin > 1,
             f"gold_margin must be > 1, got {self.gold_margin}"),
            (0 < self.gold_better_scale <= 0.85,
             f"gold_better_scale must be in (0, 0.85], got {self.gold_better_scale}"),
            (self.gold_pairs is None or (isinstance(self.gold_pairs, int) and 0 <= self.gold_pairs <= MAX_GOLD_PAIRS),
             f"gold_pairs must be an integer in 0..{MAX_GOLD_PAIRS} (or None: GOLD_DESIGN_SHARE of the design), "
             f"got {self.gold_pairs}"),
            (np.isfinite(self.gold_min_difference) and self.gold_min_difference >= 0,
             f"gold_min_difference must be >= 0 grey levels, got {self.gold_min_difference}"),
        ]
        for ok, message in checks:
            if not ok:
                raise PrepareError(message)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["min_size"] = list(self.min_size)
        return out


# ---------------------------------------------------------------- loading scenes

def scene_folders(path: str | os.PathLike) -> list[Path]:
    """Scene folders under ``path``: ``path`` itself when it holds images or videos, else its subfolders
    that do (video content folders: :mod:`stimuli.video`)."""
    from .media import is_media_file

    path = Path(path)
    if not path.is_dir():
        raise PrepareError(f"{path}: not a folder")
    if any(is_media_file(p) for p in path.iterdir()):
        return [path]
    scenes = sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith(".")
                    and any(is_media_file(q) for q in p.iterdir()))
    if not scenes:
        raise PrepareError(f"{path}: no images or videos and no subfolders with them")
    return scenes


def study_media_kind(paths: Sequence[str | os.PathLike]) -> str:
    """``"image"`` or ``"video"``: what the scene folders under ``paths`` (:func:`scene_folders`) hold.

    Raises
    ------
    PrepareError, MediaError
        Some hold images and others videos (or one holds both): a study shows one kind.
    """
    from .media import folder_media_kind

    kinds = {folder: folder_media_kind(folder) for path in paths for folder in scene_folders(path)}
    if len(set(kinds.values())) > 1:
        images = next(f for f, k in kinds.items() if k == "image")
        videos = next(f for f, k in kinds.items() if k == "video")
        raise PrepareError(f"{images} holds images but {videos} videos: a study shows one kind; prepare them apart")
    return next(iter(kinds.values()))


def check_image_sides(folders: Sequence[Path], max_side: int) -> None:
    """Refuse a scene whose images have a side longer than ``max_side`` pixels, reading only the files' headers
    (unreadable files are left for :func:`load_scene` to name)."""
    from PIL import Image

    for folder in folders:
        for path in sorted(p for p in folder.iterdir() if is_image_file(p)):
            try:
                with Image.open(path) as image:
                    width, height = image.size
            except (OSError, SyntaxError, ValueError, Image.DecompressionBombError):
                continue
            if max(width, height) > max_side:
                factor = max_side / max(width, height)
                raise PrepareError(
                    f"{path}: {width}x{height} pixels, a side longer than {max_side} px: no laptop window shows such "
                    f"images. Downscale the scene's images, all by the same factor (e.g. to "
                    f"{int(width * factor)}x{int(height * factor)} or less) and prepare those; or prepare them as "
                    f"they are with `perceptlab stimuli prepare --max-side {max(width, height)}`")


def _check_id(item_id: str, what: str) -> str:
    if not item_id or item_id.startswith(".") or any(c in item_id for c in "/\\\0"):
        raise PrepareError(f"{what} {item_id!r} cannot be used as a file name")
    return item_id


def load_scene(scene_dir: str | os.PathLike, reference: str | os.PathLike | None = None,
               scene_id: str | None = None) -> SceneImages:
    """Read a scene folder: ``reference.*`` (or ``reference``, a name in the folder or a path) and
    every other image file as a candidate whose ID is its file stem. Checks readability and sizes."""
    scene_dir = Path(scene_dir)
    if not scene_dir.is_dir():
        raise PrepareError(f"{scene_dir}: scene folder not found")
    files = sorted(p for p in scene_dir.iterdir() if is_image_file(p))
    reference_path = _find_reference(scene_dir, files, reference)
    candidate_paths = [p for p in files if p.resolve() != reference_path.resolve()]
    ids = [p.stem for p in candidate_paths]
    if duplicates := sorted({i for i in ids if ids.count(i) > 1}):
        raise PrepareError(f"{scene_dir}: several files give the candidate IDs {duplicates}")
    if len(candidate_paths) < 2:
        raise PrepareError(f"{scene_dir}: a scene needs at least two candidate images besides the reference, "
                           f"found {len(candidate_paths)}")
    ref_image = read_image(reference_path)
    candidates, sources = {}, {"reference": str(reference_path)}
    for path in candidate_paths:
        image = read_image(path)
        _check_same_geometry(image, ref_image, str(path), str(reference_path))
        candidates[path.stem] = image
        sources[path.stem] = str(path)
    return SceneImages(_check_id(scene_id or scene_dir.name, "scene ID"), ref_image, candidates, sources)


def _find_reference(scene_dir: Path, files: list[Path], reference: str | os.PathLike | None) -> Path:
    if reference is not None:
        path = Path(reference)
        path = path if path.is_absolute() or path.exists() else scene_dir / path
        if not path.is_file():
            raise PrepareError(f"{path}: reference image not found")
        return path
    named = [p for p in files if p.stem.lower() == "reference"]
    if len(named) != 1:
        found = "none" if not named else ", ".join(p.name for p in named)
        raise PrepareError(f"{scene_dir}: expected exactly one reference image named reference.<ext>, found {found}")
    return named[0]


def _check_same_geometry(image: np.ndarray, reference: np.ndarray, name: str, reference_name: str) -> None:
    if image.shape != reference.shape:
        raise PrepareError(f"{name}: size {image.shape[1]}x{image.shape[0]} differs from the reference "
                           f"{reference_name} ({reference.shape[1]}x{reference.shape[0]})")
    if image.dtype != reference.dtype:
        raise PrepareError(f"{name}: {image.dtype} pixels but the reference {reference_name} has {reference.dtype}")


def _as_scene(scene: SceneImages | Mapping | str | os.PathLike, reference=None, scene_id=None) -> SceneImages:
    if isinstance(scene, (str, os.PathLike)):
        return load_scene(scene, reference, scene_id)
    if isinstance(scene, Mapping):
        scene = SceneImages(scene_id or str(scene.get("scene_id", "scene")), np.asarray(scene["reference"]),
                            dict(scene["candidates"]), dict(scene.get("sources", {})))
    _check_id(scene.scene_id, "scene ID")
    if len(scene.candidates) < 2:
        raise PrepareError(f"scene {scene.scene_id!r}: needs at least two candidates, got {len(scene.candidates)}")
    from .io import check_rgb

    check_rgb(scene.reference, f"scene {scene.scene_id!r} reference")
    for item_id, image in scene.candidates.items():
        _check_id(str(item_id), "candidate ID")
        check_rgb(image, f"candidate {item_id!r}")
        _check_same_geometry(image, scene.reference, f"candidate {item_id!r}", "reference")
    return scene


# ---------------------------------------------------------------- design

def scene_design(candidate_ids: Sequence[str], degree: int, seed: int) -> dict:
    """Pair design over the candidates (in the given order): random ``degree``-regular, or the full
    design when there are at most ``degree`` candidates. Pairs are ``[id_a, id_b]``."""
    from .designs import full_design, random_regular_design

    n = len(candidate_ids)
    if n < degree + 1:
        pairs, kind, used = full_design(n), "full", n - 1
    else:
        if (n * degree) % 2:
            raise PrepareError(f"{n} candidates x degree {degree} is odd: a regular design needs an even "
                               f"product; choose an even degree")
        pairs, kind, used = random_regular_design(n, degree, seed), "random_regular", degree
    return {"kind": kind, "degree": used, "requested_degree": degree, "seed": seed,
            "n_items": n, "pairs": [[candidate_ids[i], candidate_ids[j]] for i, j in pairs]}


# ---------------------------------------------------------------- writing

def _progress(iterable, total: int, desc: str, progress: bool):
    from tqdm import tqdm

    return tqdm(iterable, total=total, desc=desc, leave=False, disable=None if progress else True)


def _write_scene(scene: SceneImages, folder: Path, params: PrepareParameters, progress: bool) -> dict:
    from .zoom import average_error, draw_overview, find_crop_boxes

    ids = sorted(scene.candidates)
    design = scene_design(ids, params.degree, params.seed)  # before any work: odd n * degree is an input error
    boxes = find_crop_boxes(average_error(scene.reference, (scene.candidates[i] for i in ids)),
                            sigma=params.sigma, top_k=params.top_k, levels=params.levels, pad=params.pad,
                            min_size=params.min_size, aspect=params.aspect, zoom=params.zoom)
    write_png(folder / "reference.png", scene.reference, params.compression)
    write_png(folder / "overview.png", draw_overview(scene.reference, boxes), params.compression)
    for box in boxes:
        _write_file(folder, f"crops/{box.rank}/reference.png", _crop(scene.reference, box), params)
    candidates, amplified = [], {}
    for item_id in _progress(ids, len(ids), scene.scene_id, progress):
        entry, amplified[item_id] = _write_item(folder, scene.reference, scene.candidates[item_id],
                                                       "", item_id, boxes, params)
        if item_id in scene.sources:
            entry["source"] = scene.sources[item_id]
        candidates.append({"id": item_id, **entry})
    height, width = scene.reference.shape[:2]
    manifest = {
        "schema_version": SCHEMA_VERSION, "kind": "scene", "scene_id": scene.scene_id,
        "image_size": {"width": width, "height": height}, "dtype": str(scene.reference.dtype),
        "reference": {"path": "reference.png", "source": scene.sources.get("reference"),
                      "crops": [f"crops/{b.rank}/reference.png" for b in boxes]},
        "overview": "overview.png",
        "crops": [b.to_dict() for b in boxes],
        "candidates": candidates,
        "parameters": params.to_dict(),
        "design": design,
    }
    manifest["gold"] = _gold_entries(scene, folder, boxes, params, manifest, amplified)
    _write_json(folder / MANIFEST, manifest)
    return manifest


def _gold_entries(scene: SceneImages, folder: Path, boxes, params: PrepareParameters, manifest: dict,
                  amplified: dict[str, dict[str, float]]) -> list[dict]:
    """The scene's gold pairs: pairs of its own candidates when any is plain enough, else synthetic.

    ``amplified`` holds each candidate's amplified image's measures (:func:`_write_item`).
    """
    from .gold import (
        DEFAULT_MARGIN,
        GoldError,
        candidate_errors,
        choose_gold_pairs,
        eligible_gold_pairs,
        make_gold_pairs,
    )
    from .io import max_value
    from .metrics import gmsd

    if params.gold_pairs == 0:
        _deliver_sizes(folder, manifest, manifest["candidates"], [], params)
        return []
    errors = {"original": candidate_errors(scene.reference, scene.candidates),
              "amplified": {i: m["interpolation_error"] for i, m in amplified.items()}}
    if not any(e > 0 for e in errors["original"].values()):
        raise GoldError("every candidate equals the reference: there is no artefact to build gold pairs from")
    structure = {"gmsd_original": {i: gmsd(scene.reference, image) for i, image in scene.candidates.items()},
                 "gmsd_amplified": {i: m["gmsd"] for i, m in amplified.items()}}
    grey_level = max_value(scene.reference.dtype) / 255  # min_difference is in 8-bit grey levels
    eligible = eligible_gold_pairs(errors, margin=params.gold_margin,
                                   min_difference=params.gold_min_difference * grey_level, agreeing=structure)
    if eligible:
        design = [frozenset(p) for p in manifest["design"]["pairs"]]
        # Inside the design first: the server shows a design pair's gold trials as trials of that pair (its
        # votes, counted toward its target and scaled), so they recur across workers exactly as its real
        # trials do, while a pair outside the design is shown only as gold, at the gold rate (issue 38:
        # recurrence AUC 0.631 on the demo with gold outside the design), and adds an edge to the pair graph.
        in_design = set(design)
        inside = [p for p in eligible if frozenset((p.better, p.worse)) in in_design]
        outside = [p for p in eligible if frozenset((p.better, p.worse)) not in in_design]
        # By default a third of the design's pairs (GOLD_DESIGN_SHARE; issue 38: with 6 of the demo's 33 a scene,
        # how often a pair recurs across workers told gold at AUC 1.0 at 30 workers x 1 page), outside the design
        # only up to the minimum: a pair there is shown only as gold.
        least = DEFAULT_GOLD_PAIRS if params.gold_pairs is None else params.gold_pairs
        wanted = max(math.ceil(GOLD_DESIGN_SHARE * len(design)), least) if params.gold_pairs is None else least
        statistics = _pair_statistics(folder, manifest, eligible)
        chosen = choose_gold_pairs(inside, statistics, design, wanted, seed=params.seed)
        if len(chosen) < least:
            chosen += choose_gold_pairs(outside, statistics, design, least - len(chosen), seed=params.seed)
        order = {id(p): k for k, p in enumerate(eligible)}
        chosen.sort(key=lambda p: order[id(p)])
        entries = [_candidate_gold_entry(manifest, pair, k, params) for k, pair in enumerate(chosen, start=1)]
        sides = manifest["candidates"]
    else:
        wanted = DEFAULT_GOLD_PAIRS if params.gold_pairs is None else params.gold_pairs
        gold = make_gold_pairs(scene.reference, scene.candidates, wanted, margin=DEFAULT_MARGIN,
                               better_scale=params.gold_better_scale, seed=params.seed)
        entries = [_write_gold(scene, folder, boxes, params, pair, k, errors["amplified"])
                   for k, pair in enumerate(gold, start=1)]
        sides = [*manifest["candidates"], *(e[side] for e in entries for side in ("better", "worse"))]
    _deliver_sizes(folder, manifest, sides, entries, params)
    return entries


MIN_SIZE_GAP = 5  # bytes: pad_png writes a size up to 4 below the one asked, so a gap of 5 keeps the order
_SIZE_DRAWS = 2000  # assignments of a group's sizes tried for a balanced one


def _deliver_sizes(folder: Path, manifest: dict, sides: Sequence[dict], gold: Sequence[dict],
                   params: PrepareParameters) -> None:
    """Rewrite every file a trial can show on a side (``sides``: candidates and synthetic gold images, as
    given and amplified, full and cropped) to a size independent of its content, with the smaller file the
    better image in exactly half of the ``gold`` pairs.

    Which of two files is smaller told a gold pair's answer (issue 38: the smaller file was the better image
    on 72/72 gold trials of a generated study, the larger on 24/24 of the demo's), and any pair's size ratio
    follows its quality difference. So each group of files that can face each other (one image kind, the
    full images or one crop rank) gets sizes drawn by :func:`stimuli.check_images.common_sizes` (uniform on
    ``[F, 1.15 F]``, ``F`` the group's least compressible file; seeded by the scene), handed out by a seeded
    random assignment, the first of up to ``_SIZE_DRAWS`` in which the gold pairs' better file is the
    smaller one in half of them (with an odd count, one more or fewer) and every gold pair's two sizes
    differ by ``MIN_SIZE_GAP`` bytes or more, so the written files keep that order. The files are the same
    pixels re-encoded at ``params.compression`` and padded inside the zlib stream
    (:func:`stimuli.check_images.pad_png`), as rating studies with checks deliver every image.

    Then a file's size, a pair's size ratio and which file is smaller answer a gold pair no better than a
    coin: the "smaller file" and "larger file" bots get exactly half the gold trials of a scene with an
    even number of gold pairs (benchmarks/gold_separability.py). What this does not hide: parsing the
    deflate blocks gives a file's compressed body (its pixels' compressibility), and decoding gives the
    pixels, whose errors to the reference order every gold pair (that is what an attentive person sees);
    those are decoding statistics (stimuli/separability.py). The reference's files face no other file and
    keep their encoding.
    """
    import zlib

    from .check_images import common_sizes, pad_png, unpadded_size

    groups: dict[tuple[str, int], list[str]] = {}

    def files(entry: dict) -> dict[tuple[str, int], str]:
        out = {}
        for kind in ("original", "amplified"):
            out[kind, 0] = entry[kind]
            out.update({(kind, crop["rank"]): crop[kind] for crop in entry["crops"]})
        return out

    for entry in sides:
        for key, path in files(entry).items():
            groups.setdefault(key, []).append(path)
    gold_files = [(files(g["better"]), files(g["worse"])) for g in gold]
    rng = np.random.default_rng([params.seed, zlib.crc32(manifest["scene_id"].encode())])
    for key in sorted(groups):
        paths = list(dict.fromkeys(groups[key]))
        index = {path: i for i, path in enumerate(paths)}
        data = [(folder / path).read_bytes() for path in paths]
        sizes = common_sizes([unpadded_size(d, params.compression) for d in data], rng)
        pairs = np.array([(index[better[key]], index[worse[key]]) for better, worse in gold_files], dtype=int)
        sizes = _balanced_assignment(sizes, pairs.reshape(-1, 2), rng)
        for path, content, size in zip(paths, data, sizes):
            write_bytes_atomic(folder / path, pad_png(content, int(size), params.compression))


def _balanced_assignment(sizes: np.ndarray, pairs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``sizes`` in a seeded random order in which the first file of ``pairs`` (rows: better, worse) is the
    smaller one in half of them and each pair's sizes differ by :data:`MIN_SIZE_GAP` or more (the first of
    ``_SIZE_DRAWS`` orders that does; the most nearly balanced one when none does)."""
    best, best_miss = sizes, np.inf
    for _ in range(_SIZE_DRAWS):
        order = sizes[rng.permutation(len(sizes))]
        if not len(pairs):
            return order
        better, worse = order[pairs[:, 0]], order[pairs[:, 1]]
        miss = abs(np.sum(better < worse) - len(pairs) / 2) + 10 * np.sum(np.abs(better - worse) < MIN_SIZE_GAP)
        if miss <= 0.5:
            return order
        if miss < best_miss:
            best, best_miss = order, miss
    return best


def _pair_statistics(folder: Path, manifest: dict, eligible) -> dict:
    """``{kind: {frozenset(pair): statistics}}`` of the design's and the eligible gold pairs, as
    :mod:`stimuli.separability` computes them from the files a trial would show, but their sizes: those
    are drawn after the choice (:func:`_deliver_sizes`), independent of the content."""
    from .separability import SIZE_STATISTICS, pair_statistics, shown_pairs

    drawn = {*SIZE_STATISTICS, "larger_file_is_worse", "larger_crop_is_worse"}  # sizes, and which is larger

    keys = {frozenset(p) for p in manifest["design"]["pairs"]} | {frozenset((p.better, p.worse)) for p in eligible}
    design = {"design": {"pairs": [sorted(k) for k in keys]}}
    statistics = {}
    for kind in ("amplified", "original"):
        pairs = shown_pairs(folder / MANIFEST, kind, manifest={**manifest, **design, "gold": []})
        statistics[kind] = {frozenset((p.a_id, p.b_id)): {name: value for name, value in pair_statistics(p).items()
                                                           if name not in drawn} for p in pairs}
    return statistics


def _candidate_gold_entry(manifest: dict, pair, k: int, params: PrepareParameters) -> dict:
    """Manifest entry of gold pair ``k``: the two candidates' own entries (their files), IDs and errors."""
    entries = {c["id"]: c for c in manifest["candidates"]}

    def files(item_id: str) -> dict:
        return {key: value for key, value in entries[item_id].items() if key not in ("id", "source")}

    return {"id": k, "better": files(pair.better), "worse": files(pair.worse),
            "candidates": {"better": pair.better, "worse": pair.worse},
            "errors": {"metric": "interpolation_error", **pair.errors},
            "construction": {"method": "candidate pair", "margin": params.gold_margin,
                             "min_difference": params.gold_min_difference,
                             "chosen_by": "least separable from the design's pairs (stimuli.gold.choose_gold_pairs)"}}


def _crop(image: np.ndarray, box) -> np.ndarray:
    from .zoom import crop

    return crop(image, box)


def _write_file(folder: Path, path: str, image: np.ndarray, params: PrepareParameters) -> None:
    (folder / path).parent.mkdir(parents=True, exist_ok=True)
    write_png(folder / path, image, params.compression)


def _write_item(folder: Path, reference: np.ndarray, image: np.ndarray, prefix: str, name: str, boxes,
                params: PrepareParameters) -> tuple[dict, dict[str, float]]:
    """Write one image as given and amplified, full and cropped, under ``<prefix>original/<name>.png``
    and the like: candidates and gold images alike. Returns the manifest entry (without ``id``) and
    the amplified image's ``interpolation_error`` and ``gmsd``."""
    from .amplify import amplify_with_alpha
    from .metrics import gmsd, interpolation_error

    amplified, alpha_map = amplify_with_alpha(reference, image, params.alpha)
    entry = {"original": f"{prefix}original/{name}.png", "amplified": f"{prefix}amplified/{name}.png",
             "alpha_reduced_fraction": float(np.mean(alpha_map < params.alpha)),
             "alpha_min": float(alpha_map.min()), "crops": []}
    _write_file(folder, entry["original"], image, params)
    _write_file(folder, entry["amplified"], amplified, params)
    for box in boxes:
        paths = {kind: f"crops/{box.rank}/{prefix}{kind}/{name}.png" for kind in ("original", "amplified")}
        _write_file(folder, paths["original"], _crop(image, box), params)
        _write_file(folder, paths["amplified"], _crop(amplified, box), params)
        entry["crops"].append({"rank": box.rank, **paths})
    return entry, {"interpolation_error": interpolation_error(reference, amplified), "gmsd": gmsd(reference, amplified)}


def _write_gold(scene: SceneImages, folder: Path, boxes, params: PrepareParameters, gold, k: int,
                amplified_errors: dict[str, float]) -> dict:
    """Write gold pair ``k`` like candidates (under ``gold/<k>/``); return its manifest entry.

    The entry holds ``id`` (``k``), ``better`` and ``worse`` (paths like a candidate's),
    ``errors`` and ``construction``.

    The errors are recorded for the images as given (``original``, where
    :func:`stimuli.gold.make_gold_pair` checked its rule) and as amplified, where
    the same order is checked here: each pixel's error grows by a factor in
    ``[1, alpha]``, so the worse image's lead is at least ``gold_margin / alpha``.
    """
    from .gold import GoldError

    better, better_measures = _write_item(folder, scene.reference, gold.better, f"gold/{k}/", "better", boxes, params)
    worse, worse_measures = _write_item(folder, scene.reference, gold.worse, f"gold/{k}/", "worse", boxes, params)
    better_error, worse_error = better_measures["interpolation_error"], worse_measures["interpolation_error"]
    amplified = {"candidates": amplified_errors, "better": better_error, "worse": worse_error}
    best = min((e for e in amplified_errors.values() if e > 0), default=0.0)
    if not (worse_error > max(amplified_errors.values()) and better_error < best):
        raise GoldError(f"scene {scene.scene_id!r}: amplified, gold pair {k}'s errors ({better_error:.3f}, "
                        f"{worse_error:.3f}) do not bracket the candidates' ({best:.3f} .. "
                        f"{max(amplified_errors.values()):.3f}); lower the gold better-scale or raise the margin")
    original = {k: v for k, v in gold.errors.items() if k != "metric"}
    return {"id": k, "better": better, "worse": worse,
            "errors": {"metric": gold.errors["metric"], "original": original, "amplified": amplified},
            "construction": gold.construction}


def _write_json(path: Path, data: dict) -> None:
    import json

    write_bytes_atomic(path, (json.dumps(data, indent=2, allow_nan=False) + "\n").encode())


# ---------------------------------------------------------------- atomic output folder

def _check_output(out: Path, overwrite: bool, inputs: Sequence[Path] = ()) -> None:
    if out.exists() and not out.is_dir():
        raise PrepareError(f"{out}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise PrepareError(f"{out}: folder exists and is not empty; pass overwrite=True (--overwrite) to replace it")
    resolved = out.resolve()
    for source in inputs:
        source = Path(source).resolve()
        if source == resolved or resolved in source.parents:
            raise PrepareError(f"{out}: the output folder must not be or contain the input folder {source}")


@contextmanager
def staged_output(out: Path, overwrite: bool) -> Iterator[Path]:
    """A temporary folder beside ``out`` that replaces ``out`` when the block succeeds, else vanishes."""
    created = [p for p in [out.parent, *out.parent.parents] if not p.exists()]
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    try:
        yield staging
        _swap_into_place(staging, out, overwrite)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        for folder in created:  # deepest first: remove the parents this call created
            try:
                folder.rmdir()
            except OSError:
                break
        raise


def _swap_into_place(staging: Path, out: Path, overwrite: bool) -> None:
    os.chmod(staging, FOLDER_MODE)  # mkdtemp made it owner-only; the study is served by other users too
    if not out.exists():
        os.replace(staging, out)
        return
    if not any(out.iterdir()):
        out.rmdir()
        os.replace(staging, out)
        return
    if not overwrite:  # appeared while we were working
        raise PrepareError(f"{out}: folder exists and is not empty; pass overwrite=True (--overwrite) to replace it")
    backup = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=out.parent))
    os.replace(out, backup / "old")
    try:
        os.replace(staging, out)
    except BaseException:
        os.replace(backup / "old", out)
        raise
    finally:
        shutil.rmtree(backup, ignore_errors=True)


# ---------------------------------------------------------------- public entry points

def prepare_scene(scene: SceneImages | Mapping | str | os.PathLike, out_dir: str | os.PathLike, *,
                  alpha: float = 1.5, sigma: float = 20.0, zoom: float = 1.5, top_k: int = 3,
                  degree: int = 6, seed: int = 0, levels: int = 2, pad: int = 16,
                  min_size: tuple[int, int] = (160, 120), aspect: float = 4 / 3, compression: int = 3,
                  gold_margin: float = DEFAULT_PAIR_MARGIN, gold_better_scale: float = 0.5,
                  gold_pairs: int | None = None,
                  gold_min_difference: float = DEFAULT_MIN_DIFFERENCE, reference: str | os.PathLike | None = None,
                  scene_id: str | None = None, overwrite: bool = False, progress: bool = True) -> dict:
    """Amplify, crop and design one scene into ``out_dir`` (layout in the module docstring).

    Parameters
    ----------
    scene : folder path, SceneImages, or mapping with ``"reference"`` and ``"candidates"`` (ID -> image)
        The scene; candidates are ordered by ID everywhere.
    out_dir : path
        Output folder; must not exist or be empty unless ``overwrite``.
    alpha, sigma, zoom, top_k, levels, pad, min_size, aspect :
        Amplification and zoom parameters (see :class:`PrepareParameters`).
    degree, seed :
        Random ``degree``-regular pair design over the candidates, drawn with ``seed``;
        scenes with at most ``degree`` candidates get the full design (recorded as ``"kind": "full"``).
        ``seed`` also seeds the gold images' stochastic rounding.
    gold_margin, gold_min_difference : float
        The gold pairs are pairs of the scene's candidates (:func:`stimuli.gold.eligible_gold_pairs`):
        the worse one's IE and GMSD are at least ``gold_margin`` times the better one's (as given
        and amplified), its IE at least ``gold_min_difference`` 8-bit grey levels above; among
        those, :func:`stimuli.gold.choose_gold_pairs` takes the ones least separable from the
        design's pairs.
    gold_better_scale : float
        Only for a scene without such a pair, whose gold images are then made of its candidates'
        errors (:func:`stimuli.gold.make_gold_pairs`): the best candidate's error scaled by this.
    gold_pairs : int, optional
        Distinct gold pairs of the scene (0: none, so the study can have no quiz or hidden gold);
        fewer when fewer candidate pairs qualify. None (the default): :data:`GOLD_DESIGN_SHARE`
        of the design's pairs when that many qualify, and at least :data:`DEFAULT_GOLD_PAIRS`.
    reference : str or path, optional
        Reference file (name inside the scene folder, or a path) when it is not ``reference.*``.
    scene_id : str, optional
        Defaults to the folder name (``"scene"`` for in-memory scenes without one).
    overwrite : bool
        Replace an existing non-empty ``out_dir``.
    progress : bool
        Progress bar over the candidates (shown only on a terminal).

    Returns
    -------
    dict
        The manifest written to ``out_dir/manifest.json``.

    Raises
    ------
    PrepareError, ImageReadError (both ``ValueError``)
        Bad parameters, unreadable or truncated images, sizes that differ, fewer than
        two candidates, candidates that allow no gold pair (:class:`stimuli.gold.GoldError`),
        an existing output. Nothing is written then.
    """
    params = PrepareParameters(alpha, sigma, zoom, top_k, levels, pad, tuple(min_size), aspect, degree, seed,
                               compression, gold_margin, gold_better_scale, gold_pairs, gold_min_difference)
    params.validate()
    out_dir = Path(out_dir)
    inputs = [Path(scene)] if isinstance(scene, (str, os.PathLike)) else []
    _check_output(out_dir, overwrite, inputs)
    loaded = _as_scene(scene, reference, scene_id)
    with staged_output(out_dir, overwrite) as staging:
        return _write_scene(loaded, staging, params, progress)


def prepare_study(scene_dirs: Sequence[str | os.PathLike], out: str | os.PathLike, *,
                  reference: str | None = None, overwrite: bool = False, progress: bool = True,
                  max_side: int = MAX_SIDE, **parameters) -> dict:
    """Prepare several scene folders into ``out/<scene_id>/`` plus a top-level ``manifest.json``.

    Each entry of ``scene_dirs`` is a scene folder or a folder of scene folders
    (see :func:`scene_folders`). Keyword ``parameters`` are those of
    :func:`prepare_scene`; scene ``k`` (in the order given) draws its design with
    a seed derived from ``seed`` and ``k``, recorded in its manifest. Images with
    a side longer than ``max_side`` are refused before any work (:func:`check_image_sides`).
    Returns the top-level manifest.
    """
    from tqdm import tqdm

    unknown = set(parameters) - {f for f in PrepareParameters.__dataclass_fields__}
    if unknown:
        raise TypeError(f"prepare_study got unexpected parameters {sorted(unknown)}")
    params = PrepareParameters(**{**parameters, "min_size": tuple(parameters.get("min_size", (160, 120)))})
    params.validate()
    out = Path(out)
    folders = [folder for path in scene_dirs for folder in scene_folders(path)]
    if not folders:
        raise PrepareError("no scene folders given")
    names = [f.name for f in folders]
    if duplicates := sorted({n for n in names if names.count(n) > 1}):
        raise PrepareError(f"several scene folders are named {duplicates}; scene IDs must be unique")
    check_image_sides(folders, max_side)
    _check_output(out, overwrite, folders)
    entries = []
    with staged_output(out, overwrite) as staging:
        for k, folder in enumerate(tqdm(folders, desc="scenes", disable=None if progress else True)):
            scene = load_scene(folder, reference)
            scene_seed = int(np.random.SeedSequence([params.seed, k]).generate_state(1)[0])
            scene_params = PrepareParameters(**{**asdict(params), "seed": scene_seed})
            (staging / scene.scene_id).mkdir()
            manifest = _write_scene(scene, staging / scene.scene_id, scene_params, progress)
            entries.append({"scene_id": scene.scene_id, "manifest": f"{scene.scene_id}/{MANIFEST}",
                            "n_candidates": len(scene.candidates), "n_pairs": len(manifest["design"]["pairs"]),
                            "n_gold_pairs": len(manifest["gold"]), "gold_method": _gold_method(manifest),
                            "design_seed": scene_seed, "source": str(folder)})
        top = {"schema_version": SCHEMA_VERSION, "kind": "study", "scenes": entries, "parameters": params.to_dict()}
        _write_json(staging / MANIFEST, top)
        if any(entry["n_gold_pairs"] for entry in entries):
            top["gold_separability"] = _separability(staging / MANIFEST)
            _write_json(staging / MANIFEST, top)
    return top


def _gold_method(manifest: dict) -> str | None:
    """"candidates" (pairs of the scene's candidates), "synthetic" (made of their errors) or None."""
    if not manifest["gold"]:
        return None
    return "candidates" if "candidates" in manifest["gold"][0] else "synthetic"


def _separability(top_manifest: Path) -> dict:
    """``{kind: {"statistic", "auc"}}``: how well the best single statistic a script computes from a
    trial's files tells the study's gold pairs from its real ones (:mod:`stimuli.separability`)."""
    from .separability import separability, shown_pairs

    out = {}
    for kind in ("amplified", "original"):
        name, value = separability(shown_pairs(top_manifest, kind)).best
        out[kind] = {"statistic": name, "auc": round(value, 4)}
    return out
