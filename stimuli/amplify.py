"""Artefact amplification by a local RGB transformation (StudyMB 2.0, Algorithm 1).

Each RGB component ``v`` of the reference and ``v_hat`` of a candidate become

    v' = v + alpha * (v_hat - v),        alpha > 1,

which scales the candidate's error relative to the reference. Where that
would leave the value range ``[0, max]`` (255 for uint8, 65535 for uint16),
the factor is lowered *at that pixel* to the largest value that needs no
clamping, one factor for all three channels: the amplified error then keeps
the direction of the original error in RGB space (clamping would flatten it,
and could remove differences between candidates). Because ``v_hat`` itself is
in range, the per-pixel factor is always in ``[1, alpha]``.

Rounding: the amplified difference ``a * (v_hat - v)`` is rounded to the
nearest integer with halves away from zero (so equal positive and negative
errors are amplified equally), then added to ``v``. As ``v`` and the range
limits are integers, a real value inside the range never rounds outside it.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from .io import StimulusInputError, check_rgb, max_value


def _check_inputs(reference: np.ndarray, candidate: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    if not np.isfinite(alpha) or alpha <= 1:
        raise StimulusInputError(f"alpha must be a number > 1 (the amplification factor), got {alpha}")
    reference = check_rgb(reference, "reference")
    candidate = check_rgb(candidate, "candidate")
    if reference.shape != candidate.shape:
        raise StimulusInputError(f"candidate shape {candidate.shape} differs from reference shape {reference.shape}")
    if reference.dtype != candidate.dtype:
        raise StimulusInputError(f"candidate dtype {candidate.dtype} differs from reference dtype {reference.dtype}")
    return reference, candidate


def _round_half_away(x: np.ndarray) -> np.ndarray:
    return np.copysign(np.floor(np.abs(x) + 0.5), x)


def pixel_alpha(reference: np.ndarray, candidate: np.ndarray, alpha: float = 1.5) -> np.ndarray:
    """Per-pixel amplification factor of Algorithm 1, shape ``(H, W)``, values in ``[1, alpha]``.

    For each channel the largest factor keeping ``v + a (v_hat - v)`` in
    ``[0, max]`` is ``(max - v) / d`` for a positive error ``d`` and ``v / -d``
    for a negative one; the pixel's factor is the smallest of these and ``alpha``.
    """
    reference, candidate = _check_inputs(reference, candidate, alpha)
    return _pixel_alpha_float(reference, candidate, float(alpha), max_value(reference.dtype))


def _pixel_alpha_float(reference: np.ndarray, candidate: np.ndarray, alpha: float, top: int) -> np.ndarray:
    v = reference.astype(np.float64)
    d = candidate.astype(np.float64) - v
    headroom = np.where(d > 0, top - v, v)  # distance to the limit the error points at
    with np.errstate(divide="ignore", invalid="ignore"):
        limit = np.where(d != 0, headroom / np.abs(d), np.inf)
    return np.minimum(limit.min(axis=2), alpha)


def amplify_with_alpha(reference: np.ndarray, candidate: np.ndarray,
                       alpha: float = 1.5) -> tuple[np.ndarray, np.ndarray]:
    """Amplified candidate and the per-pixel factor map (see :func:`amplify`).

    Returns
    -------
    amplified : ndarray, same shape and dtype as the inputs
    alpha_map : ndarray of float64, shape ``(H, W)``; ``alpha`` wherever no reduction was needed
    """
    reference, candidate = _check_inputs(reference, candidate, alpha)
    alpha = float(alpha)
    if reference.dtype == np.uint8:
        return _amplify_uint8(reference, candidate, alpha)
    return _amplify_generic(reference, candidate, alpha)


def amplify(reference: np.ndarray, candidate: np.ndarray, alpha: float = 1.5) -> np.ndarray:
    """Amplify the candidate's artefacts relative to the reference (Algorithm 1 of StudyMB 2.0).

    Parameters
    ----------
    reference, candidate : ndarray, shape (H, W, 3), uint8 or uint16, equal shape and dtype
        Ground truth ``v`` and degraded image ``v_hat``.
    alpha : float
        Amplification factor, > 1 (StudyMB 2.0 used 1.5).

    Returns
    -------
    ndarray, same shape and dtype: ``v + a (v_hat - v)`` with ``a = alpha`` where
    that stays in range and the largest in-range factor (per pixel) elsewhere;
    rounded as described in the module docstring. Never clamped.
    """
    return amplify_with_alpha(reference, candidate, alpha)[0]


def _amplify_generic(reference: np.ndarray, candidate: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Float64 implementation for any dtype (used for uint16 and as the uint8 cross-check)."""
    alpha_map = _pixel_alpha_float(reference, candidate, alpha, max_value(reference.dtype))
    d = candidate.astype(np.float64) - reference
    out = reference + _round_half_away(alpha_map[:, :, None] * d)
    return out.astype(reference.dtype), alpha_map


@lru_cache(maxsize=8)
def _uint8_tables(alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Tables indexed by ``v * 256 + v_hat``: amplified value at full ``alpha`` (int16; -1 where
    ``v + alpha d`` leaves [0, 255] before rounding, so that one range test finds every pixel that
    needs a lower factor) and the largest in-range factor for that component (capped at ``alpha``)."""
    v = np.arange(256, dtype=np.float64)[:, None]
    d = np.arange(256, dtype=np.float64)[None, :] - v
    full = (v + _round_half_away(alpha * d)).astype(np.int16)
    headroom = np.where(d > 0, 255 - v, v)
    with np.errstate(divide="ignore", invalid="ignore"):
        limit = np.minimum(np.where(d != 0, headroom / np.abs(d), np.inf), alpha)
    full[limit < alpha] = -1
    full.flags.writeable = limit.flags.writeable = False
    return full.ravel(), limit.ravel()


def _amplify_uint8(reference: np.ndarray, candidate: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    # A 256x256 lookup of the full-alpha result makes the common case one table
    # read per component; only pixels that would leave [0, 255] are recomputed.
    full_table, limit_table = _uint8_tables(alpha)
    index = (reference.astype(np.uint16) << 8) | candidate
    amplified = full_table.take(index)
    outside = amplified.view(np.uint16) > 255  # negative int16 wraps to > 255 as well
    needs_lower = outside[:, :, 0] | outside[:, :, 1] | outside[:, :, 2]
    alpha_map = np.full(reference.shape[:2], alpha)
    lower = np.flatnonzero(needs_lower)
    if lower.size:
        components = index.reshape(-1, 3).take(lower, axis=0)  # (n, 3) table indices v * 256 + v_hat
        pixel = limit_table.take(components).min(axis=1)
        v = (components >> 8).astype(np.float64)
        d = (components & 255) - v
        alpha_map.ravel()[lower] = pixel
        amplified.reshape(-1, 3)[lower] = v + _round_half_away(pixel[:, None] * d)
    return amplified.astype(np.uint8), alpha_map
