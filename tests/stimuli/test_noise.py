"""Brownian (1/f²) noise texture of the matching stimulus (stimuli.noise)."""
from __future__ import annotations

import numpy as np
import pytest

from stimuli.noise import brownian_noise, radial_power_spectrum, spectral_slope


@pytest.mark.parametrize("size", [512, 2048])
def test_spectral_slope_is_minus_two(size):
    image = brownian_noise(size, rng=np.random.default_rng(size))
    assert spectral_slope(image) == pytest.approx(-2.0, abs=0.15)


def test_spectral_slope_tells_other_spectra_apart():
    # White noise is flat (slope 0); its 1/f² filtering is not: the measure is not stuck at -2.
    rng = np.random.default_rng(3)
    white = rng.normal(128, 20, (512, 512))
    assert spectral_slope(white) == pytest.approx(0.0, abs=0.15)
    radius = np.hypot(np.fft.fftfreq(512)[:, None], np.fft.fftfreq(512)[None, :])
    pink = np.real(np.fft.ifft2(np.fft.fft2(white - 128) / np.maximum(radius, 1 / 512) ** 0.5))
    assert spectral_slope(pink) == pytest.approx(-1.0, abs=0.15)


def test_mean_sd_and_rare_clipping():
    image = brownian_noise(2048, rng=1)
    assert image.dtype == np.uint8 and image.shape == (2048, 2048)
    values = image.astype(np.float64)
    assert values.mean() == pytest.approx(134.0, abs=0.5)
    assert values.std() == pytest.approx(24.0, abs=0.5)
    assert np.mean((image == 0) | (image == 255)) < 1e-3
    other = brownian_noise(512, rng=2, mean=100.0, sd=10.0).astype(np.float64)
    assert other.mean() == pytest.approx(100.0, abs=0.5) and other.std() == pytest.approx(10.0, abs=0.5)


def _differences(image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    values = image.astype(np.float64)
    interior = np.concatenate([np.diff(values, axis=0).ravel(), np.diff(values, axis=1).ravel()])
    wrap = np.concatenate([values[0] - values[-1], values[:, 0] - values[:, -1]])
    return interior, wrap


def test_texture_tiles_seamlessly():
    image = brownian_noise(1024, rng=4)
    interior, wrap = _differences(image)
    # Across the wrap-around seam neighbours differ as much as anywhere else.
    assert np.abs(wrap).mean() == pytest.approx(np.abs(interior).mean(), rel=0.1)
    assert np.abs(wrap).std() == pytest.approx(np.abs(interior).std(), rel=0.15)
    # A non-periodic texture of the same statistics (a crop of a bigger one) does show a seam.
    crop = brownian_noise(2048, rng=4)[:1024, :1024]
    interior, wrap = _differences(crop)
    assert np.abs(wrap).mean() > 2 * np.abs(interior).mean()


def test_seeded_determinism():
    np.testing.assert_array_equal(brownian_noise(256, rng=7), brownian_noise(256, rng=np.random.default_rng(7)))
    assert not np.array_equal(brownian_noise(256, rng=7), brownian_noise(256, rng=8))


@pytest.mark.parametrize("size", [0, 15, 101, 2.5, True, 10_000])
def test_bad_sizes_are_rejected(size):
    with pytest.raises(ValueError, match="size"):
        brownian_noise(size)


def test_bad_statistics_are_rejected():
    with pytest.raises(ValueError, match="sd"):
        brownian_noise(64, sd=0)
    with pytest.raises(ValueError, match="mean"):
        brownian_noise(64, mean=300)


def test_radial_spectrum_rejects_non_square_images():
    with pytest.raises(ValueError, match="square"):
        radial_power_spectrum(np.zeros((64, 32)))
