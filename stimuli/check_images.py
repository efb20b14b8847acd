"""Quality-check images that cannot be told from real candidates by their bytes: a blur-type strong
degradation, and PNG files padded to a size drawn from the real candidates' sizes.

A rating study shows, beside each scene's candidates, hidden references and strongly degraded images
(server/paradigms/rating/quality.py). A script reading ``Content-Length`` (or the PNG's structure) must
not pick them out. So:

* the degradation blurs, washes out and darkens the reference (:func:`blurred_degradations`): its error
  to the reference is at least ``margin`` times the worst candidate's (the rule of
  :func:`stimuli.gold.make_gold_pairs`), and such an image compresses smaller than the candidates;
* its PNG (and the hidden reference's) is then padded to a size drawn from the scene's candidate sizes
  (:func:`draw_sizes`, the study's seeded rng) by :func:`pad_png`. The padding lives inside the image
  data's zlib stream (empty stored deflate blocks, which every decoder skips), re-cut into IDAT chunks of
  8192 bytes as libpng (OpenCV's encoder, :func:`stimuli.io.encode_png`) writes them: the file has the
  candidates' chunks (IHDR, IDAT..., IEND), header, dimensions, bit depth and colour type, and decodes
  to the same pixels. A private ancillary chunk would have been a marker of its own.

A rating study with checks passes *every* image it shows through :func:`pad_png` (candidates and the
reference's copies too), each padded to a size drawn by :func:`common_sizes` (one distribution per scene,
independent of the image): then re-encoding the pixels (no file re-encodes to its own stream), the
stream's block structure (every file ends in the padding) and the size tell nothing
(server/paradigms/rating/study.py). The hidden reference is :func:`imperceptible_copy` of the reference.

What this does not hide: a script that parses the deflate blocks learns how many padding blocks a file
holds, so how long its compressed body is, which measures how well its pixels compress (a degraded image
compresses better); a script that decodes sees the pixels. Those are decoding statistics
(:func:`stimuli.separability.stream_statistics`; benchmarks/gold_separability.py reports them apart).
Pure functions over arrays and bytes (no server import).
"""
from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
IDAT_SIZE = 8192                      # libpng's IDAT chunk size, as in every candidate OpenCV wrote
_EMPTY_STORED_BLOCK = b"\x00\x00\x00\xff\xff"  # BFINAL 0, BTYPE 00 (byte-aligned), LEN 0, NLEN 0xFFFF
_FINAL_EMPTY_FIXED_BLOCK = b"\x03\x00"         # BFINAL 1, BTYPE 01, end-of-block: the stream's end
SIZE_SPREAD = 0.15  # a scene's delivered sizes: uniform on [F, (1 + this) F], F its least compressible image's


class PngSizeError(ValueError):
    """The bytes are not a PNG this module can pad."""


def png_chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    """``(type, payload)`` of every chunk of a PNG file, in order."""
    if not data.startswith(PNG_SIGNATURE):
        raise PngSizeError("not a PNG file")
    chunks, offset = [], len(PNG_SIGNATURE)
    while offset + 12 <= len(data):
        length, kind = struct.unpack(">I4s", data[offset:offset + 8])
        chunks.append((kind, data[offset + 8:offset + 8 + length]))
        offset += 12 + length
    if not chunks or chunks[-1][0] != b"IEND":
        raise PngSizeError("the PNG file has no IEND chunk")
    return chunks


def _chunk(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))


def _png(chunks: Sequence[tuple[bytes, bytes]], stream: bytes) -> bytes:
    """The file with ``stream`` as its image data, in IDAT chunks of :data:`IDAT_SIZE` bytes."""
    head = b"".join(_chunk(kind, payload) for kind, payload in chunks if kind not in (b"IDAT", b"IEND"))
    idat = b"".join(_chunk(b"IDAT", stream[k:k + IDAT_SIZE]) for k in range(0, len(stream), IDAT_SIZE))
    return PNG_SIGNATURE + head + idat + _chunk(b"IEND", b"")


def _padded_stream(raw: bytes, level: int, n_blocks: int) -> bytes:
    compressor = zlib.compressobj(level, zlib.DEFLATED, 15, 8, zlib.Z_FILTERED)
    body = compressor.compress(raw) + compressor.flush(zlib.Z_SYNC_FLUSH)  # byte-aligned, not final
    return body + _EMPTY_STORED_BLOCK * n_blocks + _FINAL_EMPTY_FIXED_BLOCK + struct.pack(">I", zlib.adler32(raw))


