"""How well a script tells gold trials from real ones by what it downloads.

A paired-comparison trial shows three images, each full and as zoom crops: the reference and two
candidates (a random one on each side). A script sees their bytes (and so their sizes, the
``Content-Length``), decodes them (dimensions, crop geometry) and can compare each side with the
reference (errors). Headers tell nothing more (``server/views/stimuli.py``). This module computes,
for every real pair of a prepared study and every gold pair, the statistics such a script can
compute from those files, and the AUC of each as a gold-vs-real classifier:

``AUC = P(statistic of a gold trial > that of a real trial)`` (ties count half), reported as
``max(AUC, 1 - AUC)`` since a script may use either direction; 0.5 is chance, 1.0 a perfect
separation. Every statistic is symmetric in the two sides (which side a candidate lands on is
random), except that the "larger file is the worse image" indicator pairs them up.

What may tell and what may not: a statistic that needs no decoding (the sizes a ``HEAD`` request gives,
their ratio, which file is smaller, the PNG chunks) must answer no gold pair better than chance
(:data:`SIZE_STATISTICS`, :func:`smaller_file_bot`; ``stimuli prepare`` draws every side file's size apart
from its content). A statistic that parses the deflate stream (:func:`deflate_body`) or decodes the pixels
(the errors to the reference) may tell what the pixels tell: a script that decodes can answer gold and
real pairs alike as a metric would, which no choice of gold prevents; :func:`stimuli.gold.choose_gold_pairs`
keeps those AUCs low and the analysis's machine-agreement test looks for such voters. How often a pair
recurs across a study's workers is :func:`recurrence_auc`'s.

Real trials are spread evenly over a set's design pairs (each gets ``votes_per_pair``), gold trials
evenly over the gold pairs, so the AUC over pairs is the AUC over trials when the scenes have equal
numbers of pairs (as the demo and ``stimuli prepare`` output with equal candidate counts do).
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

#: The statistics, by name: what a script computes from a trial's downloads.
STATISTICS = (
    "full_bytes_small", "full_bytes_large", "full_bytes_ratio", "full_bytes_sum",
    "crop_bytes_small", "crop_bytes_large", "crop_bytes_ratio",
    "width", "height", "crop_count", "crop_width", "crop_height",
    "error_low", "error_high", "error_ratio", "error_difference",
    "crop_error_low", "crop_error_high", "crop_error_ratio",
    "larger_file_is_worse", "larger_crop_is_worse",
)

#: The statistics a script gets from the files' sizes alone (a ``HEAD`` request each), no decoding.
SIZE_STATISTICS = ("full_bytes_small", "full_bytes_large", "full_bytes_ratio", "full_bytes_sum",
                   "crop_bytes_small", "crop_bytes_large", "crop_bytes_ratio")


_CHUNK = 1 << 22  # comparisons per block in auc_matrix


@dataclass(frozen=True)
class ShownImage:
    """One side of a trial as files: the full image and its crops (absolute paths)."""

    full: Path
    crops: tuple[Path, ...]


@dataclass(frozen=True)
class ShownPair:
    """A pair as a worker's browser gets it."""

    scene: str
    is_gold: bool
    reference: ShownImage
    a: ShownImage
    b: ShownImage
    a_id: str = ""
    b_id: str = ""


def shown_pairs(path: str | os.PathLike, stimulus: str = "amplified", manifest: Mapping | None = None
                ) -> list[ShownPair]:
    """Every design pair and gold pair of a prepared study (or scene), as the files a trial shows.

    Parameters
    ----------
    path : path
        A study's top-level ``manifest.json`` or one scene's (``stimuli prepare`` output).
    stimulus : {"amplified", "original"}
        Which images the study shows (its ``[design] stimulus``).
    manifest : mapping, optional
        The scene manifest's content, when it is not (yet) the file at ``path``.
    """
    path = Path(path)
    data = manifest if manifest is not None else json.loads(path.read_text())
    if data.get("kind") == "study":
        return [pair for entry in data["scenes"] for pair in shown_pairs(path.parent / entry["manifest"], stimulus)]
    folder = path.parent

    def image(entry: Mapping) -> ShownImage:
        crops = sorted(entry["crops"], key=lambda c: c["rank"])
        return ShownImage(folder / entry[stimulus], tuple(folder / c[stimulus] for c in crops))

    reference = ShownImage(folder / data["reference"]["path"], tuple(folder / p for p in data["reference"]["crops"]))
    candidates = {c["id"]: image(c) for c in data["candidates"]}
    scene = data["scene_id"]
    pairs = [ShownPair(scene, False, reference, candidates[a], candidates[b], a, b) for a, b in data["design"]["pairs"]]
    for gold in data.get("gold") or []:
        ids = gold.get("candidates", {})
        pairs.append(ShownPair(scene, True, reference, image(gold["better"]), image(gold["worse"]),
                               ids.get("better", ""), ids.get("worse", "")))
    return pairs


