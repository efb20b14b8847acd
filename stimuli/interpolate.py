"""Baseline flow-based frame interpolation of the Middlebury benchmark.

Baker et al., "A Database and Evaluation Methodology for Optical Flow" (IJCV
2011), section 3.3.2. Given frames ``I0``, ``I1`` and one flow field ``u0``
from ``I0`` to ``I1``, the frame at time ``t`` is built in four steps:

1. Forward-warp (splat) ``u0`` to time ``t``: the vector of pixel ``x`` goes to
   the real-valued point ``x + t u0(x)`` and is written into every pixel within
   0.5 px of it (eq. 19, splatting radius +-0.5). Collisions are resolved per
   pixel by photoconsistency: the vector with the lowest colour difference
   ``|I0(x) - I1(x + u0(x))|`` wins.
2. Fill the holes of ``u_t`` outside-in.
3. Occlusion masks: splat ``u0`` to ``t = 1`` the same way; pixels of ``I1`` no
   vector reaches are ``O1 = 1``; pixels of ``I0`` whose vector disagrees by more
   than 0.5 px with the winner at its destination are ``O0 = 1`` (eq. 20).
   Both masks are dilated by a small radius.
4. Sample ``I0`` at ``x0 = x - t u_t(x)`` and ``I1`` at ``x1 = x + (1 - t) u_t(x)``
   bilinearly; blend them as ``(1 - t) I0(x0) + t I1(x1)`` (eq. 21) where both
   are visible, otherwise take the visible one only.

Choices the paper leaves open, made here (and documented where they are made):
the +-0.5 px footprint is a square (per axis, closed interval); the colour
difference is the L1 norm over channels; "outside-in" filling fills each hole
from its rim inwards, one ring per pass, with the mean of the already known
8-neighbours; the cross-check of eq. 20 reads ``u1`` at the nearest pixel;
masks are dilated with a square of side ``2 r + 1``; where a mask is set, the
image that shows the point is sampled (the paper's sentence reads the other
way round; see ``occlusion_rule`` of :func:`interpolate_frame`); a sample point
outside one image is taken from the other image alone.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import ndimage

# Values of Interpolation.source
BLENDED, FROM_I0, FROM_I1 = 0, 1, 2

# Slack so that points exactly 0.5 px from a pixel centre (odd integer flows at
# t = 0.5) land in both neighbours despite float rounding.
_SPLAT_EPS = 1e-6


@dataclass(frozen=True)
class Interpolation:
    """Result of :func:`interpolate_frame`.

    Attributes
    ----------
    frame : numpy.ndarray
        The interpolated frame, same shape and dtype as the input frames
        (integer inputs are rounded and clipped).
    flow_t : numpy.ndarray
        ``(H, W, 2)`` flow ``u_t`` at time ``t`` after hole filling.
    holes : numpy.ndarray
        ``(H, W)`` bool: pixels of ``u_t`` that no splatted vector reached (step 2
        filled them).
    occluded0, occluded1 : numpy.ndarray
        ``(H, W)`` bool masks ``O0`` (pixel of ``I0`` not visible in ``I1``) and
        ``O1`` (pixel of ``I1`` not visible in ``I0``), before dilation.
    source : numpy.ndarray
        ``(H, W)`` uint8: :data:`BLENDED` (eq. 21), :data:`FROM_I0` or
        :data:`FROM_I1` (one-sided sampling).
    t : float
        The time of the frame.
    """

    frame: np.ndarray
    flow_t: np.ndarray
    holes: np.ndarray
    occluded0: np.ndarray
    occluded1: np.ndarray
    source: np.ndarray
    t: float


def _as_float_image(image: np.ndarray, name: str) -> np.ndarray:
    image = np.asarray(image)
    if image.ndim == 2:
        image = image[:, :, None]
    if image.ndim != 3 or image.shape[0] == 0 or image.shape[1] == 0:
        raise ValueError(f"{name}: expected an (H, W) or (H, W, C) image, got shape {np.shape(image)}")
    if not (np.issubdtype(image.dtype, np.integer) or np.issubdtype(image.dtype, np.floating)):
        raise ValueError(f"{name}: expected a numeric image, got dtype {image.dtype}")
    return image.astype(np.float64)


def _check_flow(flow: np.ndarray, shape: tuple[int, int], name: str = "flow") -> np.ndarray:
    flow = np.asarray(flow, dtype=np.float64)
    if flow.shape != (*shape, 2):
        raise ValueError(f"{name}: expected shape {(*shape, 2)} to match the frames, got {flow.shape}")
    return flow


def _pixel_grid(shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    ys, xs = np.indices(shape, dtype=np.float64)
    return xs, ys


def _inside(x: np.ndarray, y: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """True where the nearest pixel of ``(x, y)`` lies in the image (NaN is outside)."""
    height, width = shape
    return (x >= -0.5) & (x < width - 0.5) & (y >= -0.5) & (y < height - 0.5)


def _nearest_index(x: np.ndarray, y: np.ndarray, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    height, width = shape
    x = np.where(np.isfinite(x), x, 0.0)
    y = np.where(np.isfinite(y), y, 0.0)
    # floor(v + 0.5): round half up, so the choice does not depend on parity.
    ix = np.clip(np.floor(x + 0.5), 0, width - 1).astype(np.intp)
    iy = np.clip(np.floor(y + 0.5), 0, height - 1).astype(np.intp)
    return ix, iy


def bilinear_sample(image: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Sample ``image`` (H, W, C) at real coordinates, clamping to the border.

    Parameters
    ----------
    image : numpy.ndarray
        ``(H, W, C)`` float image.
    x, y : numpy.ndarray
        Column and row coordinates (same shape); non-finite values sample pixel 0.

    Returns
    -------
    numpy.ndarray
        ``x.shape + (C,)`` samples.
    """
    height, width = image.shape[:2]
    x = np.clip(np.where(np.isfinite(x), x, 0.0), 0, width - 1)
    y = np.clip(np.where(np.isfinite(y), y, 0.0), 0, height - 1)
    x0 = np.floor(x).astype(np.intp)
    y0 = np.floor(y).astype(np.intp)
    x1 = np.minimum(x0 + 1, width - 1)
    y1 = np.minimum(y0 + 1, height - 1)
    fx = (x - x0)[..., None]
    fy = (y - y0)[..., None]
    top = image[y0, x0] * (1 - fx) + image[y0, x1] * fx
    bottom = image[y1, x0] * (1 - fx) + image[y1, x1] * fx
    return top * (1 - fy) + bottom * fy


