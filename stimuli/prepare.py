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
    gold/degraded.png                 a strongly degraded reference for gold trials
    crops/<rank>/gold/degraded.png    and its crops (the reference is the correct answer)

:func:`prepare_study` writes several scenes into one subfolder each plus a
top-level ``manifest.json``. Both build into a temporary folder beside the
output and rename it into place at the end: on any error nothing is left
behind, and an existing non-empty output is replaced only with ``overwrite=True``.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .io import FOLDER_MODE, StimulusInputError, is_image_file, read_image, write_bytes_atomic, write_png

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"


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
    top_k: int = 3                # zoom regions per scene
    levels: int = 2               # Otsu classes (2: Otsu, >= 3: multi-Otsu, top class kept)
    pad: int = 16                 # pixels around each region before growing
    min_size: tuple[int, int] = (160, 120)  # smallest crop (width, height)
    aspect: float = 4 / 3         # crop width / height
    degree: int = 6               # comparisons per candidate in the random regular design
    seed: int = 0                 # seed of the pair design
    compression: int = 3          # PNG zlib level
    gold_blur: float = 4.0        # Gaussian blur (px) of the gold trials' degraded reference
    gold_noise: float = 0.08      # noise SD (fraction of full range) of the degraded reference

    def validate(self) -> None:
        """Raise :class:`PrepareError` naming the first bad parameter."""
        checks = [
            (np.isfinite(self.alpha) and self.alpha > 1, f"alpha must be > 1 (the amplification factor), got {self.alpha}"),
            (self.sigma > 0, f"sigma must be > 0 pixels, got {self.sigma}"),
            (self.zoom > 0, f"zoom must be > 0, got {self.zoom}"),
            (self.top_k >= 1, f"top_k must be >= 1, got {self.top_k}"),
            (self.levels >= 2, f"levels must be >= 2, got {self.levels}"),
            (self.pad >= 0, f"pad must be >= 0, got {self.pad}"),
            (len(self.min_size) == 2 and min(self.min_size) >= 1, f"min_size must be (width, height) >= 1, got {self.min_size}"),
            (self.aspect > 0, f"aspect must be > 0, got {self.aspect}"),
            (self.degree >= 2, f"degree must be >= 2 (a connected design), got {self.degree}"),
            (0 <= self.compression <= 9, f"compression must be 0..9, got {self.compression}"),
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
    """Scene folders under ``path``: ``path`` itself when it holds images, else its subfolders that do."""
    path = Path(path)
    if not path.is_dir():
        raise PrepareError(f"{path}: not a folder")
    if any(is_image_file(p) for p in path.iterdir()):
        return [path]
    scenes = sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith(".")
                    and any(is_image_file(q) for q in p.iterdir()))
    if not scenes:
        raise PrepareError(f"{path}: no images and no subfolders with images")
    return scenes


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
    from .amplify import amplify_with_alpha
    from .zoom import average_error, crop, draw_overview, find_crop_boxes

    ids = sorted(scene.candidates)
    design = scene_design(ids, params.degree, params.seed)  # before any work: odd n * degree is an input error
    boxes = find_crop_boxes(average_error(scene.reference, (scene.candidates[i] for i in ids)),
                            sigma=params.sigma, top_k=params.top_k, levels=params.levels, pad=params.pad,
                            min_size=params.min_size, aspect=params.aspect, zoom=params.zoom)
    for sub in ["original", "amplified"] + [f"crops/{b.rank}/{kind}" for b in boxes for kind in ("original", "amplified")]:
        (folder / sub).mkdir(parents=True, exist_ok=True)
    png = params.compression
    write_png(folder / "reference.png", scene.reference, png)
    write_png(folder / "overview.png", draw_overview(scene.reference, boxes), png)
    for box in boxes:
        write_png(folder / f"crops/{box.rank}/reference.png", crop(scene.reference, box), png)
    gold = _write_gold(scene, folder, boxes, params)
    candidates = []
    for item_id in _progress(ids, len(ids), scene.scene_id, progress):
        image = scene.candidates[item_id]
        amplified, alpha_map = amplify_with_alpha(scene.reference, image, params.alpha)
        entry = {"id": item_id, "original": f"original/{item_id}.png", "amplified": f"amplified/{item_id}.png",
                 "alpha_reduced_fraction": float(np.mean(alpha_map < params.alpha)),
                 "alpha_min": float(alpha_map.min()), "crops": []}
        if item_id in scene.sources:
            entry["source"] = scene.sources[item_id]
        write_png(folder / entry["original"], image, png)
        write_png(folder / entry["amplified"], amplified, png)
        for box in boxes:
            paths = {kind: f"crops/{box.rank}/{kind}/{item_id}.png" for kind in ("original", "amplified")}
            write_png(folder / paths["original"], crop(image, box), png)
            write_png(folder / paths["amplified"], crop(amplified, box), png)
            entry["crops"].append({"rank": box.rank, **paths})
        candidates.append(entry)
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
        "gold": gold,
    }
    _write_json(folder / MANIFEST, manifest)
    return manifest


def _write_gold(scene: SceneImages, folder: Path, boxes, params: PrepareParameters) -> dict:
    """Write the degraded reference of gold trials and its crops; return the manifest entry."""
    from .gold import degrade_for_gold
    from .zoom import crop

    degraded = degrade_for_gold(scene.reference, params.gold_blur, params.gold_noise, seed=params.seed)
    entry = {"degraded": "gold/degraded.png", "better": "reference", "crops": [],
             "degradation": {"blur_sigma": params.gold_blur, "noise_sd": params.gold_noise, "seed": params.seed}}
    (folder / "gold").mkdir(exist_ok=True)
    write_png(folder / entry["degraded"], degraded, params.compression)
    for box in boxes:
        path = f"crops/{box.rank}/gold/degraded.png"
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        write_png(folder / path, crop(degraded, box), params.compression)
        entry["crops"].append({"rank": box.rank, "degraded": path})
    return entry


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
                  reference: str | os.PathLike | None = None, scene_id: str | None = None,
                  overwrite: bool = False, progress: bool = True) -> dict:
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
        two candidates, an existing output. Nothing is written then.
    """
    params = PrepareParameters(alpha, sigma, zoom, top_k, levels, pad, tuple(min_size), aspect, degree, seed,
                               compression)
    params.validate()
    out_dir = Path(out_dir)
    inputs = [Path(scene)] if isinstance(scene, (str, os.PathLike)) else []
    _check_output(out_dir, overwrite, inputs)
    loaded = _as_scene(scene, reference, scene_id)
    with staged_output(out_dir, overwrite) as staging:
        return _write_scene(loaded, staging, params, progress)


def prepare_study(scene_dirs: Sequence[str | os.PathLike], out: str | os.PathLike, *,
                  reference: str | None = None, overwrite: bool = False, progress: bool = True,
                  **parameters) -> dict:
    """Prepare several scene folders into ``out/<scene_id>/`` plus a top-level ``manifest.json``.

    Each entry of ``scene_dirs`` is a scene folder or a folder of scene folders
    (see :func:`scene_folders`). Keyword ``parameters`` are those of
    :func:`prepare_scene`; scene ``k`` (in the order given) draws its design with
    a seed derived from ``seed`` and ``k``, recorded in its manifest.
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
                            "design_seed": scene_seed, "source": str(folder)})
        top = {"schema_version": SCHEMA_VERSION, "kind": "study", "scenes": entries, "parameters": params.to_dict()}
        _write_json(staging / MANIFEST, top)
    return top
