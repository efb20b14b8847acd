"""Random-dot kinematograms (RDK) for the screening session (HuPerFlow, seed 003 §3.1.2).

Each RDK trial shows ``n_dots`` dots (5,000 in HuPerFlow) in a circular
aperture (600 px across), all moving coherently with one velocity: direction
uniform in 0-360° and speed uniform in 1-20 px/frame. Directions are polar
angles in y-up coordinates (0° = right, 90° = up on the screen), so the image
velocity (``v`` down) is ``u = s·cos θ``, ``v = −s·sin θ`` (:func:`rdk_vector`).

The server renders every trial's dots with :func:`rdk_dot_positions`: dots
start uniform in the aperture, move by ``(u, v)`` every frame, and a dot that
leaves the aperture re-enters on the opposite side (moved back inside along
its motion line), so the dot density stays uniform and every dot keeps moving
coherently. The browser never receives the direction, speed or seed: it gets
the finished positions as a compact binary "dot movie"
(:func:`encode_dot_movie`, served by ``GET .../motion-trials/<id>/dots``) and
only draws them. A script can still estimate the motion from the positions
(that is what the observer does too); there is just no field to read.
"""
from __future__ import annotations

import math
import struct

import numpy as np

DEFAULT_N_DOTS = 5000
DEFAULT_APERTURE_PX = 600
SPEED_MIN, SPEED_MAX = 1.0, 20.0
# Dot movie: "RDK1", uint16 frames, uint16 units per px, uint32 dots, uint16 aperture px, uint16 0 (little-endian).
DOT_MOVIE_MAGIC = b"RDK1"
DOT_MOVIE_HEADER = struct.Struct("<4sHHIHH")
MAX_DOT_SCALE = 64  # 1/64 px: far finer than a 2 px dot


def rdk_vector(direction_deg: float, speed_ppf: float) -> tuple[float, float]:
    """Image-coordinate velocity ``(u, v)`` (``v`` down) of a direction (y-up degrees) and speed (px/frame)."""
    theta = math.radians(direction_deg)
    return speed_ppf * math.cos(theta), -speed_ppf * math.sin(theta)


def rdk_trial_params(n: int, rng: np.random.Generator | int, *, speed_min: float = SPEED_MIN,
                     speed_max: float = SPEED_MAX) -> list[dict]:
    """Parameters of ``n`` RDK trials.

    Parameters
    ----------
    n : int
        Number of trials (0 or more).
    rng : numpy.random.Generator or int
        Random source (or a seed).
    speed_min, speed_max : float
        Speed range in px/frame (default 1-20).

    Returns
    -------
    list of dict
        ``{"direction_deg": uniform [0, 360), "speed_ppf": uniform [speed_min, speed_max],
        "seed": int in 0..2³¹−1 for the dot positions}``.
    """
    if isinstance(n, bool) or int(n) != n or n < 0:
        raise ValueError(f"n: need a non-negative integer, got {n!r}")
    if not 0 <= speed_min <= speed_max:
        raise ValueError(f"speed range: need 0 <= speed_min <= speed_max, got {speed_min}..{speed_max}")
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    directions = rng.uniform(0.0, 360.0, int(n))
    speeds = rng.uniform(speed_min, speed_max, int(n))
    seeds = rng.integers(0, 2 ** 31 - 1, int(n))
    return [{"direction_deg": round(float(d), 4), "speed_ppf": round(float(s), 4), "seed": int(k)}
            for d, s, k in zip(directions, speeds, seeds)]


def _uniform_in_disc(rng: np.random.Generator, n: int, radius: float) -> np.ndarray:
    # sqrt of a uniform radius fraction: uniform density per unit area.
    r = radius * np.sqrt(rng.random(n))
    phi = rng.uniform(0, 2 * np.pi, n)
    return np.column_stack([r * np.cos(phi), r * np.sin(phi)])


def _wrap_into_disc(points: np.ndarray, velocity: np.ndarray, radius: float) -> np.ndarray:
    """Move dots that left the disc back in on the opposite side, along their motion line.

    A dot at ``p`` outside the aperture goes to where the line through ``p``
    along the motion direction enters the disc, plus the distance it had
    travelled beyond the exit point: the classic "re-enter on the opposite
    side" of RDK programs, which keeps the density uniform.
    """
    outside = np.einsum("ij,ij->i", points, points) > radius * radius
    if not outside.any():
        return points
    direction = velocity / np.hypot(*velocity)
    p = points[outside]
    along = p @ direction  # signed position along the motion line
    across = p - along[:, None] * direction[None, :]
    half_chord = np.sqrt(np.maximum(radius * radius - np.einsum("ij,ij->i", across, across), 0.0))
    overshoot = along - half_chord  # how far past the exit point
    points = points.copy()
    points[outside] = across + (-half_chord + np.mod(overshoot, np.maximum(2 * half_chord, 1e-9)))[:, None] \
        * direction[None, :]
    return points


