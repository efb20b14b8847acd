"""Artefact amplification (Algorithm 1 of StudyMB 2.0)."""
from __future__ import annotations

import numpy as np
import pytest

from stimuli.amplify import _amplify_generic, amplify, amplify_with_alpha, pixel_alpha
from stimuli.io import StimulusInputError


def _round_half_away(x):
    return np.copysign(np.floor(np.abs(x) + 0.5), x)


def _random_pair(rng, dtype, shape=(40, 50, 3), spread=None):
    top = np.iinfo(dtype).max
    reference = rng.integers(0, top + 1, shape, dtype=np.int64)
    if spread is None:
        candidate = rng.integers(0, top + 1, shape, dtype=np.int64)
    else:
        candidate = np.clip(reference + rng.integers(-spread, spread + 1, shape), 0, top)
    # make sure the extremes occur
    reference[0, 0], candidate[0, 0] = [0, top, 5], [top, 0, 5]
    return reference.astype(dtype), candidate.astype(dtype)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
@pytest.mark.parametrize("alpha", [1.5, 2.0, 3.7])
def test_output_in_range_and_follows_the_formula(dtype, alpha):
    rng = np.random.default_rng(1)
    reference, candidate = _random_pair(rng, dtype)
    out, alpha_map = amplify_with_alpha(reference, candidate, alpha)
    assert out.dtype == dtype and out.shape == reference.shape
    top = np.iinfo(dtype).max
    v, d = reference.astype(np.float64), candidate.astype(np.float64) - reference
    real = v + alpha_map[:, :, None] * d          # the unrounded transform: never outside the range
    assert real.min() >= -1e-9 and real.max() <= top + 1e-9
    np.testing.assert_array_equal(out, v + _round_half_away(alpha_map[:, :, None] * d))
    assert alpha_map.min() >= 1.0 and alpha_map.max() == alpha
    # wherever v + alpha * d stays in range, alpha is used unchanged
    in_range = ((v + alpha * d >= 0) & (v + alpha * d <= top)).all(axis=2)
    assert in_range.any() and (~in_range).any()
    assert np.all(alpha_map[in_range] == alpha)
    assert np.all(alpha_map[~in_range] < alpha)
    # where alpha was lowered, it is the *largest* factor: one channel sits exactly on a limit
    lowered = out[~in_range].astype(np.int64)
    assert np.all(((lowered == 0) | (lowered == top)).any(axis=1))


def test_integer_alpha_is_exact_where_no_clamping_is_needed():
    rng = np.random.default_rng(2)
    reference, candidate = _random_pair(rng, np.uint8, spread=30)
    out, alpha_map = amplify_with_alpha(reference, candidate, 2.0)
    expected = reference.astype(np.int64) + 2 * (candidate.astype(np.int64) - reference)
    free = alpha_map == 2.0
    np.testing.assert_array_equal(out[free], expected[free])
    assert free.mean() > 0.5


def test_rounding_is_symmetric_around_the_reference():
    reference = np.full((1, 2, 3), 100, np.uint8)
    candidate = np.array([[[101, 99, 100], [103, 97, 100]]], np.uint8)
    out = amplify(reference, candidate, 1.5)
    # 1.5 -> 2 and -1.5 -> -2; 4.5 -> 5 and -4.5 -> -5
    np.testing.assert_array_equal(out, [[[102, 98, 100], [105, 95, 100]]])


def test_lowered_alpha_keeps_the_colour_direction_exactly():
    reference = np.array([[[251, 100, 100]]], np.uint8)
    candidate = np.array([[[253, 96, 100]]], np.uint8)
    out, alpha_map = amplify_with_alpha(reference, candidate, 3.0)
    # red may grow by 4 for an error of 2, so a = 2 for all channels: (255, 92, 100), not clamped (255, 88, 100)
    assert alpha_map[0, 0] == 2.0
    np.testing.assert_array_equal(out[0, 0], [255, 92, 100])


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_output_difference_is_parallel_to_input_difference(dtype):
    rng = np.random.default_rng(3)
    reference, candidate = _random_pair(rng, dtype)
    out, alpha_map = amplify_with_alpha(reference, candidate, 2.5)
    d = candidate.astype(np.float64) - reference
    e = out.astype(np.float64) - reference
    # the output difference is a * d up to rounding (|error| <= 0.5 per channel) ...
    assert np.abs(e - alpha_map[:, :, None] * d).max() <= 0.5
    # ... so the angle between them is small wherever the error is not tiny; clamping would break this
    norm_d, norm_e = np.linalg.norm(d, axis=2), np.linalg.norm(e, axis=2)
    big = norm_d > 20 * (np.iinfo(dtype).max / 255)
    cosine = (d * e).sum(axis=2)[big] / (norm_d[big] * norm_e[big])
    assert cosine.min() > 0.99
    clamped = np.clip(reference + 2.5 * d, 0, np.iinfo(dtype).max) - reference
    clamped_cos = (d * clamped).sum(axis=2)[big] / (norm_d[big] * np.linalg.norm(clamped, axis=2)[big])
    assert clamped_cos.min() < 0.98  # the test data would expose a clamping implementation


@pytest.mark.parametrize("alpha", [1.01, 1.5, 1.7, 2.0, 4.0])
def test_uint8_lookup_path_matches_float_path(alpha):
    rng = np.random.default_rng(4)
    reference, candidate = _random_pair(rng, np.uint8, shape=(64, 64, 3))
    fast, fast_map = amplify_with_alpha(reference, candidate, alpha)
    slow, slow_map = _amplify_generic(reference, candidate, alpha)
    np.testing.assert_array_equal(fast, slow)
    np.testing.assert_allclose(fast_map, slow_map, rtol=0, atol=1e-12)
    np.testing.assert_allclose(pixel_alpha(reference, candidate, alpha), slow_map, rtol=0, atol=1e-12)


def test_identical_images_are_unchanged():
    rng = np.random.default_rng(5)
    reference = rng.integers(0, 256, (8, 9, 3), dtype=np.uint8)
    np.testing.assert_array_equal(amplify(reference, reference.copy()), reference)


@pytest.mark.parametrize("alpha", [1.0, 0.5, -2.0, float("nan")])
def test_alpha_not_above_one_is_an_error(alpha):
    image = np.zeros((4, 4, 3), np.uint8)
    with pytest.raises(StimulusInputError, match="alpha"):
        amplify(image, image, alpha)


def test_mismatched_inputs_are_errors():
    a = np.zeros((4, 4, 3), np.uint8)
    with pytest.raises(StimulusInputError, match="shape"):
        amplify(a, np.zeros((4, 5, 3), np.uint8))
    with pytest.raises(StimulusInputError, match="dtype"):
        amplify(a, np.zeros((4, 4, 3), np.uint16))
    with pytest.raises(StimulusInputError, match="uint8 or uint16"):
        amplify(a.astype(np.float32), a.astype(np.float32))
    with pytest.raises(StimulusInputError, match="RGB"):
        amplify(a[:, :, 0], a[:, :, 0])
