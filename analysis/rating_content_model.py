"""The subject model with content ambiguity of Li and Bampis (Netflix's sureal: ``MaximumLikelihoodEstimationModel``,
"MLE"), the P.913 clause 12.6 model (:mod:`analysis.rating_models`) plus an ambiguity of each source content.

Worker ``s``'s rating of stimulus ``e`` is ``x_e + B_es + A_es`` with ``B_es ~ N(b_s, v_s^2)`` (the
worker's bias and inconsistency) and ``A_es ~ N(0, a_c^2)`` (the ambiguity of the stimulus' content
``c(e)``: some sources are harder to judge than others). Rating variances are ``v_s^2 + a_c^2``.

sureal maximises the likelihood by damped Newton steps on one block of parameters at a time (its
"simplified" gradient, Gaussian density), and this module repeats them step for step so that the
estimates agree with sureal 0.9.0's to rounding:

- start: ``x_e`` = the plain mean; ``b_s = 0``; ``v_s`` = the SD (``ddof=0``) of the worker's residuals
  from the means, ``a_c`` = the SD of all residuals of the content's stimuli;
- each round: ``b_s`` from its weighted mean, then ``v_s``, then ``a_c`` by one Newton step each
  (negative values set to 0), then ``x_e`` from its weighted mean; every new value is blended
  ``0.9 old + 0.1 new``; stop when the Euclidean norm of the change of ``x`` is below ``1e-8`` or after
  10,000 rounds;
- shift so that the biases average zero.

Standard errors are sureal's (the inverse square roots of the observed information of each block at
the last round); the inconsistency interval is the chi-square one of :mod:`analysis.rating_models`.
Missing ratings are absent observations (every sum runs over the ratings that exist).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import chdtri

MAX_ITERATIONS = 10000
REFRESH_RATE = 0.1
DELTA_THRESHOLD = 1e-8


@dataclass(frozen=True)
class ContentFit:
    """Estimates of the content-ambiguity model (arrays over stimuli, workers and contents)."""

    quality: np.ndarray
    quality_se: np.ndarray
    bias: np.ndarray
    bias_se: np.ndarray
    inconsistency: np.ndarray
    inconsistency_se: np.ndarray
    inconsistency_low: np.ndarray
    inconsistency_high: np.ndarray
    ambiguity: np.ndarray           # (C,) a_c, an SD in rating units
    ambiguity_se: np.ndarray
    iterations: int
    converged: bool


def _by(index, values, size):
    return np.bincount(index, values, size)


def fit_content_model(stimulus: np.ndarray, worker: np.ndarray, content_of_stimulus: np.ndarray,
                      rating: np.ndarray, n_stimuli: int | None = None, n_workers: int | None = None, *,
                      max_iterations: int = MAX_ITERATIONS, threshold: float = DELTA_THRESHOLD) -> ContentFit:
    """Fit the content-ambiguity model as sureal does (module docstring).

    Parameters
    ----------
    stimulus, worker : (n,) int arrays
        Stimulus and worker index of every rating; every stimulus and worker needs a rating.
    content_of_stimulus : (J,) int array
        The content (source) index ``0..C-1`` of each stimulus; every content needs a stimulus.
    rating : (n,) float array
    max_iterations, threshold : optional
        sureal's stopping rule.

    Raises
    ------
    ValueError
        No ratings, or a stimulus, worker or content without any.
    """
    e = np.asarray(stimulus, dtype=np.int64)
    s = np.asarray(worker, dtype=np.int64)
    x = np.asarray(rating, dtype=float)
    if x.size == 0:
        raise ValueError("the content model needs ratings; there are none")
    E = int(e.max()) + 1 if n_stimuli is None else n_stimuli
    S = int(s.max()) + 1 if n_workers is None else n_workers
    content = np.asarray(content_of_stimulus, dtype=np.int64)
    C = int(content.max()) + 1
    n_e, n_s = np.bincount(e, minlength=E), np.bincount(s, minlength=S).astype(float)
    if not (n_e > 0).all() or not (n_s > 0).all() or not (np.bincount(content, minlength=C) > 0).all():
        raise ValueError("every stimulus, worker and content of the content model needs at least one rating")
    c = content[e]

    def sd(index, values, size):
        count = np.bincount(index, minlength=size)
        mean = _by(index, values, size) / count
        return np.sqrt(_by(index, (values - mean[index]) ** 2, size) / count)

    mos = _by(e, x, E) / n_e
    residual = x - mos[e]
    x_e, b_s = mos, np.zeros(S)
    v_s, a_c = sd(s, residual, S), sd(c, residual, C)
    iterations, converged = 0, False
    with np.errstate(divide="ignore", invalid="ignore"):
        while True:
            previous = x_e
            # b_s
            add = v_s[s] ** 2 + a_c[c] ** 2
            den = _by(s, 1.0 / add, S)
            b_s = (1 - REFRESH_RATE) * b_s + REFRESH_RATE * _by(s, (x - x_e[e]) / add, S) / den
            b_se = 1.0 / np.sqrt(np.maximum(0.0, den))
            # v_s
            r = x - x_e[e] - b_s[s]
            v, a = v_s[s], a_c[c]
            add, minus = v * v + a * a, v * v - a * a
            num = _by(s, -v / add + v * r * r / add ** 2, S)
            den = _by(s, minus / add ** 2 + r * r * (a ** 4 - 3 * v ** 4 - 2 * v * v * a * a) / add ** 4, S)
            v_s = (1 - REFRESH_RATE) * v_s + REFRESH_RATE * (v_s - num / den)
            v_se = 1.0 / np.sqrt(np.maximum(0.0, -den))
            v_s = np.maximum(v_s, 0.0)
            # a_c
            v, a = v_s[s], a_c[c]
            add, minus = v * v + a * a, v * v - a * a
            num = _by(c, -a / add + a * r * r / add ** 2, C)
            den = _by(c, -minus / add ** 2 + r * r * (v ** 4 - 3 * a ** 4 - 2 * v * v * a * a) / add ** 4, C)
            a_c = (1 - REFRESH_RATE) * a_c + REFRESH_RATE * (a_c - num / den)
            a_se = 1.0 / np.sqrt(np.maximum(0.0, -den))
            a_c = np.maximum(a_c, 0.0)
            # x_e
            add = v_s[s] ** 2 + a_c[c] ** 2
            den = _by(e, 1.0 / add, E)
            x_e = (1 - REFRESH_RATE) * x_e + REFRESH_RATE * _by(e, (x - b_s[s]) / add, E) / den
            x_se = 1.0 / np.sqrt(np.maximum(0.0, den))
            iterations += 1
            if np.linalg.norm(previous - x_e) < threshold:
                converged = True
                break
            if iterations >= max_iterations:
                break
        low = v_s * np.sqrt(n_s / chdtri(n_s, 0.025))
        high = v_s * np.sqrt(n_s / chdtri(n_s, 0.975))
    shift = float(np.mean(b_s))
    return ContentFit(quality=x_e + shift, quality_se=x_se, bias=b_s - shift, bias_se=b_se, inconsistency=v_s,
                      inconsistency_se=v_se, inconsistency_low=low, inconsistency_high=high, ambiguity=a_c,
                      ambiguity_se=a_se, iterations=iterations, converged=converged)
