"""Random-dot kinematogram parameters and reference dots (stimuli.rdk)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from stimuli.rdk import (
    decode_dot_movie,
    encode_dot_movie,
    rdk_dot_movie,
    rdk_dot_positions,
    rdk_trial_params,
    rdk_vector,
)


def test_vector_uses_y_up_directions_and_v_down():
    assert rdk_vector(0, 5) == pytest.approx((5, 0))
    assert rdk_vector(90, 5) == pytest.approx((0, -5))  # up on screen = negative v
    assert rdk_vector(180, 2) == pytest.approx((-2, 0))
    assert rdk_vector(225, math.sqrt(2)) == pytest.approx((-1, 1))


def test_trial_params_are_uniform_and_seeded():
    params = rdk_trial_params(4000, np.random.default_rng(0))
    directions = np.array([p["direction_deg"] for p in params])
    speeds = np.array([p["speed_ppf"] for p in params])
    assert directions.min() >= 0 and directions.max() < 360
    assert speeds.min() >= 1 and speeds.max() <= 20
    # Uniform: every quarter of each range gets about a quarter of the trials.
    assert np.histogram(directions, bins=4, range=(0, 360))[0] == pytest.approx([1000] * 4, abs=120)
    assert np.histogram(speeds, bins=4, range=(1, 20))[0] == pytest.approx([1000] * 4, abs=120)
    assert len({p["seed"] for p in params}) > 3990
    assert rdk_trial_params(5, 7) == rdk_trial_params(5, np.random.default_rng(7))
    assert rdk_trial_params(5, 7) != rdk_trial_params(5, 8)
    narrow = rdk_trial_params(50, 1, speed_min=3, speed_max=4)
    assert all(3 <= p["speed_ppf"] <= 4 for p in narrow)
    assert rdk_trial_params(0, 1) == []


@pytest.mark.parametrize("kwargs", [{"n": -1}, {"n": 2.5}, {"n": 3, "speed_min": 5, "speed_max": 2}])
def test_trial_params_reject_bad_input(kwargs):
    n = kwargs.pop("n")
    with pytest.raises(ValueError):
        rdk_trial_params(n, 0, **kwargs)


def test_dots_move_coherently_and_stay_in_the_aperture():
    direction, speed, radius = 37.5, 8.0, 300.0
    positions = rdk_dot_positions(5000, 600, direction, speed, seed=4, n_frames=30)
    assert positions.shape == (30, 5000, 2)
    assert np.hypot(positions[..., 0], positions[..., 1]).max() <= radius + 1e-9
    steps = np.diff(positions, axis=0)
    expected = np.array(rdk_vector(direction, speed))
    coherent = np.all(np.abs(steps - expected) < 1e-9, axis=-1)
    # Most dots move by exactly (u, v) each frame; the rest re-entered on the opposite side.
    assert coherent.mean() > 0.95
    wrapped = ~coherent
    assert wrapped.any()
    before = positions[:-1][wrapped]
    after = positions[1:][wrapped]
    direction_vector = expected / speed
    # Re-entry: the dot was near the leading edge and comes back near the trailing edge.
    assert np.all(before @ direction_vector > 0) and np.all(after @ direction_vector < 0)
    # Re-entered dots stay on their motion line (same perpendicular offset).
    normal = np.array([-direction_vector[1], direction_vector[0]])
    np.testing.assert_allclose(before @ normal, after @ normal, atol=1e-9)


def test_dot_density_stays_uniform():
    positions = rdk_dot_positions(5000, 600, 200.0, 15.0, seed=1, n_frames=60)
    for frame in (0, 59):
        r = np.hypot(positions[frame, :, 0], positions[frame, :, 1])
        # Uniform in a disc: the fraction within radius R/sqrt(2) is one half.
        assert np.mean(r < 300 / math.sqrt(2)) == pytest.approx(0.5, abs=0.03)
        along = positions[frame] @ np.array(rdk_vector(200.0, 1.0))
        assert np.mean(along > 0) == pytest.approx(0.5, abs=0.03)  # no pile-up at either side


def test_dots_are_seeded_and_inputs_checked():
    np.testing.assert_array_equal(rdk_dot_positions(10, 100, 0, 3, 5, 4), rdk_dot_positions(10, 100, 0, 3, 5, 4))
    assert not np.array_equal(rdk_dot_positions(10, 100, 0, 3, 5, 4), rdk_dot_positions(10, 100, 0, 3, 6, 4))
    still = rdk_dot_positions(10, 100, 0, 0, 5, 3)
    np.testing.assert_array_equal(still[0], still[2])
    good = {"n_dots": 10, "aperture_px": 100, "direction_deg": 0, "speed_ppf": 3, "seed": 1, "n_frames": 2}
    for bad in ({"n_dots": 0}, {"n_frames": 0}, {"aperture_px": 0}):
        args = good | bad
        with pytest.raises(ValueError):
            rdk_dot_positions(**args)


def test_dot_movie_round_trip_and_bad_input():
    positions = rdk_dot_positions(300, 600, 123.0, 7.5, seed=3, n_frames=15)
    data = encode_dot_movie(positions, 600)
    assert data[:4] == b"RDK1" and len(data) == 16 + 15 * 300 * 4
    decoded, aperture = decode_dot_movie(data)
    assert aperture == 600 and decoded.shape == positions.shape
    assert np.abs(decoded - positions).max() <= 1 / 128 + 1e-12   # 1/64 px fixed point
    # Wide apertures trade resolution for range (uint16 must hold the diameter).
    wide = rdk_dot_positions(10, 4000, 0.0, 3.0, seed=1, n_frames=2)
    assert np.abs(decode_dot_movie(encode_dot_movie(wide, 4000))[0] - wide).max() <= 1 / 32 + 1e-12
    assert rdk_dot_movie(300, 600, 123.0, 7.5, 3, 15) == data
    for bad in (data[:10], data[:-2], b"XXXX" + data[4:]):
        with pytest.raises(ValueError):
            decode_dot_movie(bad)
    with pytest.raises(ValueError):
        encode_dot_movie(positions, 70_000)
    with pytest.raises(ValueError):
        encode_dot_movie(positions[0], 600)