def _version(path: Path) -> tuple[Path, int, int]:
    """A cache key that changes when the file does (prepare may rewrite a path)."""
    stat = path.stat()
    return path, stat.st_mtime_ns, stat.st_size


def _decoded(path: Path) -> np.ndarray:
    return _decoded_version(_version(path))


@lru_cache(maxsize=1024)
def _decoded_version(version: tuple[Path, int, int]) -> np.ndarray:
    from .io import read_image

    return read_image(version[0])


def _error(reference: Path, image: Path) -> float:
    return _error_versions(_version(reference), _version(image))


@lru_cache(maxsize=1 << 14)
def _error_versions(reference: tuple[Path, int, int], image: tuple[Path, int, int]) -> float:
    from .metrics import interpolation_error

    return interpolation_error(_decoded_version(reference), _decoded_version(image))


def _crop_error(reference: ShownImage, image: ShownImage) -> float:
    """RMS error over all crops together (what a script comparing the zoomed views computes)."""
    total = count = 0.0
    for ref, crop in zip(reference.crops, image.crops):
        total += _error(ref, crop) ** 2 * _decoded(ref).shape[0] * _decoded(ref).shape[1]
        count += _decoded(ref).shape[0] * _decoded(ref).shape[1]
    return float(np.sqrt(total / count)) if count else 0.0


def _ratio(low: float, high: float) -> float:
    return high / low if low > 0 else np.inf


def pair_statistics(pair: ShownPair) -> dict[str, float]:
    """The :data:`STATISTICS` of one pair, computed from its files alone."""
    sizes = [pair.a.full.stat().st_size, pair.b.full.stat().st_size]
    crop_sizes = [sum(p.stat().st_size for p in side.crops) for side in (pair.a, pair.b)]
    errors = [_error(pair.reference.full, side.full) for side in (pair.a, pair.b)]
    crop_errors = [_crop_error(pair.reference, side) for side in (pair.a, pair.b)]
    height, width = _decoded(pair.a.full).shape[:2]
    first_crop = _decoded(pair.a.crops[0]).shape[:2] if pair.a.crops else (0, 0)
    larger, larger_crop = int(np.argmax(sizes)), int(np.argmax(crop_sizes))
    return {
        "full_bytes_small": min(sizes), "full_bytes_large": max(sizes),
        "full_bytes_ratio": _ratio(min(sizes), max(sizes)), "full_bytes_sum": sum(sizes),
        "crop_bytes_small": min(crop_sizes), "crop_bytes_large": max(crop_sizes),
        "crop_bytes_ratio": _ratio(min(crop_sizes), max(crop_sizes)),
        "width": width, "height": height, "crop_count": len(pair.a.crops),
        "crop_width": first_crop[1], "crop_height": first_crop[0],
        "error_low": min(errors), "error_high": max(errors), "error_ratio": _ratio(min(errors), max(errors)),
        "error_difference": max(errors) - min(errors),
        "crop_error_low": min(crop_errors), "crop_error_high": max(crop_errors),
        "crop_error_ratio": _ratio(min(crop_errors), max(crop_errors)),
        "larger_file_is_worse": float(errors[larger] >= errors[1 - larger]),
        "larger_crop_is_worse": float(crop_errors[larger_crop] >= crop_errors[1 - larger_crop]),
    }