def rdk_dot_positions(n_dots: int, aperture_px: float, direction_deg: float, speed_ppf: float, seed: int,
                      n_frames: int) -> np.ndarray:
    """Reference dot positions of an RDK trial.

    Parameters
    ----------
    n_dots : int
        Number of dots.
    aperture_px : float
        Aperture diameter in pixels.
    direction_deg, speed_ppf : float
        Coherent motion: direction (y-up degrees) and speed (px/frame).
    seed : int
        Seed of the initial positions.
    n_frames : int
        Number of frames.

    Returns
    -------
    numpy.ndarray
        ``(n_frames, n_dots, 2)`` float positions ``(x, y)`` relative to the
        aperture centre (``y`` down), all within the aperture.
    """
    if isinstance(n_dots, bool) or int(n_dots) != n_dots or n_dots < 1:
        raise ValueError(f"n_dots: need a positive integer, got {n_dots!r}")
    if isinstance(n_frames, bool) or int(n_frames) != n_frames or n_frames < 1:
        raise ValueError(f"n_frames: need a positive integer, got {n_frames!r}")
    if not aperture_px > 0:
        raise ValueError(f"aperture_px: need a positive diameter, got {aperture_px!r}")
    radius = aperture_px / 2
    velocity = np.array(rdk_vector(direction_deg, speed_ppf))
    positions = np.empty((int(n_frames), int(n_dots), 2))
    positions[0] = _uniform_in_disc(np.random.default_rng(seed), int(n_dots), radius)
    for frame in range(1, int(n_frames)):
        moved = positions[frame - 1] + velocity
        positions[frame] = moved if speed_ppf == 0 else _wrap_into_disc(moved, velocity, radius)
    return positions


def encode_dot_movie(positions: np.ndarray, aperture_px: int) -> bytes:
    """Pack dot positions into the binary "dot movie" the browser draws an RDK trial from.

    Parameters
    ----------
    positions : numpy.ndarray
        ``(n_frames, n_dots, 2)`` positions ``(x, y)`` relative to the aperture centre (``y`` down),
        within the aperture (:func:`rdk_dot_positions`).
    aperture_px : int
        Aperture diameter in pixels (1 to 65535).

    Returns
    -------
    bytes
        A 16-byte header (:data:`DOT_MOVIE_HEADER`: ``b"RDK1"``, frames, scale, dots, aperture,
        0), then for every frame and every dot ``x`` and ``y`` as little-endian uint16 fixed point:
        ``round((coordinate + aperture_px / 2) * scale)``, with ``scale = min(64, 65535 // aperture_px)``
        units per pixel. Frame-major: value ``2 * (frame * n_dots + dot) + (0 for x, 1 for y)``.
    """
    positions = np.asarray(positions, dtype=float)
    if positions.ndim != 3 or positions.shape[2] != 2 or not 1 <= positions.shape[0] <= 65535:
        raise ValueError(f"positions: need (n_frames, n_dots, 2) with 1-65535 frames, got {positions.shape}")
    if isinstance(aperture_px, bool) or int(aperture_px) != aperture_px or not 1 <= aperture_px <= 65535:
        raise ValueError(f"aperture_px: need an integer in 1..65535, got {aperture_px!r}")
    aperture_px = int(aperture_px)
    scale = min(MAX_DOT_SCALE, 65535 // aperture_px)
    n_frames, n_dots, _ = positions.shape
    fixed = np.clip(np.round((positions + aperture_px / 2) * scale), 0, aperture_px * scale).astype("<u2")
    header = DOT_MOVIE_HEADER.pack(DOT_MOVIE_MAGIC, n_frames, scale, n_dots, aperture_px, 0)
    return header + fixed.tobytes()


def decode_dot_movie(data: bytes) -> tuple[np.ndarray, int]:
    """Unpack :func:`encode_dot_movie`: ``(positions (n_frames, n_dots, 2) in px from the centre, aperture_px)``."""
    if len(data) < DOT_MOVIE_HEADER.size:
        raise ValueError("not a dot movie: too short")
    magic, n_frames, scale, n_dots, aperture_px, _ = DOT_MOVIE_HEADER.unpack_from(data)
    if magic != DOT_MOVIE_MAGIC or scale < 1 or len(data) != DOT_MOVIE_HEADER.size + 4 * n_frames * n_dots:
        raise ValueError("not a dot movie (bad header or length)")
    fixed = np.frombuffer(data, dtype="<u2", offset=DOT_MOVIE_HEADER.size).reshape(n_frames, n_dots, 2)
    return fixed / scale - aperture_px / 2, aperture_px


def rdk_dot_movie(n_dots: int, aperture_px: int, direction_deg: float, speed_ppf: float, seed: int,
                  n_frames: int) -> bytes:
    """The dot movie of one RDK trial: :func:`rdk_dot_positions` packed by :func:`encode_dot_movie`."""
    positions = rdk_dot_positions(n_dots, aperture_px, direction_deg, speed_ppf, seed, n_frames)
    return encode_dot_movie(positions, aperture_px)