def photoconsistency_cost(image0: np.ndarray, image1: np.ndarray, flow: np.ndarray) -> np.ndarray:
    """Colour difference ``|I0(x) - I1(x + u0(x))|`` per pixel of ``I0``.

    L1 norm over channels, ``I1`` sampled bilinearly. Vectors that leave ``I1``
    or are not finite cost ``inf``, so any measurable vector beats them.
    """
    image0 = _as_float_image(image0, "image0")
    image1 = _as_float_image(image1, "image1")
    shape = image0.shape[:2]
    flow = _check_flow(flow, shape)
    xs, ys = _pixel_grid(shape)
    tx, ty = xs + flow[..., 0], ys + flow[..., 1]
    cost = np.abs(image0 - bilinear_sample(image1, tx, ty)).sum(axis=-1)
    cost[~_inside(tx, ty, shape)] = np.inf
    return cost


def _splat(flow: np.ndarray, t: float, cost: np.ndarray, radius: float) -> np.ndarray:
    """Forward-warp ``flow`` to time ``t``; returns ``(H, W)`` index of the winning source pixel, -1 = hole."""
    shape = flow.shape[:2]
    height, width = shape
    xs, ys = _pixel_grid(shape)
    px, py = xs + t * flow[..., 0], ys + t * flow[..., 1]
    finite = np.isfinite(px) & np.isfinite(py)
    # Footprint: the integer pixels q with |q - p| <= radius on each axis. (A
    # Euclidean disc of radius 0.5 would hit no pixel at all when p sits on a
    # pixel corner, which defeats the purpose of avoiding gaps.)
    x_first = np.ceil(px - radius - _SPLAT_EPS)
    y_first = np.ceil(py - radius - _SPLAT_EPS)
    span = int(np.floor(2 * radius + 2 * _SPLAT_EPS)) + 1
    source_index = np.arange(height * width).reshape(shape)
    sources, targets = [], []
    for dy in range(span):
        ty = y_first + dy
        y_ok = finite & (ty <= py + radius + _SPLAT_EPS) & (ty >= 0) & (ty < height)
        for dx in range(span):
            tx = x_first + dx
            ok = y_ok & (tx <= px + radius + _SPLAT_EPS) & (tx >= 0) & (tx < width)
            sources.append(source_index[ok])
            targets.append(ty[ok].astype(np.intp) * width + tx[ok].astype(np.intp))
    sources = np.concatenate(sources)
    targets = np.concatenate(targets)
    # Per target keep the lowest cost; ties go to the lowest source index so the
    # result never depends on sort stability.
    order = np.lexsort((sources, cost.ravel()[sources], targets))
    targets, sources = targets[order], sources[order]
    first = np.ones(len(targets), dtype=bool)
    first[1:] = targets[1:] != targets[:-1]
    winner = np.full(height * width, -1, dtype=np.intp)
    winner[targets[first]] = sources[first]
    return winner.reshape(shape)


