"""Middlebury baseline frame interpolation (stimuli.interpolate)."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage

from stimuli.interpolate import (BLENDED, FROM_I0, FROM_I1, fill_holes_outside_in, forward_warp_flow,
                                 interpolate_frame, occlusion_masks)

H, W = 48, 64


def _texture(rng: np.random.Generator, shape: tuple[int, int], sigma: float = 1.5) -> np.ndarray:
    tex = ndimage.gaussian_filter(rng.random((*shape, 3)), (sigma, sigma, 0))
    return (tex - tex.min()) / np.ptp(tex) * 255


def _smooth_pattern(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """A band-limited colour image defined everywhere, for exact sub-pixel truths."""
    return np.stack([128 + 60 * np.sin(0.21 * x + 0.13 * y) + 40 * np.cos(0.17 * y - 0.05 * x),
                     128 + 70 * np.cos(0.19 * x - 0.11 * y),
                     128 + 50 * np.sin(0.07 * x + 0.23 * y) + 30 * np.sin(0.3 * x)], axis=-1)


def _translated(d: tuple[float, float]) -> np.ndarray:
    ys, xs = np.indices((H, W), dtype=np.float64)
    return _smooth_pattern(xs - d[0], ys - d[1])


def _uniform_flow(u: float, v: float) -> np.ndarray:
    flow = np.empty((H, W, 2))
    flow[..., 0], flow[..., 1] = u, v
    return flow


def test_true_flow_of_an_integer_translation_gives_the_exact_middle_frame():
    rng = np.random.default_rng(0)
    big = _texture(rng, (H + 20, W + 20))
    d = (4, -2)

    def frame(dx, dy):  # content shifted by (dx, dy)
        return big[10 - dy:10 - dy + H, 10 - dx:10 - dx + W]

    result = interpolate_frame(frame(0, 0), frame(*d), _uniform_flow(*d))
    error = np.abs(result.frame - frame(2, -1)).max(axis=-1)
    assert error[3:-3, 3:-3].max() == 0  # away from the borders: exact
    assert (error > 0.5).mean() < 0.005  # the rest: a few corner pixels no frame shows
    assert not result.holes[3:-3, 3:-3].any()


def test_true_flow_of_a_subpixel_translation_is_accurate_inside():
    d = (2.6, -1.4)
    result = interpolate_frame(_translated((0, 0)), _translated(d), _uniform_flow(*d))
    error = np.abs(result.frame - _translated((d[0] / 2, d[1] / 2))).max(axis=-1)
    interior = error[4:-4, 4:-4]
    # Only bilinear resampling error remains (the pattern is smooth).
    assert interior.max() < 3.0 and np.median(interior) < 1.0
    assert (error > 3.0).mean() < 0.02
    # Where one sample point falls outside a frame only the other frame is used.
    # (Corner pixels, outside both frames, are blended.)
    assert (result.source[2:-2, :2] == FROM_I1).all() and (result.source[2:-2, -2:] == FROM_I0).all()


def test_odd_flow_at_half_time_splats_into_both_neighbours_without_holes():
    # x + 0.5 * 1 lies exactly between two pixels: the +-0.5 px footprint must
    # write both, otherwise every other column would be a hole.
    image = _translated((0, 0))
    warped = forward_warp_flow(_uniform_flow(1, 0), 0.5, image, image)
    assert not np.isnan(warped).any()
    # x + 0.6 has a single pixel within 0.5 px, x + 1: column 0 stays a hole.
    warped = forward_warp_flow(_uniform_flow(1.2, 0), 0.5, image, image)
    assert np.isnan(warped[:, 0]).all() and not np.isnan(warped[:, 1:]).any()
    np.testing.assert_array_equal(warped[:, 1:, 0], 1.2)


def _object_scene(rng: np.random.Generator, speed: int = 8):
    background = _texture(rng, (H, W))
    patch = _texture(rng, (16, 16)) * 0.5 + 127

    def frame(left: int) -> np.ndarray:
        image = background.copy()
        image[16:32, left:left + 16] = patch
        return image

    flow = np.zeros((H, W, 2))
    flow[16:32, 20:36, 0] = speed
    return frame(20), frame(20 + speed // 2), frame(20 + speed), flow


def test_object_over_static_background_gets_the_right_occlusion_masks():
    image0, middle, image1, flow = _object_scene(np.random.default_rng(1))
    result = interpolate_frame(image0, image1, flow)
    covered = np.zeros((H, W), dtype=bool)
    covered[16:32, 36:44] = True  # background of I0 the object covers in I1
    uncovered = np.zeros((H, W), dtype=bool)
    uncovered[16:32, 20:28] = True  # background of I1 the object covered in I0
    np.testing.assert_array_equal(result.occluded0, covered)
    np.testing.assert_array_equal(result.occluded1, uncovered)
    np.testing.assert_array_equal(occlusion_masks(flow, image0, image1), (covered, uncovered))

    # Photoconsistency: where the object at t overlaps background that stays
    # put, the object's flow wins the collision.
    assert (result.flow_t[16:32, 28:40, 0] == 8).all()
    # The only holes at t are the disoccluded strip left of the object.
    hole_rows, hole_cols = np.nonzero(result.holes)
    assert set(hole_cols) == {20, 21, 22, 23} and set(hole_rows) == set(range(16, 32))

    error = np.abs(result.frame - middle).max(axis=-1)
    bad = error > 1.0
    assert bad.mean() < 0.02
    assert not bad[:, :20].any() and not bad[:, 24:].any()  # errors only in that strip
    # Background being covered is taken from I0 only, the uncovered one from I1 only.
    assert (result.source[16:32, 40:44] == FROM_I0).all()
    assert (result.source[16:32, 20:22] == FROM_I1).all()
    assert (result.source[:12] == BLENDED).all()


def test_literal_reading_of_the_paper_samples_the_hidden_side():
    image0, middle, image1, flow = _object_scene(np.random.default_rng(1))
    literal = interpolate_frame(image0, image1, flow, occlusion_rule="literal")
    error = np.abs(literal.frame - middle).max(axis=-1)
    # The covered background strip at t shows the object again: the reason the
    # default rule samples the image that does show the point.
    assert (error[16:32, 40:44] > 1.0).mean() > 0.9
    assert (literal.source[16:32, 40:44] == FROM_I1).all()


@pytest.mark.parametrize("t", [0.5, 0.3])
def test_zero_flow_blends_the_two_frames(t):
    rng = np.random.default_rng(2)
    image0 = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
    image1 = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
    result = interpolate_frame(image0, image1, np.zeros((H, W, 2)), t)
    # Every vector lands on itself: no holes, no occlusions, eq. (21) everywhere.
    assert not result.holes.any() and not result.occluded0.any() and not result.occluded1.any()
    assert (result.source == BLENDED).all()
    expected = np.rint((1 - t) * image0.astype(float) + t * image1.astype(float))
    assert result.frame.dtype == np.uint8
    np.testing.assert_array_equal(result.frame, expected)


def test_grayscale_and_float_frames_keep_their_type():
    image = _translated((0, 0))[..., 0].astype(np.float32)
    result = interpolate_frame(image, image, np.zeros((H, W, 2)))
    assert result.frame.shape == (H, W) and result.frame.dtype == np.float32
    np.testing.assert_allclose(result.frame, image, atol=1e-4)


def test_fill_holes_outside_in_fills_from_the_rim_inwards():
    flow = np.zeros((9, 9, 2))
    flow[:, 5:] = 4.0
    flow[2:7, 2:7] = np.nan  # a 5x5 hole straddling a motion boundary
    filled = fill_holes_outside_in(flow)
    assert np.isfinite(filled).all()
    known = ~np.isnan(flow[..., 0])
    np.testing.assert_array_equal(filled[known], flow[known])
    # Rim pixels copy their known neighbours' mean; the centre, filled last,
    # lies between the two sides.
    assert filled[2, 2, 0] == 0.0 and filled[2, 6, 0] == 4.0
    assert 0.0 < filled[4, 4, 0] < 4.0
    assert (fill_holes_outside_in(np.full((3, 3, 2), np.nan)) == 0).all()


def test_bad_inputs_raise_value_errors():
    image = np.zeros((H, W, 3), dtype=np.uint8)
    flow = np.zeros((H, W, 2))
    with pytest.raises(ValueError, match="t must be in"):
        interpolate_frame(image, image, flow, t=1.0)
    with pytest.raises(ValueError, match="same shape"):
        interpolate_frame(image, image[:-1], flow)
    with pytest.raises(ValueError, match="flow: expected shape"):
        interpolate_frame(image, image, flow[:, :-1])
    with pytest.raises(ValueError, match="splat_radius"):
        interpolate_frame(image, image, flow, splat_radius=0.2)
    with pytest.raises(ValueError, match="occlusion_rule"):
        interpolate_frame(image, image, flow, occlusion_rule="other")
