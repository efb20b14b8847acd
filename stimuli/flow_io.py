"""Optical-flow files: the Middlebury ``.flo`` format and numpy ``.npy``.

A flow field is an ``(H, W, 2)`` float32 array: ``flow[y, x] = (u, v)`` is the
displacement in pixels of pixel ``(x, y)`` from the first frame to the second,
``u`` to the right and ``v`` downwards (image coordinates).

``.flo`` layout (Baker et al., Middlebury flow benchmark), all little-endian:

====== ========= ===================================================
bytes  type      content
====== ========= ===================================================
0-3    float32   magic 202021.25 (the ASCII bytes ``PIEH``)
4-7    int32     width ``W``
8-11   int32     height ``H``
12-    float32   ``W * H * 2`` values, ``u, v`` interleaved, row-major
====== ========= ===================================================

Unknown flow: the benchmark marks vectors it has no ground truth for with
huge values; any component whose magnitude exceeds :data:`UNKNOWN_FLOW_THRESHOLD`
(1e9) means "unknown". Readers here turn such vectors into ``NaN`` (both
components), writers turn ``NaN`` vectors into :data:`UNKNOWN_FLOW` (1e10), so
``NaN`` is the one in-memory spelling of "unknown"; :func:`unknown_mask` gives
the boolean mask.
"""
from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np

from .io import write_bytes_atomic

FLO_MAGIC = 202021.25
FLO_MAGIC_BYTES = b"PIEH"
UNKNOWN_FLOW_THRESHOLD = 1e9
UNKNOWN_FLOW = 1e10
# The Middlebury reference reader refuses larger sides; so do we (guards
# against reading a corrupt header as a request for terabytes).
MAX_FLO_SIDE = 100_000
_HEADER_BYTES = 12

PathLike = str | os.PathLike[str]


def unknown_mask(flow: np.ndarray) -> np.ndarray:
    """Boolean ``(H, W)`` mask of vectors that are unknown (``NaN`` or beyond 1e9)."""
    flow = np.asarray(flow)
    with np.errstate(invalid="ignore"):
        return np.any(np.isnan(flow) | (np.abs(flow) > UNKNOWN_FLOW_THRESHOLD), axis=-1)


def _mark_unknown_as_nan(flow: np.ndarray) -> np.ndarray:
    flow = flow.astype(np.float32, copy=True)
    flow[unknown_mask(flow)] = np.nan
    return flow


def _check_flow_array(flow: np.ndarray, name: str) -> np.ndarray:
    flow = np.asarray(flow)
    if flow.ndim != 3 or flow.shape[2] != 2:
        raise ValueError(f"{name}: a flow field must have shape (H, W, 2), got {flow.shape}")
    if flow.shape[0] == 0 or flow.shape[1] == 0:
        raise ValueError(f"{name}: a flow field must not be empty, got shape {flow.shape}")
    if not np.issubdtype(flow.dtype, np.floating) and not np.issubdtype(flow.dtype, np.integer):
        raise ValueError(f"{name}: flow must be numeric, got dtype {flow.dtype}")
    return flow


def read_flo(path: PathLike) -> np.ndarray:
    """Read a Middlebury ``.flo`` file.

    Parameters
    ----------
    path : str or PathLike
        File to read.

    Returns
    -------
    numpy.ndarray
        ``(H, W, 2)`` float32 flow; unknown vectors (a component > 1e9 in
        magnitude) are ``NaN`` in both components.

    Raises
    ------
    ValueError
        Wrong magic number, impossible size, or a file length that does not
        match its header (truncated or with trailing bytes); the message names
        the file.
    """
    path = Path(path)
    data = path.read_bytes()
    if len(data) < _HEADER_BYTES:
        raise ValueError(f"{path}: not a .flo file: {len(data)} bytes, shorter than the 12-byte header")
    if data[:4] != FLO_MAGIC_BYTES:
        magic = np.frombuffer(data[:4], dtype="<f4")[0]
        raise ValueError(f"{path}: not a .flo file: magic number {magic!r} (bytes {data[:4]!r}), "
                         f"expected {FLO_MAGIC} ({FLO_MAGIC_BYTES!r})")
    width, height = (int(v) for v in np.frombuffer(data[4:12], dtype="<i4"))
    if not (0 < width <= MAX_FLO_SIDE and 0 < height <= MAX_FLO_SIDE):
        raise ValueError(f"{path}: corrupt .flo header: width {width}, height {height} "
                         f"(each must be in 1..{MAX_FLO_SIDE})")
    expected = _HEADER_BYTES + 8 * width * height
    if len(data) != expected:
        kind = "truncated" if len(data) < expected else "has trailing bytes"
        raise ValueError(f"{path}: .flo file {kind}: {width}x{height} needs {expected} bytes, "
                         f"file has {len(data)}")
    flow = np.frombuffer(data, dtype="<f4", offset=_HEADER_BYTES).reshape(height, width, 2)
    return _mark_unknown_as_nan(flow)


def write_flo(path: PathLike, flow: np.ndarray) -> None:
    """Write ``flow`` as a Middlebury ``.flo`` file, atomically.

    Parameters
    ----------
    path : str or PathLike
        Destination; its folder must exist.
    flow : numpy.ndarray
        ``(H, W, 2)`` flow. ``NaN`` vectors (either component) are written as
        unknown (1e10 in both components).
    """
    path = Path(path)
    flow = _check_flow_array(flow, str(path)).astype("<f4", copy=True)
    flow[unknown_mask(flow)] = UNKNOWN_FLOW
    height, width = flow.shape[:2]
    header = FLO_MAGIC_BYTES + np.array([width, height], dtype="<i4").tobytes()
    write_bytes_atomic(path, header + np.ascontiguousarray(flow).tobytes())


def read_npy_flow(path: PathLike) -> np.ndarray:
    """Read an ``(H, W, 2)`` flow stored with :func:`numpy.save` (same unknown convention)."""
    path = Path(path)
    try:
        flow = np.load(path, allow_pickle=False)
    except (ValueError, EOFError) as error:
        raise ValueError(f"{path}: not a readable .npy array: {error}") from error
    return _mark_unknown_as_nan(_check_flow_array(flow, str(path)))


def write_npy_flow(path: PathLike, flow: np.ndarray) -> None:
    """Write ``flow`` as a float32 ``.npy`` file atomically (``NaN`` kept as ``NaN``)."""
    path = Path(path)
    flow = _check_flow_array(flow, str(path)).astype(np.float32)
    buffer = io.BytesIO()
    np.save(buffer, _mark_unknown_as_nan(flow), allow_pickle=False)
    write_bytes_atomic(path, buffer.getvalue())


_READERS = {".flo": read_flo, ".npy": read_npy_flow}
_WRITERS = {".flo": write_flo, ".npy": write_npy_flow}


def read_flow(path: PathLike) -> np.ndarray:
    """Read a flow field from ``.flo`` or ``.npy`` (chosen by the file suffix)."""
    suffix = Path(path).suffix.lower()
    if suffix not in _READERS:
        raise ValueError(f"{path}: unknown flow file type {suffix!r}; use .flo or .npy")
    return _READERS[suffix](path)


def write_flow(path: PathLike, flow: np.ndarray) -> None:
    """Write a flow field as ``.flo`` or ``.npy`` (chosen by the file suffix), atomically."""
    suffix = Path(path).suffix.lower()
    if suffix not in _WRITERS:
        raise ValueError(f"{path}: unknown flow file type {suffix!r}; use .flo or .npy")
    _WRITERS[suffix](path, flow)