@dataclass(frozen=True)
class RecompressedPng:
    """A PNG whose image data was recompressed once (:func:`recompress_png`), ready to be written at any
    size: the recompression is the costly part (zlib level 9), the padding is only bytes appended, so an
    image written at several sizes (a reference's copies) is recompressed once.

    Attributes
    ----------
    chunks : tuple
        ``(type, payload)`` of the original file's chunks.
    stream : bytes
        The image data's zlib stream, recompressed, without padding.
    """

    chunks: tuple[tuple[bytes, bytes], ...]
    stream: bytes

    def _file_size(self, stream_length: int) -> int:
        # Each IDAT chunk costs 12 bytes besides its data: count them for the padded stream's length.
        fixed = len(_png(self.chunks, b""))  # signature, IHDR, IEND (no IDAT)
        return fixed + stream_length + 12 * max(1, -(-stream_length // IDAT_SIZE))

    @property
    def unpadded_size(self) -> int:
        """The size of the file with no padding (the smallest :meth:`padded` writes)."""
        return self._file_size(len(self.stream))

    def padded(self, size: int) -> bytes:
        """The file at ``size`` bytes (4 fewer at most); below :attr:`unpadded_size`, the unpadded file."""
        base = self.stream
        n_blocks = 0
        if size > self._file_size(len(base)):
            n_blocks = (size - self._file_size(len(base))) // len(_EMPTY_STORED_BLOCK)
            while n_blocks and self._file_size(len(base) + len(_EMPTY_STORED_BLOCK) * n_blocks) > size:
                n_blocks -= 1  # an extra IDAT chunk's 12 bytes
        return _png(self.chunks, base[:-6] + _EMPTY_STORED_BLOCK * n_blocks + base[-6:])


def recompress_png(data: bytes, level: int = 9) -> RecompressedPng:
    """The PNG ``data`` with its image data recompressed at zlib ``level``, to be padded by
    :meth:`RecompressedPng.padded`.

    Raises
    ------
    PngSizeError
        ``data`` is not a PNG file.
    """
    chunks = png_chunks(data)
    raw = zlib.decompress(b"".join(payload for kind, payload in chunks if kind == b"IDAT"))
    return RecompressedPng(tuple(chunks), _padded_stream(raw, level, 0))


def pad_png(data: bytes, size: int, level: int = 9) -> bytes:
    """The PNG ``data`` re-written to ``size`` bytes (4 fewer at most): the same pixels, header and chunk
    types, its image data recompressed at zlib ``level`` and padded with empty stored deflate blocks.

    Parameters
    ----------
    data : bytes
        A PNG file (IHDR, IDAT..., IEND; other chunks are kept, before the image data).
    size : int
        The wanted file size in bytes. One below what the unpadded file takes gets that file (the
        smallest this function writes): callers draw sizes at or above :func:`unpadded_size`.
    level : int
        The zlib level of the recompression.
    """
    return recompress_png(data, level).padded(size)


def unpadded_size(data: bytes, level: int = 9) -> int:
    """The size :func:`pad_png` writes with no padding (the smallest file it makes of ``data``)."""
    return recompress_png(data, level).unpadded_size


def draw_sizes(sizes: Sequence[int], floors: Sequence[int], rng: np.random.Generator) -> np.ndarray:
    """One file size per image whose smallest possible size is ``floors[i]``, drawn together from the
    smoothed empirical distribution of the real ``sizes`` (a kernel density: a size drawn at random plus
    Gaussian noise of Silverman's bandwidth, within ``[min, max]`` of ``sizes``).

    The images' sizes are drawn as one set of ``len(floors)`` independent draws, redrawn until its sorted
    values are at least the sorted floors, and handed out by rank (the largest floor gets the largest
    size): the set then looks like as many real candidates, not like draws each pushed above its own floor.
    A floor above every real size (or no feasible set in 10000 tries) gets the floor itself.
    """
    sizes = np.asarray(sizes, dtype=float)
    floors = np.asarray(floors, dtype=float)
    if sizes.size == 0:
        raise ValueError("need real sizes to draw from")
    low, high = float(sizes.min()), float(sizes.max())
    bandwidth = 1.06 * float(sizes.std()) * sizes.size ** -0.2
    order = np.argsort(floors, kind="stable")

    def one_set() -> np.ndarray:
        drawn = rng.choice(sizes, size=floors.size) + rng.normal(0.0, bandwidth, size=floors.size)
        outside = (drawn < low) | (drawn > high)
        while outside.any():  # redraw those outside the real range
            drawn[outside] = rng.choice(sizes, size=int(outside.sum())) + rng.normal(0.0, bandwidth,
                                                                                       size=int(outside.sum()))
            outside = (drawn < low) | (drawn > high)
        return np.sort(drawn)

    out = np.empty(floors.size)
    for _ in range(10_000):
        drawn = one_set()
        if np.all(drawn >= floors[order]):
            out[order] = drawn
            return np.round(out).astype(int)
    out[order] = np.maximum(one_set(), floors[order])
    return np.round(out).astype(int)


def blurred_degradations(reference: np.ndarray, candidates: Mapping[str, np.ndarray], n: int,
                         margin: float = 2.0) -> list[np.ndarray]:
    """``n`` strongly degraded copies of ``reference`` (blurred, washed out and darkened together) whose
    interpolation errors to it are at least ``margin``, ``1.25 margin``, ``1.5 margin``, ... times the
    worst candidate's. Same shape and dtype as ``reference``.

    One strength ``s`` in [0, 1] sets the three together: a Gaussian blur of sigma ``1 + 8 s``, the
    contrast around the mean colour scaled by ``1 - 0.9 s``, the brightness by ``1 - 0.5 s``; each image's
    ``s`` is found by bisection. All three lower the image's detail, so its PNG is smaller than the
    candidates' (which carry the reference's detail and their own errors): padding then sets its size.

    Raises
    ------
    ValueError
        The strongest degradation does not reach the error (a flat reference).
    """
    import cv2

    from .gold import candidate_errors
    from .metrics import interpolation_error

    worst = max(candidate_errors(reference, candidates).values())
    top = float(np.iinfo(reference.dtype).max) if reference.dtype.kind in "ui" else 1.0
    values = reference.astype(np.float64)
    mean = values.mean(axis=(0, 1))

    def degraded(strength: float) -> np.ndarray:
        blurred = cv2.GaussianBlur(values, (0, 0), 1.0 + 8.0 * strength, borderType=cv2.BORDER_REFLECT)
        image = (mean + (blurred - mean) * (1.0 - 0.9 * strength)) * (1.0 - 0.5 * strength)
        return np.clip(np.rint(image) if top > 1 else image, 0, top).astype(reference.dtype)

    out = []
    for k in range(n):
        target = margin * (1.0 + 0.25 * k) * worst
        if interpolation_error(reference, degraded(1.0)) < target:
            raise ValueError("no degradation of the reference reaches the error of a strongly degraded image")
        low, high = 0.0, 1.0
        for _ in range(14):
            middle = 0.5 * (low + high)
            low, high = (middle, high) if interpolation_error(reference, degraded(middle)) < target else (low, middle)
        out.append(degraded(high))
    return out


def common_sizes(floors: Sequence[int], rng: np.random.Generator, spread: float = SIZE_SPREAD) -> np.ndarray:
    """One file size per image of a scene, all drawn independently from one distribution: uniform on
    ``[F, (1 + spread) F]`` where ``F`` is the largest of ``floors`` (the smallest size :func:`pad_png` can
    write of each image).

    Every image a rating study with checks delivers (candidates, references, checks) gets its size this
    way, so an image's size is independent of its content and of its kind: no size statistic (absolute,
    within the scene, ranks) separates checks from real candidates. The price is bandwidth: every image of
    the scene is about as large as its least compressible one, plus up to ``spread``.
    """
    floors = np.asarray(floors, dtype=np.int64)
    if floors.size == 0:
        return np.empty(0, dtype=np.int64)
    low = int(floors.max())
    return rng.integers(low, int(np.ceil(low * (1.0 + spread))) + 1, size=floors.size)


def imperceptible_copy(image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``image`` with seeded noise of one code value (-1, 0 or +1, each with probability 1/3) on every
    pixel and channel, clipped to the range: not pixel-identical to ``image`` (a script comparing a
    hidden reference's pixels with the reference's sees no equality), far below visibility (one code value
    of 255, or of 65535, in no pattern). A script that decodes both and measures their difference still
    sees an image much closer to the reference than any candidate: that is a decoding statistic, which
    the checks do not claim to hide (server/paradigms/rating/study.py)."""
    top = int(np.iinfo(image.dtype).max) if image.dtype.kind in "ui" else None
    if top is None:
        raise ValueError("an integer image is needed")
    noise = rng.integers(-1, 2, size=image.shape, dtype=np.int64)
    return np.clip(image.astype(np.int64) + noise, 0, top).astype(image.dtype)


__all__ = ["IDAT_SIZE", "SIZE_SPREAD", "PngSizeError", "RecompressedPng", "blurred_degradations", "common_sizes",
           "draw_sizes", "imperceptible_copy", "pad_png", "png_chunks", "recompress_png", "unpadded_size"]
