"""Clips for the motion-matching experiment (HuPerFlow paradigm): the clip manifest.

A clip set is a folder with ``manifest.json`` (paths relative to that folder)::

    {"format": "perceptlab-motion-clips/1",
     "noise": "noise.png",              # optional: 2048x2048 grey 1/f² texture (stimuli.noise)
     "clips": [{"clip_id": "demo_objects", "dataset": "demo", "frame_rate": 30,
                "movie_frames": 15,      # optional: 15 (default) or 10 stimulus frames per movie
                "frames": ["demo_objects/frame_0000.png", ...],
                "flow":   ["demo_objects/flow_0000.flo", ..., null],
                "probes": [{"probe_id": "p00", "x": 120.0, "y": 80.0, "frame": 7}],
                "meta": {...}}]}         # optional, free JSON object (ignored)

``frames`` are images of one size (at least ``movie_frames`` of them).
``flow[i]`` is the ground-truth flow from frame ``i`` to frame ``i + 1``
(Middlebury ``.flo`` or ``.npy`` ``(H, W, 2)``, pixels per frame, ``u`` right,
``v`` down) or ``null``; the list has one entry per frame or one fewer. A
probe at clip frame ``F`` is shown in a movie of clip frames ``F − p`` ..
``F − p + movie_frames − 1`` with ``p = (movie_frames − 1) // 2``
(:func:`movie_window`); its ground truth is ``flow[F]`` at ``(x, y)``,
sampled bilinearly (:func:`bilinear_sample`).

:func:`load_clip_manifest` checks all of it and raises
:class:`ClipManifestError` naming the file and the key, clip or probe.
:func:`import_sintel` makes a clip set from a Sintel-style folder.
"""
from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FORMAT = "perceptlab-motion-clips/1"
MANIFEST_NAME = "manifest.json"
MAX_MANIFEST_BYTES = 64 << 20  # the most of a clip manifest read
DEFAULT_MOVIE_FRAMES = 15
MOVIE_FRAME_CHOICES = (10, 15)

_TOP_KEYS = {"format": True, "clips": True, "noise": False}
_CLIP_KEYS = {"clip_id": True, "dataset": True, "frame_rate": True, "frames": True, "flow": True,
              "probes": True, "movie_frames": False, "meta": False}
_PROBE_KEYS = {"probe_id": True, "x": True, "y": True, "frame": True}

PathLike = str | os.PathLike[str]


class ClipManifestError(ValueError):
    """A clip manifest, or a file it names, is invalid; the message names the file and the key/clip/probe."""


@dataclass(frozen=True)
class Probe:
    """One probe: a location ``(x, y)`` (pixels) on clip frame ``frame`` and its true flow ``(gt_u, gt_v)``."""

    probe_id: str
    x: float
    y: float
    frame: int
    gt_u: float
    gt_v: float


@dataclass(frozen=True)
class Clip:
    """One clip: frame and flow paths (relative to the manifest's folder), size and probes."""

    clip_id: str
    dataset: str
    frame_rate: float
    frames: tuple[str, ...]
    flow: tuple[str | None, ...]
    width: int
    height: int
    probes: tuple[Probe, ...]
    movie_frames: int = DEFAULT_MOVIE_FRAMES


@dataclass(frozen=True)
class ClipManifest:
    """A validated clip manifest; ``root`` is the folder its paths are relative to."""

    path: Path
    root: Path
    noise: str | None
    clips: tuple[Clip, ...]

    def clip(self, clip_id: str) -> Clip:
        """The clip called ``clip_id`` (``KeyError`` if there is none)."""
        for clip in self.clips:
            if clip.clip_id == clip_id:
                return clip
        raise KeyError(clip_id)


# --------------------------------------------------------------------------- helpers

