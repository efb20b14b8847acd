"""Gold stimuli: a strongly degraded copy of the reference whose inferiority is obvious.

A gold trial shows the reference against this degraded copy; the reference is
the correct answer. Workers who fail such trials are not paying attention
(StudyMB 1.0: quiz made of test questions, and hidden test questions with a
70 % accuracy threshold).
"""
from __future__ import annotations

import numpy as np
from scipy.ndimage import gaussian_filter

DEFAULT_BLUR_SIGMA = 4.0   # pixels: wipes out texture and edges at any usual viewing size
DEFAULT_NOISE_SD = 0.08    # of the full range: clearly visible grain


def degrade_for_gold(reference: np.ndarray, blur_sigma: float = DEFAULT_BLUR_SIGMA,
                     noise_sd: float = DEFAULT_NOISE_SD, seed: int | np.random.Generator | None = 0) -> np.ndarray:
    """Blur the reference strongly and add Gaussian noise (seeded), in the input's dtype.

    Parameters
    ----------
    reference : (H, W, 3) uint8 or uint16 array
    blur_sigma : float
        Gaussian blur in pixels (spatial axes only).
    noise_sd : float
        Noise SD as a fraction of the dtype's full range.
    seed : int, Generator or None
    """
    if blur_sigma <= 0 and noise_sd <= 0:
        raise ValueError("a gold degradation needs blur_sigma > 0 or noise_sd > 0")
    top = float(np.iinfo(reference.dtype).max)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    sigma = (blur_sigma, blur_sigma) + (0,) * (reference.ndim - 2)
    blurred = gaussian_filter(reference.astype(np.float64), sigma=sigma, mode="reflect")
    noisy = blurred + rng.normal(0.0, noise_sd * top, reference.shape)
    # Clipping is fine here: the degraded copy only has to be clearly worse, not colour-faithful.
    return np.clip(np.rint(noisy), 0, top).astype(reference.dtype)