def _gather_flow(flow: np.ndarray, winner: np.ndarray) -> np.ndarray:
    warped = flow.reshape(-1, 2)[np.maximum(winner, 0)].reshape(flow.shape)
    warped[winner < 0] = np.nan
    return warped


def forward_warp_flow(flow: np.ndarray, t: float, image0: np.ndarray, image1: np.ndarray,
                      splat_radius: float = 0.5) -> np.ndarray:
    """Forward-warp ``u0`` to time ``t`` (step 1, eq. 19), holes left as ``NaN``.

    Parameters
    ----------
    flow : numpy.ndarray
        ``(H, W, 2)`` flow ``u0`` from ``image0`` to ``image1``; ``NaN`` vectors
        are not splatted.
    t : float
        Time in ``(0, 1]``.
    image0, image1 : numpy.ndarray
        The frames, used for photoconsistent collision resolution.
    splat_radius : float
        Half side of the square splat footprint, at least 0.5.

    Returns
    -------
    numpy.ndarray
        ``(H, W, 2)`` flow ``u_t``; ``NaN`` where nothing landed.
    """
    _check_time(t, allow_one=True)
    _check_radius(splat_radius)
    image0 = _as_float_image(image0, "image0")
    flow = _check_flow(flow, image0.shape[:2])
    cost = photoconsistency_cost(image0, image1, flow)
    return _gather_flow(flow, _splat(flow, t, cost, splat_radius))


def fill_holes_outside_in(flow: np.ndarray) -> np.ndarray:
    """Fill ``NaN`` vectors from the rim of each hole inwards (step 2).

    Each pass gives every hole pixel that touches a known pixel (8-neighbours)
    the mean of its known neighbours; passes repeat until no hole is left. A
    field with no known vector at all becomes zero flow.
    """
    filled = np.array(flow, dtype=np.float64)
    known = np.all(np.isfinite(filled), axis=-1)
    if not known.any():
        return np.zeros_like(filled)
    filled[~known] = 0.0
    kernel = np.ones((3, 3))
    while not known.all():
        counts = ndimage.correlate(known.astype(np.float64), kernel, mode="constant")
        ring = ~known & (counts > 0)
        for channel in range(2):
            sums = ndimage.correlate(filled[..., channel] * known, kernel, mode="constant")
            filled[..., channel][ring] = sums[ring] / counts[ring]
        known |= ring
    return filled