def movie_window(n_clip_frames: int, probe_frame: int, movie_frames: int = DEFAULT_MOVIE_FRAMES
                 ) -> tuple[list[int], int]:
    """Clip frames shown in the movie of a probe, and the probe frame's index among them.

    Parameters
    ----------
    n_clip_frames : int
        Number of frames of the clip.
    probe_frame : int
        Clip frame ``F`` of the probe.
    movie_frames : int
        Stimulus frames per movie (15 or 10).

    Returns
    -------
    (list of int, int)
        Clip frame indices ``F − p .. F − p + movie_frames − 1`` with
        ``p = (movie_frames − 1) // 2``, and ``p``.

    Raises
    ------
    ClipManifestError
        ``movie_frames`` not 10 or 15, or the window does not fit in the clip.
    """
    if movie_frames not in MOVIE_FRAME_CHOICES:
        raise ClipManifestError(f"movie_frames: must be one of {MOVIE_FRAME_CHOICES}, got {movie_frames!r}")
    before = (movie_frames - 1) // 2
    first = probe_frame - before
    last = first + movie_frames - 1
    if first < 0 or last >= n_clip_frames:
        raise ClipManifestError(f"probe frame {probe_frame}: a {movie_frames}-frame movie needs clip frames "
                                f"{first}..{last}, the clip has frames 0..{n_clip_frames - 1}")
    return list(range(first, last + 1)), before


def bilinear_sample(field: np.ndarray, x: float, y: float) -> np.ndarray:
    """Bilinear sample of an ``(H, W, ...)`` array at the real position ``(x, y)`` (x right, y down).

    Pixel centres are at integer coordinates; ``(x, y)`` must lie within
    ``0..W−1`` x ``0..H−1``.
    """
    height, width = field.shape[:2]
    if not (0 <= x <= width - 1 and 0 <= y <= height - 1):
        raise ValueError(f"position ({x}, {y}) is outside the {width}x{height} image")
    x0, y0 = min(math.floor(x), width - 2), min(math.floor(y), height - 2)
    x0, y0 = max(x0, 0), max(y0, 0)
    ax, ay = x - x0, y - y0
    patch = np.asarray(field[y0:y0 + 2, x0:x0 + 2], dtype=np.float64)
    if patch.shape[0] == 1:  # one-row / one-column images
        patch = np.concatenate([patch, patch], axis=0)
    if patch.shape[1] == 1:
        patch = np.concatenate([patch, patch], axis=1)
    top = (1 - ax) * patch[0, 0] + ax * patch[0, 1]
    bottom = (1 - ax) * patch[1, 0] + ax * patch[1, 1]
    return (1 - ay) * top + ay * bottom


def image_size(path: Path) -> tuple[int, int]:
    """``(width, height)`` of an image file, checking the file's integrity without decoding pixels.

    PNG files have every chunk's CRC checked (:meth:`PIL.Image.Image.verify`),
    so a truncated or corrupt frame is caught here rather than in a worker's browser.

    Raises
    ------
    ClipManifestError
        Missing, unreadable, truncated or corrupt file (the message names it).
    """
    from PIL import Image

    try:
        with Image.open(path) as image:
            size = image.size
            image.verify()
    except FileNotFoundError:
        raise ClipManifestError(f"{path}: frame file not found") from None
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as error:
        text = str(error).replace(str(path), "")  # the path itself might contain "truncated"
        reason = "truncated" if "truncated" in text.lower() else f"not a readable image ({text.strip()})"
        raise ClipManifestError(f"{path}: {reason}") from None
    return int(size[0]), int(size[1])


def flow_shape(path: Path) -> tuple[int, int]:
    """``(height, width)`` of a ``.flo`` or ``.npy`` flow file from its header, checking its length.

    Raises
    ------
    ClipManifestError
        Missing, wrong type, corrupt or truncated file (the message names it).
    """
    from .flow_io import FLO_MAGIC_BYTES, MAX_FLO_SIDE

    suffix = path.suffix.lower()
    if not path.is_file():
        raise ClipManifestError(f"{path}: flow file not found")
    if suffix == ".flo":
        with open(path, "rb") as handle:
            header = handle.read(12)
        if len(header) < 12 or header[:4] != FLO_MAGIC_BYTES:
            raise ClipManifestError(f"{path}: not a .flo file (bad magic number or short header)")
        width, height = (int(v) for v in np.frombuffer(header[4:], dtype="<i4"))
        if not (0 < width <= MAX_FLO_SIDE and 0 < height <= MAX_FLO_SIDE):
            raise ClipManifestError(f"{path}: corrupt .flo header: width {width}, height {height}")
        expected = 12 + 8 * width * height
        if path.stat().st_size != expected:
            kind = "truncated" if path.stat().st_size < expected else "has trailing bytes"
            raise ClipManifestError(f"{path}: .flo file {kind}: {width}x{height} needs {expected} bytes, "
                                    f"file has {path.stat().st_size}")
        return height, width
    if suffix == ".npy":
        try:
            array = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError, EOFError) as error:
            raise ClipManifestError(f"{path}: not a readable .npy array ({error})") from None
        if array.ndim != 3 or array.shape[2] != 2 or not np.issubdtype(array.dtype, np.number):
            raise ClipManifestError(f"{path}: a flow array must be numeric (H, W, 2), got {array.dtype} "
                                    f"{array.shape}")
        return int(array.shape[0]), int(array.shape[1])
    raise ClipManifestError(f"{path}: unknown flow file type {suffix!r}; use .flo or .npy")