def auc_matrix(gold: np.ndarray, real: np.ndarray) -> np.ndarray:
    """``out[i, j]``: the share of real rows below gold row ``i`` in column ``j`` (ties count half).

    The AUC of column ``j`` for a set of gold rows is the mean of their ``out[:, j]``.

    Parameters
    ----------
    gold : ndarray, shape (G, S)
    real : ndarray, shape (R, S), R >= 1
    """
    gold, real = np.asarray(gold, float), np.asarray(real, float)
    if not len(real):
        raise ValueError("need at least one real value")
    out = np.empty(gold.shape)
    step = max(1, _CHUNK // max(1, real.size))  # gold rows per block: bounded memory for big scenes
    for start in range(0, len(gold), step):
        block = gold[start:start + step, None, :]
        out[start:start + step] = (real[None] < block).mean(axis=1) + 0.5 * (real[None] == block).mean(axis=1)
    return out


def auc(gold: Sequence[float], real: Sequence[float]) -> float:
    """``P(gold > real) + P(gold == real) / 2`` over all gold-real combinations (Mann-Whitney)."""
    gold, real = np.asarray(gold, float), np.asarray(real, float)
    if not len(gold) or not len(real):
        raise ValueError("need at least one gold and one real value")
    return float(auc_matrix(gold[:, None], real[:, None]).mean())


@dataclass(frozen=True)
class Separability:
    """The AUC of each statistic (folded to >= 0.5) and the best one."""

    aucs: dict[str, float]
    n_gold: int
    n_real: int

    @property
    def best(self) -> tuple[str, float]:
        """(statistic, AUC) of the statistic that separates gold from real pairs best."""
        name = max(self.aucs, key=self.aucs.get)
        return name, self.aucs[name]

    def table(self) -> str:
        """The statistics by AUC, best first, one line each."""
        rows = sorted(self.aucs.items(), key=lambda kv: -kv[1])
        return "\n".join(f"  {name:<22} {value:.3f}" for name, value in rows)


def separability(pairs: Iterable[ShownPair]) -> Separability:
    """The AUC of every statistic of :data:`STATISTICS`, gold pairs against real ones."""
    rows = [(pair.is_gold, pair_statistics(pair)) for pair in pairs]
    gold = [stats for is_gold, stats in rows if is_gold]
    real = [stats for is_gold, stats in rows if not is_gold]
    aucs = {}
    for name in STATISTICS:
        value = auc([s[name] for s in gold], [s[name] for s in real])
        aucs[name] = max(value, 1.0 - value)
    return Separability(aucs, len(gold), len(real))


def file_size(path: Path) -> float:
    """A file's size in bytes: what a ``HEAD`` request's ``Content-Length`` tells."""
    return float(Path(path).stat().st_size)


def deflate_body(path: Path) -> float:
    """The length of a PNG's compressed stream before its padding (:func:`stream_statistics`): a parsing
    script's measure of how well the pixels compress, a decoding statistic."""
    return stream_statistics(Path(path).read_bytes())["deflate_body"]


def smaller_file_bot(pairs: Iterable[ShownPair], measure=file_size) -> float:
    """The share of gold trials a script voting for the side whose full image is smaller by ``measure``
    answers right (ties half): the better side of a gold pair is its ``a``. ``1 -`` this is the share the
    bot voting for the larger one gets. With the default :func:`file_size` it needs no decoding, only two
    sizes (a ``HEAD`` request each); with :func:`deflate_body` it parses the compressed streams."""
    right = [0.5 if (a := measure(p.a.full)) == (b := measure(p.b.full)) else float(a < b)
             for p in pairs if p.is_gold]
    if not right:
        raise ValueError("no gold pairs")
    return float(np.mean(right))


def recurrence_auc(pair_keys: Sequence, is_gold: Sequence[bool]) -> float:
    """How well the number of times a pair recurs in a study tells gold trials from real ones, folded to >= 0.5.

    Workers comparing notes see each trial's two files (their URLs); a pair shown far more often than
    the rest marks itself. Each trial gets the count of the study's trials showing the same two files
    (``pair_keys``: any hashable, the same for a pair in either order, e.g. a frozenset of the two URLs);
    the AUC is that count's, gold trials against real ones (:func:`auc`).
    """
    keys = list(pair_keys)
    gold = np.asarray(is_gold, dtype=bool)
    _, inverse, counts = np.unique(np.array([hash(k) for k in keys]), return_inverse=True, return_counts=True)
    recurs = counts[inverse].astype(float)
    value = auc(recurs[gold], recurs[~gold])
    return max(value, 1.0 - value)


def chance_bound(n: int, z: float = 3.29) -> float:
    """Half-width of the band around 0.5 that a bot's share right on ``n`` gold trials leaves only with
    probability ``2 (1 - Phi(z))`` when it answers at chance (normal approximation of the binomial; 3.29:
    one in a thousand)."""
    return z * 0.5 / np.sqrt(n)


def auc_chance_bound(n_gold: int, n_real: int, z: float = 3.29) -> float:
    """Half-width of the band around 0.5 that a Mann-Whitney AUC of ``n_gold`` against ``n_real`` values
    from one distribution leaves only with probability ``2 (1 - Phi(z))`` (no ties)."""
    return z * np.sqrt((n_gold + n_real + 1) / (12.0 * n_gold * n_real))


# ---------------------------------------------------------------- rating studies: single images

#: What a script computes from one image a rating trial shows (its download and its PNG header).
IMAGE_STATISTICS = ("bytes", "bytes_in_scene", "width", "height", "bit_depth", "colour_type", "interlace",
                    "chunk_types", "idat_chunk_size", "reencodes", "final_empty_block")
#: What a script learns by parsing the deflate blocks of the image data (no pixels needed, but a decoder's
#: work): how many empty stored blocks pad it and how long its stream is before them. Both measure how well
#: the pixels compress, which the checks' padding hides in the size but not in the structure.
PARSED_STATISTICS = ("stored_blocks", "deflate_body")
# The bytes a script looks for in a zlib stream: an empty stored block (BFINAL 0, LEN 0, NLEN 0xFFFF), byte
# aligned, and an empty final fixed block (``03 00``) before the Adler-32: the padding stimuli.check_images writes.
EMPTY_STORED_BLOCK = b"\x00\x00\x00\xff\xff"
FINAL_EMPTY_BLOCK = b"\x03\x00"


def stream_statistics(data: bytes, level: int = 3) -> dict[str, float]:
    """What a script learns of a PNG's compressed stream by reading its bytes: whether the image data
    re-encodes byte for byte at zlib ``level`` (as ``stimuli prepare``'s files do), whether the stream
    ends in an empty final block (``03 00``, the end of :func:`stimuli.check_images.pad_png`'s padding), how many empty stored blocks it holds,
    and the length of its stream before the first of them (the compressed body: a measure of the
    pixels' compressibility, which only padding hides by size, not by structure)."""
    import struct
    import zlib

    offset, parts = 8, []
    while offset + 12 <= len(data):
        length, kind = struct.unpack(">I4s", data[offset:offset + 8])
        if kind == b"IDAT":
            parts.append(data[offset + 8:offset + 8 + length])
        offset += 12 + length
    stream = b"".join(parts)
    raw = zlib.decompress(stream)
    marker = stream.find(EMPTY_STORED_BLOCK)
    return {"reencodes": float(zlib.compress(raw, level) == stream),
            "final_empty_block": float(stream[-6:-4] == FINAL_EMPTY_BLOCK),
            "stored_blocks": float(stream.count(EMPTY_STORED_BLOCK)),
            "deflate_body": float(marker if marker >= 0 else len(stream) - 6)}


def image_statistics(path: Path, scene_median: float, level: int = 3) -> dict[str, float]:
    """The :data:`IMAGE_STATISTICS` and :data:`PARSED_STATISTICS` of one PNG file; ``bytes_in_scene`` is its
    size over the median size of its scene's real candidates (what a script comparing the images of one
    scene sees); ``reencodes`` whether its image data is what zlib ``level`` writes of its pixels (as
    ``stimuli prepare`` writes them), ``final_empty_block`` whether its stream ends in the padding's
    empty final block (:func:`stream_statistics`)."""
    import struct
    import zlib

    data = Path(path).read_bytes()
    offset, kinds, idat = 8, [], []
    while offset + 12 <= len(data):
        length, kind = struct.unpack(">I4s", data[offset:offset + 8])
        kinds.append(kind)
        if kind == b"IDAT":
            idat.append(length)
        offset += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", data[16:29])
    return {"bytes": len(data), "bytes_in_scene": len(data) / scene_median, "width": width, "height": height,
            "bit_depth": depth, "colour_type": colour, "interlace": interlace,
            "chunk_types": zlib.crc32(b"".join(dict.fromkeys(kinds))),
            "idat_chunk_size": max(idat) if idat else 0, **stream_statistics(data, level)}


def image_separability(scenes: Mapping[str, tuple[Sequence[Path], Sequence[Path]]]) -> Separability:
    """The AUC of every :data:`IMAGE_STATISTICS` and :data:`PARSED_STATISTICS`, quality-check images against
    real candidates.

    Parameters
    ----------
    scenes : mapping
        scene -> (its real candidates' files as shown, its quality checks' files).
    """
    gold, real = [], []
    for candidates, checks in scenes.values():
        median = float(np.median([Path(p).stat().st_size for p in candidates]))
        real += [image_statistics(p, median) for p in candidates]
        gold += [image_statistics(p, median) for p in checks]
    aucs = {}
    for name in IMAGE_STATISTICS + PARSED_STATISTICS:
        value = auc([s[name] for s in gold], [s[name] for s in real])
        aucs[name] = max(value, 1.0 - value)
    return Separability(aucs, len(gold), len(real))


# ---------------------------------------------------------------- video studies: single clips

#: What a script computes from one clip a trial plays (its download and what FFmpeg reads of it).
CLIP_STATISTICS = ("bytes", "bytes_in_content", "bitrate", "duration_s", "n_frames", "fps", "width", "height",
                   "metadata")


def clip_statistics(path: Path, content_median: float) -> dict[str, float]:
    """The :data:`CLIP_STATISTICS` of one video file; ``bytes_in_content`` is its size over the median size of
    its content's real candidates, ``metadata`` a hash of its container and stream metadata."""
    import json
    import zlib

    import av

    from .media import probe_video

    info = probe_video(path)
    with av.open(str(path)) as container:
        tags = [dict(container.metadata), *(dict(stream.metadata) for stream in container.streams)]
    return {"bytes": info.bytes, "bytes_in_content": info.bytes / content_median,
            "bitrate": 8 * info.bytes / info.duration_s, "duration_s": info.duration_s, "n_frames": info.n_frames,
            "fps": info.fps, "width": info.width, "height": info.height,
            "metadata": zlib.crc32(json.dumps(tags, sort_keys=True).encode())}


def clip_separability(contents: Mapping[str, tuple[Sequence[Path], Sequence[Path]]]) -> Separability:
    """The AUC of every :data:`CLIP_STATISTICS`, check clips (hidden references, degraded gold) against
    real candidates.

    Parameters
    ----------
    contents : mapping
        content -> (its real candidates' delivered files, its check clips' files).
    """
    gold, real = [], []
    for candidates, checks in contents.values():
        median = float(np.median([Path(p).stat().st_size for p in candidates]))
        real += [clip_statistics(p, median) for p in candidates]
        gold += [clip_statistics(p, median) for p in checks]
    aucs = {}
    for name in CLIP_STATISTICS:
        value = auc([s[name] for s in gold], [s[name] for s in real])
        aucs[name] = max(value, 1.0 - value)
    return Separability(aucs, len(gold), len(real))


__all__ = ["CLIP_STATISTICS", "IMAGE_STATISTICS", "PARSED_STATISTICS", "SIZE_STATISTICS", "STATISTICS", "Separability", "ShownImage",
           "ShownPair", "auc", "auc_chance_bound", "auc_matrix", "chance_bound", "clip_separability",
           "clip_statistics", "deflate_body", "file_size", "image_separability", "image_statistics",
           "pair_statistics", "recurrence_auc", "separability", "shown_pairs", "smaller_file_bot", "stream_statistics"]