def occlusion_masks(flow: np.ndarray, image0: np.ndarray, image1: np.ndarray,
                    splat_radius: float = 0.5, threshold: float = 0.5,
                    cost: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Occlusion masks ``O0`` and ``O1`` (step 3, eq. 20), not dilated.

    ``O1`` marks pixels of ``I1`` that no vector of ``u0`` reaches when splatted
    to ``t = 1``. ``O0`` marks pixels ``x`` of ``I0`` with
    ``|u0(x) - u1(x + u0(x))| > threshold`` (``u1`` read at the nearest pixel),
    and pixels whose vector leaves the image or is unknown.

    Returns
    -------
    tuple of numpy.ndarray
        ``(O0, O1)``, boolean ``(H, W)`` arrays.
    """
    _check_radius(splat_radius)
    image0 = _as_float_image(image0, "image0")
    shape = image0.shape[:2]
    flow = _check_flow(flow, shape)
    if cost is None:
        cost = photoconsistency_cost(image0, image1, flow)
    flow_1 = _gather_flow(flow, _splat(flow, 1.0, cost, splat_radius))
    occluded1 = np.isnan(flow_1[..., 0])
    xs, ys = _pixel_grid(shape)
    tx, ty = xs + flow[..., 0], ys + flow[..., 1]
    ix, iy = _nearest_index(tx, ty, shape)
    mismatch = np.hypot(*np.moveaxis(flow - flow_1[iy, ix], -1, 0))
    consistent = _inside(tx, ty, shape) & (mismatch <= threshold)  # NaN compares False
    return ~consistent, occluded1


def _dilate(mask: np.ndarray, radius: int) -> np.ndarray:
    if radius == 0:
        return mask
    return ndimage.binary_dilation(mask, structure=np.ones((2 * radius + 1, 2 * radius + 1), dtype=bool))


def _check_time(t: float, allow_one: bool = False) -> None:
    upper_ok = t <= 1 if allow_one else t < 1
    if not (np.isfinite(t) and t > 0 and upper_ok):
        interval = "(0, 1]" if allow_one else "(0, 1)"
        raise ValueError(f"t must be in {interval}, got {t}")


def _check_radius(splat_radius: float) -> None:
    if not (np.isfinite(splat_radius) and splat_radius >= 0.5):
        raise ValueError(f"splat_radius must be >= 0.5 (smaller footprints can miss every pixel), "
                         f"got {splat_radius}")


def _to_input_dtype(frame: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return np.clip(np.rint(frame), info.min, info.max).astype(dtype)
    return frame.astype(dtype)


def _choose_sources(x0: np.ndarray, y0: np.ndarray, x1: np.ndarray, y1: np.ndarray,
                    mask0: np.ndarray, mask1: np.ndarray, rule: str) -> np.ndarray:
    """Per pixel: blend both samples, or take only one (see :func:`interpolate_frame`)."""
    shape = mask0.shape
    inside0, inside1 = _inside(x0, y0, shape), _inside(x1, y1, shape)
    flagged0 = mask0[_nearest_index(x0, y0, shape)[::-1]]
    flagged1 = mask1[_nearest_index(x1, y1, shape)[::-1]]
    source = np.full(shape, BLENDED, dtype=np.uint8)
    if rule == "visible":
        # O0(x0) = 1: what I0 shows at x0 has no counterpart in I1, so I0 alone
        # is right; O1(x1) = 1 likewise means I1 alone.
        source[flagged0 & ~flagged1] = FROM_I0
        source[flagged1 & ~flagged0] = FROM_I1
    else:  # "literal": the sentence of the paper, word for word
        source[flagged1 & ~flagged0] = FROM_I0
        source[flagged0 & ~flagged1] = FROM_I1
    # A sample point outside an image has nothing to offer: use the other
    # image whatever the masks say (both outside: blend the clamped samples).
    source[inside0 & ~inside1] = FROM_I0
    source[inside1 & ~inside0] = FROM_I1
    return source


def interpolate_frame(image0: np.ndarray, image1: np.ndarray, flow: np.ndarray, t: float = 0.5, *,
                      splat_radius: float = 0.5, occlusion_dilation: int = 1,
                      consistency_threshold: float = 0.5,
                      occlusion_rule: str = "visible") -> Interpolation:
    """Interpolate the frame at time ``t`` between ``image0`` and ``image1``.

    Parameters
    ----------
    image0, image1 : numpy.ndarray
        Frames at times 0 and 1: ``(H, W)`` or ``(H, W, C)``, integer or float,
        same shape.
    flow : numpy.ndarray
        ``(H, W, 2)`` flow ``u0`` from ``image0`` to ``image1`` (``u`` right,
        ``v`` down, pixels); ``NaN`` vectors are treated as unknown.
    t : float
        Time of the wanted frame, in ``(0, 1)``. Default 0.5.
    splat_radius : float
        Splatting footprint half side in pixels (paper: 0.5).
    occlusion_dilation : int
        Radius in pixels by which ``O0`` and ``O1`` grow before step 4 (0: none).
    consistency_threshold : float
        Flow cross-check tolerance of eq. 20 in pixels (paper: 0.5).
    occlusion_rule : {"visible", "literal"}
        Which single image to sample where a mask is set. ``"visible"``
        (default) follows the masks' definition: ``O0(x0) = 1`` means the point
        seen in ``I0`` is hidden in ``I1``, so only ``I0`` is sampled, and
        ``O1(x1) = 1`` means only ``I1`` is. ``"literal"`` follows the
        sentence of section 3.3.2 word for word ("``I_t = I0(x0)`` if
        ``O1(x1) = 1`` and vice versa"), which samples the image that does
        *not* show the point in both the occlusion and the disocclusion case;
        it is kept to reproduce that reading.

    Returns
    -------
    Interpolation
        The frame and the intermediate fields (see :class:`Interpolation`).
    """
    _check_time(t)
    _check_radius(splat_radius)
    if occlusion_rule not in ("visible", "literal"):
        raise ValueError(f"occlusion_rule must be 'visible' or 'literal', got {occlusion_rule!r}")
    if int(occlusion_dilation) != occlusion_dilation or occlusion_dilation < 0:
        raise ValueError(f"occlusion_dilation must be a non-negative integer, got {occlusion_dilation}")
    frame0 = _as_float_image(image0, "image0")
    frame1 = _as_float_image(image1, "image1")
    if frame0.shape != frame1.shape:
        raise ValueError(f"image0 and image1 must have the same shape, got {np.shape(image0)} "
                         f"and {np.shape(image1)}")
    shape = frame0.shape[:2]
    flow = _check_flow(flow, shape)

    cost = photoconsistency_cost(frame0, frame1, flow)
    flow_t = _gather_flow(flow, _splat(flow, t, cost, splat_radius))
    holes = np.isnan(flow_t[..., 0])
    flow_t = fill_holes_outside_in(flow_t)
    occluded0, occluded1 = occlusion_masks(flow, frame0, frame1, splat_radius,
                                           consistency_threshold, cost=cost)

    xs, ys = _pixel_grid(shape)
    x0, y0 = xs - t * flow_t[..., 0], ys - t * flow_t[..., 1]
    x1, y1 = xs + (1 - t) * flow_t[..., 0], ys + (1 - t) * flow_t[..., 1]
    source = _choose_sources(x0, y0, x1, y1, _dilate(occluded0, int(occlusion_dilation)),
                             _dilate(occluded1, int(occlusion_dilation)), occlusion_rule)
    sample0 = bilinear_sample(frame0, x0, y0)
    sample1 = bilinear_sample(frame1, x1, y1)
    weight1 = np.where(source == FROM_I0, 0.0, np.where(source == FROM_I1, 1.0, t))[..., None]
    frame = (1 - weight1) * sample0 + weight1 * sample1
    if np.ndim(image0) == 2:
        frame = frame[..., 0]
    return Interpolation(frame=_to_input_dtype(frame, np.asarray(image0).dtype),
                         flow_t=flow_t.astype(np.float32), holes=holes, occluded0=occluded0,
                         occluded1=occluded1, source=source, t=float(t))
