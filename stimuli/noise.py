"""Brownian (1/f²) noise: the texture of the motion-matching stimulus.

HuPerFlow (seed 003) matches perceived motion with a patch of grey 1/f² noise
moving behind a circular aperture. The texture is a 2048 x 2048 grey image
(mean about 134, SD about 24 of 255) whose power spectrum falls as ``1/f²``
(amplitude ``1/f``, spectral slope −2 in log-log), and it tiles seamlessly.

:func:`brownian_noise` synthesises it in the Fourier domain: white complex
noise is shaped by the amplitude ``1/f`` on the periodic frequency grid and
transformed back. The inverse FFT of any spectrum is periodic over the grid,
so the image wraps around without a seam by construction. :func:`spectral_slope`
measures the slope back from an image (the test of the property above).
"""
from __future__ import annotations

import numpy as np

#: Grey level statistics of HuPerFlow's texture (of 0..255).
DEFAULT_MEAN, DEFAULT_SD = 134.0, 24.0
MIN_SIZE, MAX_SIZE = 16, 8192


def _frequency_radius(size: int) -> np.ndarray:
    """Radial frequency (cycles per image) of the ``rfft2`` grid of a ``size x size`` image."""
    fy = np.fft.fftfreq(size) * size
    fx = np.fft.rfftfreq(size) * size
    return np.hypot(fy[:, None], fx[None, :])


def _check_size(size: int) -> int:
    if isinstance(size, bool) or int(size) != size or not MIN_SIZE <= size <= MAX_SIZE or int(size) % 2:
        raise ValueError(f"size: need an even integer in {MIN_SIZE}..{MAX_SIZE}, got {size!r}")
    return int(size)


def brownian_noise(size: int = 2048, *, rng: np.random.Generator | int = 0, mean: float = DEFAULT_MEAN,
                   sd: float = DEFAULT_SD) -> np.ndarray:
    """A seamless grey 1/f² noise texture.

    Parameters
    ----------
    size : int
        Side of the square image in pixels (even, 16..8192; default 2048).
    rng : numpy.random.Generator or int
        Random source, or a seed for :func:`numpy.random.default_rng`.
    mean, sd : float
        Grey level mean and standard deviation of the result (0..255 scale).
        Values beyond 0..255 are clipped; at the defaults (134 ± 24) fewer
        than one pixel in a thousand is.

    Returns
    -------
    numpy.ndarray
        ``(size, size)`` uint8 image; it is periodic (tiles without a seam).

    Raises
    ------
    ValueError
        Bad ``size``, or ``sd`` not positive, or ``mean`` outside 0..255.
    """
    size = _check_size(size)
    if not 0 <= mean <= 255:
        raise ValueError(f"mean: need a grey level in 0..255, got {mean}")
    if not 0 < sd <= 128:
        raise ValueError(f"sd: need a positive grey level SD up to 128, got {sd}")
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    radius = _frequency_radius(size)
    amplitude = np.zeros_like(radius)
    np.divide(1.0, radius, out=amplitude, where=radius > 0)  # DC stays 0: the mean is set below
    spectrum = amplitude * (rng.standard_normal(radius.shape) + 1j * rng.standard_normal(radius.shape))
    # irfft2 keeps the real part of the Hermitian-symmetric completion, so any
    # complex input gives a real, periodic image.
    field = np.fft.irfft2(spectrum, s=(size, size))
    field *= sd / field.std()
    field += mean - field.mean()
    return np.clip(np.rint(field), 0, 255).astype(np.uint8)


def radial_power_spectrum(image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Radially averaged power spectrum of a square image.

    Returns
    -------
    (frequencies, power) : tuple of numpy.ndarray
        Integer frequency bins 1..size/2 (cycles per image) and the mean power
        of the Fourier coefficients whose radius rounds to each bin (mean
        removed first).
    """
    image = np.asarray(image, dtype=np.float64)
    if image.ndim != 2 or image.shape[0] != image.shape[1] or image.shape[0] < MIN_SIZE:
        raise ValueError(f"image: need a square grey image of side >= {MIN_SIZE}, got shape {image.shape}")
    size = image.shape[0]
    power = np.abs(np.fft.rfft2(image - image.mean())) ** 2
    bins = np.rint(_frequency_radius(size)).astype(np.int64).ravel()
    totals = np.bincount(bins, weights=power.ravel())
    counts = np.bincount(bins)
    frequencies = np.arange(1, size // 2 + 1)
    return frequencies, totals[frequencies] / counts[frequencies]


def spectral_slope(image: np.ndarray, band: tuple[float, float] = (0.02, 0.25)) -> float:
    """Log-log slope of the radially averaged power spectrum (≈ −2 for 1/f² noise).

    Parameters
    ----------
    image : numpy.ndarray
        Square grey image.
    band : (float, float)
        Frequency band of the fit as fractions of the image size (cycles per
        pixel; default 0.02..0.25): the mid frequencies, away from the few,
        noisy lowest bins and from the rounding/aliasing at the Nyquist end.

    Returns
    -------
    float
        Least-squares slope of ``log(power)`` against ``log(frequency)``.
    """
    frequencies, power = radial_power_spectrum(image)
    size = np.asarray(image).shape[0]
    keep = (frequencies >= band[0] * size) & (frequencies <= band[1] * size) & (power > 0)
    if keep.sum() < 3:
        raise ValueError(f"band {band}: fewer than 3 frequency bins for an image of side {size}")
    slope, _ = np.polyfit(np.log(frequencies[keep]), np.log(power[keep]), 1)
    return float(slope)