def read_clip_flow(path: Path) -> np.ndarray:
    """Read a whole flow file; errors become :class:`ClipManifestError` naming the file."""
    from .flow_io import read_flow

    try:
        return read_flow(path)
    except (ValueError, OSError) as error:
        message = str(error)
        raise ClipManifestError(message if str(path) in message else f"{path}: {message}") from None


# --------------------------------------------------------------------------- validation

def _fail(where: str, message: str) -> ClipManifestError:
    return ClipManifestError(f"{where}: {message}")


def _check_keys(node: object, spec: dict[str, bool], where: str) -> dict:
    if not isinstance(node, dict):
        raise _fail(where, f"expected a JSON object, got {type(node).__name__}")
    missing = [key for key, required in spec.items() if required and key not in node]
    if missing:
        raise _fail(where, f"missing key(s) {', '.join(missing)}")
    unknown = sorted(set(node) - set(spec))
    if unknown:
        raise _fail(where, f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(spec)}")
    return node


def _string(value: object, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _fail(where, f"must be a non-empty string, got {value!r}")
    return value


def _number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _fail(where, f"must be a finite number, got {value!r}")
    return float(value)


def _integer(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(where, f"must be an integer, got {value!r}")
    return value


def _relative_file(value: object, where: str) -> str:
    text = _string(value, where)
    if Path(text).is_absolute() or ".." in Path(text).parts:
        raise _fail(where, f"must be a path relative to the manifest's folder, without '..', got {text!r}")
    return text


def _load_json(path: Path) -> dict:
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_MANIFEST_BYTES + 1)  # never more: a path to /dev/zero fills no memory
        if len(data) > MAX_MANIFEST_BYTES:
            raise ClipManifestError(f"{path}: larger than {MAX_MANIFEST_BYTES >> 20} MB, not a clip manifest")
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise ClipManifestError(f"{path}: manifest not found") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ClipManifestError(f"{path}: cannot read the manifest ({error})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ClipManifestError(f"{path}: not valid JSON ({error})") from None


def _validate_frames(root: Path, node: dict, where: str, movie_frames: int) -> tuple[tuple[str, ...], int, int]:
    frames = node["frames"]
    if not isinstance(frames, list) or len(frames) < movie_frames:
        count = len(frames) if isinstance(frames, list) else type(frames).__name__
        raise _fail(f"{where}.frames", f"need a list of at least {movie_frames} image paths, got {count}")
    names = tuple(_relative_file(f, f"{where}.frames[{i}]") for i, f in enumerate(frames))
    sizes = {}
    for name in names:
        sizes.setdefault(image_size(root / name), name)
    if len(sizes) > 1:
        shown = "; ".join(f"{w}x{h} ({n})" for (w, h), n in sizes.items())
        raise _fail(f"{where}.frames", f"frames differ in size: {shown}")
    (width, height), = sizes
    return names, width, height


def _validate_flow(root: Path, node: dict, where: str, n_frames: int, width: int, height: int
                   ) -> tuple[str | None, ...]:
    flows = node["flow"]
    if not isinstance(flows, list) or len(flows) not in (n_frames - 1, n_frames):
        count = len(flows) if isinstance(flows, list) else type(flows).__name__
        raise _fail(f"{where}.flow", f"need a list of {n_frames - 1} or {n_frames} entries (flow[i] = frame i "
                                     f"-> i+1, or null), got {count}")
    if len(flows) == n_frames and flows[-1] is not None:
        raise _fail(f"{where}.flow[{n_frames - 1}]", "the last frame has no next frame: must be null")
    names = []
    for index, entry in enumerate(flows):
        if entry is None:
            names.append(None)
            continue
        name = _relative_file(entry, f"{where}.flow[{index}]")
        shape = flow_shape(root / name)
        if shape != (height, width):
            raise _fail(f"{where}.flow[{index}]", f"{root / name}: flow is {shape[1]}x{shape[0]}, "
                                                  f"frames are {width}x{height}")
        names.append(name)
    return tuple(names)


def _validate_probe(root: Path, node: object, where: str, clip: dict, flow_cache: dict) -> Probe:
    if isinstance(node, dict) and isinstance(node.get("probe_id"), str):
        where = f"{where} {node['probe_id']!r}"
    node = _check_keys(node, _PROBE_KEYS, where)
    probe_id = _string(node["probe_id"], f"{where}.probe_id")
    x, y = _number(node["x"], f"{where}.x"), _number(node["y"], f"{where}.y")
    frame = _integer(node["frame"], f"{where}.frame")
    width, height = clip["width"], clip["height"]
    if not (0 <= x <= width - 1 and 0 <= y <= height - 1):
        raise _fail(where, f"probe ({x}, {y}) is outside the {width}x{height} frames")
    n_frames = len(clip["frames"])
    try:
        movie_window(n_frames, frame, clip["movie_frames"])
    except ClipManifestError as error:
        raise _fail(where, str(error)) from None
    flow_name = clip["flow"][frame] if frame < len(clip["flow"]) else None
    if flow_name is None:
        raise _fail(where, f"frame {frame} has no flow (flow[{frame}] is null or missing)")
    if flow_name not in flow_cache:
        flow_cache[flow_name] = read_clip_flow(root / flow_name)
    gt_u, gt_v = bilinear_sample(flow_cache[flow_name], x, y)
    if not (math.isfinite(gt_u) and math.isfinite(gt_v)):
        raise _fail(where, f"the flow {root / flow_name} is unknown (NaN) at ({x}, {y})")
    return Probe(probe_id=probe_id, x=x, y=y, frame=frame, gt_u=float(gt_u), gt_v=float(gt_v))


def _validate_clip(root: Path, node: object, where: str) -> Clip:
    if isinstance(node, dict) and isinstance(node.get("clip_id"), str) and node["clip_id"].strip():
        where = f"clip {node['clip_id']!r}"
    try:
        return _validate_clip_fields(root, node, where)
    except ClipManifestError as error:
        message = str(error)  # file-level errors (a truncated frame ...) get the clip's name too
        raise ClipManifestError(message if message.startswith(where) else f"{where}: {message}") from None


def _validate_clip_fields(root: Path, node: object, where: str) -> Clip:
    node = _check_keys(node, _CLIP_KEYS, where)
    clip_id = _string(node["clip_id"], f"{where}.clip_id")
    dataset = _string(node["dataset"], f"{where}.dataset")
    frame_rate = _number(node["frame_rate"], f"{where}.frame_rate")
    if frame_rate <= 0:
        raise _fail(f"{where}.frame_rate", f"must be positive, got {frame_rate}")
    movie_frames = _integer(node.get("movie_frames", DEFAULT_MOVIE_FRAMES), f"{where}.movie_frames")
    if movie_frames not in MOVIE_FRAME_CHOICES:
        raise _fail(f"{where}.movie_frames", f"must be one of {MOVIE_FRAME_CHOICES}, got {movie_frames}")
    if "meta" in node and not isinstance(node["meta"], dict):
        raise _fail(f"{where}.meta", "must be a JSON object")
    frames, width, height = _validate_frames(root, node, where, movie_frames)
    flow = _validate_flow(root, node, where, len(frames), width, height)
    if not isinstance(node["probes"], list) or not node["probes"]:
        raise _fail(f"{where}.probes", "need a non-empty list of probes")
    info = {"width": width, "height": height, "frames": frames, "flow": flow, "movie_frames": movie_frames}
    cache: dict = {}
    probes = tuple(_validate_probe(root, p, f"{where} probe #{i}", info, cache) for i, p in enumerate(node["probes"]))
    duplicates = _duplicates(p.probe_id for p in probes)
    if duplicates:
        raise _fail(f"{where}.probes", f"duplicate probe_id(s) {', '.join(duplicates)}")
    return Clip(clip_id=clip_id, dataset=dataset, frame_rate=frame_rate, frames=frames, flow=flow,
                width=width, height=height, probes=probes, movie_frames=movie_frames)


def _duplicates(values: Iterable[str]) -> list[str]:
    seen, repeated = set(), []
    for value in values:
        if value in seen and value not in repeated:
            repeated.append(value)
        seen.add(value)
    return repeated


def load_clip_manifest(path: PathLike) -> ClipManifest:
    """Read and validate a clip manifest (layout in the module docstring).

    Checks the format string, every key and its type, unique clip and probe
    IDs, that frames exist, are intact and share one size, that flow files
    exist, are intact and match the frames' size, that probes lie inside the
    frames, have a flow at their frame and a full movie window; then reads the
    probe frames' flows for the ground truth (bilinear at ``(x, y)``).

    Parameters
    ----------
    path : str or PathLike
        ``manifest.json``, or the folder holding it.

    Returns
    -------
    ClipManifest

    Raises
    ------
    ClipManifestError
        Anything invalid; the message names the file and the key, clip or probe.
    """
    path = Path(path)
    if path.is_dir():
        path = path / MANIFEST_NAME
    data = _check_keys(_load_json(path), _TOP_KEYS, str(path))
    if data["format"] != FORMAT:
        raise ClipManifestError(f"{path}: format must be {FORMAT!r}, got {data['format']!r}")
    root = path.parent
    noise = data.get("noise")
    if noise is not None:
        noise = _relative_file(noise, f"{path}: noise")
        try:
            image_size(root / noise)
        except ClipManifestError as error:
            raise ClipManifestError(f"{path}: noise: {error}") from None
    if not isinstance(data["clips"], list) or not data["clips"]:
        raise ClipManifestError(f"{path}: clips must be a non-empty list")
    try:
        clips = tuple(_validate_clip(root, node, f"clips[{i}]") for i, node in enumerate(data["clips"]))
    except ClipManifestError as error:
        raise ClipManifestError(f"{path}: {error}") from None
    duplicates = _duplicates(c.clip_id for c in clips)
    if duplicates:
        raise ClipManifestError(f"{path}: duplicate clip_id(s) {', '.join(duplicates)}")
    return ClipManifest(path=path, root=root, noise=noise, clips=clips)


def write_clip_manifest(path: PathLike, clips: list[dict], noise: str | None) -> Path:
    """Write ``manifest.json`` (atomically) from clip dicts in the manifest layout.

    ``path`` may be the file or its folder. The result is not validated here:
    call :func:`load_clip_manifest` on it. Returns the file's path.
    """
    from .io import write_bytes_atomic

    path = Path(path)
    if path.is_dir() or path.suffix.lower() != ".json":
        path = path / MANIFEST_NAME
    data: dict = {"format": FORMAT}
    if noise is not None:
        data["noise"] = noise
    data["clips"] = clips
    return write_bytes_atomic(path, (json.dumps(data, indent=1, allow_nan=False) + "\n").encode())


# --------------------------------------------------------------------------- Sintel import

def _place(source: Path, target: Path) -> None:
    """Hard-link ``source`` to ``target`` (no copy of big frames), copying across file systems."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def choose_probes(flow: np.ndarray, n: int, rng: np.random.Generator, *, min_speed: float = 1.0,
                  max_speed: float = 20.0, border: int = 60, min_distance: float = 40.0) -> list[tuple[int, int]]:
    """Pick up to ``n`` spread-out pixel positions ``(x, y)`` with ``min_speed <= |flow| <= max_speed``.

    Candidates lie at least ``border`` px from the image edges (the 120 px cue
    and aperture stay inside the frame) and have a known flow; they are taken
    in a seeded random order, each at least ``min_distance`` px from those
    already taken (the distance shrinks when too few fit).
    """
    height, width = flow.shape[:2]
    border = min(border, (min(height, width) - 1) // 2)
    speed = np.hypot(flow[..., 0], flow[..., 1])
    with np.errstate(invalid="ignore"):
        ok = (speed >= min_speed) & (speed <= max_speed)
    ok[:border] = ok[height - border:] = False
    ok[:, :border] = ok[:, width - border:] = False
    ys, xs = np.nonzero(ok)
    if len(xs) == 0:
        return []
    order = rng.permutation(len(xs))
    distance = float(min_distance)
    while True:
        chosen: list[tuple[int, int]] = []
        for index in order:
            x, y = int(xs[index]), int(ys[index])
            if all((x - cx) ** 2 + (y - cy) ** 2 >= distance ** 2 for cx, cy in chosen):
                chosen.append((x, y))
                if len(chosen) == n:
                    return chosen
        if distance < 1:
            return chosen
        distance /= 2


def _sintel_scenes(root: Path, pass_name: str, scenes: Iterable[str] | None) -> list[str]:
    frames_dir, flow_dir = root / "training" / pass_name, root / "training" / "flow"
    for folder in (frames_dir, flow_dir):
        if not folder.is_dir():
            raise ClipManifestError(f"{folder}: not found (expected the Sintel layout "
                                    f"ROOT/training/{{clean,final,flow}}/<scene>/)")
    available = sorted(p.name for p in frames_dir.iterdir() if p.is_dir() and (flow_dir / p.name).is_dir())
    if scenes is None:
        chosen = available
    else:
        chosen = list(scenes)
        missing = [s for s in chosen if s not in available]
        if missing:
            raise ClipManifestError(f"{root}: scene(s) {', '.join(missing)} not found; available: "
                                    f"{', '.join(available) or 'none'}")
    if not chosen:
        raise ClipManifestError(f"{frames_dir}: no scene folders with flow")
    return chosen


def _import_scene(root: Path, out: Path, scene: str, pass_name: str, probes_per_clip: int, movie_frames: int,
                  max_speed: float, rng: np.random.Generator) -> dict:
    frames_dir, flow_dir = root / "training" / pass_name / scene, root / "training" / "flow" / scene
    frames = sorted(p for p in frames_dir.iterdir() if p.suffix.lower() == ".png")
    if len(frames) < movie_frames:
        raise ClipManifestError(f"{frames_dir}: {len(frames)} frames, a clip needs at least {movie_frames}")
    flows = []
    for frame in frames[:-1]:
        flo = flow_dir / (frame.stem + ".flo")
        if not flo.is_file():
            raise ClipManifestError(f"{flo}: flow file not found (Sintel: flow/<scene>/frame_NNNN.flo "
                                    f"is frame NNNN -> NNNN+1)")
        flows.append(flo)
    # Sintel's probes share one frame per clip, as in HuPerFlow: the middle frame
    # that still has a full movie window and a flow.
    _, before = movie_window(len(frames), (movie_frames - 1) // 2, movie_frames)
    probe_frame = min(max(len(frames) // 2, before), len(frames) - movie_frames + before)
    flow = read_clip_flow(flows[probe_frame])
    positions = choose_probes(flow, probes_per_clip, rng, max_speed=max_speed)
    if not positions:
        raise ClipManifestError(f"{flows[probe_frame]}: no pixel with a speed in 1..{max_speed} px/frame "
                                f"away from the borders")
    clip_id = f"sintel_{pass_name}_{scene}"
    for source in [*frames, *flows]:
        kind = "frames" if source.suffix.lower() == ".png" else "flow"
        _place(source, out / clip_id / kind / source.name)
    return {"clip_id": clip_id, "dataset": "sintel", "frame_rate": 24, "movie_frames": movie_frames,
            "frames": [f"{clip_id}/frames/{f.name}" for f in frames],
            "flow": [f"{clip_id}/flow/{f.name}" for f in flows],
            "probes": [{"probe_id": f"p{i:02d}", "x": float(x), "y": float(y), "frame": probe_frame}
                       for i, (x, y) in enumerate(positions)],
            "meta": {"source": str(frames_dir), "pass": pass_name, "scene": scene}}


def import_sintel(root: PathLike, out: PathLike, *, pass_name: str = "final", scenes: Iterable[str] | None = None,
                  probes_per_clip: int = 10, movie_frames: int = DEFAULT_MOVIE_FRAMES, max_speed: float = 20,
                  seed: int = 0, progress: bool = False) -> Path:
    """Make a clip set from a Sintel-style folder (MPI Sintel training set layout).

    Reads ``root/training/<pass_name>/<scene>/frame_NNNN.png`` and
    ``root/training/flow/<scene>/frame_NNNN.flo`` (frame NNNN -> NNNN+1);
    hard-links (or copies) them into ``out/<clip_id>/{frames,flow}/`` and
    writes ``out/manifest.json`` with one clip per scene. Probes share one
    frame per clip (the middle frame with a full movie window) and are drawn
    with a seeded generator among pixels with speed 1..``max_speed``, spread
    out and away from the borders (:func:`choose_probes`). Frame rate is 24 Hz
    as rendered; the experiment shows clips at 30 Hz like HuPerFlow.

    Parameters
    ----------
    root, out : str or PathLike
        Sintel folder, and the folder to write (created; may exist if empty).
    pass_name : str
        ``"final"`` or ``"clean"``.
    scenes : iterable of str or None
        Scene names; ``None`` = every scene that has both frames and flow.
    probes_per_clip, movie_frames, max_speed, seed
        Probes per clip, movie length (15 or 10), largest probe speed
        (px/frame), random seed.
    progress : bool
        Show a progress bar.

    Returns
    -------
    Path
        The written ``manifest.json`` (validated by :func:`load_clip_manifest`).

    Raises
    ------
    ClipManifestError
        Bad layout, parameters or files; ``out`` not empty.
    """
    from tqdm import tqdm

    from .prepare import staged_output

    root, out = Path(root), Path(out)
    if pass_name not in ("final", "clean"):
        raise ClipManifestError(f"pass_name: must be 'final' or 'clean', got {pass_name!r}")
    if movie_frames not in MOVIE_FRAME_CHOICES:
        raise ClipManifestError(f"movie_frames: must be one of {MOVIE_FRAME_CHOICES}, got {movie_frames!r}")
    if isinstance(probes_per_clip, bool) or int(probes_per_clip) != probes_per_clip or probes_per_clip < 1:
        raise ClipManifestError(f"probes_per_clip: need a positive integer, got {probes_per_clip!r}")
    if not max_speed >= 1:
        raise ClipManifestError(f"max_speed: need at least 1 px/frame, got {max_speed!r}")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ClipManifestError(f"{out}: already exists and is not an empty folder")
    names = _sintel_scenes(root, pass_name, scenes)
    rngs = np.random.default_rng(seed).spawn(len(names))
    # Built beside ``out`` and renamed at the end: a failed import leaves nothing behind.
    with staged_output(out.absolute(), overwrite=False) as building:
        clips = [_import_scene(root, building, scene, pass_name, int(probes_per_clip), movie_frames, max_speed,
                               rng)
                 for scene, rng in tqdm(list(zip(names, rngs)), desc="sintel scenes", unit="scene",
                                        disable=not progress)]
        noise = _write_noise(building, seed)
        load_clip_manifest(write_clip_manifest(building / MANIFEST_NAME, clips, noise))
    return out / MANIFEST_NAME


def _write_noise(out: Path, seed: int) -> str:
    """Write the matching texture ``noise.png`` (2048² 1/f² noise) into ``out``; returns its name."""
    from .noise import brownian_noise

    write_grey_png(out / "noise.png", brownian_noise(2048, rng=np.random.default_rng([seed, 2048])))
    return "noise.png"


def write_grey_png(path: Path, image: np.ndarray) -> Path:
    """Write a 2-D uint8 image as a single-channel PNG, atomically."""
    import cv2

    from .io import write_bytes_atomic

    ok, buffer = cv2.imencode(".png", np.ascontiguousarray(image), [cv2.IMWRITE_PNG_COMPRESSION, 3])
    if not ok:  # pragma: no cover - OpenCV only fails here on exotic builds
        raise RuntimeError("OpenCV could not encode the PNG")
    return write_bytes_atomic(path, buffer.tobytes())
